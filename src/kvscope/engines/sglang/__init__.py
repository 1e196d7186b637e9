"""SGLang: line shapes of every release (lines.py), eras and defaults as data (eras.py, defaults.py),
the sizing rule (rules.py, dsv4.py), finish/reconcile, findings, whatif, plan and the watch adapter."""

from __future__ import annotations

from kvscope.engines.base import Deferred, Engine, FractionBasis, Knobs, MemoryKnob, deferred
from kvscope.engines.sglang.facts import SGLangCapacityFacts, SGLangRankFacts
from kvscope.engines.sglang.fleet import FLEET
from kvscope.engines.sglang.lines import SGLangLines
from kvscope.engines.sglang.rules import SGLANG_WEIGHTS

# the setting names this engine's rules read (see Engine.settings)
SETTINGS = frozenset({
    "chunked_prefill_size",
    "context_length",
    "cuda_graph_max_bs",
    "disable_hybrid_swa_memory",
    "disable_piecewise_cuda_graph",
    "disable_prefill_cuda_graph",
    "dp_size",
    "draft_layers",
    "draft_weights_gib",
    "enable_dp_attention",
    "kv_cache_dtype",
    "max_prefill_tokens",
    "max_running_requests",
    "max_total_tokens",
    "mem_fraction_static",
    "model",
    "model_path",
    "page_size",
    "pipeline_parallel_size",
    "pp_size",
    "quantization",
    "schedule_conservativeness",
    "served_model_name",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_draft_tokens",
    "swa_full_tokens_ratio",
    "tp",
    "tp_size",
    "weights_gib",
})

ENGINE = Engine(
    name="sglang",
    label="SGLang",
    lines=SGLangLines(),
    finish=deferred("kvscope.engines.sglang.finish", "finish"),
    findings=deferred("kvscope.engines.sglang.findings", "findings"),
    whatif=Deferred("kvscope.engines.sglang.whatif"),
    plan=deferred("kvscope.engines.sglang.plan", "plan_sglang"),
    watch=deferred("kvscope.engines.sglang.watch", "_adapter_class"),
    fleet=FLEET,
    knobs=Knobs(
        memory=MemoryKnob("mem_fraction_static", "--mem-fraction-static", FractionBasis.FREE_BEFORE_WEIGHTS),
        request_cap=("--max-running-requests", "max_running_requests"),
        fp8_kv_value="fp8_e4m3",
        host_tier="--enable-hierarchical-cache",
        dp_attention_for_mla=True,
        graph_batch_flag="--cuda-graph-max-bs",
        ranks_share_one_pool_size=True,
        kv_memory_flags=frozenset({"--mem-fraction-static", "--max-total-tokens"}),
    ),
    runtime_advice=deferred("kvscope.engines.sglang.findings", "scheduler_advice"),
    weights=SGLANG_WEIGHTS,
    rank_facts=SGLangRankFacts, capacity_facts=SGLangCapacityFacts,
    settings=SETTINGS,
    kv_budget=deferred("kvscope.engines.sglang.budget", "kv_budget"),
    release_rules=deferred("kvscope.engines.sglang.budget", "release_rules"),
)
