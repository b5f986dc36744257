"""What of a cache never leaves this host: the files a boot wrote a secret's value into, and
every file whose path holds one (masked in its fingerprint, lifecycle.redact).

Found by the scan of the files a boot wrote at its end, or of those an archive finds changed
outside any boot (`secrets_in_cache`), both with the values `secrets_on_host` gives: not only
a boot's own secrets, as boots of any profile share a cache. Kept in the ledger by the
secret's name, never its value, with the file's sha256: an archive with content leaves out
every file with those bytes, whatever its path now (a later boot may have moved or copied
it), and says why (`withheld_files`); no bake takes them; a teardown removes a cache holding
them only when told so. Nor does a manifest or patch holding one get built or booted
(`refuse_secrets_in_manifest`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.crash import SECRET_ENV, handed_secrets
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Fingerprint
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import TaintedFile, secret_names
from lifecycle.redact import is_masked, secrets_in_file, secrets_in_path

if TYPE_CHECKING:  # the manifest's models (pydantic) are not loaded for what only scans
    from lifecycle.manifest import LoadedManifest


@dataclass(frozen=True)
class Withheld:
    """A cache file no archive holds, and why (as an archive record says it)."""

    path: str  # as its fingerprint has it: masked where the name held a secret's value
    sha256: str
    why: str


def secrets_on_host(ledger: Ledger, host_env: Mapping[str, str]) -> dict[str, str]:
    """The secret values a scan of a cache masks and looks for, by name, as `host_env` holds
    them: every secret a boot on this host was passed by name, and the process's own
    credentials. Whichever boot, archive or bake scans, the same: a cache is any profile's."""
    # Not every variable whose name merely looks like a credential (as a traceback is redacted):
    # a path-shaped value such as SSH_AUTH_SOCK's would mask plain names (`tmp`) in every tree.
    names = secret_names(ledger) | set(SECRET_ENV)
    handed_secrets(names)  # and in what this process prints, whatever the names look like
    return {name: host_env[name] for name in sorted(names) if host_env.get(name)}


def refuse_secrets_in_manifest(loaded: LoadedManifest, secrets: Mapping[str, str]) -> None:
    """A file of the manifest's chain or a patch holding a secret's value is refused before
    anything is built or kept: the image holds the patches (a pushed one is anyone's who can
    pull it), and every archive of a boot carries the manifest and patches as written."""
    for file in (*loaded.chain, *loaded.patch_files):
        names = secrets_in_file(file, secrets)
        if names:
            raise LifecycleError(
                f"{file}: holds the value of secret {names[0]} (from the host environment); the"
                " image and every boot's archive keep the manifest and its patches as written:"
                " pass the value by name (`secrets:`), never in their text"
            )


def secrets_in_cache(
    root: Path, after: Fingerprint, written: Collection[str], secrets: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """(path, sha256, secret name) of each file a boot wrote (`written`, paths of `after`,
    the cache at `root` as scanned with the boot's `secrets`; or those an archive's scan found
    changed) whose bytes or name hold a secret's value."""
    if not secrets:
        return []
    found = []
    for entry in after.entries:
        if entry.kind != "file" or entry.path not in written:
            continue
        assert entry.sha256 is not None, "a scanned file always has its sha256"
        # A masked name is not the file's real name: withheld whatever its bytes hold.
        names = (
            secrets_in_path(entry.path)
            if is_masked(entry.path)
            else secrets_in_file(root / entry.path, secrets)
        )
        found += [(entry.path, entry.sha256, name) for name in names]
    return found


def withheld_files(fingerprint: Fingerprint, tainted: Iterable[TaintedFile]) -> list[Withheld]:
    """The files of `fingerprint` an archive leaves out: those whose bytes the ledger knows
    hold a secret's value (`tainted`), under whatever path they are now, and those whose names
    held one; in path order."""
    # By the bytes alone: a boot given no secret may have moved or copied the file, and a
    # found file's bytes are what hold the value. Not those found by a masked name: their
    # bytes were never read for it, and may well be another file's (`ref`, an empty marker).
    in_bytes: dict[str, set[str]] = {}
    for found in tainted:
        if not is_masked(found.path):
            in_bytes.setdefault(found.sha256, set()).add(found.secret)
    withheld = []
    for entry in fingerprint.entries:
        if entry.kind != "file" or entry.sha256 is None:
            continue
        named = secrets_in_path(entry.path)
        held = sorted(in_bytes.get(entry.sha256, set()) - set(named))
        reasons = [f"its name holds the value of secret {', '.join(named)}"] if named else []
        reasons += [f"holds the value of secret {', '.join(held)}"] if held else []
        if reasons:
            withheld.append(Withheld(entry.path, entry.sha256, "; ".join(reasons)))
    return withheld


def masked_links(fingerprint: Fingerprint) -> list[str]:
    """The symlinks of `fingerprint` whose name or target held a secret's value: masked there,
    so no restore can make them and no archive holds what they were; in path order."""
    return [
        e.path
        for e in fingerprint.entries
        if e.kind == "symlink" and (is_masked(e.path) or is_masked(e.link or ""))
    ]
