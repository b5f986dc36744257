"""`lifecycle teardown`: the request from the command line, the services from the environment.

The work is in lifecycle.teardown: `make_plan` only reads (`--dry-run` stops there),
`run_teardown` carries the plan out once the user agreed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lifecycle.archive.config import NoArchiveLocation, resolve_location
from lifecycle.archive.location import ArchiveLocation, s3_client
from lifecycle.errors import LifecycleError
from lifecycle.teardown.plan import Selection, parse_duration
from lifecycle.teardown.survey import Services, TeardownRequest


def make_request(
    cache_ids: Sequence[str],
    *,
    manifest: str | None,
    older_than: str | None,
    state: str | None,
    archive_first: bool,
    with_content: bool,
    images: bool,
    archive_to: ArchiveLocation | None,
) -> TeardownRequest:
    """The filters and switches, checked: a bad duration is a usage error."""
    if with_content and not archive_first:
        raise LifecycleError("--with-content only means something with --archive")
    selection = Selection(
        cache_ids=tuple(dict.fromkeys(cache_ids)),
        manifest=manifest,
        older_than=parse_duration(older_than) if older_than else None,
        state=state,
    )
    return TeardownRequest(selection, archive_first, with_content, images, archive_to)


def archive_location(
    flag: str | None, environ: Mapping[str, str], project_root: Path, *, required: bool
) -> ArchiveLocation | None:
    """Where --archive writes. Without --archive none need be configured: each archive is
    verified where its record says it was written. A location given but wrong is an error."""
    try:
        return resolve_location(flag, environ, project_root)
    except NoArchiveLocation:
        if required:
            raise
        return None


def connect_services(
    environ: Mapping[str, str], on_slow: Callable[[str], None] | None = None
) -> Services:
    """dockerd and S3 where the environment points. dockerd not answering keeps every cache
    (nobody can say which containers mount them) instead of failing the command."""
    from lifecycle.dockerd import DockerUnavailable, connect

    try:
        docker, problem = connect(environ), None
    except DockerUnavailable as exc:
        docker, problem = None, str(exc)
    return Services(docker, s3_client(environ, on_slow), docker_problem=problem)
