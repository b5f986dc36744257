"""Which `upstream.repository` values a manifest may give git: none that git runs as a command."""

from __future__ import annotations

import pytest

from lifecycle.manifest.repository import is_remote, repository_problem


@pytest.mark.parametrize(
    "repository",
    [
        "https://github.com/vllm-project/vllm",
        "https://x-access-token:ghp_x@github.com/o/r.git",
        "http://127.0.0.1:8000/up.git",
        "ssh://git@github.com/o/r.git",
        "git+ssh://git@github.com/o/r.git",
        "git://git.example.com/r.git",
        "file:///srv/git/vllm.git",
        "git@github.com:vllm-project/vllm.git",
        "github.com:vllm-project/vllm.git",
        "../upstream.git",
        "/srv/git/vllm",
        "./-a-dir-named-so",
    ],
)
def test_urls_scp_paths_and_paths_are_taken(repository: str) -> None:
    assert repository_problem(repository) is None


@pytest.mark.parametrize(
    ("repository", "why"),
    [
        ("--upload-pack=touch PWNED; echo x:y", "must not begin with '-'"),
        ("-oProxyCommand=touch PWNED:x", "must not begin with '-'"),
        ("-a-dir", "must not begin with '-'"),
        ("ext::sh -c touch% PWNED", "a remote helper"),
        ("fd::3", "a remote helper"),
        ("custom://host/r.git", "scheme 'custom' is not one git fetches by default"),
        ("ssh://-oProxyCommand=touch%20PWNED/r.git", "its host must not begin with '-'"),
        ("ssh://git@-oProxyCommand=x/r.git", "its host must not begin with '-'"),
        ("git@-oProxyCommand=x:r.git", "host:path needs a host"),
        ("git@:r.git", "host:path needs a host"),
    ],
)
def test_what_git_would_run_is_refused_without_repeating_it(repository: str, why: str) -> None:
    problem = repository_problem(repository)
    assert problem is not None and problem.startswith(why)
    assert repository not in problem  # a URL may hold a token


def test_remote_is_git_own_rule() -> None:
    assert is_remote("https://h/r") and is_remote("host:r") and is_remote("git@host:r")
    assert not is_remote("../r.git") and not is_remote("/srv/r") and not is_remote("a/b:c")
