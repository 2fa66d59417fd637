"""The KV cache's blocks, with automatic prefix caching as vLLM V1 does it. Pure, no I/O.

vLLM V1 (vllm/v1/core/kv_cache_utils.py, block_pool.py) keys every *full* block of a prompt
by a hash of its token ids chained to the hash of the block before it, so a block's hash
stands for the whole prefix up to its end; the blocks its answer fills are keyed the same
way as they are computed. A block whose request has finished keeps its
hash and goes to the tail of the free queue; a new request whose prompt starts with the
same blocks takes them back instead of computing them again. Blocks are handed out from the
head of the free queue, so the least recently freed cached block is the one evicted: LRU
against the KV capacity. A request frees its blocks tail first, so of one prompt the end is
evicted before the beginning. The cache can never cover a whole prompt: the last token is
always computed, because its logits give the first output token.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

ROOT = b"loadgen.sim"  # the parent of a prompt's first block (vLLM: NONE_HASH)


def block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[bytes, ...]:
    """The chained hash of each full block of `token_ids`; a partial last block has none."""
    hashes, parent = [], ROOT
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = array("Q", token_ids[start : start + block_size]).tobytes()
        parent = hashlib.sha256(parent + block).digest()
        hashes.append(parent)
    return tuple(hashes)


class BlockPool:
    """`total` KV-cache blocks, numbered 0..total-1: reference counts, the hashes of cached
    ones, and the free queue in eviction order (a free block may still be cached)."""

    def __init__(self, total: int, caching: bool = True) -> None:
        self.total = total
        self.caching = caching
        self._refs = [0] * total
        self._hash: list[bytes | None] = [None] * total
        self._cached: dict[bytes, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(total))

    @property
    def free(self) -> int:
        """Blocks a request can be given, cached-but-unused ones included (as vLLM counts)."""
        return len(self._free)

    def lookup(self, hashes: Sequence[bytes], max_tokens: int, block_size: int) -> list[int]:
        """The blocks of the longest cached prefix of `hashes`, covering at most
        `max_tokens` tokens (vLLM caps it at the prompt's length minus one)."""
        if not self.caching:
            return []
        hits = []
        for block_hash in hashes[: max_tokens // block_size]:
            block = self._cached.get(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def reclaimed(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` taking them would remove from the free queue."""
        return sum(1 for block in blocks if self._refs[block] == 0)

    def take(self, blocks: Sequence[int]) -> None:
        """Share cached blocks with one more request."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def allocate(self, n: int) -> list[int]:
        """`n` blocks from the head of the free queue, evicting what they cached."""
        blocks = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            evicted = self._hash[block]
            if evicted is not None:
                self._hash[block] = None
                del self._cached[evicted]
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def cache(
        self, blocks: Sequence[int], hashes: Sequence[bytes], computed_blocks: int, start: int = 0
    ) -> None:
        """Register the hashes of a request's full blocks once they are scheduled to be
        computed, from block `start` (those before it were given already: vLLM counts them
        per request, so a step costs its new blocks, not the whole context). A hash another
        block already holds stays with that block."""
        if not self.caching:
            return
        for j in range(start, min(computed_blocks, len(hashes))):
            block, block_hash = blocks[j], hashes[j]
            if self._hash[block] is None and block_hash not in self._cached:
                self._hash[block] = block_hash
                self._cached[block_hash] = block

    def release(self, blocks: Sequence[int]) -> None:
        """A request lets go of its blocks, tail first; unused ones join the free queue."""
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None
