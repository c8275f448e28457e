"""Block bookkeeping for the paged KV cache: which blocks are free, shared or cached.

A sequence's keys and values live in fixed-size blocks of ``block_size`` token positions,
listed in order by its block table. This module only counts: block ids, reference counts,
and the prefix index; the tensors are ``PagedKVCache``'s.

- **Sharing.** A block may sit in several tables (the n samples of a prompt, or a later
  agent turn that starts with an earlier one's context); ``refs[b]`` counts them. Only full
  blocks are ever shared: a sequence writes only into its last, partial block, which it owns.
- **Prefix index.** A full block is named by a hash of its tokens chained with the hash of
  the block before it, so one name means one whole prefix. The tokens are named as the
  prompt's family keys them (``PreparedPrompt.prefix_tokens``): an image token by its image,
  so the same ids with other images are another prefix from the first differing image on.
  ``lookup`` walks a token list block by block and returns the blocks already computed for
  its longest indexed prefix. A block whose last table lets go of it stays indexed (and
  reusable) until its memory is needed: such blocks are evicted least recently released
  first.
- **Capacity.** ``capacity`` block ids exist (the tensors' size); ``limit`` is the most
  there may ever be. ``allocate`` returns None when every block is in use and the capacity
  is at its limit, and the caller grows the tensors, waits or preempts.
"""

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """The name of a full block of ``tokens`` following the prefix named ``parent``."""
    return hash((parent, tuple(tokens)))


@dataclass(frozen=True)
class Prefix:
    """A lookup's answer: ``blocks`` hold its first len(blocks) * block_size positions;
    ``partial`` (when not None) holds the next ``partial_length`` (it must be copied before
    anything is written after them); ``names``: every full block of the tokens looked up."""

    blocks: list[int]
    names: list[int]
    partial: int | None
    partial_length: int


class BlockAllocator:
    def __init__(self, block_size: int, capacity: int, limit: int) -> None:
        self.block_size, self.capacity, self.limit = block_size, capacity, limit
        self.free: list[int] = list(reversed(range(capacity)))  # never held, or forgotten
        self.refs: list[int] = [0] * capacity
        self.index: dict[int, int] = {}  # block hash -> block id
        self.hash_of: dict[int, int] = {}  # block id -> its hash, for indexed blocks
        self.cached: OrderedDict[int, None] = OrderedDict()  # refs 0, indexed: evictable
        self.root = 0  # the name "before" a first block; a new one per generation of weights

    # -- counts -------------------------------------------------------------------------

    @property
    def in_use(self) -> int:
        """Blocks held by at least one sequence."""
        return self.capacity - len(self.free) - len(self.cached)

    @property
    def available(self) -> int:
        """Blocks that ``allocate`` can hand out without growing."""
        return len(self.free) + len(self.cached)

    def grow(self, capacity: int) -> None:
        """The tensors now hold ``capacity`` blocks; the new ids are free."""
        self.free[:0] = reversed(range(self.capacity, capacity))  # handed out last
        self.refs.extend([0] * (capacity - self.capacity))
        self.capacity = capacity

    # -- holding and letting go -----------------------------------------------------------

    def allocate(self) -> int | None:
        """A block for one table (refs 1), or None when none is free or cached."""
        if self.free:
            block = self.free.pop()
        elif self.cached:
            block, _ = self.cached.popitem(last=False)  # the least recently released
            del self.index[self.hash_of.pop(block)]
        else:
            return None
        self.refs[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more table holds ``block`` (a cached block comes back into use)."""
        if self.refs[block] == 0:
            del self.cached[block]
        self.refs[block] += 1

    def release(self, blocks: Sequence[int]) -> None:
        """A table lets go of ``blocks``; indexed ones nobody holds stay as cache."""
        for block in blocks:
            self.refs[block] -= 1
            if self.refs[block] == 0:
                if block in self.hash_of:
                    self.cached[block] = None
                else:
                    self.free.append(block)

    # -- the prefix index -------------------------------------------------------------------

    def register(self, block: int, name: int) -> None:
        """``block`` now holds the block named ``name`` (first writer wins): a full block,
        or the partial last block of a finished sequence (``block_hash`` of its tokens)."""
        if name not in self.index and block not in self.hash_of:
            self.index[name] = block
            self.hash_of[block] = name

    def lookup(self, tokens: Sequence[int], max_tokens: int) -> "Prefix":
        """What the cache holds of the longest prefix of ``tokens`` (at most ``max_tokens``
        positions; as the prompt's family names them, ``PreparedPrompt.prefix_tokens``):
        indexed full blocks, then possibly a partial block that a finished sequence left (its
        first positions are the next tokens)."""
        size = self.block_size
        root = self.root
        names, parent = [], root
        for start in range(0, len(tokens) - size + 1, size):
            parent = block_hash(parent, tokens[start : start + size])
            names.append(parent)
        found = []
        for name in names[: max_tokens // size]:
            block = self.index.get(name)
            if block is None:
                break
            found.append(block)
        start = len(found) * size
        parent = names[len(found) - 1] if found else root
        for length in range(min(size - 1, max_tokens - start), 0, -1):
            block = self.index.get(block_hash(parent, tokens[start : start + length]))
            if block is not None:
                return Prefix(found, names, block, length)
        return Prefix(found, names, None, 0)

    def forget_prefixes(self) -> None:
        """Drop the prefix index (the weights changed: cached keys and values are stale).
        Names chain from a new root, so blocks that running sequences fill later (from the
        old weights) can never match a new prompt."""
        self.root += 1
        for block in self.cached:
            self.free.append(block)
        self.cached.clear()
        self.index.clear()
        self.hash_of.clear()
