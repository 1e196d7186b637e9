"""llama.cpp (llama-server, llama-cli, the bench tools, ik_llama.cpp, LLamaSharp, llama-cpp-python and the
runner ollama embeds): line shapes (lines.py), the KV sizing rule (rules.py), finish and findings."""

from __future__ import annotations

from kvscope.engines.base import Deferred, Engine, deferred
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts, LlamaRankFacts
from kvscope.engines.llamacpp.lines import LlamaCppLines

# the setting names this engine's rules read (see Engine.settings)
SETTINGS = frozenset({
    "ctx_size",
    "flash_attn",
    "kv_cells_swa",
    "kv_n_layer",
    "kv_layer_max_index",
    "kv_layer_n_embd_k_gqa",
    "kv_layer_n_embd_v_gqa",
    "kv_size",
    "kv_unified",
    "metal_working_set_mib",
    "n_ctx",
    "n_ctx_seq",
    "n_ctx_slot",
    "n_ctx_train",
    "n_embd",
    "n_embd_k_gqa",
    "n_embd_v_gqa",
    "n_gpu_layers_offloaded",
    "n_layer",
    "n_layers_offloadable",
    "n_seq_max",
    "n_slots",
    "n_ubatch",
    "ollama_gpus_found",
    "ollama_memory_available_gib",
    "ollama_memory_graph_full_gib",
    "ollama_memory_graph_partial_gib",
    "ollama_layers_split",
    "ollama_library",
    "ollama_memory_available_list_gib",
    "ollama_memory_gpu_overhead_gib",
    "ollama_memory_weights_nonrepeating_gib",
    "ollama_memory_weights_repeating_gib",
    "ollama_projector_graph_gib",
    "ollama_projector_weights_gib",
    "ollama_memory_required_full_gib",
    "ollama_memory_required_kv_gib",
    "ollama_memory_required_partial_gib",
    "ollama_memory_weights_total_gib",
    "ollama_runner",
    "output_layer_on_cpu",
    "pipeline_parallel_copies",
    "slots_from_command",
    "type_k",
    "type_v",
})

ENGINE = Engine(name="llamacpp", label="llama.cpp", lines=LlamaCppLines(),
                finish=deferred("kvscope.engines.llamacpp.finish", "finish"),
                findings=deferred("kvscope.engines.llamacpp.findings", "findings"),
                whatif=Deferred("kvscope.engines.llamacpp.whatif"),
                rank_facts=LlamaRankFacts, capacity_facts=LlamaCapacityFacts,
                settings=SETTINGS)
