"""KV survival (paper Section III-B): the fixed slot pool and its FIFO eviction.

On the eager attention path one KV block holds one whole sequence, so the cache is a pool
of S slots. Whether a re-arriving session finds its previous prompt still cached depends
only on this pool's rules, which SPEC section 5 item 3 fixes:

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
* ``pre_evict`` is the measured stack's dummy padding block (Supplementary S9): the oldest
  evictable slot is evicted and left free for the next admission.

Choices the text implies and this module applies (the reference simulator in
``sim_reference`` implements the same choices independently):

* A hit copies the prefix into the newly secured slot; the source slot keeps its KV, its
  allocation order and its evictability (a hit neither moves nor refreshes it).
* Free slots are taken lowest index first; slot indices only label records.
* Deferred releases are applied after every admission's slot choice, whether it took a
  free slot or evicted one: that admission is "the next admission" of the rule.

This module is the cache model only; when to admit, decode or pre-evict is the scheduler
policy in ``rearrival.sim``.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

RELEASES = ("deferred", "immediate")
NO_OWNER = -1


class SlotPool:
    """S KV slots with FIFO eviction by allocation order (paper Section III-B).

    Owners are opaque integer tags chosen by the caller (the simulator uses request ids);
    ``session`` groups the tags whose KV a later request of the same session may reuse.
    The hot path of the predictor calls these methods tens of times per simulation, so
    state lives in flat lists and heaps rather than per-slot objects.
    """

    __slots__ = ("_by_session", "_deferred", "_next_order", "_order", "_pending", "_prompt",
                 "_session", "_tag", "evictable", "free")

    def __init__(self, slots: int, release: str = "deferred") -> None:
        if slots < 1:
            raise ValueError(f"a slot pool needs at least one slot, got {slots}")
        if release not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, got {release!r}")
        # Read-only for callers: ``free or evictable`` is the cheap form of can_secure().
        self.free = list(range(slots))  # heap of free slots; ascending is a valid heap
        self.evictable: list[tuple[int, int]] = []  # heap of (allocation order, slot)
        self._pending: list[int] = []  # finished slots whose release is deferred
        self._tag = [NO_OWNER] * slots  # owner tag of the KV the slot holds
        self._session = [NO_OWNER] * slots
        self._prompt = [0] * slots  # tokens prefill wrote into the slot
        self._order = [0] * slots
        self._by_session: dict[int, list[int]] = {}
        self._deferred = release == "deferred"
        self._next_order = 0

    def can_secure(self) -> bool:
        """True when an admission could get a slot now (free or evictable)."""
        return bool(self.free or self.evictable)

    def admit(self, session: int, tag: int, prompt_tokens: int,
              reusable: Callable[[int, int], int]) -> tuple[int, int, int, int]:
        """Secure a slot, apply deferred releases, look up the session's surviving KV, occupy.

        Returns ``(slot, evicted_tag, cached_tokens, source_slot)``; ``evicted_tag`` and
        ``source_slot`` are ``NO_OWNER`` when a free slot was taken / nothing was reused.
        ``reusable(previous_prompt, prompt)`` is the profile's reuse rule. The caller must
        check ``can_secure()`` first.
        """
        # The simulator calls this once per request on every candidate of the search, so
        # the eviction and the deferred releases are written out here rather than called.
        tags = self._tag
        sessions = self._session
        by_session = self._by_session
        if self.free:
            slot = heappop(self.free)
            evicted = NO_OWNER
        else:
            slot = heappop(self.evictable)[1]
            evicted = tags[slot]
            by_session[sessions[slot]].remove(slot)
        pending = self._pending
        if pending:  # only ever filled under deferred release
            order = self._order
            evictable = self.evictable
            for finished in pending:
                heappush(evictable, (order[finished], finished))
            pending.clear()
        cached, source = 0, NO_OWNER
        survivors = by_session.get(session)
        if survivors is None:
            by_session[session] = [slot]
        else:
            prompts = self._prompt
            for other in survivors:
                reuse = reusable(prompts[other], prompt_tokens)
                if reuse > cached:
                    cached, source = reuse, other
            survivors.append(slot)
        tags[slot] = tag
        sessions[slot] = session
        self._prompt[slot] = prompt_tokens
        self._order[slot] = self._next_order
        self._next_order += 1
        return slot, evicted, cached, source

    def finish(self, slot: int) -> None:
        """The request in ``slot`` finished: its KV stays cached and becomes evictable."""
        if self._deferred:
            self._pending.append(slot)
        else:
            heappush(self.evictable, (self._order[slot], slot))

    def release_deferred(self) -> None:
        """Make every finished slot whose release was deferred evictable now."""
        for slot in self._pending:
            heappush(self.evictable, (self._order[slot], slot))
        self._pending.clear()

    def pre_evict(self) -> tuple[int, int] | None:
        """Dummy padding block (S9): if no slot is free, evict the oldest evictable one.

        Returns ``(slot, evicted_tag)`` when a slot was evicted and left free, else None.
        """
        if self.free or not self.evictable:
            return None
        slot = heappop(self.evictable)[1]
        evicted = self._tag[slot]
        self._drop(slot)
        heappush(self.free, slot)
        return slot, evicted

    def survivors(self, session: int) -> tuple[int, ...]:
        """Slots that still hold KV written by ``session`` (running or finished)."""
        return tuple(self._by_session.get(session, ()))

    def _drop(self, slot: int) -> None:
        self._by_session[self._session[slot]].remove(slot)
        self._tag[slot] = NO_OWNER
        self._session[slot] = NO_OWNER
        self._prompt[slot] = 0
