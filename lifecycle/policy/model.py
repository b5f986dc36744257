"""The retention policy: what `lifecycle plan` / `apply` converge this host's caches, its engine
images and the remote archive to, written as `policy:` in the project's lifecycle.yaml.

    policy:
      caches:                      # the first rule whose `match` fits a manifest's name
        - match: "demo*"
          keep_last: 2             # the newest N caches of each manifest and profile
          keep_within: 7d          # any cache booted within D
          keep_releases: [demo/0.2]  # the newest good cache of each (what production runs)
          archive_after: 1d        # idle D: archived (its files too with content: true)
          remove: true             # what no rule keeps goes, once archived and verified
      images: {keep_last: 2}       # engine images: the newest N releases of each manifest
      remote: {keep_last: 3, keep_within: 30d}   # what `gc --remote` keeps per cache

Without a policy the default applies: each manifest and profile keeps its newest cache and
every cache booted within a week; idle a day, a cache is archived (evidence only) and then
removed, never before its archive verifies; images keep their last two releases; the remote
archive keeps everything. Pinned caches, caches in use and those mounted by a running
container are kept whatever the policy says (lifecycle.teardown.plan.holders).
"""

from __future__ import annotations

import fnmatch
import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from lifecycle.durations import duration_length, parse_duration
from lifecycle.manifest.load import load_validated


def _duration(text: str) -> str:
    duration_length(text)
    return text


Duration = Annotated[str, AfterValidator(_duration)]


def seconds(text: str | None) -> timedelta | None:
    """A validated duration's length (None stays None)."""
    return None if text is None else parse_duration(text, "duration")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CacheRule(_Strict):
    """What to keep of the caches of the manifests `match` names, and when the rest goes."""

    match: str = Field(default="*", description="A manifest name, or a pattern such as 'demo*'.")
    keep_last: int = Field(default=1, ge=0, description="The newest N of each manifest+profile.")
    keep_within: Duration | None = Field(default="7d", description="Any cache booted within D.")
    keep_releases: list[str] = Field(
        default_factory=list,
        description="Releases named as for build (0.31, demo/0.2): their newest good cache stays.",
    )
    archive_after: Duration = Field(default="1d", description="Idle this long: archived.")
    content: bool = Field(default=False, description="Archive its files, not only evidence.")
    remove: bool = Field(default=True, description="Remove what no rule keeps, once archived.")

    def fits(self, manifest: str) -> bool:
        return fnmatch.fnmatchcase(manifest, self.match)


class ImageRule(_Strict):
    """How many releases of the manifests `match` names keep their engine image here."""

    match: str = "*"
    keep_last: int = Field(default=2, ge=1, description="The newest N releases of each manifest.")


class RemoteRule(_Strict):
    """What the archive keeps of each cache's versions (gc --remote); pinned results always."""

    keep_last: int | None = Field(default=None, ge=1)
    keep_within: Duration | None = None
    grace: Duration = Field(default="1h", description="Objects newer than this are never swept.")


class Policy(_Strict):
    """`policy:` in lifecycle.yaml."""

    caches: list[CacheRule] = Field(default_factory=lambda: [CacheRule()])
    images: list[ImageRule] = Field(default_factory=lambda: [ImageRule()])
    remote: RemoteRule = Field(default_factory=RemoteRule)

    def cache_rule(self, manifest: str) -> CacheRule | None:
        """The first rule for this manifest's caches; None: no rule, nothing of it changes."""
        return next((rule for rule in self.caches if rule.fits(manifest)), None)

    def image_rule(self, manifest: str) -> ImageRule | None:
        """The first rule for this manifest's images; None: none of them is removed."""
        return next((r for r in self.images if fnmatch.fnmatchcase(manifest, r.match)), None)

    def digest(self) -> str:
        """What a saved plan binds to: the rules as validated, defaults filled in, so that a
        comment or another spelling of the same rules changes nothing."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


class ProjectConfig(_Strict):
    """lifecycle.yaml as the policy reads it (`archive:` is lifecycle.archive.config's)."""

    archive: str | None = Field(default=None, description="s3://BUCKET/PREFIX")
    policy: Policy = Field(default_factory=Policy)


def read_policy(file: Path) -> Policy:
    """The policy lifecycle.yaml declares, else the default; ManifestError (exit 2) located."""
    if not file.exists():  # a directory there is a mistake to name, not a file to ignore
        return Policy()
    return load_validated(file, ProjectConfig, lambda config: iter(())).policy
