"""A check's verdict comes from what was observed: a check whose path never ran never passes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lifecycle.boot.log import boot_log
from lifecycle.kept_log import HEAD_BYTES, TAIL_BYTES
from lifecycle.manifest.model import Evidence
from lifecycle.night.checks import Finding, judge, metrics_in
from lifecycle.night.plan import Check, Created

TIER = Check(
    name="cpu-tier-readback",
    path=Evidence(log=["KV offload: asked the CPU tier"], metrics=["vllm:kv_offload_lookups > 0"]),
    pass_when=Evidence(
        metrics=["vllm:kv_offload_load_bytes > 0"], log=["External prefix cache hit rate: [1-9]"]
    ),
    fail_when=Evidence(log=["CUDA out of memory"]),
)
ASKED = "INFO [kv_offload.py:87] KV offload: asked the CPU tier for 75 blocks\n"
READ_BACK = "External prefix cache hit rate: 100.0%\n"


@dataclass
class Seen:
    """A boot's leftovers, made up."""

    log: str
    boot_ok: bool = True
    cache_files: dict[str, list[str]] = field(default_factory=dict)

    def files(self, cache: str, glob: str) -> list[str]:
        return [f for f in self.cache_files.get(cache, []) if glob.strip("*") in f]


def metrics(**values: float) -> str:
    """A metrics dump as the engine prints it at exit."""
    return "# demollm metrics at exit\n" + "".join(
        f"{name.replace('__', ':')} {value:g}\n" for name, value in values.items()
    )


def test_a_check_whose_path_never_ran_is_inconclusive_however_passing_the_rest_looks() -> None:
    # The pass evidence is all there, but nothing shows the tier was asked: the GPU answered.
    log = READ_BACK + metrics(vllm__kv_offload_load_bytes=2 << 20, vllm__kv_offload_lookups=0)
    verdict = judge(TIER, Seen(log))
    assert verdict.status == "inconclusive"
    assert "the path never ran" in verdict.why
    assert "'KV offload: asked the CPU tier'" in verdict.why  # what is missing, by name
    assert "vllm:kv_offload_lookups=0" in verdict.why  # and what was seen instead


def test_a_check_with_no_evidence_at_all_is_inconclusive_not_a_pass_nor_a_fail() -> None:
    verdict = judge(TIER, Seen("", boot_ok=False))
    assert verdict.status == "inconclusive"


def test_path_ran_and_the_pass_evidence_is_missing_is_a_failure_naming_it() -> None:
    log = ASKED + metrics(vllm__kv_offload_lookups=3, vllm__kv_offload_load_bytes=0)
    verdict = judge(TIER, Seen(log + "External prefix cache hit rate: 0.0%\n"))
    assert verdict.status == "fail"
    assert "vllm:kv_offload_load_bytes > 0" in verdict.why
    assert "vllm:kv_offload_load_bytes=0" in verdict.why


def test_path_ran_and_everything_observed_passes() -> None:
    log = ASKED + READ_BACK + metrics(vllm__kv_offload_lookups=3, vllm__kv_offload_load_bytes=7)
    verdict = judge(TIER, Seen(log))
    assert verdict.status == "pass"
    assert [f.observed for f in verdict.passed] == [True, True]


def test_fail_evidence_fails_and_a_boot_that_did_not_end_ok_never_passes() -> None:
    log = ASKED + READ_BACK + metrics(vllm__kv_offload_lookups=3, vllm__kv_offload_load_bytes=7)
    crashed = judge(TIER, Seen(log + "torch.OutOfMemoryError: CUDA out of memory. Tried\n"))
    assert crashed.status == "fail" and "CUDA out of memory" in crashed.why
    assert judge(TIER, Seen(log, boot_ok=False)).status == "fail"


def test_a_precondition_not_met_is_inconclusive_like_a_missing_path() -> None:
    log = ASKED + READ_BACK + metrics(vllm__kv_offload_lookups=3, vllm__kv_offload_load_bytes=7)
    cold = Finding(kind="condition", what="every cache warm", observed=False, seen="vllm cold")
    verdict = judge(TIER, Seen(log), [cold])
    assert verdict.status == "inconclusive" and "every cache warm" in verdict.why


def test_files_in_a_cache_are_evidence_and_the_created_condition_is_named() -> None:
    check = Check(
        name="jit-built",
        creates=[Created(what="a cold boot", args=[])],
        path=Evidence(files=["flashinfer:cached_ops/*"]),
        pass_when=Evidence(files=["flashinfer:.so"]),
    )
    found = Seen("", cache_files={"flashinfer": ["cached_ops/demo_mix_37/demo_mix_37.so"]})
    assert judge(check, found).status == "pass"
    missing = judge(check, Seen(""))
    assert missing.status == "inconclusive"
    assert "cache file 'flashinfer:cached_ops/*'" in missing.why
    assert "(the check created: a cold boot)" in missing.why


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("vllm:kv_offload_load_bytes 576716800", 576716800.0),
        ('vllm:prefix_cache_hits{engine="0"} 2800', 2800.0),
        ("demo:forced_step_margin_mib -5.8", -5.8),
        ("demo:x 1.5e3", 1500.0),
    ],
)
def test_metrics_are_read_as_prometheus_prints_them(line: str, value: float) -> None:
    name = line.split("{")[0].split()[0]
    assert metrics_in(f"INFO something 12\n{line}\nINFO after\n")[name] == value


def test_a_log_line_mentioning_a_metric_is_not_a_metric() -> None:
    assert metrics_in("INFO [x.py:1] vllm:kv_offload_load_bytes 5 were read\n") == {}


def _cut(head: str, tail: str) -> str:
    """A log as lifecycle keeps it when the engine flooded it (lifecycle.boot.log)."""
    log = boot_log({})
    for line in head.splitlines():
        log.add(line)
    for _ in range((HEAD_BYTES + TAIL_BYTES) // 200 + 1):
        log.add("WARNING flood line " + "x" * 200)
    for line in tail.splitlines():
        log.add(line)
    return log.text()


def test_a_cut_log_never_fails_nor_passes_on_a_line_it_may_have_left_out() -> None:
    """Evidence not found in a log cut for its size may be in the part left out: the verdict
    is inconclusive, naming the cut; evidence found in what was kept still counts."""
    ended = metrics(vllm__kv_offload_lookups=3, vllm__kv_offload_load_bytes=7)
    unsure = judge(TIER, Seen(_cut(ASKED, ended)))  # the hit rate line: not in what was kept
    assert unsure.status == "inconclusive", unsure.why
    assert "the log was cut" in unsure.why and "External prefix cache hit rate" in unsure.why
    whole = judge(TIER, Seen(_cut(ASKED + READ_BACK, ended)))  # the fail line: may be cut
    assert whole.status == "inconclusive" and "CUDA out of memory" in whole.why
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried\n"
    assert judge(TIER, Seen(_cut(ASKED + READ_BACK, oom + ended))).status == "fail"


def test_a_cut_log_reads_metrics_from_its_tail_only() -> None:
    """A value printed in the head of a cut log may have been printed again, changed, in the
    part left out: only the tail's are the engine's last."""
    assert metrics_in(_cut(metrics(a=1), metrics(b=2))) == {"b": 2}
