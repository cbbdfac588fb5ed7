"""A prefix cache of fixed-size token blocks, hashed as vLLM's automatic prefix caching does.

Pure (no I/O, no event loop): the cost engine (``engine.py``) and the tests call it.

vLLM splits a prompt's tokens into blocks of ``block_size`` (16 by default) and gives
each *full* block a hash of (the previous block's hash, this block's token ids), the first
block's parent being a fixed seed (``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py).
A block's hash therefore fingerprints the whole prefix that ends with it: two prompts
share cached blocks only over a shared prefix of whole blocks, a difference in block k
misses every block from k on, and a partial last block is never cached. A lookup may hit
at most ``len(tokens) - 1`` tokens: the model must compute the last prompt token to get
the first output token's logits (``get_computed_blocks``: ``max_cache_hit_length``).

Tokens: the simulator has no real tokenizer; it counts words and punctuation marks
(``behaviour.TOKEN_RE``), and those token strings stand for token ids here.

Simplification, stated: the cache is an LRU of block hashes bounded by a capacity in
blocks. vLLM keeps cached blocks in its free queue and evicts the least recently used
free block when it needs room; blocks held by running requests cannot be evicted there,
and can be here (the simulator does not model the KV memory of running sequences).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from qfarm.ops.sim.behaviour import TOKEN_RE

BLOCK_SIZE = 16  # vLLM's default --block-size on CUDA
NONE_HASH = hashlib.sha256(b"qfarm-sim-none-hash").digest()  # the first block's parent


def tokenize(text: str) -> tuple[str, ...]:
    """The simulator's stand-in tokenizer: words and punctuation marks, in order."""
    return tuple(TOKEN_RE.findall(text))


def hash_block(parent: bytes, tokens: Sequence[str]) -> bytes:
    """One full block's hash, chained from its parent's (sha256, length-prefixed tokens)."""
    h = hashlib.sha256(parent)
    for token in tokens:
        data = token.encode()
        h.update(len(data).to_bytes(4, "big"))
        h.update(data)
    return h.digest()


def block_hashes(tokens: Sequence[str], block_size: int = BLOCK_SIZE) -> list[bytes]:
    """The chained hashes of every *full* block of ``tokens``; a partial tail has none."""
    out: list[bytes] = []
    parent = NONE_HASH
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block(parent, tokens[start : start + block_size])
        out.append(parent)
    return out


@dataclass(frozen=True)
class Lookup:
    """What one prompt's lookup found: tokens queried, served from the cache, to compute."""

    queried: int
    hit: int

    @property
    def computed(self) -> int:
        return self.queried - self.hit


class PrefixCache:
    """An LRU of block hashes bounded by ``capacity_blocks``; 0 turns caching off."""

    def __init__(self, capacity_blocks: int, block_size: int = BLOCK_SIZE):
        if capacity_blocks < 0 or block_size < 1:
            raise ValueError(
                f"prefix cache: capacity {capacity_blocks} blocks and block size {block_size} "
                "must be >= 0 and >= 1"
            )
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._blocks

    @property
    def enabled(self) -> bool:
        return self.capacity_blocks > 0

    def admit(self, tokens: Sequence[str]) -> Lookup:
        """Look ``tokens`` up, then cache their full blocks (as vLLM caches a request's
        blocks when it schedules it): the longest cached prefix of whole blocks, at most
        ``len(tokens) - 1`` tokens, is a hit; the rest is computed."""
        if not self.enabled:
            return Lookup(queried=len(tokens), hit=0)
        hashes = block_hashes(tokens, self.block_size)
        max_blocks = max(len(tokens) - 1, 0) // self.block_size
        hit_blocks = 0
        for h in hashes[:max_blocks]:
            if h not in self._blocks:
                break
            hit_blocks += 1
        # Tail blocks first, as vLLM frees a request's blocks: under pressure a prefix
        # loses its last blocks before its first, which every longer prefix needs.
        for h in reversed(hashes):
            self._touch(h)
        return Lookup(queried=len(tokens), hit=hit_blocks * self.block_size)

    def _touch(self, block_hash: bytes) -> None:
        if block_hash in self._blocks:
            self._blocks.move_to_end(block_hash)
            return
        self._blocks[block_hash] = None
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
            self.evictions += 1

    def clear(self) -> None:
        """Drop every block (vLLM's ``/reset_prefix_cache``)."""
        self._blocks.clear()


__all__ = ["BLOCK_SIZE", "Lookup", "PrefixCache", "block_hashes", "hash_block", "tokenize"]
