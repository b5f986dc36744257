"""The upstream of a port: its managed mirror, the releases tagged in it, their pins.

The mirror is one bare repository per upstream,
`$LIFECYCLE_HOME/mirrors/<name>-<sha256(source)[:16]>.git`, where the source is the URL as
written or the absolute path of a local repository. Every port fetches into it
(`git fetch --tags`, all branches, so a recorded upstream commit on a branch is found), under
a file lock so two ports do not fetch into one mirror at once. If the fetch fails (offline, or
an upstream silent for LIFECYCLE_GIT_TIMEOUT seconds) the mirror is used as it is, and the
port says so; the tags it needs must already be there, and with no mirror yet it stops.
The source is given to git after `--`, and shown (a warning, the report) without the URL's
userinfo: a token written into it is git's to use, never the port's to print or commit.

A release's pins are its tag, the FlashInfer version it requires and its base image. FlashInfer
is read from the new tag itself: the lines of `requirements/cuda.txt`, `requirements/*.txt`,
`requirements*.txt`, `pyproject.toml`, `setup.py`, `setup.cfg`, or of the package metadata a
tree made from wheels or sdists holds instead (`Requires-Dist:` in `*.dist-info/METADATA` and
`PKG-INFO`, lines of `*.egg-info/requires.txt`), that name the manifest's
`engine.flashinfer_dist` (flashinfer-python for vLLM, demoinfer for the demo engine) with an
exact `==` pin. Without one the old pin is carried and flagged, and the new manifest lists it
under `engine.unconfirmed` so that `build` refuses it until a person checks it.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lifecycle.dockerd import seconds_from
from lifecycle.errors import EnvironmentFailure, LifecycleError
from lifecycle.home import Home, check_home, check_writable
from lifecycle.leases import exclusive
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.model import Upstream
from lifecycle.manifest.repository import is_remote, uses_git_daemon, uses_ssh
from lifecycle.manifest.source import read_yaml
from lifecycle.port.git import Git
from lifecycle.proc import Completed
from lifecycle.redact import without_userinfo


@dataclass(frozen=True)
class Mirror:
    """A fetched mirror; `warning` says when the fetch failed and an older copy is used."""

    path: Path
    source: str
    warning: str | None = None

    @property
    def git(self) -> Git:
        """A runner on the mirror (neutral config)."""
        return Git.scratch(self.path)


def upstream_source(loaded: LoadedManifest) -> str:
    """`upstream.repository` as git fetches it: a URL as written, a local path resolved against
    the directory of the manifest that declares it (like a patch file)."""
    repository = loaded.manifest.upstream.repository
    if is_remote(repository):
        return repository
    return str((declaring_file(loaded).parent / repository).resolve())


def declaring_file(loaded: LoadedManifest) -> Path:
    """The manifest of the chain that writes `upstream.repository`, the nearest first: a
    derived manifest may inherit the path."""
    if len(loaded.chain) == 1:
        return loaded.file  # the model made it write the path
    for file in loaded.chain:
        data = read_yaml(file).data
        declared = data.get("upstream") if isinstance(data, dict) else None
        if isinstance(declared, dict) and "repository" in declared:
            return file
    return loaded.file


def mirror_path(home: Home, source: str) -> Path:
    """Where the mirror of `source` lives; a readable stem, then a hash that makes it unique."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", source.rstrip("/").rsplit("/", 1)[-1])
    stem = stem.removesuffix(".git") or "upstream"
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return home.mirrors / f"{stem}-{digest}.git"


def ensure_mirror(home: Home, source: str, environ: Mapping[str, str]) -> Mirror:
    """Create the mirror if needed and fetch every branch and tag of `source` into it."""
    # The first write of a port, even a dry run: a home that is a file or read-only is said
    # so (exit 3) before git runs, not met as an OSError making the mirror's dir.
    check_home(home.root, create=True)
    check_writable(home.root)
    path = mirror_path(home, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path.with_suffix(".lock")):
        if not (path / "HEAD").is_file():
            _init_bare(path)
        git = Git.user(path)
        own_ssh = _own_ssh_command(git, environ)
        seconds = math.ceil(seconds_from(environ, "LIFECYCLE_GIT_TIMEOUT", GIT_TIMEOUT_S))
        # git:// has no setting that limits it at all: git's progress (its own and the
        # server's, a line a second while bytes come) is watched instead, and a fetch silent
        # for the limit is killed. Not a limit on the whole fetch: a first one of vLLM (about
        # 1 GB) over a slow link takes as long as it takes, and a stall is a stall at any time.
        # Measured on git.git (420k objects): its longest silence is 3.7 s, after the last
        # delta (the connectivity check, the refs), far inside the 60 s default.
        watched = uses_git_daemon(source)
        fetched = git.with_env(**_silence_limit(seconds, own_ssh)).run(
            "fetch",
            # Not --quiet when watched: it keeps git's own progress (receiving, resolving) off.
            *(("--progress",) if watched else ("--quiet",)),
            "--force",
            "--prune",
            "--tags",
            "--",  # the source is never an option, whatever a manifest says (model refuses too)
            source,
            "+refs/heads/*:refs/heads/*",
            check=False,
            silence=seconds if watched else None,
        )
        if fetched.rc != 0:
            _drop_partial_pack(path)
        never_fetched = fetched.rc != 0 and not git.out("for-each-ref", "--count=1").strip()
    own = None
    if own_ssh and uses_ssh(source):
        own = (
            f"ssh to the upstream runs as your {own_ssh} says: its own settings "
            "(ConnectTimeout, ServerAliveInterval), not LIFECYCLE_GIT_TIMEOUT, bound the fetch"
        )
    if fetched.rc == 0:
        return Mirror(path, source, own)
    reason = _reason(fetched, seconds)
    failed = f"fetch from {without_userinfo(source)} failed ({reason})"
    if never_fetched:
        said = "; ".join(
            filter(None, (f"{failed}, and there is no mirror of it yet to port from", own))
        )
        # An upstream that does not answer is the environment (exit 3); one that answers
        # "not found" was named wrong (exit 2).
        if any(words in reason.lower() for words in _UNREACHABLE):
            raise EnvironmentFailure(said)
        raise LifecycleError(said)
    said = f"{failed}; using the mirror as last fetched"
    return Mirror(path, source, "; ".join(filter(None, (said, own))))


GIT_TIMEOUT_S = 60.0
# git's and ssh's words (LC_ALL=C) for an upstream that did not answer, rather than refused.
_UNREACHABLE = (
    "timed out", "too slow", "connection refused", "could not resolve host",
    "failed to connect", "network is unreachable", "no route to host", "connection reset",
    "unable to connect", "unable to look up",  # git://'s own connect and name look-up
)  # fmt: skip
# What a fetch without --quiet says as it goes, no reason for a failure: git's progress or the
# server's (`Receiving objects:  45% (9/20), 1.20 MiB | 1.2 MiB/s`, `remote: Counting
# objects: 12`, `remote: Total 3 (delta 0) …`), and the refs it updated (`From git://…`,
# ` * [new tag]  v1 -> v1`).
_PROGRESS = re.compile(
    r"^((remote: )?([\w ]+: +\d+(%.*|, done\.)?|Total \d+ .*)\s*|From .*| [*+=t-] .*)$"
)
# Unanswered keepalives before ssh gives up: OpenSSH's default, and its man page's example
# (interval 15, count 3: "disconnect after approximately 45 seconds").
SSH_ALIVE_COUNT = 3


def _silence_limit(seconds: int, own_ssh: str | None) -> dict[str, str]:
    """git's limit on a silent upstream: a fetch that receives no byte for `seconds`
    (LIFECYCLE_GIT_TIMEOUT) fails, and the port goes on from the mirror as last fetched.
    git has none by default: a server that accepts and never answers hung the port for ever.
    HTTP(S): curl's low-speed limit. ssh (unless `own_ssh`, the user's ssh command, is set):
    ConnectTimeout bounds the TCP connect and the server's banner, ServerAliveInterval
    times its count every later silence (ConnectTimeout does not bound the key exchange, whatever
    ssh_config(5) says: OpenSSH 9.2 waited on past it); BatchMode, because a passphrase or
    host-key prompt on the terminal a port was started from would wait for ever."""
    limit = {"GIT_HTTP_LOW_SPEED_LIMIT": "1", "GIT_HTTP_LOW_SPEED_TIME": str(seconds)}
    if own_ssh is None:
        alive = math.ceil(seconds / SSH_ALIVE_COUNT)
        limit["GIT_SSH_COMMAND"] = (
            f"ssh -o ConnectTimeout={seconds} -o ServerAliveInterval={alive} "
            f"-o ServerAliveCountMax={SSH_ALIVE_COUNT} -o BatchMode=yes"
        )
    return limit


def _own_ssh_command(git: Git, environ: Mapping[str, str]) -> str | None:
    """The user's ssh command for git, by the name it is set under (git's order), or None.
    It is theirs to bound: a port never overrides it."""
    for name in ("GIT_SSH_COMMAND", "GIT_SSH"):
        if environ.get(name):
            return name
    found = git.run("config", "--get", "core.sshCommand", check=False)
    return "core.sshCommand" if found.rc == 0 and found.out.strip() else None


def _reason(fetched: Completed, seconds: int) -> str:
    """The line of a failed fetch that says why: ssh's own (`Connection timed out during
    banner exchange`) comes before git's `Could not read from remote repository.` and hint;
    git's progress (a watched fetch's) is not a reason."""
    if fetched.silent:
        return f"timed out: no progress for {seconds} s (LIFECYCLE_GIT_TIMEOUT)"
    text = fetched.err or fetched.out
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if not _PROGRESS.match(line)]
    said = [line for line in lines if line and not line.lower().startswith(("warning:", "hint:"))]
    if len(said) > 1 and said[0].endswith(":"):  # git:// puts the errno on a line of its own
        return f"{said[0]} {said[1]}"
    return said[0] if said else " ".join(lines[-1:])


def _drop_partial_pack(mirror: Path) -> None:
    """Remove what a fetch cut short left in the mirror: index-pack's `tmp_pack_*` (as much
    of the pack as came, hundreds of MB of vLLM's) and unpack-objects' `tmp_obj_*`, which git
    never reads and nothing else removes. Safe under the mirror's lock: no fetch is writing."""
    for partial in (mirror / "objects").glob("*/tmp_*"):
        partial.unlink(missing_ok=True)


def _init_bare(path: Path) -> None:
    # Built beside its final place and renamed, so an interrupted init leaves no half mirror.
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        Git.scratch(temp).run("init", "--quiet", "--bare", str(temp))
        if path.exists():
            shutil.rmtree(path)
        temp.rename(path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


# Searched in this order; the first file with an exact pin wins.
REQUIREMENT_FILES = (
    "requirements/cuda.txt",
    "requirements/common.txt",
    "requirements/*.txt",
    "requirements.txt",
    "requirements*.txt",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "*.dist-info/METADATA",
    "PKG-INFO",
    "*/PKG-INFO",
    "*.egg-info/requires.txt",
)
_REQUIRES_DIST = re.compile(r"^\s*Requires-Dist:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Release:
    """An upstream release: its version, tag and commit."""

    version: str
    tag: str
    commit: str


@dataclass(frozen=True)
class PinChange:
    """One pin, old and new, where the new one came from, and whether a person should look."""

    name: str
    old: str
    new: str
    source: str
    flagged: bool = False
    reason: str = ""  # why a flagged pin could not be derived


def find_release(
    mirror: Git, upstream: Upstream, candidates: list[str], warning: str | None = None
) -> Release:
    """The first candidate version whose tag (`upstream.tag`) exists in the mirror; if none
    does, the error adds the mirror's `warning` (a failed fetch explains a missing tag)."""
    for version in candidates:
        tag = upstream.tag_for(version)
        commit = mirror.commit_of(f"refs/tags/{tag}")
        if commit:
            return Release(version, tag, commit)
    pattern = upstream.tag_for("*")
    known = mirror.out("tag", "--list", "--sort=-version:refname", "--", pattern).split()[:8]
    tried = ", ".join(upstream.tag_for(v) for v in candidates)
    raise LifecycleError(
        f"no upstream tag {tried} in the mirror (recent {pattern}: {', '.join(known) or 'none'});"
        " pass --release VERSION to name the release" + (f" ({warning})" if warning else "")
    )


def release_candidates(new_ref: str, explicit: str | None) -> list[str]:
    """`--release` if given, else the new manifest's directory name: `0.31` → 0.31, 0.31.0;
    each normalized first (`1.1.0-rc1` → 1.1.0rc1), then as written, for a tag spelled so."""
    if explicit:
        return [explicit]
    name = new_ref.rstrip("/").rsplit("/", 1)[-1]
    candidates = [name, f"{name}.0"] if re.fullmatch(r"\d+\.\d+", name) else [name]
    valid = []
    for candidate in candidates:
        try:
            valid += [str(Version(candidate)), candidate]
        except InvalidVersion:
            continue
    return list(dict.fromkeys(valid)) or [name]


def flashinfer_pin(mirror: Git, release: Release, dist: str, old: str) -> PinChange:
    """The exact pin of `dist` at the release, or the old pin carried and flagged."""
    words = [re.escape(w) for w in re.split(r"[-_.]+", dist) if w]
    pattern = "[-_.]+".join(words)
    found = mirror.run(
        "grep",
        "-I",
        "-i",
        "-E",
        "--full-name",
        "-z",
        pattern,
        release.commit,
        "--",
        *REQUIREMENT_FILES,
        check=False,
    )
    exact: dict[str, str] = {}
    loose: dict[str, str] = {}
    for hit in found.out.splitlines():
        where, _, line = hit.partition("\0")
        file = where.removeprefix(f"{release.commit}:")
        requirement = _requirement(line)
        if requirement is None or canonicalize_name(requirement.name) != canonicalize_name(dist):
            continue
        pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if len(pins) == 1 and "*" not in pins[0]:
            exact.setdefault(file, pins[0])
        else:
            loose.setdefault(file, str(requirement))
    for file in _by_preference(exact):
        return PinChange("flashinfer", old, exact[file], f"{file} at {release.tag}")
    if loose:
        file = _by_preference(loose)[0]
        why = f"{file} at {release.tag} says {loose[file]!r}, not an exact pin"
    else:
        why = f"no requirement naming {dist} at {release.tag}"
    return PinChange("flashinfer", old, old, f"carried: {why}; check it", True, why)


def base_image_pin(base_image: str, old_version: str, new_version: str) -> PinChange:
    """The base image with the old version replaced by the new one where its tag names it once
    (`v0.30-cuda12.1.0`), else carried and flagged: a version inside another (`v0.30.1`,
    `cuda12.1.0` for 1.0) is not the release, and two of them are a guess."""
    name, colon, tag = base_image.rpartition(":")
    # A whole version: no digit or `.` before it, no digit or `.digit` after it.
    whole = re.compile(rf"(?<![\d.]){re.escape(old_version)}(?!\.?\d)")
    found = whole.findall(tag) if colon and "/" not in tag else []
    if len(found) == 1:
        bumped = f"{name}:{whole.sub(lambda _: new_version, tag)}"
        return PinChange("base_image", base_image, bumped, "tag names the release")
    if old_version == new_version:
        return PinChange("base_image", base_image, base_image, "same release")
    if found:
        why = f"its tag names {old_version} {len(found)} times, not once"
    else:
        why = f"its tag does not name {old_version}"
    return PinChange("base_image", base_image, base_image, f"carried: {why}; check it", True, why)


def _requirement(line: str) -> Requirement | None:
    # A requirements line, a pyproject/setup.py list item ("name==1.0",), a setup.cfg line or
    # a metadata field (`Requires-Dist: name==1.0; marker`).
    text = _REQUIRES_DIST.sub("", line.split("#", 1)[0]).strip().strip(",").strip().strip("'\"")
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _by_preference(found: dict[str, str]) -> list[str]:
    def rank(file: str) -> tuple[int, str]:
        # fnmatch's `*` also matches `/`, as git's pathspecs do: the same files rank as matched.
        for position, pattern in enumerate(REQUIREMENT_FILES):
            if fnmatchcase(file, pattern):
                return position, file
        return len(REQUIREMENT_FILES), file

    return sorted(found, key=rank)
