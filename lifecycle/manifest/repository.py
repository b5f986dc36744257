"""`upstream.repository`: the strings a manifest may give git as the source of a port.

A manifest is data: reviewing one (`validate`, `port --dry-run`) must run nothing it says.
git reads a leading `-` as an option (`--upload-pack=CMD` runs CMD), a `transport::address`
or an unknown `scheme://` as a remote helper to run (`ext::` runs a shell command), and a
host beginning with `-` as an ssh option. So a repository is one of: a URL of a scheme git
trusts by default (its `protocol.allow` policy), an scp-like `[user@]host:path`, or a path;
none of them may begin with `-`. The port also puts `--` before it where git takes it.
"""

from __future__ import annotations

import re

# The schemes git's default `protocol.allow` policy lets through always; `git+ssh` and
# `ssh+git` are its spellings of ssh.
GIT_SCHEMES = ("file", "git", "http", "https", "ssh", "git+ssh", "ssh+git")

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*"
_URL = re.compile(rf"^(?P<scheme>{_SCHEME})://(?P<authority>[^/?#]*)")
_HELPER = re.compile(rf"^{_SCHEME}::")
# git's own rule: `scheme://...`, or `host:path` with the colon before any slash, is remote.
_REMOTE = re.compile(rf"^{_SCHEME}://|^[^/]+:")

FORMS = "a URL (https, http, ssh, git or file), an scp-like host:path, or a path"


def repository_problem(repository: str) -> str | None:
    """Why git must not be given `repository`, or None. The value itself is not repeated:
    a URL may hold a token."""
    if repository.startswith("-"):
        return f"must not begin with '-' (git would take it for an option): {FORMS}"
    if _HELPER.match(repository):
        return f"a remote helper (transport::address) runs a program: write {FORMS}"
    url = _URL.match(repository)
    if url:
        if url["scheme"].lower() not in GIT_SCHEMES:
            return f"scheme {url['scheme']!r} is not one git fetches by default: write {FORMS}"
        host = url["authority"].rpartition("@")[2]
        return "its host must not begin with '-'" if host.startswith("-") else None
    if is_remote(repository):
        host = repository.partition(":")[0].rpartition("@")[2]
        if not host or host.startswith("-"):
            return f"host:path needs a host that does not begin with '-': write {FORMS}"
    return None


def is_remote(repository: str) -> bool:
    """Whether git fetches `repository` over a transport (else it is a local path)."""
    return _REMOTE.match(repository) is not None


def uses_ssh(repository: str) -> bool:
    """Whether git reaches `repository` with ssh: an ssh URL, or the scp-like `host:path`."""
    url = _URL.match(repository)
    if url:
        return url["scheme"].lower() in ("ssh", "git+ssh", "ssh+git")
    return is_remote(repository)


def uses_git_daemon(repository: str) -> bool:
    """Whether git reaches `repository` over its own protocol (`git://`, the git daemon's)."""
    url = _URL.match(repository)
    return url is not None and url["scheme"].lower() == "git"
