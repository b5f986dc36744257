"""The container spec of a boot: what is sent to dockerd, and what `--dry-run` shows.

Secret values live only in `ContainerSpec.environment`, which goes to dockerd and nowhere
else; everything that is printed or recorded comes from `describe()`, which names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lifecycle.errors import LifecycleError
from lifecycle.manifest.model import Manifest

BAKED = "baked"  # a cache in a layer of the image (lifecycle bake): nothing is mounted


@dataclass(frozen=True)
class CacheMount:
    """One tracked host dir mounted where the engine JIT-compiles into; or, `baked`, a layer
    of the image holding the cache there, read where dockerd keeps it (lifecycle.boot.baked)."""

    cache_id: str
    name: str
    host_path: str
    container_path: str
    env: str
    mode: str  # cold | warm | baked
    files_before: int = 0  # files it held when mounted


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a boot's container is created with."""

    image: str
    command: list[str]
    environment: dict[str, str] = field(repr=False)
    secret_names: tuple[str, ...]
    mounts: tuple[CacheMount, ...]
    labels: dict[str, str]
    gpus: str | int | None = None
    shm_size: str | None = None
    ipc_mode: str | None = None
    ports: dict[str, int] = field(default_factory=dict)
    network_mode: str | None = None

    def describe(self) -> dict[str, Any]:
        """The spec as shown and recorded: secret values replaced by where they come from."""
        environment = {
            key: f"<from host env {key}>" if key in self.secret_names else value
            for key, value in sorted(self.environment.items())
        }
        return {
            "image": self.image,
            "command": self.command,
            "environment": environment,
            "mounts": [
                {
                    "source": m.host_path,
                    "target": m.container_path,
                    "cache": m.cache_id,
                    "mode": m.mode,
                }
                for m in self.mounts
            ],
            "device_requests": _device_requests(self.gpus),
            "shm_size": self.shm_size,
            "ipc_mode": self.ipc_mode,
            "ports": self.ports,
            "network_mode": self.network_mode,
            "labels": self.labels,
        }

    def docker_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the docker SDK's `containers.create`."""
        from docker.types import DeviceRequest, Mount

        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": self.command,
            "environment": self.environment,
            "labels": self.labels,
            "mounts": [
                Mount(target=m.container_path, source=m.host_path, type="bind")
                for m in self.mounts
                if m.mode != BAKED
            ],
            "detach": True,
        }
        requests = _device_requests(self.gpus)
        if requests:
            kwargs["device_requests"] = [DeviceRequest(**r) for r in requests]
        optional = {
            "shm_size": self.shm_size,
            "ipc_mode": self.ipc_mode,
            "ports": self.ports or None,
            "network_mode": self.network_mode,
        }
        kwargs.update({key: value for key, value in optional.items() if value is not None})
        return kwargs


def build_spec(
    manifest: Manifest,
    profile_name: str,
    image: str,
    mounts: list[CacheMount],
    host_env: Mapping[str, str],
    labels: dict[str, str],
    boot_env: Mapping[str, str],
    *,
    extra_args: Sequence[str] = (),
    engine_env: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """Profile + tuned values (if it runs the engine) + cache mounts (and their settings) +
    the boot's own provenance (`boot_env`: LIFECYCLE_BOOT_ID, …) + `extra_args` after the
    profile's (a night cell's workload) and the `engine_env` its hooks declare → spec; a secret
    missing on the host is an error, and so is a hook's engine env over a name the boot sets
    otherwise."""
    profile = manifest.profiles[profile_name]
    caches = manifest.active_caches()
    environment = dict(profile.env)
    for mount in mounts:
        environment.update(caches[mount.name].settings)
        environment[mount.env] = mount.container_path
    environment.update(boot_env)
    check_secrets(manifest, profile_name, host_env)
    engine_env = engine_env or {}
    taken = sorted(set(engine_env) & {*environment, *profile.secrets, *profile.from_host})
    if taken:
        raise LifecycleError(
            f"a hook sets {', '.join(taken)} in the engine's environment, which profile"
            f" {profile_name!r}, a cache or the boot sets already"
        )
    environment.update(engine_env)
    environment.update({name: host_env[name] for name in (*profile.from_host, *profile.secrets)})
    return ContainerSpec(
        image=image,
        command=[*manifest.boot_command(profile_name), *extra_args],
        environment=environment,
        secret_names=tuple(profile.secrets),
        mounts=tuple(mounts),
        labels=labels,
        gpus=profile.gpus,
        shm_size=profile.shm_size,
        ipc_mode=profile.ipc,
        ports=dict(profile.ports),
        network_mode=profile.network,
    )


def check_secrets(manifest: Manifest, profile_name: str, host_env: Mapping[str, str]) -> None:
    """Every secret (and `from_host` value) the profile passes by name must be set on the
    host."""
    profile = manifest.profiles[profile_name]
    missing = [name for name in (*profile.from_host, *profile.secrets) if name not in host_env]
    if missing:
        raise LifecycleError(
            f"profile {profile_name!r} passes {', '.join(missing)} by name, but the host "
            "environment does not set it"
        )


def pick_profile(manifest: Manifest, requested: str | None) -> str:
    """The profile asked for; else the only one; else `serve`."""
    if requested is None:
        requested = next(iter(manifest.profiles)) if len(manifest.profiles) == 1 else "serve"
    if requested not in manifest.profiles:
        known = ", ".join(manifest.profiles) or "none"
        raise LifecycleError(f"no boot profile {requested!r} in the manifest (profiles: {known})")
    return requested


def _device_requests(gpus: str | int | None) -> list[dict[str, Any]]:
    if gpus is None or gpus == 0:
        return []
    count = -1 if gpus == "all" else int(gpus)
    return [{"driver": "", "count": count, "capabilities": [["gpu"]]}]
