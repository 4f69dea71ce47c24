"""readergroup.format: what writers put in a stream and readers take out of it.

The byte and value formats both sides share; nothing here writes, reads or keeps group
state, and nothing here imports ``writing``, ``group_state`` or ``reading``.

- ``events``: the event frame (events, watermark and idle markers) and its codec.
- ``frame_batch``: frames in bulk, as Arrow-ready event columns and back.
- ``_frame_kernels``: the numba kernels behind the bulk codec, loaded on first use.
- ``pravega_frames``: Pravega's event frame (type, length, payload), as readers decode a stream a
  Pravega client wrote: no routing key, no event time.
- ``_pravega_kernels``: the numba kernels behind it, loaded on first use.
- ``routing``: the routing-key hash and the table of current key ranges.
- ``keyed_framing``: a writer's framing of one event at a time, each key's bytes and hash kept.
- ``producer_watermarks``: producer-asserted watermark markers and the per-writer tracker.
"""
