"""Turn an assembled SGLang startup into a reconciled ledger: era, derived figures, reconciliation, rows."""

from __future__ import annotations

from typing import Any

from kvscope.core.errors import InputError
from kvscope.core.provenance import How
from kvscope.core.startup import KvPool, LedgerRow, LedgerRows, Rank, Reconciliation, Startup
from kvscope.engines.common import ServingLoop, serving_crash
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.sglang import rules
from kvscope.engines.sglang.defaults import HYBRID_SWA_DISABLED_TYPES
from kvscope.engines.sglang.dsv4 import PAGE as DSV4_PAGE_TOKENS
from kvscope.engines.sglang.eras import VersionRange, era_for, infer_version_range, parse_version
from kvscope.engines.sglang.facts import SGLangCapacityFacts, SGLangRankFacts
from kvscope.engines.sglang.lines import DSV4_POOL, SHAPES
from kvscope.engines.sglang.rules import GIB, Interval
from kvscope.engines.sglang.state import state
from kvscope.engines.shapes import Shape, dated_rows_seen
from kvscope.model.arch import dtype_bytes
from kvscope.model.catalog import load_architecture, read_local_config

_DATED_PREFIX = lazy_compile(r"\[(\d{4}-\d\d-\d\d)[ T]\d\d:\d\d")
_LOAD_END_NO_USAGE = lazy_compile(r"Load weight end\..*avail mem=\d+\.\d\d ?GB\s*$")


def _log_date(s: Startup) -> str | None:
    """The startup's date: its first event's stamp, else the first dated SGLang prefix among its lines (an
    excerpt may open on an unprefixed traceback line; 0.3.x stamps carry the time only)."""
    if s.started_at and _DATED_PREFIX.match(f"[{s.started_at}"):
        return s.started_at
    for e in s.evidence:
        m = _DATED_PREFIX.search(e.text)
        if m:
            return m.group(1)
    return None


def _features(s: Startup) -> dict[str, Any]:
    texts = [e.text for e in s.evidence]
    joined = "\n".join(texts)
    f: dict[str, Any] = {
        "pool_dtype_field": "is allocated. dtype:" in joined,
        "using_kv_dtype_line": "Using KV cache dtype" in joined,
        "load_elapsed": "Load weight end. elapsed=" in joined,
        "load_quant": "Load weight end." in joined and "quant=" in joined,
        "load_dtype": "Load weight end." in joined and ", dtype=" in joined and "quant=" not in joined,
        "phased_graph_lines": "Capture target" in joined,
        "old_graph_lines": "Capture cuda graph begin" in joined or "Capture cuda graph end" in joined,
        "memory_baseline": "Memory baseline taken" in joined,
        "server_args_dict": "server_args={" in joined,
        "server_args_repr": "server_args=ServerArgs(" in joined,
        "ready_without_gpu_mem": "max_total_num_tokens=" in joined and "available_gpu_mem" not in joined,
        "dsv4_sizing": "DSV4 memory calculation" in joined,
        "dsv4_fixed_states": "DSV4 memory calculation" in joined and "c128_state_fixed=" in joined,
        "gpu_id_prefix": "[gpu_id=" in joined,
        # a whole 'Load weight end … avail mem=X GB' line with no usage after it (≤0.4.3); one cut line proves nothing
        "load_no_usage": any(_LOAD_END_NO_USAGE.search(t) for t in texts)
        and not any("Load weight end" in t and "mem usage" in t for t in texts),
    }
    for r in s.ranks:  # any rank that logged both pools (excerpts often show the draft on one rank only)
        target, draft = r.pool("target"), r.pool("draft")
        if target and draft and target.tokens and draft.tokens:
            f["draft_same_tokens"] = draft.tokens == target.tokens
            f["draft_more_tokens"] = draft.tokens > target.tokens
            break
    return f


def state_pool_budget_gib(r: Rank) -> float:
    """What the rank's Mamba state pool took out of the KV budget (doc §2.5): the printed conv + ssm sizes
    cover size + 1 slots, the budget paid for size."""
    pool = r.pool("mamba")
    if pool is None or not pool.gib:
        return 0.0
    slots = SGLangRankFacts(r).mamba_mamba_slots
    return pool.gib * slots / (slots + 1) if slots else pool.gib


def _derive_rank(r: Rank) -> None:
    if r.pre_load_free_gib is None and r.avail_after_weights_gib is not None and r.weights_gib is not None:
        r.set_derived("pre_load_free_gib", round(r.avail_after_weights_gib + r.weights_gib, 2))
    if r.avail_after_weights_gib is None and r.pre_load_free_gib is not None and r.weights_gib is not None:
        r.set_derived("avail_after_weights_gib", round(r.pre_load_free_gib - r.weights_gib, 2))
    if r.weights_gib is None and r.pre_load_free_gib is not None and r.avail_after_weights_gib is not None:
        r.set_derived("weights_gib", round(r.pre_load_free_gib - r.avail_after_weights_gib, 2))


def _int_setting(s: Startup, key: str, default: int | None = None) -> int | None:
    value = s.setting(key)
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default



def tp_size(s: Startup) -> int:
    logged = _int_setting(s, "tp_size") or _int_setting(s, "tp")
    if logged:
        return logged
    tps = {p for r in s.ranks for p in r.rank.split() if p.startswith("TP") and p[2:].isdigit()}
    return max(1, len(tps))


def dp_attention_from_ranks(s: Startup) -> int | None:
    """DP size when rank labels show DP attention ('DP1 TP1': global TP index inside a DP group), else None."""
    pairs = set()
    for r in s.ranks:
        parts = dict((p[:2], p[2:]) for p in r.rank.split() if p[:2] in ("DP", "TP") and p[2:].isdigit())
        if "DP" in parts and "TP" in parts:
            pairs.add((int(parts["DP"]), int(parts["TP"])))
    dps = {d for d, _ in pairs}
    if len(dps) > 1 and any(d > 0 and t > 0 for d, t in pairs) and len({t for _, t in pairs}) == len(pairs):
        return len(dps)
    return None


def attn_tp_size(s: Startup) -> int:
    tp = tp_size(s)
    if s.setting("enable_dp_attention") in (True, "true", "True", 1):
        dp = _int_setting(s, "dp_size", 1) or 1
        return max(1, tp // dp)
    dp_ranks = dp_attention_from_ranks(s)
    return max(1, tp // dp_ranks) if dp_ranks else tp


def page_size(s: Startup) -> int:
    """--page-size as logged; DSA models get 64 on CUDA when unset (SGLang forces it)."""
    return _int_setting(s, "page_size") or state(s).page_size_default or 1


def kv_dtype_name(s: Startup) -> str | None:
    ref = s.reference_rank
    pool = ref.pool("target") if ref else None
    return (
        (pool.dtype if pool and pool.dtype else None)
        or s.settings.get("kv_cache_dtype_resolved")
        or (s.setting("kv_cache_dtype") if s.setting("kv_cache_dtype") not in (None, "auto") else None)
    )


def log_version_range(s: Startup) -> VersionRange:
    """The SGLang releases this startup's wordings and date allow."""
    return infer_version_range(_features(s), _log_date(s), _rows(s))


def _rows(s: Startup) -> list[Shape]:
    return dated_rows_seen([SHAPES], (e.text for e in s.evidence))


# functions of SGLang's serving loop: a traceback through them is a crash while serving, not a failed startup
SERVING_LOOP = ServingLoop(
    frames=("forward_thread_func", "forward_batch_generation", "event_loop_normal", "event_loop_overlap", "run_batch",
            "forward_prefill_batch", "forward_decode_batch", "exposed_step"),
    steps=(("forward_extend", "a prefill (forward_extend)"), ("forward_decode", "a decode step"),
           ("forward_idle", "an idle step"), ("forward_prefill_batch", "a prefill (forward_prefill_batch)"),
           ("forward_decode_batch", "a decode step (forward_decode_batch)"),
           ("get_image_feature", "the vision encoder of a prefill (get_image_feature)")),
    startup_frames=("init_memory_pool", "load_model", "capture", "init_cuda_graphs", "initialize"),
    warmup_request=True)


def finish(s: Startup) -> None:
    """Fill era, derived figures, capacity, reconciliation and ledger rows of an SGLang startup."""
    serving_crash(s, SERVING_LOOP)
    _held_past_budget(s)
    vr = infer_version_range(_features(s), _log_date(s), _rows(s))
    logged = parse_version(s.engine_version)
    era = era_for(logged) if logged else vr.eras[-1] if vr.eras else era_for((0, 5, 9))
    s.era = f"{era.name}" if logged else vr.label()
    state(s).version_clues = list(vr.clues or [])
    for r in s.ranks:
        _derive_rank(r)
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    cap = s.capacity
    _dsv4_from_reference(s)
    _pool_from_input_limit(s)
    if cap.kv_tokens is None:
        cap.kv_tokens = cap.max_total_num_tokens or (target.tokens if target else None)
    if s.model is None and isinstance(s.setting("model"), str):
        s.model = s.setting("model")
    cell = _reconcile(s, era)
    if pool_capped(s):  # --max-total-tokens, not memory, sized the pool (findings and the runtime verdict read this)
        SGLangCapacityFacts(s.capacity).max_total_tokens_cap = max_total_tokens(s)
    _derive_from_reserve(s, cell)
    for r in s.ranks:
        r.ledger = ledger_rows(s, r)


def _held_past_budget(s: Startup) -> None:
    """A torch out of memory whose process already held more than mem_fraction_static of the device: weights and
    the KV pool (at most that share) were in place, so what failed was allocated from the reserve after them
    (findings and the contract's failure kind read the mark)."""
    f = s.failure
    if f is None or f.kind != "cuda-oom":
        return
    held, total, mfs = f.data.get("process_gib"), f.data.get("device_total_gib"), s.setting_number("mem_fraction_static")
    if held and total and mfs is not None and held > mfs * total:
        f.data["held_past_budget"] = True


# SGLang caps one request at max_req_input_len = min(context_len − 1, pool − 1) − 5 (the pool: max_total_num_tokens,
# from 0.5.7 the smaller of a hybrid's pools), so a refused input names its limit and limit + 6 is one of the two
INPUT_LIMIT_SLACK = 6


def input_limit_bound(s: Startup) -> tuple[int | None, str]:
    """(limit + 6, what it is: 'pool' | 'context' | 'either') for a logged 'maximum allowed length', else (None, '')."""
    limit = SGLangCapacityFacts(s.capacity).max_req_input_len
    if not isinstance(limit, int) or limit <= 0:
        return None, ""
    bound = limit + INPUT_LIMIT_SLACK
    context = s.capacity.context_len or _int_setting(s, "context_length")
    if context is None:
        arch, _ = _arch_context(s)
        context = arch.max_position_embeddings if arch else None
    if context is not None:
        return bound, ("context" if context == bound else "pool" if context > bound else "either")
    # context lengths are set in round numbers (4,096, 40,960, 163,840, 256,000); a pool's size almost never is
    round_number = bound % 1024 == 0 or bound % 1000 == 0
    return bound, "either" if round_number else "pool"


def _pool_from_input_limit(s: Startup) -> None:
    bound, what = input_limit_bound(s)
    if bound is not None and what == "pool" and s.capacity.max_total_num_tokens is None:
        s.capacity.max_total_num_tokens = bound
        SGLangCapacityFacts(s.capacity).max_total_num_tokens_from = (
            f"the maximum allowed input length {bound - INPUT_LIMIT_SLACK:,} + {INPUT_LIMIT_SLACK} "
            "(SGLang: min(context_len − 1, pool − 1) − 5)")


def _dsv4_from_reference(s: Startup) -> None:
    """DeepSeek-V4's sizing lines are per rank: the reference rank's become the startup's capacity
    (a rank printing them twice keeps its last pool)."""
    for r in s.ranks:
        v4 = [p for p in r.kv_pools if p.name == DSV4_POOL]
        for extra in v4[:-1]:
            r.kv_pools.remove(extra)
        _dsv4_pool_from_sizes(r, v4[-1] if v4 else None)
    ref = s.reference_rank
    if ref is None or not SGLangRankFacts(ref).dsv4_bytes_per_full_token:
        return
    into, of_ref = SGLangCapacityFacts(s.capacity), SGLangRankFacts(ref)
    for key in of_ref.names():
        if key.startswith("dsv4_"):
            into.put(key, of_ref.get(key))
    if s.capacity.kv_tokens is None:
        s.capacity.kv_tokens = s.capacity.max_total_num_tokens or SGLangRankFacts(ref).dsv4_full_tokens


def _dsv4_pool_from_sizes(r: Rank, pool: KvPool | None) -> None:
    """The "DSV4 pool sizes: full=N" line counts the pool SGLang built. When the sizing line's full_token
    disagrees by more than a page (a terminal clipped "full_token=852992" to "8529"), the pool is N tokens at
    the sizing line's bytes per token plus its fixed states: derived, not read."""
    facts = SGLangRankFacts(r)
    sized = facts.take("dsv4_sizes_full_tokens")
    if sized is None:
        return
    calc = facts.dsv4_full_tokens
    if calc is not None and abs(sized - calc) <= DSV4_PAGE_TOKENS:
        return
    facts.dsv4_full_tokens = sized
    bpft = facts.dsv4_bytes_per_full_token
    if pool is not None and bpft:
        fixed = (facts.dsv4_c128_state_fixed_gib or 0.0) + (facts.dsv4_swa_fixed_gib or 0.0)
        pool.tokens, pool.gib = sized, sized * bpft / GIB + fixed
        facts.dsv4_pool_derived = "tokens from 'DSV4 pool sizes', bytes per token from the sizing line"


def model_name(s: Startup) -> str | None:
    """The model id or path: as assumed, as the log names it, or from its launch settings."""
    model = s.assumptions.get("model") or s.model or s.setting("model_path")
    return model if isinstance(model, str) else None


def _arch_context(s: Startup):
    return load_architecture(model_name(s))


def _candidate_cells(s: Startup, arch, era, ref: Rank) -> list[tuple[rules.CellSize, str]]:
    """Bytes-per-token candidates under the era's rules; several when the log leaves a choice open."""
    dtype = kv_dtype_name(s)
    weights_dtype = SGLangRankFacts(ref).weights_dtype or "bfloat16"
    if dtype:
        choices = [(dtype_bytes(dtype, weights_dtype), f"KV dtype {dtype}")]
    else:
        choices = [(dtype_bytes(None, weights_dtype), "KV dtype not in the log, assumed the weights' dtype"),
                   (1, "KV dtype not in the log; the pool size implies fp8")]
    # A sliding-window model SGLang does not run with hybrid SWA memory (Gemma 2/3: "Disable hybrid SWA memory
    # for … as it is not yet supported", server_args/overrides.py) keeps every layer in the one pool.
    one_pool = bool(arch.sliding_layers) and (arch.model_type in HYBRID_SWA_DISABLED_TYPES
                                              or str(s.setting("disable_hybrid_swa_memory")) == "True")
    layers = arch.num_layers if one_pool else None
    if one_pool:
        choices = [(b, f"{note}; hybrid SWA memory off: all {arch.num_layers} layers in one pool") for b, note in choices]
    out: list[tuple[rules.CellSize, str]] = []
    for kv_bytes, note in choices:
        if arch.attention == "mla" and arch.index_head_dim:
            out += [(c, note) for c in rules.dsa_cells(arch, kv_bytes, arch.num_layers)]
        else:
            out.append((rules.cell_size(arch, kv_bytes, attn_tp_size(s), era, layers=layers), note))
    return out


def _pool_matches(target, page: int, cell: rules.CellSize) -> tuple[bool, str]:
    """Does the printed pool line equal (tokens + page) × cell? K and V are checked one by one when split."""
    rows = target.tokens + max(1, page)
    total = rows * cell.bytes_per_token / GIB
    if target.k_gib is not None and target.v_gib is not None and cell.tensors_per_layer == 2:
        k = total * cell.k_fraction
        v = total - k
        ok = abs(k - target.k_gib) <= rules.HALF_CENT + 1e-9 and abs(v - target.v_gib) <= rules.HALF_CENT + 1e-9
        return ok, (f"pool size: ({target.tokens:,} + {page}) × {cell.bytes_per_token:,} B → K {k:.4f} + V {v:.4f} GiB, "
                    f"log prints K {target.k_gib:.2f}, V {target.v_gib:.2f} → {'matches' if ok else 'DOES NOT match'}")
    printed = target.size_gib() or 0.0
    ok = abs(total - printed) <= rules.HALF_CENT + 1e-9
    return ok, (f"pool size: ({target.tokens:,} + {page}) × {cell.bytes_per_token:,} B = {total:.4f} GiB, "
                f"log prints {printed:.2f} → {'matches' if ok else 'DOES NOT match'}")


def _reconcile(s: Startup, era) -> rules.CellSize | None:
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if ref is None or target is None or target.tokens is None:
        return None
    tokens, page = target.tokens, page_size(s)
    printed = target.size_gib()
    arch, where = _arch_context(s)
    if arch is not None and arch.attention == "mla" and target.k_gib is not None and target.gib is None:
        arch = None  # an MHA-shaped pool line under an MLA config: the config is not this model
    if arch is not None and arch.index_head_dim and _int_setting(s, "page_size") is None:
        state(s).page_size_default = 64  # "Setting page size to 64 for DeepSeek DSA."
        page = 64
    checks: list[str] = []
    consistent: list[bool] = []
    cell = None
    if arch is not None:
        candidates = _candidate_cells(s, arch, era, ref)
        results = [(c, note, *_pool_matches(target, page, c)) for c, note in candidates] if printed is not None else []
        match = next((r for r in results if r[2]), None)
        cell, note = (match[0], match[1]) if match else candidates[0]
        if results:
            chosen = match or results[0]
            consistent.append(chosen[2])
            checks.append(chosen[3])
        bpt, method = cell.bytes_per_token, f"architecture from {where}: {cell.formula}; {note}"
    elif printed is not None:
        obs = rules.observed_cell_interval(tokens, page, printed)
        bpt, method = round(obs.mid), "bytes per token implied by the pool line (architecture unknown; pass --model)"
    else:
        return None
    rec = Reconciliation(bytes_per_token=bpt, method=method)
    if arch is not None:
        rec.architecture = arch.as_dict()
    profile_bpt, share = _profiled_cell(s, arch, cell, bpt, era)
    if share:
        checks.append(share)
    _budget_check(s, ref, tokens, profile_bpt, page, rec, checks, consistent, era)
    rec.consistent = all(consistent) if consistent else None
    rec.detail = "; ".join(checks)
    s.reconciliation = rec
    return cell


def draft_layers(s: Startup, arch) -> tuple[int, str]:
    """The draft's layer count as SGLang's ModelRunner.eagle_draft_num_layers takes it: the draft config's
    num_nextn_predict_layers, else its num_hidden_layers; a NEXTN/MTP draft of a DeepSeek-family target is
    the target's own nextn layers. Without the draft's config (a path on the poster's machine), an EAGLE
    draft's one layer, said as assumed."""
    assumed = _int_setting(s, "draft_layers")  # --assume draft_layers=N
    if assumed:
        return assumed, f"{assumed} (assumed)"
    path = s.setting("speculative_draft_model_path")
    try:
        local = read_local_config(str(path)) if path else None
    except InputError:  # something at that path that is no config.json: the fallback below, not a failed explain
        local = None
    if local is not None:
        cfg = local[0]
        n = cfg.get("num_nextn_predict_layers") or cfg.get("num_hidden_layers")
        if isinstance(n, int) and n > 0:
            return n, f"the draft's config.json says {n}"
    if arch is not None and arch.nextn_layers and (not path or str(path) == str(model_name(s))):
        return arch.nextn_layers, f"the target's {arch.nextn_layers} MTP layer(s)"
    return 1, "assumed 1 (the draft's config.json is not at hand; EAGLE drafts have one layer)"


def _profiled_cell(s: Startup, arch, cell: rules.CellSize | None, bpt: int, era) -> tuple[int, str]:
    """The bytes per token SGLang divides the budget by: from 0.5.14 (E3) a speculative run's includes the draft's
    share (rules.with_draft_share), and the draft then allocates the same token count. NGRAM has no draft KV."""
    algo = str(s.setting("speculative_algorithm") or "").upper()
    if not era.draft_cell_inflation or not algo or algo in {"NONE", "NGRAM"} or cell is None:
        return bpt, ""
    n, why = draft_layers(s, arch)
    profiled = rules.with_draft_share(bpt, n, cell.layers)
    return profiled, (f"profiled cell: {bpt:,} + int({bpt:,} × {n}/{cell.layers}) draft share = {profiled:,} B "
                      f"(draft layers: {why})")


def _derive_from_reserve(s: Startup, cell: rules.CellSize | None) -> None:
    """No 'Load weight' lines (a short excerpt): recover F and A from the reserve SGLang left.

    After the pool, free ≈ F × (1 − mfs) − request table − allocator slack, and A = F × (1 − mfs) + pool
    budget; both are marked derived.
    """
    ref = s.reference_rank
    mfs = s.setting_number("mem_fraction_static")
    target = ref.pool("target") if ref else None
    rec = s.reconciliation
    if (ref is None or target is None or rec is None or mfs is None or not 0 < mfs < 1
            or ref.pre_load_free_gib is not None or ref.avail_after_pool_gib is None or not target.tokens):
        return
    if SGLangCapacityFacts(s.capacity).max_total_tokens_cap:  # a capped pool leaves more than the reserve free
        return
    page = page_size(s)
    slack = rules.allocator_slack_gib(target.tokens, page, cell) if cell else 0.0
    request = _request_pool_estimate(s)
    reserve = ref.avail_after_pool_gib + slack + request
    pre = reserve / (1 - mfs)
    at_profile = reserve + (target.tokens + 0.5) * rec.bytes_per_token / GIB + state_pool_budget_gib(ref)
    ref.set_derived("pre_load_free_gib", round(pre, 2))
    ref.set_derived("avail_after_weights_gib", round(at_profile, 2))
    ref.set_derived("weights_gib", round(pre - at_profile, 2))
    SGLangRankFacts(ref).derivation = (
        f"F = (free after pool {ref.avail_after_pool_gib:.2f} + allocator rounding {slack:.3f} + request table "
        f"{request:.3f}) / (1 − {mfs}) = {pre:.2f} GiB"
    )


def _request_pool_estimate(s: Startup) -> float:
    rows = _int_setting(s, "max_running_requests")
    if rows is None and s.setting("speculative_algorithm"):
        rows = 48  # SGLang resets max_running_requests to 48 for speculative decoding
    context = s.capacity.context_len or _int_setting(s, "context_length")
    if context is None:
        arch, _ = _arch_context(s)
        context = arch.max_position_embeddings if arch else None
    if not rows or not context:
        return 0.0
    draft = _int_setting(s, "speculative_num_draft_tokens", 4 if s.setting("speculative_algorithm") else 0) or 0
    return rules.request_pool_gib(rows, context, draft)


def _budget_check(s, ref, tokens, bpt, page, rec, checks, consistent, era) -> None:
    """Replay rest = A − F(1 − mfs) from the printed F and A; the logged count must fall inside."""
    mfs = s.setting_number("mem_fraction_static")
    pre = ref.pre_load_free_gib
    at_profile = ref.avail_after_weights_gib
    if era.draft_in_static_budget and SGLangRankFacts(ref).avail_after_draft_weights_gib is not None:
        at_profile = SGLangRankFacts(ref).avail_after_draft_weights_gib  # E3+: draft weights load before the profile
    if pre is None or at_profile is None or pre <= 0:  # nothing free before weights: no fraction of it to check
        return
    state = state_pool_budget_gib(ref)  # hybrid models: the Mamba pool is paid out of rest before the KV pool
    with_state = f" plus the {state:.2f} GiB Mamba state pool" if state else ""
    if mfs is None and pool_capped(s):  # the cap sized the pool: it implies no mem_fraction_static
        checks.append(f"the token count is --max-total-tokens {max_total_tokens(s):,}: the cap, not the memory budget, "
                      "sized the pool")
        return
    if mfs is None:
        implied = rules.implied_mfs(pre, at_profile, tokens, bpt, state)
        SGLangCapacityFacts(s.capacity).implied_mem_fraction_static = round(implied, 4)
        checks.append(f"mem_fraction_static not in the log; the token count{with_state} implies ≈ {implied:.3f}")
        return
    rest = rules.rest_interval(Interval.printed(pre), Interval.printed(at_profile), mfs)
    if state:
        rest = rest - Interval.printed(state, 2 * rules.HALF_CENT)  # two printed sizes, conv + ssm
    low, high = rules.tokens_from_rest(rest, bpt, page)
    cap = max_total_tokens(s)
    capped = ""
    if cap is not None and cap < high:  # SGLang: min(profiled, --max-total-tokens), then page-floored
        SGLangCapacityFacts(s.capacity).kv_tokens_budget_uncapped = [low, high]
        low, high = (min(n, cap) // max(1, page) * max(1, page) for n in (low, high))
        capped = f", capped at --max-total-tokens {cap:,} → {low:,} … {high:,}" if low != high else (
            f", capped at --max-total-tokens {cap:,} → {high:,}")
    rec.kv_tokens_low, rec.kv_tokens_high = low, high
    ok = low <= tokens <= high
    basis = None
    if not ok and tokens < low and not capped:
        basis = _basis_measured_earlier(ref, pre, at_profile, tokens, bpt, page, mfs, state)
        if basis is not None:
            ok = True
            rec.kv_tokens_low, rec.kv_tokens_high = rules.tokens_from_rest(
                rules.rest_interval(basis, rules.at_profile_interval(at_profile), mfs) - Interval(state, state), bpt, page)
    consistent.append(ok)
    minus_state = f" − Mamba {state:.2f}" if state else ""
    uncapped = SGLangCapacityFacts(s.capacity).kv_tokens_budget_uncapped if capped else None
    span = f"{uncapped[0]:,} … {uncapped[1]:,}" if uncapped else f"{low:,} … {high:,}"
    verdict = "inside" if ok else "OUTSIDE"
    if basis is not None:
        verdict = (f"below, as the engine measures F when torch distributed init ends, before the model runner's "
                   f"stream, sampler and token oracle, and 'Load weight begin' reads free memory after them: the pool "
                   f"implies F = {basis.mid:.2f} GiB ({basis.low - pre:+.2f} … {basis.high - pre:+.2f} GiB of the "
                   f"printed {pre:.2f}) → reconciles")
    checks.append(
        f"budget: {at_profile:.2f} − {pre:.2f} × (1 − {mfs}){minus_state} = {rest.mid:.4f} GiB"
        f" ± {(rest.high - rest.low) / 2:.4f} → {span} tokens{capped}; logged {tokens:,} {verdict}"
    )


def _basis_measured_earlier(ref, pre: float, at_profile: float, tokens: int, bpt: int, page: int, mfs: float,
                            state: float) -> Interval | None:
    """The F the pool implies, when it lies at most BASIS_GAP_MAX_GIB above the printed pre-load figure (the
    printed figure is read after F was measured: rules.BASIS_GAP_MAX_GIB says what comes between)."""
    implied = rules.basis_from_pool(at_profile, tokens, bpt, page, mfs, state)
    low = max(implied.low, pre - rules.HALF_CENT)
    high = min(implied.high, pre + rules.HALF_CENT + rules.BASIS_GAP_MAX_GIB)
    if low > high or implied.high <= pre + rules.HALF_CENT:
        return None
    basis = Interval(low, high)
    SGLangRankFacts(ref).basis_gib = (round(low, 4), round(high, 4))
    return basis


def max_total_tokens(s: Startup) -> int | None:
    """--max-total-tokens as launched (a positive count), else None."""
    cap = _int_setting(s, "max_total_tokens")
    return cap if cap is not None and cap > 0 else None


def pool_capped(s: Startup) -> bool:
    """The pool is as large as --max-total-tokens allows: the cap, not memory, sized it."""
    cap = max_total_tokens(s)
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    tokens = (target.tokens if target else None) or s.capacity.max_total_num_tokens
    return cap is not None and tokens is not None and tokens >= cap // max(1, page_size(s)) * max(1, page_size(s))


def _unprinted_pool_row(r: Rank, add) -> None:
    """No pool line (≤0.4 MLA logs, excerpts): the drop in free memory across the pool step is the pool plus
    the request table and allocator rounding, derived from the two printed figures around it."""
    if any(p.name not in ("draft", "host") for p in r.kv_pools) or r.avail_after_pool_gib is None:
        return
    before = SGLangRankFacts(r).avail_after_draft_weights_gib or r.avail_after_weights_gib  # E3+: draft loads first
    if before is None or before <= r.avail_after_pool_gib:
        return
    add("KV pool + request table (free after weights − free after pool)", round(before - r.avail_after_pool_gib, 2),
        how=How.DERIVED, note="the log prints no pool line; this drop also holds the req_to_token table and allocator rounding")


def ledger_rows(s: Startup, r: Rank) -> list[LedgerRow]:
    """The rank's memory ledger, top to bottom, each figure marked read / derived / estimated."""
    facts = SGLangRankFacts(r)
    ledger = LedgerRows(r)
    add = ledger.add

    total = s.assumptions.get("gpu_total_gib")
    if total:
        add("device total (driver)", total, how=How.ASSUMED)
        if r.pre_load_free_gib is not None:
            add("CUDA context, NCCL, other processes", total - r.pre_load_free_gib, how=How.DERIVED)
    add("free before weights (budget basis F)", r.pre_load_free_gib, "pre_load_free_gib")
    add("model weights", r.weights_gib, "weights_gib")
    add("free after weights (A)", r.avail_after_weights_gib, "avail_after_weights_gib")
    mfs = s.setting_number("mem_fraction_static")
    for pool in r.kv_pools:
        if pool.name in ("draft", "host"):
            continue
        if pool.name == "mamba":
            slots = facts.mamba_mamba_slots
            add("Mamba state pool (conv + ssm)" + (f" ({slots:,} request slots)" if slots else ""), pool.size_gib(),
                note="paid from the same mem_fraction_static budget, before the KV pool")
            continue
        add(f"KV pool: {pool.name}" + (f" ({pool.tokens:,} tokens)" if pool.tokens else ""), pool.size_gib())
    _unprinted_pool_row(r, add)
    add("free after KV pool", r.avail_after_pool_gib, "avail_after_pool_gib")
    if mfs is not None and r.pre_load_free_gib is not None:
        add(f"intended reserve F × (1 − {mfs})", r.pre_load_free_gib * (1 - mfs), how=How.DERIVED,
            note="SGLang keeps this for activations, CUDA graphs and (before 0.5.14) the draft model")
    for g in (facts.graphs or []):
        add(f"CUDA graphs: {g.get('graph')}", g.get("graph_gib"))
    if facts.avail_during_capture_gib is not None:
        bs = facts.capture_max_bs
        add("least free while capturing (progress bar)", facts.avail_during_capture_gib,
            note=f"{facts.capture_batch_sizes or '?'} batch sizes" + (f", largest {bs}" if bs else ""))
    if facts.draft_weights_gib is not None:
        add("draft model weights", facts.draft_weights_gib)
    draft = r.pool("draft")
    if draft:
        add("KV pool: draft" + (f" ({draft.tokens:,} tokens)" if draft.tokens else ""), draft.size_gib())
    add("free at ready", r.avail_at_ready_gib, "avail_at_ready_gib")
    return ledger.rows
