"""The store's core: container, segments, operation processor, read and watermark indexes, advancer, eviction.

Nothing here knows files, sockets or streams: durability (``segmentstore.durable``)
plugs in through the container's state API, the controller and the network sit above.
"""
