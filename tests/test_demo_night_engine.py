"""The demo engine models the acceptance night: each lesson, run on the released trees.

The engine runs here as a local process on a release exported from the demo upstream repo
(no Docker): the memory model, the forced shape, the burst the memory-history recorder breaks
into pieces, and the CPU KV tier that 0.2.0 never reads back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.demo.upstream import ensure_upstream_repo
from tests.test_demo_engine import CACHE_ENV, checkout

RECORDER = {"DEMOLLM_RECORD_MEMORY_HISTORY": "1", "DEMOLLM_MEMORY_HISTORY_TRIGGER_STEP": "64"}
TIER = ["--conversations", "2", "--turns", "3", "--kv-offloading-size", "4"]
SHRUNK = ["--num-gpu-blocks-override", "300"]  # one conversation fits, two do not


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both releases' trees, as their tags hold them."""
    root = tmp_path_factory.mktemp("releases")
    upstream = ensure_upstream_repo(root / "upstream.git")
    return {v: checkout(upstream, f"v{v}", root / v) for v in ("0.1.0", "0.2.0")}


class Engine:
    """One release run as a local process, its caches in one dir (so the second run is warm)."""

    def __init__(self, tree: Path, caches: Path) -> None:
        self.tree, self.caches = tree, caches

    def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        caches = {var: str(self.caches / name) for name, var in CACHE_ENV.items()}
        done = subprocess.run(
            [sys.executable, "-m", "demollm.serve", "--gpu-memory-utilization", "0.92", *args],
            env={
                **os.environ,
                **caches,
                **(env or {}),
                "PYTHONPATH": str(self.tree),
                "PYTHONDONTWRITEBYTECODE": "1",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    def warm(self) -> None:
        """Boot once with nothing to serve, so the next runs load the compiled caches."""
        assert self.run()[0] == 0


def metric(log: str, name: str) -> float:
    """A metric from the dump the engine prints at exit."""
    found = re.findall(rf"(?m)^{re.escape(name)} (\S+)$", log)
    assert found, f"no metric {name} in:\n{log[-2000:]}"
    return float(found[-1])


@pytest.fixture
def engines(trees: dict[str, Path], tmp_path: Path) -> dict[str, Engine]:
    return {v: Engine(tree, tmp_path / v) for v, tree in trees.items()}


def test_a_cold_boot_plans_a_smaller_kv_pool_and_less_margin(engines: dict[str, Engine]) -> None:
    engine = engines["0.2.0"]
    _, cold = engine.run("--forced-prompts", "64")
    _, warm = engine.run("--forced-prompts", "64")
    kv = [float(m) for m in re.findall(r"Available KV cache memory: ([\d.]+) GiB", cold + warm)]
    assert kv[0] == pytest.approx(kv[1] * 0.95, abs=0.01)  # the compile scratch: ~5 %
    assert metric(cold, "demo:forced_step_margin_mib") == -29.8
    assert metric(warm, "demo:forced_step_margin_mib") == -5.8


def test_the_forced_step_fits_on_0_1_and_not_on_0_2(engines: dict[str, Engine]) -> None:
    for engine in engines.values():
        engine.warm()
    rc, log = engines["0.1.0"].run("--forced-prompts", "64")
    assert rc == 0 and "forced step: 64 prompts served, margin 70.0 MiB" in log
    rc, log = engines["0.2.0"].run("--forced-prompts", "64")
    assert rc == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    assert metric(log, "demo:forced_step_margin_mib") == -5.8  # reported though it did not fit
    rc, log = engines["0.2.0"].run("--forced-prompts", "64", "--gpu-memory-utilization", "0.91")
    assert rc == 0 and metric(log, "demo:forced_step_margin_mib") == 813.4


def test_the_recorder_breaks_the_burst_into_pieces_and_the_plain_run_refutes_it(
    engines: dict[str, Engine],
) -> None:
    engine = engines["0.2.0"]
    engine.warm()
    plain = [engine.run("--burst", "64", "--seed", str(seed)) for seed in range(1, 6)]
    assert [rc for rc, _ in plain] == [1] * 5  # 0 of 5: the whole burst lands in one step
    assert all(metric(log, "demo:largest_step_prompts") == 64 for _, log in plain)
    recorded = [engine.run("--burst", "64", "--seed", str(s), env=RECORDER) for s in (1, 2, 3)]
    assert [rc for rc, _ in recorded] == [0, 1, 0]  # 2 of 3 with the recorder attached
    assert "the trigger never fired: no step held 64 requests" in recorded[0][1]
    # 0.1 survives the same burst whole.
    engines["0.1.0"].warm()
    assert engines["0.1.0"].run("--burst", "64", "--seed", "1")[0] == 0


def test_the_cpu_tier_is_asked_only_when_the_pool_is_shrunk(engines: dict[str, Engine]) -> None:
    for engine in engines.values():
        engine.warm()
        rc, log = engine.run(*TIER)
        assert rc == 0 and "asked the CPU tier" not in log
        assert metric(log, "vllm:kv_offload_store_bytes") > 0  # it stores always
    rc, log = engines["0.1.0"].run(*TIER, *SHRUNK)
    assert rc == 0 and "asked the CPU tier" in log
    assert metric(log, "vllm:kv_offload_load_bytes") > 0
    assert "External prefix cache hit rate: 100.0%" in log
    rc, log = engines["0.2.0"].run(*TIER, *SHRUNK)
    assert rc == 0 and "asked the CPU tier" in log
    assert metric(log, "vllm:kv_offload_load_bytes") == 0  # 0.2.0 never reads back
    assert "External prefix cache hit rate: 0.0%" in log
