"""Redaction: given secret values, credential-shaped text, and ordinary lines left alone."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lifecycle.redact import MIN_SECRET_LEN, is_sensitive_key, redact, without_userinfo

BOOT_LOGS = Path(__file__).parent / "data" / "boot_logs"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def test_given_value_is_replaced_by_its_name() -> None:
    text = "engine started with s3cr3t-v4lue, and again: s3cr3t-v4lue."
    assert redact(text, {"HF_TOKEN": "s3cr3t-v4lue"}) == (
        "engine started with <redacted:HF_TOKEN>, and again: <redacted:HF_TOKEN>."
    )
    assert redact(text, ["s3cr3t-v4lue"]) == (
        "engine started with <redacted>, and again: <redacted>."
    )


def test_a_longer_secret_containing_a_shorter_one_is_replaced_whole() -> None:
    secrets = {"SHORT": "abcd1234", "LONG": "abcd1234-and-more"}
    assert redact("x abcd1234-and-more y abcd1234", secrets) == (
        "x <redacted:LONG> y <redacted:SHORT>"
    )


def test_values_shorter_than_the_minimum_are_not_replaced_by_value() -> None:
    short = "a" * (MIN_SECRET_LEN - 1)
    text = "a banana and aaa"
    assert redact(text, {"PIN": short}) == text
    assert redact("pin aaaa", {"PIN": "a" * MIN_SECRET_LEN}) == "pin <redacted:PIN>"


def test_a_bare_string_is_refused() -> None:
    with pytest.raises(TypeError):
        redact("text", "s3cr3t-v4lue")


def test_json_escaped_and_newline_spellings_are_replaced() -> None:
    value = 'pa"ss\\word'
    content = json.dumps({"env": {"DEMO": value}})
    assert value not in redact(content, {"DEMO": value})
    assert json.dumps(value)[1:-1] not in redact(content, {"DEMO": value})
    assert redact("key tok-12345 end", {"T": "tok-12345\n"}) == "key <redacted:T> end"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("HF_TOKEN=abc123", "HF_TOKEN=<redacted>"),
        ("export hf_token = 'abc123'", "export hf_token = '<redacted>'"),
        ("password: hunter22 and more", "password: <redacted> and more"),
        ("PASSWD=x", "PASSWD=<redacted>"),
        ('{"api_key": "sk-1", "n": 1}', '{"api_key": "<redacted>", "n": 1}'),
        ('{"password": 1234}', '{"password": "<redacted>"}'),
        (
            "Namespace(api_key='sk-1', hf_token=None)",
            "Namespace(api_key='<redacted>', hf_token=None)",
        ),
        ("aws_secret_access_key=wJalr/K7MDENG", "aws_secret_access_key=<redacted>"),
        ("MY_ACCESS_KEY=k1 clientSecret=s1", "MY_ACCESS_KEY=<redacted> clientSecret=<redacted>"),
        ("GOOGLE_CREDENTIALS=blob", "GOOGLE_CREDENTIALS=<redacted>"),
        ("X-Auth-Token: t0k", "X-Auth-Token: <redacted>"),
        ("auth=user1", "auth=<redacted>"),
        ("url: http://h/x?token=abc&page=2", "url: http://h/x?token=<redacted>&page=2"),
        (
            "vllm serve m --api-key sk-1 --port 8000",
            "vllm serve m --api-key <redacted> --port 8000",
        ),
        ("vllm serve m --hf-token=abc", "vllm serve m --hf-token=<redacted>"),
        ("argv ['--api-key', 'sk-1', '--port']", "argv ['--api-key', '<redacted>', '--port']"),
        ("{'api_key': ['k1', 'k2'], 'n': 1}", "{'api_key': [<redacted>], 'n': 1}"),
        ("args: ['--api-key', 'k1']", "args: ['--api-key', '<redacted>']"),
        (f"downloading with {HF}.", "downloading with <redacted:hf-token>."),
        ("id AKIAIOSFODNN7EXAMPLE here", "id <redacted:aws-key-id> here"),
        ("id ASIAIOSFODNN7EXAMPLE", "id <redacted:aws-key-id>"),
        (
            "curl -H 'Authorization: Bearer eyJhbGciOi.x-y_z' http://h",
            "curl -H 'Authorization: Bearer <redacted:authorization>' http://h",
        ),
        ("authorization=Basic dXNlcjpwYXNz", "authorization=Basic <redacted:authorization>"),
        ("sent bearer abcdefgh12345678", "sent bearer <redacted:bearer>"),
        (
            "git clone https://build:p4ss@git.example.com/r.git",
            "git clone https://build:<redacted:password>@git.example.com/r.git",
        ),
        ("s3://KEY:SECRET@bucket/x", "s3://KEY:<redacted:password>@bucket/x"),
        (  # a token alone as the user: GitHub's token URL
            "fetch from https://ghp_SeCrEt0123456789@github.com/o/r.git failed",
            "fetch from https://<redacted:user>@github.com/o/r.git failed",
        ),
    ],
)
def test_credential_shapes_are_redacted(line: str, expected: str) -> None:
    assert redact(line, ()) == expected


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-02 09:14:36 [backends.py:460] Using cache directory: /root/.cache/vllm/x",
        "tokens",
        "max_num_batched_tokens=8192",
        "--max-num-batched-tokens 8192",
        "GPU KV cache size: 12345 tokens",
        "GPU KV cache size: 12,345 tokens",
        "Maximum concurrency for 32,768 tokens per request: 10.32x",
        "tokenizer='org/m', tokenizer_mode=auto, skip_tokenizer_init=False",
        "num_tokens: 512, max_tokens=16",
        "hf_token=None token: null auth_type: none token_file: /run/tok api_key=[]",
        "compile ranges: [1, 8192]",
        "author=someone authenticated: true",
        "Bearer tokens are checked at the gateway",
        "http://0.0.0.0:8000/v1/models",
        "2026-06-01 07:02:13,481 - INFO - flashinfer.jit: Building JIT module sampling",
        "hf_hub_download cached at /root/.cache/huggingface/hub",
        "triton key ehyiuiskutrzt4ftl6xxt7geztrfjf4iyxec4pgpv4ed2gxzkkwa",
        "leak_secret: wrote 3 files",  # a word after `key: ` is prose
        "Token: Expired, asking again",
    ],
)
def test_ordinary_lines_survive(line: str) -> None:
    assert redact(line, {"HF_TOKEN": "s3cr3t-v4lue"}) == line


@pytest.mark.parametrize("log", sorted(BOOT_LOGS.glob("*.log")), ids=lambda p: p.name)
def test_sample_boot_logs_survive_whole(log: Path) -> None:
    text = log.read_text()
    assert redact(text, ()) == text


def test_a_word_is_left_by_the_shapes_but_not_when_it_is_a_given_value() -> None:
    assert redact("leak_secret: wrote", {"S": "wrote"}) == "leak_secret: <redacted:S>"
    assert redact("leak_secret=wrote", ()) == "leak_secret=<redacted>"  # an assignment
    assert redact("leak_secret: 'wrote'", ()) == "leak_secret: '<redacted>'"  # quoted


def test_redaction_is_idempotent() -> None:
    text = (
        f"HF_TOKEN={HF} url=https://u:pw12@h/ Authorization: Bearer abcdefgh123 "
        '{"password": "pw"} --api-key k1 id AKIAIOSFODNN7EXAMPLE s3cr3t-v4lue'
    )
    once = redact(text, {"V": "s3cr3t-v4lue"})
    assert redact(once, {"V": "s3cr3t-v4lue"}) == once


SECRETS = [
    HF,
    "abcd",
    "s3cr3t-v4lue",
    "p@ss:w/rd",
    "with spaces in it",
    "a.*b+c?(d)",
    "pässwörd",
    "redacted",  # spelled inside the placeholder itself
    "<redacted:X>",
    "acted:X",
    "xx" * 40,
]
CONTEXTS = [
    "{s}",
    "x{s}y",
    "{s}{s}",
    "{s}{s}{s}",
    "HF_TOKEN={s}",
    "export X='{s}'",
    '{{"token": "{s}"}}',
    "https://user:{s}@host/",
    "https://{s}@host/",
    "Authorization: Bearer {s}",
    "--api-key {s}",
    "line one\n{s}\nline three",
    "pre-{s}-post",
    "{s}\t{s}\n",
    "[{s}]({s})",
]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("named", [True, False])
def test_a_given_value_never_survives_any_context(secret: str, named: bool) -> None:
    secrets = {"X": secret} if named else [secret]
    rng = random.Random(secret)
    pieces = [secret[: len(secret) // 2], secret[len(secret) // 2 :], "<", ">", ":", "X", "="]
    contexts = list(CONTEXTS)
    for _ in range(50):  # random neighbours, including halves of the secret itself
        contexts.append("".join(rng.choice([*pieces, "{s}", " "]) for _ in range(8)) + "{s}")
    for context in contexts:
        text = context.replace("{s}", secret).replace("{{", "{").replace("}}", "}")
        assert secret not in redact(text, secrets), (secret, context)


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("HF_TOKEN", True),
        ("hfToken", True),
        ("apiKey", True),
        ("APIKEY", True),
        ("--api-key", True),
        ("aws_secret_access_key", True),
        ("x-auth-token", True),
        ("db.password", True),
        ("credentials", True),
        ("max_num_batched_tokens", False),
        ("tokenizer", False),
        ("author", False),
        ("token_file", False),
        ("auth_type", False),
        ("monkey", False),
    ],
)
def test_sensitive_keys(key: str, sensitive: bool) -> None:
    assert is_sensitive_key(key) is sensitive


@pytest.mark.parametrize(
    "key",
    ["HF_TOKEN", "hfToken", "myApiKey", "--api-key", "accessKey", "DB_PASSWD", "Credentials"],
)
def test_every_sensitive_key_is_redacted_on_its_own(key: str) -> None:
    """redact skips its pair passes for a text that holds no key word: a sensitive key alone
    in a text must not be skipped."""
    assert is_sensitive_key(key)
    assert redact(f"{key}=hunter2-xyz", {}) == f"{key}=<redacted>"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://x-access-token:ghp_SeCrEt@github.com/o/r.git", "https://github.com/o/r.git"),
        ("https://ghp_SeCrEt@github.com/o/r.git", "https://github.com/o/r.git"),
        ("ssh://git@host:22/r.git", "ssh://host:22/r.git"),
        ("http://u:p%40ss@127.0.0.1:8000/up.git?x=1", "http://127.0.0.1:8000/up.git?x=1"),
        ("https://github.com/vllm-project/vllm", "https://github.com/vllm-project/vllm"),
        ("https://host/path/with@sign", "https://host/path/with@sign"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),  # scp-like: no password there
        ("../upstream.git", "../upstream.git"),
    ],
)
def test_a_url_is_shown_without_its_userinfo(url: str, shown: str) -> None:
    assert without_userinfo(url) == shown
