"""TensorRT-LLM's KV sizing replayed against the log, and the per-rank ledger.

The C++ KV cache manager (kvCacheManager.cpp) sizes the pool from the free memory it measures after
the engine, execution context, runtime buffers and decoder are in place:

    max_tokens = fraction × available / bytes_per_token          (fraction = kv_cache_free_gpu_mem_fraction, 0.9)
    max_tokens = min(max_tokens, max_tokens_in_paged_kv_cache)  (when that is set)
    blocks     = ceil(max_tokens / tokens_per_block);  tokens = blocks × tokens_per_block
    allocated  = tokens × bytes_per_token

so a log that prints "available", the block count and the allocation can be checked line by line.
The PyTorch backend runs the same manager twice (a small estimation pool, then the real one); the
last allocation on a rank is the pool that serves.
"""

from __future__ import annotations

import math

from kvscope.core.provenance import How
from kvscope.core.startup import GIB, LedgerRow, LedgerRows, Rank, Reconciliation, Startup
from kvscope.engines.trtllm.facts import TrtCapacityFacts, TrtRankFacts
from kvscope.engines.trtllm.lines import POOL_NAME

DEFAULT_FRACTION = 0.9  # KvCacheConfig::kDefaultGpuMemFraction
HALF_CENT = 0.005


def finish(s: Startup) -> None:
    """Settle pools and capacity, name the failure, reconcile, and write ledger rows."""
    for r in s.ranks:
        _settle_pools(r)
    assumed_block = s.setting_number("tokens_per_block")  # --assume tokens_per_block=…: the engine's build setting
    if TrtCapacityFacts(s.capacity).tokens_per_block is None and assumed_block and assumed_block >= 1:
        TrtCapacityFacts(s.capacity).tokens_per_block = int(assumed_block)
    _capacity(s)
    _settings(s)
    _settle_failure(s)
    s.era = era(s)
    _reconcile(s)
    for r in s.ranks:
        r.ledger = ledger_rows(s, r)



def _settle_pools(r: Rank) -> None:
    """The last KV allocation on a rank serves; earlier ones were the estimation pass (or a repeat)."""
    pools = [p for p in r.kv_pools if p.name == POOL_NAME]
    if not pools:
        return
    final = pools[-1]
    earlier = [g for p in pools[:-1] if (g := p.size_gib()) is not None]
    r.kv_pools = [p for p in r.kv_pools if p.name != POOL_NAME] + [final]
    final.name = "target"
    if earlier:
        TrtRankFacts(r).estimation_kv_gib = earlier
    TrtRankFacts(r).take(f"{POOL_NAME}_what")


def _capacity(s: Startup) -> None:
    cap = s.capacity
    tpb = TrtCapacityFacts(cap).tokens_per_block
    if cap.kv_tokens is None and cap.num_gpu_blocks and tpb:
        cap.kv_tokens = cap.num_gpu_blocks * tpb
        TrtCapacityFacts(cap).mark_derived("kv_tokens")
    for r in s.ranks:
        target = r.pool("target")
        if target is not None and target.tokens is None:
            target.tokens = cap.kv_tokens
    seq = s.setting_number("max_seq_len")
    if seq:
        cap.max_model_len = int(seq)
        cap.context_len = int(seq)
        if cap.kv_tokens:
            cap.max_concurrency = round(cap.kv_tokens / seq, 2)
    requests = s.setting_number("max_num_sequences") or s.setting_number("max_num_requests") or s.setting_number("max_batch_size")
    if requests:
        cap.max_running_requests = int(requests)
    ref = s.reference_rank
    if ref is not None and TrtRankFacts(ref).kv_sizing_free_gib is not None and ref.avail_after_weights_gib is None:
        ref.avail_after_weights_gib = TrtRankFacts(ref).kv_sizing_free_gib


def _settings(s: Startup) -> None:
    tp = s.setting_number("tp_size") or s.setting_number("world_size") or s.setting_number("world_size_seen")
    if tp and s.settings.get("tp_size") is None:
        s.settings["tp_size"] = int(tp)


def _settle_failure(s: Startup) -> None:
    f = s.failure
    if f is None:
        return
    for w in s.warnings:
        if w.get("code") == "component-not-created":
            f.data["component"] = w.get("component")
            if "kv cache" in str(w.get("component", "")).lower():
                f.kind = "kv-cache-oom"
    if f.kind == "cuda-oom" and runtime_buffer_oom(s):
        f.kind = "compute-buffer-oom"


def runtime_buffer_oom(s: Startup) -> bool:
    """An out-of-memory in the runtime's own buffer allocator (tllmBuffers.h: runtime buffers, decoder) before any
    KV cache: the engine loaded, and what its build limits ask for at batch size max_batch_size did not fit."""
    f = s.failure
    return (f is not None and "tllmBuffers" in f.message and s.capacity.kv_tokens is None
            and not any(r.kv_pools for r in s.ranks))


def era(s: Startup) -> str | None:
    """Which TensorRT-LLM runtime printed the log, from the line shapes it used."""
    text = "\n".join(e.text for e in s.evidence)
    if "Peak memory during memory usage profiling" in text or "[TRT-LLM] [" in text or s.setting("backend") == "pytorch":
        label = "LLM API / PyTorch backend"
    elif "TRTGptModel" in text:
        label = "C++ TensorRT-engine runtime (TRTGptModel)"
    elif "[window size=" in text:
        label = "KV cache manager with per-window pools (2025+)"
    elif "Using " in text and "tokens in paged KV cache" in text:
        label = "C++ runtime ≤ 0.8 (bytes for k/v cache)"
    elif "[TensorRT-LLM]" in text:
        label = "C++ KV cache manager"
    else:
        return None
    triton = s.setting("triton_backend") or "model_lifecycle" in text or "tensorrt_llm'" in text
    return f"{label}, Triton backend" if triton else label


# --- reconciliation -------------------------------------------------------------------------------------------


def fraction(s: Startup) -> tuple[float | None, str]:
    """kv_cache_free_gpu_mem_fraction as logged (and whether it was the default), else unknown."""
    for key in ("kv_cache_free_gpu_mem_fraction", "free_gpu_memory_fraction"):
        value = s.setting_number(key)
        if value is not None:
            how = "default (the backend said it was not specified)" if s.setting(f"{key}_default") else "logged"
            return value, how
    return None, "not in the log"


def effective_fraction(s: Startup) -> tuple[float | None, str]:
    """The logged fraction, else the one the allocation implies (snapped to the default 0.9 when it is it)."""
    frac, how = fraction(s)
    implied = TrtCapacityFacts(s.capacity).implied_kv_cache_free_gpu_mem_fraction
    if frac is None and implied is not None:
        if abs(float(implied) - DEFAULT_FRACTION) <= 0.005:
            return DEFAULT_FRACTION, f"not in the log; the allocation implies {float(implied):.3f}, i.e. the default"
        return float(implied), "implied by the log"
    return frac, how


def bytes_per_token(s: Startup, r: Rank) -> tuple[float | None, float | None, str]:
    """(low, high) bytes per token of the target pool and how we know."""
    target = r.pool("target")
    logged = s.setting_number("kv_size_per_token")
    if logged:
        return logged, logged, "logged ('kv size is …')"
    tokens = target.tokens if target else None
    exact = TrtCapacityFacts(s.capacity).kv_allocated_bytes
    if exact and tokens:
        return exact / tokens, exact / tokens, "'Allocate N bytes for k/v cache' / tokens"
    if target is None or target.gib is None or not tokens:
        return None, None, ""
    return ((target.gib - HALF_CENT) * GIB / tokens, (target.gib + HALF_CENT) * GIB / tokens,
            "allocated GiB / tokens (two printed decimals)")


def _reconcile(s: Startup) -> None:
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if ref is None or target is None:
        return
    checks: list[str] = []
    ok: list[bool] = []
    lo, hi, how = bytes_per_token(s, ref)
    _check_blocks(s, checks, ok)
    _check_exact_bytes(s, target.tokens, lo, hi, checks, ok)
    low, high = _check_budget(s, ref, lo, hi, checks, ok)
    _check_pytorch(s, target.gib, checks, ok)
    if not checks and lo is None:
        return
    rec = Reconciliation(bytes_per_token=round((lo + hi) / 2) if lo is not None and hi is not None else None,  # type: ignore[arg-type]
                         method=f"TensorRT-LLM KV cache manager: fraction × free / bytes per token, whole blocks; "
                                f"bytes per token from {how or 'nowhere (unknown)'}")
    rec.kv_tokens_low, rec.kv_tokens_high = low, high
    rec.consistent = all(ok) if ok else None
    rec.detail = "; ".join(checks)
    s.reconciliation = rec


def _check_blocks(s: Startup, checks: list[str], ok: list[bool]) -> None:
    cap = s.capacity
    tpb = TrtCapacityFacts(cap).tokens_per_block
    if not (cap.num_gpu_blocks and tpb and cap.kv_tokens) or "kv_tokens" in (TrtCapacityFacts(cap).derived or []):
        return
    good = cap.num_gpu_blocks * tpb == cap.kv_tokens
    ok.append(good)
    checks.append(f"{cap.num_gpu_blocks:,} primary blocks × {tpb} tokens per block = {cap.num_gpu_blocks * tpb:,}, "
                  f"log prints {cap.kv_tokens:,} tokens → {'matches' if good else 'DOES NOT match'}")


def _check_exact_bytes(s: Startup, tokens: int | None, lo: float | None, hi: float | None, checks: list[str],
                       ok: list[bool]) -> None:
    exact = TrtCapacityFacts(s.capacity).kv_allocated_bytes
    if not exact or not tokens:
        return
    good = exact % tokens == 0
    ok.append(good)
    checks.append(f"{exact:,} bytes / {tokens:,} tokens = {exact / tokens:,.2f} B per token → "
                  f"{'a whole number of bytes per token' if good else 'NOT a whole number of bytes per token'}")


def _check_budget(s: Startup, r: Rank, lo: float | None, hi: float | None, checks: list[str],
                  ok: list[bool]) -> tuple[int | None, int | None]:
    """fraction × available → token range (whole blocks); or, without the fraction, the fraction implied."""
    avail = TrtRankFacts(r).kv_sizing_free_gib
    target = r.pool("target")
    if avail is None or target is None or target.gib is None:
        return None, None
    frac, how = fraction(s)
    implied = target.gib / avail if avail else None
    if frac is None:
        if implied is None or not target.gib:  # a 0 GiB pool (a mangled line) implies no fraction
            return None, None
        TrtCapacityFacts(s.capacity).implied_kv_cache_free_gpu_mem_fraction = round(implied, 4)
        near_default = abs(implied - DEFAULT_FRACTION) <= (HALF_CENT / avail + HALF_CENT / target.gib) * implied + 0.002
        checks.append(f"kv_cache_free_gpu_mem_fraction not in the log: {target.gib:.2f} / {avail:.2f} GiB available "
                      f"= {implied:.3f}" + (f", consistent with the default {DEFAULT_FRACTION}" if near_default else ""))
        if not near_default:
            return None, None
        frac, how = DEFAULT_FRACTION, "assumed: the default, as implied"
    tpb = TrtCapacityFacts(s.capacity).tokens_per_block or 1
    limit = s.setting_number("max_tokens_in_paged_kv_cache")
    if lo is None or hi is None:
        budget = frac * avail
        good = abs(budget - target.gib) <= frac * HALF_CENT + HALF_CENT + 1e-9
        ok.append(good)
        checks.append(f"budget {frac} × {avail:.2f} GiB = {budget:.3f} GiB vs {target.gib:.2f} GiB allocated → "
                      f"{'matches' if good else 'DOES NOT match'}")
        return None, None

    def tokens_for(free_gib: float, bpt: float) -> int:
        t = math.floor(frac * free_gib * GIB / bpt)
        if limit:
            t = min(t, int(limit))
        return math.ceil(t / tpb) * tpb

    low = tokens_for(avail - HALF_CENT, hi)
    high = tokens_for(avail + HALF_CENT, lo)
    tokens = target.tokens or s.capacity.kv_tokens
    if tokens is None:
        return low, high
    good = low <= tokens <= high
    ok.append(good)
    checks.append(f"budget: {frac} ({how}) × {avail:.2f} GiB available / {(lo + hi) / 2:,.0f} B per token → "
                  f"{low:,} … {high:,} tokens in whole {tpb}-token blocks; log prints {tokens:,} → "
                  f"{'inside' if good else 'OUTSIDE'}")
    return low, high


def _check_pytorch(s: Startup, allocated: float | None, checks: list[str], ok: list[bool]) -> None:
    """PyTorch backend: the pool it allocates is the 'available KV cache memory' it computed."""
    avail_kv = s.capacity.available_kv_gib
    if avail_kv is None or allocated is None:
        return
    good = abs(avail_kv - allocated) <= 2 * HALF_CENT + 0.01 * avail_kv
    ok.append(good)
    checks.append(f"profiled KV budget {avail_kv:.2f} GiB vs {allocated:.2f} GiB allocated → "
                  f"{'matches' if good else 'differs (max_tokens or block rounding capped the pool)'}")


# --- ledger ---------------------------------------------------------------------------------------------------


def ledger_rows(s: Startup, r: Rank) -> list[LedgerRow]:
    """The rank's memory, in the order TensorRT-LLM fills it."""
    facts = TrtRankFacts(r)
    ledger = LedgerRows(r)
    add = ledger.add

    add("device total", r.total_gib)
    add("free before weights", r.pre_load_free_gib)
    engine = facts.engine_size_mib
    add("engine (weights)" if engine else "model weights", r.weights_gib, note="'Loaded engine size'" if engine else "")
    add("free after weights", r.avail_after_weights_gib if facts.kv_sizing_free_gib is None else None)
    add("execution context (activations)", facts.execution_context_gib)
    add("runtime buffers", facts.runtime_buffers_gib)
    add("decoder", facts.decoder_gib)
    add("activation peak (PyTorch profile)", r.activation_peak_gib)
    add("outside torch (NCCL, CUDA graphs)", r.non_torch_gib)
    avail = facts.kv_sizing_free_gib
    add("free when the KV cache was sized", avail, note="TensorRT-LLM's 'available'")
    frac, basis = effective_fraction(s)
    if avail is not None and frac is not None:
        add(f"KV budget {frac:g} × free", frac * avail, note=basis, how=How.DERIVED)
    pytorch = (era(s) or "").startswith("LLM API")
    for est in facts.estimation_kv_gib or []:
        if pytorch:
            add("KV pool of the estimation pass (freed)", est, note="PyTorch backend sizes twice")
        else:  # the C++ runtime sizes once: an encoder-decoder's second (cross-attention) cache, or another rank's line
            add("earlier KV allocation in the log", est, note="cross-attention cache or another rank (untagged lines)")
    target = r.pool("target")
    if target is not None:
        label = "KV pool" + (f" ({target.tokens:,} tokens)" if target.tokens else "")
        add(label, target.size_gib())
    if avail is not None and target is not None and target.gib is not None:
        add("left free after the KV pool", avail - target.gib, how=How.DERIVED)
    return ledger.rows
