"""``WatermarkFloor``: the group model's least watermark, against a sorted list on random moves."""

from __future__ import annotations

import random

import pytest
from sortedcontainers import SortedList

from readergroup.group_state.watermark_floor import WatermarkFloor


def test_least_follows_a_sorted_list_through_moves_drops_and_adds() -> None:
    rng = random.Random(7)
    live = {f"s{i}": rng.randrange(100) for i in range(50)}
    ref = SortedList((w, n) for n, w in live.items())
    floor = WatermarkFloor((w, n) for n, w in live.items())
    for step in range(5_000):
        name = rng.choice(sorted(live))
        op = rng.random()
        if op < 0.8:  # a report moves the watermark up (or leaves it; the floor allows moves down too)
            new = live[name] + rng.randrange(-1, 3)
            ref.remove((live[name], name))
            ref.add((new, name))
            if op < 0.4:
                floor.remove((live[name], name))
                floor.add((new, name))
            else:
                floor.move(name, live[name], new)
            live[name] = new
        elif op < 0.9 and len(live) > 1:  # a completion drops the segment
            wm = live.pop(name)
            for s in (ref, floor):
                s.remove((wm, name))
        else:  # a successor registers
            new_name = f"t{step}"
            live[new_name] = rng.randrange(200)
            for s in (ref, floor):
                s.add((live[new_name], new_name))
        assert floor.least() == ref[0][0]
        assert len(floor) == len(ref)
        floor._check()
    assert list(floor) == list(ref)
    floor._check()


def test_bad_removes_and_adds_raise_and_change_nothing() -> None:
    floor = WatermarkFloor([(5, "a"), (3, "b")])
    with pytest.raises(ValueError, match="not in the floor"):
        floor.remove((4, "a"))  # the segment is there at another watermark
    with pytest.raises(ValueError, match="already"):
        floor.add((1, "b"))
    with pytest.raises(ValueError, match="not in the floor"):
        floor.move("a", 4, 9)
    with pytest.raises(ValueError, match="not in the floor"):
        floor.move("c", 4, 9)
    assert floor.least() == 3 and list(floor) == [(3, "b"), (5, "a")]
    floor.remove((3, "b"))
    floor.remove((5, "a"))
    assert not floor
    with pytest.raises(IndexError, match="empty"):
        floor.least()
    floor._check()
