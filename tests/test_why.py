"""`lifecycle why` and the boot outcomes it reads, on the demo engine against the real dockerd:
an env var in the engine's hashed set moves its cache dir (a warm mount that missed, named by
`why`), a boot stopped at its --timeout, a warm boot that spilled JIT output outside its
caches, and the bad input `why` refuses."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.services import _demo_root, run_lifecycle

pytestmark = pytest.mark.docker

SIDE = "DEMOLLM_SIDE_CHANNEL_HOST"
_PROFILES = (
    f"  side:\n    command: [python3, -m, demollm.serve]\n    from_host: [{SIDE}]\n"
    "    network: none\n"
    "  slow:\n    command: [python3, -m, demollm.serve, --serve-seconds, '60']\n"
    "    network: none\n"
    # As torch does with its precompiled header: JIT output written outside every cache.
    "  spills:\n    command: [sh, -c, 'd=/tmp/torchinductor_root/precompiled_headers;"
    " mkdir -p $d && head -c 2000000 /dev/zero > $d/c4x.h.gch;"
    ' exec python3 -m demollm.serve "$@"\', sh]\n    network: none\n'
    # Runs no engine and logs nothing: no compile dir, no hashes to compare.
    "  silent:\n    command: [sh, -c, 'true']\n    engine: false\n    network: none\n"
)


@pytest.fixture
def project(tmp_path: Path, demo_images: None) -> Path:
    return _demo_root(tmp_path, _PROFILES)


def _boot(project: Path, profile: str, **env: str) -> dict[str, Any]:
    result = run_lifecycle(project, "boot", "demo/0.2", "--profile", profile, "--json", env=env)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {u["cache_id"].rsplit("-", 1)[0]: u["verdict"] for u in report["caches"]}


def test_a_hashed_env_var_moves_the_cache_dir_and_why_names_it(project: Path) -> None:
    cold = _boot(project, "side", **{SIDE: "10.0.0.7"})
    warm = _boot(project, "side", **{SIDE: "10.0.0.7"})
    moved = _boot(project, "side", **{SIDE: "10.0.0.9"})
    assert cold["verdict"] == "cold-compiled" and cold["warmth"] == "cold"
    assert warm["verdict"] == "warm-hit" and warm["warmth"] == "warm"
    # Named in the log: vLLM's compile dir, FlashInfer's prebuilt op. Triton's and Inductor's
    # files were there but nothing shows a read: unused, never "warm".
    assert _verdicts(warm) == {
        "vllm": "warm-hit", "flashinfer": "warm-hit", "triton": "unused", "inductor": "unused"
    }  # fmt: skip
    # Same image, same lifecycle cache key: mounted warm, and the engine compiled anyway.
    assert {u["mode"] for u in moved["caches"]} == {"warm"}
    assert _verdicts(moved)["vllm"] == "mounted-but-missed"
    assert moved["verdict"] == "mounted-but-missed"
    assert moved["warmth"].startswith("missed (vllm: +")
    table = run_lifecycle(project, "boots").stdout
    assert moved["warmth"] in table

    result = run_lifecycle(project, "why", moved["id"])
    assert result.exit_code == 0, result.output
    assert f"compared with {warm['id']}: warm (the newest warm boot of" in result.stdout
    assert f"env {SIDE}: 10.0.0.7 → 10.0.0.9 (in vLLM's env hash)" in result.stdout
    assert "compile-dir vLLM:" in result.stdout and "hash env:" in result.stdout
    assert "cache vllm: warm-hit → mounted-but-missed (mounted warm, and the engine compiled" in (
        result.stdout
    )
    assert "\n  missed: mounted warm, the engine still compiled into its caches (vllm +" in (
        result.stdout
    )
    for same in ("image", "GPU arch", "manifest digest", "config hash", "code hash"):
        assert same in result.stdout.split("the same: ")[1]

    report = json.loads(run_lifecycle(project, "why", moved["id"], "--json").stdout)
    assert report["format"] == "lifecycle-why/1"
    assert report["boot"]["verdict"] == "mounted-but-missed"
    assert report["against"]["id"] == warm["id"]
    [env] = [c for c in report["changed"] if c["kind"] == "env"]
    assert (env["name"], env["then"], env["now"]) == (SIDE, "10.0.0.7", "10.0.0.9")
    assert env["note"] == "in vLLM's env hash"
    # Against the cold boot that filled the caches: the first boot is cold, and says so.
    first = run_lifecycle(project, "why", cold["id"], "--against", warm["id"]).stdout
    assert "this boot created the cache the other reused" in first


def test_a_cache_passed_over_as_damaged_is_named_as_the_cause(project: Path) -> None:
    _boot(project, "serve")
    _boot(project, "serve")
    home = Path(os.environ["LIFECYCLE_HOME"])
    [built] = home.glob("caches/flashinfer-*/**/*.so")
    built.write_bytes(built.read_bytes()[:10])  # behind lifecycle's back, between two boots
    after = _boot(project, "serve")
    assert [d["cache_id"] for d in after["passed_over"]] == [built.parts[len(home.parts) + 1]]

    why = run_lifecycle(project, "why", after["id"]).stdout
    damaged = after["passed_over"][0]["cache_id"]
    assert f"passed over {damaged}: changed behind lifecycle's back since its last scan" in why
    assert f"cache flashinfer: warm-hit → cold-compiled ({damaged} was passed over" in why, why
    report = json.loads(run_lifecycle(project, "why", after["id"], "--json").stdout)
    [passed] = report["boot"]["passed_over"]
    assert passed["cache_name"] == "flashinfer" and passed["changed"] == [
        str(built.relative_to(home / "caches" / damaged))
    ]


def test_a_crafted_cache_key_factors_file_is_compared_as_data(project: Path) -> None:
    first = _boot(project, "side", **{SIDE: "10.0.0.7"})
    second = _boot(project, "side", **{SIDE: "10.0.0.7"})
    [copy] = Path(second["evidence_path"]).joinpath("bundle").rglob("cache_key_factors.json")
    copy.write_text('{"env": "not a mapping", "code_hash": ["x"], "extra": {"a": 1}}')
    result = run_lifecycle(project, "why", second["id"], "--against", first["id"], "--json")
    assert result.exit_code == 0, result.output
    changed = {c["name"]: c for c in json.loads(result.stdout)["changed"]}
    assert changed["extra"]["kind"] == "factor" and changed["code_hash"]["now"] == ["x"]
    copy.write_text("{ not json")
    result = run_lifecycle(project, "why", second["id"], "--against", first["id"])
    assert result.exit_code == 0, result.output


def test_a_boot_stopped_at_its_timeout_is_timeout(project: Path) -> None:
    result = run_lifecycle(project, "boot", "demo/0.2", "--profile", "slow", "--timeout", "3")
    assert result.exit_code == 1
    assert "timeout" in result.stdout and "--timeout of 3 s" in result.stdout
    [boot] = json.loads(run_lifecycle(project, "boots", "--json").stdout)["boots"]
    assert boot["outcome"] == "timeout" and boot["exit_code"] in (137, 143)
    assert boot["error"] == "timed out: stopped after the --timeout of 3 s"
    # A timed-out boot's caches may hold half a build: the next boot does not reuse them,
    # and `caches` says so, with why.
    again = _boot(project, "serve")
    assert {u["mode"] for u in again["caches"]} == {"cold"}
    rows = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
    stale = {c["id"]: c["not_reusable"] for c in rows if boot["id"] in c["boots_cold"]}
    assert len(stale) == 4
    assert set(stale.values()) == {
        f"its last boot {boot['id']} ended timeout: it may hold a half-built file"
    }
    fresh = [c["not_reusable"] for c in rows if again["id"] in c["boots_cold"]]
    assert fresh == [None] * 4
    assert f"not reusable: its last boot {boot['id']} ended timeout" in (
        run_lifecycle(project, "caches").stdout
    )


def test_a_warm_boot_that_spills_outside_its_caches_is_partial(project: Path) -> None:
    _boot(project, "spills")
    warm = _boot(project, "spills")
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    [spilled] = warm["untracked"]
    assert spilled["path"] == "/tmp/torchinductor_root/precompiled_headers/c4x.h.gch"
    assert spilled["bytes"] == 2_000_000 and spilled["change"] == "added"
    assert warm["verdict"] == "partial"
    assert warm["warmth"] == "warm (partial: 1.9 MiB written outside tracked caches)"
    assert warm["warmth"] in run_lifecycle(project, "boots").stdout
    why = run_lifecycle(project, "why", warm["id"]).stdout
    assert "outside tracked caches: 1.9 MiB in 1 files, lost with the container" in why
    assert "  /tmp/torchinductor_root/precompiled_headers: 1.9 MiB in 1 files" in why


def test_why_refuses_what_it_cannot_explain(project: Path) -> None:
    only = _boot(project, "serve")
    cache = only["caches"][0]["cache_id"]
    for args, message in (
        (("b-nope",), "no boot 'b-nope' in this host's ledger"),
        ((cache,), f"{cache} is a cache, not a boot: `lifecycle audit cache {cache}`"),
        ((only["id"],), "no other boot of demo / serve ended ok"),
        ((only["id"], "--against", "b-x"), "no boot 'b-x'"),
    ):
        result = run_lifecycle(project, "why", *args)
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.output
    added = run_lifecycle(project, "result", "add", only["id"], "--name", "x", "--status", "pass")
    assert added.exit_code == 0, added.output
    (listed,) = json.loads(run_lifecycle(project, "results", "--json").stdout)["results"]
    result = run_lifecycle(project, "why", listed["id"])
    assert f"is a result: `lifecycle why {only['id']}`" in result.stderr, result.output
    # A boot whose evidence is gone is still compared from the ledger.
    shutil.rmtree(only["evidence_path"])
    other = _boot(project, "serve")
    assert run_lifecycle(project, "why", only["id"], "--against", other["id"]).exit_code == 0
    # No other boot was warm: the newest that ended ok, and it says so.
    why = run_lifecycle(project, "why", other["id"]).stdout
    chosen = "the newest boot of demo / serve that ended ok (none was warm)"
    assert f"compared with {only['id']}: cold ({chosen})" in why, why
    assert os.environ["LIFECYCLE_HOME"]


def test_damaged_evidence_is_named_in_one_line_read_within_a_bound(project: Path) -> None:
    """A boot's spec.json or evidence.json cut short, or grown to 2 GiB (sparse): `why` names
    the file (exit 2, a record that does not parse), reads no more than a record's bound of it,
    and writes nothing into the home (no crash file: it is no bug)."""
    cold = _boot(project, "serve")
    warm = _boot(project, "serve")
    home = Path(os.environ["LIFECYCLE_HOME"])
    spec = Path(warm["evidence_path"]) / "spec.json"
    spec.write_bytes(spec.read_bytes()[: spec.stat().st_size // 2])
    summary = Path(cold["evidence_path"]) / "bundle" / "evidence.json"
    with summary.open("r+b") as grown:
        grown.truncate(2 * 2**30)
    for damaged, boot in ((spec, warm), (summary, cold)):
        started = time.monotonic()
        result = run_lifecycle(project, "why", boot["id"], "--against", cold["id"], "--json")
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"{damaged}: damaged evidence of boot"), result.stderr
        assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
        assert time.monotonic() - started < 5, f"{damaged} was read whole"
        spec.write_bytes(b"{}")  # the next one, on its own
    assert not (home / "crashes").exists()


def test_a_boot_killed_mid_run_leaves_its_caches_not_reusable(
    project: Path, docker_client: Any
) -> None:
    """SIGKILL of lifecycle while its engine runs: the boot stays `running` with no process,
    and `caches` says its caches may hold half a build, naming the boot."""
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests")]
    process = subprocess.Popen(
        [*command, "boot", "demo/0.2", "--profile", "slow"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    boots: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        running: list[Any] = []
        while time.monotonic() < deadline and not running:
            time.sleep(0.2)
            boots = json.loads(run_lifecycle(project, "boots", "--json").stdout)["boots"]
            if boots:  # the engine runs once its container does: the caches are mounted
                label = f"lifecycle.boot.id={boots[0]['id']}"
                running = docker_client.containers.list(filters={"label": label})
        [boot] = boots
        assert boot["outcome"] == "running"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        rows = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
        assert len(rows) == 4
        for row in rows:
            assert row["not_reusable"] == (
                f"its boot {boot['id']} died while holding it (process gone): it may hold a"
                " half-built file"
            )
        assert "not reusable: its boot" in run_lifecycle(project, "caches").stdout
    finally:
        process.kill()
        for mine in boots:  # this test's engine only: other tests may be running theirs
            label = f"lifecycle.boot.id={mine['id']}"
            for container in docker_client.containers.list(all=True, filters={"label": label}):
                container.remove(force=True)


def test_why_says_a_boot_whose_engine_never_ran_has_nothing_to_explain(project: Path) -> None:
    # A pre-boot hook that refuses: the boot is recorded `aborted`, no container was made. `why`
    # explained it as "no JIT output: its caches hold no file" and listed vLLM's hashes as
    # changed to "(unset)" against a later boot, never saying the engine did not run.
    hook = project / "hooks" / "refuse"
    hook.write_text('#!/bin/sh\n[ "$1" = pre-boot ] && exit 1\nexit 0\n')
    hook.chmod(0o755)
    refused = run_lifecycle(project, "boot", "demo/0.2", "--hook", "refuse")
    assert refused.exit_code != 0, refused.output
    ran = _boot(project, "serve")
    [aborted] = [b for b in _boots(project) if b["outcome"] == "aborted"]
    for args in ((aborted["id"],), (ran["id"], "--against", aborted["id"])):
        result = run_lifecycle(project, "why", *args)
        assert result.exit_code == 2, result.output
        assert f"boot {aborted['id']} ended aborted before its engine ran" in result.stderr


def _boots(project: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(run_lifecycle(project, "boots", "--json").stdout)[
        "boots"
    ]
    return listed


def test_why_never_calls_the_same_what_neither_boot_showed(project: Path) -> None:
    # Two boots of a program that logs no compile dir nor hashes: `why` listed "the same: vLLM
    # compile dir, env hash, config hash, compiler hash, code hash", facts it never saw.
    _boot(project, "silent")
    second = _boot(project, "silent")
    result = run_lifecycle(project, "why", second["id"], "--json")
    assert result.exit_code == 0, result.output
    same = json.loads(result.stdout)["same"]
    assert "vLLM compile dir" not in same and not [s for s in same if s.endswith(" hash")], same
    assert "profile" in same and "image" in same  # what both boots have is still compared
