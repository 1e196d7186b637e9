"""What `--assume KEY=VALUE` and `--model` may say, checked before anything is read.

A fact kvscope does not use, a fraction outside (0, 1], a GPU or model it cannot resolve would each give an
answer silently unchanged by what the user typed. So each ends in one line naming the problem (with the
nearest known names) and exit 2 (:class:`~kvscope.core.errors.InputError`).
"""

from __future__ import annotations

import math
from typing import Any

from kvscope import engines
from kvscope.core.errors import InputError
from kvscope.core.startup import RANK_FIELDS
from kvscope.core.text import did_you_mean
from kvscope.model.arch import KV_DTYPE_BYTES
from kvscope.model.catalog import catalog_entry, gpu_short_names, model_ids, pick_gpu, read_local_config

# Facts about the box and the run, read by the neutral layers (analysis/explain.py, runtime, model, render).
FACTS = frozenset({"engine", "gpu", "model", "host_ram_gb", "gpu_total_gib", "extra_weights_gib", "weights_gib",
                   "quantization", "kv_cache_dtype", "kv_cache_dtype_resolved", "tp_size", "pp_size", "tensor_parallel_size",
                   "enable_dp_attention"})
# Settings that are a share of memory: (0, 1].
FRACTIONS = frozenset({"mem_fraction_static", "gpu_memory_utilization", "kv_cache_free_gpu_mem_fraction",
                       "free_gpu_memory_fraction", "swa_full_tokens_ratio"})
# Settings that count something (ranks, tokens, requests, batch sizes): whole numbers above 0 (SGLang's
# chunked_prefill_size may be -1: chunking off).
COUNTS = frozenset({"tp_size", "pp_size", "dp_size", "tensor_parallel_size", "pipeline_parallel_size", "world_size",
                    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "max_running_requests", "max_total_tokens",
                    "max_prefill_tokens", "chunked_prefill_size", "cuda_graph_max_bs", "context_length", "page_size",
                    "block_size", "tokens_per_block", "max_batch_size", "max_num_tokens", "max_seq_len",
                    "max_tokens_in_paged_kv_cache", "n_ctx", "n_ubatch", "ctx_size", "n_slots", "n_seq_max",
                    "num_gpu_blocks_override",
                    "tp", "max_num_requests", "max_num_sequences", "n_ctx_seq", "n_ctx_slot", "n_ctx_train", "n_embd",
                    "n_embd_k_gqa", "n_embd_v_gqa", "kv_layer_n_embd_k_gqa", "kv_layer_n_embd_v_gqa", "n_layer",
                    "kv_size", "kv_size_per_token", "world_size_seen", "pipeline_parallel_copies"})
# counts that may be 0 (nothing offloaded, no draft layers, no GPU found)
COUNTS_FROM_ZERO = frozenset({"n_gpu_layers_offloaded", "n_layers_offloadable", "draft_layers", "ollama_gpus_found",
                              "speculative_num_draft_tokens", "kv_layer_max_index"})
SWITCHES = frozenset({"disable_hybrid_kv_cache_manager", "enable_chunked_prefill", "enable_dp_attention",
                      "enable_prefix_caching", "fake_cache_manager", "kv_unified", "output_layer_on_cpu"})
NEGATIVE_MEANS_OFF = frozenset({"chunked_prefill_size"})
# KV dtypes by name: the engines' options and torch's, and llama.cpp's cache types (-ctk / -ctv)
KV_DTYPE_NAMES = frozenset(KV_DTYPE_BYTES) | {"f16", "f32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "fp4",
                                               "nvfp4", "mxfp4", "fp8_e4m3fn", "float8_e4m3fnuz", "fp8_inc"}


def known_keys() -> frozenset[str]:
    """Every key some part of kvscope reads: the neutral facts, the rank figures, each engine's settings."""
    keys = set(FACTS) | set(RANK_FIELDS)
    for engine in engines.REGISTRY.values():
        keys |= engine.settings
    return frozenset(keys)


def implied_engine(assumptions: dict[str, Any]) -> str | None:
    """The one engine whose own settings the user named (mem_fraction_static: SGLang), None when the keys are
    neutral facts or name settings of several engines. Lets a pasted torch out of memory with nothing else be
    read as the engine the user says they ran; ``engine=vllm`` says it outright."""
    if isinstance(assumptions.get("engine"), str):
        return str(assumptions["engine"])
    named = set()
    for key in assumptions:
        if key in FACTS or key in RANK_FIELDS:
            continue
        owners = [name for name, engine in engines.REGISTRY.items() if key in engine.settings]
        if len(owners) == 1:
            named.add(owners[0])
    return named.pop() if len(named) == 1 else None


MAX_COUNT = 1 << 40  # more requests, tokens or ranks than any server holds: a typo (or a hostile value)
MAX_SIZE_GIB = 1 << 20  # a memory figure beyond a petabyte per GPU is no figure


def _number(key: str, value: Any, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{flag} {key}={value!r}: not a number")
    return float(value)


def check_value(key: str, value: Any, flag: str = "--assume") -> None:
    """InputError when a setting's value cannot be what its key names: a fraction outside (0, 1], a negative or
    absurd size, a count that is not a positive whole number; any other key takes what the engine takes."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{flag} {key}={value!r}: not a number")
    if key in SWITCHES:
        if value not in (True, False, 0, 1):
            raise InputError(f"{flag} {key}={value!r}: a switch is true or false")
        return
    if key in FRACTIONS:
        number = _number(key, value, flag)
        if not 0 < number <= 1:
            raise InputError(f"{flag} {key}={value!r}: a fraction of memory must be in (0, 1]")
    elif key.endswith(("_gib", "_gb", "_bytes", "_mib")):
        number = _number(key, value, flag)
        if number < 0:
            raise InputError(f"{flag} {key}={value!r}: a size cannot be negative")
        if number > (MAX_SIZE_GIB << 30 if key.endswith("_bytes") else MAX_SIZE_GIB << 10 if key.endswith("_mib")
                     else MAX_SIZE_GIB):
            raise InputError(f"{flag} {key}={value!r}: larger than any GPU or host holds")
    elif key in COUNTS:
        number = _number(key, value, flag)
        if number != int(number) or number == 0 or (number < 0 and not (key in NEGATIVE_MEANS_OFF and number == -1)):
            raise InputError(f"{flag} {key}={value!r}: a count must be a positive whole number")
        if number > MAX_COUNT:
            raise InputError(f"{flag} {key}={value!r}: more than any server holds")
    elif key in COUNTS_FROM_ZERO:
        number = _number(key, value, flag)
        if number != int(number) or not 0 <= number <= MAX_COUNT:
            raise InputError(f"{flag} {key}={value!r}: a count must be a whole number from 0")
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_COUNT * (1 << 30):
        raise InputError(f"{flag} {key}={value!r}: larger than anything a server has")
    elif key == "kv_cache_dtype":  # the one dtype whatif and plan size by: an unknown name would size as 16-bit
        name = str(value).replace("torch.", "").lower()
        if name not in KV_DTYPE_NAMES:
            raise InputError(f"{flag} {key}={value!r}: not a KV cache dtype kvscope knows"
                             f"{did_you_mean(name, sorted(KV_DTYPE_NAMES))}")


def check_settings(settings: dict[str, Any], flag: str = "--set") -> None:
    """Every value of a --set, by its key (unknown keys are the verb's to refuse: each engine knows its own)."""
    for key, value in settings.items():
        check_value(key, value, flag)


def check_gpu(name: str) -> None:
    gpu, candidates = pick_gpu(name)
    if gpu is not None:
        return
    if candidates:
        raise InputError(f"GPU {name!r} is ambiguous: {', '.join(g['name'] for g in candidates[:6])}; name one")
    raise InputError(f"GPU {name!r} is not in the catalog{did_you_mean(name, gpu_short_names())} "
                     "(or give its total instead: --assume gpu_total_gib=…)")


def check_model(model: str) -> None:
    if read_local_config(model) is not None or catalog_entry(model) is not None:
        return
    hint = did_you_mean(model.split("/")[-1], {i.split("/")[-1]: i for i in model_ids()})  # by name, shown as the id
    raise InputError(f"model {model!r} is neither a config.json (file or directory) nor in the built-in catalog{hint}")


def validate(assumptions: dict[str, Any], model: str | None = None) -> None:
    """Raise InputError for an unknown key, an impossible value, or a GPU / model kvscope cannot resolve."""
    known = known_keys()
    for key, value in assumptions.items():
        if key not in known:
            raise InputError(f"--assume {key}: kvscope reads no such fact or setting{did_you_mean(key, known)}")
        check_value(key, value)
    if assumptions.get("gpu") is not None:
        check_gpu(str(assumptions["gpu"]))
    if assumptions.get("engine") is not None and assumptions["engine"] not in engines.REGISTRY:
        names = sorted(engines.REGISTRY)
        raise InputError(f"--assume engine={assumptions['engine']!r}: one of {', '.join(names)}"
                         f"{did_you_mean(str(assumptions['engine']), names)}")
    for name in {m for m in (model, assumptions.get("model")) if isinstance(m, str) and m}:
        check_model(name)
