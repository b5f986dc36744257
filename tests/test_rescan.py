"""The re-scan fast path: True only for a tree exactly as `previous` saw it, in C or in Python."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from lifecycle import fingerprint, rescan
from lifecycle.fingerprint import Entry, Fingerprint, scan
from tests.test_fingerprint import make_cache

TRANSIENT = (fingerprint.TRANSIENT_SUFFIXES, fingerprint.is_transient)
C_HALF = rescan._differing  # as imported, whatever a test patches in
C_BUILT = C_HALF is not None


def unchanged(root: Path, previous: Fingerprint, workers: int) -> bool:
    """rescan.unchanged with the walk's own rules, as scan() calls it."""
    return rescan.unchanged(
        str(root), previous, workers, kinds=fingerprint._KINDS, transient=TRANSIENT
    )


def differing(root: Path, previous: Fingerprint, threads: int = 2) -> list[str] | None:
    """The directories the C half flags for a second look, by path."""
    assert C_HALF is not None
    flagged = C_HALF(str(root), previous.entries, threads, TRANSIENT[0])
    return None if flagged is None else [directory for directory, _ in flagged]


def test_the_c_half_is_built_where_ci_runs() -> None:
    """The extension is optional (a host with no C compiler still installs the package), so a
    build that silently left it out would pass every other test on the Python path: not in CI."""
    if not os.environ.get("CI") and not C_BUILT:
        pytest.skip("lifecycle._rescan not built here (no C compiler?)")
    assert C_BUILT


needs_c = pytest.mark.skipif(not C_BUILT and not os.environ.get("CI"), reason="no C extension")


@pytest.fixture(params=["python", "c, 1 thread", "c, 2 threads"])
def workers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The Python check, or the C one on 1 or 2 threads; the C one must really have run."""
    if request.param == "python":
        monkeypatch.setattr(rescan, "_differing", None)
        yield 2
        return
    real = C_HALF
    if real is None:
        if os.environ.get("CI"):
            pytest.fail("lifecycle._rescan is not built")
        pytest.skip("lifecycle._rescan not built here")
    calls: list[int] = []

    def counted(top: str, entries: Sequence[Entry], threads: int, suffixes: Any) -> Any:
        calls.append(threads)
        return real(top, entries, threads, suffixes)

    monkeypatch.setattr(rescan, "_differing", counted)
    threads = 1 if request.param == "c, 1 thread" else 2
    yield threads
    assert calls and set(calls) == {threads}


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


@needs_c
def test_the_c_half_flags_only_what_python_must_judge(tmp_path: Path) -> None:
    """Unchanged: only `locks` (it holds a name with a transient suffix), and the answer is
    still True. One changed file: its directory first, and the answer is False."""
    root = cache(tmp_path)
    before = scan(root)
    assert differing(root, before) == ["locks"]
    assert unchanged(root, before, 2)
    (root / "cached_ops" / "mix" / "mix.so").chmod(0o700)  # its directory's mtime stays
    # One thread lists in path order ("", cached_ops, cached_ops/mix, cubins, locks) and stops
    # at the change: what it did not list goes back to Python as well.
    assert differing(root, before, threads=1) == ["cached_ops/mix", "cubins", "locks"]
    assert differing(root, before)[0] == "cached_ops/mix"
    assert not unchanged(root, before, 2)


@needs_c
@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("cubins/big.cubin", "kind", "other"),
        ("cubins/big.cubin", "size", 1),
        ("cubins/big.cubin", "mode", 0o600),
        ("cubins/big.cubin", "mtime_ns", 1),
        ("cubins/big.cubin", "inode", 1),
        ("current", "link", "cubins"),
        ("current", "link", "cached_ops/mi"),  # a prefix of the real target
        ("current", "link", "cached_ops/mix/"),  # the real target is a prefix of it
        ("cubins/big.cubin", "link", "x"),  # a link on a file: no walk gives it
        ("cubins/big.cubin", "inode", 2**64 - 1),  # beyond what C reads: Python decides
        ("cubins/big.cubin", "mode", 0o10644),  # type bits in the mode: no walk gives it
        ("cubins/big.cubin", "size", -1),
    ],
)
def test_the_c_half_flags_the_directory_of_each_compared_field(
    tmp_path: Path, path: str, field: str, value: Any
) -> None:
    root = make_cache(tmp_path / "cache")  # no lock file: nothing flagged unless changed
    fp = scan(root)
    assert differing(root, fp) == []
    entries = tuple(
        dataclasses.replace(e, **{field: value}) if e.path == path else e for e in fp.entries
    )
    odd = dataclasses.replace(fp, entries=entries)
    assert differing(root, odd, threads=1)[0] == path.rpartition("/")[0]
    assert not unchanged(root, odd, 2)


@needs_c
@pytest.mark.parametrize("threads", [0, 1, 3, 64, 1000])
def test_any_thread_count_lists_every_directory(tmp_path: Path, threads: int) -> None:
    root = tmp_path / "cache"
    for d in range(40):
        (root / f"d{d:02d}" / "sub").mkdir(parents=True)
        (root / f"d{d:02d}" / "sub" / "kernel.so").write_bytes(b"x" * d)
    before = scan(root)
    assert differing(root, before, threads) == []
    (root / "d39" / "sub" / "kernel.so").write_bytes(b"y" * 39)
    os.utime(root / "d39" / "sub" / "kernel.so", ns=(1, 1))
    flagged = differing(root, before, threads)
    assert flagged is not None
    assert flagged[0] == "d39/sub"


def test_odd_names_take_the_fast_path_and_their_changes_are_seen(
    tmp_path: Path, workers: int
) -> None:
    """Non-ASCII names, and bytes that are no UTF-8 (surrogate escapes in Python): the C half
    compares them as the bytes on disk, as the walk does."""
    root = make_cache(tmp_path / "cache")
    odd = os.fsencode(root) + b"/cubins/"
    for name in (b"caf\xc3\xa9.so", b"\xff\xfe.bin", b"sp ace-\x01.o"):
        Path(os.fsdecode(odd + name)).write_bytes(name)
    (root / "dir-\u00e9").mkdir()
    (root / "dir-\u00e9" / "x").write_text("x")
    before = scan(root)
    assert unchanged(root, before, workers)
    assert scan(root, before, workers=workers) is before
    target = Path(os.fsdecode(odd + b"\xff\xfe.bin"))
    target.write_bytes(b"changed!")
    after = scan(root, before, workers=workers)
    assert before.diff(after).changed == (os.fsdecode(b"cubins/\xff\xfe.bin"),)


def test_another_thread_running_changes_nothing(tmp_path: Path, workers: int) -> None:
    """The C half runs outside the GIL; a Python thread busy meanwhile must not matter."""
    root = cache(tmp_path)
    before = scan(root)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        for _ in range(20):
            assert unchanged(root, before, workers)
    finally:
        stop.set()
        thread.join()


def _unsorted(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=fp.entries[::-1])


def _repeated(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=(*fp.entries, fp.entries[-1]))


def _orphan(fp: Fingerprint) -> Fingerprint:
    # An entry below a file: no directory to list it in, so nothing could vouch for it.
    orphan = dataclasses.replace(fp.entries[-1], path="flashinfer_jit.log/x")
    entries = sorted((*fp.entries, orphan), key=attrgetter("path"))
    return dataclasses.replace(fp, entries=tuple(entries))


def _nul_in_a_path(fp: Fingerprint) -> Fingerprint:
    # No file name holds a NUL; C, which reads paths up to one, must not take it for the real file.
    entries = (
        dataclasses.replace(e, path=e.path + "\0") if e.path == "flashinfer_jit.log" else e
        for e in fp.entries
    )
    return dataclasses.replace(fp, entries=tuple(entries))


@pytest.mark.parametrize(
    "shape", [_unsorted, _repeated, _orphan, _nul_in_a_path], ids=lambda f: f.__name__
)
def test_a_previous_no_walk_gives_is_refused(
    tmp_path: Path, workers: int, shape: Callable[[Fingerprint], Fingerprint]
) -> None:
    root = cache(tmp_path)
    odd = shape(scan(root))
    assert not unchanged(root, odd, workers)
    assert scan(root, odd, workers=workers) is not odd
    if C_BUILT:
        assert differing(root, odd) is None
