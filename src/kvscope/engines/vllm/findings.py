"""vLLM findings: why a startup failed and what to change, what the budget paid for, what a knob buys.

Every suggestion rests on vLLM's own arithmetic (docs/research/vllm-memory.md §1, §2.7, §7.5):
the non-KV terms do not depend on gpu_memory_utilization, so K moves by exactly ΔU × total.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from kvscope.core.startup import Finding, Rank, Startup, Suggestion, finite_number
from kvscope.core.text import excerpt
from kvscope.engines.base import typical_fits
from kvscope.engines.common import held_by_earlier, weights_fill_gpu
from kvscope.engines.vllm import eras, fit, rules
from kvscope.engines.vllm.facts import VllmCapacityFacts, VllmRankFacts
from kvscope.engines.vllm.finish import (
    arch_context,
    block_size,
    era_of,
    graphs_inside,
    kv_plan,
    setting_int,
    total_gib,
    tp_size,
    util,
)
from kvscope.engines.vllm.rules import GIB

DEFAULT_UTIL = 0.9  # vLLM's default gpu_memory_utilization, every release
MAX_SANE_UTIL = 0.97  # above this nothing is left for the CUDA context, graphs and the sampler
GRAPH_HEADROOM_GIB = 2.0
SHORTEST_USEFUL_CONTEXT = 4096  # a shorter max_model_len is no way to serve a model, only to start it  # what to leave outside the budget when graphs are captured there


def _bytes_per_token(s: Startup) -> int | None:
    rec = s.reconciliation
    return rec.bytes_per_token if rec is not None and rec.bytes_per_token > 0 else None


def _block_bytes(s: Startup) -> int | None:
    bpt = _bytes_per_token(s)
    return bpt * block_size(s) if bpt else None


def _tokens_for(s: Startup, kv_gib: float) -> int | None:
    block = _block_bytes(s)
    return rules.blocks_for(kv_gib, block) * block_size(s) if block else None


def _round_down(x: float) -> float:
    return math.floor(round(x * 100, 6)) / 100


# --- failures --------------------------------------------------------------------------------------------


def _max_len(s: Startup) -> list[Finding]:
    f, cap = s.failure, s.capacity
    assert f is not None
    m = f.data.get("max_model_len") or cap.max_model_len
    k = f.data.get("available_kv_gib") or cap.available_kv_gib
    bpt = _bytes_per_token(s)
    need = f.data.get("kv_needed_gib") or (m * bpt / GIB if m and bpt else None)
    fit = f.data.get("estimated_max_model_len") or f.data.get("kv_tokens") or f.data.get("max_model_len_fits")
    if fit is None and k is not None and _block_bytes(s):
        exact = VllmCapacityFacts(s.capacity).available_kv_exact
        fit = rules.max_len_that_fits(k if exact else k - rules.HALF_CENT, _block_bytes(s) or 0, block_size(s))
    inferred = " (inferred from the log; the error line itself is not in it)" if f.data.get("inferred") else ""
    title = f"Startup failed: max_model_len {m:,} does not fit in the KV cache" if m else "Startup failed: KV cache too small"
    detail = (f"vLLM refuses to start unless one request of max_model_len tokens fits in the KV cache{inferred}. "
              + (f"It needs {need:.2f} GiB; the KV cache got {k:.2f} GiB per GPU. " if need and k is not None else ""))
    out: list[Finding] = []
    if fit:
        detail += f"The largest max_model_len that fits is {fit:,} tokens."
        out.append(Finding("max-len-too-large", "error", title, detail,
                           Suggestion("--max-model-len", m, int(fit), int(fit), note="same memory, shorter context")))
    else:
        out.append(Finding("max-len-too-large", "error", title, detail))
    raise_util = _util_for_need(s, need, k, m / fit if m and fit and m > fit else None)
    if raise_util is not None:
        out.append(raise_util)
    return out


def _util_for_need(s: Startup, need: float | None, k: float | None, short_by: float | None = None) -> Finding | None:
    named = re.search(r"[Tt]ry increasing `?(\w+)`?", s.failure.message if s.failure else "")
    if named and named.group(1) != "gpu_memory_utilization":  # the engine names another knob (CPU backend)
        knob = named.group(1)
        times = f" to about {short_by:.1f}× its value" if short_by else ""
        return Finding("raise-kv-space", "info", f"Or raise {knob}",
                       f"The error names {knob} as what sizes this KV cache (not gpu_memory_utilization): raise it{times}.",
                       Suggestion(knob, None, None, note=f"raise it{times}"))
    u, total = util(s), total_gib(s)
    logged_u = u
    if u is None and s.settings.get("gpu_memory_utilization") is None:
        u = DEFAULT_UTIL  # not printed: the default the engine used
    card = None
    if not total and logged_u is not None and (bound := fit.bounded_total(s, logged_u)) is not None:
        total, card = bound  # the smallest GPU the log's own budget equation fits: a safe (high) utilization
    if (need is not None and k is not None or short_by) and u is not None and (not total or k is None) and u < 0.95:
        # the GPU's total (or the KV memory) is not in the log: the direction is sure, the amount is not
        to = 0.95
        short = (f"The KV cache needs {need:.2f} GiB and got {k:.2f} GiB" if need is not None and k is not None else
                 f"The KV cache must hold {short_by:.1f}× the tokens it got")
        return Finding("raise-utilization", "info", f"Or raise gpu_memory_utilization (to at most {to})",
                       f"{short}; each +0.01 of gpu_memory_utilization adds 1 % of the GPU's total to it (pass "
                       "--assume gpu=… to size the step exactly).",
                       Suggestion("--gpu-memory-utilization", logged_u if logged_u is not None else u, to,
                                  note="amount approximate: the GPU total is not in the log"))
    if need is None or k is None or u is None or not total:  # a total of 0 is a mangled line, not a device
        return None
    to = rules.util_for_kv(need, k, total, u)
    after = rules.kv_after_util(k, total, u, to)
    basis = (f"{total:.2f} GiB: {card}, the smallest GPU the log's figures fit; on a larger one less is needed"
             if card else f"{total:.2f} GiB")
    detail = (f"K grows by exactly ΔU × total ({basis}): reaching {need:.2f} GiB needs "
              f"gpu_memory_utilization ≥ {to} (K ≈ {after:.2f} GiB).")
    if era_of(s).engine == "V0" and not s.setting("enable_chunked_prefill"):
        detail += (" V0 without chunked prefill profiles max(max_model_len, 2048) tokens, so a longer max_model_len "
                   "also raises the activation peak: allow a little more.")
    if to > MAX_SANE_UTIL:
        detail += (f" That leaves less than {1 - MAX_SANE_UTIL:.0%} of the GPU outside the budget: use --kv-cache-dtype "
                   "fp8 (halves KV bytes per token), more GPUs (--tensor-parallel-size), or a shorter context instead.")
        return Finding("raise-utilization", "warning", f"gpu_memory_utilization would have to reach {to}", detail)
    return Finding("raise-utilization", "info", f"Or raise gpu_memory_utilization to {to}", detail,
                   Suggestion("--gpu-memory-utilization", u, to, _tokens_for(s, after),
                              note=f"sized on the smallest GPU the log fits ({total:.1f} GiB)" if card else ""))


def _mamba_blocks_short(s: Startup, seqs: int, blocks: int) -> Finding:
    """A hybrid model whose Mamba state pool holds fewer sequences than max_num_seqs: the cap is the fix."""
    round_to = 1 << (blocks.bit_length() - 1) if blocks > 0 else 0
    detail = (f"This is a hybrid (Mamba / linear-attention) model: every running sequence keeps its recurrent state in "
              f"one Mamba cache block, and vLLM captures CUDA graphs for decode batches of up to max_num_seqs = "
              f"{seqs:,} sequences. The memory left for the cache holds only {blocks:,} such blocks, so {seqs:,} "
              f"sequences can never run at once. Lower --max-num-seqs to at most {blocks:,}"
              + (f" (a round {round_to:,} keeps the capture sizes aligned)" if 0 < round_to < blocks else "")
              + "; nothing else needs to change. Only if that many concurrent sequences are really needed, give the "
              "cache more memory instead (a higher --gpu-memory-utilization, more GPUs): each sequence costs one block.")
    return Finding("not-enough-memory", "error",
                   f"Startup failed: max_num_seqs {seqs:,} needs {seqs:,} Mamba cache blocks, only {blocks:,} fit", detail,
                   Suggestion("--max-num-seqs", seqs, blocks, note=f"at most the {blocks:,} Mamba cache blocks"))


def _no_memory(s: Startup) -> Finding:
    f = s.failure
    assert f is not None
    seqs, blocks = f.data.get("max_num_seqs"), f.data.get("mamba_blocks")
    if isinstance(seqs, int) and isinstance(blocks, int):
        return _mamba_blocks_short(s, seqs, blocks)
    u, total = util(s), total_gib(s)
    free, requested = f.data.get("free_gib"), f.data.get("requested_gib")
    if free is not None and requested is not None and total:
        fits = round(_round_down(free / total) - 0.01, 2)  # a setting as typed: 0.81, not 0.8099999999999999
        device = "node" if f.data.get("device") == "CPU" else "GPU"
        detail = (f"vLLM asks for gpu_memory_utilization × total = {requested:.2f} GiB up front, but only {free:.2f} of "
                  f"{total:.2f} GiB was free on the {device} at startup. The budget is a fraction of the total, not of free "
                  f"memory, so it must satisfy util ≤ free / total = {free / total:.3f}.")
        if device == "GPU":
            detail += (f" The {total - free:.2f} GiB already in use is no more than this worker's own CUDA context "
                       "and, in a multi-GPU run, the NCCL / communication buffers it sets up before vLLM measures, "
                       "so no other process has to be holding the GPU.")
        return Finding("not-enough-memory", "error", f"Startup failed: {requested:.2f} GiB requested, {free:.2f} GiB free",
                       detail, Suggestion("--gpu-memory-utilization", u, fits, _kv_tokens_at(s, fits)))
    too_big = _weights_too_big(s)
    if too_big is not None:
        return too_big
    sized = _util_for_one_request(s)
    if sized is not None:
        return sized
    ref = s.reference_rank
    terms = [x for x in (ref.weights_gib, ref.activation_peak_gib, ref.non_torch_gib) if x is not None] if ref else []
    graphs, where = _graph_estimate(s)
    inside = graphs_inside(s)
    if graphs is not None and inside is not False:
        when = "" if inside else ", subtracted from the budget by default from v0.20"
        detail = (f"After weights, the profiling run's activation peak, non-torch memory and the CUDA-graph estimate "
                  f"({graphs:.2f} GiB logged on {where}{when}), nothing of the budget was left for KV.")
        if inside:
            terms.append(graphs)
        if total and u is not None and graphs >= 0.5 * u * total:
            detail += f" The graph estimate alone is {graphs / (u * total):.0%} of the {u * total:.2f} GiB budget."
        detail += (" If the estimate is implausible, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (graphs are then "
                   "paid from the memory outside the budget, as before v0.20), capture fewer sizes (a lower "
                   "--max-num-seqs, --cuda-graph-sizes / compilation_config.cudagraph_capture_sizes) or use --enforce-eager.")
    else:
        detail = ("After weights, the profiling run's activation peak and non-torch memory, nothing of the budget was "
                  "left for KV.")
    if terms and total and u is not None:
        to = min(1.0, math.ceil((sum(terms) + 1.0) / total * 100) / 100)
        detail += (f" Those take {sum(terms):.2f} GiB of the {u * total:.2f} GiB budget; util {to} leaves about 1 GiB for KV"
                   " (more is needed for long contexts).")
        return Finding("not-enough-memory", "error", "Startup failed: no memory left for the KV cache", detail,
                       Suggestion("--gpu-memory-utilization", u, to))
    detail += (" Raise --gpu-memory-utilization, lower --max-num-batched-tokens (smaller activation peak), "
               "or use more GPUs / a quantized checkpoint.")
    sug = None
    if u is None:
        detail += (" The log does not print the gpu_memory_utilization it ran with; it is a cap on what vLLM may use, "
                   "so raise it (vLLM's default is 0.9).")
        sug = Suggestion("--gpu-memory-utilization", None, DEFAULT_UTIL, note="raise it; the value used is not in the log")
    elif u < DEFAULT_UTIL:
        detail += (f" gpu_memory_utilization {u} is below vLLM's default {DEFAULT_UTIL}: it is a cap on what vLLM may use, "
                   "and this one leaves the weights and the profiling run no room.")
        sug = Suggestion("--gpu-memory-utilization", u, DEFAULT_UTIL,
                         note="vLLM's default; the log lacks the figures to size it exactly")
    return Finding("not-enough-memory", "error", "Startup failed: no memory left for the KV cache", detail, sug)


def _util_for_one_request(s: Startup) -> Finding | None:
    """The KV memory came out ≤ 0 and the log printed it: K grows by exactly ΔU × total, so the utilization that
    holds one max_model_len request is K's shortfall over the total (a total the log does not print is bounded
    by its budget equation, fit.bounded_total, and said so)."""
    f = s.failure
    k = s.capacity.available_kv_gib
    if k is None and f is not None:
        k = finite_number(f.data.get("available_kv_gib"))
    u, total = util(s), total_gib(s)
    card = None
    if not total and (bound := fit.bounded_total(s, u)) is not None:
        total, card = bound
    arch, _ = arch_context(s)
    layout = kv_plan(s, arch) if arch is not None else None
    m = s.capacity.max_model_len or setting_int(s, "max_model_len")
    if k is None or u is None or not total or layout is None or layout.linear or not m:
        return None
    bs = block_size(s)
    block = layout.block_bytes(bs)
    need = rules.cdiv(m, bs) * block / GIB
    to = min(1.0, math.ceil(round((u + (need - k) / total) * 100, 6)) / 100)
    after = k + (to - u) * total
    tokens = rules.blocks_for(after, block) * bs if after > 0 else 0
    basis = (f"{total:.2f} GiB ({card}, the smallest GPU the log's figures fit: pass --assume gpu=… for yours)"
             if card else f"{total:.2f} GiB")
    detail = (f"After weights, the profiling run's activation peak and non-torch memory, the budget left {k:.2f} GiB "
              f"for KV; one {m:,}-token request needs {need:.2f} GiB. K grows by exactly ΔU × the device total, "
              f"{basis}: gpu_memory_utilization {to} leaves ≈ {after:.2f} GiB ≈ {tokens:,} tokens.")
    if to > MAX_SANE_UTIL:
        detail += (" That leaves too little outside the budget for the CUDA context and graphs: use fp8 KV "
                   "(--kv-cache-dtype fp8), a shorter --max-model-len, more GPUs or a quantized checkpoint.")
        return Finding("not-enough-memory", "error", "Startup failed: no memory left for the KV cache", detail,
                       Suggestion("--max-model-len", m, None, note="shorter requests need less KV each"))
    return Finding("not-enough-memory", "error", "Startup failed: no memory left for the KV cache", detail,
                   Suggestion("--gpu-memory-utilization", u, to, tokens,
                              note=f"sized on the smallest GPU the log fits ({total:.1f} GiB)" if card else ""))


def _weights_too_big(s: Startup) -> Finding | None:
    """The weights fill the GPU: no utilization step holds one max_model_len request, so the fix is a split
    (--tensor-parallel-size) or a smaller weight format, each with what it leaves for KV (fit.py)."""
    p = fit.placement(s, MAX_SANE_UTIL, SHORTEST_USEFUL_CONTEXT)
    if p is None or p.context <= 0 or (p.at_max_util is not None and p.at_max_util.fits(p.context)):
        return None
    card = (f" (the log does not print the device total: {p.total_card}, {p.total_gib:.1f} GiB, is the smallest GPU "
            "its figures fit; pass --assume gpu=… for yours)") if p.total_card else ""
    how = "loaded" if p.weights_logged else "estimated from the model's config"
    share = f"{p.weights_share:.0%} of the" if p.weights_share < 1 else f"{p.weights_share:.1f}× the"
    detail = (f"The weights take {p.weights_gib:.2f} GiB per GPU ({how}), {share} "
              f"{p.total_gib:.2f} GiB device{card}; gpu_memory_utilization {p.util:g} gives vLLM "
              f"{p.util * p.total_gib:.2f} GiB for weights, activations and the KV cache together.")
    here = p.at_max_util
    if here is not None:
        detail += (f" Even at {p.max_util} the KV cache would hold {here.kv_tokens:,} tokens, "
                   f"less than one {p.context:,}-token request: no utilization fixes this.")
    moves: list[Suggestion] = []
    tp, bs = tp_size(s), block_size(s)
    if p.split is not None:
        sp = p.split
        detail += (f" --tensor-parallel-size {sp.tp} puts {sp.weights_gib:.2f} GiB of weights on each of {sp.tp} GPUs and "
                   f"leaves about {sp.kv_gib:.2f} GiB per GPU for KV ≈ {sp.kv_tokens:,} tokens "
                   f"({sp.kv_tokens / p.context:.1f} requests of {p.context:,}).")
        moves.append(Suggestion("--tensor-parallel-size", tp, sp.tp, sp.kv_tokens,
                                note=f"{sp.tp} GPUs of this size: {sp.weights_gib:.2f} GiB of weights each"))
    for q in p.quantized:
        where = "on this GPU" if q.tp == tp else f"at --tensor-parallel-size {q.tp}"
        what = ("FP8 weights (--quantization fp8 quantizes the checkpoint as it loads, or use a published FP8 one)"
                if q.quantization == "fp8" else
                "A 4-bit AWQ (or GPTQ) checkpoint of the model, served with --quantization awq,")
        detail += f" {what} takes {q.weights_gib:.2f} GiB per GPU {where} and leaves ≈ {q.kv_tokens:,} tokens"
        detail += "." if q.fits(p.context) else f", so --max-model-len {q.kv_tokens // bs * bs:,} at most."
        moves.append(Suggestion("--quantization", None, q.quantization, q.kv_tokens,
                                note=f"{q.weights_gib:.2f} GiB of weights per GPU {where}; some quality cost"
                                + ("" if q.quantization == "fp8" else "; needs a 4-bit checkpoint of the model")
                                + ("" if q.fits(p.context) else f"; with --max-model-len ≤ {q.kv_tokens // bs * bs:,}")))
    if here is not None and here.kv_tokens >= SHORTEST_USEFUL_CONTEXT:
        fits_len = here.kv_tokens // block_size(s) * block_size(s)
        moves.append(Suggestion("--max-model-len", p.context, fits_len, here.kv_tokens,
                                note=f"only with --gpu-memory-utilization {p.max_util}: one short request at a time"))
    if not moves:
        detail += " Use more GPUs (--tensor-parallel-size, --pipeline-parallel-size) or a quantized checkpoint."
    # the move that needs the fewest GPUs first (the GPU the user has beats one to buy), the checkpoint as it is
    # before a smaller format on a tie; a shorter context last
    def gpus_needed(m: Suggestion) -> tuple[int, bool]:
        placed = _split_of(p, m)
        return (placed.tp if placed is not None else 1 << 20, m.flag == "--quantization")

    moves.sort(key=gpus_needed)
    primary = moves[0] if moves else None
    if primary is not None:
        primary.alternatives = moves[1:]
    title = (f"Startup failed: the weights ({p.weights_gib:.2f} GiB per GPU) leave no room for the KV cache"
             if p.weights_logged else f"Startup failed: the weights ({p.weights_gib:.2f} GiB per GPU) do not fit the GPU")
    kind = "not-enough-memory" if s.failure is not None and s.failure.kind == "not-enough-memory" else "weights-oom"
    return Finding(kind, "error", title, detail, primary)


def _split_of(p: fit.Placement, move: Suggestion) -> fit.Split | None:
    """The placement a suggested move stands for (None: a shorter context, which needs no GPU)."""
    if move.flag == "--tensor-parallel-size":
        return p.split
    return next((q for q in p.quantized if q.quantization == move.to_value), None)


def _graph_estimate(s: Startup) -> tuple[float | None, str]:
    """The largest CUDA-graph estimate any rank logged (read or derived from the advisory), and that rank."""
    found = [(g, r.rank) for r in s.ranks if isinstance(g := VllmRankFacts(r).cuda_graph_estimate_gib, (int, float))]
    if not found:
        return None, ""
    gib, rank = max(found)
    return float(gib), rank


def _kv_tokens_at(s: Startup, to: float) -> int | None:
    k, total, u = s.capacity.available_kv_gib, total_gib(s), util(s)
    if k is None or total is None or u is None:
        return None
    return _tokens_for(s, rules.kv_after_util(k, total, u, to))


def _contention(s: Startup) -> Finding:
    f = s.failure
    assert f is not None
    free, total, u = f.data.get("free_gib"), f.data.get("total_gib") or total_gib(s), util(s)
    used = (total - free) if free is not None and total else None
    detail = ("Another process holds memory on this GPU. vLLM's budget is gpu_memory_utilization × TOTAL memory "
              "(\"a per-instance limit\"), so two instances at the default 0.9 can never share one GPU; their "
              "utilizations must add up to less than about 0.95, or give each --kv-cache-memory-bytes.")
    if used is not None and free is not None and total:
        detail = f"{used:.2f} GiB of the {total:.2f} GiB was already in use when this instance started. " + detail
        fits = round(_round_down(free / total) - 0.01, 2)  # a setting as typed: 0.81, not 0.8099999999999999
        return Finding("multi-instance-contention", "error", "Startup failed: the GPU is shared with another process", detail,
                       Suggestion("--gpu-memory-utilization", u, fits, _kv_tokens_at(s, fits)))
    if f.data.get("held_by_startup"):
        title, opening = held_by_earlier(f, "KV cache", "this instance")
        return Finding("multi-instance-contention", "error", title, opening + (
            " Two instances on one device must be sized together: give each its own GPU, or fix each KV cache "
            "with --kv-cache-memory-bytes so both fit, with weights and activations, in the device's total. "
            "More gpu_memory_utilization for this one alone does not make room the other holds."))
    if f.data.get("init_free_gib") is not None:
        detail = (f"Free memory changed during profiling ({f.data['init_free_gib']} → {f.data.get('current_free_gib')} GiB): "
                  "another process released or took memory while vLLM measured. " + detail)
    return Finding("multi-instance-contention", "error", "Startup failed: the GPU is shared with another process", detail)


_EAGER = Suggestion("--enforce-eager", False, True, note="no CUDA graphs: nothing to capture, slower decode")
DEFAULT_MAX_NUM_SEQS = {"V0": 256, "V1": 1024}  # vLLM's default per engine generation (V1 servers on large GPUs)


def _fewer_sequences(s: Startup) -> list[Suggestion]:
    """Half of --max-num-seqs: graphs are captured for batch sizes up to it, so fewer and smaller graphs."""
    given = setting_int(s, "max_num_seqs")
    start = given or DEFAULT_MAX_NUM_SEQS.get(era_of(s).engine)
    if not start or start < 2:
        return []
    return [Suggestion("--max-num-seqs", start, start // 2,
                       note=("" if given else f"from vLLM's {era_of(s).engine} default; ") +
                       "graphs are captured for batch sizes up to it, so fewer and smaller ones; fewer requests at once")]


def _graph_oom(s: Startup) -> Finding:
    u, total = util(s), total_gib(s)
    inside = era_of(s).graphs_in_budget
    where = ("inside the budget from the CUDA-graph estimate, which was too low" if inside else
             "after the KV cache was allocated, out of the memory left outside the budget")
    detail = f"CUDA graphs are captured {where}."
    inferred = s.failure is not None and s.failure.data.get("inferred")
    if inferred:
        detail = "The log ends during CUDA-graph capture (no 'Graph capturing finished' line). " + detail
    sug = None
    if u is not None and total:
        headroom = (1 - u) * total
        to = min(round(u - 0.02, 2), _round_down(1 - GRAPH_HEADROOM_GIB / total))
        detail += (f" At gpu_memory_utilization {u} that is (1 − {u}) × {total:.2f} = {headroom:.2f} GiB for the CUDA "
                   f"context, the graphs and the sampler; vLLM itself warns graphs take 1–3 GiB. {to} leaves "
                   f"{(1 - to) * total:.2f} GiB.")
        sug = Suggestion("--gpu-memory-utilization", u, to, _kv_tokens_at(s, to), note="or --enforce-eager",
                         alternatives=[_EAGER, *_fewer_sequences(s)])
    else:
        sug = replace(_EAGER, alternatives=_fewer_sequences(s))  # a copy: the module's _EAGER is shared
    detail += (" Alternatives: --enforce-eager (no graphs, slower decode), or fewer capture sizes (a lower --max-num-seqs; "
               "in V1 --cuda-graph-sizes / compilation_config.cudagraph_capture_sizes).")
    title = "Startup probably failed: out of memory while capturing CUDA graphs" if inferred else \
        "Startup failed: CUDA out of memory while capturing CUDA graphs"
    return Finding("oom-cuda-graph", "error", title, detail, sug)


def _killed(s: Startup) -> Finding:
    """A bare "Killed" after the KV cache was sized: SIGKILL, almost always the kernel's OOM killer."""
    cap = s.capacity
    sized = (f" after the KV cache was sized ({cap.num_gpu_blocks:,} GPU blocks)" if cap.num_gpu_blocks is not None else
             " after the KV cache was sized" if cap.kv_tokens is not None or cap.available_kv_gib is not None else "")
    v0 = era_of(s).engine == "V0"  # V1 has no CPU swap space
    swap = "the CPU swap space (--swap-space, per GPU), " if v0 else ""
    lower = "--gpu-memory-utilization (unified memory) or --swap-space" if v0 else "--gpu-memory-utilization (unified memory)"
    detail = (f"The process was killed{sized}: a bare 'Killed' is the shell reporting SIGKILL, almost always the kernel's "
              f"OOM killer. Host RAM ran out: {swap}pinned buffers and the weights "
              "being loaded all live there, and on unified-memory devices (Jetson, GB10) the KV cache does too. Lower "
              f"{lower}, or free host memory; `dmesg` names the victim.")
    sug = None
    if cap.kv_tokens is not None or cap.num_gpu_blocks is not None or cap.available_kv_gib is not None:
        u = util(s)
        start = u if u is not None else (DEFAULT_UTIL if s.setting("gpu_memory_utilization") is None else None)
        if start is not None and start > 0.2:
            conc = finite_number(cap.max_concurrency)
            need = f"; the pool is {conc:,.0f}× what one max_model_len request needs" if conc and conc >= 4 else ""
            sug = Suggestion("--gpu-memory-utilization", start, round(start - 0.1, 2),
                             note="each −0.1 hands 10 % of the device's memory back to the host (on unified memory, the "
                                  f"OS and the loader share it){need}; the log does not show how much the host lacked")
    return Finding("process-killed", "error", "Startup failed: the process was killed (out of host memory?)", detail, sug)


def _failure(s: Startup) -> list[Finding]:
    f = s.failure
    if f is None:
        return []
    if f.kind == "max-len-too-large":
        return _max_len(s)
    if f.kind == "not-enough-memory":
        return [_no_memory(s)]
    if f.kind == "multi-instance-contention":
        return [_contention(s)]
    if f.kind == "oom-cuda-graph":
        return [_graph_oom(s)]
    if f.kind == "host-memory":
        return [Finding("host-memory", "error", "Startup failed: swap space larger than host RAM allows",
                        f"{excerpt(f.message, 200)} — --swap-space is per GPU and multiplied by the tensor-parallel size; lower it "
                        "(it only matters for V0 preemption by swapping).")]
    if f.kind == "killed":
        return [_killed(s)]
    if f.kind == "cuda-oom":
        ref = s.reference_rank
        loading = ref is not None and ref.weights_gib is None
        logged_tp = setting_int(s, "tensor_parallel_size") or setting_int(s, "tp_size") or (
            tp_size(s) if len(s.ranks) > 1 else None)
        too_big = (_weights_too_big(s) or weights_fill_gpu(s, "--tensor-parallel-size", logged_tp)) if loading else None
        if too_big is not None:
            return [too_big]
        return [Finding("cuda-oom", "error", "CUDA out of memory " + ("while loading weights" if loading else "during startup"),
                        f"{excerpt(f.message, 240)}. " + ("The weights do not fit: more GPUs (--tensor-parallel-size) or a quantized "
                                                 "checkpoint." if loading else "Lower --gpu-memory-utilization."))]
    k = s.capacity.available_kv_gib
    detail = "The engine core died during startup; the cause is in the traceback after this line, not in this excerpt."
    if k is not None:
        detail += (f" The last memory figure is {k:.2f} GiB of KV cache per GPU: if the traceback ends in a 'max seq len' "
                   "ValueError, lower --max-model-len or raise --gpu-memory-utilization.")
    return [Finding("engine-init-failed", "error", "Startup failed: the engine core did not start", detail)]


# --- working startups ---------------------------------------------------------------------------------


def _reconciled(s: Startup) -> Finding | None:
    rec = s.reconciliation
    if rec is None or not rec.detail:
        return None
    verdict = {True: "the log's figures reconcile", False: "the log's figures do NOT reconcile",
               None: "not enough figures to check"}[rec.consistent]
    per_token = f"{rec.bytes_per_token:,} B of KV per token per GPU — " if rec.bytes_per_token else ""
    sev = "warning" if rec.consistent is False else "info"
    return Finding("kv-reconciled", sev, f"{per_token}{verdict}", f"{rec.method}. {rec.detail}.")


def _util_step(s: Startup) -> Finding | None:
    """What +0.01 of gpu_memory_utilization buys, and how far the log says it can go."""
    total, u, block = total_gib(s), util(s), _block_bytes(s)
    k, tokens = s.capacity.available_kv_gib, s.capacity.kv_tokens
    if total is None or block is None or s.failure is not None:
        return None
    ref = s.reference_rank
    if ref is not None and VllmRankFacts(ref).free_after_profile_gib is not None:
        return _util_step_of_free(s, ref, block)
    per_step = rules.tokens_per_util_step(total, block, block_size(s))
    detail = (f"Every +0.01 of gpu_memory_utilization adds 0.01 × {total:.2f} = {0.01 * total:.2f} GiB to the KV cache "
              f"(nothing else in the budget depends on it): +{per_step:,} tokens per GPU.")
    free0 = VllmRankFacts(ref).init_free_gib if ref else None
    if free0 is None or k is None or tokens is None or u is None:
        return Finding("util-step", "info", f"+0.01 gpu_memory_utilization = +{per_step:,} KV tokens", detail)
    graphs = 0.0 if era_of(s).graphs_in_budget else (ref.cuda_graph_gib or 0.0) if ref else 0.0
    spare = free0 - u * total - graphs - 1.0
    steps = math.floor(round(spare / (0.01 * total), 6))
    if steps < 1:
        detail += f" Free memory at startup was {free0:.2f} GiB, so there is no room to raise it safely."
        return Finding("util-step", "info", f"+0.01 gpu_memory_utilization = +{per_step:,} KV tokens", detail)
    to = round(u + steps / 100, 2)
    after = _tokens_for(s, rules.kv_after_util(k, total, u, to))
    detail += (f" {free0:.2f} GiB was free at startup; keeping 1 GiB spare" + (" and the CUDA graphs" if graphs else "")
               + f", {to} fits.")
    return Finding("util-step", "info", f"{spare:.2f} GiB more could go to the KV cache", detail,
                   Suggestion("--gpu-memory-utilization", u, to, after))


def _util_step_of_free(s: Startup, ref: Rank, block: int) -> Finding:
    """Gaudi's port: usable = util × the memory free after profiling (not × total), and the HPU-graph reserve is a
    share of that, so +0.01 of util adds 0.01 × free × (1 − reserve share) to the KV cache."""
    free = VllmRankFacts(ref).free_after_profile_gib or 0.0  # the caller checked it was printed
    reserved, usable = VllmRankFacts(ref).graph_reserved_gib, ref.usable_gib
    share = 1 - reserved / usable if isinstance(reserved, (int, float)) and usable else 1.0
    step = 0.01 * free * share
    per_step = rules.blocks_for(step, block) * block_size(s)
    detail = (f"This port budgets gpu_memory_utilization × the memory free after profiling ({free:.2f} GiB), and keeps "
              f"{1 - share:.0%} of that for {VllmRankFacts(ref).graph_kind or 'device'} graphs: every +0.01 adds "
              f"{step:.2f} GiB to the KV cache, +{per_step:,} tokens per device.")
    return Finding("util-step", "info", f"+0.01 gpu_memory_utilization = +{per_step:,} KV tokens", detail)


def _graph_profiling(s: Startup) -> Finding | None:
    ref = s.reference_rank
    eq = VllmRankFacts(ref).util_equivalent_without_graph_profiling if ref else None
    u = util(s)
    if ref is None or eq is None or u is None:
        return None
    share = u - eq
    g = VllmRankFacts(ref).cuda_graph_estimate_gib
    size = f" ({g:.2f} GiB)" if g is not None else f" ({share:.2%} of the device)"
    same = VllmRankFacts(ref).util_suggested_with_graph_profiling or round(u + share, 4)
    return Finding("cuda-graphs-in-budget", "info", f"CUDA graphs are paid from the budget: {u} behaves like {eq} used to",
                   f"Since v0.20 vLLM subtracts its CUDA-graph estimate{size} from gpu_memory_utilization × total before "
                   f"sizing the KV cache; before, graphs came out of the memory left outside the budget. The KV cache an "
                   f"older release gave at {u} needs {same} now.")


def _vllm_suggestion(s: Startup) -> Finding | None:
    ref = s.reference_rank
    fit = VllmRankFacts(ref).kv_cache_memory_fit_bytes if ref else None
    if fit is None or ref is None:
        return None
    full = VllmRankFacts(ref).kv_cache_memory_full_bytes
    detail = (f"vLLM measured this startup and suggests {rules.KV_CACHE_MEMORY_FLAG} {fit:,} ({fit / GIB:.2f} GiB) to stay "
              "inside the requested budget")
    detail += f", or {full:,} ({full / GIB:.2f} GiB) to use all free memory." if full else "."
    detail += (" A fixed KV size skips the memory profile on the next start and ignores gpu_memory_utilization "
               f"for sizing; re-measure after changing the model, batch limits or driver. The log's "
               f"`--kv-cache-memory=` is the same flag: every release that prints this hint (v0.10.2+) accepts both "
               f"spellings (argparse takes the prefix of {rules.KV_CACHE_MEMORY_FLAG}).")
    return Finding("kv-cache-memory-suggestion", "info", "vLLM's own --kv-cache-memory suggestion", detail,
                   Suggestion(rules.KV_CACHE_MEMORY_FLAG, s.setting("kv_cache_memory_bytes"), fit, _tokens_for(s, fit / GIB),
                              note="printed as --kv-cache-memory= in the log"))


def _has_kv_memory_flag(s: Startup) -> bool:
    """Whether the log's release has --kv-cache-memory-bytes: the logged version when known, else the oldest
    release its era allows (an era that straddles v0.10.2 may lack the flag)."""
    version = eras.parse_version(s.engine_version)
    return (version or era_of(s).first) >= rules.KV_CACHE_MEMORY_FROM


def _overallocated(s: Startup) -> Finding | None:
    seqs, m, tokens = setting_int(s, "max_num_seqs"), s.capacity.max_model_len, s.capacity.kv_tokens
    if not seqs or not m or not tokens or tokens < 2 * seqs * m:
        return None
    usable = seqs * m
    detail = (f"vLLM sizes the KV cache from memory, not from demand: {tokens:,} tokens, while max_num_seqs {seqs} × "
              f"max_model_len {m:,} = {usable:,} tokens can be in flight. The rest only holds cached prefixes (prefix caching).")
    k, bpt = s.capacity.available_kv_gib, _bytes_per_token(s)
    sug = None
    if k is not None and bpt:
        want = int(usable * bpt * 1.1)
        detail += f" If the memory is wanted elsewhere, about {want / GIB:.2f} GiB of KV covers the in-flight maximum."
        u, total = util(s), total_gib(s)
        if _has_kv_memory_flag(s):
            sug = Suggestion(rules.KV_CACHE_MEMORY_FLAG, s.setting("kv_cache_memory_bytes"), want, _tokens_for(s, want / GIB))
        elif u is not None and total:  # no fixed-size flag before v0.10.2: the same KV through the utilization
            to = rules.util_for_kv(want / GIB, k, total, u)
            detail += f" This release has no {rules.KV_CACHE_MEMORY_FLAG} (v0.10.2+); gpu_memory_utilization {to} gives that."
            sug = Suggestion("--gpu-memory-utilization", u, to, _tokens_for(s, rules.kv_after_util(k, total, u, to)))
    return Finding("kv-overallocated", "info", f"The KV cache holds {tokens / usable:.1f}× what can run at once", detail, sug)


def _warnings(s: Startup) -> list[Finding]:
    """One finding per kind of warning: vLLM repeats some per KV group or per worker."""
    out: list[Finding] = []
    seen: set[object] = set()
    for w in s.warnings:
        key = w.get("code") if w.get("code") == "hybrid-kv-manager-disabled" else (w.get("code"), w.get("message"))
        if key in seen:
            continue
        seen.add(key)
        if w.get("code") == "hybrid-kv-manager-disabled":
            out.append(Finding("hybrid-kv-manager-disabled", "warning",
                               "Sliding-window layers are sized for the full context",
                               "The hybrid KV cache manager is off (a KV connector such as LMCache/offloading, "
                               "--disable-hybrid-kv-cache-manager, or an unsupported platform), so every sliding-window "
                               "layer keeps max_model_len tokens of KV like a full-attention layer: far fewer tokens fit."))
        elif w.get("code") == "swap-space-large":
            out.append(Finding("swap-space-large", "warning", "Swap space is a large share of host RAM", w.get("message", "")))
    return out


def _rank_spread(s: Startup) -> Finding | None:
    values = {r.rank: g for r in s.ranks if (g := VllmRankFacts(r).available_kv_gib) is not None}
    if len(values) < 2:
        return None
    lo, hi = min(values, key=values.__getitem__), max(values, key=values.__getitem__)
    spread = values[hi] - values[lo]
    if spread < 0.1:
        return None
    return Finding("kv-rank-spread", "info", f"Workers differ by {spread:.2f} GiB of KV memory",
                   f"{lo} had {values[lo]:.2f} GiB, {hi} {values[hi]:.2f} GiB. vLLM gives every worker the block count of "
                   f"the smallest, so {spread:.2f} GiB on the larger ones stays unused (usually unequal non-torch memory: "
                   "NCCL buffers, or another process on that GPU).")


def _offload(s: Startup) -> Finding | None:
    gb = s.setting("cpu_offload_gb")
    ref = s.reference_rank
    if not gb or ref is None or ref.weights_gib is None:
        return None
    return Finding("cpu-offload", "info", f"{gb} GiB of weights live in host memory",
                   f"--cpu-offload-gb {gb} keeps that much of the weights in pinned host RAM (read over PCIe every step); "
                   f"the GPU holds {ref.weights_gib:.2f} GiB of weights, and the KV cache gains what was moved.")


# Non-torch memory of one quiet vLLM worker (CUDA context, cuBLAS workspace, NCCL and custom all-reduce buffers):
# 0.1–3 GiB in the logs we know, 5.7 GiB at most (TP workers of a 140 GiB run). More is not this process's.
NON_TORCH_IMPLAUSIBLE_GIB = 8.0


def _foreign_memory(s: Startup) -> Finding | None:
    """A 'non-torch' figure far above what a worker's own context and communicators take: vLLM's profiler counts
    every change in device memory while it profiles as its own, so another process allocating on the same GPU
    (a second instance starting or waking, another pod) lands here and comes out of this instance's KV cache."""
    worst = max((r for r in s.ranks if r.non_torch_gib is not None), key=lambda r: r.non_torch_gib or 0.0, default=None)
    if worst is None or (worst.non_torch_gib or 0.0) < NON_TORCH_IMPLAUSIBLE_GIB:
        return None
    extra = worst.non_torch_gib or 0.0
    pool = worst.pool("target")
    kv = pool.gib if pool is not None and pool.gib is not None else None
    quiet = f"; on a quiet GPU the KV cache would be about {kv + extra - 1.0:.1f} GiB instead of {kv:.2f}" if kv else ""
    detail = (f"Non-torch memory of {extra:.2f} GiB during profiling is far more than one worker's CUDA context, "
              f"cuBLAS workspace and NCCL buffers take (0.1–3 GiB, at most about 6 in the logs we know). vLLM's profiler "
              "counts every change in device memory while it profiles as its own non-torch memory, so another process "
              "on the same GPU (a second vLLM instance starting or waking from sleep, another pod or program) that "
              f"allocated meanwhile was charged to this one and taken out of its KV cache{quiet}. Start instances on a "
              "shared GPU one at a time (each after the other is ready or asleep), or fix each one's KV size with "
              "--kv-cache-memory-bytes so the profile no longer decides it.")
    return Finding("foreign-memory-in-profile", "warning",
                   f"Non-torch memory {extra:.2f} GiB is implausibly large: another process shared the GPU during "
                   "profiling", detail)


LONG_CONTEXT_TOKENS = 131_072  # from here a max_model_len is worth a word when the log shows no KV figure


def _long_context(s: Startup) -> Finding | None:
    """The log shows the engine's configuration but no KV figure: a very long max_model_len (often a model's rope-scaled
    default) is what vLLM checks one request against at startup; say so, with the KV it needs when the model is known."""
    cap = s.capacity
    m = cap.max_model_len or setting_int(s, "max_model_len")
    if (not m or m < LONG_CONTEXT_TOKENS or s.failure is not None or cap.available_kv_gib is not None
            or cap.num_gpu_blocks is not None or cap.kv_tokens is not None):
        return None
    bpt = _bytes_per_token(s)
    need = f" — {m * bpt / GIB:,.1f} GiB of KV cache per GPU at {bpt:,} B per token" if bpt else ""
    to = max(32_768, m // 4)
    detail = (f"max_model_len is {m:,} tokens{need}. vLLM refuses to start unless one request of max_model_len fits "
              "in the KV cache, and sizes its profiling run for it; when the model's default context is this long "
              "(a rope-scaled checkpoint says so in its config), set --max-model-len to what requests need.")
    return Finding("long-max-model-len", "info", f"max_model_len {m:,}: one request of that length must fit in the KV "
                   "cache", detail, Suggestion("--max-model-len", m, to, note="a context requests actually use; "
                                               "the KV cache then holds more of them at once"))


def _capacity_meaning(s: Startup) -> Finding | None:
    """What the KV figure means for serving: shared by all requests, how many fit at max_model_len and at typical
    lengths, and when --max-num-seqs rather than the cache is the limit (context only)."""
    cap = s.capacity
    tokens = cap.kv_tokens
    m = cap.max_model_len or setting_int(s, "max_model_len")
    if not tokens and cap.max_concurrency and m and s.failure is None:
        return _concurrency_meaning(s, cap.max_concurrency, m)
    if not tokens or s.failure is not None or VllmCapacityFacts(s.capacity).hybrid_layout:
        return None  # a hybrid model's tokens are not one per cell: its own findings say what they hold
    seqs = setting_int(s, "max_num_seqs")
    parts: list[str | None] = [f"The KV cache holds {tokens:,} tokens in all, shared by every running request (prefix caching lets "
             "requests with a common prefix share blocks)"]
    if m:
        parts.append(f"max_model_len {m:,} is the most one request may use: {tokens / m:,.2f} requests at that full "
                     "length fit at once (vLLM's 'Maximum concurrency')")
    parts.append(typical_fits(tokens, m, "it holds", "--max-num-seqs", seqs))
    detail = ". ".join(p for p in parts if p) + "."
    return Finding("kv-capacity", "info", f"KV cache: {tokens:,} tokens shared by all requests", detail, context=True)


def _concurrency_meaning(s: Startup, conc: float, m: int) -> Finding:
    """Only 'Maximum concurrency for M tokens per request: X×' was read: what X counts (full-length requests the KV
    cache holds at once, a capacity and not a speed-up), and the tokens it implies (X × M, ± the printed rounding)."""
    low, high = int((conc - rules.HALF_CENT) * m), int((conc + rules.HALF_CENT) * m)
    mid = int(conc * m)
    parts: list[str | None] = [f"'Maximum concurrency {conc:.2f}x' means the KV cache holds about {conc:.2f} requests of the full {m:,} "
             f"tokens at once: a capacity, not a speed-up or a throughput. It implies ≈ {mid:,} tokens of KV cache "
             f"({low:,}–{high:,}: the figure is printed with two decimals), shared by every running request, so "
             "shorter requests fit more of them"]
    parts.append(typical_fits(mid, m, "it holds about", "--max-num-seqs", setting_int(s, "max_num_seqs")))
    return Finding("kv-capacity", "info", f"Maximum concurrency {conc:.2f}x: about {conc:.1f} requests of {m:,} tokens "
                   "fit at once", ". ".join(p for p in parts if p) + ".", context=True)


def _device_zero(s: Startup) -> Finding | None:
    """Several GPUs: what nvidia-smi shows on GPU 0 beyond the worker's own figures (context only)."""
    tp = tp_size(s)
    if tp < 2 or s.failure is not None:
        return None
    others = "the other GPU" if tp == 2 else f"the other {tp - 1} GPUs"
    return Finding("device-zero-overhead", "info", f"GPU 0 carries more than {others}",
                   "The figures above are each worker's own. nvidia-smi shows GPU 0 (rank 0, TP0) fuller than the rest "
                   "by memory no worker reports: rank 0's NCCL communicator buffers (more with NCCL_P2P_DISABLE=1 or "
                   "over PCIe, where NCCL stages through extra buffers), and the CUDA context and library workspaces "
                   "(cuBLAS, FlashInfer) of the front-end and engine-core processes, which open device 0 — typically "
                   "0.5–3 GiB. It is runtime overhead, not weights or KV cache; keep GPU 0's lower free memory in mind "
                   "when sizing gpu_memory_utilization, since every rank gets the same budget.", context=True)


def _serving_error(s: Startup) -> Finding | None:
    """The server crashed while serving (its traceback runs through execute_model after the KV cache was sized):
    the step, and, for an out of memory or a traceback cut before its error, the levers that give a step's
    activations room. Never more KV memory: the pool was not what ran out."""
    w = next((w for w in s.warnings if w.get("code") == "error-while-serving"), None)
    if w is None:
        return None
    raised = w.get("raised")
    oom = s.failure is not None and s.failure.kind == "oom-runtime"
    said = f"it raised '{excerpt(raised, 200)}'" if raised else "the traceback is cut before its error"
    detail = (f"The traceback runs through {w.get('step') or 'a model step'} after the KV cache was sized: the server "
              f"had started and crashed while serving; {said}.")
    title = ("The server ran out of memory while serving " if oom else "The server crashed while serving ") + (
        w.get("step") or "a model step")
    if raised and not oom:
        return Finding("error-while-serving", "warning", title, detail, own_fix_only=True)
    detail += (" An out of memory while serving is memory the startup's profile run did not see: a step's activations "
               "or sampler buffers larger than the profiled batch (max_num_batched_tokens tokens), or memory another "
               "process took afterwards. The KV cache holds the rest of the budget, so the room has to come from "
               "outside it: lower --gpu-memory-utilization, or lower --max-num-batched-tokens / --max-num-seqs so "
               "each step needs less.")
    u, total = util(s), total_gib(s)
    tried = s.failure.data.get("tried_gib") if oom and s.failure else None
    free = (s.failure.data.get("device_free_gib") or 0.0) if oom and s.failure else 0.0
    alts = []
    batched = setting_int(s, "max_num_batched_tokens")
    if batched and batched > 1:
        alts.append(Suggestion("--max-num-batched-tokens", batched, batched // 2,
                               note="each step's prefill activations scale with it; long prompts take more steps"))
    seqs = setting_int(s, "max_num_seqs")
    if seqs and seqs > 1:
        alts.append(Suggestion("--max-num-seqs", seqs, seqs // 2, note="fewer requests per step; fewer at once"))
    sug = None
    if u is not None and total:
        short_gib = max(0.0, (tried or 0.0) - free)
        to = _round_down(u - short_gib / total - 0.02)  # what was missing, and one step of 2 % beyond it
        if 0 < to < u:
            detail += (f" At {to} (from {u}) {(u - to) * total:.2f} GiB more stays outside the budget"
                       + (f", against the {short_gib:.2f} GiB the failed allocation lacked." if tried else "."))
            sug = Suggestion("--gpu-memory-utilization", u, to, _kv_tokens_at(s, to), alternatives=alts,
                             note="fewer KV tokens; the memory given back is left for the step's activations")
    if sug is None and alts:
        sug = replace(alts[0], alternatives=alts[1:])
    return Finding("error-while-serving", "error" if oom else "warning", title, detail, sug, own_fix_only=True)


def findings(s: Startup) -> list[Finding]:
    serving = _serving_error(s)
    out: list[Finding] = [serving] if serving else []
    if s.failure is not None and s.failure.kind != "oom-runtime":
        out.extend(_failure(s))
    for f in (_foreign_memory(s), _long_context(s), _reconciled(s), _util_step(s), _graph_profiling(s), _vllm_suggestion(s),
              _overallocated(s), _rank_spread(s), _offload(s)):
        if f is not None:
            out.append(f)
    out.extend(_warnings(s))
    for context in (_capacity_meaning(s), _device_zero(s)):
        if context is not None:
            out.append(context)
    return out


def scheduler_advice(s: Startup, head: str, running_txt: str, rt: dict) -> tuple[str, Suggestion | None]:
    """Requests queued while the pool had room: vLLM's per-step token budget, and the flag."""
    tps = ((rt.get("throughput") or {}).get("prompt_tokens_per_s") or {}).get("mean")
    budget = s.setting("max_num_batched_tokens")
    detail = (f"{head}{running_txt}. Not memory: vLLM schedules at most --max-num-batched-tokens"
              f"{f' ({budget:,})' if isinstance(budget, int) else ''} per step, so a burst of long prompts waits for "
              f"prefill, not for KV blocks{f' (prompt throughput averaged {tps:,.0f} tokens/s)' if tps else ''}. A larger "
              "--max-num-batched-tokens (or more replicas) drains such a queue; more KV memory would not.")
    sug = (Suggestion("--max-num-batched-tokens", budget, 2 * budget, note="admits prompts faster; KV usage had room")
           if isinstance(budget, int) else None)
    return detail, sug
