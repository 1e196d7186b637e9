"""A poster quoting several log lines inline, each in its own code span, is read as those lines; a log line
that itself quotes a flag in backticks stays one line (both from real logs)."""

from __future__ import annotations

from kvscope.reading import clean_line


def test_a_line_of_quoted_log_lines_is_read_as_those_lines():
    # tests/fixtures/pairs/010-…/a.txt (vllm-project/vllm#29796)
    text = ("[1] `[gpu_worker.py:298] Available KV cache memory: 57.18 GiB`, `[kv_cache_utils.py:1091] Maximum "
            "concurrency for 6,144 tokens per request: 23.73x`")
    assert clean_line(text) == ["[gpu_worker.py:298] Available KV cache memory: 57.18 GiB",
                                "[kv_cache_utils.py:1091] Maximum concurrency for 6,144 tokens per request: 23.73x"]


def test_a_log_line_quoting_flags_stays_one_line():
    # tests/fixtures/logs/vllm/053-…/log.txt: vLLM's own advice quotes a flag in backticks
    text = ("INFO 08-31 15:25:55 [gpu_worker.py:805] Free memory on device (22.93/23.56 GiB) on startup. Replace "
            "gpu_memory_utilization config with `--kv-cache-memory=1828800984` (1.7 GiB) to fit into requested "
            "memory, or `--kv-cache-memory=2356031488` (2.19 GiB) to fully utilize gpu memory.")
    assert clean_line(text) == [text]
