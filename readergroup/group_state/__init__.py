"""readergroup.group_state: a reader group's shared state (it imports only ``format``).

The state log every process of a group replicates, and what it records.

- ``state``: ``ReaderGroupState``, a process's replica and the updates it issues.
- ``synchronizer``: ``StateSynchronizer``, a replica kept as a log of update batches in one segment.
- ``group_updates``: the update records, their batches and their byte format.
- ``update_plans``: what an update needs from the store, found against the replica, and the
  batches a reader's sync and close and a reset append.
- ``group_model``: one replica's segments, readers and checkpoints, changed only by updates.
- ``group_model_checks``: the replica's invariants (``GroupModel._check``, a mixin of it).
- ``watermark_floor``: ``WatermarkFloor``, the least segment watermark (the group watermark).
- ``least_load``: ``LeastLoad``, the fewest segments a reader holds (for rebalancing).
- ``group_snapshots``: a replica as a snapshot (canonical JSON-ready values) and back.
- ``state_records``: the records of that model (a segment, a reader, a checkpoint in progress).
- ``initiated_checkpoints``: the futures of the checkpoints a process initiated.
- ``checkpoint``: checkpoints and positions (offsets and watermarks), as JSON.
- ``liveness``: reader heartbeats and the leases judged from them.
- ``event_time``: the group's ``EVENT_TIME`` watermark from producer assertions.
"""
