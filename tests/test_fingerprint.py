"""Fingerprints of JIT cache dirs: stable digests, no following, re-scans that read nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lifecycle import fingerprint
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import (
    Entry,
    Fingerprint,
    FingerprintFormatError,
    ScanError,
    is_transient,
    scan,
)

BIG = fingerprint.CHUNK * 3 + 1  # several reads, the last one short


def make_cache(root: Path) -> Path:
    """A small FlashInfer-like cache: nested dirs, an executable .so, a big file, an empty one."""
    ops = root / "cached_ops" / "mix"
    ops.mkdir(parents=True)
    (ops / "build.ninja").write_text("rule cxx\n")
    (ops / "mix.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 40)
    (ops / "mix.so").chmod(0o755)
    (ops / ".ninja_log").write_text("# ninja log v5\n")
    (root / "cubins").mkdir()
    (root / "cubins" / "big.cubin").write_bytes(os.urandom(BIG))
    (root / "flashinfer_jit.log").write_bytes(b"")
    (root / "current").symlink_to("cached_ops/mix")
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def by_path(fp: Fingerprint) -> dict[str, Entry]:
    return {e.path: e for e in fp.entries}


def test_entries_are_sorted_hashed_and_counted(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    fp = scan(root)
    entries = by_path(fp)
    assert [e.path for e in fp.entries] == sorted(entries)
    assert entries["cached_ops/mix/mix.so"].sha256 == sha(
        (root / "cached_ops/mix/mix.so").read_bytes()
    )
    assert entries["cached_ops/mix/mix.so"].mode == 0o755
    assert entries["cubins/big.cubin"].sha256 == sha((root / "cubins/big.cubin").read_bytes())
    assert entries["flashinfer_jit.log"].sha256 == sha(b"")
    ops = entries["cached_ops"]
    assert (ops.kind, ops.size, ops.sha256, ops.link) == ("dir", 0, None, None)
    assert ops.inode == (root / "cached_ops").stat().st_ino
    assert entries["current"].kind == "symlink"
    assert entries["current"].link == "cached_ops/mix"
    assert fp.files == 5
    assert fp.bytes == sum(e.size for e in fp.entries if e.kind == "file")


def test_digest_is_stable_across_rescans_and_copies(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    first = scan(root)
    assert scan(root).tree_digest == first.tree_digest
    copy = tmp_path / "restored"
    shutil.copytree(root, copy, symlinks=True)
    restored = scan(copy)
    # Same bytes, other inodes (and mtimes of the dirs): the digest must not see them.
    assert by_path(restored)["cubins/big.cubin"].inode != by_path(first)["cubins/big.cubin"].inode
    assert restored.tree_digest == first.tree_digest
    assert not first.diff(restored)


def test_workers_do_not_change_the_result(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    assert scan(root, workers=1) == scan(root, workers=4)
    with pytest.raises(ValueError, match="workers"):
        scan(root, workers=0)


def _retarget_link(root: Path) -> None:
    (root / "current").unlink()
    (root / "current").symlink_to("cubins")


def _flip_one_byte(root: Path) -> None:
    path = root / "cubins" / "big.cubin"
    data = bytearray(path.read_bytes())
    data[BIG // 2] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "change",
    [
        _flip_one_byte,
        lambda root: (root / "cached_ops/mix/build.ninja").rename(root / "cached_ops/mix/b.ninja"),
        lambda root: (root / "cached_ops/mix/mix.so").chmod(0o644),
        lambda root: (root / "cached_ops/mix").chmod(0o700),
        _retarget_link,
        lambda root: (root / "cubins" / "empty").mkdir(),
    ],
    ids=["one-byte", "rename", "file-mode", "dir-mode", "link-target", "new-dir"],
)
def test_digest_changes_with_content_names_modes_and_links(
    tmp_path: Path, change: Callable[[Path], object]
) -> None:
    root = make_cache(tmp_path / "cache")
    before = scan(root)
    change(root)
    assert scan(root).tree_digest != before.tree_digest
    assert scan(root, before).tree_digest != before.tree_digest


def _scan_within(root: Path, seconds: float) -> Fingerprint:
    """Scan on a daemon thread: a scan that blocks (opening a FIFO) fails instead of hanging."""
    result: list[Fingerprint | BaseException] = []

    def run() -> None:
        try:
            result.append(scan(root))
        except BaseException as exc:  # handed to the test thread
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"scan of {root} blocked for {seconds} s"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def test_symlinks_and_fifos_are_recorded_not_followed(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.so").write_bytes(b"not part of the cache")
    (root / "etc").symlink_to("/etc")
    (root / "elsewhere").symlink_to(outside)
    (root / "dangling").symlink_to("no/such/file")
    os.mkfifo(root / "cached_ops" / "mix" / "pipe")
    fp = _scan_within(root, 10)
    entries = by_path(fp)
    assert entries["etc"] == Entry(
        "etc", "symlink", 0, 0o777, None, "/etc", entries["etc"].mtime_ns, entries["etc"].inode
    )
    assert entries["elsewhere"].link == str(outside)
    assert entries["dangling"].link == "no/such/file"
    pipe = entries["cached_ops/mix/pipe"]
    assert (pipe.kind, pipe.size, pipe.sha256, pipe.link) == ("other", 0, None, None)
    assert not [p for p in entries if p.startswith(("etc/", "elsewhere/"))]
    assert fp.files == 5


def test_locks_and_temp_files_are_left_out(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    before = scan(root)
    (root / "locks").mkdir()
    (root / "cached_ops" / "mix" / "locks").mkdir()
    for transient in (
        "locks/mix.lock",
        "cached_ops/mix/locks/build.lock",
        ".12345.140211.tmp",
        "cached_ops/mix/.mix.so.tmp",
    ):
        (root / transient).write_text("")
    (root / "mix.lock").write_text("")  # not in a locks dir: part of the cache
    (root / "cached_ops" / "mix" / "partial.tmp").write_text("")  # no leading dot: kept
    paths = {e.path for e in scan(root).entries}
    assert paths - {e.path for e in before.entries} == {
        "locks",
        "cached_ops/mix/locks",
        "mix.lock",
        "cached_ops/mix/partial.tmp",
    }


@pytest.mark.parametrize(
    ("name", "parent", "transient"),
    [
        ("a.lock", "locks", True),
        (".1.2.tmp", "anything", True),
        (".tmp", "x", True),
        ("a.lock", "lock", False),
        ("locks.lock", "cache", False),
        ("a.tmp", "x", False),
        (".hidden", "locks", False),
    ],
)
def test_transient_rule(name: str, parent: str, transient: bool) -> None:
    assert is_transient(name, parent) is transient


def test_rescan_reuses_hashes_without_reading(tmp_path: Path) -> None:
    """Proof by a deliberate blind spot rather than by a mock: the file's bytes change but its
    size, mtime_ns and inode are put back. A re-scan that read the file would see the new bytes;
    one that trusts `previous` keeps the old hash. Running as root, chmod 000 would prove nothing.
    """
    root = make_cache(tmp_path / "cache")
    target = root / "cubins" / "big.cubin"
    before = scan(root)
    old = target.stat()
    with target.open("r+b") as out:  # in place: same inode
        out.write(b"rewritten")
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    again = scan(root, before)
    assert again is before  # every entry re-used, so the previous fingerprint itself
    assert by_path(again)["cubins/big.cubin"].sha256 == by_path(before)["cubins/big.cubin"].sha256
    assert by_path(scan(root))["cubins/big.cubin"].sha256 == sha(target.read_bytes())


def test_same_size_new_mtime_is_rehashed(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    target = root / "cached_ops" / "mix" / "mix.so"
    before = scan(root)
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    mtime = target.stat().st_mtime_ns
    target.write_bytes(bytes(data))
    # One second later for sure: a rewrite within one coarse mtime tick is the known blind spot.
    os.utime(target, ns=(mtime + 10**9, mtime + 10**9))
    after = scan(root, before)
    assert by_path(after)["cached_ops/mix/mix.so"].sha256 == sha(bytes(data))
    assert after.tree_digest == scan(root).tree_digest
    assert before.diff(after).changed == ("cached_ops/mix/mix.so",)


def test_json_round_trip(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    (root / "caf\udcff.bin").write_bytes(b"a name that is not UTF-8")
    fp = scan(root)
    text = fp.to_json()
    assert Fingerprint.from_json(text) == fp
    assert text == Fingerprint.from_json(text).to_json()
    assert "\n" not in text and ", " not in text


@pytest.mark.parametrize(
    "tamper",
    [
        lambda doc: doc["entries"][0].__setitem__(2, 99),
        lambda doc: doc["entries"].append(doc["entries"][0]),
        lambda doc: doc["entries"][0].__setitem__(1, "pipe"),
        lambda doc: doc["entries"][0].__setitem__(4, "ab" * 32),  # entry 0 is a dir
        lambda doc: doc["entries"][0].__setitem__(2, False),
        lambda doc: doc.__setitem__("format", 99),
        lambda doc: doc.pop("tree_digest"),
    ],
    ids=["size", "duplicate", "kind", "sha256-on-a-dir", "bool-size", "format", "no-digest"],
)
def test_a_tampered_or_foreign_json_is_refused(
    tmp_path: Path, tamper: Callable[[dict[str, Any]], object]
) -> None:
    document = json.loads(scan(make_cache(tmp_path / "cache")).to_json())
    tamper(document)
    with pytest.raises(FingerprintFormatError):
        Fingerprint.from_json(json.dumps(document))
    with pytest.raises(FingerprintFormatError):
        Fingerprint.from_json("[1, 2")


def test_diff_lists_added_removed_and_changed(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    before = scan(root)
    (root / "flashinfer_jit.log").write_text("Building JIT module mix\n")
    (root / "cubins" / "big.cubin").unlink()
    (root / "cached_ops" / "norm").mkdir()
    (root / "cached_ops" / "norm" / "norm.so").write_bytes(b"\x7fELF")
    diff = before.diff(scan(root))
    assert diff.added == ("cached_ops/norm", "cached_ops/norm/norm.so")
    assert diff.removed == ("cubins/big.cubin",)
    # The dirs whose listing changed differ only in mtime, which a diff does not count.
    assert diff.changed == ("flashinfer_jit.log",)


def test_a_missing_root_or_a_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScanError, match="does not exist") as missing:
        scan(tmp_path / "nowhere")
    assert isinstance(missing.value, LifecycleError)
    (tmp_path / "file").write_text("")
    with pytest.raises(ScanError, match="not a directory"):
        scan(tmp_path / "file")


def test_a_directory_vanishing_mid_walk_is_reported(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    walk = fingerprint._walk(str(root))
    next(walk)  # the root is listed; its subdirectories are not yet read
    shutil.rmtree(root / "cached_ops")
    with pytest.raises(ScanError, match=r"cached_ops: vanished during the scan; is a boot"):
        list(walk)


def test_a_file_vanishing_or_changing_before_it_is_hashed_is_reported(tmp_path: Path) -> None:
    root = make_cache(tmp_path / "cache")
    walked = by_path(scan(root))
    so = root / "cached_ops" / "mix" / "mix.so"
    so.write_bytes(b"longer" * 10_000)
    with pytest.raises(ScanError, match=r"mix\.so: changed during the scan"):
        fingerprint._hash_file(str(so), walked["cached_ops/mix/mix.so"])
    so.unlink()
    with pytest.raises(ScanError, match=r"mix\.so: vanished during the scan"):
        fingerprint._hash_file(str(so), walked["cached_ops/mix/mix.so"])


def test_a_cache_written_during_scans_gives_results_or_scan_errors(tmp_path: Path) -> None:
    """A writer creating, replacing and deleting files and dirs the whole time: every scan ends
    in a fingerprint or a ScanError (the CLI prints it in one line), never another exception."""
    root = make_cache(tmp_path / "cache")
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            key = root / "triton" / f"k{n % 7}"
            key.mkdir(parents=True, exist_ok=True)
            temp = key / f".{os.getpid()}.{n}.tmp"
            temp.write_bytes(os.urandom(n % 5000))
            temp.replace(key / "kernel.cubin")
            if n % 3 == 0:
                shutil.rmtree(key)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        # Measured over 200 scans: ~40 % fingerprints, ~30 % "vanished", ~30 % "changed".
        for _ in range(40):
            try:
                scan(root)
            except ScanError as exc:
                assert "is a boot still writing this cache?" in str(exc)
    finally:
        stop.set()
        thread.join()
