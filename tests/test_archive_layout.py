"""The archive's layout reads a key, or an id a key is made of, whole: with `re.match` and a
`$`, Python takes a trailing newline, so `caches/C/boots/b-1\\n` (an object anyone who can
write to the bucket can make) read as the marker of boot `b-1`."""

from __future__ import annotations

import pytest

from lifecycle.archive.layout import check_id, parse_key
from lifecycle.archive.restore import _check_paths, check_cache_id, check_tree
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Entry

SHA = "ab" * 32
KEYS = [
    f"blobs/sha256/ab/{SHA}",
    f"packs/sha256/ab/{SHA}",
    f"caches/vllm-0123456789ab/versions/{SHA}.{SHA}.json",
    "caches/vllm-0123456789ab/boots/b-1",
    "caches/vllm-0123456789ab/results/r-1",
    f"boots/b-1/{SHA}.json",
    f"results/r-1/{SHA}.json",
    f"images/{SHA}/{SHA}.json",
    f"pins/r-1/{SHA}.json",
    f"gc/g-1/{SHA}.json",
    f"gc-intents/g-1/{SHA}.json",
    "caches/vllm-0123456789ab.json",
    "results/r-1.json",
    "results-by-cache/vllm-0123456789ab/r-1",
]
ENDS = ["\n", "\r\n"]


@pytest.mark.parametrize("key", KEYS)
def test_every_kind_of_key_is_read_and_none_with_a_line_end_after_it(key: str) -> None:
    assert parse_key(key) is not None
    for end in ENDS:
        assert parse_key(key + end) is None, repr(key + end)


@pytest.mark.parametrize("end", ENDS)
def test_an_id_with_a_line_end_after_it_is_refused_before_any_request(end: str) -> None:
    check_id("b-1", "boot")
    check_cache_id("vllm-0123456789ab")
    check_tree("0123abcd")
    with pytest.raises(LifecycleError, match="is not a boot id"):
        check_id("b-1" + end, "boot")
    with pytest.raises(LifecycleError, match="is not a cache id"):
        check_cache_id("vllm-0123456789ab" + end)
    with pytest.raises(LifecycleError, match="is not a tree digest"):
        check_tree("0123abcd" + end)


@pytest.mark.parametrize("end", ENDS)
def test_an_archived_file_whose_sha256_has_a_line_end_after_it_is_refused(end: str) -> None:
    entry = Entry("a.so", "file", 1, 0o644, SHA, None, 0, 0)
    _check_paths((entry,))
    with pytest.raises(LifecycleError, match=r"no sha256 and size for 'a\.so'"):
        _check_paths((Entry("a.so", "file", 1, 0o644, SHA + end, None, 0, 0),))
