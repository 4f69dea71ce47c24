"""Durability: the data directory, the write-ahead operation log and its codec, snapshots, segment files."""
