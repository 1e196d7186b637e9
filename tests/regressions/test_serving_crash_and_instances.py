"""Real logs where what looks like a failed startup is something else: a crash while serving (the traceback runs
through the engine's serving loop), a second instance started while the first held the device, a host buffer
that fell back. Each behaviour is pinned on the log that showed it."""

from __future__ import annotations

from kvscope.api import analyze
from kvscope.engines.common import oom_failure
from tests.conftest import FIXTURES, case_files


def _startups(ref: str, **assume):
    group, engine, prefix = ref.split("/")
    case = next((FIXTURES / group / engine).glob(f"{prefix}-*"))
    return analyze(case_files(case), assume).startups


def _codes(s) -> list[str]:
    return [f.code for f in s.findings]


def test_vllm_execute_model_traceback_after_the_kv_cache_is_a_crash_while_serving():
    """vLLM: the worker's traceback through execute_model after the KV cache was sized and the graphs captured,
    cut before its error: no failed startup and no claimed out of memory; the fix gives the step room (less
    utilization), never more KV memory, and no other finding's move is offered as a fix for the crash."""
    (s,) = _startups("harvested/vllm/514")
    assert s.failure is None
    w = next(w for w in s.warnings if w["code"] == "error-while-serving")
    assert w["step"] == "a model step (execute_model)" and w["raised"] is None
    assert s.answer.situation.startswith("The server crashed while serving")
    sug = s.answer.suggestion
    assert (sug.flag, sug.from_value, sug.to_value) == ("--gpu-memory-utilization", 0.975, 0.95)
    assert s.answer.alternatives == []


def test_an_oom_after_serving_lines_is_oom_runtime_with_its_step():
    """SGLang 0.2.9: 'Exception in ModelTpServer' then the torch OOM, after Prefill batch lines: oom-runtime,
    said as an out of memory in a prefill whose batch (the last Prefill batch line: 13,938 new tokens) is capped
    at half, as a power of two (the thread's resolution: --max-prefill 4096 made it work)."""
    (s,) = _startups("harvested/sglang/512")
    assert s.failure.kind == "oom-runtime" and s.failure.data["read_as"] == "cuda-oom"
    assert s.answer.situation == "The server ran out of memory while serving a prefill (forward_extend)"
    sug = s.answer.suggestion
    assert (sug.flag, sug.from_value, sug.to_value) == ("--max-prefill-tokens", None, 4096)
    assert "13,938 new tokens" in next(f.detail for f in s.findings if f.code == "error-while-serving")


def test_a_vision_tower_oom_in_a_prefill_is_not_answered_with_a_prefill_cap():
    """Llama-4 Scout at --mem-fraction-static 0.95: the OOM is inside the vision tower, whose activations a prefill
    token cap does not shrink (the image is encoded whole)."""
    (s,) = _startups("harvested/sglang/513")
    assert s.failure.kind == "oom-runtime"
    assert s.runtime["prefill_batch_new_tokens"] == {"last": 2489, "peak": 4992}
    sug = s.answer.suggestion
    assert sug is None or sug.flag != "--max-prefill-tokens"


def test_an_oom_line_before_the_engines_traceback_header_is_that_engines():
    """torch_npu prints the NPU out of memory before SGLang's 'Scheduler hit an exception': one startup, the OOM
    its failure (a bracketed pid is not vLLM's Monarch rank prefix)."""
    startups = _startups("harvested/sglang/511")
    assert [s.engine for s in startups] == ["sglang"]
    f = startups[0].failure
    assert f.kind == "oom-runtime" and f.message.startswith("NPU out of memory. Tried to allocate 72.00 MiB")


def test_an_oom_after_graphs_and_serving_is_runtime_not_graph_capture():
    """Decode batches with 'cuda graph: True' mean the graphs were captured long before: an OOM now is runtime."""
    (s,) = _startups("harvested/sglang/513")
    assert s.failure.kind == "oom-runtime"


def test_a_crash_in_sglangs_warmup_request_failed_the_startup():
    """The serving loop's frames, but the log shows the startup and no serving: SGLang's own warmup request."""
    (s,) = _startups("harvested/sglang/323")
    assert s.failure is not None and s.failure.data.get("stage") == "warmup"
    assert "warmup request" in s.answer.situation


def test_a_second_instance_with_a_new_pid_is_its_own_startup_and_contention():
    """vllm-ascend: instance 1 (EngineCore pid 3052) sizes 1,880,320 tokens, instance 2 (pid 4146) prints
    'Available memory: 0, total memory: …' (bytes) and dies. Two startups; the second's empty budget while the
    first still held the device is multi-instance-contention, and more utilization is not the advice."""
    first, second = _startups("harvested/vllm/510")
    assert first.failure is None and first.capacity.kv_tokens == 1_880_320
    assert first.capacity.available_kv_gib == 23106324992 / (1 << 30)
    assert second.reference_rank.total_gib == 65452113920 / (1 << 30)
    assert second.capacity.available_kv_gib == 0
    assert second.failure.kind == "multi-instance-contention" and second.failure.data["held_by_startup"] == 1
    assert second.failure.data["read_as"] == "not-enough-memory"
    assert "startup 1 was still holding the device" in second.answer.situation
    assert not any(x.flag == "--gpu-memory-utilization" and (x.to_value or 0) > 0.4
                   for x in [second.answer.suggestion, *second.answer.alternatives] if x is not None)


def test_one_instance_failing_alone_is_not_called_contention():
    """The same 'No available memory' with no other startup in the input stays not-enough-memory."""
    (s,) = _startups("harvested/vllm/512")
    assert s.failure.kind == "not-enough-memory"


def test_pinned_host_memory_refused_is_a_warning_not_a_failed_start():
    """llama.cpp (2023, WSL): 'failed to allocate 1024.00 MB of pinned memory: out of memory' falls back to
    pageable memory; the startup goes on. A warning about host RAM, with the switch that skips pinned buffers."""
    (s,) = _startups("harvested/llamacpp/510")
    assert s.failure is None
    assert [w["gib"] for w in s.warnings if w["code"] == "pinned-host-memory"] == [1.0, 0.5]
    assert "pinned-host-memory" in _codes(s) and s.answer.suggestion.flag == "GGML_CUDA_NO_PINNED"


def test_oom_message_drops_the_loggers_prefix():
    line = "[383554] [2026-07-01 09:31:38:047] torch_npu.memory: [ERROR] [383554] NPU out of memory. Tried to allocate 72.00 MiB"
    assert oom_failure(line)["message"] == "NPU out of memory. Tried to allocate 72.00 MiB"
    assert oom_failure("torch.OutOfMemoryError: CUDA out of memory.")["message"] == "torch.OutOfMemoryError: CUDA out of memory."
