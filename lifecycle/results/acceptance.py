"""A boot profile's acceptance command (`acceptance: {command, name, timeout_s}`): run on the
host from the project root once the boot is recorded, its outcome a result (exit 0 pass,
1 fail, else inconclusive; stdout, if any, the result's document). Why on the host, and what
it is given: docs/verbs/results.md, "Acceptance".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.hooks import run_hook_process, tail
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, cache_by_id, cache_uses
from lifecycle.ledger.results import ResultRecord
from lifecycle.manifest.model import Acceptance
from lifecycle.redact import MIN_SECRET_LEN, redact
from lifecycle.results.model import (
    MAX_DOCUMENT_BYTES,
    ResultError,
    ResultRequest,
    add_result,
    read_document,
)

STDERR_TAIL = 600  # characters of the command's stderr kept in the note when it did not pass


@dataclass(frozen=True)
class CommandRun:
    """How the acceptance command ended; `rc` is None when it was killed for its timeout."""

    rc: int | None
    out: str
    err: str
    left_running: int = 0  # processes it left running when it exited, stopped then
    out_left_out: int = 0  # bytes of stdout past MAX_DOCUMENT_BYTES, read and not kept
    err_left_out: int = 0  # bytes of stderr before the tail kept, read and not kept


Runner = Callable[[Sequence[str], Path, str, Mapping[str, str], float], CommandRun]


def run_command(
    command: Sequence[str], cwd: Path, stdin: str, env: Mapping[str, str], timeout_s: float
) -> CommandRun:
    """The real runner, as a hook runs: in a process group of its own, judged by its own exit
    within `timeout_s` (a child it leaves holding its output is not waited for). Unlike a
    hook's, everything it started is stopped when it ends, by its exit or its timeout: a load
    generator left running would load the next cell of a night. Of its stdout the first
    MAX_DOCUMENT_BYTES are kept, of its stderr a tail: it may print without end."""
    done = run_hook_process(
        command, stdin, cwd, timeout_s, env, reap=True, document_bytes=MAX_DOCUMENT_BYTES
    )
    return CommandRun(
        done.rc, done.out, done.err, done.left_running, done.out_left_out, done.err_left_out
    )


def project_root(manifest_file: Path) -> Path:
    """The directory holding the `manifests/` dir the manifest is in (else the manifest's)."""
    for directory in manifest_file.resolve().parents:
        if directory.name == "manifests":
            return directory.parent
    return manifest_file.resolve().parent


def accept(
    ledger: Ledger,
    boot: BootRecord,
    acceptance: Acceptance,
    manifest_file: Path,
    host_env: Mapping[str, str],
    *,
    run: Runner = run_command,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ResultRecord:
    """Run the acceptance of a finished boot and record its outcome as a result."""
    name = acceptance.name
    if boot.outcome != "ok":
        why = f"boot {boot.outcome} (exit {boot.exit_code}): {boot.error or 'see its log'}"
        note = f"{why}; the acceptance command was not run"
        return add_result(ledger, _request(boot, name, "fail", note, None), now())
    secrets = {n: host_env[n] for n in json.loads(boot.secret_names) if host_env.get(n)}
    env = {**host_env, "LIFECYCLE_BOOT_ID": boot.id}
    done = run(
        acceptance.command,
        project_root(manifest_file),
        _context(ledger, boot),
        env,
        acceptance.timeout_s,
    )
    out = _without_values(done.out, secrets)
    if done.rc is None:
        status, notes = "inconclusive", [f"timed out after {acceptance.timeout_s:g} s"]
    elif done.rc in (0, 1):
        status, notes = ("pass" if done.rc == 0 else "fail"), []
    else:
        status, notes = "inconclusive", [f"exit {done.rc}: the acceptance could not decide"]
    document = out.encode() if out.strip() else None
    if done.out_left_out:  # a document cut short is never read, nor kept
        status, document = "inconclusive", None
        notes.append(_over_cap(MAX_DOCUMENT_BYTES + done.out_left_out))
    if document is not None:
        try:
            _, said = read_document(document, "stdout")
        except ResultError as exc:
            status, document, said = "inconclusive", None, None
            notes.append(str(exc))
        if said:
            notes.insert(0, said)
    if done.left_running:
        notes.append(f"{done.left_running} process(es) it left running were stopped")
    if status != "pass" and done.err.strip():
        # Its last characters, however many lines: a line is at least one.
        said = tail(redact(done.err.strip(), secrets), done.err_left_out, STDERR_TAIL, STDERR_TAIL)
        notes.append("stderr: " + said)
    request = _request(boot, name, status, "; ".join(notes) or None, document)
    return add_result(ledger, request, now())


def _over_cap(size: int) -> str:
    return (
        f"stdout: {size} bytes, over the {MAX_DOCUMENT_BYTES} bytes"
        f" ({MAX_DOCUMENT_BYTES // 2**20} MiB) a result document may hold; not read"
    )


def _request(
    boot: BootRecord, name: str, status: str, note: str | None, document: bytes | None
) -> ResultRequest:
    return ResultRequest(
        boot.id,
        name,
        status,
        note=note,
        document=document,
        document_where=f"stdout of acceptance {name}",
        source="acceptance",
    )


def _context(ledger: Ledger, boot: BootRecord) -> str:
    """What the command gets on stdin: the boot, where its evidence is, its caches."""
    caches = {}
    for use in cache_uses(ledger, boot_id=boot.id):
        cache = cache_by_id(ledger, use.cache_id)
        if cache is not None:
            caches[cache.cache_name] = {
                "id": cache.id,
                "mode": use.mode,
                "host_path": cache.host_path,
                "container_path": cache.container_path,
                "tree_digest": use.tree_digest_after,
            }
    context = {
        "boot_id": boot.id,
        "manifest": boot.manifest_name,
        "manifest_digest": boot.manifest_digest,
        "profile": boot.profile,
        "image": boot.image_tag,
        "image_id": boot.image_id,
        "outcome": boot.outcome,
        "exit_code": boot.exit_code,
        "instrumented": boot.instrumented,
        "log_path": boot.log_path,
        "evidence_dir": boot.evidence_path,
        "caches": caches,
    }
    return json.dumps(context, indent=2)


def _without_values(text: str, secrets: Mapping[str, str]) -> str:
    # Only the values of the boot's own secrets: the pattern net of `redact` would also take
    # metrics such as "kv_tokens" for credentials and break the JSON.
    for name, value in secrets.items():
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, f"<redacted:{name}>")
    return text
