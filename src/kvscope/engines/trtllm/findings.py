"""TensorRT-LLM findings: what kv_cache_free_gpu_mem_fraction took, what it buys, and why a start failed.

TensorRT-LLM gives the KV cache a fraction (default 0.9) of the memory that is *free after* the
engine, execution context and runtime buffers are in place — not of the device total. That one fact
explains most "TensorRT-LLM took all my GPU memory" reports, so the budget finding leads.
"""

from __future__ import annotations

from kvscope.core.startup import Finding, Startup, Suggestion
from kvscope.engines.trtllm.eras import default_max_batch_size
from kvscope.engines.trtllm.facts import TrtCapacityFacts, TrtRankFacts
from kvscope.engines.trtllm.finish import DEFAULT_FRACTION, effective_fraction, runtime_buffer_oom

RAISED_FRACTION = 0.95
LARGE_CONTEXT_GIB = 1.0



def _budget(s: Startup) -> Finding | None:
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    tokens = s.capacity.kv_tokens
    if ref is None or target is None or target.gib is None or not tokens:
        return None
    avail = TrtRankFacts(ref).kv_sizing_free_gib
    frac, how = effective_fraction(s)
    blocks, tpb = s.capacity.num_gpu_blocks, TrtCapacityFacts(s.capacity).tokens_per_block
    shape = f" ({blocks:,} blocks × {tpb} tokens)" if blocks and tpb else ""
    title = f"KV cache: {target.gib:.2f} GiB per GPU = {tokens:,} tokens{shape}"
    if s.settings.get("fake_cache_manager") and target.gib < 0.005:
        return Finding("trtllm-kv-budget", "info", f"KV cache: {tokens:,} tokens{shape}; its size is not in the log",
                       "AutoDeploy logged a fake cache manager (head_dim=0): its 'Allocated 0.00 GiB' line counts pages, "
                       "not memory, so the KV cache's real size is not shown here.")
    if avail is None or frac is None:
        detail = ("TensorRT-LLM sizes the pool from kv_cache_free_gpu_mem_fraction (default 0.9) of the GPU memory "
                  "still free after the engine and its buffers, or from max_tokens_in_paged_kv_cache when that is "
                  "smaller. The log does not show the free memory it measured.")
        return Finding("trtllm-kv-budget", "info", title, detail)
    capped = _capped_by_max_tokens(s, tokens)
    if capped:
        detail = (f"max_tokens_in_paged_kv_cache = {tokens:,} capped the pool: the smaller of the two limits wins, and "
                  f"kv_cache_free_gpu_mem_fraction = {frac:g} ({how}) of the {avail:.2f} GiB free would have allowed "
                  f"{frac * avail:.2f} GiB. {avail - target.gib:.2f} GiB stays free.")
        more = int(tokens * frac * avail / target.gib) if target.gib > 0 else None
        sug = Suggestion("max_tokens_in_paged_kv_cache", tokens, more, kv_tokens_after=more,
                         note="or leave it unset to let the fraction decide") if more and more > tokens else None
        return Finding("trtllm-kv-budget", "info", title, detail, sug)
    detail = (f"kv_cache_free_gpu_mem_fraction = {frac:g} ({how}) of the {avail:.2f} GiB free after the engine, "
              f"execution context and runtime buffers = {frac * avail:.2f} GiB for KV; "
              f"{avail - target.gib:.2f} GiB stays free for everything else.")
    if ref.total_gib:
        detail += f" The pool is {target.gib / ref.total_gib:.0%} of the device's {ref.total_gib:.2f} GiB."
    # a fraction implied from sub-GiB figures printed to two decimals, or from one of an encoder-decoder's two
    # caches (cross_kv_cache_fraction splits the budget), is no basis for advice
    implied = how == "implied by the log"
    shaky = implied and (target.gib < 1.0 or len(TrtRankFacts(ref).estimation_kv_gib or []) > 0)
    after = int(tokens * RAISED_FRACTION / frac) if 0 < frac < RAISED_FRACTION and not shaky else None
    sug = Suggestion("kv_cache_free_gpu_mem_fraction", frac, RAISED_FRACTION, kv_tokens_after=after,
                     note="more tokens, less headroom; lower it instead to leave memory to other processes") if after else None
    return Finding("trtllm-kv-budget", "info", title, detail, sug)


def _capped_by_max_tokens(s: Startup, tokens: int) -> bool:
    """The log says max_tokens was set, and the pool has exactly that many tokens."""
    return bool(s.settings.get("max_tokens_set")) and s.setting_number("max_tokens_in_paged_kv_cache") == tokens


def _greedy(s: Startup) -> Finding | None:
    """The default grabs almost everything free: say how to cap it at what the engine can actually use."""
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if ref is None or target is None or target.gib is None:
        return None
    frac, _ = effective_fraction(s)
    others = ref.weights_gib or (TrtRankFacts(ref).trt_managed_gpu_mib or 0) / 1024 or None
    if frac is None:
        big = (ref.total_gib and target.gib >= 0.5 * ref.total_gib) or (others and target.gib >= 4 * others)
        if not big:
            return None
    elif abs(frac - DEFAULT_FRACTION) > 0.01 or (ref.total_gib and target.gib < 0.5 * ref.total_gib):
        return None
    batch, seq = s.setting_number("max_batch_size") or s.setting_number("max_num_sequences"), s.setting_number("max_seq_len")
    need = int(batch * seq) if batch and seq else None
    tokens = s.capacity.kv_tokens
    basis = f" ({others:.2f} GiB of engine / TensorRT allocations)" if others else ""
    detail = ("TensorRT-LLM gives the KV cache kv_cache_free_gpu_mem_fraction of whatever is free once the engine is "
              f"loaded{basis} — 0.9 unless set — so the pool grows to fill the GPU and another process cannot share it. "
              "Cap it with kv_cache_free_gpu_mem_fraction or max_tokens_in_paged_kv_cache (the smaller wins).")
    sug = None
    if need and tokens and need < tokens and batch and seq:  # need already implies batch and seq
        detail += (f" max_batch_size {int(batch):,} × max_seq_len {int(seq):,} = {need:,} tokens is all the engine can "
                   f"hold at once; the pool has {tokens:,}.")
        sug = Suggestion("max_tokens_in_paged_kv_cache", None, need, kv_tokens_after=need)
    elif tokens:
        detail += " Set max_tokens_in_paged_kv_cache to max_batch_size × max_seq_len of the engine."
    return Finding("trtllm-default-fraction-takes-free-memory", "info",
                   f"The KV pool took {target.gib:.2f} GiB: the fraction applies to free memory, 0.9 by default", detail, sug)


def _concurrency(s: Startup) -> Finding | None:
    tokens, seq = s.capacity.kv_tokens, s.setting_number("max_seq_len")
    batch = s.setting_number("max_batch_size") or s.setting_number("max_num_sequences") or s.setting_number("max_num_requests")
    if not tokens or not seq or not batch:
        return None
    full = tokens / seq
    if full >= batch:
        return None
    raise_what = ("Raise max_tokens_in_paged_kv_cache (it capped the pool)" if _capped_by_max_tokens(s, tokens)
                  else "Raise kv_cache_free_gpu_mem_fraction")
    return Finding("trtllm-kv-below-batch", "warning",
                   f"The KV cache holds {full:,.2f} full-length sequences; max_batch_size is {int(batch)}",
                   f"{tokens:,} tokens / max_seq_len {int(seq):,} = {full:,.2f}: at full length the scheduler can run only "
                   f"that many of the {int(batch)} requests the engine was built for (shorter requests fit more). "
                   f"{raise_what}, or rebuild with a smaller max_seq_len / max_batch_size.")


def _window(s: Startup) -> Finding | None:
    w = next((w for w in s.warnings if w.get("code") == "attention-window-reduced"), None)
    if w is None:
        return None
    return Finding("trtllm-attention-window-reduced", "warning",
                   f"The KV cache cannot hold one max-length sequence: the attention window was cut to {w.get('to'):,} tokens",
                   "TensorRT-LLM reduced max_attention_window / max_seq_len to what the KV pool holds; longer requests "
                   "will be rejected or truncated. Give the KV cache more memory or build for a shorter max_seq_len.",
                   Suggestion("kv_cache_free_gpu_mem_fraction", effective_fraction(s)[0], RAISED_FRACTION))


def _context(s: Startup) -> Finding | None:
    ref = s.reference_rank
    ctx = TrtRankFacts(ref).execution_context_gib if ref else None
    if ctx is None or ctx < LARGE_CONTEXT_GIB:
        return None
    tokens = s.setting_number("max_num_tokens")
    detail = (f"The TensorRT execution context (activation memory) takes {ctx:.2f} GiB before the KV cache is sized. "
              "It is fixed at engine build by max_num_tokens (and max_batch_size); rebuilding with a smaller "
              "max_num_tokens shrinks it and leaves that memory to the KV cache.")
    return Finding("trtllm-large-execution-context", "info", f"Execution context: {ctx:.2f} GiB", detail,
                   Suggestion("max_num_tokens (trtllm-build)", int(tokens) if tokens else None,
                              int(tokens) // 2 if tokens else None))


def _limits(s: Startup) -> Finding | None:
    """No KV line in the log: say what the engine's build limits demand of the KV cache."""
    batch, seq = s.setting_number("max_batch_size") or s.setting_number("max_num_sequences"), s.setting_number("max_seq_len")
    if s.capacity.kv_tokens is not None or not batch or not seq:
        return None
    need = int(batch * seq)
    tp = s.settings.get("tp_size")
    detail = (f"The log stops before the KV cache is sized. The engine was built for max_batch_size {int(batch)} × "
              f"max_seq_len {int(seq):,}: {need:,} KV tokens for a full batch of maximum-length sequences"
              + (f", on each of the {tp} TP ranks (each holds its share of the heads)" if tp and tp > 1 else "")
              + ". TensorRT-LLM will cap the attention window to what fits and warn if that is less than max_seq_len.")
    return Finding("trtllm-engine-limits", "info", f"Engine limits: {int(batch)} × {int(seq):,} = {need:,} tokens at full length",
                   detail)


def _failure(s: Startup) -> Finding | None:
    f = s.failure
    if f is None:
        return None
    if f.kind == "max-len-too-large":
        return _too_small(s, f.data)
    frac, _ = effective_fraction(s)
    lower = round(max(0.1, (frac or DEFAULT_FRACTION) - 0.1), 2)
    component = f.data.get("component")
    requested = f.data.get("requested_bytes")
    what = f"the {component}" if component else (f"{requested / (1 << 30):.2f} GiB" if requested else "an allocation")
    if runtime_buffer_oom(s):
        return Finding("trtllm-oom", "error", "Startup failed: out of GPU memory allocating the runtime buffers, before "
                       "the KV cache was sized",
                       "TensorRT-LLM ran out of GPU memory allocating its runtime buffers, before it sized the KV cache, "
                       "so kv_cache_free_gpu_mem_fraction is not the cause: the engine and the buffers its build limits "
                       "need (max_batch_size, max_num_tokens, max_beam_width) do not fit in what is free. The Triton "
                       "backend and the C++ runtime allocate them for the full max_batch_size the engine was built with "
                       "(an offline run with a small batch does not). Rebuild with a smaller --max_batch_size (and "
                       "--max_num_tokens), use more TP, or free the GPU of other processes.", _smaller_build(s))
    detail = (f"TensorRT-LLM ran out of GPU memory creating {what}. The KV cache takes kv_cache_free_gpu_mem_fraction "
              "of the memory free at that point, so anything allocated after it (CUDA graphs, sampler, decoder, "
              "another process) must fit in the rest: lower the fraction or cap max_tokens_in_paged_kv_cache; if the "
              "engine itself does not fit, rebuild with a smaller max_batch_size / max_num_tokens or more TP.")
    return Finding("trtllm-oom", "error", f"Startup failed: out of GPU memory ({f.kind})", detail,
                   Suggestion("kv_cache_free_gpu_mem_fraction", frac or DEFAULT_FRACTION, lower))


def _token_count(s: Startup) -> Finding | None:
    """The older runtime's 'Using N tokens in paged KV cache': N is tokens, and the pool holds whole blocks."""
    ref = s.reference_rank
    if ref is not None and ref.pool("target") is not None:
        return None  # the size line said more; the budget finding covers it
    tokens, tpb = s.capacity.kv_tokens, TrtCapacityFacts(s.capacity).tokens_per_block
    if not tokens or s.failure is not None:
        return None
    detail = (f"{tokens:,} is a number of tokens, not blocks: TensorRT-LLM computed it from the memory it may use "
              "(kv_cache_free_gpu_mem_fraction of what is free, or max_tokens_in_paged_kv_cache).")
    title = f"KV cache: {tokens:,} tokens"
    if isinstance(tpb, int) and tpb > 0:
        blocks = -(-tokens // tpb)
        detail += (f" The pool is allocated in whole blocks of tokens_per_block = {tpb}, so it is rounded up to "
                   f"{tokens / tpb:,.1f} → {blocks:,} blocks = {blocks * tpb:,} tokens.")
        title += f" = {blocks:,} blocks of {tpb}"
    else:
        detail += " The pool is allocated in whole blocks of tokens_per_block (a build setting), rounded up."
    return Finding("trtllm-kv-tokens", "info", title, detail, context=True)


def _smaller_build(s: Startup, buffers_gib: float | None = None, engine_gib: float | None = None) -> Suggestion | None:
    """A smaller max_batch_size (runtime buffers scale with it), max_num_tokens halved as the alternative.

    Given the buffers' size (the build-buffers finding), the target is computed: the largest power of two at
    which the buffers, scaled in proportion, take no more than the engine itself (at least 1 GiB); a build
    the log does not describe is taken to have kept the release's default (eras.py), and the note says so.
    Without the buffers' size (a failed start: how much was missing is unknown) the build's own value is
    halved. None when nothing says what the engine was built with."""
    batch, tokens = s.setting_number("max_batch_size"), s.setting_number("max_num_tokens")
    alts = [Suggestion("--max_num_tokens", int(tokens), max(1, int(tokens) // 2),
                       note="trtllm-build: the execution context (activations) scales with it")] if tokens and tokens > 1 else []
    assumed = ""
    if not batch and buffers_gib:
        default = default_max_batch_size(s.engine_version)
        if default is not None:
            batch, where = default
            assumed = (f". The log does not show the build's value: {int(batch):,} is {where}; if you built with "
                       "another, say it with --assume max_batch_size=N")
    if batch and batch > 1 and buffers_gib:
        per_request_gib = buffers_gib / batch
        room_gib = max(1.0, engine_gib or 0.0)
        target = 1
        while target * 2 < batch and target * 2 * per_request_gib <= room_gib:
            target *= 2
        return Suggestion("--max_batch_size", int(batch), target, alternatives=alts,
                          note=f"trtllm-build: runtime and decoder buffers scale with it, about {target * per_request_gib:.2f} GB "
                               f"at {target:,} instead of {buffers_gib:.2f} GB at {int(batch):,}; at most {target:,} requests "
                               f"run at once{assumed}")
    if batch and batch > 1:
        return Suggestion("--max_batch_size", int(batch), max(1, int(batch) // 2), alternatives=alts,
                          note="trtllm-build: runtime and decoder buffers scale with it; fewer requests run at once. The "
                               "log does not show how much was missing, so halve it and rebuild until it starts")
    return alts[0] if alts else None


def _buffers_gib(ref) -> float:
    """What the runtime buffers and the decoder took on a rank (0 when the log does not say)."""
    return (TrtRankFacts(ref).runtime_buffers_gib or 0.0) + (TrtRankFacts(ref).decoder_gib or 0.0)


def _build_buffers(s: Startup) -> Finding | None:
    """Runtime buffers and the decoder, sized by the engine's build limits, dwarf the engine: the answer to
    'why does a small model take the whole GPU' alongside the KV fraction."""
    ref = s.reference_rank
    if ref is None:
        return None
    runtime, decoder = TrtRankFacts(ref).runtime_buffers_gib, TrtRankFacts(ref).decoder_gib
    buffers = _buffers_gib(ref)
    engine = ref.weights_gib or (TrtRankFacts(ref).trt_managed_gpu_mib or 0) / 1024 or None
    if buffers < LARGE_CONTEXT_GIB or (engine and buffers < engine):
        return None
    parts = [f"runtime buffers {runtime:.2f} GB" if runtime else "", f"decoder {decoder:.2f} GB" if decoder else ""]
    than = f", {buffers / engine:.0f}× the {engine:.2f} GiB engine" if engine else ""
    detail = (f"Runtime buffers and decoder are allocated for the engine's build limits (max_batch_size, "
              f"max_num_tokens, max_beam_width, max_seq_len), not for the model: {' and '.join(p for p in parts if p)} "
              f"({buffers:.2f} GB{than}). A default "
              "trtllm-build sizes them for far more concurrent requests than one GPU serves. Rebuild with a smaller "
              "--max_batch_size (and --max_num_tokens) to give that memory back; the KV cache then takes "
              "kv_cache_free_gpu_mem_fraction of what is freed, so lower that fraction too if the point is to leave "
              "memory to other processes.")
    return Finding("trtllm-build-buffers", "info", f"Runtime buffers and decoder take {buffers:.2f} GB, sized by the "
                   "build limits", detail, _smaller_build(s, buffers, engine))


def _too_small(s: Startup, data: dict) -> Finding:
    """Triton refused a pool smaller than one sequence of beam × tokensPerBlock × maxBlocksPerSeq."""
    have, need = data.get("kv_tokens"), data.get("needed_tokens")
    title = "Startup failed: the KV cache cannot hold one maximum-length sequence"
    if have and need:
        title += f" ({have:,} < {need:,} tokens)"
    frac, _ = effective_fraction(s)
    detail = ("TensorRT-LLM needs room for at least one sequence of max_seq_len (× beam width) in the paged KV cache. "
              "Give the pool more memory (kv_cache_free_gpu_mem_fraction, or a larger max_tokens_in_paged_kv_cache if "
              "it is set), or rebuild the engine for a shorter max_seq_len / max_attention_window.")
    if have and need and s.settings.get("max_tokens_set"):  # max_tokens capped the pool: raising it is the fix
        sug = Suggestion("max_tokens_in_paged_kv_cache", have, need, kv_tokens_after=need)
    else:  # the fraction sized it: more memory, or a build for shorter sequences
        sug = Suggestion("kv_cache_free_gpu_mem_fraction", frac or DEFAULT_FRACTION, RAISED_FRACTION,
                         note=f"the pool must reach {need:,} tokens" if need else "")
    return Finding("trtllm-kv-below-one-sequence", "error", title, detail, sug)


def findings(s: Startup) -> list[Finding]:
    budget, buffers = _budget(s), _build_buffers(s)
    ref = s.reference_rank
    pool = ref.pool("target") if ref else None
    # the larger consumer leads: buffers sized by the build limits can outweigh the KV pool itself
    pool_gib = pool.gib if pool is not None and pool.gib is not None else 0.0
    bigger = buffers is not None and ref is not None and _buffers_gib(ref) > pool_gib
    first = (buffers, budget) if bigger else (budget, buffers)
    found = (_failure(s), *first, _token_count(s), _greedy(s), _concurrency(s), _window(s), _context(s), _limits(s))
    return [f for f in found if f is not None]
