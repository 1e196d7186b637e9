"""Was the KV pool the limit? A plain-words verdict with the numbers behind it.

capacity-bound
    Requests waited while the pool was ≥ 90 % full, or running requests were retracted /
    preempted (the engine freed their KV to make room). Then: how many more KV tokens would have
    kept the queue empty at its peak — queued requests × KV tokens a running request held at
    saturation — and the cheapest ways to get them, with the startup's own numbers: the
    ``mem_fraction_static`` / ``gpu_memory_utilization`` step, an fp8 KV cache (≈ 2× tokens),
    DP attention for MLA models, and why a host tier does not help running requests.
not-memory-bound
    Requests waited while usage stayed low (the limit was the running-request cap, or the
    scheduler's prefill budget / reservation), or nobody waited at all.
"""

from __future__ import annotations

import math
from typing import Any

from kvscope import engines
from kvscope.core.facts import CapacityFacts
from kvscope.core.margins import MAX_FRACTION, reserve_margin_gib
from kvscope.core.startup import Finding, Startup, Suggestion
from kvscope.engines.base import FractionBasis

GIB = 1 << 30
SATURATED_SHARE = 0.05  # this share of the queued samples at ≥ 90 % usage makes the queue memory's doing
CAP_SHARE = 0.98
MIN_QUEUED_S = 5.0  # a queue must last this long (timed lines) before "not memory" names a limit,
MIN_QUEUED_SAMPLES = 3  # or show on this many serving lines
GRAPHLESS_SHARE = 0.5  # this share of decode batches without a CUDA graph names the graph batch as the limit  # a memory fraction above this leaves no room for activations and graphs  # running within 2 % of the cap counts as "at the cap"


def _num(x: Any) -> float | None:
    try:
        return float(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}" if x >= 0.1 or x == 0 else f"{x:.1%}"


def _kv_tokens(s: Startup, rt: dict[str, Any] | None = None) -> int | None:
    """The pool size: from the startup lines, else implied by the decode lines (#token / usage)."""
    kv = s.capacity.kv_tokens or s.capacity.max_total_num_tokens
    if kv is None and rt is not None:
        kv = (rt.get("saturation") or {}).get("pool_tokens_estimate")
    return kv


def _bytes_per_token(s: Startup, kv: int | None) -> float | None:
    """KV bytes per token: SGLang's reconciliation, else pool size ÷ tokens, else vLLM's KV budget ÷ tokens."""
    if s.reconciliation is not None and s.reconciliation.bytes_per_token:
        return float(s.reconciliation.bytes_per_token)
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if target is not None and target.tokens and target.size_gib():
        return target.size_gib() * GIB / target.tokens  # type: ignore[operator]
    if kv and s.capacity.available_kv_gib:
        return s.capacity.available_kv_gib * GIB / kv
    return None


def _kv_dtype(s: Startup) -> str:
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    for value in (s.setting("kv_cache_dtype_resolved"), target.dtype if target else None, s.setting("kv_cache_dtype")):
        if value and str(value) != "auto":
            return str(value)
    return "auto"


def _fraction_step(s: Startup, extra: int, bpt: float | None) -> dict[str, Any] | None:
    """The +0.01 step of the engine's memory fraction, in tokens, and whether it is safe to take."""
    ref = s.reference_rank
    if bpt is None or ref is None:
        return None
    knob = engines.get(s.engine).knobs.memory
    if knob is None:
        return None
    flag, value = knob.flag, _num(s.setting(knob.setting))
    before_weights = knob.basis is FractionBasis.FREE_BEFORE_WEIGHTS
    # SGLang's fraction is of the free memory before weights, vLLM's of the whole GPU
    base = ref.pre_load_free_gib if before_weights else ref.total_gib or _num(s.assumptions.get("gpu_total_gib"))
    if not base or value is None:
        return None
    per_step = int(0.01 * base * GIB // bpt)
    if per_step <= 0:
        return None
    steps = math.ceil(extra / per_step)
    out = {"flag": flag, "from": value, "to": round(value + steps / 100, 2), "tokens_per_step": per_step,
           "step_gib": round(0.01 * base, 3), "steps": steps, "safe_steps": None, "covers": None}
    free = ref.avail_at_ready_gib
    if free is not None and before_weights:
        margin = reserve_margin_gib(base)
        safe = math.floor((free - margin) / (0.01 * base))
        out.update(safe_steps=max(0, safe), free_at_ready_gib=free, margin_gib=round(margin, 2), covers=steps <= safe)
    return out


def _options(s: Startup, extra: int, kv: int | None, bpt: float | None) -> tuple[list[str], Suggestion | None, dict]:
    """Ways to get ``extra`` KV tokens, cheapest first, in words; the suggestion is the first that covers it."""
    texts: list[str] = []
    numbers: dict[str, Any] = {}
    suggestion: Suggestion | None = None
    capped = _capped_by_setting(s, kv)
    if capped is not None:  # --max-total-tokens sized the pool: the memory fraction would add nothing
        cap, room = capped
        numbers["max_total_tokens"] = {"cap": cap, "budget_tokens": room}
        text = f"--max-total-tokens {cap:,} set the pool size, not memory"
        if room and room > cap:
            to = min(room, cap + extra)
            text += (f": the memory budget had room for {room:,} tokens, so raising it to {to:,} "
                     f"{'covers' if to >= cap + extra else 'gives part of'} the {extra:,}")
            suggestion = Suggestion("--max-total-tokens", cap, to, to, note="within the memory budget the log shows")
        else:
            text += "; raise or drop it before anything else"
        texts.append(text + ".")
    step = _fraction_step(s, extra, bpt) if capped is None else None
    if step is not None:
        numbers["fraction_step"] = step
        text = (f"{step['flag']}: each +0.01 moves {step['step_gib']:.2f} GiB into the pool = +{step['tokens_per_step']:,} "
                f"tokens, so {extra:,} tokens need +{step['steps'] / 100:.2f} ({step['from']} → {step['to']})")
        if step["to"] > MAX_FRACTION:
            step["covers"] = False
            text += ", more than the GPU has"
            if step.get("safe_steps") is not None:
                text += f" ({step['safe_steps']} step(s) are safe with {step['free_at_ready_gib']:.2f} GiB free at ready)"
        elif step["covers"] is True:
            text += f"; {step['free_at_ready_gib']:.2f} GiB was free at ready, so that is within the safe headroom"
            suggestion = Suggestion(step["flag"], step["from"], step["to"], (kv or 0) + step["steps"] * step["tokens_per_step"] or None,
                                    note="within the free memory at ready")
        elif step["covers"] is False:
            text += (f"; but only {step['free_at_ready_gib']:.2f} GiB was free at ready and {step['margin_gib']:.1f} GiB should stay "
                     f"free, so only {step['safe_steps']} such step(s) are safe")
        else:
            text += "; the log does not show how much memory was free at ready, so check nvidia-smi before raising it"
        texts.append(text + ".")
    dtype = _kv_dtype(s)
    if kv and capped is None and not any(q in dtype.lower() for q in ("fp8", "int8", "fp4", "int4")):  # capped: same count
        flag_to = engines.get(s.engine).knobs.fp8_kv_value
        covers = kv >= extra
        numbers["fp8_kv"] = {"from": dtype, "tokens_added": kv, "covers": covers}
        texts.append(f"--kv-cache-dtype {flag_to}: an fp8 KV cache stores ≈ 2× the tokens in the same memory "
                     f"(+{kv:,}, from {dtype}), {'enough' if covers else 'not enough on its own'} for {extra:,}; "
                     "check output quality on your workload.")
        if suggestion is None and covers:
            suggestion = Suggestion("--kv-cache-dtype", dtype, flag_to, 2 * kv, note="≈ 2× tokens; check quality")
    dp = _dp_attention(s, kv)
    if dp is not None:
        numbers["dp_attention"] = dp
        covers = dp["tokens_added"] >= extra
        texts.append(f"--enable-dp-attention --dp-size {dp['tp']}: this MLA model's KV cache is replicated on all {dp['tp']} "
                     f"TP ranks; DP attention gives each rank its own pool (≈ +{dp['tokens_added']:,} tokens node-wide).")
        if suggestion is None and covers:
            suggestion = Suggestion("--enable-dp-attention", False, True, kv * dp["tp"] if kv else None, note=f"also --dp-size {dp['tp']}")
    if suggestion is None and kv:
        texts.append(f"No single change above covers {extra:,} tokens: combine them, or add a replica (each adds another "
                     f"{kv:,}-token pool) or GPUs (a higher --tp splits the weights and leaves more memory per GPU for KV).")
    host_tier = engines.get(s.engine).knobs.host_tier or "a host-RAM KV tier"
    texts.append("A host KV tier (" + host_tier
                 + ") keeps evicted prefixes for reuse; it raises the prefix-cache hit rate but adds no room for running "
                 "requests, so it would not have emptied this queue.")
    return texts, suggestion, numbers


def _capped_by_setting(s: Startup, kv: int | None) -> tuple[int, int | None] | None:
    """(--max-total-tokens, tokens the memory budget had room for) when that setting, not memory, sized SGLang's pool."""
    cap = _int(CapacityFacts(s.capacity).max_total_tokens_cap)  # set by the engine's finish when the cap binds
    if not cap or not kv:
        return None
    room = CapacityFacts(s.capacity).kv_tokens_budget_uncapped
    return cap, room[0] if isinstance(room, (list, tuple)) and room else None


def _dp_attention(s: Startup, kv: int | None) -> dict[str, Any] | None:
    if not engines.get(s.engine).knobs.dp_attention_for_mla or s.reconciliation is None or not kv:
        return None
    if s.reconciliation.architecture.get("attention") != "mla" or s.setting("enable_dp_attention"):
        return None
    tp = int(_num(s.setting("tp_size")) or _num(s.setting("tensor_parallel_size")) or 1)
    return {"tp": tp, "tokens_added": (tp - 1) * kv} if tp > 1 else None


def _capacity_bound(s: Startup, rt: dict[str, Any]) -> tuple[Finding, dict[str, Any]]:
    usage, queue, sat = rt["usage"], rt["queue"], rt["saturation"]
    kv = _kv_tokens(s, rt)
    evicted = (rt.get("retracted") or 0) + (rt.get("preempted") or 0)
    tpr = sat.get("tokens_per_request")
    if tpr is None and sat.get("usage_per_request") and kv:
        tpr = round(sat["usage_per_request"] * kv)
    waited = sat.get("peak_queued") or queue.get("peak") or 0
    extra = math.ceil(waited * tpr) if waited and tpr else None
    numbers: dict[str, Any] = {"code": "capacity-bound", "peak_usage": usage.get("peak"), "peak_queued_while_saturated": waited,
                               "tokens_per_request": tpr, "extra_kv_tokens": extra, "kv_tokens": kv,
                               "extra_fraction": round(extra / kv, 3) if extra and kv else None, "evicted_requests": evicted}
    facts = [f"KV usage peaked at {_pct(usage.get('peak'))} (p95 {_pct(usage.get('p95'))})"]
    if usage.get("above_90_s") is not None:
        facts.append(f"stayed ≥ 90 % for {usage['above_90_s']:,.0f} s ({_pct(usage.get('above_90_fraction'))} of the observed time)")
    if waited:
        facts.append(f"up to {waited:,} requests waited while it was ≥ 90 % full")
    if evicted:
        what = "retracted" if rt.get("retracted") else "preempted"
        facts.append(f"{evicted:,} running requests were {what} (their KV freed, their work recomputed later)")
    detail = "; ".join(facts) + "."
    if extra:
        detail += (f" At saturation a running request held ≈ {tpr:,} KV tokens, so about {waited:,} × {tpr:,} ≈ {extra:,} more "
                   "KV tokens")
        detail += f" ({extra / kv:.0%} of the {kv:,}-token pool)" if kv else ""
        detail += " would have kept the queue empty at its peak."
        texts, suggestion, opts = _options(s, extra, kv, _bytes_per_token(s, kv))
        numbers["options"] = opts
        detail += " Cheapest ways to get them: " + " ".join(f"({i}) {t}" for i, t in enumerate(texts, 1))
    else:
        suggestion = None
        detail += (" The log does not show how many KV tokens a running request held (no token count and no pool size), "
                   "so the extra capacity needed cannot be sized; add the startup lines to the input.")
    title = (f"Capacity-bound: {waited:,} requests waited on a full KV pool" if waited
             else f"Capacity-bound: {evicted:,} running requests were evicted from a full KV pool")
    return Finding("capacity-bound", "warning", title, detail, suggestion), numbers


def _cap(s: Startup) -> tuple[str, int | None]:
    flag, setting = engines.get(s.engine).knobs.request_cap or ("--max-running-requests", "max_running_requests")
    return flag, s.capacity.max_running_requests or _int(s.setting(setting))


def _int(x: Any) -> int | None:
    v = _num(x)
    return int(v) if v is not None else None


def _not_memory(s: Startup, rt: dict[str, Any]) -> tuple[Finding, dict[str, Any]]:
    usage, queue = rt["usage"], rt["queue"]
    peak, p95 = usage.get("peak"), usage.get("p95")
    numbers: dict[str, Any] = {"code": "not-memory-bound", "peak_usage": peak, "peak_queued": queue.get("peak")}
    if not queue.get("peak"):
        numbers["limit"] = None
        return Finding("not-memory-bound", "info", f"Not memory-bound: no request waited (KV usage peaked at {_pct(peak)})",
                       f"KV usage peaked at {_pct(peak)} (p95 {_pct(p95)}) and the queue stayed empty: the pool had room to spare "
                       "for this load."), numbers
    if not _lasting(queue):
        numbers.update(limit=None, evidence="brief")
        longest = (queue.get("longest") or {}).get("length_s")
        lasted = f", the longest wait {longest:,.0f} s" if longest is not None else ""
        n = queue.get("queued_samples") or 0
        return Finding("not-memory-bound", "info", f"Not memory-bound: a brief queue (peak {queue['peak']:,}) while the KV "
                       "pool had room",
                       f"Requests waited on {n:,} serving line{'s' if n != 1 else ''}{lasted}, with KV usage at "
                       f"{_pct(queue.get('usage_while_queued_p95'))} (peak {_pct(peak)} overall): too brief a queue to "
                       "name a limit (requests arriving between scheduler steps look like this)."), numbers
    flag, cap = _cap(s)
    running = queue.get("running_peak_while_queued")
    queued_p95 = queue.get("usage_while_queued_p95")
    head = (f"Up to {queue['peak']:,} requests waited, but KV usage was only {_pct(queued_p95)} (p95) while they did "
            f"(peak {_pct(peak)} overall)")
    if cap and running is not None and running >= CAP_SHARE * cap:
        numbers.update(limit="max_running_requests", cap=cap, running_peak_while_queued=running)
        detail = (f"{head}, and {running:,} requests were running — the {flag} cap of {cap:,}. The cap, not memory, was the limit: "
                  f"raising {flag} lets more requests share the pool, which still had room.")
        # Room for more running requests: as many as keep usage under 90 %, at most twice as many.
        room = min(2.0, 0.9 / max(queued_p95 or peak or 0.05, 0.05))
        to = int(cap * room) if room > 1.05 else None
        sug = Suggestion(flag, cap, to, note="KV usage had room for about this many") if to else None
        return Finding("not-memory-bound", "warning", f"Not memory: the limit was {flag} ({cap:,})", detail, sug), numbers
    running_txt = f" with at most {running:,} running" + (f" (cap {cap:,})" if cap else "") if running is not None else ""
    graph = rt.get("cuda_graph") or {}
    off, gmax = graph.get("decode_without_graph_fraction") or 0, graph.get("largest_batch_with_graph")
    graph_flag = engines.get(s.engine).knobs.graph_batch_flag
    if graph_flag and off >= GRAPHLESS_SHARE and gmax:
        numbers.update(limit="cuda_graph_batch", cap=cap, running_peak_while_queued=running, largest_graph_batch=gmax,
                       decode_without_graph_fraction=off)
        detail = (f"{head}{running_txt}. Not memory: {off:.0%} of the decode batches ran without a CUDA graph — more requests "
                  f"than the {gmax} the captured graphs cover — so every decode step was slower and requests waited longer. "
                  f"Raise {graph_flag} (each captured size takes a little of the reserve: see the 'Capture cuda graph "
                  f"end … mem usage' line), or keep --max-running-requests near {gmax}.")
        sug = Suggestion(graph_flag, gmax, _next_graph_bs(running or gmax), note="graphs take reserve memory")
        return Finding("not-memory-bound", "warning", f"Not memory: decode outgrew the CUDA-graph batch ({gmax})", detail,
                       sug), numbers
    numbers.update(limit="scheduler", cap=cap, running_peak_while_queued=running)
    running_txt = f" with at most {running:,} running" + (f" (cap {cap:,})" if cap else "") if running is not None else ""
    advice = engines.get(s.engine).runtime_advice
    if advice is not None:
        detail, sug = advice(s, head, running_txt, rt)
    else:
        detail, sug = (f"{head}{running_txt}. Not memory: the scheduler admitted requests slower than they arrived."), None
    return Finding("not-memory-bound", "warning", "Not memory: requests waited while the KV pool had room", detail, sug), numbers


def _lasting(queue: dict[str, Any]) -> bool:
    """Enough of a queue to name what held it: it showed on MIN_QUEUED_SAMPLES serving lines or lasted
    MIN_QUEUED_S. One line with a request waiting is as likely a request arriving between two steps."""
    if (queue.get("queued_samples") or 0) >= MIN_QUEUED_SAMPLES:
        return True
    longest = (queue.get("longest") or {}).get("length_s")
    return max(longest or 0.0, queue.get("queued_s") or 0.0) >= MIN_QUEUED_S


def _next_graph_bs(running: int) -> int:
    """A --cuda-graph-max-bs that covers ``running``: the next multiple of 8 (SGLang captures in steps of 8)."""
    return max(8, -(-running // 8) * 8)


def verdict(s: Startup, rt: dict[str, Any]) -> tuple[Finding | None, dict[str, Any]]:
    """The finding and its numbers (``runtime.verdict`` in JSON)."""
    usage = rt.get("usage")
    evicted = (rt.get("retracted") or 0) + (rt.get("preempted") or 0)
    if not usage or usage.get("peak") is None:
        if evicted:  # retraction / preemption warnings without any sample line
            return _capacity_bound(s, {**rt, "usage": {}, "queue": {}, "saturation": {}})
        return None, {"code": None}
    queue, sat = rt["queue"], rt["saturation"]
    if not queue.get("samples_with_queue"):
        return None, {"code": None, "reason": "the serving lines carry no queue length, so whether requests waited is unknown"}
    queued = queue.get("queued_samples") or 0
    if evicted or (sat.get("queued_samples") and sat["queued_samples"] >= SATURATED_SHARE * queued):
        return _capacity_bound(s, rt)
    return _not_memory(s, rt)
