"""``explain --format prometheus`` is valid Prometheus text (read back by prometheus_client's own parser) and
says what the JSON contract says: the same KV tokens, the bytes of every GiB figure, the failure kind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvscope.examples import EXAMPLES

parser = pytest.importorskip("prometheus_client.parser")

GIB = 1 << 30


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "kvscope", "explain", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 2), done.stderr
    return done.stdout


def _families(text: str) -> dict[str, list]:
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        assert fam.type == "gauge" and fam.documentation, fam.name
        out[fam.name] = fam.samples
    return out


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_example_is_parseable_and_agrees_with_json(example):
    fams = _families(_run("--example", example, "--format", "prometheus"))
    doc = json.loads(_run("--example", example, "--format", "json"))
    assert fams["kvscope_startups"][0].value == len(doc["startups"])
    for i, s in enumerate(doc["startups"], 1):
        mine = {smp.name: smp for name, smps in fams.items() for smp in smps if smp.labels.get("startup") == str(i)
                and "rank" not in smp.labels}
        if s["capacity"]["kv_tokens"] is not None:
            assert mine["kvscope_kv_tokens"].value == s["capacity"]["kv_tokens"]
        failed = [smp for smp in fams["kvscope_startup_failed"] if smp.labels["startup"] == str(i)][0]
        assert failed.value == (1 if s["failure"] else 0)
        assert failed.labels.get("kind") == (s["failure"]["kind"] if s["failure"] else None)
        for r in s["ranks"]:
            got = {smp.name: smp.value for name, smps in fams.items() for smp in smps
                   if smp.labels.get("startup") == str(i) and smp.labels.get("rank") == r["rank"] and "pool" not in smp.labels}
            if r["weights_gib"] is not None:
                assert got["kvscope_weights_bytes"] == round(r["weights_gib"] * GIB)
            if r["avail_after_pool_gib"] is not None:
                assert got["kvscope_reserve_bytes"] == round(r["avail_after_pool_gib"] * GIB)


def test_labels_are_escaped(tmp_path):
    log = tmp_path / "odd.log"
    model = 'we"ird\\path'
    log.write_text(
        f"INFO 10-01 12:00:00 config.py:1] Initializing an LLM engine (v0.6.3) with config: model='{model}', "
        "dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1, gpu_memory_utilization=0.9\n"
        "INFO 10-01 12:00:05 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
        "initial_memory_usage=15.52GiB peak_torch_memory=16.49GiB memory_usage_post_profile=15.56GiB "
        "non_torch_memory=0.35GiB kv_cache_size=4.38GiB gpu_memory_utilization=0.90\n"
        "INFO 10-01 12:00:06 gpu_executor.py:122] # GPU blocks: 2241, # CPU blocks: 2048\n")
    fams = _families(_run(str(log), "--format", "prometheus", "--no-redact"))
    models = {smp.labels.get("model") for smp in fams["kvscope_startup_info"]}
    assert models == {model}
    assert fams["kvscope_num_gpu_blocks"][0].value == 2241
