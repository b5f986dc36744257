"""The project's `lifecycle.yaml` and the archive location it (or a flag, or the env) names.

    archive: s3://BUCKET/PREFIX     # where archive, teardown --archive and result add write

It is read with the manifests' reader (same limits, same located errors), and whenever it
exists, so that a mistake in it is seen even while a flag overrides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lifecycle.archive.location import ArchiveLocation, location_problem
from lifecycle.errors import LifecycleError, ManifestError, Problem, did_you_mean
from lifecycle.manifest.source import Located, read_yaml, render_key_path

CONFIG_FILE = "lifecycle.yaml"
KEYS = ("archive", "policy")  # policy: lifecycle.policy.model


def read_config(file: Path) -> ArchiveLocation | None:
    """The archive location the project's configuration names; an absent file names none."""
    if not file.exists():  # a directory there is a mistake to name, not a file to ignore
        return None
    located = read_yaml(file)
    data = {} if located.data is None else located.data
    if not isinstance(data, dict):
        raise _error(located, (), "expected a mapping, e.g. `archive: s3://BUCKET/PREFIX`")
    for key in data:
        if key not in KEYS:
            also = did_you_mean(str(key), KEYS, f"; known: {', '.join(KEYS)}")
            raise _error(located, (str(key),), f"unknown key {str(key)!r}{also}", key=True)
    archive = data.get("archive")
    if archive is None:
        return None
    if not isinstance(archive, str):
        raise _error(located, ("archive",), f"expected s3://BUCKET[/PREFIX], got {_kind(archive)}")
    problem = location_problem(archive)
    if problem:  # the value named, as a flag's or the environment's is (a long one clipped)
        raise _error(located, ("archive",), f"{problem}, got {archive!r}")
    return ArchiveLocation.parse(archive)


def _kind(value: object) -> str:
    """What YAML gave where a string was wanted, in a user's words."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def optional_location(
    flag: str | None, environ: Mapping[str, str], project_root: Path, *, option: str = "--to"
) -> ArchiveLocation | None:
    """The flag `option` (--to or --from), else LIFECYCLE_ARCHIVE, else `archive:` in the
    project's lifecycle.yaml; None when none is configured anywhere: a verb that archives only
    if it can (`result add`, a teardown verifying archives where their records say). A location
    given but wrong is still an error."""
    configured = read_config(project_root / CONFIG_FILE)
    if flag:
        return ArchiveLocation.parse(flag, option)
    if environ.get("LIFECYCLE_ARCHIVE"):
        return ArchiveLocation.parse(environ["LIFECYCLE_ARCHIVE"], "LIFECYCLE_ARCHIVE")
    return configured


def resolve_location(
    flag: str | None,
    environ: Mapping[str, str],
    project_root: Path,
    *,
    option: str = "--to",
    needed_by: str = "",
) -> ArchiveLocation:
    """`optional_location`, where a location is needed (by `needed_by`, said in the error when
    the verb alone does not say why): none is a usage error."""
    found = optional_location(flag, environ, project_root, option=option)
    if found is None:
        why = f" ({needed_by})" if needed_by else ""
        raise LifecycleError(
            f"no archive location{why}: pass {option} s3://BUCKET/PREFIX, set LIFECYCLE_ARCHIVE, "
            f"or write `archive: s3://BUCKET/PREFIX` in {project_root / CONFIG_FILE}"
        )
    return found


def _error(
    located: Located, path: tuple[str, ...], message: str, *, key: bool = False
) -> ManifestError:
    mark = located.mark(path, prefer_key=key)
    assert mark is not None, "a document that is a mapping has a mark"
    return ManifestError([Problem(mark.file, mark.line, mark.col, render_key_path(path), message)])
