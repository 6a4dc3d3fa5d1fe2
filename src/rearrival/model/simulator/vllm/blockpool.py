"""Our model of vLLM's paged KV pool with prefix caching (docs/DESIGN.md §15 rules 1-3),
the readable statement the Python cores run and the compiled core writes out on arrays.

* Block 0 is the null block: never allocated, never freed. The free queue starts as
  blocks 1..K-1 in id order.
* Allocation pops blocks from the front of the free queue; a popped block loses its cached
  identity (that is the eviction: least recently freed first).
* A block is cached under a chain identity (``inputs``: block j of session s) once it is
  full. Several blocks may hold the same identity (a block recomputed while an older copy
  still sits in the free queue); a look-up takes the first of them still cached, in the
  order they were cached, as vLLM's ``BlockHashToBlockMap`` does.
* A hit takes its blocks out of the free queue (``touch``) before any new block is
  allocated, so a request never evicts its own prefix.
* A request frees its blocks last block first: blocks without an identity (the partial
  tail) go to the FRONT of the free queue, cached blocks to the TAIL, so a request's first
  block is evicted last.
"""

from __future__ import annotations

from itertools import pairwise

NO_KEY = -1


class BlockPool:
    """``num_blocks`` blocks (the null block included), the free queue as a doubly linked
    list over block ids with a sentinel, and the chain identities they hold."""

    def __init__(self, num_blocks: int) -> None:
        self.sentinel = num_blocks
        # next/prev in the free queue; the sentinel closes the ring
        self.next = [0] * (num_blocks + 1)
        self.prev = [0] * (num_blocks + 1)
        order = [self.sentinel, *range(1, num_blocks), self.sentinel]
        for a, b in pairwise(order):
            self.next[a] = b
            self.prev[b] = a
        self.free_count = num_blocks - 1
        self.refs = [0] * num_blocks
        self.refs[0] = 1  # the null block is never free
        self.key = [NO_KEY] * num_blocks
        self.cached: dict[int, list[int]] = {}  # identity -> blocks holding it, cache order

    # --- the free queue -------------------------------------------------------------
    def _unlink(self, block: int) -> None:
        before, after = self.prev[block], self.next[block]
        self.next[before] = after
        self.prev[after] = before
        self.free_count -= 1

    def _link_after(self, anchor: int, block: int) -> None:
        after = self.next[anchor]
        self.next[anchor] = block
        self.prev[block] = anchor
        self.next[block] = after
        self.prev[after] = block
        self.free_count += 1

    def free_queue(self) -> list[int]:
        """The free queue front to back (for tests)."""
        out, block = [], self.next[self.sentinel]
        while block != self.sentinel:
            out.append(block)
            block = self.next[block]
        return out

    # --- prefix cache ---------------------------------------------------------------
    def lookup(
        self, first_key: int, max_blocks: int, shared: int = 0, shared_key: int = -1
    ) -> list[int]:
        """The longest chain of cached blocks of identities first_key, first_key + 1, ...
        (at most ``max_blocks``): a missing block ends the chain. The first ``shared``
        blocks have a shared prefix's identities shared_key + j instead (SPEC 17)."""
        hit = []
        for j in range(max_blocks):
            holders = self.cached.get((shared_key if j < shared else first_key) + j)
            if not holders:
                break
            hit.append(holders[0])
        return hit

    def in_free_queue(self, blocks: list[int]) -> int:
        """How many of ``blocks`` sit in the free queue (cached but not held)."""
        return sum(1 for b in blocks if self.refs[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        """A hit takes its blocks: out of the free queue, one more holder each."""
        for block in blocks:
            if self.refs[block] == 0:
                self._unlink(block)
            self.refs[block] += 1

    def cache(self, block: int, key: int) -> None:
        """A full block gets its chain identity."""
        self.key[block] = key
        self.cached.setdefault(key, []).append(block)

    def _evict(self, block: int) -> None:
        key = self.key[block]
        if key != NO_KEY:
            holders = self.cached[key]
            holders.remove(block)
            if not holders:
                del self.cached[key]
            self.key[block] = NO_KEY

    # --- allocation and freeing -----------------------------------------------------
    def allocate(self, count: int) -> list[int]:
        """``count`` blocks from the front of the free queue, their identities evicted."""
        assert count <= self.free_count, "callers check the free count first"
        blocks = []
        for _ in range(count):
            block = self.next[self.sentinel]
            self._unlink(block)
            self._evict(block)
            self.refs[block] = 1
            blocks.append(block)
        return blocks

    def free(self, blocks: list[int]) -> None:
        """Release a request's blocks (in its order): last block first, uncached ones to
        the front of the queue (in that order), cached ones to the tail."""
        front, tail = [], []
        for block in reversed(blocks):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                (tail if self.key[block] != NO_KEY else front).append(block)
        anchor = self.sentinel
        for block in front:
            self._link_after(anchor, block)
            anchor = block
        for block in tail:
            self._link_after(self.prev[self.sentinel], block)
