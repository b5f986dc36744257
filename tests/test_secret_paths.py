"""A secret's value in a cache's paths (lifecycle.redact) is in no fingerprint, scan after
scan, whether or not the secret is known to the scan; and what of it no archive takes."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

from lifecycle.archive.restore import restorable
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, TaintedFile, start_boot
from lifecycle.redact import is_masked, mask_paths, secrets_in_path
from lifecycle.withheld import (
    Withheld,
    masked_links,
    secrets_in_cache,
    secrets_on_host,
    withheld_files,
)

TOKEN = f"q{secrets.token_hex(20)}"
HOLDER = "<redacted:HF_TOKEN>"


def _cache(root: Path) -> Path:
    (root / f"hub/models--{TOKEN}").mkdir(parents=True)
    (root / f"hub/models--{TOKEN}/a.bin").write_bytes(b"weights")
    (root / f"hub/models--x--{TOKEN}.ref").write_bytes(b"ref")
    (root / "hub/models--x--main.txt").write_bytes(b"plain")
    return root


def test_a_path_holding_the_value_is_masked_and_its_bytes_still_hashed(tmp_path: Path) -> None:
    found = scan(_cache(tmp_path), secrets={"HF_TOKEN": TOKEN})
    assert [e.path for e in found.entries] == sorted(
        [
            "hub",
            f"hub/models--{HOLDER}",
            f"hub/models--{HOLDER}/a.bin",
            "hub/models--x--main.txt",  # shaped like the others, but holding no value
            f"hub/models--x--{HOLDER}.ref",
        ]
    )
    assert TOKEN not in found.to_json()
    ref = next(e for e in found.entries if e.path.endswith(".ref"))
    assert ref.sha256 == hashlib.sha256(b"ref").hexdigest()
    assert Fingerprint.from_json(found.to_json()) == found


def test_the_mask_is_carried_by_later_scans_that_do_not_know_the_value(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    first = scan(root, secrets={"HF_TOKEN": TOKEN})
    kept = Fingerprint.from_json(first.to_json())  # as the ledger's scan file gives it back
    assert scan(root, kept) is kept  # unchanged: the same tree, not a changed one
    # New names holding the value, found again from the entries the mask hid.
    (root / f"hub/models--{TOKEN}/b.bin").write_bytes(b"more")
    (root / f"hub/{TOKEN}.lock.d").mkdir()
    (root / "hub/models--y--main.txt").write_bytes(b"plain")
    grown = scan(root, kept)
    assert {f"hub/models--{HOLDER}/b.bin", f"hub/{HOLDER}.lock.d"} <= {
        e.path for e in grown.entries
    }
    assert "hub/models--y--main.txt" in {e.path for e in grown.entries}
    assert TOKEN not in grown.to_json()
    # A full re-hash (nothing reused) masks alike when told what was masked before.
    assert scan(root, masked_like=grown).tree_digest == grown.tree_digest


def test_two_values_of_one_secret_are_masked_apart_in_a_stable_order(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    kept = scan(root, secrets={"HF_TOKEN": TOKEN})
    rotated = f"r{secrets.token_hex(20)}"  # the next boot's token
    (root / f"hub/models--x--{rotated}.ref").write_bytes(b"ref2")
    found = scan(root, kept, secrets={"HF_TOKEN": rotated})
    refs = sorted(e.path for e in found.entries if e.path.endswith(".ref"))
    assert refs == [f"hub/models--x--{HOLDER}.ref", "hub/models--x--<redacted:HF_TOKEN~2>.ref"]
    assert rotated not in found.to_json() and TOKEN not in found.to_json()
    assert scan(root, found).tree_digest == found.tree_digest  # knowing neither value now
    # A value too short to be one is no value; an unknown name is nobody's.
    assert mask_paths([("abc.log", 1)], {"PW": "abc"}) == {}
    before = [(f"hub/models--x--{HOLDER}.ref", 7)]
    assert mask_paths([("hub/models--x--ab.ref", 7)], {}, before) == {}
    assert mask_paths([("hub/other", 7)], {}, before) == {}  # the inode, another file


def test_what_no_archive_takes_and_no_restore_makes(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    (root / "jit.log").write_bytes(f"token={TOKEN}\n".encode())
    found = scan(root, secrets={"HF_TOKEN": TOKEN})
    written = {e.path for e in found.entries}
    rows = [
        TaintedFile("c", path, sha, name, "b-1")
        for path, sha, name in secrets_in_cache(root, found, written, {"HF_TOKEN": TOKEN})
    ]
    assert {(row.path, row.secret) for row in rows} == {
        (f"hub/models--x--{HOLDER}.ref", "HF_TOKEN"),
        (f"hub/models--{HOLDER}/a.bin", "HF_TOKEN"),
        ("jit.log", "HF_TOKEN"),
    }
    sha = {e.path: e.sha256 for e in found.entries}
    named = "its name holds the value of secret HF_TOKEN"
    assert withheld_files(found, rows) == [
        Withheld(f"hub/models--{HOLDER}/a.bin", str(sha[f"hub/models--{HOLDER}/a.bin"]), named),
        Withheld(f"hub/models--x--{HOLDER}.ref", str(sha[f"hub/models--x--{HOLDER}.ref"]), named),
        Withheld("jit.log", str(sha["jit.log"]), "holds the value of secret HF_TOKEN"),
    ]
    left_out = {w.path for w in withheld_files(found, rows)}
    made = {e.path for e in restorable(found, left_out).entries}
    assert made == {"hub", "hub/models--x--main.txt"}  # not the masked dir either
    assert is_masked(f"a/{HOLDER}~2") and secrets_in_path(f"{HOLDER}/<redacted:B~2>") == [
        "B",
        "HF_TOKEN",
    ]


def test_bytes_found_holding_the_value_are_withheld_under_any_name(tmp_path: Path) -> None:
    """A boot given no secret may move or copy a file another wrote the value into: the same
    bytes under a new name were archived. Bytes withheld for a masked name were never read
    for the value: another file holding them (`ref`) is not withheld for it."""
    root = _cache(tmp_path)
    (root / "jit.log").write_bytes(f"token={TOKEN}\n".encode())
    found = scan(root, secrets={"HF_TOKEN": TOKEN})
    written = {e.path for e in found.entries}
    rows = [
        TaintedFile("c", path, sha, name, "b-1")
        for path, sha, name in secrets_in_cache(root, found, written, {"HF_TOKEN": TOKEN})
    ]
    (root / "jit.log").rename(root / "jit-build.log")
    (root / "jit-copy.log").write_bytes((root / "jit-build.log").read_bytes())
    (root / "plain.ref").write_bytes(b"ref")  # the bytes of models--x--<token>.ref
    later = scan(root, found)  # knowing no value: the masks carried
    named = "its name holds the value of secret HF_TOKEN"
    held = "holds the value of secret HF_TOKEN"
    assert [(w.path, w.why) for w in withheld_files(later, rows)] == [
        (f"hub/models--{HOLDER}/a.bin", named),
        (f"hub/models--x--{HOLDER}.ref", named),
        ("jit-build.log", held),
        ("jit-copy.log", held),
    ]


def test_a_link_target_holding_the_value_is_masked_and_its_link_never_made(
    tmp_path: Path,
) -> None:
    """A symlink's target is kept in the fingerprint (and so in every archive record): one
    naming the secret's value reached S3 whole while names were masked."""
    root = tmp_path / "cache"
    (root / "hub").mkdir(parents=True)
    (root / "hub/current").symlink_to(f"/models/{TOKEN}/snapshot")
    (root / "hub/plain").symlink_to("/models/main/snapshot")
    found = scan(root, secrets={"HF_TOKEN": TOKEN})
    links = {e.path: e.link for e in found.entries if e.kind == "symlink"}
    assert links == {
        "hub/current": f"/models/{HOLDER}/snapshot",
        "hub/plain": "/models/main/snapshot",
    }
    assert TOKEN not in found.to_json()
    kept = Fingerprint.from_json(found.to_json())
    assert scan(root, kept) is kept  # a scan that does not know the value: the same tree
    assert scan(root, masked_like=kept).tree_digest == kept.tree_digest  # re-hashed in full
    # Pointed elsewhere (no value in it), it is a change; the new target is kept as it is.
    (root / "hub/current").unlink()
    (root / "hub/current").symlink_to("/models/main/other")
    moved = scan(root, kept)
    assert moved.tree_digest != kept.tree_digest
    assert {e.path: e.link for e in moved.entries}["hub/current"] == "/models/main/other"
    # No restore makes it (its target was never kept), nor a link whose name held the value.
    (root / f"hub/{TOKEN}.link").symlink_to("plain")
    (root / "hub/current").unlink()
    (root / "hub/current").symlink_to(f"/models/{TOKEN}/snapshot")
    both = scan(root, secrets={"HF_TOKEN": TOKEN})
    assert masked_links(both) == [f"hub/{HOLDER}.link", "hub/current"]
    made = {e.path for e in restorable(both, set(masked_links(both))).entries}
    assert made == {"hub", "hub/plain"}


def test_a_value_holding_a_slash_is_masked_in_every_name_it_is_spread_over(
    tmp_path: Path,
) -> None:
    """A name never holds `/`, so such a value (a base64 token, an AWS secret key) is spread
    over dirs: each of its parts was a name of its own, in no fingerprint masked."""
    value = f"q{secrets.token_hex(12)}/{secrets.token_hex(12)}"
    first, second = value.split("/")
    root = tmp_path / "cache"
    (root / f"hub/models--{value}").mkdir(parents=True)  # hub/models--FIRST/SECOND
    (root / f"hub/models--{value}/a.bin").write_bytes(b"weights")
    (root / "hub/current").symlink_to(f"/models/{value}/snapshot")
    found = scan(root, secrets={"HF_TOKEN": value})
    assert {e.path: e.link for e in found.entries} == {
        "hub": None,
        "hub/current": f"/models/{HOLDER}/{HOLDER}/snapshot",
        f"hub/models--{HOLDER}": None,
        f"hub/models--{HOLDER}/{HOLDER}": None,
        f"hub/models--{HOLDER}/{HOLDER}/a.bin": None,
    }
    assert first not in found.to_json() and second not in found.to_json()
    # Scans that know no value find each part again from the entry that hid it.
    kept = Fingerprint.from_json(found.to_json())
    assert scan(root, kept) is kept
    assert scan(root, masked_like=kept).tree_digest == kept.tree_digest
    (root / f"hub/models--{value}/b.bin").write_bytes(b"more")
    (root / f"hub/{second}.lock").write_bytes(b"")
    grown = scan(root, kept)
    assert {f"hub/models--{HOLDER}/{HOLDER}/b.bin", f"hub/{HOLDER}.lock"} <= {
        e.path for e in grown.entries
    }
    assert first not in grown.to_json() and second not in grown.to_json()


def test_a_scan_outside_any_boot_knows_the_secrets_boots_were_passed_and_its_own(
    tmp_path: Path,
) -> None:
    """What an archive masks and looks for: each secret a boot on this host was passed by name
    (whatever the name), and the process's own credentials, as its environment holds them now;
    not every variable merely named like one (SSH_AUTH_SOCK's path would mask `tmp`)."""
    ledger = Ledger.open(tmp_path / "home")
    try:
        boot = BootRecord(
            "b-1", "2026-10-10T08:00:00+00:00", None, None, "running", None, "gpu-7", "serve",
            "demo", "d" * 64, "sha256:" + "e" * 64, "lifecycle/demo:0.2", None, "[]", False,
            '["WANDB_KEY"]', None, None,
        )  # fmt: skip
        start_boot(ledger, boot, [], [])
        env = {
            "WANDB_KEY": "w-value",
            "AWS_SECRET_ACCESS_KEY": "k-value",
            "HF_TOKEN": "",  # set, but to nothing: no value to look for
            "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
            "PATH": "/usr/bin",
        }
        assert secrets_on_host(ledger, env) == {
            "AWS_SECRET_ACCESS_KEY": "k-value",
            "WANDB_KEY": "w-value",
        }
    finally:
        ledger.close()
