"""A CPU tier for the KV cache, and the multi-turn conversations that may need it.

Every block a step computes is stored in the CPU tier as well (write-through: it stores
always). The tier is asked only when a conversation's earlier blocks are no longer in the GPU
pool, which happens only when the pool had to evict them to make room for another
conversation; blocks the tier holds are then read back instead of recomputed. A pool that
holds every conversation never evicts, and the tier is never asked.
"""

from __future__ import annotations

from collections import OrderedDict

from demollm import metrics
from demollm.logger import init_logger
from demollm.memory import BLOCK_TOKENS

logger = init_logger(__name__)

Block = tuple[int, int]  # (conversation, block index)


class CpuTier:
    """KV blocks kept in host memory, by the hash of their place in a conversation."""

    def __init__(self, capacity_blocks: int, block_bytes: int) -> None:
        self.capacity = capacity_blocks
        self.block_bytes = block_bytes
        self.blocks: OrderedDict[str, Block] = OrderedDict()

    def store(self, block: Block, request: str) -> None:
        """Keep a block just computed (the oldest go when the tier is full)."""
        self.blocks[self.key(block, request)] = block
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        metrics.add("vllm:kv_offload_store_bytes", self.block_bytes)

    def load(self, wanted: list[Block], request: str) -> list[Block]:
        """The wanted blocks the tier holds, read back."""
        metrics.add("vllm:kv_offload_lookups")
        found = [b for b in wanted if self.key(b, request) in self.blocks]
        metrics.add("vllm:kv_offload_load_bytes", len(found) * self.block_bytes)
        return found

    def key(self, block: Block, request: str) -> str:
        """Where a block is kept: its place in its conversation, whichever request made it."""
        return f"{block[0]}:{block[1]}"


class GpuPool:
    """The GPU's KV blocks, least recently used evicted first."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[Block, None] = OrderedDict()

    def holds(self, block: Block) -> bool:
        """Whether the block is still in the pool."""
        return block in self.blocks

    def place(self, blocks: list[Block]) -> list[Block]:
        """Put blocks in (most recent last); the blocks evicted to make room."""
        evicted = []
        for block in blocks:
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while len(self.blocks) > self.capacity:
            evicted.append(self.blocks.popitem(last=False)[0])
        return evicted


def converse(
    pool: GpuPool, tier: CpuTier | None, conversations: int, turns: int, prompt_tokens: int
) -> None:
    """Run the conversations turn by turn, interleaved; each turn extends its context."""
    per_turn = -(-prompt_tokens // BLOCK_TOKENS)
    asked = loaded = 0
    for turn in range(1, turns + 1):
        for conversation in range(1, conversations + 1):
            request = f"c{conversation}t{turn}"
            prefix = [(conversation, i) for i in range((turn - 1) * per_turn)]
            missing = [b for b in prefix if not pool.holds(b)]
            metrics.add("vllm:prefix_cache_queries", len(prefix) * BLOCK_TOKENS)
            metrics.add("vllm:prefix_cache_hits", (len(prefix) - len(missing)) * BLOCK_TOKENS)
            if missing and tier is not None:
                logger.info(
                    "KV offload: asked the CPU tier for %d blocks (conversation %d, turn %d)",
                    len(missing),
                    conversation,
                    turn,
                )
                found = tier.load(missing, request)
                logger.info("KV offload: read back %d of %d blocks", len(found), len(missing))
                asked, loaded = asked + len(missing), loaded + len(found)
            new = [(conversation, i) for i in range((turn - 1) * per_turn, turn * per_turn)]
            evicted = pool.place(prefix + new)
            if evicted:
                logger.info("KV offload: GPU pool full: evicted %d blocks", len(evicted))
            for block in new if tier is not None else ():
                tier.store(block, request)
    if tier is not None:
        logger.info("KV offload: %d blocks stored in the CPU tier", len(tier.blocks))
        if asked:
            logger.info("External prefix cache hit rate: %.1f%%", 100.0 * loaded / asked)
