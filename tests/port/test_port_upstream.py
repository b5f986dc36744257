"""What a port gives git of `upstream.repository`, and what it shows of it: a manifest runs no
command, and a token in the URL reaches git and nothing else."""

from __future__ import annotations

import base64
import functools
import os
import re
import shutil
import socket
import subprocess
import time
from contextlib import AbstractContextManager
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.errors import EnvironmentFailure, LifecycleError
from lifecycle.home import Home
from lifecycle.port.upstream import ensure_mirror, mirror_path
from lifecycle.redact import without_userinfo
from tests.port_support import PatchSpec, PortRun, Project, Upstream, change_mix, git
from tests.silent_servers import serving, silent_listener, stalling_git_daemon
from tests.trust_support import lifecycle_argv

# Quoted as YAML: `--upload-pack` runs its value through the shell on the fetching side.
OPTION = "--upload-pack=touch PWNED; echo x:y"
TOKEN = "ghp_SeCrEtToKeN0123456789abcdefABCDEF0123"


def _manifest_from(project: Project, repository: str, patches: list[PatchSpec]) -> Path:
    """manifests/1.0 (committed) whose upstream.repository is `repository`, as YAML text."""
    directory = project.manifest("1.0", patches, commit=False)
    manifest = directory / "manifest.yaml"
    text = manifest.read_text()
    written = f"  repository: {project.upstream.path}\n"
    assert written in text
    manifest.write_text(text.replace(written, f"  repository: {repository}\n"))
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "manifest 1.0")
    return manifest


def _pwned(*roots: Path) -> list[Path]:
    return [found for root in roots for found in root.rglob("PWNED")]


def test_a_repository_git_would_read_as_an_option_is_refused_before_git_runs(
    project: Project, tmp_path: Path, isolated_home: Path
) -> None:
    manifest = _manifest_from(project, f"'{OPTION}'", [])
    project.upstream.tag("2.0.0")

    for run in (project.port("1.0", "2.0", "--dry-run"), project.port("1.0", "2.0")):
        assert run.exit_code == 2, run.stderr
        assert run.stderr.startswith(f"{manifest}:")
        assert "upstream.repository: must not begin with '-'" in run.stderr
    assert _pwned(tmp_path, isolated_home) == []
    assert not (isolated_home / "lifecycle" / "mirrors").exists()  # no git was run at all


def test_git_never_takes_the_source_for_an_option(tmp_path: Path, isolated_home: Path) -> None:
    # Past the manifest's check (a value that got by it): `--` keeps it a repository.
    with pytest.raises(LifecycleError, match=r"failed .*, and there is no mirror of it yet"):
        ensure_mirror(Home(tmp_path / "home"), OPTION, os.environ)

    assert _pwned(tmp_path, isolated_home) == []


class _PrivateUpstream(SimpleHTTPRequestHandler):
    """A dumb-HTTP git server's handler; with `basic` (an HTTP basic credential, encoded), a
    request without it is answered 401, as a private upstream answers."""

    def __init__(self, *args: Any, basic: str | None, **kwargs: Any) -> None:
        self.basic = basic  # before the base class, which handles the request as it starts
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        if self.basic and self.headers.get("Authorization") != f"Basic {self.basic}":
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="upstream"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's output stays the port's


def _dumb_http(root: Path, basic: str | None) -> AbstractContextManager[str]:
    """`root` served over dumb HTTP on loopback while in the block: its URL."""
    return serving(functools.partial(_PrivateUpstream, basic=basic, directory=str(root)))


def _lifecycle(project: Project, *args: str) -> PortRun:
    result = CliRunner().invoke(cli, ["--manifests", str(project.manifests), *args])
    return PortRun(result.exit_code, result.stdout, result.stderr)


def _holding(root: Path, needle: str) -> list[str]:
    """The files under `root` whose name or bytes hold `needle`."""
    found = []
    for path in root.rglob("*"):
        if needle in path.name or (path.is_file() and needle.encode() in path.read_bytes()):
            found.append(str(path))
    return found


@pytest.mark.parametrize("userinfo", [f"x-access-token:{TOKEN}", TOKEN])
def test_a_token_in_the_upstream_url_reaches_git_and_nothing_else(
    userinfo: str, up: Upstream, project: Project, tmp_path: Path, isolated_home: Path
) -> None:
    patch = up.patch("v1.0.0", change_mix("32"))
    up.edit("pkg/other.py", lambda text: text.replace("OTHER_5 = 5\n", "OTHER_5 = 55\n"))
    up.write("requirements.txt", "fakeinfer==2.0.0\n")
    up.commit("Release 2.0.0")
    up.tag("2.0.0")
    root = tmp_path / "served"
    root.mkdir()
    git(root, "clone", "-q", "--bare", str(up.path), "up.git")
    git(root / "up.git", "update-server-info")
    # user:token is asked for, so the port must still give it to git; a token alone is a
    # user git would want a password for, so that upstream is served openly.
    basic = base64.b64encode(userinfo.encode()).decode() if ":" in userinfo else None
    with _dumb_http(root, basic) as server:
        plain = f"{server}/up.git"
        with_token = plain.replace("://", f"://{userinfo}@")
        _manifest_from(project, with_token, [PatchSpec("a.patch", patch)])
        online = project.port("1.0", "2.0", "--json")
    git(project.path, "branch", "-q", "-D", "port/2.0")
    offline = project.port("1.0", "2.0")  # the upstream is gone: from the mirror, saying so
    shown = [_lifecycle(project, "show", "1.0"), _lifecycle(project, "show", "1.0", "--json")]

    assert online.exit_code == 0, online.stderr
    assert online.report["upstream"] == plain
    assert offline.exit_code == 0, offline.stderr
    assert f"warning: fetch from {plain} failed" in offline.stdout
    assert shown[1].exit_code == 0 and plain in shown[1].stdout
    for run in (online, offline, *shown):
        assert TOKEN not in run.stdout and TOKEN not in run.stderr
    # On the branch only the manifest the user wrote holds it; the port's files and message not.
    grep = subprocess.run(
        ["git", "grep", "-l", "-F", TOKEN, "port/2.0"],
        cwd=project.path,
        capture_output=True,
        text=True,
    )
    assert grep.stdout.split() == ["port/2.0:manifests/1.0/manifest.yaml"]
    assert TOKEN not in git(project.path, "log", "--format=%B", "main..port/2.0")
    assert _holding(isolated_home, TOKEN) == []


def test_an_upstream_that_accepts_and_never_answers_fails_the_fetch_in_bounded_time(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git has no limit of its own on an HTTP server that sends nothing: a fetch from one hung
    the port for ever. It now fails after LIFECYCLE_GIT_TIMEOUT seconds without a byte, and
    the port goes on from the mirror as last fetched, saying so; here, with none yet, stops."""
    monkeypatch.setenv("LIFECYCLE_GIT_TIMEOUT", "2")
    with silent_listener() as listener:
        started = time.monotonic()
        with pytest.raises(LifecycleError) as failed:  # no mirror yet: nothing to go on from
            ensure_mirror(Home(tmp_path / "home"), f"http://{listener.address}/up.git", os.environ)
        took = time.monotonic() - started

    assert took < 10, took
    assert "failed (fatal: unable to access" in str(failed.value), failed.value
    assert "too slow" in str(failed.value), failed.value


def _port_bounded(project: Project) -> tuple[subprocess.CompletedProcess[str], float]:
    """`lifecycle port 1.0 2.0` as a user runs it, with a 3 s silence limit; and its seconds."""
    started = time.monotonic()
    ran = subprocess.run(
        lifecycle_argv(project.path, "port", "1.0", "2.0"),
        env={**os.environ, "LIFECYCLE_GIT_TIMEOUT": "3"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=40,  # the old code hung here until this killed it
        check=False,
    )
    return ran, time.monotonic() - started


needs_ssh = pytest.mark.skipif(
    shutil.which("ssh") is None, reason="no ssh client on PATH (.ci/setup installs openssh-client)"
)
SSH_BANNER = b"SSH-2.0-OpenSSH_9.0\r\n"


@needs_ssh
@pytest.mark.parametrize("greeting", [b"", SSH_BANNER], ids=["silent", "banner-then-silent"])
@pytest.mark.parametrize("fetched_before", [True, False], ids=["mirror", "no-mirror"])
def test_an_ssh_upstream_that_falls_silent_fails_the_fetch_in_bounded_time(
    greeting: bytes,
    fetched_before: bool,
    up: Upstream,
    project: Project,
    isolated_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ssh has no limit of its own on a server that accepts and never answers, or that sends
    its banner and then nothing: a port from one hung for ever. Its fetch now fails after
    about LIFECYCLE_GIT_TIMEOUT seconds, and the port goes on from the mirror as last fetched,
    saying so; with no mirror yet it stops, one line, exit 2."""
    patch = up.patch("v1.0.0", change_mix("32"))
    up.write("requirements.txt", "fakeinfer==2.0.0\n")
    up.commit("Release 2.0.0")
    up.tag("2.0.0")
    for name in ("GIT_SSH_COMMAND", "GIT_SSH"):
        monkeypatch.delenv(name, raising=False)
    with silent_listener(greeting) as listener:
        source = f"ssh://git@{listener.address}/vllm.git"
        _manifest_from(project, source, [PatchSpec("a.patch", patch)])
        if fetched_before:  # as an earlier port left it, when the upstream still answered
            mirror = mirror_path(Home(isolated_home / "lifecycle"), source)
            mirror.parent.mkdir(parents=True)
            git(mirror.parent, "clone", "-q", "--bare", str(up.path), mirror.name)
        ran, took = _port_bounded(project)

    assert took < 20, took
    # ssh's own words: `Connection timed out during banner exchange` (ConnectTimeout), or
    # `Connection to 127.0.0.1 port N timed out` (ServerAliveInterval, after the banner).
    failed = (
        rf"fetch from {re.escape(without_userinfo(source))} failed \(Connection [^()]*timed out"
    )
    if fetched_before:
        assert ran.returncode == 0, ran.stderr
        assert re.search(rf"^warning: {failed}[^()]*\); using the mirror as last", ran.stdout, re.M)
    else:  # an upstream that does not answer is the environment, not a bad name: exit 3
        assert ran.returncode == 3, ran.stderr
        assert re.fullmatch(
            rf"{failed}[^()]*\), and there is no mirror of it yet to port from\n", ran.stderr
        )


@pytest.mark.parametrize("setting", ["GIT_SSH_COMMAND", "GIT_SSH", "core.sshCommand"])
def test_the_users_own_ssh_command_is_left_alone_and_named(
    setting: str, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ssh command a user gave git (environment or git config) is theirs to bound: the
    port runs it as it is, and says that it, not LIFECYCLE_GIT_TIMEOUT, bounds the fetch."""
    ran = tmp_path / "ran"
    own_ssh = tmp_path / "own-ssh"
    own_ssh.write_text(f'#!/bin/sh\necho "$@" >> {ran}\nexit 255\n')  # connects nowhere
    own_ssh.chmod(0o755)
    for name in ("GIT_SSH_COMMAND", "GIT_SSH"):
        monkeypatch.delenv(name, raising=False)
    if setting == "core.sshCommand":  # written as a file: `git config --global` under
        # port_support's GIT_ENV would write GIT_CONFIG_GLOBAL, /dev/null
        (isolated_home / ".gitconfig").write_text(f"[core]\n\tsshCommand = {own_ssh}\n")
    else:
        monkeypatch.setenv(setting, str(own_ssh))

    with pytest.raises(LifecycleError) as failed:
        ensure_mirror(Home(tmp_path / "home"), "git@127.0.0.1:vllm.git", os.environ)

    assert ran.is_file(), "the port replaced the user's ssh command"
    assert str(failed.value).count(f"runs as your {setting} says") == 1, failed.value
    assert "not LIFECYCLE_GIT_TIMEOUT, bound the fetch" in str(failed.value)


@pytest.mark.parametrize("stall_after", [b"", b"PACK"], ids=["silent", "mid-pack"])
def test_a_git_daemon_upstream_that_falls_silent_fails_the_fetch_in_bounded_time(
    stall_after: bytes, up: Upstream, project: Project, tmp_path: Path, isolated_home: Path
) -> None:
    """git has no limit at all on a git:// server (the daemon's protocol, no curl, no ssh)
    that accepts and never answers, or stops in the middle of the pack: a port from one hung
    for ever. The fetch now ends after about LIFECYCLE_GIT_TIMEOUT seconds without progress;
    with no mirror yet the port stops, one line, exit 3, and leaves nothing half-fetched
    behind: the same port completes once the upstream answers again."""
    patch = up.patch("v1.0.0", change_mix("32"))
    up.write("requirements.txt", "fakeinfer==2.0.0\n")
    # A pack that stops well before its end, of enough objects (100: transfer.unpackLimit)
    # that git writes it as it comes, to a tmp_pack_* file in the mirror.
    up.write("weights.bin", os.urandom(1 << 20))
    for number in range(100):
        up.write(f"data/{number}.txt", f"{number}\n")
    up.commit("Release 2.0.0")
    up.tag("2.0.0")
    served = tmp_path / "served"
    served.mkdir()
    git(served, "clone", "-q", "--bare", str(up.path), "vllm.git")

    with stalling_git_daemon(served, stall_after) as daemon:
        source = daemon.url("vllm.git")
        _manifest_from(project, source, [PatchSpec("a.patch", patch)])
        stalled, took = _port_bounded(project)
        partial = list(mirror_path(Home(isolated_home / "lifecycle"), source).rglob("tmp_*"))
        daemon.stalling.clear()  # the upstream answers again
        answered, _ = _port_bounded(project)

    assert took < 20, took
    assert partial == [], "a cut-short pack stays in the mirror"
    assert stalled.returncode == 3, stalled.stderr
    assert re.fullmatch(
        rf"fetch from {re.escape(source)} failed \(timed out: no progress for 3 s "
        r"\(LIFECYCLE_GIT_TIMEOUT\)\), and there is no mirror of it yet to port from\n",
        stalled.stderr,
    )
    assert answered.returncode == 0, answered.stderr
    assert "warning" not in answered.stdout
    assert list(mirror_path(Home(isolated_home / "lifecycle"), source).rglob("tmp_*")) == []


def test_a_git_daemon_upstream_that_refuses_the_connection_is_the_environment(
    tmp_path: Path, isolated_home: Path
) -> None:
    """git:// says `unable to connect to HOST:` and the errno on the next line: that is an
    upstream that does not answer (exit 3), not a repository named wrong (exit 2)."""
    with socket.socket() as unused:  # bound, never listening: a connection is refused
        unused.bind(("127.0.0.1", 0))
        source = f"git://127.0.0.1:{unused.getsockname()[1]}/vllm.git"
        with pytest.raises(EnvironmentFailure) as failed:
            ensure_mirror(Home(tmp_path / "home"), source, os.environ)

    assert "unable to connect to 127.0.0.1: " in str(failed.value), failed.value
    assert "Connection refused" in str(failed.value), failed.value
