"""Send a BuildPlan to dockerd, stream its progress, and record the build with its log (kept
bounded whatever a step prints: lifecycle.kept_log);
push and pull engine images by digest (a tag can be moved, a digest cannot): a push recorded
only once the registry holds this very image at its digest, a pulled image used only once its
labels (and its id, when one was recorded) say it is the one wanted."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lifecycle.build.plan import (
    BAKED_LABEL,
    BASE_DIGEST_LABEL,
    CREATED_LABEL,
    DIGEST_LABEL,
    BuildPlan,
)
from lifecycle.dockerd import dockerd_said
from lifecycle.errors import AnswerNo, EnvironmentFailure
from lifecycle.faults import Checkpoint
from lifecycle.home import Home
from lifecycle.kept_log import KeptLog, Lines, Note
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import DIED
from lifecycle.ledger.builds import (
    BuildRecord,
    build_attempt,
    dead_builds,
    finish_build,
    images_of,
    record_build,
    settle_build,
)
from lifecycle.table import visible

FAIL_MARKERS = (
    "lifecycle: PATCH FAILED:",
    "lifecycle: PIN MISMATCH:",
    "lifecycle: PIN INSTALL",
    "lifecycle: ENTRY POINT MISSING:",
)


@dataclass(frozen=True)
class BuildResult:
    """What `lifecycle build` reports."""

    outcome: str  # "built" or "up-to-date"
    tag: str
    image_id: str
    digest: str
    duration_s: float
    record_id: int
    log_path: str | None
    base_digest: str | None  # the base image's id it was built on


def find_built(
    client: Any, ledger: Ledger, digest: str, *, base_digest: str | None = None
) -> Any | None:
    """The image of this manifest digest (built on `base_digest`, when given) to use: the
    newest this host built or pulled, by its ledger; else the newest the engine has, by its
    `created` label then its id, so that the choice never depends on dockerd's list order."""
    from docker.errors import ImageNotFound

    wanted = {DIGEST_LABEL: digest}
    if base_digest is not None:
        wanted[BASE_DIGEST_LABEL] = base_digest
    # By id first: one request. dockerd's list by label costs one more request per image that
    # carries the digest (the SDK inspects each), and every bake of it carries it too.
    for image_id in images_of(ledger, digest):
        try:
            image = client.images.get(image_id)
        except ImageNotFound:
            continue
        found = image.labels or {}
        if BAKED_LABEL not in found and all(found.get(k) == v for k, v in wanted.items()):
            return image
    # dockerd's list carries each image's labels: only the one chosen is inspected. On a
    # dockerd other homes share, an image listed may be gone by then (their teardown): the
    # next newest is taken. Every image built on the engine inherits its labels: a bake
    # (named by its own label), and any step of a build FROM it, such as the layer a bake
    # killed after its first COPY leaves, untagged, cache files in it. The engine is the one
    # of them not built on another (its LABEL is its build's last step), so the list holds
    # the steps too (all=True) to tell.
    listed = client.api.images(all=True, filters={"label": [f"{k}={v}" for k, v in wanted.items()]})
    labelled = {i["Id"] for i in listed}
    candidates = sorted(
        ((labels.get(CREATED_LABEL, ""), i["Id"]) for i in listed
         if BAKED_LABEL not in (labels := i.get("Labels") or {})
         and (i.get("ParentId") or "") not in labelled),
        reverse=True,
    )  # fmt: skip
    for _, image_id in candidates:
        try:
            return client.images.get(image_id)
        except ImageNotFound:
            continue
    return None


def base_image_digest(client: Any, base_image: str) -> str:
    """The id of the base image as this engine has it (builds pull nothing)."""
    from docker.errors import ImageNotFound

    try:
        return str(client.images.get(base_image).id)
    except ImageNotFound:
        raise AnswerNo(
            f"base image {base_image} is not on this Docker engine (builds pull nothing):"
            " load or pull it first"
        ) from None


def build_image(
    client: Any,
    plan: BuildPlan,
    ledger: Ledger,
    home: Home,
    *,
    force: bool = False,
    on_line: Callable[[str], None] = lambda line: None,
    checkpoint: Checkpoint = lambda point: None,
) -> BuildResult:
    """Build unless an image of this digest on this very base exists (or `force`); record
    every attempt, as `running` before dockerd is asked (what a killed one left is ended by
    `settle_interrupted`). An image built on what the base tag named before it moved is not
    it."""
    # Started when its plan was made, as its image's created label says: that label tells the
    # image of a build killed after dockerd tagged it from any other (settle_interrupted).
    started = datetime.fromisoformat(plan.labels[CREATED_LABEL])
    clock = time.monotonic()
    base = plan.labels.get(BASE_DIGEST_LABEL)
    existing = None if force else find_built(client, ledger, plan.digest, base_digest=base)
    if existing is not None:
        if plan.tag not in existing.tags:  # untagged since (a teardown, another home's build)
            existing.tag(plan.tag)
        record = _record(plan, started, time.monotonic() - clock, "up-to-date", existing.id)
        return _result(record_build(ledger, record), record, None)
    with build_attempt(ledger, home, _record(plan, started, 0.0, "running", None)) as build_id:
        checkpoint("build-started")
        record = _send(client, plan, ledger, force=force, on_line=on_line, started=started)
        checkpoint("build-tagged")
        finish_build(ledger, build_id, record)
    if record.outcome == "failed":
        where = f"full log: {record.log_path}"
        raise AnswerNo(f"build of {plan.manifest_file} failed: {record.error}\n{where}")
    return _result(build_id, record, record.log_path)


def _send(
    client: Any,
    plan: BuildPlan,
    ledger: Ledger,
    *,
    force: bool,
    on_line: Callable[[str], None],
    started: datetime,
) -> BuildRecord:
    """dockerd's build of the plan, its log kept: the record of what it did (built, failed)."""
    clock = time.monotonic()
    # Kept as printed (a build is handed no secret to redact), and bounded: a step may print
    # gigabytes. Of the part left out, the lines our in-image helpers print are kept.
    log = KeptLog(_helper_lines, "lines lifecycle's in-image helpers printed")

    def logged(line: str) -> None:
        log.add(line)
        on_line(line)

    # The labels are in the Dockerfile, as one LABEL instruction. --force means "build it
    # again", so every step runs and the log is complete evidence.
    image_id, error = send_build(client, _context_tar(plan), plan.tag, logged, nocache=force)
    if error:
        log.add(f"ERROR: {error}")
    log_name = f"{started:%Y%m%dT%H%M%S}-{plan.digest[:12]}.log"
    log_path = str(ledger.keep_evidence("builds", log_name, log.text().encode()))
    duration = time.monotonic() - clock
    if error or image_id is None:
        reason = _explain_failure(log.lines(), error or "dockerd returned no image id")
        return _record(plan, started, duration, "failed", None, reason, log_path)
    return _record(plan, started, duration, "built", image_id, None, log_path)


def settle_interrupted(
    client: Any, ledger: Ledger, home: Home, note: Callable[[str], None]
) -> None:
    """End each build whose process died before recording an outcome as `interrupted`, with
    the image dockerd finished and tagged for it, if any: else that image would be no one's,
    the tag's image the ledger never names (never used, never removed by a teardown)."""
    for build in dead_builds(ledger, home):
        image_id = _finished_image(client, build)
        done = f"; dockerd had finished its image {image_id[:19]}" if image_id else ""
        if settle_build(ledger, home, build.id or 0, image_id, DIED + done):
            note(f"build {build.id} of {build.tag}, started {build.started_at}: interrupted{done}")


def _finished_image(client: Any, build: BuildRecord) -> str | None:
    """The image dockerd built and tagged for `build`: under its tag, labelled with its
    manifest digest, base and start (the created label); None when dockerd never finished."""
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(build.tag)
    except ImageNotFound:
        return None
    found = image.labels or {}
    wanted = {
        DIGEST_LABEL: build.manifest_digest,
        BASE_DIGEST_LABEL: build.base_digest,
        CREATED_LABEL: build.started_at,
    }
    return str(image.id) if all(found.get(k) == v for k, v in wanted.items()) else None


def send_build(
    client: Any,
    context: Any,
    tag: str,
    on_line: Callable[[str], None],
    *,
    nocache: bool = False,
) -> tuple[str | None, str | None]:
    """Send a build context (a tar, as a file or as an iterator of its bytes) to dockerd and
    each line of its output that is not blank to `on_line`; (the image id, dockerd's error),
    either None. A line over LINE_BYTES comes as its marker (lifecycle.kept_log)."""
    image_id, error = None, None
    # dockerd sends a step's output in the pieces it was written in: a line may span many.
    lines = Lines()
    for chunk in client.api.build(
        fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False,
        nocache=nocache, decode=True,
    ):  # fmt: skip
        text = chunk.get("stream") or chunk.get("status") or ""
        for line in filter(str.strip, lines.feed(text.encode())):
            on_line(line)
        image_id = (chunk.get("aux") or {}).get("ID") or image_id
        if "error" in chunk:
            error = str(chunk["error"]).strip()
    if (last := lines.end()) is not None and last.strip():
        on_line(last)
    return image_id, error


def _helper_lines(line: str) -> Note:
    """Of the part of a build's log left out, the lines our in-image helpers print (a
    failure's among them: `_explain_failure` reads them), while they fit."""
    return Note.IF_ROOM if line.startswith("lifecycle:") else Note.NO


def _explain_failure(lines: list[str], docker_error: str) -> str:
    """The lines our in-image helpers printed about the failure, else dockerd's own error."""
    start = next((i for i, line in enumerate(lines) if line.startswith(FAIL_MARKERS)), None)
    if start is None:
        return docker_error
    picked = [lines[start].removeprefix("lifecycle: ")]
    picked += [
        "  " + line.removeprefix("lifecycle:").strip()
        for line in lines[start + 1 :]
        if line.startswith("lifecycle:   ")
    ]
    return "\n".join(picked)


def _context_tar(plan: BuildPlan) -> io.BytesIO:
    """The build context as a tar with fixed mtimes and modes, so layer caching is stable."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in sorted(plan.context.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(content))
    buffer.seek(0)
    return buffer


def _record(
    plan: BuildPlan,
    started: datetime,
    duration: float,
    outcome: str,
    image_id: str | None,
    error: str | None = None,
    log_path: str | None = None,
) -> BuildRecord:
    return BuildRecord(
        started_at=started.isoformat(timespec="seconds"),
        duration_s=round(duration, 3),
        manifest_name=plan.labels["lifecycle.manifest.name"],
        manifest_file=plan.manifest_file,
        manifest_digest=plan.digest,
        tag=plan.tag,
        image_id=image_id,
        outcome=outcome,
        error=error,
        log_path=log_path,
        base_digest=plan.labels.get(BASE_DIGEST_LABEL),
    )


def _result(record_id: int, record: BuildRecord, log_path: str | None) -> BuildResult:
    return BuildResult(
        outcome=record.outcome,
        tag=record.tag,
        image_id=record.image_id or "",
        digest=record.manifest_digest,
        duration_s=record.duration_s,
        record_id=record_id,
        log_path=log_path,
        base_digest=record.base_digest,
    )


class RegistryFailed(AnswerNo):
    """A push or a pull dockerd refused, or an image that is not what it was pulled for."""


@dataclass(frozen=True)
class Pushed:
    """Where an image went."""

    tag: str  # REGISTRY/REPOSITORY:TAG
    reference: str  # REGISTRY/REPOSITORY@sha256:…: what to pull
    digest: str  # sha256:…, the registry's digest of the image's manifest


def push_image(
    client: Any,
    image_id: str,
    tag: str,
    registry: str,
    checkpoint: Checkpoint = lambda point: None,
) -> Pushed:
    """Push the image as REGISTRY/name:tag-<its id>, then as REGISTRY/name:tag; where it went,
    by the digest of the first push, once the registry's manifest there names this image."""
    repository, _, version = tag.rpartition(":")
    target = f"{registry.rstrip('/')}/{repository}"
    # Every bake (and build) of a manifest is tagged `version` on this dockerd: another one may
    # move that tag before dockerd reads it. No other image is tagged with this one's id.
    own = f"{version}-{image_id.removeprefix('sha256:')[:12]}"
    image = client.images.get(image_id)
    for name in (own, version):
        image.tag(target, name)
    checkpoint("push-tagged")
    digest = _push(client, image_id, target, own)
    reference = f"{target}@{digest}"
    # dockerd pulls by digest: the image the registry's manifest there names (its config
    # digest is the image's id). One already here, as this one is, is not downloaded again.
    found = _calling(lambda: client.images.pull(reference)).id
    if found != image_id:
        raise RegistryFailed(
            f"push of {target}:{own}: the registry holds image {found[:19]} at {digest}, not"
            f" {image_id[:19]} (its tag was moved during the push); not recorded"
        )
    _push(client, image_id, target, version)  # the name a manifest's `registry:` looks up
    return Pushed(f"{target}:{version}", reference, digest)


def _push(client: Any, image_id: str, target: str, tag: str) -> str:
    """Push target:tag; the digest the registry holds it under."""
    from lifecycle.dockerd import transport_errors

    digest = None
    try:
        for chunk in _calling(lambda: client.api.push(target, tag, stream=True, decode=True)):
            if "error" in chunk:
                raise _refusal(f"push of {target}:{tag} failed: {visible(str(chunk['error']))}")
            digest = (chunk.get("aux") or {}).get("Digest") or digest
    except transport_errors() as exc:  # dockerd waits on the registry, and said nothing
        raise EnvironmentFailure(
            f"push of {target}:{tag}: no word from dockerd, which pushes to the registry:"
            f" {' '.join(str(exc).split())} (LIFECYCLE_DOCKER_TIMEOUT: {client.api.timeout:g} s)"
        ) from None
    if digest is None:  # an engine that does not say: what it now knows the image by
        found = client.images.get(image_id).attrs.get("RepoDigests") or []
        digest = next((d.partition("@")[2] for d in found if d.startswith(f"{target}@")), None)
    if digest is None:
        raise RegistryFailed(f"push of {target}:{tag}: the registry gave no digest")
    return str(digest)


def registry_digest(client: Any, reference: str) -> str:
    """The digest a registry has for a tag now (`sha256:…`), asked without pulling."""
    try:
        return str(_calling(lambda: client.images.get_registry_data(reference)).id)
    except RegistryFailed as exc:
        raise RegistryFailed(f"{reference}: the registry does not have it ({exc})") from None


def pull_image(
    client: Any,
    reference: str,
    manifest_digest: str,
    *,
    image_id: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    """Pull `REGISTRY/REPOSITORY@sha256:…`; the image, once its labels prove it is the image of
    `manifest_digest` and, when given, it is the image recorded (`image_id`, holding `labels`);
    otherwise it is removed again and refused."""
    if "@sha256:" not in reference:
        raise RegistryFailed(f"{reference}: not a reference by digest (REPOSITORY@sha256:…)")
    here_before = _present(client, reference)
    image = _calling(lambda: client.images.pull(reference))
    found = dict(image.labels or {})
    differs = [key for key, value in (labels or {}).items() if found.get(key) != value]
    if found.get(DIGEST_LABEL) != manifest_digest:
        why = f"not the image of manifest {manifest_digest[:12]}: its label {DIGEST_LABEL} is"
        why += f" {found.get(DIGEST_LABEL)!r}"
    elif image_id is not None and image.id != image_id:
        why = f"image {image.id[:19]}, not {image_id[:19]} as recorded"
    elif differs:
        why = f"not the image recorded: its label {differs[0]} is {found.get(differs[0])!r}"
    else:
        return image
    if here_before:  # someone's own, pulled by that digest before us: not ours to remove
        raise RegistryFailed(f"{reference} is {why}; it was here before the pull: left as it was")
    # By the reference pulled: the same image may be here under other names, which stay.
    _calling(lambda: client.images.remove(reference))
    raise RegistryFailed(f"{reference} is {why}; removed again")


def _present(client: Any, reference: str) -> bool:
    from docker.errors import ImageNotFound

    def get() -> bool:
        try:
            client.images.get(reference)
        except ImageNotFound:  # an APIError: asked before _calling makes it a refusal
            return False
        return True

    return bool(_calling(get))


def _calling(call: Any) -> Any:
    """dockerd's answer, or its refusal as one line (a registry that does not answer: exit 3)."""
    from docker.errors import APIError, DockerException

    try:
        return call()
    except APIError as exc:
        raise _refusal(dockerd_said(exc)) from None
    except DockerException as exc:
        raise RegistryFailed(dockerd_said(exc)) from None


def _refusal(text: str) -> AnswerNo | EnvironmentFailure:
    """A registry that cannot be reached is the environment (exit 3); anything else a no."""
    # dockerd's words for a registry it cannot reach, or that accepts and never answers.
    unreachable = (
        "connection refused", "no such host", "i/o timeout", "Client.Timeout exceeded",
        "context deadline exceeded", "TLS handshake timeout",
    )  # fmt: skip
    if any(words in text for words in unreachable):
        return EnvironmentFailure(f"the registry does not answer: {' '.join(text.split())}")
    return RegistryFailed(" ".join(text.split()))
