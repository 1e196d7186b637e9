"""An ollama load's ledger: the llama.cpp runner's per-device buffers and caches (the llama.cpp finish step),
then ollama's own terms beside them: the scheduler's estimate for the GPUs against what the runner allocated."""

from __future__ import annotations

from kvscope.core.startup import Startup
from kvscope.engines.llamacpp.finish import allocated_gib, gpu_ranks
from kvscope.engines.llamacpp.finish import finish as llama_finish
from kvscope.engines.ollama.facts import OllamaCapacityFacts


def finish(s: Startup) -> None:
    llama_finish(s)
    _estimate_vs_allocation(s)
    if s.capacity.max_running_requests is None and isinstance(s.setting("ollama_parallel"), int):
        s.capacity.max_running_requests = s.setting("ollama_parallel")


def _estimate_vs_allocation(s: Startup) -> None:
    """The scheduler's plan (memory.required.partial, or .full when every layer went) beside the sum of what the
    runner allocated on the GPUs, when both are in the log: how far the estimate was off is what decides
    whether a load that 'fit' can still run out of memory."""
    facts = OllamaCapacityFacts(s.capacity)
    done, total = s.setting("n_gpu_layers_offloaded"), s.setting("n_layers_offloadable")
    key = "ollama_memory_required_full_gib" if done is not None and done == total else "ollama_memory_required_partial_gib"
    planned = s.settings.get(key)
    if isinstance(planned, float) and planned > 0:
        facts.estimate_gpu_gib = planned
    gpus = gpu_ranks(s)
    allocated = sum(allocated_gib(r) for r in gpus)
    if allocated > 0:
        facts.allocated_gpu_gib = allocated
