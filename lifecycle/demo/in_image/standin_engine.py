"""`python3 -m standin_engine`: boot like vLLM, with a real TorchInductor compile on CPU.

Runs inside the stand-in image (lifecycle/demo/standin.py). Like vLLM's VllmBackend it loads
the `vllm.general_plugins` entry points, keys a compile cache dir
`$VLLM_CACHE_ROOT/torch_compile_cache/<hash10>/rank_0_0/backbone/` by env, config, code and
compiler hashes (writing `cache_key_factors.json` and `computation_graph.py` there), points
Inductor's cache at `inductor_cache/` inside it, and logs vLLM's lines. Then it really
compiles a small MLP and prints Inductor's own cache counters, which tell hit from miss.

`--plain` is an engine that does not log like vLLM: a bare `torch.compile` of a decoder block
(RMSNorm, causal attention, SwiGLU) whose Inductor cache is wherever `TORCHINDUCTOR_CACHE_DIR`
says, printing no path and no log line, only Inductor's counters at the end (the tests' truth);
its sequence length is `STANDIN_SEQ` (16), so a new value compiles again.
`--plain --eager` runs the same block without compiling: it never opens the cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
logger = logging.getLogger("vllm.standin")
# Env vars vLLM leaves out of its env hash (a subset of vllm.envs.compile_factors' list):
# where things live and how they log cannot change compiled code.
_UNHASHED = frozenset(
    {"VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "VLLM_LOGGING_LEVEL", "VLLM_PORT", "VLLM_HOST_IP"}
)


def _log_setup() -> None:
    root = logging.getLogger("vllm")
    if not root.handlers:  # vllm.logger configures it when vllm imports
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(_FORMAT, "%m-%d %H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False


def load_plugins() -> None:
    """vLLM's own plugin loader when vllm imports here; else the same entry point group read
    the same way (the stand-in has vllm installed --no-deps, which may not import)."""
    try:
        from vllm.plugins import load_general_plugins
    except Exception as exc:  # vllm missing, or one of its deps
        logger.info("vllm's plugin loader not importable (%s); reading the entry points", exc)
        from importlib.metadata import entry_points

        found = entry_points(group="vllm.general_plugins")
        logger.info("plugins in vllm.general_plugins: %s", ", ".join(p.name for p in found))
        for plugin in found:
            try:
                plugin.load()()
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
        return
    logger.info("loading vllm.general_plugins with vllm's own loader")
    load_general_plugins()


def env_factors() -> dict[str, Any]:
    """The env vars in the compile hash: vLLM's own list when it imports, else every VLLM_*
    variable set here but those vLLM ignores."""
    try:
        import vllm.envs

        return dict(vllm.envs.compile_factors())
    except Exception:
        return {
            key: value
            for key, value in sorted(os.environ.items())
            if key.startswith("VLLM_") and key not in _UNHASHED
        }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compiler_identity() -> str:
    """torch's version and the C++ compiler's: either change recompiles everything."""
    import torch

    found = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=False)
    first = found.stdout.splitlines()[0] if found.stdout else "no g++"
    return f"torch {torch.__version__}; {first}"


def cache_dir(config: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The compile cache dir keyed as vLLM keys it, and the factors it folds in."""
    env = env_factors()
    env_hash = _sha(json.dumps(env, sort_keys=True, default=str))
    config_hash = _sha(json.dumps(config, sort_keys=True))
    code_hash = _sha(Path(__file__).read_text())
    compiler_hash = _sha(compiler_identity())
    hash10 = _sha(str([env_hash, config_hash, code_hash, compiler_hash]))[:10]
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")
    local = root / "torch_compile_cache" / hash10 / "rank_0_0" / "backbone"
    local.mkdir(parents=True, exist_ok=True)
    logger.info(
        "torch.compile cache factors: env=%s cfg=%s comp=%s code=%s dir=%s",
        env_hash, config_hash, compiler_hash, code_hash, local,
    )  # fmt: skip
    factors = {
        "env": env,
        "config_hash": config_hash,
        "code_hash": code_hash,
        "compiler_hash": compiler_hash,
        "compiler": compiler_identity(),
    }
    meta = local / "cache_key_factors.json"
    if not meta.exists():
        meta.write_text(json.dumps(factors, indent=2, sort_keys=True, default=str))
    return local, factors


def build_model(config: dict[str, Any]) -> Any:
    """A small MLP; its size is the config."""
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    width = config["hidden"]
    for _ in range(config["layers"]):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    layers.append(torch.nn.LayerNorm(width))
    return torch.nn.Sequential(*layers).eval()


def compile_and_run(config: dict[str, Any], local: Path) -> dict[str, int]:
    """torch.compile the model with Inductor, run it once; Inductor's and AOTAutograd's cache
    counters. The graph's FX code is kept beside the factors, as vLLM keeps its graph."""
    import torch
    from torch._dynamo.utils import counters

    # As vLLM's InductorAdaptor does: Inductor's cache lives inside the keyed dir.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(local / "inductor_cache")
    model = build_model(config)
    code = local / "computation_graph.py"
    if not code.exists():
        # From torch.fx, not from a wrapping backend: a backend of our own would change
        # AOTAutograd's cache key and make every boot miss it.
        code.write_text(torch.fx.symbolic_trace(model).code)
    compiled = torch.compile(model, backend="inductor")
    batch = torch.randn(config["batch"], config["hidden"])
    started = time.monotonic()
    with torch.no_grad():
        out = compiled(batch)
    took = time.monotonic() - started
    found = {
        "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
        "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "autograd_cache_miss": counters["aot_autograd"]["autograd_cache_miss"],
    }
    if found["fxgraph_cache_miss"] or not found["fxgraph_cache_hit"]:
        logger.info("Compiling a graph for dynamic shape takes %.2f s", took)
    else:
        logger.info(
            "Directly load the compiled graph(s) for dynamic shape from the cache, took %.3f s",
            took,
        )
    logger.info("torch.compile takes %.2f s in total", took)
    logger.info("inductor counters: %s", " ".join(f"{k}={v}" for k, v in found.items()))
    logger.info("output checksum: %.4f", float(out.abs().mean()))
    return found


def decoder_block(width: int) -> Any:
    """RMSNorm → causal self-attention → RMSNorm → SwiGLU, each with its residual."""
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = 4
            self.norm1 = torch.nn.RMSNorm(width)
            self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
            self.out = torch.nn.Linear(width, width, bias=False)
            self.norm2 = torch.nn.RMSNorm(width)
            self.gate_up = torch.nn.Linear(width, 4 * width, bias=False)
            self.down = torch.nn.Linear(2 * width, width, bias=False)

        def forward(self, x: Any) -> Any:
            batch, seq, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(attn.transpose(1, 2).reshape(batch, seq, -1))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    torch.manual_seed(0)
    return Block().eval()


def plain_main(args: argparse.Namespace) -> int:
    """A workload that logs nothing: compile (or not) and print only Inductor's counters."""
    import torch
    from torch._dynamo.utils import counters

    block = decoder_block(args.hidden)
    run = block if args.eager else torch.compile(block, backend="inductor")
    with torch.no_grad():
        run(torch.randn(2, int(os.environ.get("STANDIN_SEQ") or 16), args.hidden))
    found = {
        "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
        "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "autograd_cache_miss": counters["aot_autograd"]["autograd_cache_miss"],
    }
    print("inductor counters:", " ".join(f"{k}={v}" for k, v in found.items()), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Boot once; a failure is one ERROR line and exit code 1."""
    parser = argparse.ArgumentParser(prog="standin_engine")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)  # tuned; unused
    parser.add_argument("--plain", action="store_true", help="a decoder block; logs nothing")
    parser.add_argument("--eager", action="store_true", help="with --plain: do not compile")
    args = parser.parse_args(argv)
    if args.plain:
        return plain_main(args)
    _log_setup()
    started = time.monotonic()
    try:
        import torch

        logger.info("stand-in engine: torch %s", torch.__version__)
        load_plugins()
        config = {"hidden": args.hidden, "layers": args.layers, "batch": args.batch}
        local, _ = cache_dir(config)
        logger.info("Using cache directory: %s for vLLM's torch.compile", local)
        compile_and_run(config, local)
    except Exception as exc:
        logger.error("Engine core initialization failed: %s: %s", type(exc).__name__, exc)
        return 1
    logger.info(
        "init engine (profile, create kv cache, warmup model) took %.2f seconds",
        time.monotonic() - started,
    )
    logger.info("Application startup complete.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
