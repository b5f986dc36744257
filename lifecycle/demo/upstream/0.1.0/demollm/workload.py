"""What the engine serves once it is up: a burst, a forced shape, or conversations.

Without one of these it only boots, as before. A step that does not fit kills the engine as
CUDA out of memory kills vLLM's engine core: an ERROR line and exit code 1. The engine's
metrics are printed at exit either way.
"""

from __future__ import annotations

import argparse

from demollm import metrics
from demollm.kv_offload import CpuTier, GpuPool, converse
from demollm.logger import init_logger
from demollm.memory import BLOCK_TOKENS, MemoryPlan, OutOfMemory
from demollm.scheduler import MemoryHistory, burst, forced

logger = init_logger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The workload's options, added to the engine's command line."""
    parser.add_argument("--burst", type=int, default=0, help="N clients send a prompt each")
    parser.add_argument("--forced-prompts", type=int, default=0, help="one request, N prompts")
    parser.add_argument("--seed", type=int, default=0, help="the timing of this run")
    parser.add_argument("--conversations", type=int, default=0)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=1200)
    parser.add_argument("--num-gpu-blocks-override", type=int, default=0)
    parser.add_argument("--kv-offloading-size", type=float, default=0.0, help="CPU tier, GiB")
    return parser


def run(args: argparse.Namespace, memory: MemoryPlan) -> None:
    """Serve what the command line asks for; exit 1 if a step does not fit."""
    history = MemoryHistory()
    try:
        if args.forced_prompts:
            forced(memory, args.forced_prompts, history)
        if args.burst:
            burst(memory, args.burst, args.seed, history)
        if args.conversations:
            _conversations(args, memory)
    except OutOfMemory as exc:
        logger.error("EngineCore encountered a fatal error: torch.OutOfMemoryError: %s", exc)
        raise SystemExit(1) from None
    finally:
        history.report()
        if args.forced_prompts or args.burst or args.conversations:
            metrics.dump()


def _conversations(args: argparse.Namespace, memory: MemoryPlan) -> None:
    blocks = memory.kv_blocks
    if args.num_gpu_blocks_override:
        logger.info(
            "Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d",
            blocks,
            args.num_gpu_blocks_override,
        )
        blocks = args.num_gpu_blocks_override
    tier = None
    if args.kv_offloading_size > 0:
        block_bytes = BLOCK_TOKENS * memory.gpu.kv_bytes_per_token
        capacity = int(args.kv_offloading_size * (1 << 30) // block_bytes)
        tier = CpuTier(capacity, block_bytes)
        logger.info(
            "KV offload: CPU tier of %.2f GiB (%d blocks)", args.kv_offloading_size, capacity
        )
    logger.info(
        "conversations: %d of %d turns, %d prompt tokens a turn, GPU pool of %d blocks",
        args.conversations,
        args.turns,
        args.prompt_tokens,
        blocks,
    )
    converse(GpuPool(blocks), tier, args.conversations, args.turns, args.prompt_tokens)
