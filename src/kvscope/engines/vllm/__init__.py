"""vLLM: line shapes of every release (lines.py), sizing rules (rules.py), eras (eras.py), finish,
findings, whatif, plan and the watch adapter."""

from __future__ import annotations

from kvscope.engines.base import Engine, FractionBasis, Knobs, MemoryKnob
from kvscope.engines.vllm import findings, finish, plan, whatif
from kvscope.engines.vllm.lines import VLLMLines
from kvscope.engines.vllm.rules import VLLM_WEIGHTS
from kvscope.engines.vllm.watch import VLLMAdapter

ENGINE = Engine(
    name="vllm",
    label="vLLM",
    lines=VLLMLines(),
    finish=finish.finish,
    findings=findings.findings,
    whatif=whatif,
    plan=plan.plan_vllm,
    watch=VLLMAdapter,
    knobs=Knobs(
        memory=MemoryKnob("gpu_memory_utilization", "--gpu-memory-utilization", FractionBasis.DEVICE_TOTAL,
                          default=0.9, reserve_label="outside the budget (GiB)"),
        request_cap=("--max-num-seqs", "max_num_seqs"),
        fp8_kv_value="fp8",
        host_tier="CPU offloading / LMCache",
        kv_memory_flags=frozenset({"--gpu-memory-utilization", "--kv-cache-memory", "--kv-cache-memory-bytes",
                                   "--num-gpu-blocks-override"}),
    ),
    runtime_advice=findings.scheduler_advice,
    weights=VLLM_WEIGHTS,
    plan_estimates=("activation peak: first-principles estimate from the config",),
)
