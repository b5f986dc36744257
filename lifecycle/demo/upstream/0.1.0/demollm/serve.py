"""`python3 -m demollm.serve`: boot the engine, fill or load its JIT caches, warm up, report."""

from __future__ import annotations

import argparse
import sys
import time

import demoinfer
from demoinfer import jit

from demollm import __version__, memory, workload
from demollm.compilation import compile_or_load, dynamo_transform
from demollm.logger import init_logger

logger = init_logger(__name__)

KERNEL_MIX = 31
GPU_MEMORY_GIB = 80.0
WEIGHTS_GIB = 14.96
KV_BYTES_PER_TOKEN = 131072
WARMUP_TOKENS = 4096
GIB = 1 << 30


class EngineError(RuntimeError):
    """A boot failure with a message for the log."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The engine's command line."""
    parser = argparse.ArgumentParser(prog="demollm.serve", description=__doc__)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--serve-seconds", type=float, default=0.0, help="stay up this long")
    return workload.add_arguments(parser).parse_args(argv)


def run(args: argparse.Namespace) -> None:
    """Boot once: compile or load, warm up the kernel, size the KV cache."""
    logger.info("demollm version %s (demoinfer %s)", __version__, demoinfer.__version__)
    utilization = args.gpu_memory_utilization
    if not 0 < utilization <= 1:
        raise EngineError(f"--gpu-memory-utilization must be in (0, 1], got {utilization}")
    started = time.monotonic()
    dynamo = dynamo_transform()
    logger.info("Dynamo bytecode transform time: %.2f s", dynamo)
    outcome = compile_or_load(KERNEL_MIX)
    logger.info("torch.compile takes %.2f s in total", dynamo + outcome.seconds)

    kernel = jit.build_and_load(jit.gen_mix_module(KERNEL_MIX))
    logger.info("demo kernel checksum: %d", kernel.demo_kernel(WARMUP_TOKENS))

    gpu = memory.Gpu(GPU_MEMORY_GIB * 1024, WEIGHTS_GIB * 1024, KV_BYTES_PER_TOKEN)
    kv = memory.plan(gpu, utilization, cold=not outcome.hit)
    logger.info("Available KV cache memory: %.2f GiB", kv.kv_mib * memory.MIB / GIB)
    logger.info("GPU KV cache size: %s tokens", f"{kv.kv_tokens:,}")
    logger.info(
        "init engine (profile, create kv cache, warmup model) took %.2f seconds",
        time.monotonic() - started,
    )
    logger.info("Application startup complete.")
    workload.run(args, kv)
    if args.serve_seconds > 0:
        time.sleep(args.serve_seconds)


def main(argv: list[str] | None = None) -> int:
    """Run the engine; a failure is one ERROR line and exit code 1."""
    args = parse_args(argv)
    try:
        run(args)
    except Exception as exc:
        logger.error("Engine core initialization failed: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
