"""`lifecycle gc --remote` with the demo engine booted for real and the real S3 server: what it
keeps, that it never takes what is behind a pinned result, that a kill at any moment leaves
every remaining record whole and a re-run completes the removal, and that a record written
(or a result pinned, by another host) while it runs keeps what it needs."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore
from lifecycle.fingerprint import scan
from lifecycle.ledger import Ledger
from lifecycle.ledger.removal import unfinished_gc
from tests.archive_support import keys, read_json, sweep_waiting
from tests.night_support import wait_for
from tests.trust_support import PREFIX, cli, home, process, start

pytestmark = [pytest.mark.docker, pytest.mark.s3]
POLICY = ("--keep-last", "1", "--older-than", "0s", "--grace", "0s")


def _json(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    result = cli(project, *args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _grow_and_boot(project: Path, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A warm boot that grows each cache by a file (as a JIT build would), a result (archived
    at once, LIFECYCLE_ARCHIVE being set)."""
    booted = _json(project, "boot", "demo/0.2", "--profile", "grows")
    added = _json(project, "result", "add", booted["id"], "--name", tag, "--status", "pass")
    assert added["archives"], added
    return booted, added


def _nights(project: Path, count: int = 3) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`count` nights: a cold boot, then warm ones each growing the caches, each with a
    result archived at once (two suffice where only something to collect is needed)."""
    first = _json(project, "boot", "demo/0.2", "--cold")
    # With their files: the trees behind a kept result must restore, and once a cache's files
    # are archived every later version of it holds them too.
    _json(project, "archive", "--all", "--with-content")
    added = _json(project, "result", "add", first["id"], "--name", "n0", "--status", "pass")
    return [(first, added)] + [_grow_and_boot(project, f"n{n}") for n in range(1, count)]


def _whole(project: Path, url: str, bucket: str, client: Any) -> None:
    """Every result and cache version left verifies from the archive alone."""
    for result in _json(project, "results", "--from", url)["results"]:
        checked = _json(project, "verify", result["id"], "--from", url)
        assert checked["ok"], checked["problems"]
    for cache in _json(project, "caches", "--from", url)["caches"]:
        checked = _json(project, "verify", cache["id"], "--from", url)
        assert checked["ok"], checked["problems"]


def _needed_intact(project: Path) -> None:
    """This host's verify of each of its caches and results passes (what gc took by rule is
    reported as collected, not missing)."""
    targets = [c["id"] for c in _json(project, "caches")["caches"]]
    targets += [r["id"] for r in _json(project, "results")["results"]]
    for target in targets:
        checked = _json(project, "verify", target)
        assert checked["ok"], (target, checked["problems"])


def test_gc_keeps_a_pinned_result_and_all_behind_it_and_removes_the_rest_it_may(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    nights = _nights(archive_project)
    (_, r0), (_, r1), (_, r2) = [(b, r) for b, r in nights]
    pinned = cli(archive_project, "pin", r0["id"], "--reason", "the night's verdict")
    assert pinned.exit_code == 0 and "pinned for the team at s3://" in pinned.stdout
    s3_client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/notes.txt", Body=b"not ours")
    before = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))

    dry = _json(archive_project, "gc", "--remote", *POLICY, "--dry-run")
    assert dry["dry_run"] and dry["plan"]["pinned"] == [r0["id"]]
    assert set(keys(s3_client, s3_bucket, f"{PREFIX}/")) == before  # a dry run removes nothing
    said = cli(archive_project, "gc", "--remote", *POLICY, "--dry-run").stdout
    assert re.search(r"^to remove: .*\b\d+ versions\b", said, re.M) and " 1 pin," in said, said
    done = _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    assert done["result"]["removed"] == len(dry["plan"]["objects"]) > 0
    after = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    records = set(keys(s3_client, s3_bucket, f"{PREFIX}/gc/"))  # what it removed, written once
    assert after == before - {f"{PREFIX}/{key}" for key in dry["plan"]["objects"]} | records
    assert f"{PREFIX}/notes.txt" in after  # not ours: never touched

    results = {r["id"] for r in _json(archive_project, "results", "--from", url)["results"]}
    assert results == {r0["id"]}  # r1, r2: older than 0s and not pinned
    chain = _json(archive_project, "audit", "result", r0["id"], "--from", url)
    assert chain["warnings"] == []
    for cache in chain["caches"]:  # the trees behind the pinned result still restore
        home = {"LIFECYCLE_HOME": str(tmp_path / f"restore-{cache['id']}")}
        restored = _json(
            archive_project, "restore", f"{cache['id']}@{cache['tree_digest']}", env=home
        )
        assert scan(Path(restored["host_path"])).tree_digest == cache["tree_digest"]
    versions = _json(archive_project, "caches", "--from", url)["caches"]
    for cache in versions:  # the newest (keep-last 1) and the pinned result's
        assert 1 <= len({v["tree_digest"] for v in cache["versions"]}) <= 2
    _whole(archive_project, url, s3_bucket, s3_client)

    again = _json(archive_project, "gc", "--remote", *POLICY, "--yes")  # nothing left to take
    assert again["plan"]["objects"] == [] and again["result"] is None
    unpinned = cli(archive_project, "unpin", r0["id"])
    assert unpinned.exit_code == 0 and "unpinned for the team" in unpinned.stdout
    last = _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    assert last["result"]["removed"] > 0
    assert _json(archive_project, "results", "--from", url)["results"] == []
    _whole(archive_project, url, s3_bucket, s3_client)
    assert r1["id"] and r2["id"]


def test_pin_says_a_result_record_that_does_not_parse_instead_of_pinning_around_it(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    [(_, result)] = _nights(archive_project, count=1)
    [key] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result['id']}/")
    s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"{not json")
    pinned = cli(archive_project, "pin", result["id"])
    assert pinned.exit_code != 0 and "pinned" not in pinned.stdout
    assert key.rsplit("/", 1)[-1] in pinned.stderr  # the record named, not taken for "not there"


def test_after_gc_verify_passes_and_names_what_gc_collected_by_rule(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    (_, r0), (_, r1), _ = _nights(archive_project)
    assert cli(archive_project, "pin", r0["id"]).exit_code == 0
    done = _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    run_id, removed = done["result"]["run_id"], done["plan"]["objects"]
    # What gc removed is in the archive itself: one record, written once, naming each key.
    [key] = keys(s3_client, s3_bucket, f"{PREFIX}/gc/")
    assert key.startswith(f"{PREFIX}/gc/{run_id}/")
    record = read_json(s3_client, s3_bucket, key)
    assert (record["format"], record["run_id"]) == ("lifecycle-gc-record/1", run_id)
    assert record["host"] == socket.gethostname() and record["policy"].startswith("--keep-last 1")
    assert sorted(k for listed in record["removed"].values() for k in listed) == sorted(removed)
    assert set(record["rules"]) == set(record["removed"])

    # The pinned result's objects are all intact: it verifies, and so does every cache here;
    # what gc took by rule (r1's record, the middle night's versions) is named as collected.
    assert _json(archive_project, "verify", r0["id"])["ok"]
    collected = f"collected by gc {run_id} on {socket.gethostname()} at "
    for cache in _json(archive_project, "caches")["caches"]:
        checked = _json(archive_project, "verify", cache["id"])
        assert checked["ok"] and checked["collected"], checked
        notes = [c["note"] for c in checked["checked"] if c["status"] == "collected"]
        assert notes and all(n.startswith(collected) for n in notes), notes
        assert all(f"({' '.join(POLICY)}: " in n for n in notes), notes
    checked = _json(archive_project, "verify", r1["id"])
    assert checked["ok"] and any(f"/results/{r1['id']}/" in c for c in checked["collected"])
    text = cli(archive_project, "verify", r1["id"])
    assert text.exit_code == 0 and "  collected " in text.stdout, text.stdout
    # A later gc leaves gc's own records alone.
    _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    assert key in keys(s3_client, s3_bucket, f"{PREFIX}/gc/")
    # A gc record altered in place is not believed: what it listed is missing again, and why.
    s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"{}")
    refused = cli(archive_project, "verify", r1["id"])
    assert refused.exit_code == 1 and "missing, and gc's records cannot be read: s3://" in (
        refused.stdout
    )


def test_verify_from_the_archive_says_what_another_hosts_gc_collected_and_an_unknown_target(
    archive_project: Path, s3_bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    [(booted, result)] = _nights(archive_project, count=1)
    # Host B (its own home, the same bucket) collects the result and every version by rule.
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    swept = _json(archive_project, "gc", "--remote", "--older-than", "0s", "--grace", "0s",
                  "--yes", env=host_b)  # fmt: skip
    collected = f"collected by gc {swept['result']['run_id']} on {socket.gethostname()} at "
    assert _json(archive_project, "results", "--from", url)["results"] == []

    # The archive view says of each target what host A's ledger view says: collected, by the
    # gc's record, a result as a result; nothing differs.
    uses = [(use["cache_id"], use["tree_digest_after"]) for use in booted["caches"]]
    targets = [(result["id"], "result")] + [(cache_id, "cache") for cache_id, _ in uses]
    targets += [(f"{cache_id}@{tree[:12]}", "cache") for cache_id, tree in uses]
    for target, kind in targets:
        ledger = _json(archive_project, "verify", target)
        archive = _json(archive_project, "verify", target, "--from", url)
        assert (archive["ok"], archive["kind"]) == (True, kind), archive
        assert archive["collected"] and set(archive["collected"]) <= set(ledger["collected"])
        assert all(c.split(": ", 1)[1].startswith(collected) for c in archive["collected"])
    text = cli(archive_project, "verify", result["id"], "--from", url)
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith(f"verify result {result['id']} (from {url}): as recorded; 1 ")

    never = cli(archive_project, "verify", "nope-000000000000", "--from", url)
    assert (never.exit_code, never.stdout) == (1, ""), never.output  # not archived there
    assert never.stderr == (
        f"no cache or result 'nope-000000000000' at {url}: none archived there,"
        " none collected by a gc\n"
    )


@pytest.mark.parametrize("crash", ["gc-planned", "gc-after-batch", "gc-after-batch:3"])
def test_a_gc_killed_at_a_step_leaves_every_record_whole_and_the_next_completes_it(
    archive_project: Path, s3_bucket: str, s3_client: Any, crash: str
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    _nights(archive_project, 2)
    planned = _json(archive_project, "gc", "--remote", *POLICY, "--dry-run")["plan"]["objects"]
    before = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    killed = process(
        archive_project, "gc", "--remote", *POLICY, "--yes",
        env={"LIFECYCLE_TEST_CRASH_AT": crash},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _whole(archive_project, url, s3_bucket, s3_client)
    _needed_intact(archive_project)  # what the killed run removed, its record names
    done = _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    [resumed] = done["resumed"]
    assert resumed["spared"] == {}
    after = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    records = set(keys(s3_client, s3_bucket, f"{PREFIX}/gc/"))
    assert after == before - {f"{PREFIX}/{key}" for key in planned} | records
    _whole(archive_project, url, s3_bucket, s3_client)
    _needed_intact(archive_project)


def test_sigkill_at_random_moments_never_leaves_a_broken_record(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    rng = random.Random(int(os.environ.get("LIFECYCLE_TEST_SEED", "1612")))
    _nights(archive_project, 2)
    kills = 0
    for round_number in range(4):
        for cache in _json(archive_project, "caches")["caches"]:  # much to remove each round
            bulk = Path(cache["host_path"]) / f"bulk-{round_number}"
            bulk.mkdir()
            for n in range(60):
                (bulk / f"{n}.o").write_bytes(os.urandom(200))
        _grow_and_boot(archive_project, f"k{round_number}")
        # Packs leave gc few objects to remove: a pause after its plan and after each batch
        # keeps the sweep open long enough for a random kill to land in it.
        running = start(
            archive_project, "gc", "--remote", *POLICY, "--yes",
            env={"LIFECYCLE_TEST_DELAY": "gc-planned=0.5,gc-after-batch=0.5"},
        )  # fmt: skip
        time.sleep(rng.uniform(0.5, 3.0))
        if running.poll() is None:
            kills += 1
        running.send_signal(signal.SIGKILL)
        running.communicate(timeout=60)
        _whole(archive_project, url, s3_bucket, s3_client)
    assert kills >= 1, kills  # the others ended first: their archive was collected whole
    done = _json(archive_project, "gc", "--remote", *POLICY, "--yes")
    assert _json(archive_project, "gc", "--remote", *POLICY, "--dry-run")["plan"]["objects"] == []
    _whole(archive_project, url, s3_bucket, s3_client)
    assert done is not None


def test_a_record_written_while_gc_runs_keeps_what_it_names(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    nights = _nights(archive_project)
    middle = nights[1][0]  # a boot whose trees gc will take (not the newest, no result kept)
    other = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    for use in middle["caches"]:  # host B holds those trees before gc starts
        _json(
            archive_project, "restore", f"{use['cache_id']}@{use['tree_digest_after']}", env=other
        )
    plan = _json(archive_project, "gc", "--remote", *POLICY, "--dry-run")["plan"]["objects"]
    going = {k for k in plan if k.startswith("blobs/")}
    gc = start(
        archive_project, "gc", "--remote", *POLICY, "--yes", "--json",
        env={"LIFECYCLE_TEST_DELAY": "gc-planned=20"},
    )  # fmt: skip
    time.sleep(6)  # the plan is journalled now; gc waits before removing anything
    # Meanwhile host B boots the trees gc planned to take and archives what they grew into:
    # their files are blobs the plan removes, which the new versions name.
    booted = _json(archive_project, "boot", "demo/0.2", env=other)
    _json(archive_project, "archive", "--all", "--with-content", env=other)
    out, err = gc.communicate(timeout=300)
    assert gc.returncode == 0, out + err
    report = json.loads(out)
    spared = report["result"]["spared"]
    # Whatever the plan held that B's new records name is spared. With the trees' small files
    # in packs that the kept newest version names too, that may be nothing of their content
    # (only single blobs and packs no kept record named are planned); what matters is below:
    # every version B wrote while gc ran verifies afterwards.
    assert set(spared) <= going | {k for k in plan if not k.startswith("blobs/")}
    for use in booted["caches"]:
        checked = _json(archive_project, "verify", use["cache_id"], "--from", url)
        assert checked["ok"], checked["problems"]
    store = BlobStore(s3_client, ArchiveLocation(s3_bucket, PREFIX))
    assert all(store.read(k) is not None for k in spared)


def _pinned_by_host_b(project: Path, result_id: str, tmp_path: Path) -> None:
    """Another home pins the result for the team (it never recorded it: only the team pin)."""
    other = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    pinned = cli(project, "pin", result_id, "--reason", "release acceptance", env=other)
    assert pinned.exit_code == 0 and "pinned for the team at s3://" in pinned.stdout, pinned.output


def _kept_for_its_pin(
    project: Path, result: dict[str, Any], spared: dict[str, str], s3_bucket: str, s3_client: Any
) -> None:
    """What the plan took of a result pinned since is spared, for that reason; the result
    audits from the archive and verifies here with nothing collected; no gc record lists it."""
    url = f"s3://{s3_bucket}/{PREFIX}"
    assert _json(project, "audit", "result", result["id"], "--from", url)["warnings"] == []
    checked = _json(project, "verify", result["id"])
    assert checked["ok"] and checked["collected"] == [], checked
    assert any(key.startswith(f"results/{result['id']}/") for key in spared), spared
    assert set(spared.values()) == {f"behind result {result['id']}, pinned since the plan"}
    listed = {
        key
        for record in keys(s3_client, s3_bucket, f"{PREFIX}/gc/")
        for removed in read_json(s3_client, s3_bucket, record)["removed"].values()
        for key in removed
    }
    assert not listed & set(spared)  # no rule claims to have let them go
    _whole(project, url, s3_bucket, s3_client)


def test_a_result_pinned_after_a_stopped_gc_planned_is_kept_by_its_completion(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    (_, r0), _ = _nights(archive_project, 2)
    plan = _json(archive_project, "gc", "--remote", *POLICY, "--dry-run")["plan"]["objects"]
    assert any(key.startswith(f"results/{r0['id']}/") for key in plan)
    killed = process(
        archive_project, "gc", "--remote", *POLICY, "--yes",
        env={"LIFECYCLE_TEST_CRASH_AT": "gc-planned"},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _pinned_by_host_b(archive_project, r0["id"], tmp_path)
    # A gc that keeps every record completes the stopped run first: with the pins of now.
    done = _json(archive_project, "gc", "--remote", "--yes")
    [resumed] = done["resumed"]
    _kept_for_its_pin(archive_project, r0, resumed["spared"], s3_bucket, s3_client)
    said = cli(archive_project, "gc", "--remote", *POLICY, "--dry-run").stdout
    assert f"pinned (kept with all behind them): {r0['id']}" in said, said


def test_a_result_pinned_while_gc_waits_between_plan_and_sweep_is_kept(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/{PREFIX}"
    (_, r0), _ = _nights(archive_project, 2)
    gc = start(
        archive_project, "gc", "--remote", *POLICY, "--yes", "--json",
        env={"LIFECYCLE_TEST_DELAY": "gc-planned=15"},
    )  # fmt: skip
    try:

        def journalled() -> bool:
            ledger = Ledger.open(home())
            try:
                return bool(unfinished_gc(ledger, url))
            finally:
                ledger.close()

        wait_for("gc to journal its plan", journalled, timeout=60)
        _pinned_by_host_b(archive_project, r0["id"], tmp_path)
        assert gc.poll() is None  # the pin came between the plan and the sweep
        out, err = gc.communicate(timeout=300)
    finally:
        gc.kill()
    assert gc.returncode == 0, out + err
    report = json.loads(out)
    assert any(key.startswith(f"results/{r0['id']}/") for key in report["plan"]["objects"])
    _kept_for_its_pin(archive_project, r0, report["result"]["spared"], s3_bucket, s3_client)


def test_a_record_gc_cannot_read_keeps_what_it_may_name_and_stops_nothing_else(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """One damaged record in a team's bucket used to stop every host's gc for good (no verb
    sets it aside): it stays, with every object of the kinds it may name; the rest goes."""
    _nights(archive_project, 2)
    before = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    version = min(k for k in before if "/versions/" in k)  # a real record, its bytes changed
    s3_client.put_object(Bucket=s3_bucket, Key=version, Body=b'{"format": "damaged"}')
    bogus = f"{PREFIX}/boots/b-x/{'0' * 64}.json"
    s3_client.put_object(Bucket=s3_bucket, Key=bogus, Body=b"{not json")
    url = f"s3://{s3_bucket}/{PREFIX}"
    for listing, damaged in (("caches", version), ("boots", bogus)):  # the rest is listed
        listed = cli(archive_project, listing, "--from", url, "--json")
        assert listed.exit_code == 0, listed.stderr
        [line] = [x for x in listed.stderr.splitlines() if x.startswith("left out: ")]
        assert line.startswith(f"left out: cannot read s3://{s3_bucket}/{damaged}: "), line
        assert line.count("s3://") == 1, line  # the URL once, not again in the why
        answer = json.loads(listed.stdout)
        assert answer[listing] and list(answer["unreadable"]) == [f"s3://{s3_bucket}/{damaged}"]
    done = cli(archive_project, "gc", "--remote", *POLICY, "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    assert f"cannot read s3://{s3_bucket}/" in done.stderr and "(and 1 more)" in done.stderr
    unread = json.loads(done.stdout)["plan"]["unreadable"]
    assert set(unread) == {f"s3://{s3_bucket}/{k}" for k in (version, bogus)}
    after = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    assert {version, bogus} <= after
    assert {k for k in before if "/blobs/" in k or "/packs/" in k} <= after  # they may name any
    assert {k for k in before - after if "/results/" in k}  # the rest of the plan went
    usage = cli(archive_project, "gc", "--keep-last", "1")
    assert usage.exit_code == 2 and "only `gc --remote` exists" in usage.stderr
    usage = cli(archive_project, "gc", "--remote", "--keep-last", "0")
    assert usage.exit_code == 2 and "--keep-last must be at least 1" in usage.stderr


def test_a_second_sweep_on_one_host_is_refused_at_once_not_queued(archive_project: Path) -> None:
    """The lock's holder may wait for a person's yes for hours: a second `gc --remote` (a cron
    job) or `apply` says so and ends, where it used to wait without a bound."""
    from lifecycle.gc import gc_lock
    from lifecycle.home import Home

    with gc_lock(Home(home())):
        for args in (("gc", "--remote", *POLICY, "--yes"), ("apply", "--yes")):
            refused = process(archive_project, *args, timeout=60)
            assert refused.returncode == 1, (args, refused.stderr)
            assert "another `gc --remote` or `apply` is running on this host" in refused.stderr
        looked = process(archive_project, "gc", "--remote", *POLICY, "--dry-run", timeout=60)
        assert looked.returncode == 0, looked.stderr  # a dry run changes nothing: no lock


def test_a_cache_is_not_removed_while_another_hosts_sweep_may_delete_what_its_archive_relies_on(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    """Host A's sweep looked at the archive before host B archived the same cache, whose files
    were there already (A's, planned to go): B's teardown used to verify, remove the cache, and
    then A deleted them. B reads A's intent and keeps the cache, and once A took them its
    teardown still keeps it: the archive no longer verifies, until B archives again."""
    first = _json(archive_project, "boot", "demo/0.2", "--cold")
    _json(archive_project, "archive", "--all", "--with-content")
    _json(archive_project, "teardown", "--yes")  # A's caches now only in the archive
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    gc = sweep_waiting(archive_project, s3_client, s3_bucket, 45)
    try:
        assert keys(s3_client, s3_bucket, f"{PREFIX}/gc-intents/")
        _json(archive_project, "boot", "demo/0.2", "--cold", env=host_b)
        _json(archive_project, "archive", "--all", "--with-content", env=host_b)
        kept = cli(archive_project, "teardown", "--yes", env=host_b)
        assert gc.poll() is None, "the sweep was still waiting to delete"
        assert kept.exit_code != 0 and "a gc at this location may be removing it" in kept.output
        out, err = gc.communicate(timeout=300)
    finally:
        gc.kill()
    assert gc.returncode == 0, err
    assert json.loads(out)["result"]["removed"] > 0
    assert not keys(s3_client, s3_bucket, f"{PREFIX}/gc-intents/")  # dropped at its end
    live = _json(archive_project, "caches", env=host_b)["caches"]
    assert {c["state"] for c in live} == {"archived"} and len(live) == len(first["caches"])
    refused = cli(archive_project, "teardown", "--yes", env=host_b)
    assert refused.exit_code != 0 and "archive does not verify" in refused.output
    assert {c["state"] for c in _json(archive_project, "caches", env=host_b)["caches"]} == {
        "archived"
    }  # nothing lost: B holds every file its archive lacks
    # Archived again, the archive is whole again: what the sweep took is sent or packed anew.
    healed = cli(archive_project, "archive", "--all", "--with-content", env=host_b)
    assert healed.exit_code == 0, healed.output
    for cache in live:
        verified = cli(archive_project, "verify", cache["id"], env=host_b)
        assert verified.exit_code == 0, verified.output
    torn = cli(archive_project, "teardown", "--yes", env=host_b)
    assert torn.exit_code == 0, torn.output
    restored = cli(archive_project, "restore", live[0]["id"], env=host_b)
    assert restored.exit_code == 0, restored.output


def test_a_sweep_whose_look_outlasts_its_intent_stops_having_removed_nothing(
    archive_project: Path, s3_bucket: str, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep deletes only while its intent is young enough for a host about to remove a
    cache to read it; a look that alone takes longer would look again for ever: it stops."""
    import lifecycle.gc

    _nights(archive_project, 1)  # a result to collect
    before = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    monkeypatch.setattr(lifecycle.gc, "GC_DELETES_FOR", lifecycle.gc.timedelta(0))
    stopped = cli(archive_project, "gc", "--remote", *POLICY, "--yes")
    assert stopped.exit_code != 0 and "its look at the archive took over" in stopped.stderr
    after = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    assert {k for k in after - before if "/gc-intents/" not in k and "/gc/" not in k} == set()
    assert before <= after  # nothing removed


def test_keep_last_counts_a_caches_trees_not_the_records_of_one_tree(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """Two records of one tree (archived without its files, then with them; or by two hosts)
    are one version: `--keep-last 2` keeps that tree and the next, every record of each, and
    `--keep-last 1` takes both records of the older tree, nothing of the newer."""
    cache_id = sorted(u["cache_id"] for u in _json(archive_project, "boot", "demo/0.2")["caches"])[
        0
    ]
    _json(archive_project, "archive", cache_id)
    older = _json(archive_project, "archive", cache_id, "--with-content")["caches"][0]
    _json(archive_project, "boot", "demo/0.2", "--profile", "grows")
    newer = _json(archive_project, "archive", cache_id, "--with-content")["caches"][0]
    prefix = f"{PREFIX}/caches/{cache_id}/versions/"
    records = keys(s3_client, s3_bucket, prefix)
    trees = [read_json(s3_client, s3_bucket, key)["tree_digest"] for key in records]
    assert sorted(trees) == sorted([older["tree_digest"]] * 2 + [newer["tree_digest"]]), records

    url = f"s3://{s3_bucket}/{PREFIX}"
    kept = _json(archive_project, "gc", "--remote", "--from", url, "--keep-last", "2",
                 "--grace", "0s", "--yes")  # fmt: skip
    assert not [k for k in kept["plan"]["objects"] if k.startswith(f"caches/{cache_id}/")], kept
    assert keys(s3_client, s3_bucket, prefix) == records
    one = _json(archive_project, "gc", "--remote", "--from", url, "--keep-last", "1",
                "--grace", "0s", "--dry-run")  # fmt: skip
    going = sorted(k for k in one["plan"]["objects"] if k.startswith(prefix[len(PREFIX) + 1 :]))
    older_records = [
        k for k, tree in zip(records, trees, strict=True) if tree != newer["tree_digest"]
    ]
    assert going == sorted(k[len(PREFIX) + 1 :] for k in older_records), one
