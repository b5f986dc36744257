"""Results: `result add`, acceptance commands, `results`, instrumented marks, pins of results.

The first half records results in a real ledger against boot rows written directly (and an
acceptance runner passed in). The second half boots the demo engine for real through the CLI,
archives to the real S3 server and tears down.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.ledger import MIGRATIONS, Ledger
from lifecycle.ledger.boots import BootRecord, CacheRecord, CacheUse, finish_boot, start_boot
from lifecycle.ledger.results import result_by_id
from lifecycle.manifest.model import Acceptance
from lifecycle.results.acceptance import CommandRun, accept, project_root, run_command
from lifecycle.results.model import (
    ResultError,
    ResultRequest,
    add_result,
    canonical_bytes,
    canonical_result,
    parse_metric,
    result_digest,
)
from tests.archive_support import damage, read_json
from tests.services import ArchiveTarget, boot_demo, run_lifecycle

NOW = datetime(2026, 10, 10, 9, 0, tzinfo=UTC)


# ---- recording results, without services -------------------------------------------------------


def _boot(
    ledger: Ledger, boot_id: str = "b-1", caches: Path = Path("/nonexistent/caches"), **changes: Any
) -> BootRecord:
    """A finished boot row with one cold cache, as `lifecycle boot` leaves them, its dir under
    `caches` (made by the caller when a verb needs it there)."""
    fields: dict[str, Any] = {
        "id": boot_id, "started_at": "2026-10-10T08:00:00+00:00",
        "ended_at": "2026-10-10T08:01:00+00:00", "exit_code": 0, "outcome": "ok", "error": None,
        "host": "gpu-7", "profile": "serve", "manifest_name": "demo", "manifest_digest": "d" * 64,
        "image_id": "sha256:" + "e" * 64, "image_tag": "lifecycle/demo:0.2.0-dddddddddddd",
        "container_id": "c" * 64, "hooks": "[]", "instrumented": False,
        "secret_names": '["HF_TOKEN"]', "log_path": None, "evidence_path": None,
    }  # fmt: skip
    boot = BootRecord(**(fields | changes))
    cache = CacheRecord(
        f"flashinfer-{boot_id}", "k" * 64, "flashinfer", "demo", "d" * 64, "sha256:" + "e" * 64,
        "unknown", str(caches / boot_id), "/var/cache/flashinfer",
        created_at=boot.started_at,
    )  # fmt: skip
    use = CacheUse(boot.id, cache.id, "cold")
    start_boot(ledger, boot, [cache], [use])
    if boot.outcome != "running":
        finish_boot(ledger, boot, [use], [], [])
    return boot


def test_schema_4_adds_results_and_their_archives(tmp_path: Path) -> None:
    Ledger.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "ledger.sqlite3")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) >= 4
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"results", "result_archives"} <= tables


def test_metrics_parse_as_json_scalars_or_text() -> None:
    assert parse_metric("margin_mib=174") == ("margin_mib", 174)
    assert parse_metric("util=0.94") == ("util", 0.94)
    assert parse_metric("passed=true") == ("passed", True)
    assert parse_metric("engine=vllm 0.31") == ("engine", "vllm 0.31")
    assert parse_metric("shape=[1, 2]") == ("shape", "[1, 2]")  # no structure in a metric
    assert parse_metric("odd=NaN") == ("odd", "NaN")  # not JSON: kept as the text given
    for bad in ("nothing", "=3", "a b=1"):
        with pytest.raises(ResultError):
            parse_metric(bad)


def test_a_result_keeps_its_document_and_its_digest_covers_it(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    boot = _boot(ledger)
    document = json.dumps({"metrics": {"margin_mib": 170, "steps": 64}, "note": "ladder"}).encode()
    request = ResultRequest(
        boot.id, "batch-burst-64", "pass", metrics={"margin_mib": 174}, document=document
    )
    result = add_result(ledger, request, NOW)

    assert json.loads(result.metrics) == {"margin_mib": 174, "steps": 64}  # the flag wins
    assert result.note == "ladder" and result.source == "manual" and not result.instrumented
    assert result.document_path is not None
    assert Path(result.document_path).read_bytes() == document
    assert result.document_sha256 == hashlib.sha256(document).hexdigest()
    canonical = canonical_result(result)
    assert result.digest == hashlib.sha256(canonical_bytes(canonical)).hexdigest()
    assert result.digest == result_digest(canonical)
    assert result_by_id(ledger, result.id) == result
    assert result.id.startswith("r-20261010T090000-")


def test_a_result_of_an_instrumented_boot_says_so(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    hooks = json.dumps([{"name": "memory-snapshot", "observing": True}])
    boot = _boot(ledger, hooks=hooks, instrumented=True)
    result = add_result(ledger, ResultRequest(boot.id, "burst", "pass"), NOW)
    assert result.instrumented and canonical_result(result)["instrumented"] is True


def test_what_cannot_be_recorded_is_refused_and_named(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    boot = _boot(ledger, "b-20261010T080000-abcdef")
    _boot(ledger, "b-running", outcome="running", ended_at=None)
    add_result(ledger, ResultRequest(boot.id, "smoke", "pass"), NOW)
    doc = b'{"metrics": {"a": [1]}}'
    newline = b'{"metrics": {"margin\\n": 1}}'
    cases = [
        (ResultRequest("b-20261010T080000-abcdeg", "x", "pass"), f"did you mean {boot.id!r}"),
        (ResultRequest("b-running", "x", "pass"), "has not ended"),
        (ResultRequest(boot.id, "smoke", "fail"), "already has a result named 'smoke'"),
        (ResultRequest(boot.id, "x", "passed"), "expected one of pass, fail, inconclusive"),
        (ResultRequest(boot.id, "a name", "pass"), "result name 'a name'"),
        # Whole names: `re.match` with a `$` would take the trailing newline.
        (ResultRequest(boot.id, "smoke\n", "pass"), r"result name 'smoke\\n'"),
        (ResultRequest(boot.id, "x", "pass", document=newline), r"metric name 'margin\\n'"),
        (ResultRequest(boot.id, "x", "pass", document=b"[1]", document_where="r.json"), "r.json:"),
        (ResultRequest(boot.id, "x", "pass", document=doc), "metric 'a'"),
    ]
    for request, message in cases:
        with pytest.raises(ResultError, match=message):
            add_result(ledger, request, NOW)


class _Runner:
    """Stands in for the acceptance command: answers as told, remembers what it was given."""

    def __init__(self, run: CommandRun) -> None:
        self.run = run
        self.calls: list[tuple[list[str], Path, dict[str, Any], dict[str, str]]] = []

    def __call__(
        self, command: Sequence[str], cwd: Path, stdin: str, env: Mapping[str, str], t: float
    ) -> CommandRun:
        self.calls.append((list(command), cwd, json.loads(stdin), dict(env)))
        return self.run


def _accept(tmp_path: Path, run: CommandRun, **boot: Any) -> tuple[Any, _Runner]:
    ledger = Ledger.open(tmp_path / "home")
    record = _boot(ledger, **boot)
    runner = _Runner(run)
    manifest = tmp_path / "project/manifests/demo/0.2/manifest.yaml"
    acceptance = Acceptance(command=["./accept.py"], name="smoke", timeout_s=30)
    env = {"HF_TOKEN": "hf_" + "s" * 34, "PATH": "/usr/bin"}
    return accept(ledger, record, acceptance, manifest, env, run=runner, now=lambda: NOW), runner


def test_acceptance_exit_code_and_json_become_the_result(tmp_path: Path) -> None:
    out = json.dumps({"metrics": {"kv_tokens": 120832, "echo": "hf_" + "s" * 34}, "note": "ok"})
    result, runner = _accept(tmp_path, CommandRun(0, out, "warming up\n"))
    assert (result.name, result.status, result.source) == ("smoke", "pass", "acceptance")
    # Its own secret never reaches the ledger; a metric named like a token keeps its value.
    assert json.loads(result.metrics) == {"kv_tokens": 120832, "echo": "<redacted:HF_TOKEN>"}
    assert result.note == "ok"
    [(command, cwd, context, env)] = runner.calls
    assert command == ["./accept.py"] and cwd == (tmp_path / "project").resolve()
    assert context["boot_id"] == "b-1" and context["caches"]["flashinfer"]["mode"] == "cold"
    assert env["LIFECYCLE_BOOT_ID"] == "b-1"


@pytest.mark.parametrize(
    ("run", "status", "note"),
    [
        (CommandRun(1, "", "batch crashed\n"), "fail", "stderr: batch crashed"),
        (CommandRun(3, "{}", ""), "inconclusive", "exit 3: the acceptance could not decide"),
        (CommandRun(None, "", ""), "inconclusive", "timed out after 30 s"),
        (CommandRun(0, "kv ok", ""), "inconclusive", "stdout: not JSON"),
    ],
)
def test_acceptance_that_fails_or_cannot_decide(
    tmp_path: Path, run: CommandRun, status: str, note: str
) -> None:
    result, _ = _accept(tmp_path, run)
    assert result.status == status and note in (result.note or "")


def test_an_acceptance_past_its_timeout_leaves_nothing_it_started_running(tmp_path: Path) -> None:
    """A load generator the acceptance started in the background ran on after its timeout,
    into the next cell of a night: everything it started is killed with it."""
    pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pid_file}; sleep 300"
    done = run_command(["sh", "-c", script], tmp_path, "", dict(os.environ), 1.0)
    assert done.rc is None  # killed for its timeout
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"pid {child} outlived its acceptance"


def test_an_acceptance_is_judged_by_its_exit_not_by_the_end_of_its_output(
    tmp_path: Path,
) -> None:
    """One that exits 0 while a child it started still holds its output was waited for until
    its timeout, then called timed out: an acceptance that passed read as inconclusive."""
    script = 'sleep 30 & echo \'{"note": "ok"}\''
    started = time.monotonic()
    done = run_command(["sh", "-c", script], tmp_path, "", dict(os.environ), 10.0)
    assert done.rc == 0 and '"ok"' in done.out, done
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("holds_output", [False, True])
def test_an_acceptance_that_exits_leaves_nothing_it_started_running(
    tmp_path: Path, holds_output: bool
) -> None:
    """A load generator the acceptance started in the background ran on after it exited 0,
    into the next cell of a night: what it left running is stopped, and said."""
    pid_file = tmp_path / "child.pid"
    quiet = "" if holds_output else " > /dev/null 2>&1"
    script = f'sleep 300{quiet} & echo $! > {pid_file}; echo \'{{"note": "ok"}}\''
    started = time.monotonic()
    done = run_command(["sh", "-c", script], tmp_path, "", dict(os.environ), 30.0)
    assert done.rc == 0 and '"ok"' in done.out, done
    assert not _alive(int(pid_file.read_text())), "the child outlived its acceptance"
    assert time.monotonic() - started < 5
    assert done.left_running == 1


def test_what_an_acceptance_left_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"(trap '' TERM; sleep 300) > /dev/null 2>&1 & echo $! > {pid_file}; exit 1"
    done = run_command(["sh", "-c", script], tmp_path, "", dict(os.environ), 30.0)
    assert done.rc == 1, done
    assert not _alive(int(pid_file.read_text())), "the child outlived its acceptance"
    assert done.left_running >= 1


def test_a_document_over_the_cap_is_refused_in_one_line_never_passed(tmp_path: Path) -> None:
    """An acceptance printing a result document of 17 MiB was read whole, held in memory and
    passed: past MAX_DOCUMENT_BYTES its stdout is no longer kept, and a cut document is never
    read, whatever the exit."""
    script = "import json, sys; json.dump({'note': 'ok', 'pad': 'x' * (17 * 2**20)}, sys.stdout)"
    (tmp_path / "project").mkdir()
    ledger = Ledger.open(tmp_path / "home")
    acceptance = Acceptance(command=[sys.executable, "-c", script], name="big", timeout_s=60)
    manifest = tmp_path / "project/manifests/demo/0.2/manifest.yaml"
    result = accept(ledger, _boot(ledger), acceptance, manifest, dict(os.environ), now=lambda: NOW)
    assert (result.status, result.document_sha256) == ("inconclusive", None)
    cap = "over the 16777216 bytes (16 MiB) a result document may hold; not read"
    assert result.note == f"stdout: {17 * 2**20 + 25} bytes, {cap}"


def test_the_result_says_what_the_acceptance_left_running(tmp_path: Path) -> None:
    result, _ = _accept(tmp_path, CommandRun(0, '{"note": "kv ok"}', "", left_running=2))
    assert result.status == "pass"
    assert result.note == "kv ok; 2 process(es) it left running were stopped"


def test_a_hook_may_leave_a_service_running(tmp_path: Path) -> None:
    """A hook is not an acceptance: one that starts a service and exits 0 succeeded, and the
    service it started is its purpose."""
    from lifecycle.hooks import run_hook_process

    pid_file = tmp_path / "service.pid"
    script = f"sleep 300 > /dev/null 2>&1 & echo $! > {pid_file}"
    done = run_hook_process(["sh", "-c", script], "", tmp_path, 30.0)
    child = int(pid_file.read_text())
    try:
        assert done.rc == 0 and done.left_running == 0 and _alive(child)
    finally:
        os.kill(child, 9)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()  # a zombie has ended, only not reaped yet
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_failed_boot_fails_its_acceptance_without_running_it(tmp_path: Path) -> None:
    result, runner = _accept(tmp_path, CommandRun(0, "", ""), outcome="failed", exit_code=137)
    assert result.status == "fail" and "boot failed (exit 137)" in (result.note or "")
    assert runner.calls == []


def test_acceptance_is_part_of_a_profile_only_where_declared() -> None:
    from lifecycle.manifest.model import BootProfile

    # Manifests written before `acceptance` existed keep their digest (and image tag).
    assert "acceptance" not in BootProfile().model_dump(mode="json")
    declared = BootProfile.model_validate({"acceptance": {"command": ["./accept.py"]}})
    assert declared.model_dump(mode="json")["acceptance"] == {
        "command": ["./accept.py"], "name": "acceptance", "timeout_s": 600.0
    }  # fmt: skip


def test_project_root_is_above_the_manifests_dir(tmp_path: Path) -> None:
    manifest = tmp_path / "p/manifests/0.31/manifest.yaml"
    assert project_root(manifest) == (tmp_path / "p").resolve()
    assert project_root(tmp_path / "elsewhere/m.yaml") == (tmp_path / "elsewhere").resolve()


def test_a_pin_by_hand_cannot_pass_for_a_results_and_unpin_result_takes_only_its_own(
    isolated_home: Path,
) -> None:
    ledger = Ledger.open(isolated_home / "lifecycle")
    boot = _boot(ledger, caches=isolated_home / "caches")
    (isolated_home / "caches" / boot.id).mkdir(parents=True)  # pin keeps only a dir that is there
    result = add_result(ledger, ResultRequest(boot.id, "smoke", "pass"), NOW)
    ledger.close()
    [cache] = [f"flashinfer-{boot.id}"]
    home: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": None}

    def lifecycle(*args: str) -> Any:
        return CliRunner().invoke(cli, list(args), env=home, catch_exceptions=False)

    def pins() -> list[str]:
        listed = json.loads(lifecycle("caches", "--json").stdout)["caches"]
        return next(c["pins"] for c in listed if c["id"] == cache)

    reserved_shapes = (
        f"result {result.id}: keep for the bisect", f"result {result.id}", f"result {result.id}:x"
    )  # fmt: skip
    for reserved in reserved_shapes:
        forged = lifecycle("pin", cache, "--reason", reserved)
        assert forged.exit_code == 2, forged.output
        assert forged.stdout == "" and len(forged.stderr.splitlines()) == 1, forged.stderr
        assert f"--reason {reserved!r}: `result <id>` marks a pin `pin RESULT` made" in (
            forged.stderr
        )
    assert pins() == []
    listed = json.loads(lifecycle("results", "--json").stdout)["results"]
    assert [r["pinned"] for r in listed] == [[]]

    by_hand = f"result {result.id} (the bisect)"  # no result's id has a space: not its pin
    assert lifecycle("pin", cache, "--reason", by_hand).exit_code == 0
    assert lifecycle("pin", result.id, "--reason", "keep").exit_code == 0
    assert pins() == [by_hand, f"result {result.id}: keep"]
    unpinned = lifecycle("unpin", result.id)
    assert unpinned.exit_code == 0, unpinned.output
    assert pins() == [by_hand]


# ---- for real: the demo engine booted through the CLI, the S3 server ---------------------------

ACCEPT_PY = """\
#!/usr/bin/env python3
import json, sys
boot = json.load(sys.stdin)
log = open(boot["log_path"]).read()
applied = "demo patch: kernel-mix applied" in log
print(json.dumps({"metrics": {"patch_applied": applied, "caches": len(boot["caches"])},
                  "note": "read the boot log"}))
sys.exit(0 if applied else 1)
"""

OBSERVING_HOOK = "#!/bin/sh\n# lifecycle: observing\nexit 0\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, demo_images: None) -> Path:
    """The demo manifests with an `accepted` profile, demo/0.2 built once for the module, an
    acceptance script and an observing hook. Each test has its own (empty) ledger."""
    repo = Path(__file__).resolve().parent.parent
    root = tmp_path_factory.mktemp("results") / "project"
    for version in ("0.1", "0.2"):
        shutil.copytree(repo / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(
        child.read_text() + "profiles:\n  accepted:\n    command: [python3, -m, demollm.serve]\n"
        "    network: none\n    acceptance:\n      command: [./accept.py]\n      name: smoke\n"
    )
    (root / "accept.py").write_text(ACCEPT_PY)
    (root / "accept.py").chmod(0o755)
    (root / "hooks").mkdir()
    (root / "hooks/observe").write_text(OBSERVING_HOOK)
    (root / "hooks/observe").chmod(0o755)
    # Module fixtures run before the per-test home is set: build in a home of the module's own.
    home = {"LIFECYCLE_HOME": str(tmp_path_factory.mktemp("build-home"))}
    built = run_lifecycle(root, "build", "demo/0.2", env=home)
    assert built.exit_code == 0, built.output
    return root


@pytest.mark.docker
@pytest.mark.s3
def test_a_team_pin_that_cannot_be_read_still_pins_its_result_and_unpin_removes_it(
    project: Path, archive_target: ArchiveTarget
) -> None:
    """One damaged pin made `results --from` and `unpin` of its result fail for good: its key
    still names the result it pins (as gc keeps it); only an unpin of the whole result, which
    cannot match a reason it cannot read, removes it."""
    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    cold = boot_demo(project, "--cold")
    result = _add(project, cold["id"], "--name", "kept", "--status", "pass", env=env)
    run_lifecycle(project, "archive", "--all", env=env)
    pinned = run_lifecycle(project, "pin", result["id"], "--reason", "the verdict", env=env)
    assert pinned.exit_code == 0 and "pinned for the team at" in pinned.stdout, pinned.output
    damaged = f"{archive_target.prefix}/pins/{result['id']}/{'0' * 64}.json"
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=damaged, Body=b"{half")
    url = f"s3://{archive_target.bucket}/{damaged}"

    listed = run_lifecycle(project, "results", "--from", archive_target.url, "--json", env=env)
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)["results"]
    assert "the verdict" in row["pins"] and any(url in pin for pin in row["pins"]), row["pins"]
    table = run_lifecycle(project, "results", "--from", archive_target.url, env=env)
    assert f"{result['id']}: pinned by a pin that cannot be read: {url}: " in table.stdout

    by_reason = run_lifecycle(project, "unpin", result["id"], "--reason", "the verdict", env=env)
    assert by_reason.exit_code == 0, by_reason.output
    assert f"unpinned for the team: {archive_target.url}: the verdict" in by_reason.stdout
    assert f"still pinned for the team by a pin that cannot be read: {url}: " in by_reason.stdout
    assert damaged in archive_target.objects()
    answer = json.loads(
        run_lifecycle(project, "results", "--from", archive_target.url, "--json", env=env).stdout
    )
    assert [pin for pin in answer["results"][0]["pins"] if url in pin], "it still pins"

    whole = run_lifecycle(project, "unpin", result["id"], "--json", env=env)
    assert whole.exit_code == 0, whole.output
    assert any(url in line for line in json.loads(whole.stdout)["team"]), whole.stdout
    assert damaged not in archive_target.objects()


@pytest.mark.docker
@pytest.mark.s3
def test_a_result_record_that_cannot_be_read_is_left_out_and_named_and_hides_no_other(
    project: Path, archive_target: ArchiveTarget
) -> None:
    """One damaged or hand-made object under results/ made `results --from` fail for good, for
    everybody, and an audit of a result beside it fail too: it is left out and named; only the
    audit of a result none of whose records can be read fails, saying so in one line."""
    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    cold = boot_demo(project, "--cold")
    result = _add(project, cold["id"], "--name", "kept", "--status", "pass", env=env)
    run_lifecycle(project, "archive", "--all", env=env)
    results = f"{archive_target.prefix}/results"
    # Garbage under a well-formed key of a result of its own (a half-written object) ...
    damaged_id = "r-20260101T000000-000000"
    garbage = f"{results}/{damaged_id}/{'0' * 64}.json"
    # ... and a record of another format, named by its own bytes, beside the real one's record.
    pin = {"format": "lifecycle-pin/1", "target": result["id"], "reason": "crafted"}
    body = json.dumps({**pin, "host": "elsewhere", "pinned_at": "2026-01-01T00:00:00+00:00"})
    crafted = f"{results}/{result['id']}/{hashlib.sha256(body.encode()).hexdigest()}.json"
    for key, data in ((garbage, b"{half"), (crafted, body.encode())):
        archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=data)
    urls = {f"s3://{archive_target.bucket}/{key}" for key in (garbage, crafted)}

    listed = run_lifecycle(project, "results", "--from", archive_target.url, "--json", env=env)
    assert listed.exit_code == 0, listed.output
    answer = json.loads(listed.stdout)
    assert [row["id"] for row in answer["results"]] == [result["id"]]
    assert answer["unreadable"].keys() == urls, answer
    table = run_lifecycle(project, "results", "--from", archive_target.url, env=env)
    assert table.exit_code == 0 and result["id"] in table.stdout, table.output
    assert damaged_id not in table.stdout and "crafted" not in table.stdout
    for url in urls:
        assert f"left out: cannot read {url}: " in table.stderr, table.stderr

    chain = run_lifecycle(
        project, "audit", "result", result["id"], "--from", archive_target.url, "--json", env=env
    )
    assert chain.exit_code == 0, chain.output
    audited = json.loads(chain.stdout)
    assert audited["result"]["id"] == result["id"] and "crafted" not in chain.stdout
    [warning] = [w for w in audited["warnings"] if w.startswith("left out: cannot read")]
    assert f"s3://{archive_target.bucket}/{crafted}: " in warning, audited["warnings"]

    unreadable = run_lifecycle(
        project, "audit", "result", damaged_id, "--from", archive_target.url, env=env
    )
    assert unreadable.exit_code == 1, unreadable.output
    [line] = unreadable.stderr.strip().splitlines()
    assert f"result {damaged_id}: its record cannot be read: s3://" in line, line
    assert garbage in line and "sha256" in line, line


@pytest.mark.docker
@pytest.mark.s3
def test_archiving_again_writes_a_damaged_result_record_anew_past_a_damaged_one_beside_it(
    project: Path, archive_target: ArchiveTarget
) -> None:
    """The archive that writes a lost result record again read every record of the result
    there, to reuse one that says the same; one that could not be read stopped it, so the
    damage could never be repaired by archiving again. It is passed over, named, and the
    record is written anew: verify and audit from the archive pass after."""
    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    cold = boot_demo(project, "--cold")
    result = _add(project, cold["id"], "--name", "healed", "--status", "pass", env=env)
    [archived] = result["archives"]
    damage(archive_target.client, archive_target.bucket, archived["record_key"])
    # A second record of the result, damaged too (a stopped run wrote it, bit rot since).
    stray = f"{archive_target.prefix}/results/{result['id']}/{'0' * 64}.json"
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=stray, Body=b"{half")

    again = run_lifecycle(project, "archive", "--all", "--json", env=env)
    assert again.exit_code == 0, again.output
    assert f"set aside: cannot read s3://{archive_target.bucket}/{stray}: " in again.stderr
    assert stray not in archive_target.objects()
    assert all(r["results"] == [result["id"]] for r in json.loads(again.stdout)["caches"])
    verified = run_lifecycle(project, "verify", result["id"], "--from", archive_target.url)
    assert verified.exit_code == 0, verified.output
    chain = run_lifecycle(
        project, "audit", "result", result["id"], "--from", archive_target.url, "--json"
    )
    assert chain.exit_code == 0, chain.output
    assert json.loads(chain.stdout)["result"]["id"] == result["id"]


def _add(project: Path, boot_id: str, *args: str, env: dict[str, str | None] | None = None) -> Any:
    result = run_lifecycle(project, "result", "add", boot_id, "--json", *args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _results(project: Path) -> dict[str, dict[str, Any]]:
    return {
        r["id"]: r
        for r in json.loads(run_lifecycle(project, "results", "--json").stdout)["results"]
    }


@pytest.mark.docker
@pytest.mark.s3
def test_an_instrumented_result_is_marked_in_table_json_and_audit(project: Path) -> None:
    plain = boot_demo(project, "--cold")
    observed = boot_demo(project, "--hook", "observe")
    assert observed["instrumented"] and not plain["instrumented"]
    a = _add(project, plain["id"], "--name", "burst", "--status", "fail")
    b = _add(project, observed["id"], "--name", "burst", "--status", "pass", "--metric", "ok=1")
    assert (a["instrumented"], b["instrumented"]) == (False, True)

    rows = _results(project)
    assert rows[b["id"]]["instrumented"] is True and rows[a["id"]]["instrumented"] is False
    table = run_lifecycle(project, "results").stdout.splitlines()
    assert "FLAGS" in table[0]
    [row_b] = [line for line in table if line.startswith(b["id"])]
    [row_a] = [line for line in table if line.startswith(a["id"])]
    assert row_b.rstrip().endswith("INSTRUMENTED") and "INSTRUMENTED" not in row_a
    text = run_lifecycle(
        project, "result", "add", observed["id"], "--name", "again", "--status", "inconclusive"
    )
    assert "INSTRUMENTED: the boot ran with observing hook observe" in text.stdout

    chain = json.loads(run_lifecycle(project, "audit", "result", b["id"], "--json").stdout)
    assert chain["result"]["instrumented"] is True and chain["boot"]["instrumented"] is True
    assert chain["boot"]["hooks"] == [{"name": "observe", "observing": True}]
    assert "INSTRUMENTED" in run_lifecycle(project, "audit", "result", b["id"]).stdout
    assert "INSTRUMENTED" not in run_lifecycle(project, "audit", "result", a["id"]).stdout


@pytest.mark.docker
@pytest.mark.s3
def test_a_profile_acceptance_records_a_result_of_each_boot(project: Path) -> None:
    booted = boot_demo(project, "--cold", "--profile", "accepted")
    [result] = [r for r in _results(project).values() if r["boot_id"] == booted["id"]]
    assert (result["name"], result["status"], result["source"]) == ("smoke", "pass", "acceptance")
    assert result["metrics"] == {"caches": 4, "patch_applied": True}
    assert result["note"] == "read the boot log" and result["document"] is not None
    assert boot_demo(project)["id"] not in {r["boot_id"] for r in _results(project).values()}


@pytest.mark.docker
@pytest.mark.s3
def test_result_add_archives_at_once_and_again_after_a_warm_boot(
    project: Path, archive_target: ArchiveTarget
) -> None:
    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    cold = boot_demo(project, "--cold")
    first = _add(project, cold["id"], "--name", "smoke", "--status", "pass", env=env)
    prefix = archive_target.prefix
    objects = archive_target.objects()
    caches = sorted(u["cache_id"] for u in cold["caches"])
    [archived] = first["archives"]
    assert archived["record_key"].startswith(f"{prefix}/results/{first['id']}/")
    assert all(any(k.startswith(f"{prefix}/caches/{c}/versions/") for k in objects) for c in caches)
    assert {f"{prefix}/caches/{c}/results/{first['id']}" for c in caches} <= set(objects)
    assert any(k.startswith(f"{prefix}/boots/{cold['id']}/") for k in objects)
    record = read_json(archive_target.client, archive_target.bucket, archived["record_key"])
    assert archived["location"] == archive_target.url and objects[archived["record_key"]] > 0
    # The result names the exact version of each cache it stood on, and its boot's record.
    stood_on = {ref["cache_id"]: ref for ref in record["caches"]}
    for use in cold["caches"]:
        ref = stood_on[use["cache_id"]]
        assert ref["tree_digest"] == use["tree_digest_after"]
        assert f"/versions/{use['tree_digest_after']}." in ref["record"]["key"]
    assert record["boot"]["key"].startswith(f"boots/{cold['id']}/")

    warm = boot_demo(project)  # the caches are live again: their records predate this boot
    second = _add(project, warm["id"], "--name", "smoke", "--status", "pass", env=env)
    assert second["archives"], "the stale caches were archived again, then the result"
    chain = run_lifecycle(
        project, "audit", "result", second["id"], "--from", archive_target.url, "--json"
    )
    assert chain.exit_code == 0, chain.output
    assert {c["mode"] for c in json.loads(chain.stdout)["caches"]} == {"warm"}


@pytest.mark.docker
@pytest.mark.s3
def test_a_result_added_after_its_caches_were_archived_goes_with_the_next_archive(
    project: Path, archive_target: ArchiveTarget
) -> None:
    cold = boot_demo(project, "--cold")
    archived = run_lifecycle(project, "archive", "--all", "--to", archive_target.url, "--json")
    assert archived.exit_code == 0, archived.output
    late = _add(project, cold["id"], "--name", "late", "--status", "pass")  # no location set
    assert late["archives"] == [] and _results(project)[late["id"]]["archives"] == []
    again = run_lifecycle(project, "archive", "--all", "--to", archive_target.url, "--json")
    assert again.exit_code == 0, again.output
    reports = json.loads(again.stdout)["caches"]
    assert all(r["results"] == [late["id"]] for r in reports) and len(reports) == 4
    prefix = f"{archive_target.prefix}/results/{late['id']}/"
    assert [key for key in archive_target.objects() if key.startswith(prefix)]
    assert _results(project)[late["id"]]["archives"][0]["location"] == archive_target.url


@pytest.mark.docker
@pytest.mark.s3
def test_a_pinned_results_caches_survive_teardown_until_unpinned(
    project: Path, archive_target: ArchiveTarget
) -> None:
    kept = boot_demo(project, "--cold")
    other = boot_demo(project, "--cold")
    result = _add(project, kept["id"], "--name", "keep-me", "--status", "pass")
    behind = sorted(u["cache_id"] for u in kept["caches"])
    reason = f"result {result['id']}"
    pinned = run_lifecycle(project, "pin", result["id"])
    assert pinned.exit_code == 0, pinned.output
    assert all(f"pinned {c}: {reason}" in pinned.stdout for c in behind)
    by_hand = run_lifecycle(project, "pin", behind[0], "--reason", "by hand")
    assert by_hand.exit_code == 0
    assert _results(project)[result["id"]]["pinned"] == behind

    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    down = run_lifecycle(project, "teardown", "--archive", "--yes", "--json", env=env)
    assert down.exit_code == 0, down.output
    plan = {c["id"]: c for c in json.loads(down.stdout)["plan"]["caches"]}
    for cache_id in behind:
        assert plan[cache_id]["action"] == "keep", plan[cache_id]
        assert f"pinned: {reason}" in plan[cache_id]["why"][0]
    listed = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
    states = {c["id"]: c["state"] for c in listed}
    assert all(states[c] != "torn-down" for c in behind)
    assert all(states[u["cache_id"]] == "torn-down" for u in other["caches"])

    unpinned = run_lifecycle(project, "unpin", result["id"])
    assert unpinned.exit_code == 0, unpinned.output
    assert f"unpinned {behind[0]}; still pinned: by hand" in unpinned.stdout
    twice = run_lifecycle(project, "unpin", result["id"])
    assert twice.exit_code == 2 and f"no pin with reason {reason!r}" in twice.stderr
    assert run_lifecycle(project, "unpin", behind[0]).exit_code == 0
    down = run_lifecycle(project, "teardown", "--archive", "--yes", env=env)
    assert down.exit_code == 0 and "removed 4 caches," in down.stdout, down.output


@pytest.mark.docker
@pytest.mark.s3
def test_pinning_a_result_after_its_teardown_says_why_only_the_team_pin_was_made(
    project: Path, archive_target: ArchiveTarget
) -> None:
    env: dict[str, str | None] = {"LIFECYCLE_ARCHIVE": archive_target.url}
    cold = boot_demo(project, "--cold")
    result = _add(project, cold["id"], "--name", "gone", "--status", "pass", env=env)
    down = run_lifecycle(project, "teardown", "--archive", "--yes", env=env)
    assert down.exit_code == 0 and "removed 4 caches," in down.stdout, down.output
    pinned = run_lifecycle(project, "pin", result["id"], env=env)
    assert pinned.exit_code == 0, pinned.output
    assert f"pinned for the team at {archive_target.url}/pins/{result['id']}/" in pinned.stdout
    assert (
        f"nothing pinned on this host: {result['id']}: already torn down;"
        " nothing on this host to keep\n" in pinned.stdout
    )
    report = json.loads(run_lifecycle(project, "pin", result["id"], "--json", env=env).stdout)
    assert report["pinned"] == [] and "already torn down" in report["not_here"]
    unpinned = run_lifecycle(project, "unpin", result["id"], env=env)
    assert unpinned.exit_code == 0, unpinned.output
    assert f"nothing unpinned on this host: {result['id']} has no pin" in unpinned.stdout
