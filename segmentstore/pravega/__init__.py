"""Pravega's own protocols, a second front door onto the same store (docs/design.md §2).

``ingestwm serve --pravega-port 9090`` (``SegmentStoreServer(pravega_port=...)``) serves,
beside ingestwm's own protocol and over the same store, Pravega's controller (gRPC) and
Pravega's segment store (its wire protocol), for Pravega's own clients (``pravega`` on
PyPI, pravega-client-rust 0.3.7).

Modules: ``endpoints`` (both endpoints of one store, started and stopped together),
``serving`` (the endpoints beside ingestwm's own server),
``grpc_controller`` (the ``ControllerService`` servicer and its gRPC server),
``grpc_proto`` (``controller.proto``, the proto subset served, compiled at run time),
``wire_server`` (the segment-store endpoint: connections, limits), ``wire_handlers``
(what each wire command does), ``wire_conditional`` (conditional appends, transient
segments, merges), ``transactions`` (Pravega's transactions: ids, leases, states, durable) and
``grpc_transactions`` (their RPCs), ``tables`` (table segments in the store, where reader
groups keep their state), ``table_segment`` (one table: versions, deltas, iteration),
``table_log`` (its records) and ``wire_tables`` (the table commands), ``wire`` (framing,
field encodings, the command registry), ``wire_requests`` and ``wire_replies`` (every
command of the 0.3.7 client),
``translate`` (Pravega's ids and names onto ingestwm's streams; framing checks),
``auth`` (credentials and delegation tokens), ``errors`` (the package's errors).
"""
