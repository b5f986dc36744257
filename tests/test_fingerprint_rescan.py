"""The re-scan, `scan(root, previous)`: `previous` itself back only for a tree exactly as it was.

An unchanged re-scan reads no file and gives back the very object it was handed; any change,
however well hidden (a parent directory's mtime put back), gives a new fingerprint that equals
a fresh scan's.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from lifecycle import fingerprint
from lifecycle.fingerprint import Entry, Fingerprint, scan
from tests.test_fingerprint import make_cache


def cache(tmp_path: Path) -> Path:
    """make_cache plus a `locks` dir holding a lock file, as a JIT cache has."""
    root = make_cache(tmp_path / "cache")
    (root / "locks").mkdir()
    (root / "locks" / "mix.lock").write_text("")
    return root


def test_an_unchanged_tree_gives_previous_and_hashes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    before = scan(root)

    def no_hash(path: str, walked: Entry) -> str:
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(fingerprint, "_hash_file", no_hash)
    assert scan(root, before) is before
    assert scan(root, before, workers=1) is before


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
def test_every_kind_of_change_is_seen(tmp_path: Path, change: Callable[[Path], str]) -> None:
    root = cache(tmp_path)
    before = scan(root)
    mtimes = _dir_mtimes(root)
    path = change(root)
    _restore_dir_mtimes(mtimes)  # harder: a parent's new mtime would give most changes away
    after = scan(root, before)
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
        ("cubins/big.cubin", "mtime_ns", 1),
        ("cubins/big.cubin", "inode", 1),
        ("cubins", "mtime_ns", 1),
        ("cubins", "inode", 1),
        ("current", "link", "cubins"),
        ("current", "link", "cached_ops/mi"),  # a prefix of the real target
        ("cubins/big.cubin", "link", "x"),  # a link on a file: no walk gives it
    ],
)
def test_each_compared_field_counts(tmp_path: Path, path: str, field: str, value: Any) -> None:
    """A previous that differs from the tree in one field of one entry (changes on disk move
    several at once): the walk would not give it back."""
    root = cache(tmp_path)
    fp = scan(root)
    edit = {field: value}
    entries = tuple(dataclasses.replace(e, **edit) if e.path == path else e for e in fp.entries)
    odd = dataclasses.replace(fp, entries=entries)
    assert scan(root, odd) is not odd


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
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    """Same digest, but new identities (mtime or inode): `previous` back would make the next
    re-scan compare against stale ones."""
    root = cache(tmp_path)
    before = scan(root)
    mtimes = _dir_mtimes(root)
    change(root)
    _restore_dir_mtimes(mtimes)
    after = scan(root, before)
    assert after is not before
    assert after.tree_digest == before.tree_digest


def test_transient_files_are_not_a_change(tmp_path: Path) -> None:
    root = cache(tmp_path)
    (root / "cached_ops" / "mix" / ".41.7.tmp").write_text("old")
    before = scan(root)
    mtimes = _dir_mtimes(root)
    (root / "locks" / "mix.lock").write_text("held")  # rewritten
    (root / "locks" / "norm.lock").write_text("")  # added
    (root / "cached_ops" / "mix" / ".41.7.tmp").unlink()  # removed
    (root / "cached_ops" / "mix" / ".42.7.tmp").write_bytes(b"partial")  # added
    _restore_dir_mtimes(mtimes)
    assert scan(root, before) is before


def test_fifos_and_a_symlinked_root_give_previous(tmp_path: Path) -> None:
    root = cache(tmp_path)
    os.mkfifo(root / "cubins" / "pipe")
    link = tmp_path / "link"
    link.symlink_to(root)
    before = scan(link)
    assert scan(link, before) is before


def test_odd_names_give_previous_and_their_changes_are_seen(tmp_path: Path) -> None:
    """Non-ASCII names, and bytes that are no UTF-8 (surrogate escapes in Python)."""
    root = make_cache(tmp_path / "cache")
    odd = os.fsencode(root) + b"/cubins/"
    for name in (b"caf\xc3\xa9.so", b"\xff\xfe.bin", b"sp ace-\x01.o"):
        Path(os.fsdecode(odd + name)).write_bytes(name)
    (root / "dir-\u00e9").mkdir()
    (root / "dir-\u00e9" / "x").write_text("x")
    before = scan(root)
    assert scan(root, before) is before
    target = Path(os.fsdecode(odd + b"\xff\xfe.bin"))
    target.write_bytes(b"changed!")
    after = scan(root, before)
    assert before.diff(after).changed == (os.fsdecode(b"cubins/\xff\xfe.bin"),)


def _unsorted(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=fp.entries[::-1])


def _repeated(fp: Fingerprint) -> Fingerprint:
    return dataclasses.replace(fp, entries=(*fp.entries, fp.entries[-1]))


def _orphan(fp: Fingerprint) -> Fingerprint:
    # An entry below a file: no walk could give it.
    orphan = dataclasses.replace(fp.entries[-1], path="flashinfer_jit.log/x")
    entries = sorted((*fp.entries, orphan), key=attrgetter("path"))
    return dataclasses.replace(fp, entries=tuple(entries))


def _nul_in_a_path(fp: Fingerprint) -> Fingerprint:
    # No file name holds a NUL: it must not be taken for the real file.
    entries = (
        dataclasses.replace(e, path=e.path + "\0") if e.path == "flashinfer_jit.log" else e
        for e in fp.entries
    )
    return dataclasses.replace(fp, entries=tuple(entries))


@pytest.mark.parametrize(
    "shape", [_unsorted, _repeated, _orphan, _nul_in_a_path], ids=lambda f: f.__name__
)
def test_a_previous_no_walk_gives_is_not_given_back(
    tmp_path: Path, shape: Callable[[Fingerprint], Fingerprint]
) -> None:
    root = cache(tmp_path)
    fresh = scan(root)
    odd = shape(fresh)
    again = scan(root, odd)
    assert again is not odd
    assert again.tree_digest == fresh.tree_digest
