"""Turn an assembled vLLM startup into a reconciled ledger: era, derived figures, failure, rows.

Order matters: the era decides which budget formula the ledger replays; the capacity figures
(minimum K over workers, tokens from blocks) feed the reconciliation; the reconciliation knows the
bytes per token the findings price changes with.
"""

from __future__ import annotations

from kvscope.core.provenance import How
from kvscope.core.startup import (
    Failure,
    KvPool,
    LedgerRow,
    LedgerRows,
    Rank,
    Reconciliation,
    Startup,
    finite_number,
)
from kvscope.engines.common import ServingLoop, serving_crash
from kvscope.engines.shapes import dated_rows_seen
from kvscope.engines.vllm import eras, lines, rules
from kvscope.engines.vllm.eras import Era
from kvscope.engines.vllm.facts import VllmCapacityFacts, VllmRankFacts
from kvscope.engines.vllm.layout import KvLayout, StateDtypes, kv_layout
from kvscope.engines.vllm.rules import GIB, HALF_CENT
from kvscope.engines.vllm.state import state
from kvscope.model.arch import Architecture, dtype_bytes
from kvscope.model.catalog import load_architecture

THIN_HEADROOM_GIB = 1.0  # vLLM's own warning: "CUDA graphs can take additional 1~3 GiB memory per GPU"


# --- small accessors ------------------------------------------------------------------------------------



def setting_int(s: Startup, key: str, default: int | None = None) -> int | None:
    value = finite_number(s.setting(key))
    return int(value) if value is not None else default


def util(s: Startup) -> float | None:
    return finite_number(s.setting("gpu_memory_utilization"))


def block_size(s: Startup) -> int:
    device = VllmCapacityFacts(s.capacity).blocks_device
    return setting_int(s, "block_size") or rules.PLATFORM_BLOCK_SIZE.get(str(device), rules.DEFAULT_BLOCK_SIZE)


def tp_size(s: Startup) -> int:
    logged = setting_int(s, "tensor_parallel_size") or setting_int(s, "tp_size")
    if logged:
        return logged
    tps = {p for r in s.ranks for p in r.rank.split() if p.startswith("TP")}
    tps |= set(state(s).tp_labels)  # counted before ranks without figures were dropped
    workers = state(s).workers
    if workers is not None and not pp_size_logged(s):
        return max(1, workers)  # counted before ranks without figures were dropped (see _drop_empty_ranks)
    if any(r.rank.startswith("pid=") for r in s.ranks) and not pp_size_logged(s):
        return max(1, len(s.ranks))  # V0 / Ray workers carry only a pid: each is one more TP rank
    return max(1, len(tps))


def pp_size_logged(s: Startup) -> int | None:
    return setting_int(s, "pipeline_parallel_size") or setting_int(s, "pp_size")


def pp_size(s: Startup) -> int:
    logged = setting_int(s, "pipeline_parallel_size") or setting_int(s, "pp_size")
    if logged:
        return logged
    pps = {p for r in s.ranks for p in r.rank.split() if p.startswith("PP")}
    pps |= set(state(s).pp_labels)
    return max(1, len(pps), 1 + max((int(p[2:]) for p in pps), default=0))


def total_gib(s: Startup, r: Rank | None = None) -> float | None:
    """Device total: as logged on the rank, else any rank, else the user's --assume gpu=…."""
    ranks = [r] if r is not None else []
    ranks += [x for x in s.ranks if x is not r]
    for x in ranks:
        if x.total_gib is not None:
            return x.total_gib
    return finite_number(s.assumptions.get("gpu_total_gib"))


def era_of(s: Startup) -> Era:
    name = state(s).era
    return next((e for e in eras.ERAS if e.name == name), eras.ERAS[-1])


def graphs_inside(s: Startup) -> bool | None:
    """Whether this startup's CUDA-graph estimate was subtracted from the budget (None: release not pinned)."""
    ref = s.reference_rank
    said = VllmRankFacts(ref).cuda_graph_profiling if ref is not None else None
    if isinstance(said, bool):
        return said  # the log's own advisory says whether the estimate was applied in this run
    if ref is not None and VllmRankFacts(ref).util_equivalent_without_graph_profiling is not None:
        return True  # the advisory is printed only when the estimate is applied
    if s.setting("model_runner") == "V2" and era_of(s).last < (0, 28, 0):
        # Model Runner V2 of v0.26–v0.27 profiles no CUDA-graph estimate: its graphs are captured after the KV
        # cache, outside the budget (every V2 truth run on v0.26.0: K = budget − weights − activation − non-torch)
        return False
    return state(s).graphs_inside


def model_name(s: Startup) -> str | None:
    """The model id or path: as assumed, as the log names it, or from its launch settings."""
    model = s.assumptions.get("model") or s.model or s.setting("model")
    return model if isinstance(model, str) else None


def arch_context(s: Startup) -> tuple[Architecture | None, str]:
    """The model's architecture (a local config.json or the catalog: model/catalog.load_architecture, whose
    layer split also reads the catalog's layer_types summaries and Gemma's sliding_window_pattern)."""
    return load_architecture(model_name(s))


def kv_bytes(s: Startup, arch: Architecture | None) -> int:
    dtype = s.setting("kv_cache_dtype")
    weights = s.setting("dtype") or (arch.torch_dtype if arch else None) or "bfloat16"
    return dtype_bytes(str(dtype) if dtype else None, str(weights))


def gib(x: float) -> str:
    """A GiB figure as a person reads it: tiny KV caches (the CPU backend's 4 MiB) in MiB."""
    return f"{x:.2f} GiB" if abs(x) >= 0.1 or x == 0 else f"{x * 1024:.2f} MiB"


# --- finish ------------------------------------------------------------------------------------------


BLOCK_SIZE_GUESSES = (16, 32, 64, 128, 256, 512)  # block sizes tried when the log does not name one


def log_hybrid(s: Startup) -> str | None:
    """What in the log says the model is a hybrid (attention + Mamba / linear attention), in words, or None."""
    cap = s.capacity
    if VllmCapacityFacts(cap).padding_layers:
        return f"'Add {VllmCapacityFacts(cap).padding_layers} padding layers'"
    if VllmCapacityFacts(cap).hybrid_signal:
        return f"'{VllmCapacityFacts(cap).hybrid_signal}'"
    return None


_FLAG_EXTRAS = frozenset({"graph_capture_started", "repeated_across_cluster"})


def _drop_empty_ranks(s: Startup) -> None:
    """Ranks the log gave no figure (a worker that only announced graph capture, or the engine process of a
    Ray run whose workers print everything) are not shown. A pid-labelled one is still a worker: the count
    of workers and the TP/PP labels are kept for tp_size/pp_size, and the capture flag for the failure rules."""
    empty = [r for r in s.ranks if not r.has_figures() and set(VllmRankFacts(r).names()) <= _FLAG_EXTRAS]
    if not empty or len(empty) == len(s.ranks):
        return
    # The TP/PP labels of every rank seen, dropped ones included: a TP4 log whose TP1-3 only announced graph
    # capture is still TP4 (tp_size, pp_size).
    st = state(s)
    st.tp_labels = sorted({p for r in s.ranks for p in r.rank.split() if p.startswith("TP")})
    st.pp_labels = sorted({p for r in s.ranks for p in r.rank.split() if p.startswith("PP")})
    if any(r.rank.startswith("pid=") for r in s.ranks):
        kept = len(s.ranks) - len(empty)
        st.workers = kept + sum(r.rank.startswith("pid=") for r in empty)
    if any(VllmRankFacts(r).graph_capture_started for r in empty):
        st.graph_capture_started = True
    s.ranks = [r for r in s.ranks if r not in empty]


def _blocks_overflow_failed(s: Startup) -> bool:
    """A failed startup whose error prices its KV memory ("X GiB needed for max_model_len tokens, Y GiB available"):
    a block count (an override, say) holding far more tokens than Y GiB can is no capacity of this startup."""
    f, cap = s.failure, s.capacity
    if f is None or cap.num_gpu_blocks is None:
        return False
    need, avail, m = f.data.get("kv_needed_gib"), f.data.get("available_kv_gib"), f.data.get("max_model_len")
    avail = avail if avail is not None else cap.available_kv_gib
    if not need or avail is None or not m:
        return False
    holds = m * avail / need
    return cap.num_gpu_blocks * block_size(s) > 2 * holds + block_size(s)


def _total_from_oom(s: Startup) -> None:
    """A torch OOM names the device's total ("GPU 2 has a total capacity of 14.62 GiB"): the rank's total when no
    other line gives one (a worker's own OOM line fills its rank while parsing; this covers a bare one)."""
    f = s.failure
    device_total = f.data.get("device_total_gib") if f is not None else None
    if not isinstance(device_total, (int, float)) or any(r.total_gib is not None for r in s.ranks):
        return
    ref = s.reference_rank or s.rank("TP0")
    ref.set_derived("total_gib", device_total)
    VllmRankFacts(ref).total_from_oom = True


# functions only a serving step runs (the engine core's busy loop, the worker's execute_model); the startup's
# profile run and graph capture go through _dummy_run instead, and V0's profile_run is ruled out by name
SERVING_LOOP = ServingLoop(
    frames=("run_busy_loop", "_process_engine_step", "step_with_batch_queue", "execute_model", "sample_tokens",
            "run_engine_loop", "engine_step", "step_async"),
    steps=(("sample_tokens", "sampling"), ("execute_model", "a model step (execute_model)")),
    startup_frames=("profile_run", "_dummy_run", "_dummy_sampler_run", "capture_model", "determine_available_memory",
                    "determine_num_available_blocks", "compile_or_warm_up_model", "_initialize_kv_caches",
                    "initialize_from_config", "load_model"))


def _pool_sized(s: Startup) -> bool:
    c = s.capacity
    return c.kv_tokens is not None or c.num_gpu_blocks is not None or c.available_kv_gib is not None


def finish(s: Startup) -> None:
    """Fill era, derived figures, capacity, failure kind, reconciliation and ledger rows."""
    _drop_empty_ranks(s)
    _total_from_oom(s)
    texts = [e.text for e in s.evidence]
    inferred = eras.infer(texts, eras.parse_version(s.engine_version), dated_rows_seen(lines.TABLES, texts))
    era = inferred.eras[-1] if inferred.eras else eras.ERAS[-1]
    s.era = inferred.label()
    st = state(s)
    st.era = era.name
    inside = {e.graphs_in_budget for e in inferred.eras}
    st.graphs_inside = inside.pop() if len(inside) == 1 else None
    st.version_clues = list(inferred.clues or [])
    _settings(s, inferred.eras)
    for r in s.ranks:
        _derive_rank(s, r)
    _capacity(s)
    if _pool_sized(s):  # before the pool, V0's profile run goes through execute_model too
        serving_crash(s, SERVING_LOOP)
    arch, where = arch_context(s)
    _reconcile(s, era, arch, where)
    _refine_failure(s, era, arch)
    _pools(s, arch)
    for r in s.ranks:
        r.ledger = ledger_rows(s, r, era)


def _settings(s: Startup, candidates: list[Era]) -> None:
    if s.settings.get("tp_size") is None and s.settings.get("tensor_parallel_size") is not None:
        s.settings["tp_size"] = s.settings["tensor_parallel_size"]
    if s.model is None and isinstance(s.setting("model"), str):
        s.model = s.setting("model")
    _default_util(s, candidates)


def _default_util(s: Startup, candidates: list[Era]) -> None:
    """'non-default args' without gpu_memory_utilization means the release default was used.

    Recorded as an assumption (not a setting): the default is 0.90 up to v0.19 and 0.92 from v0.20,
    so it is filled only when every release the wording allows agrees.
    """
    if util(s) is not None or not any("non-default args:" in e.text for e in s.evidence):
        return
    defaults = {e.default_util for e in candidates}
    if len(defaults) == 1:
        s.assumptions["gpu_memory_utilization"] = defaults.pop()
        s.assumptions["gpu_memory_utilization_source"] = "vLLM default of this release (absent from non-default args)"


def _derive_rank(s: Startup, r: Rank) -> None:
    """Figures the log implies but does not print, each marked derived."""
    facts = VllmRankFacts(r)
    u = util(s)
    if r.total_gib is not None and u is not None:
        r.set_derived("usable_gib", round(r.total_gib * u, 2))
    peak = facts.peak_torch_gib
    if peak is not None and r.weights_gib is not None and facts.has(VllmRankFacts.initial_memory_usage_gib):
        # v0.6.4's torch peak is absolute: it includes the weights.
        r.set_derived("activation_peak_gib", round(peak - r.weights_gib, 2))
    model, kv = facts.hbm_used_after_model_gib, facts.hbm_used_after_kv_gib
    if model is not None and kv is not None and facts.available_kv_gib is None and kv > model:
        facts.available_kv_gib = round(kv - model, 2)  # TPU: what the KV-cache init added to used HBM
        facts.available_kv_from = f"HBM used after KV-cache init {kv} − after model init {model} GiB"
    eq = facts.util_equivalent_without_graph_profiling
    up = facts.util_suggested_with_graph_profiling
    total = total_gib(s, r)
    if u is None or total is None or facts.has(VllmRankFacts.cuda_graph_estimate_gib):
        return
    if eq is not None:
        facts.cuda_graph_estimate_gib = round(rules.graph_gib_from_advisory(u, eq, total), 2)
        facts.cuda_graph_estimate_from = f"({u} − {eq}) × {total:.2f} GiB (the CUDA-graph advisory)"
    elif up is not None and up < 1.0:  # the "from u to u + G/T" advisory (capped at 1.0: then G is unknown)
        facts.cuda_graph_estimate_gib = round(rules.graph_gib_from_advisory(up, u, total), 2)
        facts.cuda_graph_estimate_from = f"({up} − {u}) × {total:.2f} GiB (the CUDA-graph advisory)"


def _per_worker_capacity(s: Startup) -> None:
    """Each worker prints its own KV size and concurrency (V1 up to v0.8.x, Ray multi-node): when they differ, the
    engine runs every worker with the smallest, so that size is the startup's, with the concurrency printed after
    IT (a concurrency line pairs with the size line before it); every worker's values stay in the extras."""
    cap = s.capacity
    printed = cap.printed
    # a size line's device ("CPU", "GPU + host") follows it in the same event; a mix of devices is not
    # one figure per worker, so the last line keeps its word there
    devices = {printed[i + 1][1] if i + 1 < len(printed) and printed[i + 1][0] == "kv_device" else "GPU"
               for i, (k, _) in enumerate(printed) if k == "kv_tokens"}
    printed = [(k, v) for k, v in printed if k != "kv_device"]
    sizes = [v for k, v in printed if k == "kv_tokens"]
    if len(set(sizes)) < 2 or len(devices) > 1:
        return
    smallest: int | None = None
    paired: bool | None = None  # whether the last size line was the smallest so far (None: no size line yet)
    concurrency = None
    for key, value in printed:
        if key == "kv_tokens":
            paired = smallest is None or value <= smallest
            smallest = value if paired else smallest
        elif paired is not False:
            concurrency = value
    cap.kv_tokens = smallest
    if concurrency is not None:
        cap.max_concurrency = concurrency
    VllmCapacityFacts(cap).kv_tokens_per_worker = sizes
    VllmCapacityFacts(cap).max_concurrency_per_worker = [v for k, v in printed if k == "max_concurrency"]


def _capacity(s: Startup) -> None:
    cap = s.capacity
    _per_worker_capacity(s)
    per_rank = [g for r in s.ranks if (g := VllmRankFacts(r).available_kv_gib) is not None]
    if per_rank:
        cap.available_kv_gib = min(per_rank)  # the engine sizes every worker by the smallest
    fixed = finite_number(s.setting("kv_cache_memory_bytes"))
    if fixed is not None:
        VllmCapacityFacts(cap).kv_cache_memory_bytes = int(fixed)
        if cap.available_kv_gib is None or abs(cap.available_kv_gib - fixed / GIB) <= HALF_CENT:
            cap.available_kv_gib = fixed / GIB
            VllmCapacityFacts(cap).available_kv_exact = True
            for r in s.ranks:  # the log rounds 4 MiB to "0.0 GiB"; the setting is exact
                if VllmRankFacts(r).available_kv_gib is not None:
                    VllmRankFacts(r).available_kv_gib = fixed / GIB
    if cap.max_model_len is None and setting_int(s, "max_model_len"):
        cap.max_model_len = setting_int(s, "max_model_len")
    if cap.kv_tokens is None and cap.num_gpu_blocks is not None and not _blocks_overflow_failed(s):
        cap.kv_tokens = cap.num_gpu_blocks * block_size(s)
        VllmCapacityFacts(cap).kv_tokens_derived = f"num_gpu_blocks {cap.num_gpu_blocks:,} × block_size {block_size(s)}"
    est = VllmCapacityFacts(cap).estimated_max_model_len
    if s.failure is not None and est is not None:
        s.failure.data.setdefault("estimated_max_model_len", est)


# --- failures ------------------------------------------------------------------------------------------


def _capture_unfinished(s: Startup) -> bool:
    started = any(VllmRankFacts(r).graph_capture_started for r in s.ranks) or bool(
        state(s).graph_capture_started)
    done = any(VllmRankFacts(r).graph_capture_done for r in s.ranks) or VllmCapacityFacts(s.capacity).ready
    return started and not done


def _refine_failure(s: Startup, era: Era, arch: Architecture | None) -> None:
    """Name what killed the startup more precisely than the line that reported it."""
    f = s.failure
    if f is not None:
        if f.kind == "multi-instance-contention" and f.data.get("free_gib") is not None and tp_size(s) * pp_size(s) > 1:
            # a worker of a multi-GPU run holds its NCCL buffers before the check: judge the gap with them
            f.kind = rules.classify_shortfall(f.data["free_gib"], f.data.get("total_gib"),
                                              str(f.data.get("device") or "gpu").lower(), multi_gpu=True)
        if f.kind == "cuda-oom" and _capture_unfinished(s):
            f.data["phase"] = "CUDA graph capture"
            f.kind = "oom-cuda-graph"
        elif f.kind == "exception" and any(VllmRankFacts(r).died_in_capture for r in s.ranks):
            f.data.pop("engine_init", None)
            f.data.update(phase="CUDA graph capture", inferred=True)
            f.kind = "oom-cuda-graph"
        elif f.kind == "exception" and _capture_unfinished(s) and (headroom := _thin_headroom(s, era)) is not None:
            # an error while graphs were being captured, outside a budget that left less than graphs take
            f.data.pop("engine_init", None)
            f.data.update(phase="CUDA graph capture", inferred=True, headroom_gib=round(headroom, 2))
            f.kind = "oom-cuda-graph"
        elif f.kind == "exception" and (k := s.capacity.available_kv_gib) is not None and k <= 0:
            # the engine died after sizing a KV budget of nothing (a port that clamps the figure at 0 prints no
            # error of its own): vLLM's "no available memory for the cache blocks"
            f.data.pop("engine_init", None)
            f.data.update(inferred=True, available_kv_gib=k)
            f.kind = "not-enough-memory"
        elif f.kind == "exception" and f.data.pop("engine_init", False):
            f.kind = "engine-init-failed"
            _explain_init_failure(s, arch)
        return
    _infer_v0_max_len(s, era)
    if s.failure is None:
        _infer_graph_oom(s, era)


def _infer_v0_max_len(s: Startup, era: Era) -> None:
    """V0 refuses to start when blocks × block_size < max_model_len (raise_if_cache_size_invalid)."""
    cap = s.capacity
    if era.engine != "V0" or cap.num_gpu_blocks is None or not cap.max_model_len:
        return
    tokens = cap.num_gpu_blocks * block_size(s)
    if tokens >= cap.max_model_len:
        return
    s.failure = Failure("max-len-too-large", (
        f"The model's max seq len ({cap.max_model_len}) is larger than the maximum number of tokens that can be stored "
        f"in KV cache ({tokens}) — inferred: V0 raises this whenever # GPU blocks × block_size < max_model_len"),
        data={"inferred": True, "max_model_len": cap.max_model_len, "kv_tokens": tokens})


def _thin_headroom(s: Startup, era: Era) -> float | None:
    """(1 − util) × total when graphs are captured outside the budget and that is less than they take, else None."""
    u, total = util(s), total_gib(s, s.reference_rank)
    if era.graphs_in_budget or u is None or total is None:
        return None
    headroom = (1 - u) * total
    return headroom if headroom < THIN_HEADROOM_GIB else None


def _infer_graph_oom(s: Startup, era: Era) -> None:
    """The log ends inside CUDA-graph capture with less headroom than graphs take: the likely end."""
    if not _capture_unfinished(s):
        return
    headroom = _thin_headroom(s, era)
    if headroom is None:
        return
    u, total = util(s), total_gib(s, s.reference_rank)
    s.failure = Failure("oom-cuda-graph", (
        f"inferred: the log ends during CUDA graph capture, and graphs are captured outside the budget, in the "
        f"(1 − {u}) × {total:.2f} = {headroom:.2f} GiB headroom — less than the 1–3 GiB vLLM says graphs take"),
        data={"inferred": True, "headroom_gib": round(headroom, 2), "phase": "CUDA graph capture"})


def _explain_init_failure(s: Startup, arch: Architecture | None) -> None:
    """'EngineCore failed to start' after a tiny K: check whether one request of max_model_len fits."""
    f, cap = s.failure, s.capacity
    if f is None or arch is None or cap.available_kv_gib is None:
        return
    m = cap.max_model_len or setting_int(s, "max_model_len") or arch.max_position_embeddings
    need = request_kv_gib(s, arch, m) if m else None
    if not m or need is None or need <= cap.available_kv_gib:  # (no m is no need: said for the type checker)
        return
    f.kind = "max-len-too-large"
    f.data.update(inferred=True, max_model_len=m, kv_needed_gib=round(need, 2), available_kv_gib=cap.available_kv_gib,
                  max_model_len_fits=max_len_fitting(s, arch, cap.available_kv_gib, m),
                  max_model_len_source="logged" if cap.max_model_len or s.setting("max_model_len") else
                  "model default (max_position_embeddings)")


def request_kv_gib(s: Startup, arch: Architecture, max_model_len: int) -> float | None:
    """KV one request of max_model_len tokens needs on one worker (the V1 admission check)."""
    plan = kv_plan(s, arch)
    need = plan.request_bytes(block_size(s), max_model_len, _batched(s)) if plan is not None else None
    return need / GIB if need is not None else None


def max_len_fitting(s: Startup, arch: Architecture, kv_gib: float, upper: int) -> int | None:
    """vLLM's estimate_max_model_len: the longest request whose KV fits in K (binary search)."""
    bs = block_size(s)
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        need = request_kv_gib(s, arch, mid)
        if need is None:
            return None
        if need <= kv_gib:
            low = mid
        else:
            high = mid - 1
    return low // bs * bs if low >= bs else low


def _batched(s: Startup) -> int:
    return setting_int(s, "max_num_batched_tokens") or 8192


# --- reconciliation ------------------------------------------------------------------------------------


def kv_plan(s: Startup, arch: Architecture, extra_layers: int = 0, num_spec: int = 0,
            prefix_caching: bool | None = None) -> KvLayout | None:
    """This startup's layout (layout.kv_layout under its settings); draft layers/tokens and prefix caching
    as options to try, since a hybrid model's block size and per-request blocks depend on them (None: as
    logged)."""
    hybrid_off = any(w.get("code") == "hybrid-kv-manager-disabled" for w in s.warnings) or bool(
        s.setting("kv_transfer_config")) or bool(s.setting("disable_hybrid_kv_cache_manager"))
    if prefix_caching is None:
        prefix_caching = s.setting("enable_prefix_caching") is True
    dtypes = StateDtypes(_str_setting(s, "dtype"), _str_setting(s, "mamba_cache_dtype"),
                         _str_setting(s, "mamba_ssm_cache_dtype"))
    return kv_layout(arch, kv_bytes(s, arch), tp_size(s), pp_size(s), block_size=block_size(s),
                     hybrid_manager=not hybrid_off, prefix_caching=prefix_caching, dtypes=dtypes,
                     draft_layers=extra_layers, num_spec=num_spec,
                     context=s.capacity.max_model_len or setting_int(s, "max_model_len") or 0)


def _str_setting(s: Startup, key: str) -> str | None:
    value = s.setting(key)
    return str(value) if isinstance(value, str) and value else None


def _draft_layer_options(s: Startup, arch: Architecture) -> list[tuple[int, str]]:
    """Extra KV layers a speculative-decoding head may add (rules.draft_kv_layers); every candidate
    when the log does not name the method."""
    method = rules.spec_method(s.setting("speculative_config"))
    options = [(0, "target layers only")]
    if not method:
        options.append((rules.EAGLE_HEAD_LAYERS, "target + 1 draft (EAGLE-style) layer"))
        if arch.nextn_layers:
            options.append((arch.nextn_layers, f"target + {arch.nextn_layers} MTP layer(s)"))
        return options
    extra = rules.draft_kv_layers(method, arch.nextn_layers)
    if not extra:
        return options
    label = f"target + {extra} MTP layer(s)" if rules.is_mtp(method) else "target + 1 draft (EAGLE-style) layer"
    return [(extra, label)]


def _predict(s: Startup, era: Era, plan: KvLayout, kv_gib: float, exact: bool) -> tuple[rules.Capacity, rules.Capacity]:
    """(low, high) capacity a printed K can give under this layout."""
    bs, m = block_size(s), s.capacity.max_model_len or 0
    half = 0.0 if exact else HALF_CENT
    return (plan.capacity(kv_gib - half, bs, m, _batched(s), era.capacity_rule),
            plan.capacity(kv_gib + half, bs, m, _batched(s), era.capacity_rule))


def _reconcile(s: Startup, era: Era, arch: Architecture | None, where: str) -> None:
    checks: list[str] = []
    verdicts: list[bool] = []
    _printed_consistency(s, era, arch, checks, verdicts)
    _budget_checks(s, era, checks, verdicts)
    rec = _architecture_check(s, era, arch, where, checks, verdicts) if arch is not None else None
    if rec is None:
        rec = _implied(s, checks)
    if rec is None:
        return
    rec.consistent = all(verdicts) if verdicts else None
    rec.detail = "; ".join(checks)
    s.reconciliation = rec


def _printed_consistency(s: Startup, era: Era, arch: Architecture | None, checks: list[str],
                         verdicts: list[bool]) -> None:
    """Numbers the log prints that must agree with each other whatever the model."""
    cap, bs = s.capacity, block_size(s)
    m, conc = cap.max_model_len, cap.max_concurrency
    # v0.9.1–0.20 print tokens = B // groups × bs for hybrid models, which is not concurrency × M.
    hybrid_v1 = arch is not None and arch.full_attention_layers is not None and era.capacity_rule == "v1"
    if m and conc is not None and (cap.kv_tokens or cap.num_gpu_blocks) and not hybrid_v1:
        tokens = cap.kv_tokens or 0
        blocks = cap.num_gpu_blocks if cap.num_gpu_blocks is not None else tokens // bs
        exact = tokens / m if era.capacity_rule != "v1" or cap.num_gpu_blocks else blocks / rules.cdiv(m, bs)
        ok = rules.printed_concurrency_matches(exact, conc) or rules.printed_concurrency_matches(tokens / m, conc)
        signal = log_hybrid(s) if arch is None and not ok else None
        if signal:
            # v0.9.1–0.20 print a hybrid's tokens per KV group (B // groups × bs), not concurrency × M; from
            # v0.22 tokens = int(concurrency × M) always agree. So a mismatch here is the old rule, not an error.
            checks.append(f"concurrency: {tokens:,} tokens / {m:,} = {tokens / m:.4f}, log prints {conc}x → differs, "
                          f"as a hybrid model's does before v0.22 (the log shows {signal}; give --model to check it)")
        else:
            verdicts.append(ok)
            checks.append(f"concurrency: {tokens:,} tokens / {m:,} = {tokens / m:.4f}, log prints {conc}x → "
                          f"{'matches' if ok else 'DOES NOT match'}")
    f = s.failure
    if f is not None and f.kind == "max-len-too-large" and f.data.get("kv_needed_gib") and f.data.get("max_model_len"):
        lo, hi = rules.implied_bytes_per_token(f.data["kv_needed_gib"], f.data["max_model_len"])
        checks.append(f"'{f.data['kv_needed_gib']} GiB needed for {f.data['max_model_len']:,} tokens' → "
                      f"{lo:,.0f}–{hi:,.0f} B per token per worker")
        est, avail = f.data.get("estimated_max_model_len"), f.data.get("available_kv_gib")
        if est and avail:
            # The estimate is whole blocks: with the block size not in the log (TPU and other platforms use
            # larger ones than CUDA's 16), any block size that explains the printed figure is accepted.
            sizes = [bs] if setting_int(s, "block_size") else [bs, *(b for b in BLOCK_SIZE_GUESSES if b != bs)]
            fits = [(b, rules.max_len_that_fits(avail - HALF_CENT, int(hi * b) + 1, b),
                     rules.max_len_that_fits(avail + HALF_CENT, int(lo * b), b)) for b in sizes]
            size, low, high = next(((b, lo_, hi_) for b, lo_, hi_ in fits if lo_ <= est <= hi_), fits[0])
            ok = low <= est <= high
            how = f" with block_size {size} (not in the log)" if ok and size != bs else ""
            if not ok and VllmCapacityFacts(cap).hybrid_signal:
                # a hybrid (Mamba) model's state is per request, not per token: the estimate is not linear
                checks.append(f"estimated max length: {avail} GiB / that ≈ {low:,}–{high:,} tokens, log prints {est:,} "
                              "(hybrid model: per-request state, not checked)")
            else:
                verdicts.append(ok)
                checks.append(f"estimated max length: {avail} GiB / that ≈ {low:,}–{high:,} tokens{how}, log prints "
                              f"{est:,} → {'inside' if ok else 'OUTSIDE'}")
    if f is not None and f.kind == "max-len-too-large" and f.data.get("kv_tokens") and cap.num_gpu_blocks:
        ok = f.data["kv_tokens"] == cap.num_gpu_blocks * bs
        verdicts.append(ok)
        checks.append(f"{cap.num_gpu_blocks:,} blocks × {bs} = {cap.num_gpu_blocks * bs:,} tokens, the error says "
                      f"{f.data['kv_tokens']:,} → {'matches' if ok else 'DOES NOT match'}")


def _budget_checks(s: Startup, era: Era, checks: list[str], verdicts: list[bool]) -> None:
    """Replay the budget subtraction on the reference rank when the log printed its terms."""
    r = s.reference_rank
    if r is None:
        return
    k = VllmRankFacts(r).available_kv_gib
    budget = r.usable_gib
    if k is None or budget is None:
        return
    terms, names = budget_terms(r, graphs_inside(s))
    if not terms:
        return
    rest = budget - sum(terms)
    tol = HALF_CENT * (len(terms) + 2) + 1e-9
    ok = abs(rest - k) <= tol
    verdicts.append(ok)
    shown = " − ".join(f"{t:.2f}" for t in terms)
    checks.append(f"budget: {budget:.2f} − {shown} ({' + '.join(names)}) = {rest:.2f} GiB, log prints K = {k:.2f} → "
                  f"{'matches' if ok else 'DOES NOT match'}")
    fit = VllmRankFacts(r).kv_cache_memory_fit_bytes
    non_kv = sum(t for t, n in zip(terms, names, strict=True) if n != "CUDA graphs")
    graphs = r.cuda_graph_gib
    if fit and graphs is not None:
        want = rules.suggested_kv_cache_bytes(budget, non_kv, graphs)
        ok = abs(want - fit) / GIB <= tol + HALF_CENT
        verdicts.append(ok)
        checks.append(f"--kv-cache-memory suggestion: {budget:.2f} − {non_kv:.2f} − graphs {graphs:.2f} − 150 MiB = "
                      f"{want / GIB:.2f} GiB, log prints {fit:,} B ({fit / GIB:.2f} GiB) → {'matches' if ok else 'DOES NOT match'}")


def budget_terms(r: Rank, inside: bool | None = None) -> tuple[list[float], list[str]]:
    """Non-KV terms the log printed for this rank, in the order vLLM subtracts them. ``inside``: whether the
    release's CUDA-graph estimate was subtracted (then the estimate is the term, not the graphs' actual size;
    False: no graph term; None: the actual size where the --kv-cache-memory suggestion line gives it)."""
    x = VllmRankFacts(r)
    if x.peak_torch_gib is not None and r.non_torch_gib is not None:  # v0.6.4: absolute peak
        return [x.peak_torch_gib, r.non_torch_gib], ["torch peak (incl. weights)", "non-torch"]
    if x.consumed_gib is not None and r.activation_peak_gib is not None:  # v0.28+
        return [x.consumed_gib, r.activation_peak_gib], ["consumed", "peak activation (incl. graph estimate)"]
    if None in (r.weights_gib, r.activation_peak_gib, r.non_torch_gib) or "activation_peak_gib" in r.derived:
        return [], []
    terms = [r.weights_gib, r.activation_peak_gib, r.non_torch_gib]
    names = ["weights", "activation", "non-torch"]
    if inside is True and x.cuda_graph_estimate_gib is not None:
        terms.append(x.cuda_graph_estimate_gib)
        names.append("CUDA graphs")
    elif inside is not False and x.kv_cache_memory_fit_bytes is not None and r.cuda_graph_gib is not None:
        terms.append(r.cuda_graph_gib)
        names.append("CUDA graphs")
    return [t for t in terms if t is not None], names


def _architecture_check(s: Startup, era: Era, arch: Architecture, where: str, checks: list[str],
                        verdicts: list[bool]) -> Reconciliation | None:
    cap = s.capacity
    plan = kv_plan(s, arch)
    if plan is None:
        return None
    bs = block_size(s)
    layers = f"{plan.full_layers} full-attention layers (+ {plan.sliding_layers} window layers)" if plan.hybrid \
        else f"{plan.layers} layers"
    rec = Reconciliation(bytes_per_token=plan.bytes_per_token,
                         method=f"architecture from {where}: {plan.formula} per layer × {layers}, "
                                f"block_size {bs}, era {era.name}")
    rec.architecture = arch.as_dict()
    if plan.linear and plan.mamba is None:
        checks.append("hybrid linear-attention model whose recurrent state kvscope cannot size (state fields missing "
                      "from the config, pipeline parallelism, or the hybrid KV cache manager off), so capacity is "
                      "read, not predicted")
        implied = _implied(s, [])
        rec.bytes_per_token = implied.bytes_per_token if implied is not None else 0
        rec.method += "; bytes per token implied by the log" if implied is not None else ""
        return rec
    if plan.mamba is not None:
        rec.method = (f"architecture from {where}: {plan.formula}; {_mamba_words(plan.mamba, plan.context)}, "
                      f"era {era.name}")
    k = cap.available_kv_gib
    if k is None:
        _derive_kv_from_blocks(s, plan, checks)
        return rec
    logged = cap.kv_tokens if cap.kv_tokens is not None and not VllmCapacityFacts(cap).has(VllmCapacityFacts.kv_tokens_derived) else None
    blocks_logged = cap.num_gpu_blocks
    if logged is None and blocks_logged is None:
        if (plan.hybrid or plan.mamba is not None) and not cap.max_model_len:
            return rec
        lo, hi = _predict(s, era, plan, k, bool(VllmCapacityFacts(cap).available_kv_exact))
        rec.kv_tokens_low, rec.kv_tokens_high = lo.tokens, hi.tokens
        checks.append(f"K = {gib(k)} → {lo.tokens:,}–{hi.tokens:,} tokens (not printed in the log)")
        return rec
    if plan.mamba is not None and not cap.max_model_len:
        return rec
    matched = None
    for extra, n_spec, prefix, label in _layout_options(s, arch):
        option = kv_plan(s, arch, extra, n_spec, prefix)
        if option is None:
            continue
        lo, hi = _predict(s, era, option, k, bool(VllmCapacityFacts(cap).available_kv_exact))
        inside = (logged is None or lo.tokens <= logged <= hi.tokens) and (
            blocks_logged is None or lo.blocks <= blocks_logged <= hi.blocks)
        if matched is None or inside:
            matched = (extra, n_spec, prefix, label, option, lo, hi, inside)
        if inside:
            break
    assert matched is not None
    extra, n_spec, prefix, label, option, lo, hi, inside = matched
    rec.bytes_per_token = option.bytes_per_token
    rec.kv_tokens_low, rec.kv_tokens_high = lo.tokens, hi.tokens
    verdicts.append(inside)
    what = f"{logged:,} tokens" if logged is not None else f"{blocks_logged:,} blocks"
    span = f"{lo.blocks:,}–{hi.blocks:,} blocks = {lo.tokens:,}–{hi.tokens:,} tokens"
    checks.append(f"K = {gib(k)} ÷ {option.block_bytes(bs):,} B per block ({label}) → {span}; log prints {what} → "
                  f"{'inside' if inside else 'OUTSIDE'}")
    if option.mamba is not None:
        rec.method = f"architecture from {where}: {option.formula}; {_mamba_words(option.mamba, option.context)}, " \
                     f"era {era.name}"
        _mamba_checks(s, option, lo, hi, label, checks)
        if inside:
            _keep_mamba_layout(s, era, option.mamba, n_spec, prefix, lo.blocks, hi.blocks)
    if extra and inside:
        VllmCapacityFacts(cap).draft_kv_layers = extra
        rec.method = rec.method.replace(f"× {plan.layers} layers", f"× {option.layers} layers ({label})")
        rec.method += "; the printed count matches only with the draft layer included"
    return rec


MAX_SPEC_GUESS = 5  # draft tokens tried when a hybrid model's speculative config is not in the log


def _layout_options(s: Startup, arch: Architecture) -> list[tuple[int, int, bool | None, str]]:
    """(extra draft layers, draft tokens, prefix caching, label) to try, the likeliest first.

    Only a Mamba hybrid's layout depends on the draft-token count (wider conv state, spare state
    blocks) and on prefix caching (mamba_cache_mode); a log that does not print them gets each tried.
    """
    base = _draft_layer_options(s, arch)
    if not (arch.linear_layers and arch.linear_state is not None):
        return [(extra, 0, None, label) for extra, label in base]
    logged = s.setting("enable_prefix_caching")
    prefixes: list[bool] = [logged] if isinstance(logged, bool) else [False, True]
    spec = s.setting("speculative_config")
    given = spec.get("num_speculative_tokens") or spec.get("num_spec_tokens") if isinstance(spec, dict) else None
    n_given = int(given) if given is not None and str(given or "").isdigit() else 0
    out: list[tuple[int, int, bool | None, str]] = []
    seen: set[int] = set()
    for extra, label in sorted(base, key=lambda o: (o[0] != 0, "MTP" not in o[1])):
        if extra in seen:
            continue  # an EAGLE head and a one-layer MTP module add the same full-attention layer
        seen.add(extra)
        for n in ([0] if not extra else [n_given] if n_given else range(1, MAX_SPEC_GUESS + 1)):
            for prefix in prefixes:
                words = label + (f", {n} draft token(s)" if n else "")
                words += "" if len(prefixes) == 1 else f", prefix caching {'on' if prefix else 'off'} (not in the log)"
                out.append((extra, n, prefix, words))
    return out


def _keep_mamba_layout(s: Startup, era: Era, layout: rules.MambaLayout, n_spec: int, prefix: bool | None,
                       low: int, high: int) -> None:
    """Record the layout that reproduced the log (whatif re-sizes from it): mode, draft tokens, blocks."""
    cap = s.capacity
    m = cap.max_model_len or 0
    blocks = next((b for b in range(low, high + 1) if cap.kv_tokens is not None and m
                   and rules.mamba_capacity_of_blocks(b, layout, m, era.capacity_rule).tokens == cap.kv_tokens), None)
    VllmCapacityFacts(cap).hybrid_layout = {"mamba_cache_mode": layout.mode, "block_size": layout.block_size,
                                   "page_bytes": layout.page_bytes, "group_size": layout.group_size,
                                   "draft_tokens": n_spec, "prefix_caching": bool(prefix) if prefix is not None
                                   else layout.mode != "none", "num_gpu_blocks": cap.num_gpu_blocks or blocks}


def _mamba_words(layout: rules.MambaLayout, context: int) -> str:
    """How vLLM lays out a Mamba hybrid, in one phrase."""
    pad = layout.page_bytes / layout.mamba_state_bytes - 1
    padded = f", state padded {pad:.2%}" if layout.page_bytes != layout.mamba_state_bytes else ""
    per_request = f"; a {context:,}-token request needs {layout.blocks_per_request(context):,} blocks" if context else ""
    return (f"attention block enlarged to {layout.block_size:,} tokens so one page ({layout.page_bytes:,} B) holds a "
            f"Mamba state{padded}; {layout.attn_groups} attention + {layout.mamba_groups} Mamba groups of "
            f"{layout.group_size} layers (mamba_cache_mode '{layout.mode}'){per_request}")


def _mamba_checks(s: Startup, plan: KvLayout, lo: rules.Capacity, hi: rules.Capacity, label: str,
                  checks: list[str]) -> None:
    """The printed concurrency against blocks / blocks per request (get_max_concurrency_for_kv_cache_config)."""
    layout, m, conc = plan.mamba, s.capacity.max_model_len, s.capacity.max_concurrency
    if layout is None or not m or conc is None:
        return
    per = layout.blocks_per_request(m)
    ok = lo.concurrency - HALF_CENT - 1e-9 <= conc <= hi.concurrency + HALF_CENT + 1e-9
    checks.append(f"concurrency: {lo.blocks:,}–{hi.blocks:,} blocks / {per:,} blocks per request = "
                  f"{lo.concurrency:.4f}–{hi.concurrency:.4f}, log prints {conc}x → "
                  f"{'matches' if ok else 'DOES NOT match'} ({label})")


def _derive_kv_from_blocks(s: Startup, plan: KvLayout, checks: list[str]) -> None:
    """No 'Available KV cache memory' line (V0, V1 ≤ 0.9.0): K ≈ blocks × bytes per block."""
    cap, bs = s.capacity, block_size(s)
    blocks = cap.num_gpu_blocks if cap.num_gpu_blocks is not None else (cap.kv_tokens // bs if cap.kv_tokens else None)
    if not blocks or plan.sliding_layers or plan.linear:
        # hybrid (Mamba / linear-attention) pools: the logged tokens are not blocks × 16 (the block is
        # enlarged to hold a state, and ≥0.22 logs concurrency × max_model_len), so no K follows from them
        return
    gib = blocks * plan.block_bytes(bs) / GIB
    VllmCapacityFacts(cap).available_kv_gib_derived = round(gib, 2)
    checks.append(f"K not printed; {blocks:,} blocks × {plan.block_bytes(bs):,} B = {gib:.2f} GiB (derived)")


def _implied(s: Startup, checks: list[str]) -> Reconciliation | None:
    """Architecture unknown: the bytes per token the printed K and token count imply."""
    cap, bs = s.capacity, block_size(s)
    k = cap.available_kv_gib
    tokens = cap.kv_tokens
    f = s.failure
    if k and tokens and not VllmCapacityFacts(cap).has(VllmCapacityFacts.kv_tokens_derived):
        blocks = tokens // bs
        lo, hi = rules.implied_block_bytes(k, blocks, 0.0 if VllmCapacityFacts(cap).available_kv_exact else HALF_CENT)
        mid = round((lo + hi) / 2 / bs)
        checks.insert(0, f"{gib(k)} for {tokens:,} tokens → {lo / bs:,.0f}–{hi / bs:,.0f} B per token per worker "
                         "(architecture unknown: give --model to check it)")
        return Reconciliation(bytes_per_token=mid, method="bytes per token implied by the log (architecture unknown)")
    if k and cap.num_gpu_blocks:
        lo, hi = rules.implied_block_bytes(k, cap.num_gpu_blocks)
        checks.insert(0, f"{k} GiB for {cap.num_gpu_blocks:,} blocks → {lo / bs:,.0f}–{hi / bs:,.0f} B per token")
        return Reconciliation(bytes_per_token=round((lo + hi) / 2 / bs),
                              method="bytes per token implied by the log (architecture unknown)")
    if f is not None and f.data.get("kv_needed_gib") and f.data.get("max_model_len"):
        lo, hi = rules.implied_bytes_per_token(f.data["kv_needed_gib"], f.data["max_model_len"])
        return Reconciliation(bytes_per_token=round((lo + hi) / 2),
                              method="bytes per token implied by the error message (architecture unknown)")
    if checks:
        return Reconciliation(bytes_per_token=0, method="printed figures checked against each other (no KV size known)")
    return None


# --- pools and ledger ----------------------------------------------------------------------------------


def _pools(s: Startup, arch: Architecture | None) -> None:
    """One KV pool per worker that printed its KV memory (vLLM has one pool; drafts share it)."""
    cap = s.capacity
    dtype = s.setting("kv_cache_dtype")
    if dtype in (None, "auto"):
        dtype = s.setting("dtype") or (arch.torch_dtype if arch else None)
    for r in s.ranks:
        gib = VllmRankFacts(r).available_kv_gib
        if gib is None or r.pool("target") is not None:
            continue
        r.kv_pools.append(KvPool(name="target", tokens=cap.kv_tokens, gib=gib, dtype=str(dtype) if dtype else None))
    ref = s.reference_rank
    derived = VllmCapacityFacts(cap).available_kv_gib_derived
    if ref is not None and derived is not None and ref.pool("target") is None:
        ref.kv_pools.append(KvPool(name="target", tokens=cap.kv_tokens, gib=derived, dtype=str(dtype) if dtype else None))


def ledger_rows(s: Startup, r: Rank, era: Era) -> list[LedgerRow]:  # noqa: C901 - one row per ledger item
    """The rank's memory ledger: device total, the budget, what the budget paid for, what lies outside."""
    ledger = LedgerRows(r)
    add = ledger.add

    total = r.total_gib
    if total is None and finite_number(s.assumptions.get("gpu_total_gib")):
        total = finite_number(s.assumptions["gpu_total_gib"])
        add("device total", total, how=How.ASSUMED)
    else:
        add("device total", total, "total_gib")
    u = util(s)
    budget = r.usable_gib
    if budget is None and total is not None and u is not None:
        budget = total * u
        add(f"budget = total × gpu_memory_utilization {u}", budget, how=How.DERIVED,
            note="from the assumed device total" if r.total_gib is None else "")
    else:
        add(f"budget = total × gpu_memory_utilization {u if u is not None else '?'}", budget, "usable_gib",
            "a fraction of the device total, never of free memory")
    x = VllmRankFacts(r)
    inside = graphs_inside(s)
    estimate = x.cuda_graph_estimate_gib
    if x.peak_torch_gib is not None:
        add("torch peak during profiling (absolute, includes weights)", x.peak_torch_gib)
        add("  of which model weights", r.weights_gib, "weights_gib")
        add("  of which activation peak", r.activation_peak_gib, "activation_peak_gib")
        add("non-torch memory", r.non_torch_gib, "non_torch_gib",
            "counts every process on the GPU in this release" if era.others_charged else "")
    elif x.consumed_gib is not None:
        add("consumed during load + profile (weights + non-torch)", x.consumed_gib)
        add("  of which model weights", r.weights_gib, "weights_gib")
        add("peak activation + CUDA-graph estimate", r.activation_peak_gib, "activation_peak_gib")
        add("  of which CUDA-graph estimate", estimate, how=How.DERIVED if x.has(VllmRankFacts.cuda_graph_estimate_from) else How.READ)
    else:
        add("model weights", r.weights_gib, "weights_gib")
        add("activation peak (profile run)", r.activation_peak_gib, "activation_peak_gib")
        add("non-torch memory (context growth, NCCL, cuBLAS)", r.non_torch_gib, "non_torch_gib")
        where = {True: "inside the budget", False: "not subtracted", None: "subtracted from v0.20 on"}[inside]
        add(f"CUDA graphs (estimate) — {where}", estimate, how=How.DERIVED if x.has(VllmRankFacts.cuda_graph_estimate_from) else How.READ)
    kv = x.available_kv_gib
    add("KV cache", kv, note="as logged")
    terms, names = budget_terms(r, inside)
    if budget is not None and kv is None and terms and x.has(VllmRankFacts.kv_cache_memory_fit_bytes):
        non_kv = sum(t for t, n in zip(terms, names, strict=True) if n != "CUDA graphs")
        add("left for KV" + (" and the CUDA-graph estimate" if inside is not False else ""), budget - non_kv,
            how=How.DERIVED, note="budget − the terms above (this log line does not print K)")
    if budget is not None and kv is not None and not terms and r.weights_gib is None:
        add("everything else in the budget (weights, activation, non-torch)", budget - kv, how=How.DERIVED,
            note="budget − KV; this log does not print the parts")
    if budget is not None and kv is not None and not terms and r.weights_gib is not None:
        graphs_in = estimate if (estimate is not None and inside) else 0.0
        add("activation peak + non-torch (not printed separately)", budget - r.weights_gib - kv - graphs_in,
            how=How.DERIVED, note="budget − weights − KV" + (" − graph estimate" if graphs_in else ""))
    if total is not None and u is not None:
        add(f"outside the budget: (1 − {u}) × total", (1 - u) * total, how=How.DERIVED,
            note="CUDA context, " + ("" if inside else "CUDA graphs, ") + "sampler warm-up, other processes")
    if r.cuda_graph_gib is not None:
        where = {True: "inside the budget (as estimated)", False: "taken from the memory outside the budget",
                 None: "outside the budget before v0.20, estimated inside from v0.20"}[inside]
        add("CUDA graphs captured", r.cuda_graph_gib, "cuda_graph_gib", where)
    return ledger.rows
