"""Streams over the segment store (Pravega's controller): scaling, successors, cuts, transactions."""
