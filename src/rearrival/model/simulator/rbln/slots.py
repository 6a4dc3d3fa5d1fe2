"""KV survival (paper Section III-B): the fixed slot pool and its FIFO eviction.

On the eager attention path one KV block holds one whole sequence, so the cache is a pool
of S slots. Whether a re-arriving session finds its previous prompt still cached depends
only on this pool's rules, which docs/DESIGN.md §4 rule 3 fixes:

* FIFO eviction by allocation order: the victim is the evictable slot that was allocated
  earliest. A look-up that finds a slot does not refresh its order ("re-access does not
  refresh order").
* Only slots of finished requests are evictable. With ``deferred`` release (the paper's
  base simulator) a finished request's slot becomes evictable only after the next
  admission has chosen its victim; with ``immediate`` release (the measured stack) at once.
* An admission first secures its own slot (a free one, else the oldest evictable one is
  evicted) and only then looks up the session's surviving KV, so a request can evict its
  own prefix.
* The look-up takes the largest cached prefix among the session's surviving slots.
* ``pre_evict`` is the measured stack's dummy padding block: the oldest evictable slot is
  evicted and left free for the next admission.
* ``reserved`` (the dummy-block rule of the paper's Supplementary S9 simulator): while the
  scheduler says a padding block is held, one slot counts as taken, so an admission may
  have to evict one slot more than its own.

Choices the text implies and this module applies:

* A hit copies the prefix into the newly secured slot; the source slot keeps its KV, its
  allocation order and its evictability (a hit neither moves nor refreshes it).
* Free slots are taken lowest index first; slot indices only label records.
* Deferred releases are applied after every admission's slot choice, whether it took a
  free slot or evicted one: that admission is "the next admission" of the rule.

This module is the cache model only; when to admit, decode or pre-evict is the scheduler
policy. The step-by-step reference (``reference``) calls these
methods; the event cores (``event`` in Python,
``core`` compiled on arrays) write
``admit``, ``finish`` and ``pre_evict`` out inline, because they run once per request on
every candidate of the search. The equivalence tests (thousands of random plans, every
variant) hold the copies to the same outputs, and ``tests/test_sim_kvslots.py`` checks
the rules here by hand-made cases.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from heapq import heappop, heappush

from rearrival.vocabulary import RELEASES

NO_OWNER = -1


@dataclass(frozen=True, slots=True)
class Eviction:
    """KV destroyed: by an admission securing its slot, or taken as the dummy padding block.

    One type for every evictor, the predictor (``sim``) and the emulated
    engine (``rearrival.measure.emulate.engine``). ``session`` is the predictor's session
    index or the engine's session key; ``cached_tokens`` the prompt tokens the slot held;
    ``cause`` one of ``rearrival.vocabulary.EVICTION_CAUSES``; ``turn`` the victim
    request's turn where the evictor knows turns (the predictor), None in the engine,
    which knows a session only by its KV prefix.
    """

    time_s: float
    slot: int
    session: Hashable
    cached_tokens: int
    cause: str
    turn: int | None = None


class SlotPool:
    """S KV slots with FIFO eviction by allocation order (paper Section III-B).

    Owners are opaque integer tags chosen by the caller (the simulator uses request ids);
    ``session`` groups the tags whose KV a later request of the same session may reuse.

    The state is public because the predictor's hot path writes ``admit``, ``finish`` and
    ``pre_evict`` out inline (about 3 million admissions in the configuration search);
    everyone else uses the methods. It is flat lists and int heaps rather than per-slot
    objects:

    * ``free``: heap of free slots (taken lowest index first).
    * ``evictable``: heap of eviction keys ``allocation order * slots + slot`` of finished,
      released slots. Ints order like (order, slot) pairs without building a tuple;
      ``key % slots`` is the slot.
    * ``pending``: finished slots whose release is deferred (deferred release only).
    * ``owner``: per slot, the KV it holds as one ``(tag, session, prompt tokens prefill
      wrote)`` tuple (one store per admission), or None.
    * ``key``: per slot, the eviction key of its current allocation.
    * ``next_key``: eviction key base of the next allocation (allocations so far x slots).
    * ``deferred``: the release rule (True: deferred, False: immediate).
    """

    __slots__ = ("deferred", "evictable", "free", "key", "next_key", "owner", "pending", "slots")

    def __init__(self, slots: int, release: str = "deferred") -> None:
        if slots < 1:
            raise ValueError(f"a slot pool needs at least one slot, got {slots}")
        if release not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, got {release!r}")
        self.slots = slots
        self.free = list(range(slots))  # ascending is a valid heap
        self.evictable: list[int] = []
        self.pending: list[int] = []
        self.owner: list[tuple[int, int, int] | None] = [None] * slots
        self.key = [0] * slots
        self.next_key = 0
        self.deferred = release == "deferred"

    def can_secure(self, reserved: int = 0) -> bool:
        """True when an admission could get a slot now: free + evictable >= 1, where
        ``reserved`` free slots (the padding block's, dummy-block rule "reserved") do not
        count as free."""
        return len(self.free) - reserved + len(self.evictable) >= 1

    def admit(
        self,
        session: int,
        tag: int,
        prompt_tokens: int,
        reusable: Callable[[int, int], int],
        reserved: int = 0,
    ) -> tuple[int, int, int, int, tuple[tuple[int, int], ...]]:
        """Secure a slot, apply deferred releases, look up the session's surviving KV, occupy.

        With ``reserved`` slots held by the padding block, the free count is
        ``len(free) - reserved``; when it is below 1 the oldest evictable slots are evicted
        until one is free: the first ones stay free for the padding block, the last one
        is this admission's. Returns ``(slot, evicted_tag, cached_tokens, source_slot,
        evictions)``; ``evicted_tag`` (the KV in the slot this admission took) and
        ``source_slot`` are ``NO_OWNER`` when a free slot was taken / nothing was reused;
        ``evictions`` lists every ``(slot, tag)`` destroyed, oldest first.
        ``reusable(previous_prompt, prompt)`` is the profile's reuse rule. The caller must
        check ``can_secure(reserved)`` first.
        """
        evictions = []
        if len(self.free) > reserved:
            slot = heappop(self.free)
            evicted = NO_OWNER
        else:
            for _ in range(reserved - len(self.free)):
                freed = self._evict_oldest()
                heappush(self.free, freed[0])
                evictions.append(freed)
            slot, evicted = self._evict_oldest()
            evictions.append((slot, evicted))
        self.release_deferred()
        cached, source = 0, NO_OWNER
        for other in self.survivors(session):  # the secured slot holds no KV now
            reuse = reusable(self.owner[other][2], prompt_tokens)
            if reuse > cached:
                cached, source = reuse, other
        self.owner[slot] = (tag, session, prompt_tokens)
        self.key[slot] = self.next_key + slot
        self.next_key += self.slots
        return slot, evicted, cached, source, tuple(evictions)

    def finish(self, slot: int) -> None:
        """The request in ``slot`` finished: its KV stays cached and becomes evictable."""
        if self.deferred:
            self.pending.append(slot)
        else:
            heappush(self.evictable, self.key[slot])

    def release_deferred(self) -> None:
        """Make every finished slot whose release was deferred evictable now."""
        key = self.key
        for slot in self.pending:
            heappush(self.evictable, key[slot])
        self.pending.clear()

    def pre_evict(self) -> tuple[int, int] | None:
        """Dummy padding block (S9): if no slot is free, evict the oldest evictable one.

        Returns ``(slot, evicted_tag)`` when a slot was evicted and left free, else None.
        """
        if self.free or not self.evictable:
            return None
        slot, evicted = self._evict_oldest()
        heappush(self.free, slot)
        return slot, evicted

    def survivors(self, session: int) -> tuple[int, ...]:
        """Slots that still hold KV written by ``session`` (running or finished), by index."""
        return tuple(
            slot for slot, held in enumerate(self.owner) if held is not None and held[1] == session
        )

    def _evict_oldest(self) -> tuple[int, int]:
        """Destroy the KV of the evictable slot allocated earliest; return (slot, its tag).

        The slot is left holding nothing and in no heap: the caller occupies or frees it.
        """
        slot = heappop(self.evictable) % self.slots
        evicted = self.owner[slot][0]
        self.owner[slot] = None
        return slot, evicted
