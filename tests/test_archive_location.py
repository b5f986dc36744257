"""Archive locations and S3 endpoints that must be accepted (refusals are corpus cases)."""

from __future__ import annotations

import pytest

from lifecycle.archive.location import ArchiveLocation, bucket_problem, endpoint_problem


@pytest.mark.parametrize(
    "name", ["lifecycle-demo", "abc", "a.b-c.d", "lifecycle-test-0123456789ab", "x" * 63]
)
def test_bucket_names_s3_takes(name: str) -> None:
    assert bucket_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["ab", "x" * 64, "Night", "a_b", "a..b", "-ab", "ab-", "10.0.0.1", "xn--ab", "ab--ol-s3"],
)
def test_bucket_names_s3_refuses(name: str) -> None:
    assert bucket_problem(name) is not None


def test_a_location_keeps_its_prefix_without_slashes() -> None:
    location = ArchiveLocation.parse("s3://lifecycle-demo//night/2026-10-10/")
    assert (location.bucket, location.prefix) == ("lifecycle-demo", "night/2026-10-10")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8333", "https://s3.example.com", "http://[::1]:9000/", "http://h"]
)
def test_endpoints_boto3_can_use(url: str) -> None:
    assert endpoint_problem(url) is None
