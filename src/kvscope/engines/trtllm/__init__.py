"""TensorRT-LLM (the C++ runtime under Triton's tensorrtllm_backend, gptManagerBenchmark, the PyTorch
backend and AutoDeploy): line shapes (lines.py), the KV sizing replay (finish.py) and findings."""

from __future__ import annotations

from kvscope.engines.base import Deferred, Engine, Knobs, deferred
from kvscope.engines.trtllm.facts import TrtCapacityFacts, TrtRankFacts
from kvscope.engines.trtllm.lines import TRTLLMLines

# the setting names this engine's rules read (see Engine.settings)
SETTINGS = frozenset({
    "backend",
    "fake_cache_manager",
    "free_gpu_memory_fraction",
    "kv_cache_free_gpu_mem_fraction",
    "kv_size_per_token",
    "max_batch_size",
    "max_num_requests",
    "max_num_sequences",
    "max_num_tokens",
    "max_seq_len",
    "max_tokens_in_paged_kv_cache",
    "max_tokens_set",
    "tokens_per_block",
    "tp_size",
    "triton_backend",
    "world_size",
    "world_size_seen",
})

ENGINE = Engine(name="trtllm", label="TensorRT-LLM", lines=TRTLLMLines(),
                finish=deferred("kvscope.engines.trtllm.finish", "finish"),
                findings=deferred("kvscope.engines.trtllm.findings", "findings"),
                whatif=Deferred("kvscope.engines.trtllm.whatif"),
                kv_budget=deferred("kvscope.engines.trtllm.whatif", "kv_budget"),
                knobs=Knobs(kv_memory_flags=frozenset({"kv_cache_free_gpu_mem_fraction",
                                                       "--kv-cache-free-gpu-mem-fraction"})),
                rank_facts=TrtRankFacts, capacity_facts=TrtCapacityFacts,
                settings=SETTINGS)
