"""The caching-allocator simulation against PyTorch's real allocator, and its rules one by one.

tests/fixtures/allocator/torch_results.json holds what torch 2.11 reserved on an H200 for each
sequence in sequences.json (five SGLang model loads as kvscope lists them, six random sequences of
allocations and frees); replay_on_gpu.py beside them made it. The simulation must agree to the byte.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.model.allocator import MIB, CachingAllocator, replay, round_size, segment_size
from tests.conftest import FIXTURES

HERE = FIXTURES / "allocator"
SEQUENCES = json.loads((HERE / "sequences.json").read_text())["sequences"]
REAL = json.loads((HERE / "torch_results.json").read_text())


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_replay_matches_pytorch_to_the_byte(name):
    real = REAL["results"][name]
    assert real["reserved"] == real["free_drop"]  # what SGLang reads is what the allocator holds
    assert replay([tuple(e) for e in SEQUENCES[name]]) == real["reserved"]


def test_segment_rules():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert segment_size(round_size(100)) == 2 * MIB  # small pool
    assert segment_size(round_size(3 * MIB)) == 20 * MIB  # 1–10 MiB share 20 MiB segments
    assert segment_size(round_size(29 * MIB + 1)) == 30 * MIB  # ≥ 10 MiB: own segment, 2 MiB multiple


def test_medium_tensors_share_a_segment_and_holes_stay_reserved():
    a = CachingAllocator()
    x, y = a.malloc(6 * MIB), a.malloc(6 * MIB)  # both in one 20 MiB segment
    assert a.reserved == 20 * MIB
    a.free(x)
    a.empty_cache()
    assert a.reserved == 20 * MIB  # y still lives there: the hole cannot be handed back
    a.free(y)
    a.empty_cache()
    assert a.reserved == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MIB)), max_size=60))
def test_reserved_covers_what_is_live(ops):
    """Whatever the sequence: reserved ≥ allocated ≥ the live requests, and freeing all returns all."""
    a = CachingAllocator()
    live = []
    for free, n in ops:
        if free and live:
            a.free(live.pop(0)[0])
        else:
            live.append((a.malloc(n), n))
    a.empty_cache()
    assert a.reserved >= a.allocated >= sum(n for _, n in live)
    for block, _ in live:
        a.free(block)
    a.empty_cache()
    assert a.reserved == 0
