"""ollama: its server's and scheduler's lines (lines.py) over the llama.cpp runner it embeds (read by
``kvscope.engines.llamacpp``), the per-device ledger with the scheduler's estimate beside the runner's
allocation (finish.py), findings and advice in ollama's own knobs (findings.py), whatif (whatif.py) and the
``/api/ps`` watch adapter (watch.py)."""

from __future__ import annotations

from kvscope.engines.base import Deferred, Engine, Knobs, deferred
from kvscope.engines.llamacpp import SETTINGS as LLAMA_SETTINGS
from kvscope.engines.ollama.facts import OllamaCapacityFacts, OllamaRankFacts
from kvscope.engines.ollama.lines import OllamaLines

# the setting names its rules read (see Engine.settings): the runner's (llama.cpp's) and ollama's own
SETTINGS = LLAMA_SETTINGS | frozenset({
    "flash_attn",
    "n_batch",
    "n_gpu_layers",
    "ollama_context_length",
    "ollama_fit_required_gib",
    "ollama_flash_attention",
    "ollama_gpu_overhead",
    "ollama_kv_cache_type",
    "ollama_kv_size",
    "ollama_layers_requested",
    "ollama_max_loaded_models",
    "ollama_memory_required_allocations_list_gib",
    "ollama_num_parallel",
    "ollama_parallel",
    "ollama_sched_spread",
    "ollama_total_memory_gib",
})

KNOBS = Knobs(request_cap=("OLLAMA_NUM_PARALLEL", "n_slots"), fp8_kv_value="q8_0",
              kv_memory_flags=frozenset({"num_ctx", "OLLAMA_CONTEXT_LENGTH"}))

ENGINE = Engine(name="ollama", label="ollama", lines=OllamaLines(),
                finish=deferred("kvscope.engines.ollama.finish", "finish"),
                findings=deferred("kvscope.engines.ollama.findings", "findings"),
                whatif=Deferred("kvscope.engines.ollama.whatif"),
                watch=deferred("kvscope.engines.ollama.watch", "adapter"),
                knobs=KNOBS, embeds=frozenset({"llamacpp"}),
                rank_facts=OllamaRankFacts, capacity_facts=OllamaCapacityFacts,
                settings=SETTINGS)
