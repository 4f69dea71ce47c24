"""Streams over the segment store (Pravega's controller): scaling, successors, cuts, transactions, scopes.

Modules: ``controller`` (the assembled ``StreamController``: queries, replay, recovery),
``model`` (the replayed state machine, scale planning, records), ``scaling`` (create,
scale, seal, delete), ``transactions``, ``admin`` (scopes, configs, truncation, epochs),
``stream_config`` (policies and tags).
"""
