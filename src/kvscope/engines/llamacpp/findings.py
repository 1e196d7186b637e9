"""llama.cpp findings: what -c, -np, -ngl, the cache types and -ub cost, and why a start failed.

llama.cpp does not size its KV cache from free memory: the cache is exactly -c cells (padded), so
every finding is phrased as "this flag costs that many MiB" rather than as a budget fraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvscope.core.startup import Finding, Startup, Suggestion
from kvscope.engines.llamacpp import rules
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts, LlamaRankFacts
from kvscope.engines.llamacpp.finish import AGGREGATE_RANK, cache_shape
from kvscope.engines.llamacpp.lines import HOST_RANK

BIG_COMPUTE_GIB = 1.0  # compute buffers above this per device are worth a word


def _int(s: Startup, key: str) -> int | None:
    value = s.setting(key)
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _setting_str(s: Startup, key: str, cache: dict[str, Any]) -> str | None:
    """The context's type_k/type_v (kv_size line or context parameters): they describe the main cache only."""
    value = s.setting(key)
    return str(value) if value and cache.get("name") == "target" else None


def _cache_gib(cache: dict[str, Any]) -> float:
    return cache.get("gib") or cache.get("buffers_gib") or 0.0


def _target_cache(s: Startup) -> dict[str, Any] | None:
    """The main (full-context) cache, when it holds any bytes.

    DeepSeek-V4 builds print an empty non-SWA cache (0 layers, 0.00 MiB) beside the SWA cache that
    holds every layer; an empty cache has no cost per token to speak of.
    """
    return next((c for c in (LlamaCapacityFacts(s.capacity).kv_caches or []) if c.get("name") == "target" and _cache_gib(c) > 0),
                None)


def _costed_cache(s: Startup) -> tuple[dict[str, Any], int | None] | None:
    """The cache whose cost per cell is worth stating, with its cell count: the main cache, else the
    largest non-empty one (its own cells, never the context length it does not grow with)."""
    target = _target_cache(s)
    if target is not None:
        return target, s.capacity.kv_tokens
    others = [c for c in (LlamaCapacityFacts(s.capacity).kv_caches or []) if _cache_gib(c) > 0]
    if not others:
        return None
    cache = max(others, key=_cache_gib)
    return cache, cache.get("tokens") or cache.get("cells") or _int(s, f"kv_cells_{cache.get('name')}")


def _gpus(s: Startup) -> list:
    return [r for r in s.ranks if r.rank not in (HOST_RANK, AGGREGATE_RANK)]


def _element_bytes(s: Startup, per_cell: float) -> float | None:
    """Bytes per K/V element implied by a cell's bytes, 2 × layers × KV width: 4 (f32) or 2 (f16) when exact."""
    layers, width = _int(s, "n_layer"), _int(s, "n_embd_k_gqa") or _int(s, "n_embd")
    if not layers or not width:
        return None
    element = per_cell / (2 * layers * width)
    return element if element in (2.0, 4.0) else None


def _kv_cost(s: Startup) -> Finding | None:
    """What the KV cache costs per cell and per 1,024 tokens of -c, and what q8_0 would save."""
    costed = _costed_cache(s)
    if costed is None:
        return None
    cache, tokens = costed
    mib = _cache_gib(cache) * 1024
    k_type = cache.get("k_type") or cache.get("dtype") or _setting_str(s, "type_k", cache)
    v_type = cache.get("v_type") or cache.get("dtype") or _setting_str(s, "type_v", cache)
    if cache.get("layout") == "mla":
        types = f"MLA latent c^KV {k_type}"
    else:
        types = "/".join(t for t in (k_type, v_type) if t) or "cache types not in the log"
    if cache.get("name") != "target":
        types += f", {cache.get('name')} cache; the main cache is empty"
    devices = cache.get("devices") or []
    where = (", ".join(devices) if len(devices) <= 4 else f"{len(devices)} devices") or "the device"
    if not tokens:
        what = "n_ctx" if cache.get("name") == "target" else f"the {cache.get('name')} cache's cell count"
        return Finding("llamacpp-kv-cost", "info", f"KV cache: {mib:,.2f} MiB ({types}) on {where}",
                       f"The log does not print {what}, so the cost per token is unknown; llama.cpp allocates the whole "
                       "cache (-c cells) at start, whatever the requests use.")
    per_cell = mib * rules.MIB / tokens
    title = f"KV cache: {tokens:,} cells × {per_cell:,.0f} B = {mib:,.2f} MiB ({types}) on {where}"
    if cache.get("name") != "target":
        return Finding("llamacpp-kv-cost", "info", title,
                       f"The {cache.get('name')} cache keeps {tokens:,} cells whatever -c is (the window each sequence "
                       "needs, padded): it does not grow with the context.")
    detail = (f"llama.cpp allocates the whole cache at start: -c {tokens:,} cells, whatever the requests use. "
              f"Each 1,024 tokens of -c cost {per_cell * 1024 / rules.MIB:,.1f} MiB.")
    suggestion = None
    element = _element_bytes(s, per_cell) if not (k_type or v_type) else None
    if element == 4:  # an f32 cache: the types are not printed, the bytes per cell say it
        layers, width = _int(s, "n_layer"), _int(s, "n_embd_k_gqa") or _int(s, "n_embd")
        detail += (f" {per_cell:,.0f} B per cell = 2 (K and V) × {layers} layers × {width:,} × 4 bytes: an f32 (32-bit) "
                   f"cache. An f16 cache holds the same cells in half: {mib / 2:,.2f} MiB (llama.cpp's own default "
                   "since it switched K/V to f16; in llama-cpp-python pass f16_kv=True, in old llama.cpp builds drop "
                   "--memory-f32).")
        return Finding("llamacpp-kv-cost", "info", title, detail,
                       Suggestion("f16_kv", False, True, kv_tokens_after=tokens,
                                  note=f"KV cache {mib:,.0f} → {mib / 2:,.0f} MiB at the same n_ctx"))
    size_k, size_v = rules.type_size(k_type), rules.type_size(v_type)
    q8 = rules.type_size("q8_0")
    if size_k and size_v and q8 and (size_k > q8 or size_v > q8) and cache.get("layout") is None:
        # only the types wider than q8_0 change: a q4_0 K stays q4_0
        new_k, new_v = ("q8_0" if size > q8 else name for size, name in ((size_k, k_type), (size_v, v_type)))
        after_mib = mib * (min(size_k, q8) + min(size_v, q8)) / (size_k + size_v)
        flags = " ".join(f"--cache-type-{kv} q8_0" for kv, size in (("k", size_k), ("v", size_v)) if size > q8)
        detail += (f" With {flags} the same -c takes ≈ {after_mib:,.1f} MiB "
                   f"(q8_0 stores 32 elements in 34 bytes), or the same memory holds ≈ {int(tokens * mib / after_mib):,} cells.")
        suggestion = Suggestion("--cache-type-k/--cache-type-v", f"{k_type}/{v_type}", f"{new_k}/{new_v}",
                                kv_tokens_after=int(tokens * mib / after_mib),
                                note="a quantized V cache needs flash attention (-fa)")
    return Finding("llamacpp-kv-cost", "info", title, detail, suggestion)


def _ollama_slots(s: Startup, n_ctx: int, slots: int, each: int) -> Finding:
    """ollama's runner: --ctx-size is num_ctx × OLLAMA_NUM_PARALLEL; each request gets num_ctx, and a prompt
    longer than that is truncated (the server says so)."""
    cut = next((w for w in s.warnings if w.get("code") == "input-truncated"), None)
    detail = (f"ollama started its runner with --ctx-size {n_ctx:,} for --parallel {slots}: {slots} × {each:,}. Each "
              f"request gets {each:,} tokens per slot (num_ctx); the {n_ctx:,} is the KV cache for all {slots} slots "
              f"together, which ollama sizes as num_ctx × OLLAMA_NUM_PARALLEL (a model's minimum context, when it has "
              "one, is applied per slot first).")
    if cut is not None and cut.get("prompt_tokens_high"):
        low, high = cut["prompt_tokens_low"], cut["prompt_tokens_high"]
        want = 1 << (high - 1).bit_length()
        detail += (f" The server truncated a prompt of ≈ {low:,}–{high:,} tokens to the {cut.get('n_ctx') or each:,} "
                   f"a slot holds (input truncated): raise num_ctx (OLLAMA_CONTEXT_LENGTH, or the request's options) to "
                   f"at least {high:,}; the KV cache grows to {want:,} × {slots} cells.")
        alt = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1, note="fewer slots: the same memory then allows a larger num_ctx")
        sug = Suggestion("num_ctx", each, want, kv_tokens_after=want * slots,
                         note=f"holds the ≈ {high:,}-token prompt; KV memory grows {want / each:.0f}×", alternatives=[alt])
        title = f"A prompt was truncated: each of the {slots} slots holds {each:,} tokens ({slots} × {each:,} = --ctx-size {n_ctx:,})"
    else:
        detail += (" Lowering OLLAMA_NUM_PARALLEL shrinks the cache (and the memory it takes) by the slots removed; "
                   "raising num_ctx raises every slot's share.")
        sug = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1,
                         note=f"KV cache {n_ctx:,} → {each:,} cells; one request at a time gets {each:,} tokens")
        title = f"--ctx-size {n_ctx:,} is {slots} slots × {each:,} tokens (OLLAMA_NUM_PARALLEL {slots})"
    return Finding("ollama-slots", "warning" if cut else "info", title, detail, sug)


def _slots(s: Startup) -> Finding | None:
    """-np N: unless the cache is unified, each slot owns n_ctx / N cells."""
    n_ctx = s.capacity.kv_tokens or _int(s, "n_ctx")
    slots = _int(s, "n_slots") or _int(s, "n_seq_max")
    per_seq = s.capacity.context_len
    if not n_ctx or not slots or slots < 2:
        return None
    unified = s.setting("kv_unified")
    if unified is True:
        return Finding("llamacpp-unified-slots", "info",
                       f"{slots} parallel slots share one unified cache of {n_ctx:,} cells",
                       f"With kv_unified the {slots} slots (-np {slots}) draw from the same {n_ctx:,} cells: one request "
                       f"may use up to {per_seq or n_ctx:,} tokens, but together they cannot hold more than {n_ctx:,}.")
    each = per_seq or n_ctx // slots
    if s.setting("ollama_runner") is True:
        return _ollama_slots(s, n_ctx, slots, each)
    if each == n_ctx:  # the slots' share is not known (the cache may be unified): say nothing wrong about it
        return None
    return Finding(
        "llamacpp-slots-divide-context", "warning",
        f"-np {slots} divides -c {n_ctx:,}: each slot gets {each:,} tokens",
        f"llama-server splits the context between its {slots} slots ({slots} × {each:,} = -c {n_ctx:,}), so a single "
        f"request is cut at {each:,} tokens although the cache holds {n_ctx:,} cells. For slots that each hold the "
        f"whole {n_ctx:,}, set -c {n_ctx * slots:,} (per-request context × -np), or lower -np, or use --kv-unified so "
        "the slots share the cells.",
        Suggestion("-c", n_ctx, n_ctx * slots, kv_tokens_after=n_ctx * slots,
                   note=f"every one of the {slots} slots then holds the full {n_ctx:,}; KV memory grows {slots}×"),
    )


def _train_context(s: Startup) -> Finding | None:
    """Per-request context below the training context; with private slots (-np N, not unified) the
    training context for every slot needs -c N × n_ctx_train, not n_ctx_train."""
    train, per_seq = _int(s, "n_ctx_train"), s.capacity.context_len
    if not train or not per_seq or per_seq >= train:
        return None
    n_ctx = s.capacity.kv_tokens or _int(s, "n_ctx")
    slots = _int(s, "n_slots") or _int(s, "n_seq_max") or 1
    shared = slots < 2 or s.setting("kv_unified") is True
    want = train if shared else train * slots
    detail = f"The model was trained for {train:,} tokens; this start allows {per_seq:,} per request."
    if not shared:
        detail += (f" Each of the {slots} slots owns 1/{slots} of -c, so the training context in every slot needs "
                   f"-c {want:,}.")
    cache = _target_cache(s)
    if cache and n_ctx and want > n_ctx:
        extra_mib = _cache_gib(cache) * 1024 * (want - n_ctx) / n_ctx
        detail += f" That would cost ≈ {extra_mib:,.0f} MiB more KV cache (at the current cache types)."
    return Finding("llamacpp-context-below-training", "info", f"Context {per_seq:,} < training context {train:,}", detail,
                   Suggestion("-c", n_ctx or per_seq, want, kv_tokens_after=want))


def _smaller_context(s: Startup, done: int, total: int, per_layer: float) -> tuple[Suggestion, str] | None:
    """ollama's estimate: what a quarter of the context gives back. KV scales with num_ctx; the layers that fit
    scale with what each costs on the GPU (its weights plus its share of the KV cache), calibrated on the split
    ollama chose for the logged context."""
    kv, ctx = s.settings.get("ollama_memory_required_kv_gib"), _int(s, "ctx_size") or _int(s, "n_ctx")
    if not isinstance(kv, float) or not ctx or ctx < 4096 or kv <= 0:
        return None
    to = max(2048, 1 << (ctx // 4).bit_length() - 1)  # the power of two at or below a quarter of it
    if to >= ctx:
        return None
    kv_layer, kv_layer_to = kv / total, kv / total * to / ctx
    layers = min(total, int(done * (per_layer + kv_layer) // (per_layer + kv_layer_to)))
    text = (f" The {ctx:,}-token context (num_ctx) takes {kv:,.1f} GiB of KV cache; at {to:,} it takes "
            f"{kv * to / ctx:,.1f} GiB, room for ≈ {layers} of the {total} layers on the GPUs instead of {done}.")
    return Suggestion("num_ctx", ctx, to, note=f"≈ {layers}/{total} layers on the GPUs (+{layers - done}); shorter "
                      "prompts and answers per request"), text


def _offload(s: Startup, unused_gpu: Finding | None) -> Finding | None:
    """Layers left on the CPU, and whether the GPUs could take them: each layer's share of the weights
    (all model buffers, host ones included, over the layer count) against the GPU memory the log shows."""
    done, total = _int(s, "n_gpu_layers_offloaded"), _int(s, "n_layers_offloadable")
    if done is None or not total or done >= total:
        return None
    weights = sum(r.weights_gib or 0.0 for r in s.ranks if r.rank != AGGREGATE_RANK)
    weights = weights or s.settings.get("ollama_memory_weights_total_gib") or 0.0
    detail = f"{total - done} layers run on the CPU from host memory, which dominates token latency."
    suggestion: Suggestion | None = Suggestion("-ngl", done, total)
    if s.setting("output_layer_on_cpu") is True and total - done == 1:
        return Finding("llamacpp-output-layer-on-cpu", "info",
                       f"{done}/{total} layers on the GPU: the one left on the CPU is the output layer",
                       f"All {done} repeating layers are on the GPU; the output layer (the vocabulary projection, often "
                       "far larger than one repeating layer, several GB for large vocabularies) did not fit and runs "
                       "on the CPU from host memory, which is where the CPU share of the work comes from. A smaller "
                       "context (num_ctx / -c), a smaller quantization or more VRAM lets it move to the GPU.")
    if weights:
        per_layer = weights / total
        need = per_layer * (total - done)
        detail += (f" The weights are {weights:,.1f} GiB, ≈ {per_layer:,.2f} GiB a layer: the {total - done} layers "
                   f"on the CPU need ≈ {need:,.1f} GiB more GPU memory, plus their share of the KV cache.")
        suggestion = Suggestion("-ngl", done, total, note=f"only with ≈ {need:,.1f} GiB more free on the GPUs")
        full, available = s.settings.get("ollama_memory_required_full_gib"), s.settings.get("ollama_memory_available_gib")
        free = _gpu_free_gib(s)
        if isinstance(full, float) and isinstance(available, float):
            fits = total - done if full <= available else 0
            if unused_gpu is not None:  # ollama's placement rule left a GPU empty: more layers cannot go there
                fits = 0
            detail += (f" ollama's own estimate: the whole model needs {full:,.1f} GiB on the GPUs, which have "
                       f"{available:,.1f} GiB available.")
            thin = _thin_plan(s, done, total, per_layer, detail)
            if thin is not None:
                return thin
            if fits < total - done:
                detail += " It cannot all fit: a smaller quantization, more GPUs or a smaller num_ctx would."
                suggestion = None
                if weights + (s.settings.get("ollama_memory_graph_full_gib") or 0.0) >= available:
                    detail += (f" The weights alone ({weights:,.1f} GiB) and the compute graph leave no room for all "
                               f"{total} layers in {available:,.1f} GiB at any context: a smaller model or a "
                               "lower-bit quantization is the way to run it entirely on the GPUs.")
                smaller = _smaller_context(s, done, total, per_layer)
                if smaller is not None:
                    detail += smaller[1]
                    suggestion = smaller[0]
        elif free is not None:
            used = sum((r.weights_gib or 0.0) + sum(p.gib or 0.0 for p in r.kv_pools) + (LlamaRankFacts(r).compute_gib or 0.0)
                       for r in _gpus(s))
            kv_per_layer = sum(_cache_gib(c) for c in (LlamaCapacityFacts(s.capacity).kv_caches or [])) / total
            fits = max(0, min(total - done, int((free - used) // (per_layer + kv_per_layer))))
            detail += f" The log shows {free:,.1f} GiB free on the GPUs before loading, {used:,.1f} of it used now."
            if fits < total - done:
                detail += (f" That is room for ≈ {fits} more layer(s), not all: a smaller quantization, more GPUs "
                           "or a shorter -c are the ways to put the whole model on the GPU.")
                suggestion = Suggestion("-ngl", done, done + fits, note="what the free memory shown could hold") \
                    if fits else None
    else:
        detail += " Raise -ngl if the GPU has room (each layer's weights plus its share of the KV cache move with it)."
    return Finding("llamacpp-partial-offload", "warning", f"Only {done}/{total} layers are on the GPU", detail,
                   suggestion)


def _gpu_free_gib(s: Startup) -> float | None:
    """Free GPU memory before the load, summed over the GPUs: llama.cpp's "using device … MiB free" lines, or
    the GPU memory ollama's scheduler counted as available."""
    free = [r.pre_load_free_gib for r in _gpus(s) if r.pre_load_free_gib is not None]
    if free:
        return sum(free)
    available = s.settings.get("ollama_memory_available_gib")
    return float(available) if isinstance(available, (int, float)) else None


OLLAMA_SAFE_MARGIN_GIB = 0.5  # what ollama's plan should leave free on a GPU: its graph estimates run low by this much


def _ollama_plan(s: Startup) -> tuple[float, float] | None:
    """(what ollama planned to put on the GPUs, what it counted as available), GiB, when its offload line says."""
    planned, available = s.settings.get("ollama_memory_required_partial_gib"), s.settings.get("ollama_memory_available_gib")
    if isinstance(planned, float) and isinstance(available, float) and planned > 0 and available > 0:
        return planned, available
    return None


def _fewer_layers(done: int, per_layer: float, missing_gib: float, why: str) -> Suggestion:
    """num_gpu lowered by the layers whose memory covers ``missing_gib``; OLLAMA_GPU_OVERHEAD as the other way."""
    fewer = max(1, math.ceil(missing_gib / per_layer)) if per_layer > 0 else 1
    reserve = math.ceil(missing_gib * 4) / 4  # in quarters of a GiB
    return Suggestion("num_gpu", done, max(0, done - fewer), note=f"{why}; each layer ≈ {per_layer:,.2f} GiB",
                      alternatives=[Suggestion("OLLAMA_GPU_OVERHEAD", 0, int(reserve * (1 << 30)),
                                               note=f"bytes ollama keeps free on each GPU ({reserve:g} GiB): its plan "
                                                    "then places fewer layers by itself")])


def _thin_plan(s: Startup, done: int, total: int, per_layer: float, layers_detail: str) -> Finding | None:
    """ollama planned almost all it counted as available: its graph and runtime estimates run low, so such a load
    is the one that fails with an out of memory (or slows down). The plan's margin is the answer: it leads, the
    partial offload's layer arithmetic (``layers_detail``) follows."""
    plan = _ollama_plan(s)
    if plan is None:
        return None
    planned, available = plan
    margin = available - planned
    if margin >= OLLAMA_SAFE_MARGIN_GIB:
        return None
    text = (f"ollama planned {planned:,.1f} GiB of the {available:,.1f} GiB available for these {done} layers: a "
            f"{margin:,.1f} GiB margin, and its compute-graph estimate is often low, so this load can run out of GPU "
            f"memory. Give it room: fewer layers on the GPU (num_gpu), or reserve memory with OLLAMA_GPU_OVERHEAD.")
    sug = _fewer_layers(done, per_layer, OLLAMA_SAFE_MARGIN_GIB - margin, "keeps about "
                        f"{OLLAMA_SAFE_MARGIN_GIB:g} GiB free for what the plan under-counts")
    return Finding("llamacpp-partial-offload", "warning",
                   f"ollama planned {planned:,.1f} of {available:,.1f} GiB for {done}/{total} layers: too little room "
                   "left", text + " " + layers_detail, sug)


def _ollama_compute_oom(s: Startup, size_mib: float | None) -> tuple[str, Suggestion | None]:
    """The runner's compute buffer did not fit after ollama placed its layers: ollama's graph estimate was low."""
    plan = _ollama_plan(s)
    done, total = _int(s, "n_gpu_layers_offloaded"), _int(s, "n_layers_offloadable")
    if plan is None or not size_mib:
        return "", None
    planned, available = plan
    graph = s.settings.get("ollama_memory_graph_partial_gib") or s.settings.get("ollama_memory_graph_full_gib") or 0.0
    missing = size_mib / 1024 - graph - (available - planned)
    text = (f" ollama planned {planned:,.1f} GiB of {available:,.1f} GiB on the GPU"
            + (f" for {done}/{total} layers" if done and total else "")
            + f", counting {graph * 1024:,.1f} MiB for the compute graph; the runner needed {size_mib:,.0f} MiB for it, "
            f"so ollama's estimate was too low by ≈ {max(0.0, missing):,.2f} GiB. Fewer layers on the GPU (num_gpu) or "
            "OLLAMA_GPU_OVERHEAD (memory ollama keeps free) makes its plan leave that room.")
    weights = s.settings.get("ollama_memory_weights_total_gib")
    if not (done and total and isinstance(weights, float) and missing > 0):
        return text, None
    return text, _fewer_layers(done, weights / total, missing, "frees what the compute buffer lacked")


def _ubatch(s: Startup) -> Suggestion:
    """Halve -ub; when the log does not print it, say so rather than pretend to know it."""
    ub = _int(s, "n_ubatch")
    if ub:
        return Suggestion("-ub", ub, max(32, ub // 2), note="halves the activation part of the compute buffers")
    return Suggestion("-ub", None, 256, note="-ub is not in the log (llama.cpp's default is 512); halve what you run with")


def _compute(s: Startup) -> Finding | None:
    heavy = [(r.rank, g) for r in _gpus(s) if (g := LlamaRankFacts(r).compute_gib) is not None and g >= BIG_COMPUTE_GIB]
    if not heavy:
        return None
    total = sum(g for _, g in heavy)
    copies = _int(s, "pipeline_parallel_copies")
    detail = (f"{len(heavy)} device(s) reserve {total:,.2f} GiB of compute buffers "
              f"(largest {max(g for _, g in heavy):.2f} GiB on {max(heavy, key=lambda x: x[1])[0]}). They are sized for "
              "the worst-case batch of -ub tokens over the full context, so they shrink with a smaller -ub (and -c).")
    if copies and copies > 1:
        detail += f" Pipeline parallelism keeps {copies} copies of them (GGML_SCHED_MAX_COPIES lowers that)."
    cache = _target_cache(s)
    if cache and cache.get("gib") and total > cache["gib"]:
        detail += f" That is more than the KV cache itself ({cache['gib']:.2f} GiB)."
    return Finding("llamacpp-compute-buffers", "info", f"Compute buffers: {total:,.2f} GiB on the GPUs", detail, _ubatch(s))


def _allocation_limit(s: Startup, size: str, device: str) -> Finding:
    """Vulkan refused one buffer larger than its per-allocation limit: free memory was not the problem."""
    quant_k = next((str(c.get("k_type")) for c in (LlamaCapacityFacts(s.capacity).kv_caches or [])
                    if str(c.get("k_type") or "f16") not in ("f16", "bf16", "f32")), None) or (
        str(s.setting("type_k")) if s.setting("type_k") not in (None, "f16", "bf16", "f32") else None)
    detail = (f"Not out of VRAM: one {size} compute buffer exceeds the Vulkan device's per-allocation limit "
              "(maxMemoryAllocationSize / maxBufferSize, often 2–4 GiB, far below its memory), so the driver refuses "
              "that single buffer whatever is free. The compute buffer grows with -ub and the context")
    sug = _ubatch(s)
    if quant_k:
        detail += (f"; with a quantized K cache (-ctk {quant_k}) it also holds dequantized copies of K, which is what "
                   "pushes it past the limit. Keep K in f16 (drop -ctk / --cache-type-k), or keep the KV cache in host "
                   "memory (-nkvo / --no-kv-offload), or lower -ub so each buffer is smaller")
        sug = Suggestion("--cache-type-k", quant_k, "f16", note="the compute buffer no longer holds dequantized K; "
                         "the KV cache grows by the f16 K", alternatives=[a for a in (sug,) if a is not None])
    else:
        detail += ": lower -ub (and -b) or -c so each buffer stays under the limit, or use the CUDA / ROCm backend"
    return Finding("llamacpp-allocation-limit", "error",
                   f"Startup failed: a {size} buffer exceeds the per-allocation limit of {device}", detail + ".", sug)


def _failure(s: Startup) -> Finding | None:
    f = s.failure
    if f is None:
        return None
    mib = f.data.get("alloc_mib") or ((f.data.get("alloc_bytes") or 0) / rules.MIB or None)
    device = f.data.get("device") or "a device"
    size = f"{mib:,.2f} MiB" if mib else "a buffer"
    n_ctx = s.capacity.kv_tokens or _int(s, "n_ctx")
    if (f.data.get("unsized") or f.kind == "not-enough-memory") and not mib and f.data.get("device") is None:
        placed = " after the weights and the KV cache were placed" if s.capacity.kv_tokens or _target_cache(s) else ""
        return Finding("llamacpp-gpu-oom", "error", "The GPU ran out of memory while computing",
                       f"A GPU allocation failed{placed}, outside the buffers the log sizes (weights, KV cache, "
                       "compute): the GPU was fuller than the placement assumed. The usual cause is another program "
                       "holding VRAM (a desktop app, a game or its client, a browser, a second server) that the "
                       "free-memory query did not count — on ROCm, memory held by non-ROCm clients is not seen. Close "
                       "it, or leave room: offload fewer layers (-ngl / num_gpu), lower -c or quantize the KV cache.",
                       _ubatch(s))
    if f.kind in ("compute-buffer-oom", "not-enough-memory") and any(
            w.get("code") == "per-allocation-limit" for w in s.warnings):
        return _allocation_limit(s, size, device)
    if f.kind in ("compute-buffer-oom", "not-enough-memory"):
        copies = _int(s, "pipeline_parallel_copies")
        detail = (f"llama.cpp could not allocate {size} of compute buffer on {device} after the weights and the KV "
                  "cache were placed. The compute buffer grows with -ub (micro-batch) and with the context.")
        if copies and copies > 1:
            detail += (f" Pipeline parallelism was on with {copies} copies: each device holds {copies} compute "
                       "buffers; GGML_SCHED_MAX_COPIES=1 or --split-mode row/none avoids that.")
        ollama_text, fewer = _ollama_compute_oom(s, mib)
        if ollama_text:
            detail += ollama_text
            return Finding("llamacpp-compute-oom", "error", f"Startup failed: {size} compute buffer did not fit on {device}",
                           detail, fewer)
        detail += " Lower -ub (and -b), lower -c, or move a layer off that device (-ngl / --tensor-split)."
        return Finding("llamacpp-compute-oom", "error", f"Startup failed: {size} compute buffer did not fit on {device}",
                       detail, _ubatch(s))
    if f.kind == "kv-cache-oom":
        return _kv_oom(s, f, device, n_ctx)
    if f.kind == "weights-oom":
        layers = _int(s, "n_gpu_layers_offloaded")
        return Finding("llamacpp-weights-oom", "error", f"Startup failed: the model weights did not fit on {device}",
                       "Lower -ngl so fewer layers go to the GPU, or spread them with --tensor-split.",
                       Suggestion("-ngl", layers, max(0, layers - 4)) if layers else None)
    if f.data.get("cause") == "quantized-v-needs-flash-attn":
        return Finding("llamacpp-v-quant-needs-fa", "error", "Startup failed: a quantized V cache needs flash attention",
                       "Not memory: llama.cpp refuses a quantized V cache (-ctv / --cache-type-v q8_0, q4_0, …) unless "
                       "flash attention is on, and stops before allocating anything. Turn it on (-fa, --flash-attn on; "
                       "OLLAMA_FLASH_ATTENTION=1 in ollama), or keep V in f16 and quantize only K (-ctk).",
                       Suggestion("-fa", False, True, note="flash attention on: the quantized V cache is allowed",
                                  alternatives=[Suggestion("--cache-type-v", None, "f16",
                                                           note="an f16 V cache needs no flash attention")]))
    return Finding("llamacpp-startup-failed", "error", f"Startup failed ({f.kind})", f.message)


WORKING_CONTEXT = 8192  # a context most chats fit in, offered when the one that failed was tens of thousands


def _kv_oom(s: Startup, f, device: str, n_ctx: int | None) -> Finding:
    """The KV buffer itself was refused: its size, the context that asked for it, and a context that fits."""
    size = f.data.get("alloc_bytes")
    gib = size / (1 << 30) if size else None
    asked = f" ({size:,} B = {gib:,.2f} GiB)" if size else ""
    detail = (f"llama.cpp could not allocate the KV cache{asked} on {device}: it is -c cells × bytes per cell, "
              "allocated in full at start.")
    train = _int(s, "n_ctx_train")
    if n_ctx:
        default = " — the model's training context, which llama.cpp uses when -c is not given" if (
            train and n_ctx == train) or n_ctx >= 131072 else ""
        detail += f" The context (n_ctx) was {n_ctx:,} tokens{default}."
    sug = None
    if n_ctx:
        to = WORKING_CONTEXT if n_ctx > 2 * WORKING_CONTEXT else max(512, n_ctx // 2)
        after = f"; the KV cache then takes ≈ {gib * to / n_ctx:,.2f} GiB" if gib else ""
        sug = Suggestion("-c", n_ctx, to, kv_tokens_after=to,
                         note=f"a context sized to the requests instead of {n_ctx:,}{after}")
        detail += (f" Set -c to what the requests need (e.g. -c {to:,}{after.replace('; the KV cache then takes', ':')}); "
                   "or quantize the cache (--cache-type-k/-v q8_0), offload fewer layers (-ngl) or keep it in host "
                   "memory (--no-kv-offload).")
    else:
        sug = Suggestion("--cache-type-k/--cache-type-v", "f16", "q8_0")
        detail += " Lower -c, quantize it (--cache-type-k/-v q8_0), offload fewer layers (-ngl) or use --no-kv-offload."
    what = f"the {gib:,.2f} GiB KV cache" if gib else "the KV cache"
    ctx = f" for n_ctx {n_ctx:,}" if n_ctx else ""
    return Finding("llamacpp-kv-oom", "error", f"Startup failed: {what}{ctx} did not fit on {device}", detail, sug)


def _recovered(s: Startup) -> Finding | None:
    w = next((w for w in s.warnings if w.get("code") == "compute-oom-recovered"), None)
    if w is None:
        return None
    mib = w.get("alloc_mib")
    size = f"{mib:,.2f} MiB" if mib else "a"
    return Finding("llamacpp-pipeline-parallelism-dropped", "warning",
                   f"A {size} compute buffer did not fit on {w.get('device') or 'a GPU'}; llama.cpp went on without "
                   "pipeline parallelism",
                   "The first compute-buffer reservation (one copy per pipeline stage) ran out of memory, and llama.cpp "
                   "retried with a single copy. The server runs, but multi-GPU prompt processing is slower. Lower -ub "
                   "or -c to get pipeline parallelism back.", _ubatch(s))


def _drop_aggregate_noise(s: Startup) -> None:
    """Engine-neutral checks that misread llama.cpp: unequal free memory across GPUs is normal (layers are
    split by --tensor-split, nothing is sized from the poorest GPU), and the whole-cache rank may hold more
    KV than one GPU because it spans all of them."""
    kept = []
    for f in s.findings:
        if f.code == "rank-imbalance":
            continue
        if f.code == "log-inconsistent" and ": " in f.detail:
            head, problems = f.detail.split(": ", 1)
            real = [p for p in problems.split("; ") if not p.startswith(AGGREGATE_RANK)]
            if not real:
                continue
            f.detail = f"{head}: {'; '.join(real)}"
        kept.append(f)
    s.findings[:] = kept


COMPUTE_ALLOWANCE_MIB = 1024.0  # compute buffers and the output buffer beside weights + KV (a few hundred MiB to 1 GiB)


def _kv_ahead(s: Startup) -> Finding | None:
    """The log stops before the KV cache (or never prints it) but says n_ctx and the model's shape is known: what
    the cache will take at that context (f16, llama.cpp's default types), against the device's memory when the log
    shows it (Metal's working set)."""
    n_ctx = _int(s, "n_ctx")
    if not n_ctx or _costed_cache(s) is not None or s.failure is not None:
        return None
    shape = cache_shape(s)
    types = (_setting_str(s, "type_k", {}) or "f16", _setting_str(s, "type_v", {}) or "f16")
    bpt = shape.bytes_per_token(*types) if shape else None
    if not bpt or shape is None:  # no shape is no bpt: said for the type checker
        return None
    kv_mib = n_ctx * bpt / rules.MIB
    train = _int(s, "n_ctx_train")
    why = " (the model's training context: -c was not given)" if (train and n_ctx == train) or n_ctx >= 131072 else ""
    detail = (f"At n_ctx {n_ctx:,} tokens{why} the KV cache takes {n_ctx:,} × {bpt:,.0f} B = {kv_mib:,.1f} MiB "
              f"({kv_mib / 1024:,.2f} GiB): {shape.layers} layers × ({shape.n_embd_k_gqa:,} K + {shape.n_embd_v_gqa:,} V) "
              f"× {types[0]}/{types[1]}, from {shape.source}. llama.cpp allocates it in full at start.")
    ws = s.settings.get("metal_working_set_mib")
    weights = sum(r.weights_gib or 0.0 for r in s.ranks if r.rank not in (AGGREGATE_RANK, HOST_RANK)) * 1024
    sug = None
    if isinstance(ws, float) and ws > 0 and kv_mib + weights > ws:
        room = ws - weights - COMPUTE_ALLOWANCE_MIB
        fit = int(room * rules.MIB // bpt) if room > 0 else 0
        to = 1 << (fit.bit_length() - 1) if fit >= 512 else 0
        detail += (f" With the {weights:,.0f} MiB of weights that exceeds the {ws:,.0f} MiB Metal working set "
                   "(recommendedMaxWorkingSetSize): the context cannot be allocated, or macOS aborts with "
                   "'Insufficient Memory'.")
        if to:
            detail += f" A -c of {to:,} takes {to * bpt / rules.MIB:,.0f} MiB and fits."
            sug = Suggestion("-c", n_ctx, to, kv_tokens_after=to, note="a context that fits the working set")
        return Finding("llamacpp-kv-will-not-fit", "error",
                       f"n_ctx {n_ctx:,} needs a {kv_mib / 1024:,.2f} GiB KV cache: more than the device holds", detail, sug)
    return Finding("llamacpp-kv-ahead", "info", f"n_ctx {n_ctx:,} → KV cache {kv_mib / 1024:,.2f} GiB", detail)


def _ollama_devices(s: Startup) -> Finding | None:
    """ollama listed the GPUs it found: say so, and why it may still place a model on one of them."""
    found = _int(s, "ollama_gpus_found")
    if not found or found < 2:
        return None
    gpus = [r for r in s.ranks if r.total_gib is not None]
    sizes = ", ".join(f"{r.rank} {r.total_gib:.1f} GiB" + (f" ({r.pre_load_free_gib:.1f} available)"
                                                           if r.pre_load_free_gib is not None else "") for r in gpus)
    return Finding("ollama-gpus-found", "info", f"ollama found {found} GPUs: {sizes}",
                   f"{'Both' if found == 2 else f'All {found}'} GPUs were detected ({sizes}). When a model fits on a "
                   "single GPU, ollama loads it on one GPU by design (no cross-GPU traffic), so the others stay idle; "
                   "OLLAMA_SCHED_SPREAD=1 makes it spread every model over all of them. A model too large for one GPU "
                   "is split across them anyway.",
                   Suggestion("OLLAMA_SCHED_SPREAD", 0, 1, note="spread over all GPUs even when one would do"))


def _pinned(s: Startup) -> Finding | None:
    """cudaMallocHost refused a pinned host buffer: llama.cpp warns and uses pageable memory, so the startup goes
    on with slower host-device copies; the host (often WSL, whose pinned memory is small) is what ran short."""
    seen = [w for w in s.warnings if w.get("code") == "pinned-host-memory"]
    if not seen:
        return None
    sizes = [w["gib"] for w in seen if isinstance(w.get("gib"), (int, float))]
    largest = f" (up to {max(sizes) * 1024:,.0f} MiB)" if sizes else ""
    return Finding("pinned-host-memory", "warning",
                   f"Pinned host memory could not be allocated{largest}: host RAM, not the GPU",
                   f"{len(seen)} pinned (page-locked) host buffer(s) could not be allocated{largest}. This is host "
                   "memory, not VRAM: the buffers fall back to ordinary pageable memory, so the model still loads but "
                   "copies between host and GPU are slower. It is common under WSL, where pinned memory is limited. "
                   "Free host RAM, or set GGML_CUDA_NO_PINNED=1 to skip pinned buffers altogether (the warning "
                   "goes away; the speed is that of the fallback).",
                   Suggestion("GGML_CUDA_NO_PINNED", 0, 1, note="environment variable: no pinned host buffers, no "
                                                                "failed attempt; host copies as slow as the fallback"))


OLLAMA_MINIMUM_GIB = {"metal": 512 / 1024}  # discover/: a GPU's own minimum; CUDA and ROCm 457 MiB
OLLAMA_MINIMUM_DEFAULT_GIB = 457 / 1024


@dataclass(frozen=True)
class _PlacementRule:
    """How one ollama release decides whether a GPU gets any layer (llm/memory.go EstimateGPULayers): it must hold
    the compute graph, the GPU's minimum, two 'buffer' layers and, on the first GPU that qualifies, the projector."""

    releases: str
    largest_layer: bool  # the buffer layer is the largest layer group (0.7.0) rather than the first block
    projector_graph_on_first: bool  # the projector's graph counts on the first GPU, not only its weights


# oldest first; a log that names no release is judged by every rule that explains where its layers went
_PLACEMENT_RULES = (
    _PlacementRule("≤0.6.8", largest_layer=False, projector_graph_on_first=True),
    _PlacementRule("0.7.0", largest_layer=True, projector_graph_on_first=True),
    _PlacementRule("0.7.1+", largest_layer=False, projector_graph_on_first=False),
)


def _gib_setting(s: Startup, key: str) -> float:
    value = s.settings.get(key)
    return value if isinstance(value, float) else 0.0


def _placement_need(s: Startup, rule: _PlacementRule, first: bool) -> tuple[float, dict[str, float]]:
    """What a GPU must have free for ollama to place one layer on it, and its terms (GiB)."""
    blocks = max(1, (_int(s, "n_layers_offloadable") or 2) - 1)
    block = _gib_setting(s, "ollama_memory_weights_repeating_gib") / blocks
    buffer = max(block, _gib_setting(s, "ollama_memory_weights_nonrepeating_gib")) if rule.largest_layer else block
    buffer += _gib_setting(s, "ollama_memory_required_kv_gib") / blocks
    projector = 0.0
    if first:
        projector = _gib_setting(s, "ollama_projector_weights_gib") + (
            _gib_setting(s, "ollama_projector_graph_gib") if rule.projector_graph_on_first else 0.0)
    library = str(s.settings.get("ollama_library") or "cuda")
    terms = {"graph": max(_gib_setting(s, "ollama_memory_graph_partial_gib"), _gib_setting(s, "ollama_memory_graph_full_gib")),
             "minimum": OLLAMA_MINIMUM_GIB.get(library, OLLAMA_MINIMUM_DEFAULT_GIB), "layers": 2 * buffer,
             "projector": projector, "overhead": _gib_setting(s, "ollama_memory_gpu_overhead_gib")}
    return sum(terms.values()), terms


def _ollama_unused_gpus(s: Startup) -> Finding | None:
    """A GPU ollama's plan gave no layer: the room its placement rule wants there, against what it had free."""
    available = s.settings.get("ollama_memory_available_list_gib")
    if not isinstance(available, list) or not available or not _gib_setting(s, "ollama_memory_graph_partial_gib"):
        return None
    split = s.settings.get("ollama_layers_split")
    offloaded = _int(s, "n_gpu_layers_offloaded")
    counts = split if isinstance(split, list) and len(split) == len(available) else (
        [offloaded] if len(available) == 1 and offloaded is not None else None)
    if counts is None or all(c for c in counts):
        return None
    total = _int(s, "n_layers_offloadable")
    lines, needs = [], []
    for i, (free, count) in enumerate(zip(available, counts, strict=True)):
        if count:
            continue
        first = not any(counts[:i])  # no earlier GPU took layers: this one would carry the projector
        fitting = []
        for rule in _PLACEMENT_RULES:
            need, terms = _placement_need(s, rule, first)
            if need > free:  # the rules that explain this GPU getting nothing
                fitting.append((rule, need, terms))
        if not fitting:
            continue
        rule, need, terms = fitting[-1]  # the newest rule that explains it
        needs.append(need)
        parts = [f"the compute graph {terms['graph']:,.2f} GiB", f"the GPU's minimum {terms['minimum'] * 1024:,.0f} MiB",
                 f"two of its largest layers {terms['layers']:,.2f} GiB"]
        if terms["projector"]:
            parts.append(f"the vision projector {terms['projector']:,.2f} GiB (it goes on the first GPU)")
        if terms["overhead"]:
            parts.append(f"OLLAMA_GPU_OVERHEAD {terms['overhead']:,.2f} GiB")
        others = "".join(f"; {r.releases}'s rule wants ≈ {n:,.2f} GiB, also more" for r, n, _ in fitting[:-1])
        lines.append(f"GPU {i} has {free:,.1f} GiB available: too little for the minimum ollama's placement wants "
                     f"there before it puts one layer on it, ≈ {need:,.2f} GiB ({', '.join(parts)}, by ollama "
                     f"{rule.releases}'s rule{others}), so it got no layer.")
    if not lines:
        return None
    placed = sum(counts)
    head = f"{placed}/{total} layers on the GPUs" if total else f"{placed} layers on the GPUs"
    detail = (" ".join(lines) + " The graph and the layers' KV share shrink with a smaller num_ctx (or "
              "num_batch); the projector and the largest layer do not, so a GPU this small may never take a layer "
              "of this model.")
    worst = max(needs)
    return Finding("ollama-gpu-unused", "warning",
                   f"{head}: a GPU got none (it has less than the ≈ {worst:,.2f} GiB ollama wants there)", detail)


def _ollama_too_small(s: Startup) -> Finding | None:
    """ollama's scheduler skipped a GPU: the room it wants before it places one layer there (the compute graph,
    the GPU's minimum, two layers and, on the first GPU, the projector) is more than the GPU has free. The graph
    is sized for every parallel slot's context, so a first attempt with several slots can fail where one fits."""
    skipped = [w for w in s.warnings if w.get("code") == "ollama-gpu-too-small"]
    if not skipped:
        return None
    w = max(skipped, key=lambda x: x.get("available_gib") or 0.0)  # the roomiest GPU it still could not use
    graph = max(w.get("partial_offload_gib") or 0.0, w.get("full_offload_gib") or 0.0)
    need = (w.get("gpu_zero_overhead_gib") or 0.0) + graph + (w.get("minimum_gib") or 0.0) + 2 * (w.get("layer_size_gib") or 0.0)
    avail = w.get("available_gib")
    gpu = w.get("gpu") or "the GPU"
    if avail is None or not graph:
        return None
    detail = (f"ollama's compute-graph estimate alone is {graph:,.1f} GiB (partial_offload), more room than {gpu}'s "
              f"{avail:,.1f} GiB available; with the GPU minimum, two layers and the first GPU's projector it wants "
              f"{need:,.1f} GiB before it places one layer there, so no layer goes to that GPU.")
    slots, ctx = _int(s, "n_slots"), _int(s, "n_ctx_slot")
    sug = None
    if slots and slots > 1:
        per = f" of num_ctx {ctx:,}" if ctx else ""
        detail += (f" The graph and the context windows are sized for {slots} parallel slots{per} each: with "
                   "OLLAMA_NUM_PARALLEL unset ollama first tries several slots when VRAM looks ample, then retries "
                   "with one, which is the load that follows. Set OLLAMA_NUM_PARALLEL=1 to start there (or a smaller "
                   "num_ctx); more parallel slots only make it larger.")
        sug = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1, note="one context window: the graph and KV cache of one slot")
    else:
        detail += " A smaller num_ctx (the graph and KV cache scale with it) or a smaller num_batch shrinks it."
    return Finding("ollama-gpu-too-small", "warning",
                   f"No layer fits on {gpu}: ollama wants {need:,.1f} GiB there, {avail:,.1f} GiB is available",
                   detail, sug)


def findings(s: Startup) -> list[Finding]:
    _drop_aggregate_noise(s)
    unused_gpu = _ollama_unused_gpus(s)
    out = [f for f in (_failure(s), _recovered(s), _kv_ahead(s), _kv_cost(s), _slots(s), _train_context(s),
                       unused_gpu, _offload(s, unused_gpu), _compute(s), _ollama_devices(s), _pinned(s),
                       _ollama_too_small(s)) if f is not None]
    return out
