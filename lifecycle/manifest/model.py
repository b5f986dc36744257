"""The manifest schema: strict pydantic models, unknown keys are errors."""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    model_validator,
)

from lifecycle.manifest.fields import Slug, Strict, Text, matching, version_text
from lifecycle.manifest.measure import LadderMethod, Validity

SCHEMA_VERSION = 1

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_PORT_KEY = re.compile(r"^([0-9]{1,5})(/(tcp|udp|sctp))?$")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENTIFIER}(\.{_IDENTIFIER})*"
_ENTRY_POINT_GROUP = re.compile(rf"^{_DOTTED}$")
_OBJECT_REFERENCE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")


def _pep440(value: str) -> str:
    try:
        return str(Version(value))
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version") from None


def _absolute_posix(value: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{value!r} must be an absolute path inside the container, without '..'")
    return str(path)


def _finite(value: object) -> object:
    # Said here, before the union's four members each say why they refuse it.
    if isinstance(value, float) and not math.isfinite(value):
        spelled = ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
        raise ValueError(f"must be a finite number, not {spelled}")
    return value


def _port_number_as_text(value: object) -> object:
    # YAML reads the key `8000:` as an integer; Docker takes "8000" and "8000/tcp" alike.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _port_key(value: str) -> str:
    match = _PORT_KEY.match(value)
    if match is None or not 1 <= int(match[1]) <= 65535:
        raise ValueError(f"{value!r} is not a container port: PORT or PORT/tcp|udp|sctp, 1-65535")
    return value


PinnedVersion = Annotated[str, BeforeValidator(version_text), AfterValidator(_pep440)]
EnvName = Annotated[str, matching(_ENV_NAME, "is not an environment variable name")]
ContainerPath = Annotated[str, AfterValidator(_absolute_posix)]
CommitId = Annotated[str, matching(_COMMIT, "is not a commit id (7 to 64 lower-case hex digits)")]
PortKey = Annotated[str, BeforeValidator(_port_number_as_text), AfterValidator(_port_key)]
PinName = Literal["vllm", "flashinfer", "base_image"]


def _unset(value: object) -> bool:
    # Keys added after manifests were first digested are dumped only when set (`exclude_if`),
    # so a manifest that does not use one dumps, and digests (image tag included), as before
    # it existed.
    return not value


class EnginePins(Strict):
    """What the engine image is made of."""

    vllm: PinnedVersion
    flashinfer: PinnedVersion
    base_image: Text
    package_dir: ContainerPath = Field(
        description="Where the engine's python package lives in the image; patches apply here."
    )
    vllm_dist: Text = Field(default="vllm", description="Distribution name the vllm pin checks.")
    flashinfer_dist: Text = Field(
        default="flashinfer-python", description="Distribution name the flashinfer pin checks."
    )
    unconfirmed: dict[PinName, Text] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Pins nobody has confirmed yet, pin name -> why (`lifecycle port` writes one when "
            "it cannot read a pin from the new release). `validate` warns and `build` refuses "
            "while a pin is listed here: check the pin, correct it if needed, then delete its "
            "entry."
        ),
    )


class Upstream(Strict):
    """Where the engine's source comes from, for `port`."""

    repository: Text = Field(description="A git URL or a local path (relative to the manifest).")
    tag: Text = Field(default="v{version}", description="Tag of a release; {version} is replaced.")

    def tag_for(self, version: str) -> str:
        """The upstream tag of `version`."""
        return self.tag.replace("{version}", version)


class Patch(Strict):
    """One patch of the ordered series, with why it is carried."""

    file: Text = Field(description="Path relative to the manifest's directory.")
    reason: Text
    upstream_pr: Text | None = None
    upstream_commit: CommitId | None = None
    drop_when: Text | None = None


def engine_flag(name: str) -> str:
    """The engine's flag for a tuned value: gpu_memory_utilization -> --gpu-memory-utilization."""
    return "--" + name.replace("_", "-")


class TunedValue(Strict):
    """An engine argument whose value was measured, and how."""

    value: Annotated[bool | int | float | str, BeforeValidator(_finite)]
    status: Literal["validated", "carried"]
    measured_on: Text = Field(description="The build the value was measured on.")
    method: Text
    margin: Text | None = None
    carried_from: Text | None = None
    note: Text | None = None
    measure: LadderMethod | None = Field(
        default=None,
        exclude_if=_unset,
        description="How to measure it again (`lifecycle tune --revalidate`).",
    )
    validity: Validity | None = Field(
        default=None,
        exclude_if=_unset,
        description="The conditions it was measured in (`lifecycle tune`).",
    )

    @model_validator(mode="after")
    def _carried_says_from_where(self) -> TunedValue:
        if self.status == "carried" and self.carried_from is None:
            raise ValueError("status 'carried' needs carried_from (the release it was measured on)")
        if self.status == "validated" and self.carried_from is not None:
            raise ValueError("carried_from is only for status 'carried'")
        return self

    def engine_args(self, name: str) -> list[str]:
        """The value as the engine takes it: `--flag VALUE`; `--flag` alone for true, nothing
        for false."""
        if self.value is True:
            return [engine_flag(name)]
        if self.value is False:
            return []
        return [engine_flag(name), str(self.value)]


class JitCache(Strict):
    """A directory the engine JIT-compiles into at boot; mounted from a tracked host dir."""

    path: ContainerPath
    env: EnvName = Field(description="The env var that points the engine at `path`.")
    enabled: bool = True
    settings: dict[EnvName, str] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Env vars a boot sets with this cache so the JIT writes all of its output into "
            "`path` (e.g. Inductor's precompiled headers, which otherwise go to /tmp)."
        ),
    )


class Acceptance(Strict):
    """A command run on the host after the boot; its exit code and JSON stdout become a result.

    It runs from the project root (the directory holding `manifests/`) with the boot as JSON
    on stdin. Exit 0 is pass, 1 fail, any other (or a timeout) inconclusive; its stdout, if
    any, is one JSON object whose `metrics` and `note` the result takes (lifecycle.results).
    """

    command: Annotated[list[Text], Field(min_length=1)]
    name: Slug = Field(default="acceptance", description="The name of the result it records.")
    timeout_s: Annotated[float, Field(gt=0)] = 600.0


class BootProfile(Strict):
    """How to start the engine (or another program in its image): command, environment,
    secrets by name, devices."""

    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    # A yes/no about what the command is, rather than a list of the tuned values a profile
    # takes: the tuned values are the engine's arguments, so the one thing to know is whether
    # the engine runs. True by default, as every profile was the engine before the key.
    engine: bool = Field(
        default=True,
        exclude_if=lambda engine: engine is True,
        description=(
            "Whether the command runs the engine. A boot appends the tuned values to an engine "
            "profile's command, whose args may then not set one of them too; false for another "
            "program in the image (a benchmark client, a shell, a smoke test), which gets none."
        ),
    )
    env: dict[EnvName, str] = Field(default_factory=dict)
    secrets: list[EnvName] = Field(
        default_factory=list,
        description="Names of host env vars passed through; values are never stored.",
    )
    from_host: list[EnvName] = Field(
        default_factory=list,
        exclude_if=_unset,
        description=(
            "Names of host env vars passed through whose values are not secret and are "
            "recorded with the boot (a pod IP, a side channel's host): `why` can then name "
            "one that changed a cache key. Secrets go under `secrets`."
        ),
    )
    gpus: Literal["all"] | Annotated[int, Field(ge=0)] | None = None
    shm_size: Annotated[str, Field(pattern=r"^[0-9]+[bkmg]?$")] | None = None
    ipc: Literal["host", "private", "shareable"] | None = None
    ports: dict[PortKey, Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=dict, description="Container port (8000/tcp) -> host port."
    )
    network: Text | None = Field(
        default=None, description="Docker network mode (e.g. none, host); default: dockerd's."
    )
    acceptance: Acceptance | None = Field(
        default=None,
        exclude_if=_unset,
        description="Run after each boot of this profile; its outcome is a result.",
    )


EntryPointGroup = Annotated[
    str, matching(_ENTRY_POINT_GROUP, "is not an entry point group (e.g. vllm.general_plugins)")
]
ObjectReference = Annotated[
    str, matching(_OBJECT_REFERENCE, "is not an object reference 'package.module:function'")
]


class Manifest(Strict):
    """One pinned engine release, resolved (after `extends` and cache defaults)."""

    schema_version: Literal[1]
    name: Slug
    extends: Text | None = None
    registry: Text | None = Field(
        default=None,
        description=(
            "Where the engine's images are pushed and pulled (HOST[:PORT][/PATH]): `boot` pulls"
            " the image by digest from here when this host has none. Not part of the digest:"
            " where an image is kept is not what it is."
        ),
    )
    engine: EnginePins
    upstream: Upstream
    patches: list[Patch] = Field(default_factory=list)
    tuned: dict[str, TunedValue] = Field(default_factory=dict)
    caches: dict[Slug, JitCache] = Field(default_factory=dict)
    profiles: dict[Slug, BootProfile] = Field(default_factory=dict)
    entry_points: dict[EntryPointGroup, dict[Slug, ObjectReference]] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Entry points the image registers, group -> name -> 'module:function', e.g. "
            "vllm.general_plugins: the engine loads them at start (a module a patch adds is "
            "otherwise never imported). Written as a distribution of their own next to "
            "engine.package_dir."
        ),
    )

    def active_caches(self) -> dict[str, JitCache]:
        """The caches a boot mounts."""
        return {name: cache for name, cache in self.caches.items() if cache.enabled}

    def tuned_args(self, profile_name: str) -> list[str]:
        """The tuned values as engine arguments, for a profile that runs the engine; none for
        one that runs another program."""
        if not self.profiles[profile_name].engine:
            return []
        return [arg for name, tuned in self.tuned.items() for arg in tuned.engine_args(name)]

    def boot_command(self, profile_name: str) -> list[str]:
        """What a boot of the profile runs: its command and args, then its tuned arguments."""
        profile = self.profiles[profile_name]
        return [*profile.command, *profile.args, *self.tuned_args(profile_name)]
