"""vLLM: line shapes of every release (lines.py), sizing rules (rules.py), eras (eras.py), finish,
findings, whatif, plan and the watch adapter."""

from __future__ import annotations

from kvscope.engines.base import Deferred, Engine, FractionBasis, Knobs, MemoryKnob, deferred
from kvscope.engines.vllm.facts import VllmCapacityFacts, VllmRankFacts
from kvscope.engines.vllm.fleet import FLEET
from kvscope.engines.vllm.lines import VLLMLines
from kvscope.engines.vllm.rules import VLLM_WEIGHTS

# the setting names this engine's rules read (see Engine.settings)
SETTINGS = frozenset({
    "block_size",
    "cpu_offload_gb",
    "disable_hybrid_kv_cache_manager",
    "draft_layers",
    "draft_weights_gib",
    "dtype",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "kv_transfer_config",
    "language_model_only",
    "limit_mm_per_prompt",
    "load_format",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "model",
    "model_runner",  # "V2" when the log says "Using V2 Model Runner"
    "num_gpu_blocks_override",
    "pipeline_parallel_size",
    "pp_size",
    "skip_mm_profiling",
    "speculative_config",
    "tensor_parallel_size",
    "tp_size",
    "use_v2_model_runner",  # VLLM_USE_V2_MODEL_RUNNER: which GPU model runner profiles the memory
})

ENGINE = Engine(
    name="vllm",
    label="vLLM",
    lines=VLLMLines(),
    finish=deferred("kvscope.engines.vllm.finish", "finish"),
    findings=deferred("kvscope.engines.vllm.findings", "findings"),
    whatif=Deferred("kvscope.engines.vllm.whatif"),
    plan=deferred("kvscope.engines.vllm.plan", "plan_vllm"),
    watch=deferred("kvscope.engines.vllm.watch", "_adapter_class"),
    fleet=FLEET,
    knobs=Knobs(
        memory=MemoryKnob("gpu_memory_utilization", "--gpu-memory-utilization", FractionBasis.DEVICE_TOTAL,
                          default=0.9, reserve_label="outside the budget (GiB)"),
        request_cap=("--max-num-seqs", "max_num_seqs"),
        fp8_kv_value="fp8",
        host_tier="CPU offloading / LMCache",
        kv_memory_flags=frozenset({"--gpu-memory-utilization", "--kv-cache-memory", "--kv-cache-memory-bytes",
                                   "--num-gpu-blocks-override"}),
    ),
    runtime_advice=deferred("kvscope.engines.vllm.findings", "scheduler_advice"),
    weights=VLLM_WEIGHTS,
    plan_estimates=("activation peak: first-principles estimate from the config",),
    rank_facts=VllmRankFacts, capacity_facts=VllmCapacityFacts,
    settings=SETTINGS,
    kv_budget=deferred("kvscope.engines.vllm.budget", "kv_budget"),
    release_rules=deferred("kvscope.engines.vllm.budget", "release_rules"),
)
