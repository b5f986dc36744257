"""Cross-field checks that must let good manifests through (the refusals are corpus cases)."""

from __future__ import annotations

from pathlib import Path

from lifecycle.manifest import load_manifest

BASE = """\
schema_version: 1
name: demo
engine:
  vllm: "0.31.0"
  flashinfer: "0.7.0"
  base_image: demo:1
  package_dir: /opt/engine/vllm
upstream:
  repository: https://example.invalid/engine.git
"""


def _load(tmp_path: Path, tail: str) -> None:
    file = tmp_path / "manifest.yaml"
    file.write_text(BASE + tail)
    load_manifest(file)


def test_a_cache_in_a_dir_of_its_own_under_a_system_dir_is_fine(tmp_path: Path) -> None:
    _load(
        tmp_path,
        "caches:\n"
        "  vllm: {path: /tmp/vllm-cache}\n"
        "  triton: {path: /opt/triton}\n"
        "  mine: {path: /root/.cache/mine, env: MINE_DIR}\n",
    )


def test_a_disabled_cache_neither_collides_nor_overlaps(tmp_path: Path) -> None:
    _load(
        tmp_path,
        "caches:\n"
        "  triton: {enabled: false, path: /}\n"
        "  inductor: {enabled: false}\n"
        "  mine: {path: /var/cache/lifecycle/inductor, env: TORCHINDUCTOR_CACHE_DIR}\n"
        "profiles:\n"
        "  serve: {env: {TRITON_CACHE_DIR: /tmp/t}}\n",
    )


def test_a_series_of_a_git_binary_patch_and_a_unified_diff_loads(tmp_path: Path) -> None:
    (tmp_path / "binary.patch").write_text(
        "diff --git a/x.bin b/x.bin\n"
        "new file mode 100644\n"
        "index 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\n"
        "GIT binary patch\n"
        "literal 0\nHcmV?d00001\n\nliteral 0\nHcmV?d00001\n\n"
    )
    (tmp_path / "mode.patch").write_text(
        "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    )
    (tmp_path / "text.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    _load(
        tmp_path,
        "patches:\n"
        "  - {file: binary.patch, reason: a binary file}\n"
        "  - {file: mode.patch, reason: a mode change with no hunk}\n"
        "  - {file: text.patch, reason: text}\n",
    )


def test_port_keys_as_docker_takes_them(tmp_path: Path) -> None:
    file = tmp_path / "manifest.yaml"
    file.write_text(
        BASE + "profiles:\n  serve: {ports: {8000: 8000, 8001/udp: 1, 65535/sctp: 2}}\n"
    )
    ports = load_manifest(file).manifest.profiles["serve"].ports
    assert ports == {"8000": 8000, "8001/udp": 1, "65535/sctp": 2}


def test_a_profile_that_runs_another_program_may_use_a_tuned_flag(tmp_path: Path) -> None:
    # Tuned values are appended only where the engine runs; a benchmark client's own
    # --gpu-memory-utilization is its business.
    file = tmp_path / "manifest.yaml"
    file.write_text(
        BASE + "tuned:\n"
        "  gpu_memory_utilization:\n"
        "    {value: 0.94, status: validated, measured_on: vllm 0.31.0, method: ladder}\n"
        "profiles:\n"
        "  serve: {command: [vllm, serve]}\n"
        "  bench:\n"
        "    engine: false\n"
        "    command: [python3, -m, bench]\n"
        "    args: [--gpu-memory-utilization, '0.5']\n"
    )
    profiles = load_manifest(file).manifest.profiles
    assert profiles["serve"].engine and not profiles["bench"].engine


def test_a_credential_named_by_its_variable_is_no_credential_written(tmp_path: Path) -> None:
    # The value comes from the environment (`secrets:`), where it belongs.
    _load(
        tmp_path,
        "profiles:\n  serve:\n    command: [sh, -c, 'echo token=$HF_TOKEN; exec vllm serve']\n"
        "    args: [--api-key, $VLLM_API_KEY, '--hf-token=${HF_TOKEN}', --tokenizer, t5]\n"
        "    secrets: [HF_TOKEN, VLLM_API_KEY]\n",
    )
