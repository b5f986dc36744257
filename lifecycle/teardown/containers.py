"""What dockerd says about the caches, boot containers and engine images; removing the latter.

`client` is a docker SDK client. Containers are listed once per plan, sparse (one API call, the
list's own fields) rather than inspected one by one: a GPU host keeps every boot's stopped
container, and a CI host's dockerd thousands.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lifecycle.boot.engine import BOOT_LABEL, container_name
from lifecycle.build.plan import DIGEST_LABEL
from lifecycle.dockerd import as_root, dockerd_said
from lifecycle.table import count_of, some_of

NAME_LABEL = "lifecycle.manifest.name"


@dataclass(frozen=True)
class BootContainer:
    """A stopped container of a recorded boot."""

    id: str
    name: str
    boot_id: str
    status: str
    image_id: str


NOT_OURS = "built by another home (not in this ledger)"
# An image only a pull names in this ledger: another home built it (the schema's word on
# builds.removed_at), so it is never removed here.
PULLED = "pulled here as {}: another home's build, never removed here"
# An image this home's `build` found on dockerd ("up-to-date": the labels of its manifest)
# and never built: another home on the same dockerd built it, and removes it.
FOUND = "found here, built by another home: never removed here"
# Gone from dockerd between the listing and the removal: not this run's removal.
ALREADY_GONE = "already gone from dockerd: removed by someone else since it was listed"


@dataclass(frozen=True)
class ImageDecision:
    """An engine image (labelled with its manifest digest), removed or kept, and why."""

    id: str
    tags: tuple[str, ...]
    manifest_name: str
    removes: bool
    why: str


# The states of dockerd's default container list: a container in one holds what it mounts.
HOLDING = ("running", "paused", "restarting")


def running_mounts(listed: Iterable[Any]) -> dict[str, list[str]]:
    """Host path of every mount of every running container listed -> the containers' names."""
    found: dict[str, list[str]] = {}
    for container in listed:
        if container.attrs.get("State") not in HOLDING:
            continue  # a stopped one holds nothing
        for mount in container.attrs.get("Mounts") or []:
            if mount.get("Source"):
                found.setdefault(mount["Source"], []).append(container_name(container))
    return found


def mounted_by(host_path: str, mounts: Mapping[str, Sequence[str]]) -> list[str]:
    """The containers holding `host_path`: mounting it, a dir inside it, or a dir above it."""
    path = Path(os.path.realpath(host_path))
    names: set[str] = set()
    for source, containers in mounts.items():
        held = Path(os.path.realpath(source))
        if path.is_relative_to(held) or held.is_relative_to(path):
            names.update(containers)
    return sorted(names)


def stopped_boot_containers(listed: Iterable[Any]) -> list[BootContainer]:
    """Every exited (or dead) container listed that is labelled with a boot id."""
    found = []
    for c in listed:
        state, boot_id = c.attrs.get("State"), (c.attrs.get("Labels") or {}).get(BOOT_LABEL)
        if state in ("exited", "dead") and boot_id:
            image_id = c.attrs.get("ImageID", "")
            found.append(BootContainer(c.id, container_name(c), boot_id, state, image_id))
    return sorted(found, key=lambda c: c.name)


def plan_images(
    client: Any,
    listed: Iterable[Any],
    *,
    built_here: Collection[str],
    kept_image_ids: Collection[str],
    manifest: str | None,
    removed_containers: Collection[str] = (),
    keeps: Mapping[str, str] = MappingProxyType({}),
    baked_from: Mapping[str, str] = MappingProxyType({}),
    mcv_of: Mapping[str, str] = MappingProxyType({}),
    pulled: Mapping[str, str] = MappingProxyType({}),
    found: Collection[str] = (),
) -> list[ImageDecision]:
    """Engine images (of `manifest` if given): removed when this home built them (`built_here`,
    the ledger's build image ids) and no remaining cache or container refers to them, nor a
    policy keeps them (`keeps`: image id -> why). A bake (`baked_from`: its image id -> the
    engine image's) stays while its engine image does, and goes before it (a child first); its
    MCV images (`mcv_of`: image id -> the bake's) stay and go with it. An image another that
    stays is built on stays (dockerd would only untag it). One only pulled here (`pulled`:
    image id -> the reference) stays, and so does one only found here (`found`: build's
    "up-to-date" of an image another home built).
    `listed`: every container (they hold their images); `removed_containers`, the ids of those
    that go before the images do.

    One Docker engine can serve several homes (users, CI jobs); an image another home built is
    that home's to remove, whatever this ledger's caches say."""
    users: dict[str, list[str]] = {}
    for container in listed:
        if container.id not in removed_containers:
            users.setdefault(container.attrs.get("ImageID", ""), []).append(
                f"{container_name(container)} ({container.attrs.get('State')})"
            )
    decisions: dict[str, ImageDecision] = {}
    images = EngineImages.listed(client, {*built_here, *pulled, *found})
    built_on = images.built_on()
    # MCV images last: each is decided as its bake was. Before each image, those built on
    # it: it stays while one of them does (one this plan does not decide on stays).
    ordered = sorted(
        images.shown.values(), key=lambda i: (i["Id"] in mcv_of, -images.depth(i["Id"]))
    )
    for image in ordered:
        image_id, labels, tags = image["Id"], image.get("Labels") or {}, tags_of(image)
        name = labels.get(NAME_LABEL, "?")
        if manifest is not None and name != manifest:
            continue
        staying = [
            child
            for child in built_on.get(image_id, ())
            if child not in decisions or not decisions[child].removes
        ]
        if image_id in pulled and image_id not in built_here:
            removes, why = False, PULLED.format(pulled[image_id])
        elif image_id in found and image_id not in built_here:
            removes, why = False, FOUND
        elif image_id not in built_here:
            removes, why = False, NOT_OURS
        elif image_id in kept_image_ids:
            removes, why = False, "a cache that stays was built by it"
        elif image_id in keeps:
            removes, why = False, keeps[image_id]
        elif image_id in users:
            # Every boot leaves its stopped container: on a shared dockerd, hundreds.
            held = users[image_id]
            many = f"{count_of(len(held), 'container')}: " if len(held) > 1 else "container "
            removes, why = False, f"used by {many}{some_of(held)}"
        elif staying:
            child = staying[0]
            kind = "bake" if child in baked_from else "image"
            named = image_name(tags_of(images.shown[child]), child)
            removes, why = False, f"{kind} {named} is built on it, and stays"
        elif image_id in mcv_of:
            removes, why = _with_its_bake(decisions.get(mcv_of[image_id]))
        elif (engine := baked_from.get(image_id, "")) in kept_image_ids or engine in keeps:
            removes, why = False, f"baked from engine image {engine[:19]}, which stays"
        else:
            removes, why = True, "no remaining cache refers to it"
        decisions[image_id] = ImageDecision(image_id, tags, name, removes, why)
    children = baked_from.keys() | mcv_of.keys()
    return sorted(
        decisions.values(),
        key=lambda d: (d.manifest_name, d.id not in children, -images.depth(d.id), d.tags, d.id),
    )


@dataclass(frozen=True)
class EngineImages:
    """dockerd's images labelled with a manifest digest, and which is built on which."""

    shown: dict[str, dict[str, Any]]  # id -> the engine images, bakes and MCV images
    ancestors: Mapping[str, tuple[str, ...]]  # id of one shown -> every image it is built on

    @classmethod
    def listed(cls, client: Any, recorded: Collection[str]) -> EngineImages:
        """Every labelled image, in one request (the SDK's images.list inspects each image,
        a request apiece: 180 images on a shared CI host, 0.8 s of a 2 s plan). Of those,
        the images `docker images` shows (named, or nothing built on it) and the ones this
        ledger records (`recorded`), such as an older engine image, untagged, that a bake
        is built on. Never a build step's image: it carries the labels of the image it was
        built on, yet no name nor record names it."""
        every = client.api.images(all=True, filters={"label": DIGEST_LABEL})
        parent_of = {i["Id"]: i.get("ParentId") or "" for i in every}
        parents = set(parent_of.values())
        shown = {
            i["Id"]: i for i in every if _named(i) or i["Id"] not in parents or i["Id"] in recorded
        }
        ancestors = {}
        for image_id in shown:
            chain, parent = [], parent_of[image_id]
            while parent in parent_of:  # an unlabelled one (the base's) ends it
                chain.append(parent)
                parent = parent_of[parent]
            ancestors[image_id] = tuple(chain)
        return cls(shown, ancestors)

    def depth(self, image_id: str) -> int:
        """How many images listed it is built on: one built on another comes first."""
        return len(self.ancestors.get(image_id, ()))

    def built_on(self) -> dict[str, list[str]]:
        """Image id -> the images shown built on it, however many steps away."""
        found: dict[str, list[str]] = {}
        for image_id, chain in self.ancestors.items():
            for ancestor in chain:
                found.setdefault(ancestor, []).append(image_id)
        return found


def tags_of(image: Mapping[str, Any]) -> tuple[str, ...]:
    """An image's tags as dockerd's list gives them, without its placeholder."""
    return tuple(tag for tag in image.get("RepoTags") or () if tag != "<none>:<none>")


def _named(image: Mapping[str, Any]) -> bool:
    """Whether dockerd has a name for the image: a tag, or a digest it was pulled by."""
    digests = [d for d in image.get("RepoDigests") or () if d != "<none>@<none>"]
    return bool(tags_of(image) or digests)


def image_name(tags: tuple[str, ...], image_id: str) -> str:
    """An image as listings name it: its tags, else its short id."""
    return ", ".join(tags) if tags else image_id[:19]


def _with_its_bake(bake: ImageDecision | None) -> tuple[bool, str]:
    """Whether an MCV image goes, and why: as the bake it was made with (gone: it goes)."""
    if bake is None:
        return True, "an MCV image of a bake no longer on dockerd"
    named, fate = bake.tags[0] if bake.tags else bake.id[:19], "goes" if bake.removes else "stays"
    return bake.removes, f"an MCV image of bake {named}, which {fate}"


def remove_image(
    client: Any, image: ImageDecision, deleted: set[str], stays: Collection[str] = ()
) -> str | None:
    """Untag and delete an image without force; dockerd's refusal (a container started on it
    meanwhile), or its keeping the image untagged, comes back as the problem instead of being
    forced through; one gone before any of its names was removed here, as ALREADY_GONE.
    `deleted` gains what dockerd deleted: the image, and the untagged images it was built on
    that nothing else needs (an older engine image under a bake goes with the bake). Not an
    image of `stays` (what this run keeps, and the images bakes are built on): dockerd would
    prune one untagged (another home's older engine image under this home's bake), so only
    the steps between the two go, one by one."""
    from docker.errors import APIError, ImageNotFound

    removed = False  # a name of it, by this call
    steps: list[str] | None = None
    try:
        steps = _own_steps(client, image.id, stays)  # None: nothing that stays is under it
        for reference in image.tags or (image.id,):
            with suppress(ImageNotFound):  # that name, or the whole image, went meanwhile
                answer = client.api.remove_image(reference, noprune=steps is not None)
                deleted.update(str(item["Deleted"]) for item in answer or () if "Deleted" in item)
                removed = True
        # Untagged is not removed: dockerd keeps an image another is built on (a bake), and
        # says nothing of it.
        client.images.get(image.id)
    except ImageNotFound:
        _remove_steps(client, steps or (), deleted)
        return None if removed else ALREADY_GONE
    except APIError as exc:
        return dockerd_said(exc)
    return "untagged, but dockerd keeps it: an image built on it is still there"


def _own_steps(client: Any, image_id: str, stays: Collection[str]) -> list[str] | None:
    """The images between `image_id` and the first image under it that stays (its build's
    steps), nearest first; None when none stays under it (dockerd prunes as ever)."""
    steps: list[str] = []
    parent = client.api.inspect_image(image_id).get("Parent") or ""
    while parent:
        if parent in stays:
            return steps
        steps.append(parent)
        parent = client.api.inspect_image(parent).get("Parent") or ""
    return None


def _remove_steps(client: Any, steps: Iterable[str], deleted: set[str]) -> None:
    """Remove a removed image's build steps, nearest first, each without pruning; the first
    dockerd keeps (another image is built on it, a name or a container holds it) ends it."""
    from docker.errors import APIError

    for step in steps:
        try:
            answer = client.api.remove_image(step, noprune=True)
        except APIError:  # ImageNotFound among them: taken by someone else, what is under stays
            return
        deleted.update(str(item["Deleted"]) for item in answer or () if "Deleted" in item)


TRASH_MOUNT = "/lifecycle-trash"


def empty_as_root(client: Any, trash: Path, image_id: str) -> str | None:
    """Empty `trash` (a cache dir teardown moved aside) as root, through dockerd (as_root);
    None when it is empty, else why not. `find -delete` follows no link: what a link in the
    cache points at stays."""
    if trash.is_symlink() or not trash.is_dir():
        return f"{trash} is not a dir"
    argv = ["find", TRASH_MOUNT, "-mindepth", "1", "-delete"]
    return as_root(client, image_id, argv, {TRASH_MOUNT: trash}, f"empty {trash.name}")
