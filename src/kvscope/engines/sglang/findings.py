"""SGLang findings: what mem_fraction_static budgets, what the reserve is for, what each knob buys."""

from __future__ import annotations

import math
import re

from kvscope.core.margins import RESERVE_MARGIN_GIB, reserve_margin_gib
from kvscope.core.startup import Finding, Startup, Suggestion, finite_number
from kvscope.core.text import excerpt
from kvscope.engines.base import typical_fits
from kvscope.engines.common import DTYPE_MISMATCH, OOM_TEXT, held_by_earlier, weights_fill_gpu
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.sglang import defaults as sgd
from kvscope.engines.sglang import dsv4, rules
from kvscope.engines.sglang.eras import NEWEST_BUILT, era_for, parse_version
from kvscope.engines.sglang.facts import SGLangCapacityFacts, SGLangRankFacts
from kvscope.engines.sglang.finish import (
    INPUT_LIMIT_SLACK,
    attn_tp_size,
    input_limit_bound,
    kv_dtype_name,
    log_version_range,
    max_total_tokens,
    model_name,
    pool_capped,
    tp_size,
)
from kvscope.engines.sglang.rules import GIB
from kvscope.model.arch import dtype_bytes
from kvscope.model.catalog import load_architecture
from kvscope.model.weights import (
    estimate_weights,
    load_model_config,
    quant_plan,
    sglang_parallel,
    weights_delta_gib,
)

TYPICAL_MFS = 0.8  # the low end of SGLang's automatic mem_fraction_static (0.81–0.88 on 24–141 GB GPUs)


def _margin(pre: float) -> float:
    return reserve_margin_gib(pre)


def _reserve(s: Startup, mfs: float, pre: float, bpt: int) -> Finding | None:
    ref = s.reference_rank
    if ref is None or ref.avail_after_pool_gib is None:
        return None
    reserve = pre * (1 - mfs)
    after_pool = ref.avail_after_pool_gib
    derived = "pre_load_free_gib" in ref.derived
    basis = "derived from the reserve" if derived else "read from 'Load weight begin'"
    takers = ["CUDA graphs", "runtime activations (chunked prefill, sampling, MoE workspaces)"]
    if ref.pool("draft") or s.setting("speculative_algorithm"):
        takers.insert(1, "the draft model (weights, KV pool, its graphs)")
    detail = (
        f"mem_fraction_static={mfs} lets weights + KV pool take {mfs:.0%} of the free memory measured before "
        f"weights load (F ≈ {pre:.2f} GiB, {basis}), not {mfs:.0%} of what is left after weights. The "
        f"{after_pool:.2f} GiB free after the pool is the intended (1 − {mfs}) × {pre:.2f} = {reserve:.2f} GiB reserve, "
        f"less the request table and allocator rounding. It is spent after the pool on: {', '.join(takers)}."
    )
    if ref.avail_at_ready_gib is not None:
        detail += f" At ready {ref.avail_at_ready_gib:.2f} GiB was still free."
    return Finding("reserve-is-not-waste", "info",
                   f"The {after_pool:.2f} GiB free after the KV pool is the reserve, not unused KV budget", detail)


def _capped(s: Startup, mfs: float | None) -> Finding:
    """--max-total-tokens, not the memory budget, set the pool size: what was left over, and the knob that counts."""
    cap = max_total_tokens(s) or 0
    ref = s.reference_rank
    room = SGLangCapacityFacts(s.capacity).kv_tokens_budget_uncapped
    budget = f"mem_fraction_static={mfs}" if mfs is not None else "the mem_fraction_static budget"
    detail = f"SGLang sizes the pool as min(what {budget} leaves room for, --max-total-tokens {cap:,})"
    detail += f"; the budget had room for {room[0]:,} … {room[1]:,} tokens, so the cap decided" if room else "; the cap decided"
    if ref is not None and ref.avail_after_pool_gib is not None:
        detail += (f". The {ref.avail_after_pool_gib:.2f} GiB free after the pool is the (1 − mem_fraction_static) reserve "
                   "plus the budget the cap left unused")
    detail += (". Raising --mem-fraction-static adds no tokens here; to give the pool more, raise or drop "
               "--max-total-tokens.")
    return Finding("max-total-tokens-caps-pool", "info", f"--max-total-tokens {cap:,} set the KV pool size, not memory", detail)


def _pool(s: Startup) -> Finding | None:
    rec, ref = s.reconciliation, s.reference_rank
    target = ref.pool("target") if ref else None
    if rec is None or target is None or target.tokens is None:
        return None
    size = target.size_gib()
    verdict = {True: "reconciles with SGLang's rule", False: "does NOT reconcile", None: "(not checked)"}[rec.consistent]
    title = f"KV pool: {target.tokens:,} tokens × {rec.bytes_per_token:,} B/token = {size:.2f} GiB per GPU — {verdict}"
    sev = "warning" if rec.consistent is False else "info"
    return Finding("kv-pool-reconciled", sev, title, _sentences(rec.method, rec.detail))


def _sentences(*parts: str | None) -> str:
    """Join text fragments as sentences, skipping empty ones (no stray '. .')."""
    out = [p.strip().rstrip(".") for p in parts if p and p.strip().rstrip(".")]
    text = ""
    for part in out:  # a quoted excerpt cut with "…" takes no full stop after it
        text = part if not text else text + (" " if text.endswith("…") else ". ") + part
    return text + ("" if not text or text.endswith("…") else ".")


def _headroom(s: Startup, mfs: float, pre: float, bpt: int) -> Finding | None:
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if ref is None or target is None or target.tokens is None:
        return None
    per_step = rules.tokens_per_mfs_step(pre, bpt)
    step_gib = 0.01 * pre
    table = ", ".join(f"{mfs + k / 100:.2f} → {target.tokens + k * per_step:,}" for k in (1, 2, 4))
    detail = f"Each +0.01 of mem_fraction_static moves {step_gib:.2f} GiB from the reserve into the pool: +{per_step:,} tokens ({table})."
    free_ready = ref.avail_at_ready_gib
    if free_ready is None:
        detail += (" The log does not show what CUDA graphs and the draft model took from the reserve, so how far it is "
                   "safe to go is unknown: check the 'Capture cuda graph end … avail mem' line or nvidia-smi at idle, "
                   f"and keep at least {_margin(pre):.1f} GiB free at ready.")
        return Finding("mfs-headroom", "info", f"+0.01 mem_fraction_static = +{per_step:,} KV tokens", detail)
    margin = _margin(pre)
    steps = math.floor((free_ready - margin) / step_gib)
    if steps >= 1:
        to = round(mfs + steps / 100, 2)
        after = target.tokens + steps * per_step
        detail += (f" {free_ready:.2f} GiB was still free at ready; keeping a {margin:.1f} GiB safety margin, "
                   f"{to} is safe: {after:,} tokens (+{after - target.tokens:,}).")
        return Finding("mfs-headroom", "info", f"{free_ready - margin:.2f} GiB could be reclaimed for the KV pool", detail,
                       Suggestion("--mem-fraction-static", mfs, to, after))
    if free_ready < margin:
        back = math.ceil((margin - free_ready) / step_gib)
        to = round(mfs - back / 100, 2)
        detail += f" Only {free_ready:.2f} GiB is free at ready, under a {margin:.1f} GiB safety margin: a long prefill can OOM."
        if to < max(0.3, mfs - 0.15):
            # the step the figures imply is implausibly large: the free memory they derive F from is not the reserve
            # SGLang kept (something outside the budget took it), so move one safe step and look again
            to = round(mfs - 0.05, 2)
            detail += (f" The figures cannot size the step (they put F at {pre:.2f} GiB, less than the pool): lower "
                       f"--mem-fraction-static to {to} and check the 'avail mem' SGLang prints at ready.")
            return Finding("thin-reserve", "warning", f"Only {free_ready:.2f} GiB free at ready: no headroom left",
                           detail, Suggestion("--mem-fraction-static", mfs, to,
                                              note="one step down; the log's figures do not size it exactly"))
        return Finding("thin-reserve", "warning", f"Only {free_ready:.2f} GiB free at ready", detail,
                       Suggestion("--mem-fraction-static", mfs, to, max(0, target.tokens - back * per_step)))
    return Finding("mfs-headroom", "info", "mem_fraction_static is about right", detail)


def _after_graphs(s: Startup, mfs: float | None, pre: float | None) -> Finding | None:
    """What CUDA graph capture took and left, on the rank left with least, when the fraction or the free
    memory before weights is not in the log (with both, ``_headroom`` sizes the reserve exactly).

    The risk is the one margin model (``core.margins``) of the basis the fraction is of: the free memory before
    weights, else the device total (an upper bound, so the margin is never understated)."""
    captured = [r for r in s.ranks if r.cuda_graph_gib is not None and r.avail_at_ready_gib is not None]
    if not captured:
        return None
    r = min(captured, key=lambda x: x.avail_at_ready_gib or 0.0)
    graph, free = r.cuda_graph_gib or 0.0, r.avail_at_ready_gib or 0.0
    total = finite_number(s.assumptions.get("gpu_total_gib"))
    basis = pre or total
    margin = reserve_margin_gib(basis) if basis else RESERVE_MARGIN_GIB
    ranks = f" on {r.rank}" if len(s.ranks) > 1 else ""
    detail = (f"CUDA graph capture took {graph:.2f} GB{ranks} (SGLang's 'mem usage={graph:.2f} GB'; its GB are GiB) and "
              f"left {free:.2f} GB free for what runs after it: prefill activations of a full chunk, MoE and attention "
              "workspaces, sampling.")
    if free >= margin:
        return Finding("graphs-reserve", "info", f"CUDA graphs took {graph:.2f} GB; {free:.2f} GB left free", detail,
                       context=True)
    detail += (f" That is under the {margin:.1f} GiB a long prefill needs in the logs we know (max({RESERVE_MARGIN_GIB:.0f} GiB, 5 % of "
               f"{'the free memory before weights' if pre else 'the device' if basis else 'the budget basis'})): the reserve "
               "(1 − mem_fraction_static) is too small for graphs of this size. Lower --mem-fraction-static so the pool "
               "leaves more, or capture fewer batch sizes (--cuda-graph-max-bs).")
    sug = _reserve_fix(s, mfs, basis, margin - free, graph, r)
    return Finding("thin-reserve", "warning", f"Only {free:.2f} GB left after CUDA graphs ({graph:.2f} GB): the reserve is too small",
                   detail, sug)


def _reserve_fix(s: Startup, mfs: float | None, basis: float | None, short_gib: float, graph_gib: float,
                 r) -> Suggestion | None:
    """Lower the fraction by what the reserve lacks (its value read, else SGLang's default for this GPU in the
    releases the log can be from, said so), with fewer captured batch sizes as the alternative."""
    if basis is None:
        return None
    note = None
    start = mfs
    if start is None:
        start, note = _default_fraction(s)
        if start is None:
            return None
    steps = max(1, math.ceil(short_gib / (0.01 * basis)))
    to = round(start - steps / 100, 2)
    alts = []
    max_bs = finite_number(s.setting("cuda_graph_max_bs")) or finite_number(SGLangRankFacts(r).capture_max_bs)
    if max_bs and graph_gib > short_gib:
        smaller = max(8, int(max_bs * (1 - short_gib / graph_gib)) // 8 * 8)
        if smaller < max_bs:
            alts.append(Suggestion("--cuda-graph-max-bs", int(max_bs), smaller,
                                   note="graph memory grows about linearly with the largest captured batch; batches "
                                        "above it run without graphs (slower decode at high concurrency)"))
    text = f"frees {steps * 0.01 * basis:.2f} GiB for the reserve; the KV pool loses as much"
    return Suggestion("--mem-fraction-static", start, to, note=f"{note}; {text}" if note else text, alternatives=alts)


def _default_fraction(s: Startup) -> tuple[float | None, str | None]:
    """SGLang's automatic mem_fraction_static for this GPU and TP in the newest release the log can be from."""
    total = finite_number(s.assumptions.get("gpu_total_gib"))
    version = parse_version(s.engine_version) or min(log_version_range(s).high, NEWEST_BUILT)
    if total is None:
        return _default_fraction_bounded(s, version)
    choice = sgd.auto_mem_fraction_static(version, sgd.MemoryInputs(int(total * 1024), tp=tp_size(s)))
    value = round(choice.value, 2)
    return value, (f"from: SGLang's automatic value for this GPU at TP{tp_size(s)} ({choice.rule}) in the newest release "
                   f"the log can be from; pass --assume mem_fraction_static=… if it was set")


BOUND_CLASS = 1.25  # catalog cards up to this many times the memory the log shows are the ones it could have run on


def _default_fraction_bounded(s: Startup, version) -> tuple[float | None, str | None]:
    """No device total in the log: what it does show on one GPU (weights, the KV pool, what was left after it)
    is a floor on the total; when every catalog card between that floor and a quarter above it gets the same
    automatic value, that value holds whichever card it was."""
    from kvscope.model.catalog import gpus, torch_total_gib

    ref = s.reference_rank
    if ref is None or ref.avail_after_pool_gib is None:
        return None, None
    pool = sum(p.size_gib() or 0.0 for p in ref.kv_pools)
    floor = (ref.weights_gib or 0.0) + pool + ref.avail_after_pool_gib
    if pool <= 0:
        return None, None
    cards = []
    for g in gpus():
        total = torch_total_gib(g) or (g.get("nominal_gb") or 0) * 1e9 / GIB  # nominal GB: near enough for a class
        if floor <= total <= floor * BOUND_CLASS:
            cards.append((total, str(g["name"])))
    if not cards:
        return None, None
    choices = {round(sgd.auto_mem_fraction_static(version, sgd.MemoryInputs(int(t * 1024), tp=tp_size(s))).value, 2)
               for t, _ in cards}
    if len(choices) != 1:
        return None, None
    names = ", ".join(name.split(" (")[0] for _, name in sorted(cards)[:3])
    return choices.pop(), (f"from: SGLang's automatic value at TP{tp_size(s)} for a GPU of at least {floor:.1f} GiB, "
                           f"what the log shows on one (the catalog's cards of that size, {names}, all get it), in the "
                           "newest release the log can be from; pass --assume gpu=… or mem_fraction_static=… to settle "
                           "it")


def _indexer_left_out(s: Startup) -> Finding | None:
    """A DSA model (DeepSeek-V3.2, GLM-5) whose printed pool size matched the latent cache alone: the NSA indexer's
    K cache is allocated too but not in that figure (and, in the releases that printed it so, not in the profile)."""
    rec, ref = s.reconciliation, s.reference_rank
    target = ref.pool("target") if ref is not None else None
    if rec is None or target is None or not target.tokens or rules.INDEXER_LEFT_OUT not in rec.method:
        return None
    arch, _ = load_architecture(model_name(s))
    if arch is None or not arch.index_head_dim:
        return None
    per_token = rules.dsa_indexer_row_bytes(arch) * arch.num_layers
    extra = target.tokens * per_token / GIB
    size = target.size_gib() or 0.0
    return Finding("dsa-indexer-not-counted", "warning",
                   f"The printed KV size ({size:.2f} GiB) leaves out the indexer's K cache: {size + extra:.2f} GiB in all",
                   f"This DSA model also keeps an NSA indexer K cache of {rules.dsa_indexer_row_bytes(arch)} B per token "
                   f"and layer ({per_token:,} B per token over {arch.num_layers} layers): {extra:.2f} GiB for the "
                   f"{target.tokens:,}-token pool, not included in the logged {size:.2f} GiB. Releases that print it "
                   "this way also left it out of the profile that sized the pool, so the pool came out larger than the "
                   f"budget allows by about that much and the reserve is {extra:.2f} GiB smaller than it looks (later "
                   "SGLang counts it in both).")


def _serving_error(s: Startup) -> Finding | None:
    """The server crashed while serving (its traceback runs through the serving loop): the step, and what the
    usual cause would take."""
    w = next((w for w in s.warnings if w.get("code") == "error-while-serving" and w.get("step")), None)
    if w is None:
        return None
    raised = w.get("raised")
    oom = bool(raised and OOM_TEXT.search(raised))
    said = f"it raised '{excerpt(raised, 200)}'" if raised else "the traceback is cut before its error"
    detail = (f"The traceback runs through SGLang's serving loop: the server had started and crashed while running "
              f"{w['step']}; {said}.")
    sug = _reserve_step_down(s, s.reference_rank.pre_load_free_gib if s.reference_rank else None) if (
        oom or not raised) else None
    # an image / video encoder's activations do not shrink with a prefill cap (the image is encoded whole)
    frames = " ".join(str(x) for x in ((s.failure.data if s.failure else {}).get("frames") or w.get("frames") or []))
    batch = _prefill_batch(s) if "prefill" in str(w["step"]) and not _VISION_FRAME.search(frames) else None
    if (oom or not raised) and batch is not None:
        last, peak = batch
        cap = 1 << max(0, (last // 2).bit_length() - 1)  # a power of two at most half the batch that crashed
        largest = f" (the largest in the log: {peak:,})" if peak > last else ""
        detail += (f" The last prefill batch before the crash carried {last:,} new tokens{largest}: its activations "
                   "did not fit in what the KV pool left (the 1 − mem_fraction_static reserve). Cap the new tokens of "
                   f"one prefill batch at about half that, --max-prefill-tokens {cap} (on releases that chunk "
                   f"prefills --chunked-prefill-size {cap} bounds a batch the same way); halve again if it recurs. "
                   "Lowering --mem-fraction-static instead leaves more for activations at the cost of KV tokens.")
        current = s.setting_number("max_prefill_tokens")
        cap_sug = Suggestion("--max-prefill-tokens", int(current) if current else None, cap,
                             note=f"half the {last:,}-token batch that crashed, as a power of two",
                             alternatives=[sug] if sug is not None else [])
        if current is None or cap < current:
            sug = cap_sug
    elif oom or not raised:
        detail += (" A crash in a prefill while serving is most often an out of memory in its activations: the KV pool "
                   "took the budget and what it left (the 1 − mem_fraction_static reserve) was too small for a chunk "
                   "of this size. Lower --mem-fraction-static, or cap the pool with --max-total-tokens, or shorten "
                   "--chunked-prefill-size so each prefill needs less activation memory.")
    title = ("The server ran out of memory while serving " if oom else "The server crashed while serving ") + w["step"]
    return Finding("error-while-serving", "error" if oom else "warning", title, detail, sug, own_fix_only=True)


_VISION_FRAME = re.compile(r"vision|image|visual|video|pixel|vit\b|mm_|multimodal", re.IGNORECASE)


def _prefill_batch(s: Startup) -> tuple[int, int] | None:
    """(new tokens of the last prefill batch, of the largest) from the serving lines read, if any."""
    rt = s.runtime if isinstance(s.runtime, dict) else None
    batch = rt.get("prefill_batch_new_tokens") if rt else None
    if not isinstance(batch, dict) or not isinstance(batch.get("last"), int) or not batch["last"]:
        return None
    return batch["last"], int(batch.get("peak") or batch["last"])


def _input_refused(s: Startup) -> Finding | None:
    """'Input length (X tokens) exceeds the maximum allowed length (Y tokens)': what Y is (the KV pool, or the
    context length), and what serving X takes."""
    w = next((w for w in s.warnings if w.get("code") == "input-too-long"), None)
    bound, what = input_limit_bound(s)
    if w is None or bound is None:
        return None
    asked, limit = w.get("input_tokens"), bound - INPUT_LIMIT_SLACK
    rule = (f"SGLang caps one request at min(context_len − 1, KV pool − 1) − 5 tokens, so the {limit:,}-token limit "
            f"means a bound of {bound:,}")
    if what == "context":
        return Finding("input-longer-than-context", "warning",
                       f"A {asked:,}-token input was refused: the context length ({bound:,}) is the limit",
                       f"{rule}: here the context length. Raise --context-length (the model's own limit permitting), "
                       "or enable --allow-auto-truncate.")
    if what == "either":
        return Finding("input-longer-than-pool", "warning",
                       f"A {asked:,}-token input was refused at {limit:,} tokens: the KV pool or the context length is "
                       f"{bound:,}",
                       f"{rule}: either the KV pool (max_total_num_tokens) or the context length is {bound:,}, and the "
                       "log does not say which. The 'KV Cache is allocated. #tokens' or max_total_num_tokens line at "
                       "startup settles it (or pass --model, whose context length kvscope then knows).")
    times = f", {asked / bound:.1f}× what it holds" if asked and asked > bound else ""
    detail = (f"{rule}: the KV pool (max_total_num_tokens {bound:,} tokens), much smaller than the {asked:,}-token "
              f"input{times}, and not the context length, which is larger. One request can never use more KV cache "
              "than the pool has. To serve it the pool needs more memory per token of context: more GPUs (--tp), an "
              "fp8 KV cache (--kv-cache-dtype fp8_e4m3 halves the bytes per token), a higher --mem-fraction-static "
              "where the reserve allows; or enable --allow-auto-truncate to cut such inputs.")
    ref = s.reference_rank
    if ref is not None and ref.avail_at_ready_gib is not None:
        detail += f" {ref.avail_at_ready_gib:.2f} GiB was free at ready."
    return Finding("input-longer-than-pool", "warning",
                   f"A {asked:,}-token input was refused: the KV pool holds only {bound:,} tokens", detail)


def _capacity_meaning(s: Startup) -> Finding | None:
    """What the startup's token figures mean: the pool is shared by all requests, the context length is one
    request's ceiling, the free memory at ready is not the KV size; concurrency at full and at typical lengths."""
    cap = s.capacity
    tokens = cap.max_total_num_tokens or cap.kv_tokens
    if not tokens or s.failure is not None:
        return None
    ctx, mrr = cap.context_len, cap.max_running_requests
    mfs = s.setting_number("mem_fraction_static")
    sized = (f", sized by mem_fraction_static {mfs:g} of the free memory before weights (weights + pool)" if mfs is not None
             and not pool_capped(s) else "")
    parts: list[str | None] = [f"The KV cache holds {tokens:,} tokens in all (max_total_num_tokens){sized}, shared by every running "
             "request"]
    if ctx:
        parts.append(f"context_len {ctx:,} is the most one request may use, not the pool's size: {tokens / ctx:,.1f} "
                     "requests at that full length fit at once")
    parts.append(typical_fits(tokens, ctx, "the pool holds", "max_running_requests", mrr,
                              " (raise --max-running-requests if decode speed allows)"))
    ref = s.reference_rank
    if ref is not None and ref.avail_at_ready_gib is not None:
        parts.append(f"available_gpu_mem {ref.avail_at_ready_gib:.2f} GB is GPU memory still free after startup "
                     "(activations and graphs use it), not the KV cache's size")
    return Finding("kv-capacity", "info", f"KV cache: {tokens:,} tokens shared by all requests", _sentences(*parts),
                   context=True)


# Draft classes that build an embedding (and, MTP / NextN, an lm_head) of their own, which SGLang then replaces with
# the target's in init_token_map / init_lm_head (speculative/eagle_worker_v2.py alloc_memory_pool): after the pools
# are sized, so the copies' memory was counted out of the KV budget and is free but unused once the server runs.
# Read in 0.5.17's wheel, reproduced on 0.5.19 (sgl-project/sglang#32468: 409,552 → 519,753 tokens once hoisted);
# sgl-project/sglang#35996 moves the dedup before sizing.
_DRAFT_OWN_EMBED = re.compile(r"Eagle3?$|^Eagle3|MTP$|NextN$")
_DRAFT_OWN_HEAD = re.compile(r"MTP$|NextN$")
DRAFT_DEDUP_KNOWN_LATE_UNTIL = (0, 5, 19)


def _draft_copies_idle(s: Startup, bpt: int | None) -> Finding | None:
    """The draft's own embedding (and lm_head) copies, sized into the budget and freed after it: idle memory."""
    drafted_ranks = [r for r in s.ranks if SGLangRankFacts(r).draft_model_class]  # an excerpt may show one rank's
    ref = drafted_ranks[0] if drafted_ranks else None
    cls = SGLangRankFacts(ref).draft_model_class if ref else None
    if not cls or not _DRAFT_OWN_EMBED.search(cls) or s.failure is not None:
        return None
    version = parse_version(s.engine_version) if s.engine_version else None
    if version is not None and (version > DRAFT_DEDUP_KNOWN_LATE_UNTIL or not era_for(version).draft_in_static_budget):
        return None  # before 0.5.14 the draft loads after the pools are sized: its copies come out of the reserve
    head = bool(_DRAFT_OWN_HEAD.search(cls))
    copies = "embedding and lm_head" if head else "embedding"
    name = model_name(s)
    mc = load_model_config(name) if name else None
    vocab = finite_number((mc.cfg if mc else {}).get("vocab_size"))
    hidden = finite_number((mc.cfg if mc else {}).get("hidden_size"))
    amount, tokens = "", ""
    if vocab and hidden:
        # each copy is vocab-parallel, in the model dtype; whether an MTP head's lm_head is its own varies by model,
        # so one copy is the figure claimed (a lower bound)
        per_copy = vocab * hidden * 2 / max(1, tp_size(s))
        amount = f" ({per_copy / GIB:.2f} GiB per GPU each: {int(vocab):,} × {int(hidden):,} × 2 B)"
        if bpt:
            tokens = f"; counted into the pool instead, one copy alone is about {int(per_copy // bpt):,} more tokens"
    drafted = SGLangRankFacts(ref).draft_weights_gib if ref else None
    of = f" (part of the {drafted:.2f} GB its load line prints)" if drafted else ""
    known = version is not None
    when = "" if known else (" This holds from 0.5.14, where the draft loads before the pools are sized, to at least "
                             "0.5.19; the log does not say which release ran.")
    return Finding("draft-copies-idle", "warning" if known else "info",
                   f"The draft's own {copies} copies are freed only after the KV pool is sized: that memory sits idle",
                   f"The {cls} draft loads its own {copies}{amount}{of}: duplicates of the target's. SGLang replaces "
                   "them with the target's (init_token_map / init_lm_head) only after the KV pools were sized, so the "
                   "budget paid for them, and once freed the memory stays unused until the next restart"
                   f"{tokens}. sgl-project/sglang#35996 moves the sharing before sizing.{when}", context=True)


def _second_runner(s: Startup) -> Finding | None:
    """A model runner began after the target's CUDA graphs: the draft worker of speculative decoding."""
    began = [r.rank for r in s.ranks if SGLangRankFacts(r).second_runner_began]
    if not began:
        return None
    algo = s.setting("speculative_algorithm")
    who = f"the {algo} draft model's worker" if algo else \
        "the speculative-decoding draft model's worker (NextN / EAGLE / MTP), or another run pasted after this one"
    return Finding("second-model-runner", "info",
                   f"A second model runner began on {', '.join(began[:4])} after the target's CUDA graphs",
                   f"'Init torch distributed begin' after 'Capture cuda graph end' is {who}: SGLang builds the draft's "
                   "ModelRunner only once the target model is fully set up, so it loads its weights, KV pool and graphs "
                   "from what the target left. Its startup checks see the target's memory already in use: the per-GPU "
                   "balance check ('The memory capacity is unbalanced') "
                   "run there compares ranks whose target allocations differ, so it can trip with no other process on "
                   "the GPUs (SGLang later made it a warning).")


def _mla_replicated(s: Startup, bpt: int, mfs: float | None, pre: float | None) -> Finding | None:
    rec, ref = s.reconciliation, s.reference_rank
    tp, attn_tp = tp_size(s), attn_tp_size(s)
    if rec is None or rec.architecture.get("attention") != "mla" or tp <= 1 or attn_tp < tp or ref is None:
        return None
    if any(p.startswith("DP") for r in s.ranks for p in r.rank.split()):
        return None  # ranks labelled DPn: data-parallel (attention) groups are on already, whatever their count
    tokens = s.capacity.kv_tokens or 0
    head = (f"With MLA every TP rank stores the full latent cache of every request, so the server holds {tokens:,} tokens "
            f"in total, not {tp}×. --enable-dp-attention --dp-size {tp} gives each rank its own pool for its own requests")
    tail = "; it pays off with many concurrent requests, not for single-request latency."
    title = f"The MLA KV cache is replicated on all {tp} TP ranks"
    growth = weights_delta_gib(model_name(s), sglang_parallel(tp), sglang_parallel(tp, 1), rules.SGLANG_WEIGHTS)
    if growth is None or not bpt:
        return Finding("mla-replicated", "info", title,
                       f"{head} (≈ {tp * tokens:,} tokens across the node, somewhat less per GPU because attention "
                       f"weights are then replicated){tail}",
                       Suggestion("--enable-dp-attention", False, True, tp * tokens,
                                  note=f"also --dp-size {tp}; tokens are node-wide"))
    per_gpu = max(0, tokens - int(growth * GIB / bpt))
    cost = (f"but every GPU then holds the whole attention and the input embedding: +{growth:.2f} GiB of weights "
            f"per GPU (from the model's config), taken from its pool")
    if per_gpu > 0:
        return Finding("mla-replicated", "info", title,
                       f"{head}, {cost}: {per_gpu:,} tokens per GPU, ≈ {tp * per_gpu:,} across the node{tail}",
                       Suggestion("--enable-dp-attention", False, True, tp * per_gpu,
                                  note=f"also --dp-size {tp}; tokens are node-wide"))
    need = f"; it needs --mem-fraction-static above {mfs + (growth - tokens * bpt / GIB) / pre:.3f}" if mfs and pre else ""
    return Finding("mla-replicated", "info", title,
                   f"{head}, {cost} — more than the whole {tokens * bpt / GIB:.2f} GiB pool: at this "
                   f"mem_fraction_static DP attention leaves no KV room{need}.")


def _one_request(s: Startup) -> tuple[int, float] | None:
    """(the context length, the GiB of KV one request of it takes per GPU), from the model's config."""
    arch, _ = load_architecture(model_name(s))
    if arch is None:
        return None
    context = finite_number(s.setting("context_length")) or arch.max_position_embeddings
    if not context:
        return None
    cell = rules.cell_size(arch, dtype_bytes(kv_dtype_name(s), arch.torch_dtype), attn_tp_size(s),
                           era_for(NEWEST_BUILT))
    return int(context), int(context) * cell.bytes_per_token / GIB


def _failure(s: Startup, mfs: float | None, pre: float | None) -> Finding | None:
    f = s.failure
    if f is None:
        return None
    ref = s.reference_rank
    if f.kind == "not-enough-memory":
        after = ref.avail_after_weights_gib if ref else None
        detail = "The weights left no room for the KV pool inside mem_fraction_static × (free memory before weights)."
        profiled = f.data.get("profiled_tokens")
        if profiled is not None:
            detail = (f"SGLang's profile came out at {profiled:,} tokens: the weights plus the reserve it keeps "
                      "((1 − mem_fraction_static) × free memory before weights) exceed the memory there is, so no KV "
                      "cache fits and startup stops with 'Not enough memory'.")
            if mfs is None:
                detail += (" Raise --mem-fraction-static, or make the weights smaller per GPU (more GPUs, a quantized "
                           "checkpoint); the launch settings are not in this excerpt, so no value is suggested.")
        sug = None
        if pre and after is not None and mfs is not None:
            minimum = 1 - after / pre
            to = math.ceil((minimum + 0.03) * 100) / 100
            one = _one_request(s)
            if one is not None and (held := math.ceil((minimum + one[1] / pre + 0.005) * 100) / 100) > to:
                to = held  # the minimum viable value holds no request: size the pool for one of the full context
                detail += (f" Weights left {after:.2f} GiB of {pre:.2f} GiB; the minimum viable value is {minimum:.3f}, "
                           f"which holds no request. One request of {one[0]:,} tokens needs {one[1]:.2f} GiB of KV: "
                           f"at {to} it fits and {(1 - to) * pre:.2f} GiB stays in reserve for CUDA graphs and "
                           "activations; more requests at once need a higher value still.")
            else:
                detail += (f" Weights left {after:.2f} GiB of {pre:.2f} GiB; the minimum viable value is {minimum:.3f}. "
                           f"At {to}, about {(to - minimum) * pre:.2f} GiB goes to KV and {(1 - to) * pre:.2f} GiB stays "
                           "in reserve.")
            sug = Suggestion("--mem-fraction-static", mfs, min(to, 0.95))
            if to > 0.95:
                split = _weights_exceed(s, f)
                if split is not None and split.suggestion is not None:  # the weights fill the GPU: split or shrink them
                    detail += " " + split.detail  # a fraction that starts holds no request of the context: no move
                    sug = split.suggestion
                else:
                    detail += (" That leaves too little reserve: use more GPUs (higher --tp), a quantized checkpoint, "
                               "or a smaller model.")
        elif f.data.get("raise_above"):
            sug = Suggestion("--mem-fraction-static", f.data.get("mem_fraction_static"), round(f.data["raise_above"] + 0.02, 2))
        elif (low := mfs if mfs is not None else finite_number(f.data.get("mem_fraction_static"))) is not None \
                and low < TYPICAL_MFS:
            detail += (f" mem_fraction_static {low} is far below SGLang's automatic value for most GPUs "
                       f"(≈ {TYPICAL_MFS}–0.88): weights and KV share that fraction, so raise it.")
            sug = Suggestion("--mem-fraction-static", low, TYPICAL_MFS,
                             note="near SGLang's own default; the log lacks the free-memory figures to size it exactly")
        return Finding("not-enough-memory", "error", "Startup failed: no GPU memory left for the KV cache", detail, sug)
    if f.kind == "oom-runtime":
        return None  # said by the serving-error finding, with the step it hit
    if f.kind == "multi-instance-contention" and f.data.get("held_by_startup"):
        title, opening = held_by_earlier(f, "KV pool", "this one")
        return Finding("multi-instance-contention", "error", title, opening + (
            " SGLang budgets a fraction of the memory free before its weights load, so what the other instance holds "
            "is gone from this one's budget: give each instance its own GPU, or cap each with --max-total-tokens so "
            "both fit."))
    if f.kind == "cuda-oom":
        return _oom(s, f, mfs, pre)
    if f.kind == "host-memory":
        req, free = f.data.get("requested_gb"), f.data.get("free_gb")
        return Finding("host-memory", "error", "Startup failed: not enough host RAM for the hierarchical cache",
                       f"Asked for {req} GB of pinned host memory per rank with {free} GB free. Lower --hicache-ratio or set "
                       f"--hicache-size below {free} GB ÷ ranks per host (each TP rank allocates its own host pool).")
    return _exception(s, f, pre)


# Where a traceback stopped, by the innermost SGLang (or library) function it names: the step, and what it means
_TRACEBACK_STEPS = (
    ("init_attention_backend", "while initialising the attention backend",
     "The attention backend allocates its workspace and buffers after the KV pool, from the memory the pool left: a "
     "pool sized to the whole budget can leave it too little (AITER, FlashInfer and FA3 workspaces grow with "
     "max_total_num_tokens). Lower --mem-fraction-static so the pool leaves room, or pick another --attention-backend"),
    ("load_model", "while loading weights", ""),
    ("init_memory_pool", "while allocating the KV pool", ""),
    ("forward_extend", "while serving a prefill (forward_extend)", ""),
    ("forward_decode", "while serving a decode step", ""),
)
_BUILD_FAILURE = ("ninja", "nvcc", "CalledProcessError", "/jit/", "compile")


def _traceback_cause(f) -> tuple[str, str, bool]:
    """(the step it stopped in, what that means, whether it was a build failure) from the failure's traceback."""
    frames = [str(x) for x in f.data.get("frames") or []]
    raised = [str(x) for x in f.data.get("raised") or []]
    text = " ".join(frames + raised)
    if any(word in text for word in _BUILD_FAILURE) and not OOM_TEXT.search(text):
        jit = "FlashInfer's JIT compile" if "flashinfer" in text.lower() else "a JIT kernel compile"
        return ("while compiling a kernel", f"{jit} failed (a ninja / nvcc build), not an out-of-memory: the CUDA "
                "toolkit, compiler or GPU architecture does not match what the kernel needs. Check that nvcc and the "
                "CUDA toolkit match the torch build, clear the JIT cache (~/.cache/flashinfer) and retry, or choose "
                "another --attention-backend (triton)", True)
    for frame in reversed(frames):  # the innermost match names the step
        for function, step, meaning in _TRACEBACK_STEPS:
            if frame.endswith(":" + function) or frame.endswith(":" + function + "s"):
                return step, meaning, False
    return "", "", False




_CONTEXT_OVER_DERIVED = lazy_compile(
    r"(Target model's|User-specified) context_length \((\d+)\) is greater than the derived context_length \((\d+)\)")


def _context_over_derived(f) -> Finding | None:
    """SGLang refuses a context length above what the model's config derives (configs/model_config.py
    _derive_context_length) unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1. For a speculative draft the length
    is the target's: an EAGLE draft whose config says 2,048 stops a 131,072-token target. Not a memory failure."""
    text = " ".join([f.message, *(str(x) for x in f.data.get("raised") or [])])
    m = _CONTEXT_OVER_DERIVED.search(text)
    if m is None:
        return None
    asked, derived = int(m.group(2)), int(m.group(3))
    env = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    if m.group(1).startswith("Target"):
        detail = (f"The speculative draft runs with the target's context length ({asked:,} tokens), and the draft's "
                  f"own config derives only {derived:,} (its max_position_embeddings): SGLang refuses that unless "
                  f"{env}=1, which raises the draft's max_position_embeddings to {asked:,} (a draft trained on shorter "
                  f"sequences still drafts; it is accepted less often on long prompts). Or serve with --context-length "
                  f"{derived:,}. Not a memory failure: no memory setting changes it.")
        primary = Suggestion(env, None, 1, note=f"the draft then runs at the target's {asked:,} tokens")
        primary.alternatives = [Suggestion("--context-length", asked, derived, note="requests of at most this length")]
        title = f"Startup failed: the draft model's config allows {derived:,} tokens, the target runs {asked:,}"
    else:
        detail = (f"--context-length {asked:,} is more than the model's config derives ({derived:,}: "
                  f"max_position_embeddings, or its rope scaling): lower it to {derived:,}, or set {env}=1 only if the "
                  "model really extrapolates that far. Not a memory failure.")
        primary = Suggestion("--context-length", asked, derived)
        primary.alternatives = [Suggestion(env, None, 1, note="only if the model's rope scaling supports it")]
        title = f"Startup failed: --context-length {asked:,} exceeds the model's {derived:,}"
    return Finding("context-length-over-model", "error", title, detail, primary)


def _dtype_mismatch(s: Startup, f) -> Finding | None:
    """A dtype mismatch inside a forward (torch: 'expected mat1 and mat2 to have the same dtype'): code meeting a
    dtype it was not written for, not memory. SGLang wraps a capture failure in 'Possible solutions' that are all
    memory moves (a smaller --mem-fraction-static, a smaller graph batch): none of them changes a dtype. When the
    draft's pool is in another dtype than the target's (the drafter loads in its own config's torch_dtype), the
    log shows which two met."""
    pieces = [str(f.data.get("cause") or ""), *(str(x) for x in f.data.get("raised") or []), f.message]
    said = next((p for p in pieces if DTYPE_MISMATCH.search(p)), None)
    if said is None:
        return None
    frames = [str(x) for x in f.data.get("frames") or []]
    capture = f.data.get("stage") == "graph-capture" or any("cuda_graph" in x for x in frames)
    ref = s.reference_rank
    # SGLang captures the target's graphs first, then the draft's: a capture failure after a target graph ended
    # is in the draft's (when the traceback's frames are not on the failure line to say so)
    target_graphs_done = ref is not None and any(str(g.get("graph", "")).startswith("target")
                                                 for g in SGLangRankFacts(ref).graphs or [])
    in_draft = any("speculative/" in x or "eagle" in x.lower() or "draft" in x.lower() for x in frames) or (
        capture and bool(s.setting("speculative_algorithm")) and target_graphs_done)
    target, draft = (ref.pool("target"), ref.pool("draft")) if ref else (None, None)
    where = ("the draft model's forward" if in_draft else "the model's forward") + (
        " while SGLang captured its CUDA graphs" if capture else "")
    dtypes, sug = "", None
    if target is not None and draft is not None and target.dtype and draft.dtype and target.dtype != draft.dtype:
        t, d = target.dtype.replace("torch.", ""), draft.dtype.replace("torch.", "")
        dtypes = (f"The draft's KV pool is {d} while the target's is {t}: the drafter runs in its own config's dtype "
                  f"(its config.json torch_dtype), and an EAGLE draft joins the target's {t} hidden states to its "
                  f"own {d} embeddings, which torch promotes to float32 (the 'float' in the message) before a {d} "
                  f"weight. Run both in one dtype: a drafter config.json with torch_dtype {t}, or --dtype {d} for "
                  "the target")
        if d in {"float16", "bfloat16"}:
            sug = Suggestion("--dtype", str(s.setting("dtype") or "auto"), d,
                             note=f"the target then runs in {d} like its draft (a drafter in {t} is the other way)")
    detail = _sentences(
        f"'{excerpt(said, 200)}' in {where}: two tensors of different dtypes "
        "met in one operation. Not a memory failure: the pool and the reserve were already in place, and no memory "
        "setting changes a dtype",
        dtypes,
        "The 'Possible solutions' SGLang prints after a capture failure (a smaller --mem-fraction-static, a smaller "
        "--cuda-graph-max-bs-decode, decode graphs off) are its generic advice for an out-of-memory; they do not "
        "apply here" if capture else "")
    title = f"Startup failed: a dtype mismatch in {where} (not memory)"
    return Finding("dtype-mismatch", "error", title, detail, sug, own_fix_only=True)


def _exception(s: Startup, f, pre: float | None) -> Finding:
    """A crash: which step it stopped, and where the cause is written (the line itself, or a traceback)."""
    over = _context_over_derived(f) or _dtype_mismatch(s, f)
    if over is not None:
        return over
    capture = f.data.get("stage") == "graph-capture"
    step, meaning, build = _traceback_cause(f)
    if f.data.get("stage") == "warmup" and not step.startswith("while initialising"):
        step, meaning = ("in the warmup request", "SGLang sends itself one request through the serving loop before it "
                         "says it is ready; this crash is in that first batch, so the server never served")
    raised = [str(x) for x in f.data.get("raised") or []]
    stage, hint = _stage(s, pre, capture, memory_hint=not f.data.get("device_error") and not build)
    message = excerpt(f.message, 300)
    device_error = f.data.get("device_error")
    if raised or step:
        said = f"the traceback ends in '{excerpt(raised[0], 240)}'" if raised else "the traceback is cut before its error"
        title = " ".join(("Startup failed with an exception", step or stage)).strip()
        sug = None
        if step.startswith("while initialising the attention backend"):
            sug = _reserve_step_down(s, pre)
        return Finding("startup-exception", "error", title,
                       _sentences(f"{message} — {said}", meaning, "" if build else hint), sug)
    if device_error:
        what = _NO_KERNEL_IMAGE if "no kernel image" in device_error else ""
        return Finding("startup-exception", "error", " ".join(("Startup failed with a GPU error", stage)).strip(),
                       _sentences(f"{message} — this line names the cause, and it is not an out-of-memory", what, hint))
    if capture and f.data.get("traceback"):  # the rank's own traceback, no SGLang wrapper line
        return Finding("startup-exception", "error", " ".join(("Startup failed: CUDA graph capture raised an exception",
                                                                stage if stage != _CAPTURING else "")).strip(),
                       _sentences(f"'{message.rstrip(':')}' after 'Capture cuda graph begin' and no capture end: "
                                  "the traceback's last lines name the error capture raised", hint))
    if capture:
        cause = f.data.get("cause")
        where = (f"the error it wraps is '{cause[:200]}'" if cause else
                 "the error it wraps is not on this line: the traceback above it (before 'During handling of the "
                 "above exception') names it")
        return Finding("startup-exception", "error", " ".join(("Startup failed: CUDA graph capture raised an exception",
                                                                stage if stage != _CAPTURING else "")).strip(),
                       _sentences(f"{message} — SGLang wraps whatever capture raised, and {where}. The 'Possible "
                                  "solutions' it prints after this line are generic", hint))
    return Finding("startup-exception", "error", " ".join(("Startup failed with an exception", stage)).strip(),
                   _sentences(f"{message} — the traceback after this line in the log names the cause", hint))


def _reserve_step_down(s: Startup, pre: float | None) -> Suggestion | None:
    """A step of --mem-fraction-static down, from the value read (or SGLang's automatic one for a known GPU)."""
    mfs = s.setting_number("mem_fraction_static")
    note = "frees about 5 % of the budget for what is allocated after the pool; the KV pool shrinks by as much"
    if mfs is None:
        mfs, why = _default_fraction(s)
        if mfs is None:
            return None
        note = f"{why}; {note}"
    return Suggestion("--mem-fraction-static", mfs, round(mfs - 0.05, 2), note=note)


_CAPTURING = "while capturing CUDA graphs"
_NO_KERNEL_IMAGE = ("'no kernel image is available' means a library's kernels (the path on the line names it) were "
                      "not built for this GPU's compute capability: install a build that supports this GPU, or choose "
                      "a backend that does (e.g. another --attention-backend)")
GRAPH_AMPLE_GIB = 8.0  # free at capture beyond what CUDA graphs take in the logs we know (largest seen: 8.6 GiB at bs 512+)


SMALL_CAPTURE_BS = 16  # graphs for batches up to this take a few hundred MiB at most, even for large models


def _graphs_small(ref) -> bool:
    """Capture of only small batches for a model whose weights fit in what was free: graphs need far less."""
    bs = SGLangRankFacts(ref).capture_max_bs if ref is not None else None
    free = SGLangRankFacts(ref).avail_before_graphs_gib if ref is not None else None
    weights = ref.weights_gib if ref is not None else None
    return bool(bs and bs <= SMALL_CAPTURE_BS and free and free >= RESERVE_MARGIN_GIB and weights and weights <= free)


def _capture_hint(free: float | None, pre: float | None, what: str, small: bool = False) -> str:
    """What the free memory at capture says about an out-of-memory, graded: thin, middling, ample."""
    if free is None:
        return ("The log does not show the free memory at capture; an out-of-memory is one common cause (lower "
                "--mem-fraction-static or --cuda-graph-max-bs), an unsupported kernel or torch.compile another: "
                "--disable-cuda-graph confirms that capture is the failing step.")
    thin = _margin(pre) if pre else RESERVE_MARGIN_GIB
    if free < thin:
        return (f"Only {free:.2f} GiB was free {what}; an out-of-memory here is the usual cause: lower "
                "--mem-fraction-static or --cuda-graph-max-bs, or --disable-cuda-graph to confirm.")
    if free >= GRAPH_AMPLE_GIB or small:
        usual = "more than graphs of batches this small take" if small and free < GRAPH_AMPLE_GIB else \
            "more than CUDA graphs usually take"
        return (f"{free:.2f} GiB was free {what}, {usual}, so an out-of-memory is unlikely: "
                "the exception text names the cause (often a kernel or attention backend this GPU or model does not "
                "support, or torch.compile); --disable-cuda-graph confirms that capture is the failing step.")
    return (f"{free:.2f} GiB was free {what}: if the exception is an out-of-memory, lower --mem-fraction-static or "
            "--cuda-graph-max-bs; otherwise the exception text names the cause. --disable-cuda-graph confirms that "
            "capture is the failing step.")


def _stage(s: Startup, pre: float | None = None, capture: bool = False, memory_hint: bool = True) -> tuple[str, str]:
    """Where in SGLang's startup sequence a crash happened, from the last lifecycle line of the reference rank
    (or from the failure itself: 'Capture cuda graph failed')."""
    ref = s.reference_rank
    if ref is None:
        return (_CAPTURING, _capture_hint(None, pre, "") if memory_hint else "") if capture else ("", "")
    facts = SGLangRankFacts(ref)
    began = facts.avail_before_graphs_gib is not None or facts.graph_capture_began
    if (began or capture) and not facts.graphs:
        free, what = facts.avail_before_graphs_gib, "when capture began"
        if free is None and ref.avail_after_pool_gib is not None:
            free, what = ref.avail_after_pool_gib, "after the KV pool, just before capture"
        return _CAPTURING, _capture_hint(free, pre, what, _graphs_small(ref)) if memory_hint else ""
    if ref.pre_load_free_gib is not None and ref.weights_gib is None and ref.avail_after_weights_gib is None:
        return ("while loading weights",
                f"{ref.pre_load_free_gib:.2f} GiB was free before loading: check that the checkpoint's weights per GPU "
                "fit (quantization, --tp) and that the quantization method is supported on this GPU.")
    if ref.avail_after_weights_gib is not None and not ref.kv_pools:
        return "while allocating the KV pool", ""
    return "during startup", ""


def _oom(s: Startup, f, mfs: float | None, pre: float | None) -> Finding:
    ref = s.reference_rank
    capturing = ref is not None and ref.cuda_graph_gib is None and (
        SGLangRankFacts(ref).avail_before_graphs_gib is not None or bool(SGLangRankFacts(ref).graph_capture_began))
    tried = f.data.get("tried_gib")
    if capturing and mfs is not None and pre:
        need = (tried or 1.0) + 0.5
        steps = max(1, math.ceil(need / (0.01 * pre)))
        to = round(mfs - steps / 100, 2)
        return Finding("oom-cuda-graph", "error", "CUDA out of memory while capturing CUDA graphs",
                       f"Graphs come out of the (1 − mem_fraction_static) reserve; it was too small. Lower "
                       f"--mem-fraction-static by {steps / 100:.2f} (frees {steps * 0.01 * pre:.2f} GiB) or cap "
                       "--cuda-graph-max-bs.", Suggestion("--mem-fraction-static", mfs, to))
    past = _past_static_budget(s, f, mfs)
    if past is not None:
        return past
    if ref is None or ref.weights_gib is None:
        logged_tp = finite_number(s.setting("tp_size")) or (tp_size(s) if len(s.ranks) > 1 else None)
        too_big = _weights_exceed(s, f) or weights_fill_gpu(s, "--tp", int(logged_tp) if logged_tp else None)
        if too_big is not None:
            return too_big
    phase = "while loading weights" if ref is not None and ref.weights_gib is None and ref.pre_load_free_gib else "during startup"
    return Finding("cuda-oom", "error", f"CUDA out of memory {phase}",
                   _sentences(excerpt(f.message, 240), "If the weights do not fit, raise --tp or use a quantized checkpoint; "
                              "if it happened after the pool, lower --mem-fraction-static"))


WEIGHTS_SHARE_THAT_SERVES = 0.75  # weights per GPU up to this share of it leave SGLang's ~0.85–0.9 fraction KV room
MAX_TP = 64


def _weights_exceed(s: Startup, f) -> Finding | None:
    """An out of memory before the weights finished loading, for a model whose weights per GPU (its config, SGLang's
    sharding) are more than the device holds: the memory fraction sizes the KV cache after the load, so it cannot
    help. The split is the smallest power-of-two --tp that divides the heads and brings the weights under
    WEIGHTS_SHARE_THAT_SERVES of each GPU; a smaller format (fp8 on SM 8.9+, a 4-bit AWQ checkpoint) where it does
    that on the GPUs the run had."""
    ref = s.reference_rank
    total = finite_number(f.data.get("device_total_gib")) or (ref.total_gib if ref is not None else None) or (
        ref.pre_load_free_gib if ref is not None else None)  # what was free before weights: a little under the device
    name = model_name(s)
    tp = tp_size(s)
    if not total or not name:
        return None
    mc = load_model_config(name)
    if mc is None:
        return None

    def weights(n: int, quantization: str | None = None) -> float | None:
        try:
            return estimate_weights(mc, sglang_parallel(n), quantization=quantization,
                                    rules=rules.SGLANG_WEIGHTS).bytes_per_rank / GIB
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    now = weights(tp)
    if now is None or now < WEIGHTS_SHARE_THAT_SERVES * total:
        return None
    heads = mc.cfg.get("num_attention_heads")
    sizes = [n for n in (tp * 2 ** k for k in range(1, 7)) if n <= MAX_TP and (not isinstance(heads, int) or heads % n == 0)]
    split = next((n for n in sizes if (w := weights(n)) is not None and w <= WEIGHTS_SHARE_THAT_SERVES * total), None)
    detail = (f"The weights are {now:.2f} GiB per GPU at --tp {tp} (estimated from {name}'s config), "
              f"{now / total:.0%} of the {total:.2f} GiB GPU: they do not fit as placed. --mem-fraction-static sizes "
              "the KV cache after the weights are in, so lowering it cannot help.")
    moves = []
    if split is not None:
        w = weights(split) or 0.0
        detail += f" At --tp {split} each GPU holds {w:.2f} GiB of weights."
        moves.append(Suggestion("--tp", tp, split, note=f"{split} GPUs of this size: {w:.2f} GiB of weights each"))
    q_plan = quant_plan(mc.cfg)
    if q_plan.method == "none":
        for method, what in (("fp8", "FP8 weights (--quantization fp8, or a published FP8 checkpoint; SM 8.9+)"),
                             ("awq", "a 4-bit AWQ checkpoint (--quantization awq)")):
            w = weights(tp, method)
            if w is not None and w <= WEIGHTS_SHARE_THAT_SERVES * total:
                detail += f" {what[0].upper() + what[1:]} takes {w:.2f} GiB per GPU at --tp {tp}."
                moves.append(Suggestion("--quantization", None, method,
                                        note=f"{w:.2f} GiB of weights per GPU; some quality cost"))
                break
    if not moves:
        detail += " Use more GPUs (--tp), a quantized checkpoint or a smaller model."
    primary = moves[0] if moves else None
    if primary is not None:
        primary.alternatives = moves[1:]
    return Finding("weights-oom", "error", f"Startup failed: the weights ({now:.2f} GiB per GPU) do not fit the GPU",
                   detail, primary)


def _past_static_budget(s: Startup, f, mfs: float | None) -> Finding | None:
    """An out of memory whose process already held more than mem_fraction_static of the device: weights and the
    KV pool were in place (they take at most that share), so what failed came out of the (1 − fraction) reserve,
    which was too small. The reserve must grow by the whole failed allocation."""
    held, total, tried = f.data.get("process_gib"), f.data.get("device_total_gib"), f.data.get("tried_gib")
    if mfs is None or not (f.data.get("held_past_budget") and held and total and tried):
        return None
    ref = s.reference_rank
    base = (ref.pre_load_free_gib if ref is not None and ref.pre_load_free_gib else None) or total
    steps = max(1, math.ceil((tried + 0.5) / (0.01 * base)))
    to = round(mfs - steps / 100, 2)
    free = f.data.get("device_free_gib")
    left = f" with {free:.2f} GiB free" if free is not None else ""
    detail = (f"The process held {held:.2f} GiB of the {total:.2f} GiB device when it asked for {tried:.2f} GiB more"
              f"{left}. That is more than mem_fraction_static {mfs} lets weights and the KV pool take "
              f"({mfs * total:.2f} GiB), so both were already allocated and this allocation came out of the "
              f"{(1 - mfs) * total:.2f} GiB reserve (CUDA graphs, activations, communication buffers such as a "
              f"symmetric-memory pre-allocation), which was too small. Lower --mem-fraction-static to {to} "
              f"(frees {steps * 0.01 * base:.2f} GiB for the reserve, the KV pool shrinks by as much), or shrink what "
              "allocates outside the pool.")
    return Finding("cuda-oom", "error", f"CUDA out of memory in the reserve: {tried:.2f} GiB asked with "
                   f"{held:.2f} of {total:.2f} GiB already held", detail, Suggestion("--mem-fraction-static", mfs, to))


def _dsv4_pools(s: Startup) -> Finding | None:
    """DeepSeek-V4: tokens are what the budget buys at its bytes per full token once the fixed
    ratio-128 states for every request slot are paid; fewer slots buy tokens back."""
    x = SGLangCapacityFacts(s.capacity)
    bpft, fixed = x.dsv4_bytes_per_full_token, x.dsv4_c128_state_fixed_gib
    tokens = s.capacity.kv_tokens or x.dsv4_full_tokens
    if not bpft or tokens is None:
        return None
    title = f"DeepSeek-V4 pools: {tokens:,} tokens × {bpft:,.2f} B" + (f" + {fixed:.2f} GiB of fixed states" if fixed else "")
    swa, full = x.dsv4_swa_tokens, x.dsv4_full_tokens
    share = f"{swa / full:.0%} of the tokens" if swa and full else "a fraction of the tokens (0.1 by default)"
    detail = (f"V4 keeps no full-resolution latent: a token of context costs {bpft:,.2f} B across the sliding-window "
              f"pool ({share}, every layer), the ratio-4 and ratio-128 compressed rows, the indexer rows and "
              "the compress states")
    slots = s.capacity.max_running_requests  # per rank (per DP group under DP attention)
    if not fixed or not slots or slots < 8 or bpft < 100:
        return Finding("dsv4-pools", "info", title, detail + ".")
    groups = max(1, tp_size(s) // attn_tp_size(s))  # the flag counts every DP group's slots
    spec = bool(s.setting("speculative_algorithm"))
    fewer = max(1, slots // 4)
    freed = fixed - dsv4.fixed_for(fixed, slots, fewer, spec)
    gain = int(freed * GIB / bpft) // dsv4.PAGE * dsv4.PAGE
    cap = s.setting_number("max_total_tokens")
    per = f" per DP rank ({slots * groups} in all)" if groups > 1 else ""
    detail += (f". The ratio-128 compress states are a fixed {fixed:.2f} GiB for {slots} request slots{per}, paid "
               f"before any token")
    if cap is not None and tokens + gain > cap:
        return Finding("dsv4-pools", "info", title, detail + f"; fewer slots would not add tokens here: "
                       f"--max-total-tokens {int(cap):,} caps the pool.")
    detail += (f": --max-running-requests {fewer * groups} keeps {fixed - freed:.2f} GiB of them and gives the "
               f"{freed:.2f} GiB to the pools, ≈ {gain:,} more tokens per GPU, if {fewer * groups} concurrent "
               "requests are enough.")
    return Finding("dsv4-pools", "info", title, detail,
                   Suggestion("--max-running-requests", slots * groups, fewer * groups, tokens + gain,
                              note=f"frees {freed:.2f} GiB of fixed compress states per GPU"))


def findings(s: Startup) -> list:
    out: list = []
    ref = s.reference_rank
    mfs = s.setting_number("mem_fraction_static")
    pre = ref.pre_load_free_gib if ref else None
    bpt = s.reconciliation.bytes_per_token if s.reconciliation else None
    fail = _failure(s, mfs, pre)
    if fail:
        out.append(fail)
    if pool_capped(s):  # the reserve and the +0.01 steps do not size this pool: the cap does
        out.append(_capped(s, mfs))
    elif mfs is not None and pre and bpt:
        out.extend(f for f in (_reserve(s, mfs, pre, bpt), _headroom(s, mfs, pre, bpt)) if f)
    graphs = _after_graphs(s, mfs, pre) if fail is None and not (mfs is not None and pre and bpt) else None
    if graphs is not None and graphs.severity != "info":
        out.append(graphs)
    out.extend(f for f in (_serving_error(s), _input_refused(s), _second_runner(s), _draft_copies_idle(s, bpt),
                           _indexer_left_out(s), _pool(s), _mla_replicated(s, bpt or 0, mfs, pre), _dsv4_pools(s)) if f)
    for w in s.warnings:
        if (w.get("code") == "max-total-tokens-above-profile" and None not in (w.get("requested"), w.get("profiled"))
                and w["profiled"] > 0):  # ≤ 0: no KV room at all, the not-enough-memory failure says so
            out.append(Finding("max-total-tokens-clamped", "warning",
                               f"--max-total-tokens {w.get('requested'):,} was more than memory allows",
                               f"SGLang profiled room for {w.get('profiled'):,} tokens and used that. To get more, raise "
                               "--mem-fraction-static or use an fp8 KV cache; --max-total-tokens can only lower the pool."))
    if graphs is not None and graphs.severity == "info":  # a healthy reserve is context, not the answer
        out.append(graphs)
    meaning = _capacity_meaning(s)
    if meaning is not None:
        out.append(meaning)
    return out


def scheduler_advice(s: Startup, head: str, running_txt: str, rt: dict) -> tuple[str, Suggestion | None]:
    """Requests queued while the pool had room: what SGLang's scheduler was limited by, and the flag."""
    chunk, prefill = s.setting("chunked_prefill_size"), s.setting("max_prefill_tokens")
    budget = ", ".join(f"{k} {v:,}" for k, v in (("--chunked-prefill-size", chunk), ("--max-prefill-tokens", prefill))
                       if isinstance(v, int))
    detail = (f"{head}{running_txt}. Not memory: the scheduler admitted requests slower than they arrived. SGLang admits "
              f"new requests one prefill budget at a time{' (' + budget + ')' if budget else ''} and holds back KV room for "
              "the tokens running requests may still generate (new_token_ratio × --schedule-conservativeness); with usage "
              "this low that reservation or the prefill budget was the limit. SGLang's tuning guide: with token usage < 0.9 "
              "and a queue, lower --schedule-conservativeness (e.g. 0.3); a larger --chunked-prefill-size admits prompts faster.")
    return detail, Suggestion("--schedule-conservativeness", s.setting("schedule_conservativeness", 1.0), 0.3)
