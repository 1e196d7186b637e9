"""TensorRT-LLM (the C++ runtime under Triton's tensorrtllm_backend, gptManagerBenchmark, the PyTorch
backend and AutoDeploy): line shapes (lines.py), the KV sizing replay (finish.py) and findings."""

from __future__ import annotations

from kvscope.engines.base import Engine, Knobs, deferred
from kvscope.engines.trtllm.lines import TRTLLMLines

ENGINE = Engine(name="trtllm", label="TensorRT-LLM", lines=TRTLLMLines(),
                finish=deferred("kvscope.engines.trtllm.finish", "finish"),
                findings=deferred("kvscope.engines.trtllm.findings", "findings"),
                knobs=Knobs(kv_memory_flags=frozenset({"kv_cache_free_gpu_mem_fraction",
                                                       "--kv-cache-free-gpu-mem-fraction"})))
