"""How the read verbs behave on a ledger a release engineer's host grows in a year of nights.

    python3 bench/ledger_scale.py --sizes 1250,5000,20000 --dir /var/tmp/ledger-scale
    python3 bench/ledger_scale.py --sizes 300 --json                    # CI-sized, ~30 s
    python3 bench/ledger_scale.py --make-only --sizes 20000 --dir D      # keep the homes

Each size is a home of that many boots, made by lifecycle's own ledger functions (start_boot,
finish_boot, insert_result, record_version, record_boot_archive, record_result_archive,
record_step, pin), each night's calls in one SQLite transaction so a year is made in seconds.
A night is 60 boots over three manifests, four caches each (1 boot in 10 warm on the caches
of its manifest's previous boot instead); 90 % end ok, 6 % failed, 3 % interrupted (the
process died: no end-of-boot scan), 1 % timed out. Every boot has two hook runs and two
results. Every cache, boot and result of an ended night is archived, and each cache is torn
down (intent, verified, deleted, done) unless it is pinned (1 cache in 2,000); the last
night's are archived and kept, but for its last 10 boots' caches: live, not archived yet.

Then every read verb is run as a user runs it (`python3 -m lifecycle VERB`, LIFECYCLE_HOME set,
stdout to /dev/null) under GNU time, for wall seconds and peak RSS, median of `--repeat`; and
the warm-candidate query a `boot` asks before it starts (`warm_candidates` for one key and
`not_reusable`) is timed as a function call. `status` asks dockerd; `teardown --dry-run`
reads the archive at LIFECYCLE_ARCHIVE (an empty bucket is enough: `--archive URL`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed

from lifecycle.ledger import Ledger  # noqa: E402
from lifecycle.ledger.archives import (  # noqa: E402
    ArchiveRecord,
    BootArchiveRow,
    VersionRow,
    record_boot_archive,
    record_version,
)
from lifecycle.ledger.boots import (  # noqa: E402
    DIED,
    BootRecord,
    CacheRecord,
    CacheUse,
    HookRunRecord,
    finish_boot,
    not_reusable,
    start_boot,
    warm_candidates,
)
from lifecycle.ledger.builds import BuildRecord, record_build  # noqa: E402
from lifecycle.ledger.removal import TeardownStep, pin, record_step  # noqa: E402
from lifecycle.ledger.results import (  # noqa: E402
    ResultArchiveRecord,
    ResultRecord,
    insert_result,
    record_result_archive,
)
from lifecycle.results.model import canonical_result, result_digest  # noqa: E402

BOOTS_PER_NIGHT = 60
MANIFESTS = ("0.30", "0.31", "demo/0.2")
CACHE_NAMES = ("flashinfer", "inductor", "torch_compile_cache", "triton")
LOCATION = "s3://acceptance/host-a"
SEED = 20250101
MORNING_LIVE = 10  # boots of the last night whose caches are not archived yet


class _NightLedger(Ledger):
    """The ledger with every `transaction` of lifecycle's functions inside the one the night
    holds: the same writes, one commit a night (a year of nights in seconds, not an hour)."""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        yield self._conn

    @contextmanager
    def night(self) -> Iterator[None]:
        with super().transaction():
            yield


@dataclass(frozen=True)
class _Manifest:
    name: str
    digest: str
    image_id: str


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def make_home(home: Path, boots: int, now: datetime) -> dict[str, Any]:
    """A home of `boots` boots ending last night; what it holds, counted, and an old boot's id."""
    rng = random.Random(SEED)
    manifests = [
        _Manifest(name, hashlib.sha256(name.encode()).hexdigest(), f"sha256:{_hex(rng, 64)}")
        for name in MANIFESTS
    ]
    nights = -(-boots // BOOTS_PER_NIGHT)
    first = now - timedelta(days=nights)
    ledger = _NightLedger.open(home)
    assert isinstance(ledger, _NightLedger)  # `open` makes the class it is called on
    ledger.query("PRAGMA synchronous=OFF")  # a bench's home: no power cut to survive
    for m in manifests:
        at = _iso(first - timedelta(hours=2))
        record_build(ledger, BuildRecord(
            at, 600.0, m.name, f"manifests/{m.name}/manifest.yaml", m.digest,
            f"lifecycle/{m.name}:latest", m.image_id, "built", None, None,
        ))  # fmt: skip
    made = 0
    oldest: str | None = None
    for night in range(nights):
        start = first + timedelta(days=night, hours=-8)  # ended before now
        count = min(BOOTS_PER_NIGHT, boots - made)
        last = night == nights - 1
        with ledger.night():
            ids = _night(ledger, rng, manifests, start, count, ended=not last)
        oldest = oldest or ids[0]
        made += count
    ledger.close()
    return {"boots": made, "old_boot": oldest, **_counts(home)}


def _night(
    ledger: Ledger,
    rng: random.Random,
    manifests: list[_Manifest],
    start: datetime,
    count: int,
    *,
    ended: bool,
) -> list[str]:
    """One night's boots; an ended night's also archived and (unless pinned) torn down."""
    previous: dict[str, list[CacheRecord]] = {}
    caches: list[CacheRecord] = []
    ids = []
    for i in range(count):
        at = start + timedelta(minutes=5 * i)
        m = manifests[i % len(manifests)]
        boot_id = f"b-{at:%Y%m%dT%H%M%S}-{_hex(rng, 6)}"
        ids.append(boot_id)
        warm = i % 10 == 9 and m.name in previous
        used = previous[m.name] if warm else [_new_cache(rng, m, name, at) for name in CACHE_NAMES]
        _boot(ledger, rng, boot_id, m, at, used, warm=warm)
        if not warm:
            caches += used
        previous[m.name] = used
    # The morning after, each cache is archived and torn down; last night's only archived,
    # but for the last boots' (the few dozen a host holds live when the night ends).
    archived = caches if ended else caches[: -4 * MORNING_LIVE]
    for cache in archived:
        _archive(ledger, rng, cache, start + timedelta(hours=8), tear_down=ended)
    return ids


def _new_cache(rng: random.Random, m: _Manifest, name: str, at: datetime) -> CacheRecord:
    cache_id = f"{name}-{_hex(rng, 12)}"
    key = hashlib.sha256(f"{m.image_id}/{name}/90a".encode()).hexdigest()
    return CacheRecord(
        cache_id, key, name, m.name, m.digest, m.image_id, "90a",
        f"/var/lib/lifecycle/caches/{cache_id}", f"/root/.cache/{name}", _iso(at),
    )  # fmt: skip


def _boot(
    ledger: Ledger,
    rng: random.Random,
    boot_id: str,
    m: _Manifest,
    at: datetime,
    used: list[CacheRecord],
    *,
    warm: bool,
) -> None:
    """A boot from intent to outcome, its hook runs, results and (later) its record archived."""
    roll = rng.random()
    outcome = "ok" if roll < 0.90 else "failed" if roll < 0.96 else "timeout"
    outcome = "interrupted" if roll >= 0.99 else outcome
    ended = at + timedelta(minutes=4)
    boot = BootRecord(
        boot_id, _iso(at), None, None, "running", None, "gpu-host-a", "default", m.name,
        m.digest, m.image_id, f"lifecycle/{m.name}:latest", None,
        json.dumps([{"name": "acceptance", "observing": False}]), False, '["HF_TOKEN"]',
        None, None,
    )  # fmt: skip
    mode = "warm" if warm else "cold"
    uses = [CacheUse(boot_id, c.id, mode, c.tree_digest) for c in used]
    start_boot(ledger, boot, [] if warm else used, uses)
    error = {"failed": "engine exited 1", "timeout": "stopped at --timeout", "interrupted": DIED}
    boot = replace(
        boot, ended_at=_iso(ended), exit_code=0 if outcome == "ok" else 1, outcome=outcome,
        error=error.get(outcome), container_id=_hex(rng, 64),
        log_path=f"/var/lib/lifecycle/evidence/boots/{boot_id}.log",
    )  # fmt: skip
    if outcome == "interrupted":  # died: settled later, no scan, no hook run at its end
        finish_boot(ledger, boot, [], [], [])
        return
    scanned = [
        replace(c, tree_digest=_hex(rng, 64), files=rng.randint(800, 6000),
                bytes=rng.randint(50, 900) * 2**20, scan_path=f"evidence/scans/{c.id}.json",
                scanned_at=_iso(ended))
        for c in used
    ]  # fmt: skip
    ends = [
        replace(u, tree_digest_after=s.tree_digest, files_added=0 if warm else s.files,
                files_changed=0, files_removed=0, dirs_added=0 if warm else 40,
                verdict="warm-hit" if warm else "cold-compiled", files_read=(s.files or 0) // 2)
        for u, s in zip(uses, scanned, strict=True)
    ]  # fmt: skip
    hooks = [HookRunRecord(boot_id, "acceptance", e, 0, 1.5) for e in ("healthy", "pre-stop")]
    finish_boot(ledger, boot, ends, scanned, hooks)
    for name in ("smoke", "throughput"):
        _result(ledger, rng, boot, name, ended)
    record_boot_archive(ledger, BootArchiveRow(
        boot_id, LOCATION, f"host-a/boots/{boot_id}/{_hex(rng, 64)}.json", _hex(rng, 64),
        _iso(ended + timedelta(minutes=1)),
    ))  # fmt: skip


def _result(ledger: Ledger, rng: random.Random, boot: BootRecord, name: str, at: datetime) -> None:
    result_id = f"r-{at:%Y%m%dT%H%M%S}-{_hex(rng, 6)}"
    metrics = json.dumps({"tokens_per_s": round(rng.uniform(900, 1400), 1), "ttft_ms": 180})
    status = "pass" if boot.outcome == "ok" else "fail"
    result = ResultRecord(
        result_id, boot.id, name, status, metrics, None, "acceptance", boot.instrumented,
        None, None, None, _iso(at), "",
    )  # fmt: skip
    result = replace(result, digest=result_digest(canonical_result(result)))
    insert_result(ledger, result)
    record_result_archive(ledger, ResultArchiveRecord(
        result_id, LOCATION, f"host-a/results/{result_id}.json", _hex(rng, 64), _iso(at),
    ))  # fmt: skip


def _archive(
    ledger: Ledger, rng: random.Random, cache: CacheRecord, at: datetime, *, tear_down: bool
) -> None:
    """A cache's tree archived, then (`tear_down`) torn down unless pinned."""
    row = ledger.query("SELECT tree_digest FROM caches WHERE id = ?", (cache.id,))[0]
    tree = row["tree_digest"] or _hex(rng, 64)  # an interrupted boot's cache was never scanned
    key = f"host-a/caches/{cache.id}/versions/{tree}.{_hex(rng, 64)}.json"
    sha = _hex(rng, 64)
    record_version(
        ledger,
        VersionRow(cache.id, tree, LOCATION, key, sha, False, None, _iso(at)),
        ArchiveRecord(cache.id, LOCATION, key, sha, False, 12, 2**20, _iso(at), _iso(at), tree),
    )
    if rng.random() < 0.0005:
        pin(ledger, cache.id, "release candidate", _iso(at))
        return
    if not tear_down:
        return
    run_id = f"t-{at:%Y%m%dT%H%M%S}-{_hex(rng, 6)}"
    for step, detail in (("intent", cache.host_path), ("verified", key), ("deleted", None)):
        record_step(ledger, TeardownStep(run_id, cache.id, step, detail, None, _iso(at)))
    done = TeardownStep(run_id, cache.id, "done", None, 300 * 2**20, _iso(at))
    record_step(ledger, done, cache_state="torn-down")


def _counts(home: Path) -> dict[str, Any]:
    ledger = Ledger.open(home, create=False)
    try:
        counted = {
            table: ledger.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]
            for table in ("caches", "boot_caches", "results", "archives", "teardown_steps")
        }
        states = ledger.query("SELECT state, COUNT(*) AS n FROM caches GROUP BY state")
        counted["cache_states"] = {r["state"]: r["n"] for r in states}
        counted["key"] = ledger.query("SELECT cache_key FROM caches ORDER BY rowid DESC LIMIT 1")[
            0
        ]["cache_key"]
    finally:
        ledger.close()
    counted["ledger_mib"] = round((home / "ledger.sqlite3").stat().st_size / 2**20, 1)
    return counted


def verbs(made: dict[str, Any]) -> dict[str, list[str]]:
    """The read verbs timed: label -> arguments."""
    # What a release engineer asks each morning: last night's (a home's last night began 32 h
    # before it was made), one manifest's, the week's failures; labelled by their arguments.
    boots = ("boots --newer-than 2d", "boots --state failed --newer-than 7d",
             "boots --manifest 0.31 --newer-than 2d --json")  # fmt: skip
    caches = ("caches --state missing", "caches --manifest 0.31 --newer-than 2d")
    results = ("results --newer-than 2d", "results --manifest 0.31 --state fail --newer-than 7d")
    return {
        "boots": ["boots"],
        "boots --manifest --state ok": ["boots", "--manifest", "0.31", "--state", "ok"],
        **{line: line.split() for line in boots},
        "caches": ["caches"],
        "caches --json": ["caches", "--json"],
        **{line: line.split() for line in caches},
        "results": ["results"],
        **{line: line.split() for line in results},
        "status": ["status"],
        "why OLD": ["why", made["old_boot"]],
        "show demo/0.2": ["show", "demo/0.2"],
        "teardown --dry-run": ["teardown", "--dry-run"],
    }


def time_verb(home: Path, args: list[str], environ: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds and peak RSS (MiB) of one `lifecycle ARGS` process, and its exit code."""
    with tempfile.NamedTemporaryFile("r") as peak:
        started = time.monotonic()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", peak.name, sys.executable, "-m", "lifecycle",
             *args],
            cwd=REPO, env={**environ, "LIFECYCLE_HOME": str(home)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
        kib = int(peak.read().split()[-1])
    return wall, kib / 1024, done.returncode


def time_boot_prework(home: Path, key: str) -> dict[str, float]:
    """Seconds of what `boot` asks the ledger before it starts: warm candidates of one key,
    and why the others are passed over."""
    ledger = Ledger.open(home, create=False)
    try:
        started = time.monotonic()
        warm_candidates(ledger, key)
        middle = time.monotonic()
        not_reusable(ledger)
        return {"warm_candidates": middle - started, "not_reusable": time.monotonic() - middle}
    finally:
        ledger.close()


def measure(
    home: Path, made: dict[str, Any], repeat: int, archive: str | None, only: tuple[str, ...]
) -> dict[str, Any]:
    """Median wall and peak of each verb (those whose label starts with one of `only`, if
    given), and the boot's pre-work, on one home."""
    environ = {k: v for k, v in os.environ.items() if k != "LIFECYCLE_ARCHIVE"}
    environ["PYTHONPATH"] = str(REPO)
    if archive:
        environ["LIFECYCLE_ARCHIVE"] = archive
    found: dict[str, Any] = {}
    for label, args in verbs(made).items():
        if (args[0] == "teardown" and not archive) or not label.startswith(only or ("",)):
            continue
        runs = [time_verb(home, args, environ) for _ in range(repeat)]
        found[label] = {
            "wall_s": round(statistics.median(r[0] for r in runs), 3),
            "peak_mib": round(max(r[1] for r in runs), 1),
            "exit": runs[0][2],
        }
    if only and not "boot: ".startswith(only):
        return found
    pre = [time_boot_prework(home, made["key"]) for _ in range(repeat)]
    for part in ("warm_candidates", "not_reusable"):
        found[f"boot: {part}()"] = {"wall_s": round(statistics.median(p[part] for p in pre), 4)}
    return found


def table(sizes: list[int], results: dict[int, dict[str, Any]]) -> str:
    """The table of each verb at each size, in Markdown."""
    head = "| verb | " + " | ".join(f"{n:,} boots" for n in sizes) + " |"
    lines = [head, "|---|" + "---:|" * len(sizes)]
    for label in results[sizes[0]]:
        cells = []
        for n in sizes:
            got = results[n].get(label, {})
            cell = f"{got['wall_s']} s" if "wall_s" in got else "-"
            cell += f", {got['peak_mib']} MiB" if "peak_mib" in got else ""
            cell += f" (exit {got['exit']})" if got.get("exit") else ""
            cells.append(cell)
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1250,5000,20000", help="boots, comma-separated")
    parser.add_argument("--dir", type=Path, help="where the homes are kept (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--archive", help="LIFECYCLE_ARCHIVE for teardown --dry-run (s3://…)")
    parser.add_argument("--make-only", action="store_true", help="make the homes, time nothing")
    parser.add_argument(
        "--only", default="", help="time only the verbs whose label starts so (comma-separated)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    parent = args.dir or Path(tempfile.mkdtemp(prefix="ledger-scale-", dir="/var/tmp"))
    now = datetime.now(UTC).replace(microsecond=0)
    results: dict[int, dict[str, Any]] = {}
    made_all: dict[int, dict[str, Any]] = {}
    try:
        for n in sizes:
            home = parent / f"home-{n}"
            made_file = parent / f"home-{n}.json"
            if made_file.exists():
                made = json.loads(made_file.read_text())
            else:
                shutil.rmtree(home, ignore_errors=True)
                started = time.monotonic()
                made = make_home(home, n, now)
                made["made_s"] = round(time.monotonic() - started, 1)
                made_file.write_text(json.dumps(made))
            made_all[n] = made
            print(f"home {home}: {json.dumps(made)}", file=sys.stderr)
            if not args.make_only:
                only = tuple(filter(None, args.only.split(",")))
                results[n] = measure(home, made, args.repeat, args.archive, only)
    finally:
        if args.dir is None:
            shutil.rmtree(parent)
    if args.make_only:
        return
    if args.json:
        print(json.dumps({"homes": made_all, "results": results}, indent=2))
    else:
        print(table(sizes, results))


if __name__ == "__main__":
    main()
