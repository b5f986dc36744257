"""Build a baked image: FROM the engine image by id, one COPY (one layer) per cache tree at
its mount path, one LABEL with the provenance; then read each layer back and check its tree.

The build context is streamed to dockerd as it is written (a tar through a pipe), never
staged on disk: a night's caches are tens of GB.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.boot.baked import (
    ENGINE_LABEL,
    FACTORS_LABEL,
    PROFILE_LABEL,
    BakedCache,
    BakedUnreadable,
    check_layer,
    layer_dirs,
    parse_baked,
)
from lifecycle.build.engine import send_build
from lifecycle.build.plan import BAKED_LABEL, CREATED_LABEL
from lifecycle.dockerd import dockerd_said, sdk_errors
from lifecycle.errors import AnswerNo
from lifecycle.fingerprint import is_transient
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import (
    BakeRecord,
    bake_of_image,
    dead_bake_attempts,
    end_bake_attempt,
    mcv_images,
    record_bake,
)

CHUNK = 1 << 20
MCV_LABEL = "lifecycle.bake.mcv"  # on a bake's MCV image (--format mcv): its cache's name


def bake_labels(
    caches: Sequence[BakedCache],
    engine_image_id: str,
    profile: str,
    created: str,
    factors: Mapping[str, object],
) -> dict[str, str]:
    """lifecycle's provenance and the `org.opencontainers.image.*` keys of a baked image;
    `factors`: what every cache's key was made of but its name (lifecycle.build.plan)."""
    return {
        BAKED_LABEL: json.dumps([asdict(c) for c in caches], sort_keys=True),
        FACTORS_LABEL: json.dumps(dict(factors), sort_keys=True),
        PROFILE_LABEL: profile,
        ENGINE_LABEL: engine_image_id,
        "lifecycle.bake.tool": f"lifecycle {__version__}",
        CREATED_LABEL: created,
        "org.opencontainers.image.base.digest": engine_image_id,
        "org.opencontainers.image.description": (
            f"engine image with {len(caches)} verified warm caches baked in (lifecycle bake)"
        ),
    }


def dockerfile(
    engine_image_id: str, caches: Sequence[BakedCache], labels: Mapping[str, str]
) -> str:
    """FROM the engine by id; a COPY per cache, each its own layer; one LABEL."""
    lines = [f"FROM {engine_image_id}"]
    lines += [f"COPY caches/{c.name}/ {c.path.rstrip('/')}/" for c in caches]
    pairs = [f"{key}={json.dumps(value)}" for key, value in sorted(labels.items())]
    lines.append("LABEL " + " \\\n      ".join(pairs))
    return "\n".join(lines) + "\n"


def build_baked(
    client: Any,
    tag: str,
    text: str,
    trees: Mapping[str, Path],
    caches: Sequence[BakedCache],
    on_line: Callable[[str], None],
) -> str:
    """Build from `text` (the Dockerfile) and the `trees` (cache name -> host dir); the image
    id, once every cache's layer holds the tree it was baked from (else removed, refused)."""
    image_id, error = send_build(client, _context(text, trees), tag, on_line)
    if error or image_id is None:
        raise AnswerNo(f"bake of {tag} failed: {error or 'dockerd gave no image id'}")
    attrs = client.images.get(image_id).attrs
    try:
        layers = layer_dirs(attrs)
        for cache in caches:
            check_layer(layers, cache)
    except BakedUnreadable:
        client.images.remove(image_id, force=True)
        raise
    return str(image_id)


def settle_killed_bakes(
    client: Any, ledger: Ledger, home: Home, note: Callable[[str], None]
) -> None:
    """End the attempt of each bake whose process died once dockerd was asked. The image
    dockerd finished for it (tagged, or left untagged by a build cut short) is recorded as the
    bake it is once each layer holds the tree its label names, else removed: otherwise it would
    be no one's, a child of its engine image that keeps that image on dockerd after a teardown
    says it removed it. An MCV image it built but did not record is removed (the next `bake
    --format mcv` builds it again). An image dockerd does not remove keeps the attempt: the
    next bake tries again."""
    for attempt_id, bake in dead_bake_attempts(ledger, home):
        killed = f"bake {bake.tag} of {bake.baked_at} was killed"
        made = _made_for(client, bake)
        image = _finished_bake(client, [i for i in made if MCV_LABEL not in i["Labels"]])
        settled = True
        if image is not None and bake_of_image(ledger, image.id) is None:
            try:
                layers = layer_dirs(image.attrs)
                for cache in parse_baked(bake.caches):
                    check_layer(layers, cache)
            except BakedUnreadable as exc:
                settled = _removed(client, image.id, f"{killed}; its image", str(exc), note)
            else:
                record_bake(ledger, replace(bake, image_id=image.id))
                note(f"{killed}; dockerd had finished its image {image.id[:19]}: recorded")
        known = {m.image_id for m in mcv_images(ledger)}
        for mcv in (i for i in made if MCV_LABEL in i["Labels"] and i["Id"] not in known):
            what = f"{killed}; its MCV image of {mcv['Labels'][MCV_LABEL]}"
            settled &= _removed(client, mcv["Id"], what, "not recorded", note)
        if settled:
            end_bake_attempt(ledger, home, attempt_id)


def _removed(client: Any, image_id: str, what: str, why: str, note: Callable[[str], None]) -> bool:
    """Remove a killed bake's image and say so; False, said in one line, when dockerd does not."""
    from docker.errors import ImageNotFound

    try:
        client.images.remove(image_id, force=True)
    except ImageNotFound:
        return True  # removed meanwhile
    except sdk_errors() as exc:
        said = dockerd_said(exc)
        note(f"{what} {image_id[:19]} ({why}) not removed: dockerd: {said}; the next bake tries")
        return False
    note(f"{what} {image_id[:19]} removed: {why}")
    return True


def _made_for(client: Any, bake: BakeRecord) -> list[dict[str, Any]]:
    """dockerd's images built for `bake` (its engine image and its MCV images, as dockerd lists
    them): created when it was, FROM its engine, holding its very caches (no other home's bake
    does)."""
    wanted = [f"{CREATED_LABEL}={bake.baked_at}", f"{ENGINE_LABEL}={bake.engine_image_id}"]
    listed = client.api.images(all=True, filters={"label": wanted})
    found = [{**i, "Labels": i.get("Labels") or {}} for i in listed]
    return [i for i in found if i["Labels"].get(BAKED_LABEL) == bake.caches]


def _finished_bake(client: Any, made: list[dict[str, Any]]) -> Any | None:
    """The engine image dockerd finished of those `made` for a bake; None when it never did."""
    from docker.errors import ImageNotFound

    if not made:
        return None
    try:
        return client.images.get(made[0]["Id"])
    except ImageNotFound:  # removed meanwhile: nothing left to record
        return None


def _in_tree(entry: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """The entry, unless it is a file a JIT makes and deletes on its own (a lock file, a
    writer's `.tmp`): no tree digest, archive or secret scan covers those, so none is baked."""
    parent, _, name = entry.name.rpartition("/")
    return None if not entry.isdir() and is_transient(name, parent.rpartition("/")[2]) else entry


def _context(text: str, trees: Mapping[str, Path]) -> Iterator[bytes]:
    """The build context as a tar stream: the Dockerfile, then `caches/NAME/…` per tree."""
    read_end, write_end = os.pipe()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            with os.fdopen(write_end, "wb") as out, tarfile.open(fileobj=out, mode="w|") as tar:
                data = text.encode()
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                for name, root in trees.items():
                    tar.add(root, arcname=f"caches/{name}", recursive=True, filter=_in_tree)
        except BaseException as exc:  # told to the reader, who raises it on the build's thread
            failed.append(exc)

    writer = threading.Thread(target=write, name="bake-context", daemon=True)
    writer.start()
    with os.fdopen(read_end, "rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk
    writer.join()
    if failed:
        raise AnswerNo(f"bake context not written: {failed[0]}")
