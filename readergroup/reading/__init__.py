"""readergroup.reading: reading a stream as a group (it may import ``format`` and ``group_state``).

- ``group``: ``ReaderGroup`` and ``ReaderGroupManager`` — readers, checkpoints, resets.
- ``reader``: ``EventReader``, reading the segments its group assigns it.
- ``reader_membership``: the reader in its group — syncs, the segments it holds, its lease.
- ``reader_blocks``: the reader's block reads — one ``read_many`` for all, looks at the tails.
- ``segment_input``: one segment as a reader consumes it, block by block.
- ``block_merge``: a batch merged from the blocks of several segments in one kernel call.
- ``_batch_kernels``: the numba kernel merging blocks of several segments into a batch, loaded
  once the frame kernels are.
- ``read_results``: what a read returns (``EventRead``, ``EventBatch``, ``ReadKind``).
- ``frontier``: the segment frontier's rules and its watermark.
- ``metrics``: group watermark, lag and per-segment metrics.
"""
