"""llama.cpp findings: what -c, -np, -ngl, the cache types and -ub cost, and why a start failed (a server that
embeds the runner, ollama, gets the same findings in its own knobs: ``Flags``, ``Host``).

llama.cpp does not size its KV cache from free memory: the cache is exactly -c cells (padded), so
every finding is phrased as "this flag costs that many MiB" rather than as a budget fraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvscope.core.startup import Finding, Startup, Suggestion, finite_number
from kvscope.engines.llamacpp import rules
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts, LlamaRankFacts
from kvscope.engines.llamacpp.finish import AGGREGATE_RANK, allocated_gib, cache_shape, gpu_ranks

BIG_COMPUTE_GIB = 1.0  # compute buffers above this per device are worth a word


@dataclass(frozen=True)
class Flags:
    """The knobs advice names, as the user sets them where the runner is launched: llama.cpp's flags here; a
    server that embeds the runner (ollama) names its own options for the same settings."""

    ctx: str = "-c"  # the whole cache's cells
    slots: str = "-np"
    gpu_layers: str = "-ngl"
    ubatch: str = "-ub"
    cache_types: str = "--cache-type-k/--cache-type-v"
    cache_types_text: str = "--cache-type-k/-v"  # as a sentence names them
    cache_k: str = "--cache-type-k"
    cache_v: str = "--cache-type-v"
    flash_attn: str = "-fa"
    no_kv_offload: str | None = "--no-kv-offload"  # keep the KV cache in host memory
    tensor_split: str | None = "--tensor-split"
    runner: str = "llama.cpp"
    cells_are: str | None = None  # what sets the cache's cell count when it is not ctx alone (ollama: × slots)

    def cells(self, n: int) -> str:
        """The cache's cell count as the user sets it: '-c 8,192 cells', '8,192 cells (num_ctx × …)'."""
        return f"{n:,} cells ({self.cells_are})" if self.cells_are else f"{self.ctx} {n:,} cells"


LLAMA = Flags()


class Host:
    """What a server that embeds the runner adds to its findings (ollama's scheduler estimates); llama.cpp
    itself adds nothing. Each hook returns None where it has nothing to say."""

    def slots(self, s: Startup, n_ctx: int, slots: int, each: int) -> Finding | None:
        return None

    def offload(self, s: Startup, done: int, total: int, per_layer: float, weights: float, detail: str,
                unused_gpu: Finding | None) -> tuple[Finding | None, str, Suggestion | None] | None:
        """(a finding that replaces the offload one, or None; the detail; the suggestion) from its own estimate."""
        return None

    def compute_oom(self, s: Startup, size_mib: float | None) -> tuple[str, Suggestion | None]:
        return "", None

    def weights_gib(self, s: Startup) -> float:
        return 0.0

    def gpu_free_gib(self, s: Startup) -> float | None:
        return None


LLAMA_HOST = Host()


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


def _element_bytes(s: Startup, per_cell: float) -> float | None:
    """Bytes per K/V element implied by a cell's bytes, 2 × layers × KV width: 4 (f32) or 2 (f16) when exact."""
    layers, width = _int(s, "n_layer"), _int(s, "n_embd_k_gqa") or _int(s, "n_embd")
    if not layers or not width:
        return None
    element = per_cell / (2 * layers * width)
    return element if element in (2.0, 4.0) else None


def _kv_cost(s: Startup, fl: Flags) -> Finding | None:
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
                       f"The log does not print {what}, so the cost per token is unknown; {fl.runner} allocates the "
                       f"whole cache ({fl.ctx} cells) at start, whatever the requests use.")
    per_cell = mib * rules.MIB / tokens
    title = f"KV cache: {tokens:,} cells × {per_cell:,.0f} B = {mib:,.2f} MiB ({types}) on {where}"
    if cache.get("name") != "target":
        return Finding("llamacpp-kv-cost", "info", title,
                       f"The {cache.get('name')} cache keeps {tokens:,} cells whatever {fl.ctx} is (the window each sequence "
                       "needs, padded): it does not grow with the context.")
    detail = (f"{fl.runner} allocates the whole cache at start: {fl.cells(tokens)}, whatever the requests "
              f"use. Each 1,024 tokens of {fl.ctx} cost {per_cell * 1024 / rules.MIB:,.1f} MiB.")
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
        flags = " ".join(f"{flag} q8_0" for flag, size in ((fl.cache_k, size_k), (fl.cache_v, size_v)) if size > q8)
        if fl.cache_k == fl.cache_v:
            flags = f"{fl.cache_k}=q8_0"
        detail += (f" With {flags} the same {fl.ctx} takes ≈ {after_mib:,.1f} MiB "
                   f"(q8_0 stores 32 elements in 34 bytes), or the same memory holds ≈ {int(tokens * mib / after_mib):,} cells.")
        same = fl.cache_k == fl.cache_v  # one setting for both (ollama): its values are one type
        suggestion = Suggestion(fl.cache_types, k_type if same else f"{k_type}/{v_type}",
                                "q8_0" if same else f"{new_k}/{new_v}",
                                kv_tokens_after=int(tokens * mib / after_mib),
                                note=f"a quantized V cache needs flash attention ({fl.flash_attn})")
    return Finding("llamacpp-kv-cost", "info", title, detail, suggestion)


def _slots(s: Startup, fl: Flags, host: Host) -> Finding | None:
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
                       f"With kv_unified the {slots} slots ({fl.slots} {slots}) draw from the same {n_ctx:,} cells: one request "
                       f"may use up to {per_seq or n_ctx:,} tokens, but together they cannot hold more than {n_ctx:,}.")
    each = per_seq or n_ctx // slots
    hosted = host.slots(s, n_ctx, slots, each)
    if hosted is not None:
        return hosted
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


def _train_context(s: Startup, fl: Flags) -> Finding | None:
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
                   f"{fl.ctx} {want:,}.")
    cache = _target_cache(s)
    if cache and n_ctx and want > n_ctx:
        extra_mib = _cache_gib(cache) * 1024 * (want - n_ctx) / n_ctx
        detail += f" That would cost ≈ {extra_mib:,.0f} MiB more KV cache (at the current cache types)."
    return Finding("llamacpp-context-below-training", "info", f"Context {per_seq:,} < training context {train:,}", detail,
                   Suggestion(fl.ctx, n_ctx or per_seq, want, kv_tokens_after=want))


def _offload(s: Startup, fl: Flags, host: Host, unused_gpu: Finding | None) -> Finding | None:
    """Layers left on the CPU, and whether the GPUs could take them: each layer's share of the weights
    (all model buffers, host ones included, over the layer count) against the GPU memory the log shows."""
    done, total = _int(s, "n_gpu_layers_offloaded"), _int(s, "n_layers_offloadable")
    if done is None or not total or done >= total:
        return None
    weights = sum(r.weights_gib or 0.0 for r in s.ranks if r.rank != AGGREGATE_RANK)
    weights = weights or host.weights_gib(s)
    detail = f"{total - done} layers run on the CPU from host memory, which dominates token latency."
    suggestion: Suggestion | None = Suggestion(fl.gpu_layers, done, total)
    if s.setting("output_layer_on_cpu") is True and total - done == 1:
        return Finding("llamacpp-output-layer-on-cpu", "info",
                       f"{done}/{total} layers on the GPU: the one left on the CPU is the output layer",
                       f"All {done} repeating layers are on the GPU; the output layer (the vocabulary projection, often "
                       "far larger than one repeating layer, several GB for large vocabularies) did not fit and runs "
                       "on the CPU from host memory, which is where the CPU share of the work comes from. A smaller "
                       f"context ({fl.ctx}), a smaller quantization or more VRAM lets it move to the GPU.")
    if weights:
        per_layer = weights / total
        need = per_layer * (total - done)
        detail += (f" The weights are {weights:,.1f} GiB, ≈ {per_layer:,.2f} GiB a layer: the {total - done} layers "
                   f"on the CPU need ≈ {need:,.1f} GiB more GPU memory, plus their share of the KV cache.")
        suggestion = Suggestion(fl.gpu_layers, done, total, note=f"only with ≈ {need:,.1f} GiB more free on the GPUs")
        free = _gpu_free_gib(s, host)
        hosted = host.offload(s, done, total, per_layer, weights, detail, unused_gpu)
        if hosted is not None:
            replaced, detail, suggestion = hosted
            if replaced is not None:
                return replaced
        elif free is not None:
            used = sum(allocated_gib(r) for r in gpu_ranks(s))
            kv_per_layer = sum(_cache_gib(c) for c in (LlamaCapacityFacts(s.capacity).kv_caches or [])) / total
            fits = max(0, min(total - done, int((free - used) // (per_layer + kv_per_layer))))
            detail += f" The log shows {free:,.1f} GiB free on the GPUs before loading, {used:,.1f} of it used now."
            if fits < total - done:
                detail += (f" That is room for ≈ {fits} more layer(s), not all: a smaller quantization, more GPUs "
                           f"or a shorter {fl.ctx} are the ways to put the whole model on the GPU.")
                suggestion = Suggestion(fl.gpu_layers, done, done + fits, note="what the free memory shown could hold") \
                    if fits else None
    else:
        detail += (f" Raise {fl.gpu_layers} if the GPU has room (each layer's weights plus its share of the KV cache "
                   "move with it).")
    return Finding("llamacpp-partial-offload", "warning", f"Only {done}/{total} layers are on the GPU", detail,
                   suggestion)


def _gpu_free_gib(s: Startup, host: Host) -> float | None:
    """Free GPU memory before the load, summed over the GPUs: llama.cpp's "using device … MiB free" lines, or
    what the embedding server counted as available."""
    free = [r.pre_load_free_gib for r in gpu_ranks(s) if r.pre_load_free_gib is not None]
    return sum(free) if free else host.gpu_free_gib(s)


def _ubatch(s: Startup, fl: Flags) -> Suggestion:
    """Halve the micro-batch; when the log does not print it, say so rather than pretend to know it."""
    ub = _int(s, "n_ubatch") or (_int(s, "n_batch") if fl is not LLAMA else None)
    if ub:
        return Suggestion(fl.ubatch, ub, max(32, ub // 2), note="halves the activation part of the compute buffers")
    return Suggestion(fl.ubatch, None, 256, note=f"{fl.ubatch} is not in the log ({fl.runner}'s default is 512); halve "
                      "what you run with")


def _compute(s: Startup, fl: Flags) -> Finding | None:
    heavy = [(r.rank, g) for r in gpu_ranks(s) if (g := LlamaRankFacts(r).compute_gib) is not None and g >= BIG_COMPUTE_GIB]
    if not heavy:
        return None
    total = sum(g for _, g in heavy)
    copies = _int(s, "pipeline_parallel_copies")
    detail = (f"{len(heavy)} device(s) reserve {total:,.2f} GiB of compute buffers "
              f"(largest {max(g for _, g in heavy):.2f} GiB on {max(heavy, key=lambda x: x[1])[0]}). They are sized for "
              f"the worst-case batch of {fl.ubatch} tokens over the full context, so they shrink with a smaller "
              f"{fl.ubatch} (and {fl.ctx}).")
    if copies and copies > 1:
        detail += f" Pipeline parallelism keeps {copies} copies of them (GGML_SCHED_MAX_COPIES lowers that)."
    cache = _target_cache(s)
    if cache and cache.get("gib") and total > cache["gib"]:
        detail += f" That is more than the KV cache itself ({cache['gib']:.2f} GiB)."
    return Finding("llamacpp-compute-buffers", "info", f"Compute buffers: {total:,.2f} GiB on the GPUs", detail,
                   _ubatch(s, fl))


def _allocation_limit(s: Startup, size: str, device: str, fl: Flags) -> Finding:
    """Vulkan refused one buffer larger than its per-allocation limit: free memory was not the problem."""
    quant_k = next((str(c.get("k_type")) for c in (LlamaCapacityFacts(s.capacity).kv_caches or [])
                    if str(c.get("k_type") or "f16") not in ("f16", "bf16", "f32")), None) or (
        str(s.setting("type_k")) if s.setting("type_k") not in (None, "f16", "bf16", "f32") else None)
    detail = (f"Not out of VRAM: one {size} compute buffer exceeds the Vulkan device's per-allocation limit "
              "(maxMemoryAllocationSize / maxBufferSize, often 2–4 GiB, far below its memory), so the driver refuses "
              "that single buffer whatever is free. The compute buffer grows with -ub and the context")
    sug = _ubatch(s, fl)
    if quant_k:
        detail += (f"; with a quantized K cache (-ctk {quant_k}) it also holds dequantized copies of K, which is what "
                   "pushes it past the limit. Keep K in f16 (drop -ctk / --cache-type-k), or keep the KV cache in host "
                   "memory (-nkvo / --no-kv-offload), or lower -ub so each buffer is smaller")
        sug = Suggestion(fl.cache_k, quant_k, "f16", note="the compute buffer no longer holds dequantized K; "
                         "the KV cache grows by the f16 K", alternatives=[a for a in (sug,) if a is not None])
    else:
        detail += ": lower -ub (and -b) or -c so each buffer stays under the limit, or use the CUDA / ROCm backend"
    return Finding("llamacpp-allocation-limit", "error",
                   f"Startup failed: a {size} buffer exceeds the per-allocation limit of {device}", detail + ".", sug)


def _failure(s: Startup, fl: Flags, host: Host) -> Finding | None:
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
                       f"it, or leave room: offload fewer layers ({fl.gpu_layers}), lower {fl.ctx} or quantize the KV "
                       "cache.", _ubatch(s, fl))
    if f.kind in ("compute-buffer-oom", "not-enough-memory") and any(
            w.get("code") == "per-allocation-limit" for w in s.warnings):
        return _allocation_limit(s, size, device, fl)
    if f.kind in ("compute-buffer-oom", "not-enough-memory"):
        copies = _int(s, "pipeline_parallel_copies")
        detail = (f"{fl.runner} could not allocate {size} of compute buffer on {device} after the weights and the KV "
                  f"cache were placed. The compute buffer grows with {fl.ubatch} (micro-batch) and with the context.")
        if copies and copies > 1:
            detail += (f" Pipeline parallelism was on with {copies} copies: each device holds {copies} compute "
                       "buffers; GGML_SCHED_MAX_COPIES=1 or --split-mode row/none avoids that.")
        hosted_text, fewer = host.compute_oom(s, mib)
        if hosted_text:
            detail += hosted_text
            return Finding("llamacpp-compute-oom", "error", f"Startup failed: {size} compute buffer did not fit on {device}",
                           detail, fewer)
        split = f" / {fl.tensor_split}" if fl.tensor_split else ""
        batch = " (and -b)" if fl is LLAMA else ""
        detail += f" Lower {fl.ubatch}{batch}, lower {fl.ctx}, or move a layer off that device ({fl.gpu_layers}{split})."
        return Finding("llamacpp-compute-oom", "error", f"Startup failed: {size} compute buffer did not fit on {device}",
                       detail, _ubatch(s, fl))
    if f.kind == "kv-cache-oom":
        return _kv_oom(s, f, device, n_ctx, fl)
    if f.kind == "weights-oom":
        return _weights_oom(s, f, device, fl)
    if f.data.get("cause") == "quantized-v-needs-flash-attn":
        return Finding("llamacpp-v-quant-needs-fa", "error", "Startup failed: a quantized V cache needs flash attention",
                       f"Not memory: {fl.runner} refuses a quantized V cache ({fl.cache_v} q8_0, q4_0, …) unless "
                       f"flash attention is on, and stops before allocating anything. Turn it on ({fl.flash_attn}), "
                       "or keep V in f16.",
                       Suggestion(fl.flash_attn, False, True, note="flash attention on: the quantized V cache is allowed",
                                  alternatives=[Suggestion(fl.cache_v, None, "f16",
                                                           note="an f16 V cache needs no flash attention")]))
    return Finding("llamacpp-startup-failed", "error", f"Startup failed ({f.kind})", f.message)


# what a GPU keeps beside its share of the weights: the CUDA context, the compute graph and a small KV cache
DEVICE_RESERVE_GIB = 1.5


def _weights_oom(s: Startup, f: Any, device: str, fl: Flags) -> Finding:
    """A weights buffer the GPU refused: fewer layers there. The buffer asked for against the device's total says how
    many of the layers placed there fit (the layers of one model are alike in size, its output layer aside)."""
    layers = _int(s, "n_gpu_layers_offloaded")
    mib, raw = finite_number(f.data.get("alloc_mib")), finite_number(f.data.get("alloc_bytes"))
    asked = mib / 1024 if mib is not None else raw / (1 << 30) if raw is not None else None
    ref = s.reference_rank
    total = (ref.total_gib if ref is not None else None) or finite_number(s.assumptions.get("gpu_total_gib"))
    spread = f", or spread them with {fl.tensor_split}." if fl.tensor_split else "."
    detail = f"Lower {fl.gpu_layers} so fewer layers go to the GPU{spread}"
    share = (total - DEVICE_RESERVE_GIB) / asked if asked and total and total > DEVICE_RESERVE_GIB else None
    sug = None
    if share is not None and share < 1:
        detail = (f"{asked:.2f} GiB of weights were asked for on {device}, a {total:.2f} GiB GPU that also needs room for "
                  f"its context and compute graph: about {share:.0%} of the layers placed there fit. " + detail)
        if layers:
            to = max(0, math.floor(layers * share))
            sug = Suggestion(fl.gpu_layers, layers, to, note=f"{to} of the {layers} layers on the GPU, the rest on the CPU")
        else:
            sug = Suggestion(fl.gpu_layers, None, None, note=f"about {share:.0%} of the layers it placed on {device}")
    elif layers:
        sug = Suggestion(fl.gpu_layers, layers, max(0, layers - 4))
    return Finding("llamacpp-weights-oom", "error", f"Startup failed: the model weights did not fit on {device}", detail, sug)


WORKING_CONTEXT = 8192  # a context most chats fit in, offered when the one that failed was tens of thousands


def _kv_oom(s: Startup, f, device: str, n_ctx: int | None, fl: Flags) -> Finding:
    """The KV buffer itself was refused: its size, the context that asked for it, and a context that fits."""
    size = f.data.get("alloc_bytes")
    gib = size / (1 << 30) if size else None
    asked = f" ({size:,} B = {gib:,.2f} GiB)" if size else ""
    detail = (f"{fl.runner} could not allocate the KV cache{asked} on {device}: it is {fl.ctx} cells × bytes per cell, "
              "allocated in full at start.")
    train = _int(s, "n_ctx_train")
    if n_ctx:
        default = f" — the model's training context, which {fl.runner} uses when {fl.ctx} is not given" if (
            train and n_ctx == train) or n_ctx >= 131072 else ""
        detail += f" The context (n_ctx) was {n_ctx:,} tokens{default}."
    sug = None
    if n_ctx:
        to = WORKING_CONTEXT if n_ctx > 2 * WORKING_CONTEXT else max(512, n_ctx // 2)
        after = f"; the KV cache then takes ≈ {gib * to / n_ctx:,.2f} GiB" if gib else ""
        sug = Suggestion(fl.ctx, n_ctx, to, kv_tokens_after=to,
                         note=f"a context sized to the requests instead of {n_ctx:,}{after}")
        host_ram = f" or keep it in host memory ({fl.no_kv_offload})" if fl.no_kv_offload else ""
        detail += (f" Set {fl.ctx} to what the requests need (e.g. {fl.ctx} {to:,}"
                   f"{after.replace('; the KV cache then takes', ':')}); or quantize the cache ({fl.cache_types_text} q8_0), "
                   f"offload fewer layers ({fl.gpu_layers}){host_ram}.")
    else:
        sug = Suggestion(fl.cache_types, "f16", "q8_0")
        host_ram = f" or use {fl.no_kv_offload}" if fl.no_kv_offload else ""
        detail += (f" Lower {fl.ctx}, quantize it ({fl.cache_types_text} q8_0), offload fewer layers ({fl.gpu_layers})"
                   f"{host_ram}.")
    what = f"the {gib:,.2f} GiB KV cache" if gib else "the KV cache"
    ctx = f" for n_ctx {n_ctx:,}" if n_ctx else ""
    return Finding("llamacpp-kv-oom", "error", f"Startup failed: {what}{ctx} did not fit on {device}", detail, sug)


def _recovered(s: Startup, fl: Flags) -> Finding | None:
    w = next((w for w in s.warnings if w.get("code") == "compute-oom-recovered"), None)
    if w is None:
        return None
    mib = w.get("alloc_mib")
    size = f"{mib:,.2f} MiB" if mib else "a"
    return Finding("llamacpp-pipeline-parallelism-dropped", "warning",
                   f"A {size} compute buffer did not fit on {w.get('device') or 'a GPU'}; llama.cpp went on without "
                   "pipeline parallelism",
                   "The first compute-buffer reservation (one copy per pipeline stage) ran out of memory, and llama.cpp "
                   "retried with a single copy. The server runs, but multi-GPU prompt processing is slower. Lower "
                   f"{fl.ubatch} or {fl.ctx} to get pipeline parallelism back.", _ubatch(s, fl))


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


def _kv_ahead(s: Startup, fl: Flags) -> Finding | None:
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
    why = f" (the model's training context: {fl.ctx} was not given)" if (train and n_ctx == train) or n_ctx >= 131072 else ""
    detail = (f"At n_ctx {n_ctx:,} tokens{why} the KV cache takes {n_ctx:,} × {bpt:,.0f} B = {kv_mib:,.1f} MiB "
              f"({kv_mib / 1024:,.2f} GiB): {shape.layers} layers × ({shape.n_embd_k_gqa:,} K + {shape.n_embd_v_gqa:,} V) "
              f"× {types[0]}/{types[1]}, from {shape.source}. {fl.runner} allocates it in full at start.")
    ws = s.settings.get("metal_working_set_mib")
    weights = sum(r.weights_gib or 0.0 for r in gpu_ranks(s)) * 1024
    sug = None
    if isinstance(ws, float) and ws > 0 and kv_mib + weights > ws:
        room = ws - weights - COMPUTE_ALLOWANCE_MIB
        fit = int(room * rules.MIB // bpt) if room > 0 else 0
        to = 1 << (fit.bit_length() - 1) if fit >= 512 else 0
        detail += (f" With the {weights:,.0f} MiB of weights that exceeds the {ws:,.0f} MiB Metal working set "
                   "(recommendedMaxWorkingSetSize): the context cannot be allocated, or macOS aborts with "
                   "'Insufficient Memory'.")
        if to:
            detail += f" A {fl.ctx} of {to:,} takes {to * bpt / rules.MIB:,.0f} MiB and fits."
            sug = Suggestion(fl.ctx, n_ctx, to, kv_tokens_after=to, note="a context that fits the working set")
        return Finding("llamacpp-kv-will-not-fit", "error",
                       f"n_ctx {n_ctx:,} needs a {kv_mib / 1024:,.2f} GiB KV cache: more than the device holds", detail, sug)
    return Finding("llamacpp-kv-ahead", "info", f"n_ctx {n_ctx:,} → KV cache {kv_mib / 1024:,.2f} GiB", detail)


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


def findings(s: Startup, fl: Flags = LLAMA, host: Host = LLAMA_HOST,
             unused_gpu: Finding | None = None) -> list[Finding]:
    """The runner's findings, in ``fl``'s knobs; ``host`` adds what the server that embeds the runner knows."""
    _drop_aggregate_noise(s)
    return [f for f in (_failure(s, fl, host), _recovered(s, fl), _kv_ahead(s, fl), _kv_cost(s, fl),
                        _slots(s, fl, host), _train_context(s, fl), unused_gpu, _offload(s, fl, host, unused_gpu),
                        _compute(s, fl), _pinned(s)) if f is not None]
