"""The real-JIT stand-in engine through the whole cycle: the production patch series built
onto it, cold then warm boots judged from Inductor's own counters and from compile time,
archive with content, teardown, restore, warm again; a warm boot that is secretly partial
(Inductor's precompiled header rebuilt outside the caches) is caught; `why` on it.

Real dockerd, real SeaweedFS, real TorchInductor compiling C++ on CPU: the slowest tests of
the suite (about 3 minutes, plus the image once per machine), so they boot as few times as
the promises allow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import ArchiveTarget, run_lifecycle, standin_root

pytestmark = [pytest.mark.docker, pytest.mark.s3]

REF = "standin/0.31"
COUNTERS = re.compile(r"inductor counters: ((?:\w+=\d+\s*)+)$", re.M)
TOTAL = re.compile(r"torch\.compile takes ([\d.]+) s in total")
# Precompiled headers on, as torch defaults: the header goes to /tmp, outside every cache.
WITH_HEADERS = """
caches:
  inductor:
    settings:
      TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS: "1"
"""


def _ok(project: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    result = run_lifecycle(project, *args, env=env)
    assert result.exit_code == 0, result.output
    return result


def _boot(project: Path, profile: str = "compile", **env: str) -> dict[str, Any]:
    result = _ok(project, "boot", REF, "--profile", profile, "--json", env=env)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _use(report: dict[str, Any], name: str) -> dict[str, Any]:
    [use] = [u for u in report["caches"] if u["cache_id"].rsplit("-", 1)[0] == name]
    return use


def _jit(report: dict[str, Any]) -> tuple[dict[str, int], float]:
    """Inductor's counters and the compile time, as the engine printed them."""
    log = Path(report["log_path"]).read_text()
    [counters] = COUNTERS.findall(log)
    pairs = dict(pair.split("=") for pair in counters.split())
    return {k: int(v) for k, v in pairs.items()}, float(TOTAL.findall(log)[-1])


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {u["cache_id"].rsplit("-", 1)[0]: u["verdict"] for u in report["caches"]}


@pytest.fixture(autouse=True)
def containers_removed(docker_client: Any) -> Iterator[None]:
    """The stand-in's stopped boot containers go afterwards: a partial boot's layer holds the
    ~150 MB precompiled header it wrote."""
    yield
    label = "lifecycle.manifest.name=vllm-prod-standin"
    for container in docker_client.containers.list(all=True, filters={"label": label}):
        if container.status == "exited":
            container.remove()


@pytest.fixture
def project(tmp_path: Path, standin_image: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = standin_root(tmp_path)
    monkeypatch.chdir(root)
    # --force: the manifest names its base by tag, and the stand-in image may have been
    # rebuilt (a new engine program) since an image of this digest was built on it.
    _ok(root, "build", REF, "--force")
    return root


def test_cold_warm_archive_teardown_restore_warm(
    project: Path, archive_target: ArchiveTarget
) -> None:
    cold = _boot(project)
    counters, cold_s = _jit(cold)
    assert counters["fxgraph_cache_miss"] >= 1 and counters["fxgraph_cache_hit"] == 0
    assert counters["autograd_cache_miss"] >= 1
    assert _verdicts(cold) == {
        "vllm": "cold-compiled", "flashinfer": "empty", "triton": "empty", "inductor": "empty"
    }  # fmt: skip
    assert cold["verdict"] == "cold-compiled" and cold["untracked"] == []
    # The production patches took effect: vLLM's own loader ran them, with this boot's values.
    log = Path(cold["log_path"]).read_text()
    assert "loading vllm.general_plugins with vllm's own loader" in log
    assert f"lifecycle provenance LIFECYCLE_BOOT_ID={cold['id']}" in log
    assert f"lifecycle provenance LIFECYCLE_MANIFEST_DIGEST={cold['manifest_digest']}" in log
    assert f"lifecycle provenance LIFECYCLE_IMAGE={cold['image_tag']}" in log
    assert "lifecycle kv tier: gpu only" in log
    bundle = json.loads((Path(cold["evidence_path"]) / "bundle" / "evidence.json").read_text())
    vllm = bundle["caches"]["vllm"]
    assert vllm["units"]["inductor fx graph entry"] == {"total": 1, "new": 1}
    assert vllm["units"]["compiled kernel"]["new"] >= 1
    assert vllm["units"]["vllm compile dir"] == {"total": 1, "new": 1}
    assert bundle["copied_bytes"] > 0 and bundle["log"]["verdict"] == "compiled"
    assert any(e["path"].endswith(".cpp") and e["copied"] for e in vllm["evidence"])

    warm = _boot(project)
    counters, warm_s = _jit(warm)
    assert counters["fxgraph_cache_hit"] >= 1 and counters["fxgraph_cache_miss"] == 0
    assert counters["autograd_cache_hit"] >= 1 and counters["autograd_cache_miss"] == 0
    assert warm_s <= 0.3 * cold_s, (cold_s, warm_s)
    assert warm["verdict"] == "warm-hit" and warm["warmth"] == "warm"
    assert _verdicts(warm)["vllm"] == "warm-hit"
    assert sum(u["files_added"] for u in warm["caches"]) == 0

    cache_ids = [u["cache_id"] for u in warm["caches"]]
    _ok(project, "archive", "--all", "--with-content", "--to", archive_target.url)
    _ok(project, "teardown", "--yes", "--to", archive_target.url, env=archive_target.env)
    states = {
        c["id"]: c["state"] for c in json.loads(_ok(project, "caches", "--json").stdout)["caches"]
    }
    assert {states[c] for c in cache_ids} == {"torn-down"}
    for cache_id in cache_ids:
        _ok(project, "restore", cache_id, "--from", archive_target.url)

    again = _boot(project)
    counters, again_s = _jit(again)
    assert {u["mode"] for u in again["caches"]} == {"warm"}
    assert counters["fxgraph_cache_hit"] >= 1 and counters["fxgraph_cache_miss"] == 0
    assert again_s <= 0.3 * cold_s, (cold_s, again_s)
    assert again["verdict"] == "warm-hit"
    # why, on the real engine: the cold boot made the caches the warm ones reused.
    why = json.loads(_ok(project, "why", cold["id"], "--json").stdout)
    assert why["against"]["verdict"] == "warm-hit" and why["boot"]["verdict"] == "cold-compiled"
    [vllm_cache] = [c for c in why["changed"] if c["kind"] == "cache"]
    assert vllm_cache["name"] == "vllm" and "created the cache" in vllm_cache["note"]
    assert {"image", "manifest digest", "vLLM compile dir", "env hash"} <= set(why["same"])


def test_an_engine_that_logs_nothing_is_judged_by_what_it_touched(project: Path) -> None:
    """A bare torch.compile of a decoder block, which prints no path and no log line: its
    verdicts rest on the files it opened and wrote, which the kernel reported."""
    cold = _boot(project, "plain", STANDIN_SEQ="16")
    counters, _ = _counters_only(cold)
    assert counters["fxgraph_cache_miss"] >= 1 and counters["fxgraph_cache_hit"] == 0
    assert _verdicts(cold) == {
        "vllm": "empty", "flashinfer": "empty", "triton": "empty", "inductor": "cold-compiled"
    }  # fmt: skip
    assert cold["verdict"] == "cold-compiled"

    warm = _boot(project, "plain", STANDIN_SEQ="16")
    counters, log = _counters_only(warm)
    assert counters["fxgraph_cache_hit"] >= 1 and counters["fxgraph_cache_miss"] == 0
    assert counters["autograd_cache_hit"] >= 1 and counters["autograd_cache_miss"] == 0
    assert "/" not in log  # not one path for a log reader to find
    inductor = _use(warm, "inductor")
    assert inductor["verdict"] == "warm-hit" and inductor["mode"] == "warm"
    assert inductor["files_read"] > 0 and inductor["files_added"] == 0
    assert warm["verdict"] == "warm-hit" and warm["warmth"] == "warm"
    bundle = json.loads((Path(warm["evidence_path"]) / "bundle" / "evidence.json").read_text())
    seen = bundle["caches"]["inductor"]["observed"]
    assert seen["files_written"] == 0 and any(p.endswith(".so") for p in seen["read"])
    assert bundle["caches"]["inductor"]["log_names_cache"] is False
    why = json.loads(_ok(project, "why", warm["id"], "--json").stdout)
    assert why["summary"].startswith("warm: the engine read files of its caches (inductor ")

    eager = _boot(project, "plain-eager")
    assert _use(eager, "inductor")["verdict"] == "unused"
    assert _use(eager, "inductor")["files_read"] == 0
    assert eager["verdict"] == "unused"

    moved = _boot(project, "plain", STANDIN_SEQ="32")
    counters, _ = _counters_only(moved)
    assert counters["fxgraph_cache_miss"] >= 1
    assert _use(moved, "inductor")["verdict"] == "mounted-but-missed"
    why = json.loads(_ok(project, "why", moved["id"], "--json").stdout)
    assert why["against"]["id"] == warm["id"] and "none was warm" not in why["against"]["chosen"]
    [env] = [c for c in why["changed"] if c["kind"] == "env"]
    assert (env["name"], env["then"], env["now"]) == ("STANDIN_SEQ", "16", "32")
    assert env["note"].startswith("the likely cause: after it changed, the engine compiled ")
    assert env["note"].endswith(" files into inductor")
    assert why["summary"].startswith("missed: mounted warm, the engine still compiled")


def _counters_only(report: dict[str, Any]) -> tuple[dict[str, int], str]:
    """Inductor's counters, the one line the plain workload prints; and the rest of its log."""
    log = Path(report["log_path"]).read_text()
    [counters] = COUNTERS.findall(log)
    pairs = dict(pair.split("=") for pair in counters.split())
    return {k: int(v) for k, v in pairs.items()}, COUNTERS.sub("", log)


def test_a_secretly_partial_warm_boot_is_caught(tmp_path: Path, standin_image: str) -> None:
    """On the engine that logs nothing: every counter a hit, the inductor cache read and not
    written, and still the precompiled header was built again outside it: partial."""
    project = standin_root(tmp_path, WITH_HEADERS)
    _ok(project, "build", REF, "--force")
    _boot(project, "plain", STANDIN_SEQ="16")
    warm = _boot(project, "plain", STANDIN_SEQ="16")
    counters, _ = _counters_only(warm)
    # Inductor's counters say warm, and so does every tracked cache …
    assert counters["fxgraph_cache_hit"] >= 1 and counters["fxgraph_cache_miss"] == 0
    assert _verdicts(warm)["inductor"] == "warm-hit"
    # … but the precompiled header was built again, in the container's own layer.
    headers = [w for w in warm["untracked"] if "/precompiled_headers/" in w["path"]]
    assert any(w["path"].endswith(".gch") and w["bytes"] > 50_000_000 for w in headers)
    assert warm["verdict"] == "partial"
    assert re.fullmatch(
        r"warm \(partial: \d+\.\d MiB written outside tracked caches\)", warm["warmth"]
    )
    table = _ok(project, "boots").stdout
    assert warm["warmth"] in table
    why = json.loads(_ok(project, "why", warm["id"], "--json").stdout)
    assert why["format"] == "lifecycle-why/1" and why["boot"]["verdict"] == "partial"
    [untracked] = [c for c in why["changed"] if c["kind"] == "untracked"]
    assert "precompiled_headers" in untracked["note"]
    assert why["summary"].startswith("partly warm: the engine read files of its caches")
