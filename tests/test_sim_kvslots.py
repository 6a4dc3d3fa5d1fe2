"""KV slot pool (paper Section III-B, docs/DESIGN.md §4): FIFO by allocation, release timing."""

from __future__ import annotations

import pytest

from rearrival.model.cost.profile import measured_profile
from rearrival.model.simulator.rbln.slots import NO_OWNER, SlotPool

REUSE = measured_profile().reusable_tokens


def test_free_slots_first_then_fifo_by_allocation_order():
    pool = SlotPool(2, "immediate")
    assert pool.admit(0, 10, 1000, REUSE)[:2] == (0, NO_OWNER)
    assert pool.admit(1, 20, 1000, REUSE)[:2] == (1, NO_OWNER)
    assert not pool.can_secure()
    pool.finish(1)  # the younger slot finishes first
    pool.finish(0)
    slot, evicted, cached, _ = pool.admit(2, 30, 1000, REUSE)[:4]
    assert (slot, evicted, cached) == (0, 10, 0)  # oldest allocation goes, not first finished


def test_reuse_hit_does_not_refresh_eviction_order():
    pool = SlotPool(3, "immediate")
    pool.admit(0, 0, 1000, REUSE)
    pool.finish(0)
    pool.admit(1, 2, 1000, REUSE)
    pool.finish(1)
    slot, _, cached, source = pool.admit(0, 1, 1011, REUSE)[:4]  # session 0 re-arrives
    assert (slot, cached, source) == (2, 896, 0)
    assert pool.survivors(0) == (0, 2)  # the source keeps its KV after the hit
    pool.finish(2)
    # slot 0 was read last but allocated first: it is still the first victim
    assert pool.admit(5, 50, 100, REUSE)[:2] == (0, 0)


def test_deferred_release_waits_for_the_next_admission():
    pool = SlotPool(2, "deferred")
    pool.admit(0, 0, 1000, REUSE)
    pool.admit(1, 2, 1000, REUSE)
    pool.finish(0)
    assert not pool.can_secure()
    pool.release_deferred()
    assert pool.can_secure()
    pool.finish(1)
    slot, evicted, _, _ = pool.admit(2, 4, 1000, REUSE)[:4]
    assert (slot, evicted) == (0, 0)
    # the admission's victim was chosen with slot 1 still protected; now it is evictable
    assert pool.can_secure()


def test_admission_secures_before_look_up_so_it_can_evict_its_own_prefix():
    pool = SlotPool(1, "immediate")
    pool.admit(7, 14, 1000, REUSE)
    pool.finish(0)
    slot, evicted, cached, source = pool.admit(7, 15, 1011, REUSE)[:4]
    assert (slot, evicted, cached, source) == (0, 14, 0, NO_OWNER)


def test_largest_prefix_among_the_sessions_surviving_slots():
    pool = SlotPool(4, "immediate")
    pool.admit(3, 0, 300, REUSE)
    pool.admit(3, 1, 1000, REUSE)
    pool.finish(0)
    pool.finish(1)
    _, _, cached, source = pool.admit(3, 2, 2000, REUSE)[:4]
    assert (cached, source) == (896, 1)


def test_pre_evict_only_when_no_slot_is_free():
    pool = SlotPool(2, "immediate")
    pool.admit(0, 0, 1000, REUSE)
    assert pool.pre_evict() is None  # slot 1 is free
    pool.admit(1, 2, 1000, REUSE)
    assert pool.pre_evict() is None  # nothing evictable
    pool.finish(0)
    assert pool.pre_evict() == (0, 0)
    assert pool.survivors(0) == ()
    assert pool.pre_evict() is None  # the freed slot is the padding block now
    assert pool.admit(2, 4, 1000, REUSE)[:2] == (0, NO_OWNER)  # taken without evicting


def test_reserved_slot_makes_an_admission_evict_one_more():
    # the padding block holds one slot: with none free, two evictable slots are needed,
    # the oldest is left free for the padding block and the next oldest is taken
    pool = SlotPool(3, "immediate")
    for tag in range(3):
        pool.admit(tag, tag, 1000, REUSE)
    pool.finish(0)
    assert pool.can_secure() and not pool.can_secure(reserved=1)
    pool.finish(1)
    assert pool.can_secure(reserved=1)
    slot, evicted, cached, _, destroyed = pool.admit(0, 9, 1011, REUSE, reserved=1)
    assert (slot, evicted, cached) == (1, 1, 0)  # its own prefix went to the padding block
    assert destroyed == ((0, 0), (1, 1))
    assert pool.free == [0]
    # one slot free and reserved: still one eviction
    pool.finish(2)
    assert pool.admit(5, 10, 100, REUSE, reserved=1)[:2] == (2, 2)
    assert pool.free == [0]


def test_bad_pool_arguments():
    with pytest.raises(ValueError):
        SlotPool(0)
    with pytest.raises(ValueError):
        SlotPool(2, "sometimes")
