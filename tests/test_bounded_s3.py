"""Bounded means bounded: every command that reaches the archive ends within S3_LIMIT_S of its
start (docs/time-limits.md) against an S3 server that accepts connections and never answers,
one stopped with SIGSTOP, and one that falls silent in the middle of the command: exit 3, one
line naming the server, the wait shown while it lasted, nothing removed, no cache recorded as
archived. LIFECYCLE_S3_TIMEOUT is 10 s here, not its default 20 s: the bound is two timeouts
and 5 s either way, and the default would double the test's waits for the same proof."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.services import WeedServer
from tests.silent_servers import (
    Ran,
    assert_failed_within,
    failing_server,
    side_by_side,
    silent_listener,
    silent_relay,
)
from tests.trust_support import boot, cache_ids, caches, cli

pytestmark = [pytest.mark.docker, pytest.mark.s3]
S3_TIMEOUT_S = 10
S3_LIMIT_S = 2 * S3_TIMEOUT_S + 5.0  # docs/time-limits.md: two LIFECYCLE_S3_TIMEOUTs and 5 s
# The demo night's forced check, one pin, no production hooks: a night that archives.
NIGHT_PLAN = {
    "schema_version": 1,
    "name": "bounded",
    "pins": ["demo/0.2"],
    "cache_states": ["cold"],
    "profiles": {
        "forced": {
            "checks": [
                {
                    "name": "forced-64",
                    "creates": [{"what": "one request", "args": ["--forced-prompts", "64"]}],
                    "path": {"log": ["step 1: requests=1 prompts=64 "]},
                    "pass_when": {"log": ["forced step: 64 prompts served"]},
                }
            ]
        }
    },
}


@pytest.fixture(autouse=True)
def s3_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFECYCLE_S3_TIMEOUT", str(S3_TIMEOUT_S))


@dataclass(frozen=True)
class Archived:
    """A project whose boot's caches, a result of it and a team pin are in the archive."""

    project: Path
    url: str
    caches: list[str]
    boot: str
    results: list[str]


def _archive_something(project: Path, url: str) -> Archived:
    report = boot(project, "--cold")
    ids = cache_ids(report)
    archived = cli(project, "archive", "--all", "--with-content")
    assert archived.exit_code == 0, archived.output
    for name in ("a", "b"):
        added = cli(project, "result", "add", report["id"], "--name", name, "--status", "pass")
        assert added.exit_code == 0, added.output
    listed = json.loads(cli(project, "results", "--json").stdout)["results"]
    results = sorted(r["id"] for r in listed)
    pinned = cli(project, "pin", results[0])
    assert pinned.exit_code == 0 and "for the team" in pinned.stdout, pinned.output
    for cache_id in ids:  # pinned for the team only: teardown may still consider them here
        assert cli(project, "unpin", cache_id).exit_code == 0
    (project / "bounded.yaml").write_text(json.dumps(NIGHT_PLAN))
    return Archived(project, url, ids, report["id"], results)


def _every_command(archived: Archived) -> list[list[list[str]]]:
    """Each family of command that reaches the archive, in batches that may run at once: one
    teardown at a time per host, and a new result changes what a teardown must wait for."""
    ids, url, results = archived.caches, archived.url, archived.results
    return [
        [
            ["archive", "--all"],
            ["archive", ids[0], "--with-content", "--dry-run"],
            ["restore", ids[1]],
            ["restore", "--best", "demo/0.2"],
            ["verify", ids[0]],
            ["verify", results[0]],
            ["gc", "--remote", "--dry-run"],
            ["audit", "result", results[0], "--from", url],
            ["audit", "cache", ids[0], "--from", url],
            ["caches", "--from", url],
            ["boots", "--from", url],
            ["plan"],  # reads every archive its caches name, and the archive's listing
            ["pin", results[1]],
            ["unpin", results[0]],
            ["night", "bounded.yaml"],
            ["teardown", "--yes"],
        ],
        [
            ["gc", "--remote", "--yes"],  # gc runs on one host take turns
            ["teardown", "--archive", "--yes"],
            ["result", "add", archived.boot, "--name", "c", "--status", "fail", "--to", url],
        ],
    ]


def _run(batches: list[list[list[str]]], project: Path, env: dict[str, str]) -> list[Ran]:
    return [ran for batch in batches for ran in side_by_side(project, [(a, env) for a in batch])]


def _objects(client: Any, bucket: str) -> list[tuple[str, str]]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted((o["Key"], o["ETag"]) for page in pages for o in page.get("Contents", []))


def _caches() -> set[tuple[str, str, bool]]:
    return {(c.id, c.state, Path(c.host_path).is_dir()) for c in caches().values()}


def _unchanged(
    before: tuple[list[tuple[str, str]], set[tuple[str, str, bool]]],
    client: Any,
    bucket: str,
    *,
    added: bool = False,
) -> None:
    """The same objects on the server (with `added`, maybe more: what a stopped server was sent
    before it stopped it stores once continued, after the client gave up), none removed or
    changed; every cache as it was (the night's boots made new ones, still live)."""
    objects, known = before
    now_there = _objects(client, bucket)
    assert set(objects) <= set(now_there) if added else now_there == objects
    now = _caches()
    assert known <= now and all(state == "live" for _, state, _ in now - known), now


def _assert_bounded(results: list[Ran], endpoint: str) -> None:
    assert_failed_within(results, S3_LIMIT_S, endpoint)
    for ran in results:
        assert "no answer to" in ran.stderr, ran  # the wait was shown while it lasted


def test_a_silent_s3_server_ends_every_command_within_the_bound(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    archived = _archive_something(archive_project, f"s3://{s3_bucket}/test")
    before = _objects(s3_client, s3_bucket), _caches()
    with silent_listener() as silent:
        env = {"AWS_ENDPOINT_URL": silent.endpoint}
        results = _run(_every_command(archived), archive_project, env)
    _assert_bounded(results, silent.endpoint)
    _unchanged(before, s3_client, s3_bucket)


def test_a_failing_s3_server_is_the_environment_not_a_verdict(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    """A server shedding load answers 503 SlowDown: `verify` called every object it asked for
    DIFFERS (111 of them, after 48 s of retries), `archive` and `gc` ended exit 1 as if
    refused. It is the environment, like a server that does not answer: exit 3, one line
    naming it, nothing judged, nothing removed."""
    archived = _archive_something(archive_project, f"s3://{s3_bucket}/test")
    before = _objects(s3_client, s3_bucket), _caches()
    with failing_server() as endpoint:
        results = _run(_every_command(archived), archive_project, {"AWS_ENDPOINT_URL": endpoint})
    assert_failed_within(results, S3_LIMIT_S, endpoint)
    for ran in results:
        assert "DIFFERS" not in ran.stdout and "missing" not in ran.stdout, ran
        assert "is failing" in ran.stderr.splitlines()[-1], ran
    _unchanged(before, s3_client, s3_bucket)


@contextmanager
def _stopped(server: WeedServer) -> Iterator[None]:
    """The server (its whole process group) stopped with SIGSTOP, continued afterwards."""
    assert server.process is not None
    os.killpg(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)


def test_a_stopped_s3_server_ends_every_command_within_the_bound(
    archive_project: Path, weed_server: WeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in weed_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", "s3://archive/test")
    archived = _archive_something(archive_project, "s3://archive/test")
    before = _objects(weed_server.client(), "archive"), _caches()
    with _stopped(weed_server):
        results = _run(_every_command(archived), archive_project, {})
    _assert_bounded(results, weed_server.endpoint)
    _unchanged(before, weed_server.client(), "archive", added=True)


def test_a_server_falling_silent_mid_command_ends_it_within_the_bound(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # Frozen after the listing, at the first record read: a command that reads records on a
    # pool of threads and notes each one it cannot read (gc) waited once per record, 99 s.
    # Frozen at the first blob sent or fetched: each thread of the pool waits its own.
    archived = _archive_something(archive_project, f"s3://{s3_bucket}/test")
    ids, url = archived.caches, archived.url
    grown = Path(caches()[ids[0]].host_path)
    for n in range(6):  # new content to send: large files each their own PUT, small ones packed
        (grown / f"late-{n}.cubin").write_bytes(os.urandom(2 << 20))
    for n in range(40):
        (grown / f"late-{n}.ptx").write_bytes(os.urandom(8 << 10))
    before = _objects(s3_client, s3_bucket), _caches()
    record = rf"^GET /{s3_bucket}/test/(caches|boots|results|pins)/"
    blob = rf"^GET /{s3_bucket}/test/(blobs|packs)/"
    sending = rf"^PUT /{s3_bucket}/test/(blobs|packs)/"
    at = [
        (["gc", "--remote", "--dry-run"], record),
        (["caches", "--from", url], record),
        (["boots", "--from", url], record),
        (["audit", "cache", ids[0], "--from", url], record),
        (["verify", ids[0]], blob),
        (["restore", "--best", "demo/0.2"], record),
        (["restore", ids[1]], blob),
        (["archive", ids[0], "--with-content"], sending),
    ]
    upstream = os.environ["AWS_ENDPOINT_URL"]
    # One teardown at a time per host: it goes last, on its own.
    for batch in (at, [(["teardown", "--archive", "--yes", ids[0]], sending)]):
        with ExitStack() as stack:
            relays = [stack.enter_context(silent_relay(upstream, point)) for _, point in batch]
            commands = [
                (argv, {"AWS_ENDPOINT_URL": r.endpoint})
                for (argv, _), r in zip(batch, relays, strict=True)
            ]
            results = side_by_side(archive_project, commands)
        for ran, relay in zip(results, relays, strict=True):
            assert relay.frozen.is_set() and relay.relayed, ran  # it fell silent mid-command
            _assert_bounded([ran], relay.endpoint)
    _unchanged(before, s3_client, s3_bucket)


def test_a_server_answering_a_byte_at_a_time_ends_every_command_within_the_bound(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    """Each read of an answer waits at most LIFECYCLE_S3_TIMEOUT, but a server (or a proxy)
    that sends a byte a second never lets one run out: a listing, a record and a blob's body
    trickled in held a command for hours. The whole answer (a body: each MiB of it) gets the
    limit."""
    archived = _archive_something(archive_project, f"s3://{s3_bucket}/test")
    ids, url = archived.caches, archived.url
    grown = Path(caches()[ids[0]].host_path)
    for n in range(2):  # blobs of their own (not packed): their bodies are streamed
        (grown / f"late-{n}.cubin").write_bytes(os.urandom(2 << 20))
    assert cli(archive_project, "archive", ids[0], "--with-content").exit_code == 0
    before = _objects(s3_client, s3_bucket), _caches()
    listing = rf"^GET /{s3_bucket}\?list-type=2"
    blob = rf"^GET /{s3_bucket}/test/blobs/"
    at = [
        (["caches", "--from", url], listing),  # the answer's head, then its body, trickled
        (["gc", "--remote", "--dry-run"], listing),
        (["verify", ids[0]], blob),  # a blob's body trickled, its head whole
    ]
    upstream = os.environ["AWS_ENDPOINT_URL"]
    with ExitStack() as stack:
        relays = [stack.enter_context(silent_relay(upstream, p, trickle=1.0)) for _, p in at]
        commands = [
            (argv, {"AWS_ENDPOINT_URL": relay.endpoint})
            for (argv, _), relay in zip(at, relays, strict=True)
        ]
        results = side_by_side(archive_project, commands)
    for ran, relay in zip(results, relays, strict=True):
        assert relay.frozen.is_set(), ran  # it began to trickle mid-command
        assert_failed_within([ran], S3_LIMIT_S, relay.endpoint)
    _unchanged(before, s3_client, s3_bucket)
