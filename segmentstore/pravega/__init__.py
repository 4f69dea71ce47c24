"""Pravega's own protocols, a second front door onto the same store (docs/design.md §2).

Modules: ``errors`` (the package's errors), ``wire`` (framing, field encodings, the
command registry), ``wire_requests`` and ``wire_replies`` (every command of the 0.3.7
client).
"""
