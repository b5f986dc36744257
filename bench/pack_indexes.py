"""What a next archive costs with many packs at its location: every pack's index read from the
server on every run, or kept in the ledger (schema 19).

    python3 bench/pack_indexes.py seed --home H --to s3://BUCKET/PREFIX --packs 3000
    python3 bench/pack_indexes.py next --home H --to s3://BUCKET/PREFIX    # time this, as a whole

`seed` archives, as one cache of the ledger at H, a tree of `--packs` x `--files` small files
in packs of `--files` each (a small PACK_TARGET stands in for the 8 MiB of a real one, so
3,000 packs fit on a test server), then a 40-file tree that `next` archives again each run as
a new cache, one file changed: what a re-archive after a boot does. `next` prints one JSON
line: its wall seconds, peak RSS (VmHWM), and the ranged GETs of a pack's last byte (index
reads). Any S3 server reached from the environment (AWS_ENDPOINT_URL, .ci/with-services);
the bucket is made if missing. bench/README.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's lifecycle

from bench.archive import register_cache
from lifecycle.archive import packs
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.run import archive_caches
from lifecycle.home import Home
from lifecycle.ledger import Ledger

FILE_BYTES = 1200  # each small file: random bytes, so no two are one blob


def _archive(home: Path, client: Any, location: ArchiveLocation, cache_id: str) -> None:
    ledger = Ledger.open(home)
    try:
        archive_caches(
            ledger, Home(home), client, location, [cache_id], host_env={},
            with_content=True, dry_run=False, progress=None,
        )  # fmt: skip
    finally:
        ledger.close()


def _tree(root: Path, files: int) -> Path:
    for n in range(files):
        path = root / f"{n % 50:02}" / f"kernel-{n:06}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(FILE_BYTES))
    return root


def seed(home: Path, client: Any, location: ArchiveLocation, count: int, files: int) -> None:
    """`count` packs of `files` small files each at the location, written from `home`."""
    with suppress(ClientError):  # there already
        client.create_bucket(Bucket=location.bucket)
    packs.PACK_TARGET = files * FILE_BYTES  # closed after `files` files
    register_cache(home, "seed-000000000001", _tree(home / "seed", count * files))
    _archive(home, client, location, "seed-000000000001")
    packs.PACK_TARGET = 8 << 20
    register_cache(home, "next-000000000000", _tree(home / "next", 40))
    _archive(home, client, location, "next-000000000000")


def next_archive(home: Path, client: Any, location: ArchiveLocation) -> dict[str, Any]:
    """The next archive's figures: a new cache over the 40-file tree, one file changed."""
    start = time.perf_counter()
    reads: list[str] = []

    def seen(request: Any, **_: Any) -> None:  # a ranged GET to a pack's end: its index
        asked = request.headers.get("Range")
        if request.method == "GET" and "/packs/" in request.url and asked:
            reads.append(asked.decode() if isinstance(asked, bytes) else asked)

    client.meta.events.register("before-send.s3", seen)
    (home / "next/00/kernel-000000.json").write_bytes(os.urandom(FILE_BYTES))
    cache_id = f"next-{time.time_ns() % 10**12:012}"
    register_cache(home, cache_id, home / "next")
    _archive(home, client, location, cache_id)
    status = Path("/proc/self/status").read_text()
    peak = int(status.split("VmHWM:", 1)[1].split()[0]) / 1024
    return {
        "wall_s": round(time.perf_counter() - start, 3),
        "peak_rss_mib": round(peak, 1),
        "ranged_pack_gets": len(reads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("seed", "next"))
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--to", required=True, help="s3://BUCKET/PREFIX")
    parser.add_argument("--packs", type=int, default=3000)
    parser.add_argument("--files", type=int, default=3, help="small files in each pack")
    args = parser.parse_args()
    bucket, _, prefix = args.to.removeprefix("s3://").partition("/")
    location, client = ArchiveLocation(bucket, prefix), s3_client(os.environ)
    if args.step == "seed":
        seed(args.home, client, location, args.packs, args.files)
    else:
        print(json.dumps(next_archive(args.home, client, location)))


if __name__ == "__main__":
    main()
