"""Two hosts, one bucket, at once: host A and host B (two LIFECYCLE_HOMEs, each its own ledger)
boot the same caches, record results, archive and tear down in parallel, 20 times over.

B starts from A's caches restored (the same cache ids), and each host's boots grow the caches
differently, so the two archive different trees of one cache id at the same moments: what a
mutable record per cache lost. What runs at once are separate processes (restore --best, boot,
result add, which archives, teardown --archive); the checks between rounds run in-process.
After every round, nothing is lost (every boot and result of either ledger has its record in
S3), each host's `verify` of its own results passes whatever the other archived since, and at
the end an empty third home restores the exact tree behind A's result and the exact tree
behind B's, by their versions. Last, B's `gc --remote` collects all it may and every host's
`verify` of its caches and results still passes, A's pinned result with nothing collected."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from lifecycle.fingerprint import scan
from tests.services import run_lifecycle
from tests.trust_support import lifecycle_argv

pytestmark = [pytest.mark.docker, pytest.mark.s3]
ROUNDS = int(os.environ.get("LIFECYCLE_TEST_ROUNDS", "20"))


class Host:
    """One LIFECYCLE_HOME, driven through the CLI as its own processes."""

    def __init__(self, name: str, project: Path, home: Path, url: str) -> None:
        self.name, self.project, self.home, self.url = name, project, home, url
        self.log: list[str] = []

    def run(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LIFECYCLE_HOME": str(self.home), "LIFECYCLE_ARCHIVE": self.url}
        done = subprocess.run(
            lifecycle_argv(self.project, *args),
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
            check=False,
        )  # fmt: skip
        self.log.append(
            f"{self.name}$ {' '.join(args)} -> {done.returncode}\n{done.stderr[-2000:]}"
        )
        assert done.returncode in ok, "\n".join(self.log[-6:]) + done.stdout[-3000:]
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def here(self, *args: str) -> Any:
        """A verb run in this process (only while no other thread runs): its JSON."""
        env = {"LIFECYCLE_HOME": str(self.home), "LIFECYCLE_ARCHIVE": self.url}
        done = run_lifecycle(self.project, *args, "--json", env=env)
        assert done.exit_code == 0 or "verify" in args, done.output
        return json.loads(done.stdout)

    def caches(self) -> dict[str, tuple[str, str]]:
        """id -> (state, dir), read from the ledger itself: cheap enough for every round."""
        uri = f"file:{self.home / 'ledger.sqlite3'}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            rows = conn.execute("SELECT id, state, host_path FROM caches").fetchall()
        return {cache_id: (state, path) for cache_id, state, path in rows}

    def round(self, number: int) -> None:
        """Restore what a teardown took (the newest complete versions, perhaps the other
        host's), boot warm growing every cache its own way, record a result (archived at once),
        tear down archiving with content."""
        if any(state in ("torn-down", "missing") for state, _ in self.caches().values()):
            self.run("restore", "--best", "demo/0.2")
        booted = self.json("boot", "demo/0.2", "--profile", "grows")  # a file of its own each
        assert {u["mode"] for u in booted["caches"]} == {"warm"}, booted
        self.run(
            "result", "add", booted["id"], "--name", f"round-{number}", "--status", "pass",
            "--metric", f"host={self.name}",
        )  # fmt: skip
        self.run("teardown", "--archive", "--with-content", "--yes")


@pytest.fixture
def team(archive_project: Path, s3_bucket: str, tmp_path: Path) -> tuple[Host, Host, str]:
    url = f"s3://{s3_bucket}/team"
    a = Host("a", archive_project, tmp_path / "host-a", url)
    b = Host("b", archive_project, tmp_path / "host-b", url)
    return a, b, url


def test_two_hosts_archiving_booting_and_tearing_down_at_once_lose_nothing(
    team: tuple[Host, Host, str], tmp_path: Path
) -> None:
    a, b, url = team
    first = a.json("boot", "demo/0.2", "--cold")
    cache_ids = sorted(u["cache_id"] for u in first["caches"])
    a.run("archive", "--all", "--with-content")
    b.run("restore", "--best", "demo/0.2")
    assert sorted(b.caches()) == cache_ids

    for number in range(ROUNDS):
        failures: list[BaseException] = []

        def play(
            host: Host, number: int = number, failures: list[BaseException] = failures
        ) -> None:
            try:
                host.round(number)
            except BaseException as exc:  # reported below, with its host's last commands
                failures.append(exc)

        threads = [threading.Thread(target=play, args=(h,)) for h in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures[0]
        _nothing_lost(a, b, url)
        for host in (a, b):  # each verifies what it just recorded, the other archiving too
            _verified(host, host.here("results")["results"][:1], number)
    for host in (a, b):  # and everything, after the other archived 20 times over it
        _verified(host, host.here("results")["results"], ROUNDS)

    # Two trees of each cache id, one from each host: a third, empty home restores the exact
    # tree A's last result stood on, then the exact one B's stood on, by their versions.
    third = Host("c", a.project, tmp_path / "host-c", url)
    for host in (a, b):
        result = host.here("results")["results"][0]
        chain = third.here("audit", "result", result["id"], "--from", url)
        assert chain["warnings"] == [], chain["warnings"]
        for cache in chain["caches"]:
            tree = cache["tree_digest"]
            restored = third.here("restore", f"{cache['id']}@{tree}")
            assert restored["tree_digest"] == tree
            assert scan(Path(restored["host_path"])).tree_digest == tree
        third.run("teardown", "--yes")  # back to nothing, for the other host's trees
    # Each round each host grew each cache its own way: a version each, none lost, and each
    # names the version it grew from (whichever host archived that one): one history per cache.
    for cache in third.here("caches", "--from", url)["caches"]:
        trees = {v["tree_digest"] for v in cache["versions"]}
        assert len(trees) >= 2 * ROUNDS + 1, cache["id"]
        parents = [v["parent"] for v in cache["versions"]]
        assert parents.count(None) == 1 and set(parents) - {None} <= trees, cache["id"]

    # A's first result is pinned for the team; B's cron collects everything else it may. Each
    # host's verify of its caches and results then passes: what gc took by rule is collected,
    # not a difference, and nothing behind the pinned result was taken.
    pinned = a.here("results")["results"][-1]["id"]
    a.run("pin", pinned)
    b.run("gc", "--remote", "--keep-last", "1", "--older-than", "0s", "--grace", "0s", "--yes")
    collected = 0
    for host in (a, b):
        targets = [*host.caches(), *(r["id"] for r in host.here("results")["results"])]
        for target in targets:
            report = host.here("verify", target)
            assert report["ok"], (host.name, target, report["problems"])
            collected += len(report["collected"])
    assert collected > 0  # gc did take what these hosts once archived
    report = a.here("verify", pinned)
    assert report["ok"] and report["collected"] == [], report


def _verified(host: Host, results: list[dict[str, Any]], number: int) -> None:
    for result in results:
        report = host.here("verify", result["id"])
        assert report["ok"], (host.name, number, result["id"], report["problems"])


def _nothing_lost(a: Host, b: Host, url: str) -> None:
    """Every finished boot and every result either ledger has is in the archive."""
    archived_boots = {boot["id"] for boot in a.here("boots", "--from", url)["boots"]}
    archived_results = {r["id"] for r in a.here("results", "--from", url)["results"]}
    for host in (a, b):
        boots = {boot["id"] for boot in host.here("boots")["boots"]}
        results = {r["id"] for r in host.here("results")["results"]}
        assert boots <= archived_boots, (host.name, sorted(boots - archived_boots))
        assert results <= archived_results, (host.name, sorted(results - archived_results))


def test_a_tree_changed_behind_lifecycles_back_is_nobodys_and_never_restored_as_best(
    team: tuple[Host, Host, str], tmp_path: Path
) -> None:
    a, b, url = team
    a.json("boot", "demo/0.2", "--cold")
    a.run("archive", "--all", "--with-content")
    b.run("restore", "--best", "demo/0.2", "--cache", "triton")
    [(_, restored)] = [v for k, v in b.caches().items() if k.startswith("triton-")]
    (Path(restored) / "evil.so").write_text("planted on host b, outside any boot\n")
    b.run("archive", "--all", "--with-content")  # what the dir holds is archived all the same…
    c = Host("c", a.project, tmp_path / "host-c", url)
    c.run("restore", "--best", "demo/0.2", "--cache", "triton")
    [(_, taken)] = [v for k, v in c.caches().items() if k.startswith("triton-")]
    assert sorted(p.name for p in Path(taken).rglob("*")) == sorted(
        p.name for p in Path(restored).rglob("*") if p.name != "evil.so"
    )  # …but no boot made it: another host's best is the tree a boot left


def test_a_version_whose_record_is_damaged_is_passed_over_by_restore_best_and_said(
    team: tuple[Host, Host, str], s3_client: Any, s3_bucket: str
) -> None:
    """One damaged record in the bucket used to fail every `restore --best` of the manifest
    (and every night node restoring from the bucket): it is passed over, and said."""
    a, b, url = team
    a.json("boot", "demo/0.2", "--cold")
    a.run("archive", "--all", "--with-content")
    a.json("boot", "demo/0.2", "--profile", "grows")  # a second tree of each cache
    a.run("archive", "--all", "--with-content")
    [triton] = [c for c in a.json("caches", "--from", url)["caches"] if c["cache_name"] == "triton"]
    older, newer = triton["versions"]
    key = newer["record"].removeprefix(f"s3://{s3_bucket}/")
    s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b'{"format": "damaged"}')
    done = b.run("restore", "--best", "demo/0.2", "--cache", "triton")
    assert f"passed over: cannot read {newer['record']}" in done.stderr
    [(_, restored)] = [v for k, v in b.caches().items() if k.startswith("triton-")]
    assert scan(Path(restored)).tree_digest == older["tree_digest"]


def test_restore_best_says_the_caches_it_restored_when_a_later_one_fails(
    team: tuple[Host, Host, str],
) -> None:
    """A failed restore of one cache used to leave stdout empty: the caches restored before it
    were live, and nothing said so."""
    a, b, _ = team
    cold = a.json("boot", "demo/0.2", "--cold")
    a.run("archive", "--all", "--with-content")
    # A dir b holds that is not the tree, for the cache restored last (the manifest's order).
    blocked = cold["caches"][-1]["cache_id"]
    (b.home / "caches" / blocked).mkdir(parents=True)
    (b.home / "caches" / blocked / "planted.so").write_text("not the archived tree\n")

    done = b.run("restore", "--best", "demo/0.2", "--json", ok=(1,))
    report = json.loads(done.stdout)
    chosen = [c["cache_id"] for c in report["chosen"]]
    before = chosen[: chosen.index(blocked)]
    assert before, chosen  # the failure is a later cache's
    assert [r["cache_id"] for r in report["restored"]] == before
    failed = report["failed"]
    assert failed["cache_id"] == blocked and "holds another tree" in failed["error"], failed
    assert failed["exit_code"] == 1 and failed["error"] in done.stderr
    assert all(b.caches()[cache_id][0] == "live" for cache_id in before)

    again = b.run("restore", "--best", "demo/0.2", ok=(1,))
    for cache_id in before:
        assert f"  {cache_id}: already in place at " in again.stdout, again.stdout
    assert "  not restored: its restore failed (stderr says why)\n" in again.stdout
    assert failed["error"] in again.stderr
