"""ollama's facts beyond llama.cpp's: the scheduler's view of each device and its estimate beside what the
runner allocated (``core/facts.py`` says why these are views)."""

from __future__ import annotations

from kvscope.core.facts import Fact
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts, LlamaRankFacts


class OllamaRankFacts(LlamaRankFacts):
    __slots__ = ()
    os_vram_overhead_gib: Fact[float] = Fact("VRAM the OS holds on this GPU (Windows), as ollama detected it")
    scheduler_available_gib: Fact[float] = Fact("what the scheduler may place here: free − minimum − overhead")
    scheduler_minimum_gib: Fact[float] = Fact("the room ollama always leaves on this GPU (457 MiB on CUDA)")
    gpu_overhead_gib: Fact[float] = Fact("OLLAMA_GPU_OVERHEAD as the scheduler applied it to this GPU")


class OllamaCapacityFacts(LlamaCapacityFacts):
    __slots__ = ()
    estimate_gpu_gib: Fact[float] = Fact("what ollama's scheduler planned to put on the GPUs for this load")
    allocated_gpu_gib: Fact[float] = Fact("what the runner allocated on the GPUs: weights, KV cache, compute graph")
