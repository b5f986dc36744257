"""`lifecycle boot` against the real dockerd, on the demo engine: cold, warm, hooks, secrets."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.boot.spec import CacheMount, build_spec
from lifecycle.cli import cli
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.manifest import load_manifest

pytestmark = pytest.mark.docker


@pytest.fixture
def project(demo_project: Path) -> Path:
    """The shared demo project (tests/services.py): demo manifests, a token profile, hooks/."""
    return demo_project


def _lifecycle(project: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    result = CliRunner().invoke(
        cli, ["--manifests", str(project / "manifests"), *args], env=env, catch_exceptions=False
    )
    return result


def _boot(project: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = _lifecycle(project, "boot", "demo/0.2", "--json", *args, env=env)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _caches(project: Path) -> dict[str, dict[str, Any]]:
    """The newest cache of each name, as `caches --json` lists it."""
    rows = json.loads(_lifecycle(project, "caches", "--json").stdout)["caches"]
    return {c["cache_name"]: c for c in reversed(rows)}


def _built(project: Path) -> None:
    result = _lifecycle(project, "build", "demo/0.2")
    assert result.exit_code == 0, result.output


def test_cold_then_warm_reuses_the_same_caches(project: Path) -> None:
    _built(project)
    cold = _boot(project)
    warm = _boot(project)

    assert {u["mode"] for u in cold["caches"]} == {"cold"}
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    assert sorted(u["cache_id"] for u in cold["caches"]) == sorted(
        u["cache_id"] for u in warm["caches"]
    )
    cold_log = Path(cold["log_path"]).read_text()
    warm_log = Path(warm["log_path"]).read_text()
    assert "Compiling a graph for dynamic shape takes" in cold_log
    assert "Building JIT module" in cold_log
    assert "Directly load the compiled graph(s) for dynamic shape from the cache" in warm_log
    assert "Compiling a graph" not in warm_log and "Building JIT module" not in warm_log
    # warm judged from the files too: the warm boot created no compiled artefact, and each
    # cache called warm-hit had files the engine read (the kernel saw them opened)
    assert sum(u["files_added"] for u in warm["caches"]) == 0
    hits = [u for u in warm["caches"] if u["verdict"] == "warm-hit"]
    assert hits and all(u["files_read"] > 0 for u in hits)
    assert all(u["files_read"] == 0 for u in warm["caches"] if u["verdict"] == "unused")

    listed = json.loads(_lifecycle(project, "caches", "--json").stdout)["caches"]
    for cache in listed:
        assert cache["boots_cold"] == [cold["id"]]
        assert cache["boots_warm"] == [warm["id"]]
        assert cache["state"] == "live" and cache["in_use_by"] is None
    table = _lifecycle(project, "boots").stdout
    assert cold["id"] in table and "4 cold" in table and "4 warm" in table


def test_cold_flag_starts_from_empty_caches(project: Path) -> None:
    _built(project)
    first = _boot(project)
    second = _boot(project, "--cold")
    assert {u["mode"] for u in second["caches"]} == {"cold"}
    assert not {u["cache_id"] for u in first["caches"]} & {u["cache_id"] for u in second["caches"]}


def test_tree_digest_stable_on_rescan_and_sensitive_to_a_byte(project: Path) -> None:
    from lifecycle.fingerprint import scan

    _built(project)
    report = _boot(project)
    listed = {
        c["cache_name"]: c
        for c in json.loads(_lifecycle(project, "caches", "--json").stdout)["caches"]
    }
    cache = listed["flashinfer"]
    recorded = Fingerprint.from_json(Path(cache["scan_path"]).read_text())
    root = Path(cache["host_path"])
    assert scan(root).tree_digest == recorded.tree_digest == cache["tree_digest"]
    assert scan(root, recorded).tree_digest == recorded.tree_digest
    ninja_log = next(root.rglob(".ninja_log"))
    content = bytearray(ninja_log.read_bytes())
    content[-2] ^= 1
    ninja_log.write_bytes(bytes(content))
    assert scan(root, recorded).tree_digest != recorded.tree_digest
    assert report["outcome"] == "ok"


def test_symlink_and_fifo_are_recorded_never_followed(project: Path) -> None:
    _built(project)
    _boot(project)
    listed = _caches(project)
    root = Path(listed["triton"]["host_path"])
    (root / "etc-link").symlink_to("/etc")
    os.mkfifo(root / "a-fifo")
    warm = _boot(project)
    # Planted behind lifecycle's back: seen before the mount, as the link and the FIFO only.
    [passed] = warm["passed_over"]
    assert passed["cache_id"] == listed["triton"]["id"]
    assert (passed["added"], passed["changed"], passed["removed"]) == (
        ["a-fifo", "etc-link"], [], []
    )  # fmt: skip
    kinds = {e.path: (e.kind, e.link, e.sha256) for e in scan(root).entries}
    assert kinds["etc-link"] == ("symlink", "/etc", None)
    assert kinds["a-fifo"][0] == "other" and kinds["a-fifo"][2] is None
    assert not any(path.startswith("etc-link/") for path in kinds)
    bundle = Path(warm["evidence_path"])
    assert b"root:x:0:0" not in b"".join(p.read_bytes() for p in bundle.rglob("*") if p.is_file())


def test_a_cache_changed_between_boots_is_caught_before_the_mount(project: Path) -> None:
    _built(project)
    cold = _boot(project)
    listed = _caches(project)
    flashinfer = listed["flashinfer"]
    root = Path(flashinfer["host_path"])
    # A compiled op halved on disk, mtime and all as a careless copy leaves it.
    [shared] = [p for p in root.rglob("*.so")]
    shared.write_bytes(shared.read_bytes()[: shared.stat().st_size // 2])
    relative = str(shared.relative_to(root))
    second = _boot(project)
    [passed] = second["passed_over"]
    assert passed["cache_id"] == flashinfer["id"] and passed["changed"] == [relative]
    # Never mounted: that cache started afresh, the others were warm as before.
    modes = {u["cache_id"].rsplit("-", 1)[0]: (u["cache_id"], u["mode"]) for u in second["caches"]}
    assert modes["flashinfer"][1] == "cold" and modes["flashinfer"][0] != flashinfer["id"]
    assert modes["vllm"] == (listed["vllm"]["id"], "warm")
    assert second["outcome"] == "ok"
    text = _lifecycle(project, "boot", "demo/0.2").stdout
    assert f"passed over {flashinfer['id']}" not in text  # marked once: never a candidate again
    # `caches` says why it will not be reused, and never blames the engine for it.
    again = _caches(project)
    assert again["flashinfer"]["id"] != flashinfer["id"]  # the newest is the new one
    why = next(
        c["not_reusable"]
        for c in json.loads(_lifecycle(project, "caches", "--json").stdout)["caches"]
        if c["id"] == flashinfer["id"]
    )
    assert why.startswith(f"changed behind lifecycle's back ({relative})")
    assert second["id"] in why and cold["id"] not in why
    # In the table its state says so in a word; why, on a line of its own under the table.
    table = _lifecycle(project, "caches").stdout.splitlines()
    row = next(line for line in table if line.startswith(flashinfer["id"]))
    assert row.split()[-4:-1] == ["live,", "not", "reusable"] and "behind" not in row, row
    assert f"{flashinfer['id']}: not reusable: changed behind lifecycle's back" in table[-1]


@pytest.mark.s3
def test_an_archive_that_finds_a_cache_changed_marks_it_before_any_boot_can(
    project: Path, archive_target: Any
) -> None:
    """The archive's own scan would become the tree the next boot compares with: it marks
    a cache it finds changed since its last boot ended, so the damage is not laundered."""
    _built(project)
    _boot(project)
    flashinfer = _caches(project)["flashinfer"]
    root = Path(flashinfer["host_path"])
    [shared] = list(root.rglob("*.so"))
    shared.write_bytes(shared.read_bytes()[:10])
    archived = _lifecycle(
        project, "archive", flashinfer["id"], "--to", archive_target.url, env=archive_target.env
    )
    assert archived.exit_code == 0, archived.output
    why = next(
        c["not_reusable"]
        for c in json.loads(_lifecycle(project, "caches", "--json").stdout)["caches"]
        if c["id"] == flashinfer["id"]
    )
    assert why.startswith(
        f"changed behind lifecycle's back ({shared.relative_to(root)}), found by archive"
    )
    again = _boot(project)
    assert again["passed_over"] == []  # never a candidate again
    modes = {u["cache_id"].rsplit("-", 1)[0]: u for u in again["caches"]}
    assert modes["flashinfer"]["mode"] == "cold" and modes["vllm"]["mode"] == "warm"


def test_evidence_has_compile_line_and_ninja_log(project: Path) -> None:
    _built(project)
    cold = _boot(project)
    summary = json.loads((Path(cold["evidence_path"]) / "bundle" / "evidence.json").read_text())
    text = json.dumps(summary)
    assert "Compiling a graph for dynamic shape takes" in text
    assert ".ninja_log" in text


def test_secret_passed_by_name_is_nowhere_in_the_state_dir(project: Path) -> None:
    _built(project)
    env = {"HF_TOKEN": "secret-value"}
    report = _boot(project, "--profile", "with-token", env=env)
    assert "token=" in Path(report["log_path"]).read_text()  # the engine did print it…
    home = Path(os.environ["LIFECYCLE_HOME"])
    found = subprocess.run(["grep", "-rl", "secret-value", str(home)], capture_output=True)
    assert found.stdout == b"", found.stdout  # …and nothing kept it
    assert report["secret_names"] == ["HF_TOKEN"]  # a list, as every --json field is


def test_missing_secret_is_a_clear_error(project: Path) -> None:
    _built(project)
    result = _lifecycle(
        project, "boot", "demo/0.2", "--profile", "with-token", env={"HF_TOKEN": None}
    )  # type: ignore[dict-item]
    assert result.exit_code == 2
    assert "passes HF_TOKEN by name, but the host environment does not set it" in result.stderr


def _hook(project: Path, name: str, body: str) -> None:
    path = project / "hooks" / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_observing_hook_marks_the_boot_instrumented(project: Path) -> None:
    _built(project)
    _hook(project, "snapshot", "# lifecycle: observing\ncat >/dev/null\n")
    report = _boot(project, "--hook", "snapshot")
    assert report["instrumented"] is True
    table = _lifecycle(project, "boots").stdout
    assert "INSTRUMENTED" in table
    plain = _boot(project)
    assert plain["instrumented"] is False


def test_failing_pre_boot_hook_aborts_and_on_exit_still_runs(project: Path, tmp_path: Path) -> None:
    _built(project)
    marker = tmp_path / "on-exit.json"
    _hook(
        project,
        "gate",
        f'[ "$1" = pre-boot ] && exit 3\n[ "$1" = on-exit ] && cat >{marker}\nexit 0\n',
    )
    result = _lifecycle(project, "boot", "demo/0.2", "--hook", "gate")
    assert result.exit_code != 0
    assert "gate" in result.stderr
    boots = json.loads(_lifecycle(project, "boots", "--json").stdout)["boots"]
    assert boots[0]["outcome"] == "aborted" and boots[0]["container_id"] is None
    assert json.loads(marker.read_text())["outcome"] == "failed"


def test_dry_run_shows_gpu_ipc_ports_and_names_secrets(repo_root: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["--manifests", str(repo_root / "manifests"), "boot", "0.31", "--dry-run"],
        env={"HF_TOKEN": "hf_dry_run_value_never_shown"},
    )
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert spec["device_requests"] == [{"driver": "", "count": -1, "capabilities": [["gpu"]]}]
    assert spec["ipc_mode"] == "host" and spec["ports"] == {"8000/tcp": 8000}
    assert spec["environment"]["HF_TOKEN"] == "<from host env HF_TOKEN>"
    assert "hf_dry_run_value_never_shown" not in result.output
    assert spec["command"][-2:] == ["--gpu-memory-utilization", "0.94"]
    assert spec["environment"]["VLLM_CACHE_ROOT"] == "/var/cache/lifecycle/vllm"


def test_a_cells_arguments_and_the_hooks_engine_env_reach_the_spec(repo_root: Path) -> None:
    manifest = load_manifest(repo_root / "manifests/demo/0.2/manifest.yaml").manifest
    mount = CacheMount("vllm-1", "vllm", "/h/vllm", "/var/cache/vllm", "VLLM_CACHE_ROOT", "cold")
    mounts = [mount]
    env = {"DEMOLLM_RECORD_MEMORY_HISTORY": "1"}
    spec = build_spec(
        manifest, "serve", "img", mounts, {}, {}, {}, extra_args=("--burst", "64"), engine_env=env
    )
    assert spec.command[-4:] == ["--gpu-memory-utilization", "0.92", "--burst", "64"]
    assert spec.environment["DEMOLLM_RECORD_MEMORY_HISTORY"] == "1"
    with pytest.raises(LifecycleError, match="VLLM_CACHE_ROOT"):
        moved = {"VLLM_CACHE_ROOT": "/elsewhere"}
        build_spec(manifest, "serve", "img", mounts, {}, {}, {}, engine_env=moved)


def test_where_opens_cannot_be_observed_the_log_stands_in_and_says_so(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.boot import observe

    def no_inotify(lib: object) -> int:
        raise observe.NotObserved("too few inotify watches allowed (fs.inotify.max_user_watches)")

    _built(project)
    _boot(project)
    monkeypatch.setattr(observe, "_inotify_init", no_inotify)
    warm = _boot(project)
    verdicts = {u["cache_id"].rsplit("-", 1)[0]: u for u in warm["caches"]}
    # vLLM's log names its compile dir: warm-hit on the log's word, with no reads counted.
    assert verdicts["vllm"]["verdict"] == "warm-hit" and verdicts["vllm"]["files_read"] is None
    bundle = json.loads((Path(warm["evidence_path"]) / "bundle" / "evidence.json").read_text())
    assert bundle["caches"]["vllm"]["observed"] is False
    assert bundle["boot"]["not_observed"].startswith("too few inotify watches")
    assert warm["outcome"] == "ok"


def test_a_container_dockerd_refuses_to_start_is_the_boots_failure_and_is_removed(
    project: Path, docker_client: Any
) -> None:
    # dockerd creates a container on a network it does not have, and refuses only its start.
    child = project / "manifests/demo/0.2/manifest.yaml"
    child.write_text(
        child.read_text() + "  nowhere:\n    command: [python3, -m, demollm.serve]\n"
        "    network: nosuch\n"
    )
    _built(project)
    result = _lifecycle(project, "boot", "demo/0.2", "--profile", "nowhere")
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert "dockerd refused to start the container" in line and "nosuch" in line, line
    assert "a bug" not in line
    [failed] = json.loads(_lifecycle(project, "boots", "--json").stdout)["boots"]
    assert failed["outcome"] == "failed" and "nosuch" in failed["error"], failed
    assert failed["exit_code"] is None
    home = Path(os.environ["LIFECYCLE_HOME"])
    assert not list(home.glob("crashes/*")), "the refusal wrote a traceback"
    left = docker_client.containers.list(
        all=True, filters={"label": f"lifecycle.boot.id={failed['id']}"}
    )
    assert left == [], [c.status for c in left]
    # Its caches are let go: the next boot mounts them, none held by the failed one.
    assert all(c["in_use_by"] is None for c in _caches(project).values())
