"""Turn an assembled llama.cpp startup into a per-device ledger: buffers, KV caches, capacity, checks.

The line parser leaves three kinds of raw material the contract does not know: one rank extra per
buffer line (``_buf|kind|buffer|n``), KV pools named by cache (``kv#0``, ``rs#1``) on the devices, and
the caches' summary lines on a pseudo rank. Here they become what a reader expects: per-device
weights / compute / output figures, pools named ``target`` / ``swa`` / ``draft`` / ``recurrent``,
one pool per cache per device and, when a cache spans several devices, its whole-cache summary on an
``(all devices)`` rank (so per-device sums never count a cache twice).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from kvscope.core.provenance import How
from kvscope.core.startup import KvPool, LedgerRow, LedgerRows, Rank, Reconciliation, Startup
from kvscope.engines.base import MAX_PLAUSIBLE
from kvscope.engines.llamacpp import rules
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts, LlamaRankFacts
from kvscope.engines.llamacpp.lines import BUF_PREFIX, HOST_RANK, SUMMARY_RANK, failure_events
from kvscope.model.catalog import load_architecture

AGGREGATE_RANK = "(all devices)"
KIND_ORDER = ("target", "swa", "draft", "recurrent")
_GPU_LABEL = re.compile(r"^([A-Za-z]+)(\d+)$")
_SPECIFIC = ("compute-buffer-oom", "kv-cache-oom", "weights-oom")
_PHASES = ("compute-buffer-oom", "kv-cache-oom")


def finish(s: Startup) -> None:
    """Fold buffers and caches, fill capacity, settle the failure, reconcile, write ledger rows."""
    for r in s.ranks:
        _fold_buffers(r)
    caches = _fold_caches(s)
    _order_ranks(s)
    _capacity(s, caches)
    _settle_failure(s)
    s.era = era(s)
    _reconcile(s, caches)
    for r in s.ranks:
        r.ledger = ledger_rows(s, r)


def gpu_ranks(s: Startup) -> list[Rank]:
    """The GPU devices: every rank but host memory and the whole-cache summary."""
    return [r for r in s.ranks if r.rank not in (HOST_RANK, AGGREGATE_RANK)]


def allocated_gib(r: Rank) -> float:
    """What the runner put on one device: weights, its KV pools, compute buffers."""
    return (r.weights_gib or 0.0) + sum(p.gib or 0.0 for p in r.kv_pools) + (LlamaRankFacts(r).compute_gib or 0.0)


# --- buffers -----------------------------------------------------------------------------------------


def _fold_buffers(r: Rank) -> None:
    """Sum the per-line buffer figures into ``<kind>_buffers_mib`` / ``<kind>_gib`` and weights_gib."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lines: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    f = LlamaRankFacts(r)
    for key in [k for k in f.names() if k.startswith(BUF_PREFIX)]:
        value = f.take(key)
        kind, buffer, _ = key[len(BUF_PREFIX):].split("|", 2)
        if isinstance(value, (int, float)):
            sums[kind][buffer] += value
            lines[kind][buffer].append(value)
            counts[kind] += 1
    for kind, per_buffer in sums.items():
        f.put(f"{kind}_buffers_mib", {k: round(v, 2) for k, v in per_buffer.items()})
        repeated = {k: [round(v, 2) for v in vs] for k, vs in lines[kind].items() if len(vs) > 1}
        if repeated:  # one buffer name on several lines (one per model context): each as printed, beside the sum
            f.put(f"{kind}_buffer_lines_mib", repeated)
        total_gib = sum(per_buffer.values()) / 1024
        if kind == "model":
            if counts[kind] == 1:
                r.weights_gib = total_gib
            else:
                r.set_derived("weights_gib", total_gib)
        else:
            f.put(f"{kind}_gib", total_gib)


# --- KV caches ------------------------------------------------------------------------------------------


def _pool_kind(r: Rank, name: str) -> str:
    return str(LlamaRankFacts(r).take(f"{name}_what") or ("recurrent" if name.startswith("rs#") else "target"))


def _fold_caches(s: Startup) -> list[dict[str, Any]]:
    """Name each cache's pools, merge its summary line, and return one description per cache."""
    summary_rank = next((r for r in s.ranks if r.rank == SUMMARY_RANK), None)
    summaries = {p.name: p for p in summary_rank.kv_pools} if summary_rank else {}
    meta = {k: LlamaRankFacts(summary_rank).get(k) for k in LlamaRankFacts(summary_rank).names()} if summary_rank else {}
    if summary_rank is not None:
        s.ranks.remove(summary_rank)
    buffers: dict[str, list[tuple[Rank, KvPool]]] = defaultdict(list)
    kinds: dict[str, str] = {}
    for r in s.ranks:
        for p in r.kv_pools:
            if "#" in p.name:
                buffers[p.name].append((r, p))
                kinds[p.name] = _pool_kind(r, p.name)
    caches = []
    for name in sorted(set(buffers) | set(summaries), key=lambda n: int(n.split("#")[1])):
        kind = kinds.get(name) or str(meta.get(f"{name}_what") or "target")
        cache = _fold_one(s, name, kind, summaries.get(name), buffers.get(name, []), meta)
        caches.append(cache)
    if caches:
        LlamaCapacityFacts(s.capacity).kv_caches = [{k: v for k, v in c.items() if not k.startswith("_")} for c in caches]
    return caches


def _fold_one(s: Startup, name: str, kind: str, summary: KvPool | None, bufs: list[tuple[Rank, KvPool]],
              meta: dict[str, Any]) -> dict[str, Any]:
    cache: dict[str, Any] = {"name": kind, "devices": [r.rank for r, _ in bufs]}
    for key in ("layers", "cells", "seqs", "streams", "k_type", "v_type", "layout", "r_gib", "s_gib"):
        if meta.get(f"{name}_{key}") is not None:
            cache[key] = meta[f"{name}_{key}"]
    for r, p in bufs:
        p.name = kind
        LlamaRankFacts(r).take(f"{name}_what")
    cache["buffers_gib"] = sum(p.gib or 0 for _, p in bufs) if bufs else None
    if summary is None:
        cache["_pools"] = [p for _, p in bufs]
        return cache
    summary.name = kind
    cache.update(gib=summary.gib, k_gib=summary.k_gib, v_gib=summary.v_gib, dtype=summary.dtype, tokens=summary.tokens,
                 _summary=summary)
    if len(bufs) == 1:
        r, p = bufs[0]
        if p.gib is not None and summary.gib is not None and abs(p.gib - summary.gib) * 1024 > 2 * rules.HALF_CENT_MIB:
            LlamaRankFacts(r).put(f"{kind}_kv_buffer_gib", p.gib)  # allocated buffer (alignment padding included)
        p.gib, p.k_gib, p.v_gib = summary.gib, summary.k_gib, summary.v_gib
        p.dtype, p.tokens = summary.dtype, summary.tokens
        cache["_pools"] = [p]
        return cache
    if not bufs:
        home = _single_device(s)
        if home is not None:
            home.kv_pools.append(summary)
            cache["devices"] = [home.rank]
            cache["_pools"] = [summary]
            return cache
    for _, p in bufs:
        p.dtype, p.tokens = summary.dtype, summary.tokens
    aggregate = s.rank(AGGREGATE_RANK)
    LlamaRankFacts(aggregate).aggregate = True
    aggregate.kv_pools.append(summary)
    cache["_pools"] = [p for _, p in bufs] + [summary]
    return cache


def _single_device(s: Startup) -> Rank | None:
    """The one device of a startup whose KV buffer lines were not logged, if there is only one."""
    devices = [r for r in s.ranks if r.rank not in (HOST_RANK, AGGREGATE_RANK)]
    if len(devices) == 1:
        return devices[0]
    if not s.ranks:
        return s.rank(AGGREGATE_RANK)
    return None


def _order_ranks(s: Startup) -> None:
    """GPUs first (CUDA0, CUDA1, … numerically), then split buffers, the whole-cache rank, then the host."""

    def key(r: Rank) -> tuple[int, str, int]:
        m = _GPU_LABEL.match(r.rank)
        if r.rank == HOST_RANK:
            return (3, "", 0)
        if r.rank == AGGREGATE_RANK:
            return (2, "", 0)
        if m:
            return (0, m.group(1), int(m.group(2)))
        return (1, r.rank, 0)

    s.ranks.sort(key=key)


# --- capacity ---------------------------------------------------------------------------------------------


def _int(s: Startup, key: str) -> int | None:
    value = s.setting(key)
    if isinstance(value, bool):
        return None
    try:
        number = int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None
    # A setting kept as printed text can hold any number of digits (a mangled log): no real count.
    return number if number is None or abs(number) <= MAX_PLAUSIBLE else None


def _target(caches: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((c for c in caches if c["name"] == "target"), None)


def _capacity(s: Startup, caches: list[dict[str, Any]]) -> None:
    """kv_tokens = the cells of the main cache (n_ctx); context_len = what one sequence may use."""
    cap = s.capacity
    # n_ctx as the context prints it; else the cache constructor's kv_size (2024–25), else the sampler's
    # "penalty_last_n to ctx_size" (llama_n_ctx of the same context)
    n_ctx = _int(s, "n_ctx") or _int(s, "kv_size") or _int(s, "ctx_size")
    target = _target(caches)
    cells = target.get("tokens") if target else None
    cap.kv_tokens = cells or n_ctx or cap.kv_tokens
    slots = _int(s, "n_slots") or _int(s, "n_seq_max")
    per_seq = _int(s, "n_ctx_seq") or _int(s, "n_ctx_slot")
    unified = s.setting("kv_unified")
    # ollama's runner never unifies: its --ctx-size is num_ctx × OLLAMA_NUM_PARALLEL, one num_ctx per slot
    private = unified is False or (unified is None and (s.setting("ollama_runner") is True
                                                         or s.setting("slots_from_command") is True))
    if per_seq is None and n_ctx and slots and private:
        per_seq = n_ctx // slots
    cap.context_len = per_seq or n_ctx
    if cap.kv_tokens is None and _int(s, "n_ctx_slot") and slots and unified is False:
        cap.kv_tokens = _int(s, "n_ctx_slot") * slots  # type: ignore[operator]
        LlamaCapacityFacts(cap).mark_derived("kv_tokens")
    cap.max_running_requests = slots or cap.max_running_requests
    if _int(s, "n_ctx_train"):
        LlamaCapacityFacts(cap).n_ctx_train = _int(s, "n_ctx_train")
    for p in (target or {}).get("_pools", []):
        if p.tokens is None:
            p.tokens = cap.kv_tokens


# --- failure ------------------------------------------------------------------------------------------------


def _settle_failure(s: Startup) -> None:
    """Name the phase that failed (the first line is often the bare cudaMalloc one) and drop a failure
    that llama.cpp recovered from by retrying the compute buffers without pipeline parallelism."""
    f = s.failure
    if f is None or f.source is None:
        return
    later = [e for e in s.evidence if e.file == f.source.file and e.line_no > f.source.line_no]
    for e in later:
        for p in failure_events(e.text):
            if p.kind != "failure":
                continue
            d = p.data
            kind = d.get("kind")
            # the context's own line names the phase (KV cache, compute buffers) and wins over the generic
            # alloc_tensor_range line, which KV buffers use as well as weights
            if kind in _PHASES and f.kind not in _PHASES or f.kind not in _SPECIFIC and kind in _SPECIFIC:
                f.data.setdefault("alloc_mib", None)
                f.kind = kind
            if d.get("alloc_bytes") is not None:
                f.data.setdefault("alloc_bytes", d["alloc_bytes"])
            if d.get("device") is not None and (f.data.get("device") is None or f.data.pop("device_guessed", False)):
                f.data["device"] = d["device"]  # a buffer's own name beats a backend guessed from a function name
        if f.kind in _PHASES:
            break
    if f.data.get("alloc_mib") is None:
        f.data.pop("alloc_mib", None)
    retry = [w for w in s.warnings if w.get("code") == "compute-retry-without-pipeline" and w.get("line", 0) > f.source.line_no]
    if retry:
        after = [e for e in s.evidence if e.file == f.source.file and e.line_no > retry[-1]["line"]]
        fatal = any(p.kind == "failure" for e in after for p in failure_events(e.text))
        if not fatal:
            s.warnings.append({"code": "compute-oom-recovered", "message": f.message, "kind": f.kind,
                               "line": f.source.line_no, **f.data})
            s.failure = None


# --- era ----------------------------------------------------------------------------------------------------


_ERAS = (  # (marker in the log text, era label), newest first
    ("sched_reserve:", "2026 (sched_reserve, llama_kv_cache)"),
    ("llama_kv_cache: ", "late 2025 (llama_kv_cache)"),
    ("llama_kv_cache_unified", "mid 2025 (llama_kv_cache_unified)"),
    ("llama_context:", "2025 (llama_context)"),
    ("llama_init_from_model:", "early 2025 (llama_init_from_model)"),
    ("KV buffer size", "2024 (llama_new_context_with_model, ggml-backend buffers)"),
    ("output buffer size", "2024 (llama_new_context_with_model, ggml-backend buffers)"),  # from Mar 2024
    (" compute buffer size", "2024 (llama_new_context_with_model, ggml-backend buffers)"),
    ("KV self size", "Dec 2023 - Jan 2024 (KV self size, pre ggml-backend)"),
    ("kv self size", "2023 (kv self size in MB)"),
    ("llama_new_context_with_model:", "2023-2024 (llama_new_context_with_model)"),
)
_IK_MARKERS = ("c^KV", "CUDA_Split KV buffer", "KV cache size per device", "mla_attn", "K-only (")


def era(s: Startup) -> str | None:
    """A label for the log format generation, from which function prefixes the lines carry."""
    text = "\n".join(e.text for e in s.evidence)
    label = next((name for marker, name in _ERAS if marker in text), None)
    if label and any(m in text for m in _IK_MARKERS):
        label = f"ik_llama.cpp fork, {label}"
    compact = re.search(r"^\s*\d+\.\d+\.\d+\.\d+ [EWID] ", text, re.M)
    if compact:
        label = f"{label or 'llama.cpp'}, compact log format"
    return label


# --- reconciliation --------------------------------------------------------------------------------------------


def cache_shape(s: Startup, layers_hint: int | None = None) -> rules.CacheShape | None:
    """Layers and n_embd_{k,v}_gqa from the log (print_info, per-layer lines), else from the model config."""
    k, v = _int(s, "n_embd_k_gqa"), _int(s, "n_embd_v_gqa")
    layers = layers_hint or _int(s, "n_layer")
    if k and v and layers:
        return rules.CacheShape(layers, k, v, "print_info lines")
    top = _int(s, "kv_layer_max_index")
    k, v = _int(s, "kv_layer_n_embd_k_gqa"), _int(s, "kv_layer_n_embd_v_gqa")
    if top is not None and k and v:
        return rules.CacheShape(layers_hint or top + 1, k, v,
                                f"per-layer lines (layers 0…{top}, n_embd_k_gqa = {k}, n_embd_v_gqa = {v})")
    model = s.assumptions.get("model") or s.model
    arch, where = load_architecture(model if isinstance(model, str) else None)
    if arch is None or arch.attention != "mha" or not arch.num_kv_heads or not arch.head_dim:
        return None
    n_layers = layers_hint or arch.full_attention_layers or arch.num_layers
    return rules.CacheShape(n_layers, arch.num_kv_heads * arch.head_dim,
                            arch.num_kv_heads * (arch.v_head_dim or arch.head_dim), where)


def _reconcile(s: Startup, caches: list[dict[str, Any]]) -> None:
    target = _target(caches)
    if target is None or target.get("k_gib") is None or not target.get("k_type"):
        return
    k_mib, v_mib = target["k_gib"] * 1024, (target.get("v_gib") or 0) * 1024
    k_type, v_type = target["k_type"], target.get("v_type") or target["k_type"]
    cells = target.get("tokens") or _int(s, "n_ctx")
    shape = cache_shape(s, target.get("layers"))
    checks: list[str] = []
    ok: list[bool] = []
    _check_sum(target, checks, ok)
    _check_buffers(target, checks, ok)
    _check_cells(s, target, checks, ok)
    bpt = shape.bytes_per_token(k_type, v_type) if shape else None
    rec = Reconciliation(bytes_per_token=None, method="")  # type: ignore[arg-type]  # None: not known
    if shape is not None and bpt is not None:
        rec.bytes_per_token = round(bpt)
        rec.method = (f"llama.cpp rule: cells × {shape.layers} layers × (n_embd_k_gqa {shape.n_embd_k_gqa} × "
                      f"{k_type} + n_embd_v_gqa {shape.n_embd_v_gqa} × {v_type}); shape from {shape.source}")
        rec.architecture = {"layers": shape.layers, "n_embd_k_gqa": shape.n_embd_k_gqa,
                            "n_embd_v_gqa": shape.n_embd_v_gqa, "type_k": k_type, "type_v": v_type}
        if cells:
            _check_shape(shape, cells, k_mib, v_mib, k_type, v_type, checks, ok)
        else:
            _derive_cells(s, rec, shape, k_mib + v_mib, bpt, checks)
    elif cells:
        bpt_logged = (k_mib + v_mib) * rules.MIB / cells
        rec.bytes_per_token = round(bpt_logged)
        rec.method = "bytes per token implied by the KV size line and the cell count (architecture unknown)"
        _check_blocks(k_mib, cells, k_type, "K", target.get("layers"), checks, ok)
        _check_blocks(v_mib, cells, v_type, "V", target.get("layers"), checks, ok)
    elif not checks:
        return
    else:
        rec.method = "KV summary checked against its own parts (cell count and architecture unknown)"
    rec.consistent = all(ok) if ok else None
    rec.detail = "; ".join(checks)
    s.reconciliation = rec


def _check_sum(target: dict[str, Any], checks: list[str], ok: list[bool]) -> None:
    gib, k, v = target.get("gib"), target.get("k_gib"), target.get("v_gib")
    if gib is None or k is None or v is None:
        return
    total, parts = gib * 1024, (k + v) * 1024
    good = abs(total - parts) <= 3 * rules.HALF_CENT_MIB + 1e-9
    ok.append(good)
    checks.append(f"K {k * 1024:.2f} + V {v * 1024:.2f} = {parts:.2f} MiB vs total {total:.2f} MiB → "
                  f"{'matches' if good else 'DOES NOT match'}")


def _check_buffers(target: dict[str, Any], checks: list[str], ok: list[bool]) -> None:
    """Device buffers hold the tensors plus alignment padding: never less, only a little more."""
    bufs, gib = target.get("buffers_gib"), target.get("gib")
    devices = target.get("devices") or []
    if not bufs or gib is None or not devices:
        return
    diff = (bufs - gib) * 1024
    good = -2 * rules.HALF_CENT_MIB <= diff <= max(0.1 * len(devices), 0.001 * gib * 1024)
    ok.append(good)
    checks.append(f"{len(devices)} device buffer(s) sum to {bufs * 1024:.2f} MiB vs {gib * 1024:.2f} MiB of K+V "
                  f"({diff:+.2f} MiB alignment) → {'consistent' if good else 'INCONSISTENT'}")


def _check_cells(s: Startup, target: dict[str, Any], checks: list[str], ok: list[bool]) -> None:
    n_ctx, cells = _int(s, "n_ctx"), target.get("cells")
    if not n_ctx or not cells:
        return
    total = cells * (target.get("streams") or 1)
    good = total == n_ctx
    ok.append(good)
    checks.append(f"cache cells {cells:,} × {target.get('streams') or 1} stream(s) = {total:,} vs n_ctx {n_ctx:,} → "
                  f"{'matches' if good else 'DOES NOT match'}")


def _check_shape(shape: rules.CacheShape, cells: int, k_mib: float, v_mib: float, k_type: str, v_type: str,
                 checks: list[str], ok: list[bool]) -> None:
    for label, printed, predicted in (("K", k_mib, shape.k_mib(cells, k_type)), ("V", v_mib, shape.v_mib(cells, v_type))):
        if predicted is None:
            continue
        good = rules.printed_matches(predicted, printed)
        ok.append(good)
        checks.append(f"{label}: {cells:,} cells × {shape.layers} × {shape.n_embd_k_gqa if label == 'K' else shape.n_embd_v_gqa}"
                      f" × {k_type if label == 'K' else v_type} = {predicted:.3f} MiB, log prints {printed:.2f} → "
                      f"{'matches' if good else 'DOES NOT match'}")


def _derive_cells(s: Startup, rec: Reconciliation, shape: rules.CacheShape, total_mib: float, bpt: float,
                  checks: list[str]) -> None:
    """n_ctx not in the log: the only cell counts whose K+V prints as logged."""
    low, high = rules.tokens_for_bytes(total_mib, bpt)
    rec.kv_tokens_low, rec.kv_tokens_high = low, high
    candidates = [t for t in range(low, high + 1) if t % 256 == 0] or list(range(low, min(high, low + 1) + 1))
    if low <= high and len(candidates) == 1:
        tokens = candidates[0]
        if s.capacity.kv_tokens is None:
            s.capacity.kv_tokens = tokens
            LlamaCapacityFacts(s.capacity).mark_derived("kv_tokens")
        if s.capacity.context_len is None:
            s.capacity.context_len = tokens
            LlamaCapacityFacts(s.capacity).mark_derived("context_len")
        for r in s.ranks:
            for p in r.kv_pools:
                if p.name == "target" and p.tokens is None:
                    p.tokens = tokens
        checks.append(f"n_ctx not logged: {total_mib:.2f} MiB / {bpt:,.0f} B per cell = {tokens:,} cells (derived)")
    else:
        checks.append(f"n_ctx not logged: {total_mib:.2f} MiB / {bpt:,.0f} B per cell → {low:,} … {high:,} cells")


def _check_blocks(mib: float, cells: int, type_name: str, label: str, layers: int | None, checks: list[str],
                  ok: list[bool]) -> None:
    """Without the architecture: the printed size must be a whole number of the type's blocks per cell
    (and, when the summary names the layer count, a whole number per layer)."""
    implied = rules.elements_per_token(mib, cells, type_name)
    if implied is None:
        return
    elements, spread = implied
    whole = rules.whole_blocks(elements, spread, type_name)
    if whole is None:
        return
    per_layer = ""
    if layers:
        each = elements / layers
        whole = whole and rules.whole_blocks(each, spread / layers, type_name) is not False
        per_layer = f" = {layers} layers × {each:,.1f}"
    ok.append(whole)
    checks.append(f"{label}: {mib:.2f} MiB / {cells:,} cells = {elements:,.1f} {type_name} elements per cell{per_layer} "
                  f"(n_layer × n_embd_{label.lower()}_gqa) → {'whole blocks' if whole else 'NOT whole ' + type_name + ' blocks'}")


# --- ledger ----------------------------------------------------------------------------------------------------


def ledger_rows(s: Startup, r: Rank) -> list[LedgerRow]:
    """One device's memory, top to bottom; figures read from buffer lines unless marked derived."""
    facts = LlamaRankFacts(r)
    ledger = LedgerRows(r)
    add = ledger.add

    if facts.aggregate:
        for p in r.kv_pools:
            add(f"KV cache {p.name}, whole cache across devices", p.size_gib(), note="summary line; per-device share above")
        return ledger.rows
    add("device total (memory breakdown at exit)", r.total_gib)
    add("free before weights (llama.cpp device probe)", r.pre_load_free_gib)
    buffers = facts.model_buffers_mib or {}
    add("model weights", r.weights_gib, "weights_gib", ", ".join(f"{k} {v:.2f} MiB" for k, v in buffers.items()))
    for p in sorted(r.kv_pools, key=lambda p: KIND_ORDER.index(p.name) if p.name in KIND_ORDER else 9):
        label = "recurrent state (R/S)" if p.name == "recurrent" else f"KV cache: {p.name}"
        if p.tokens:
            label += f" ({p.tokens:,} cells)"
        add(label, p.size_gib(), note=p.dtype or "")
        allocated = facts.get(f"{p.name}_kv_buffer_gib")
        if allocated is not None:
            add(f"KV buffer as allocated ({p.name})", allocated, note="tensors + alignment")
    if facts.kv_split_gib is not None:
        add("KV cache share (split mode graph)", facts.kv_split_gib)
    add("compute buffers", facts.compute_gib,
        note=", ".join(f"{k} {v:.2f} MiB" for k, v in (facts.compute_buffers_mib or {}).items()))
    add("output buffer", facts.output_gib)
    add("input buffer", facts.input_gib)
    parts = [r.weights_gib, *(p.size_gib() for p in r.kv_pools), facts.compute_gib,
             facts.output_gib, facts.input_gib]
    if r.total_gib and any(x is not None for x in parts):
        add("everything llama.cpp logged on this device", sum(x for x in parts if x is not None), how=How.DERIVED)
    return ledger.rows
