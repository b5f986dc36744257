"""The re-scan fast path: True only for a tree exactly as `previous` saw it, forked or not."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from lifecycle import fingerprint, rescan
from lifecycle.fingerprint import Fingerprint, scan
from tests.test_fingerprint import make_cache


def unchanged(root: Path, previous: Fingerprint, workers: int) -> bool:
    """rescan.unchanged with the walk's own rules, as scan() calls it."""
    return rescan.unchanged(
        str(root),
        previous,
        workers,
        kinds=fingerprint._KINDS,
        transient=fingerprint.is_transient,
    )


def fork_is_safe_within(seconds: float, check: Callable[[], bool]) -> bool:
    """Poll `check` (rescan._fork_is_safe) for scan()'s hashing threads to leave.

    They are joined before scan() returns, yet stay in /proc/self/status for a few more ms (seen:
    up to 6); a re-scan that soon does not fork, correctly but not what these tests are about.
    """
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.001)
    return check()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fork check in rescan wait for the hashing threads of an earlier scan() to leave."""
    safe = rescan._fork_is_safe
    monkeypatch.setattr(rescan, "_fork_is_safe", lambda: fork_is_safe_within(5, safe))


@pytest.fixture(params=["in-process", "forked"])
def workers(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, forks: list[int]
) -> Iterator[int]:
    """1 worker, or 2 with the fork threshold lifted; the forked run must really have forked."""
    if request.param == "in-process":
        yield 1
        assert forks == []
        return
    monkeypatch.setattr(rescan, "FORK_MIN_ENTRIES", 0)
    monkeypatch.setattr(rescan, "_MIN_BATCH", 1)  # a batch per directory, some for the child
    request.getfixturevalue("settled")
    yield 2
    assert len(forks) >= 1


def cache(tmp_path: Path) -> Path:
    """make_cache plus a `locks` dir holding a lock file, as a JIT cache has."""
    root = make_cache(tmp_path / "cache")
    (root / "locks").mkdir()
    (root / "locks" / "mix.lock").write_text("")
    return root


def test_an_unchanged_tree_gives_previous_without_a_walk(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    before = scan(root)
    assert unchanged(root, before, workers)

    def no_walk(top: str) -> Iterator[tuple[str, os.stat_result, str | None]]:
        raise AssertionError("the fast path should have answered")

    monkeypatch.setattr(fingerprint, "_walk", no_walk)
    assert scan(root, before, workers=workers) is before


def _rewrite_same_size(root: Path) -> str:
    target = root / "cached_ops" / "mix" / "mix.so"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    mtime = target.stat().st_mtime_ns
    target.write_bytes(bytes(data))  # same inode, same size
    os.utime(target, ns=(mtime + 10**9, mtime + 10**9))
    return "cached_ops/mix/mix.so"


def _grow_keep_mtime(root: Path) -> str:
    target = root / "cached_ops" / "mix" / "build.ninja"
    old = target.stat()
    with target.open("ab") as out:  # same inode; then the old mtime back: only the size tells
        out.write(b"build mix.o: cxx mix.cu\n")
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    return "cached_ops/mix/build.ninja"


def _add_file(root: Path) -> str:
    (root / "cached_ops" / "mix" / "norm.o").write_bytes(b"\x7fELF")
    return "cached_ops/mix/norm.o"


def _add_empty_dir(root: Path) -> str:
    (root / "cubins" / "sm90").mkdir()
    return "cubins/sm90"


def _add_lock_outside_locks(root: Path) -> str:
    (root / "cubins" / "mix.lock").write_text("")  # only `locks/*.lock` is transient
    return "cubins/mix.lock"


def _remove_file(root: Path) -> str:
    (root / "flashinfer_jit.log").unlink()
    return "flashinfer_jit.log"


def _remove_dir(root: Path) -> str:
    shutil.rmtree(root / "cached_ops" / "mix")
    return "cached_ops/mix"


def _chmod_file(root: Path) -> str:
    (root / "cached_ops" / "mix" / "mix.so").chmod(0o644)
    return "cached_ops/mix/mix.so"


def _chmod_dir(root: Path) -> str:
    (root / "cubins").chmod(0o700)
    return "cubins"


def _file_to_symlink(root: Path) -> str:
    (root / "flashinfer_jit.log").unlink()
    (root / "flashinfer_jit.log").symlink_to("cubins/big.cubin")
    return "flashinfer_jit.log"


def _retarget_symlink(root: Path) -> str:
    (root / "current").unlink()
    (root / "current").symlink_to("cubins")
    return "current"


def _dir_to_symlink(root: Path) -> str:
    # Same names, same inodes below, reached through a link: the walk must not follow it.
    moved = root.parent / "moved"
    (root / "cubins").rename(moved)
    (root / "cubins").symlink_to(moved)
    return "cubins"


def _rename(root: Path) -> str:
    (root / "cached_ops" / "mix" / "build.ninja").rename(root / "cached_ops" / "mix" / "b.ninja")
    return "cached_ops/mix/b.ninja"


CHANGES = [
    _rewrite_same_size,
    _grow_keep_mtime,
    _add_file,
    _add_empty_dir,
    _add_lock_outside_locks,
    _remove_file,
    _remove_dir,
    _chmod_file,
    _chmod_dir,
    _file_to_symlink,
    _retarget_symlink,
    _dir_to_symlink,
    _rename,
]


def _dir_mtimes(root: Path) -> dict[Path, int]:
    return {d: d.lstat().st_mtime_ns for d in [root, *root.rglob("*")] if d.is_dir()}


def _restore_dir_mtimes(mtimes: dict[Path, int]) -> None:
    """Put back the directories' mtimes, so only the entry itself betrays a change."""
    for directory, mtime in mtimes.items():
        if directory.is_dir() and not directory.is_symlink():
            os.utime(directory, ns=(mtime, mtime))


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_every_kind_of_change_is_seen(
    tmp_path: Path, workers: int, change: Callable[[Path], str]
) -> None:
    root = cache(tmp_path)
    before = scan(root)
    mtimes = _dir_mtimes(root)
    path = change(root)
    _restore_dir_mtimes(mtimes)  # harder: a parent's new mtime would give most changes away
    assert not unchanged(root, before, workers)
    after = scan(root, before, workers=workers)
    assert after is not before
    assert after.tree_digest != before.tree_digest
    assert after.tree_digest == scan(root).tree_digest
    diff = before.diff(after)
    assert path in diff.added + diff.removed + diff.changed


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("cubins/big.cubin", "kind", "other"),
        ("cubins/big.cubin", "size", 1),
        ("cubins/big.cubin", "mode", 0o600),
        ("cubins", "mtime_ns", 1),
        ("cubins", "inode", 1),
        ("current", "link", "cubins"),
    ],
)
def test_each_compared_field_counts(
    tmp_path: Path, workers: int, path: str, field: str, value: Any
) -> None:
    """A previous that differs from the tree in one field of one entry (changes on disk move
    several at once): the walk would not give it back, so neither may the fast path."""
    root = cache(tmp_path)
    fp = scan(root)
    edit = {field: value}
    entries = tuple(dataclasses.replace(e, **edit) if e.path == path else e for e in fp.entries)
    odd = dataclasses.replace(fp, entries=entries)
    assert not unchanged(root, odd, workers)
    assert scan(root, odd, workers=workers) is not odd


def _touch(root: Path) -> None:
    os.utime(root / "cubins" / "big.cubin")


def _same_bytes_new_inode(root: Path) -> None:
    target = root / "flashinfer_jit.log"
    old = target.stat()
    copy = root / "copy"
    shutil.copy2(target, copy)
    os.utime(copy, ns=(old.st_atime_ns, old.st_mtime_ns))
    copy.replace(target)


@pytest.mark.parametrize("change", [_touch, _same_bytes_new_inode], ids=["touch", "new-inode"])
def test_a_new_identity_with_the_same_bytes_is_not_previous(
    tmp_path: Path, workers: int, change: Callable[[Path], None]
) -> None:
    """Same digest, but the walk would not give `previous` back (new mtime or inode): nor may the
    fast path, or the next re-scan would compare against stale identities."""
    root = cache(tmp_path)
    before = scan(root)
    mtimes = _dir_mtimes(root)
    change(root)
    _restore_dir_mtimes(mtimes)
    assert not unchanged(root, before, workers)
    after = scan(root, before, workers=workers)
    assert after is not before
    assert after.tree_digest == before.tree_digest


def test_transient_files_are_not_a_change(tmp_path: Path, workers: int) -> None:
    root = cache(tmp_path)
    (root / "cached_ops" / "mix" / ".41.7.tmp").write_text("old")
    before = scan(root)
    mtimes = _dir_mtimes(root)
    (root / "locks" / "mix.lock").write_text("held")  # rewritten
    (root / "locks" / "norm.lock").write_text("")  # added
    (root / "cached_ops" / "mix" / ".41.7.tmp").unlink()  # removed
    (root / "cached_ops" / "mix" / ".42.7.tmp").write_bytes(b"partial")  # added
    _restore_dir_mtimes(mtimes)
    assert unchanged(root, before, workers)
    assert scan(root, before, workers=workers) is before


def test_fifos_and_a_symlinked_root_take_the_fast_path(tmp_path: Path, workers: int) -> None:
    root = cache(tmp_path)
    os.mkfifo(root / "cubins" / "pipe")
    link = tmp_path / "link"
    link.symlink_to(root)
    before = scan(link)
    assert unchanged(link, before, workers)
    assert scan(link, before, workers=workers) is before


@pytest.mark.usefixtures("settled")
def test_a_large_tree_forks_without_help(tmp_path: Path, forks: list[int]) -> None:
    root = tmp_path / "cache"
    for d in range(rescan.FORK_MIN_ENTRIES // 100 + 1):
        (root / f"d{d:03d}").mkdir(parents=True)
        for f in range(100):
            (root / f"d{d:03d}" / f"{f}.json").write_bytes(b"")
    before = scan(root)
    assert len(before.entries) > rescan.FORK_MIN_ENTRIES
    assert scan(root, before, workers=2) is before
    assert len(forks) == 1
    (root / "d007" / "5.json").write_bytes(b"{}")
    assert scan(root, before, workers=2).diff(before).changed == ("d007/5.json",)


@pytest.mark.usefixtures("settled")
def test_the_child_takes_batches_and_its_verdict_counts(
    tmp_path: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent dawdles over its first batch (the root, the largest), so the child takes the
    rest; a change there must come back through the child's exit status."""
    monkeypatch.setattr(rescan, "FORK_MIN_ENTRIES", 0)
    monkeypatch.setattr(rescan, "_MIN_BATCH", 1)
    root = cache(tmp_path)
    before = scan(root)
    log = tmp_path / "checked"
    check = rescan._listed_unchanged
    parent = os.getpid()

    def logged(top: str, batch: list[rescan.Listing], *rules: Any) -> bool:
        if os.getpid() == parent:
            time.sleep(0.2)
        with log.open("a") as out:
            out.writelines(f"{os.getpid()} {directory}\n" for directory, _ in batch)
        return check(top, batch, *rules)

    monkeypatch.setattr(rescan, "_listed_unchanged", logged)
    assert unchanged(root, before, 2)
    assert f"{forks[-1]} cached_ops/mix" in log.read_text().splitlines()
    (root / "cached_ops" / "mix" / "mix.so").chmod(0o700)
    log.unlink()
    assert not unchanged(root, before, 2)
    assert f"{forks[-1]} cached_ops/mix" in log.read_text().splitlines()
    assert f"{parent} cached_ops/mix" not in log.read_text().splitlines()


def test_small_trees_and_one_worker_do_not_fork(tmp_path: Path, forks: list[int]) -> None:
    root = cache(tmp_path)
    before = scan(root)
    assert unchanged(root, before, 2)  # below FORK_MIN_ENTRIES
    assert unchanged(root, before, 1)
    assert forks == []


def test_no_fork_while_another_thread_runs(
    tmp_path: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rescan, "FORK_MIN_ENTRIES", 0)
    root = cache(tmp_path)
    before = scan(root)
    assert fork_is_safe_within(5, rescan._fork_is_safe)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not rescan._fork_is_safe()
        assert unchanged(root, before, 2)
        assert forks == []
    finally:
        stop.set()
        thread.join()


@pytest.mark.usefixtures("settled")
def test_no_fork_to_be_had_leaves_it_to_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fork() -> int:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(rescan, "FORK_MIN_ENTRIES", 0)
    root = cache(tmp_path)
    before = scan(root)
    monkeypatch.setattr(os, "fork", no_fork)
    assert not unchanged(root, before, 2)
    assert scan(root, before, workers=2) is before  # the walk found nothing changed either


def test_a_failing_child_answers_false_and_no_child_returns_here(tmp_path: Path) -> None:
    """A child whose check fails, raises or is interrupted exits non-zero through os._exit: it
    never comes back to run the rest of this test (which would write a second line)."""
    marks = tmp_path / "marks"

    def interrupted() -> bool:
        raise KeyboardInterrupt

    def failing() -> bool:
        raise OSError("boom")

    assert rescan._forked([lambda: True, lambda: True]) is True
    assert rescan._forked([lambda: True, lambda: False]) is False
    assert rescan._forked([lambda: True, lambda: True, interrupted]) is False
    assert rescan._forked([lambda: True, failing]) is False
    with marks.open("a") as out:
        out.write(f"{os.getpid()}\n")
    assert marks.read_text() == f"{os.getpid()}\n"


def test_a_mismatch_empties_the_queue_so_the_other_checkers_stop(tmp_path: Path) -> None:
    root = cache(tmp_path)
    before = scan(root)
    listings = rescan._listings(before.entries)
    assert listings is not None
    batches = sorted(([item] for item in listings.items()), key=lambda b: b[0][0] != "cubins")

    def check(queue: int) -> bool:
        kinds, transient = fingerprint._KINDS, fingerprint.is_transient
        return rescan._drain(queue, str(root), batches, kinds, transient)

    with rescan._queue(len(batches)) as queue:
        assert check(queue)
        assert os.read(queue, 2) == b""
    (root / "cubins" / "big.cubin").chmod(0o600)  # in the first batch taken
    with rescan._queue(len(batches)) as queue:
        assert not check(queue)
        assert os.read(queue, 2) == b""  # the rest were taken out unchecked


def test_an_interrupted_parent_kills_and_reaps_its_children(forks: list[int]) -> None:
    def interrupted() -> bool:
        raise KeyboardInterrupt

    def stuck() -> bool:
        time.sleep(60)
        return True

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        rescan._forked([interrupted, stuck, stuck])
    assert time.monotonic() - started < 10
    assert len(forks) == 2
    for pid in forks:
        with pytest.raises(ChildProcessError):  # reaped already: no zombie left behind
            os.waitpid(pid, os.WNOHANG)


def _unsorted(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=fp.entries[::-1])


def _repeated(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=(*fp.entries, fp.entries[-1]))


def _orphan(fp: Fingerprint) -> Fingerprint:
    # An entry below a file: no directory to list it in, so nothing could vouch for it.
    orphan = dataclasses.replace(fp.entries[-1], path="flashinfer_jit.log/x")
    entries = sorted((*fp.entries, orphan), key=attrgetter("path"))
    return dataclasses.replace(fp, entries=tuple(entries))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("shape", [_unsorted, _repeated, _orphan], ids=lambda f: f.__name__)
def test_a_previous_no_walk_gives_is_refused(
    tmp_path: Path,
    workers: int,
    shape: Callable[[Fingerprint], Fingerprint],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rescan, "FORK_MIN_ENTRIES", 0)
    root = cache(tmp_path)
    odd = shape(scan(root))
    assert not unchanged(root, odd, workers)
    assert scan(root, odd, workers=workers) is not odd
