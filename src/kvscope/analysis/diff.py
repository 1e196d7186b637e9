"""``kvscope diff``: why the KV capacity of one startup differs from another's, term by term.

The difference in KV tokens is split into a waterfall whose terms sum to it exactly:

* memory terms, where the engine's rule builds the KV memory from a basis × a fraction less deductions
  (engines' ``kv_budget``): the basis (free memory before weights, or the device total), the fraction, the
  weights, the activation peak, non-torch memory, CUDA graphs, the draft; each term's GiB becomes tokens at
  A's bytes per token;
* what the logs do not itemize: the change of KV memory the itemized terms leave unexplained, named, never
  hidden;
* bytes per token: the same memory at B's cost per token (a KV dtype, a TP split, a layout change);
* rounding and caps: what is left between that and the tokens B logged (page/block rounding, a cap).

An engine that sizes its cache in tokens (llama.cpp's ``-c``) has no memory rule: its one token term is the
cache size setting, and its memory terms say what the cells and the per-cell bytes did to the KV memory.

Beside the waterfall: the settings, the release and the GPU that changed, the release rules that differ
(engines' ``release_rules``: eras as data), and, where every difference is a setting ``whatif`` models,
what whatif calibrated on A predicts for B against what B logged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kvscope import engines
from kvscope.analysis.curve import bytes_per_token
from kvscope.core.budget import KvBudget, RuleFact, TermKind
from kvscope.core.startup import Startup, finite_number

GIB = 1 << 30
SAME_DEVICE_GIB = 0.5  # device totals closer than this are one kind of GPU (two logs' rounding)
SCHEMA = "kvscope.diff/1"

# which settings can move which term (substrings of the engines' setting names): the cause a term names
CAUSES: dict[TermKind, tuple[str, ...]] = {
    TermKind.FRACTION: ("mem_fraction_static", "gpu_memory_utilization", "free_gpu_mem_fraction"),
    TermKind.WEIGHTS: ("model", "quantization", "tp_size", "tensor_parallel", "pipeline_parallel", "pp_size", "dtype",
                       "ep_size", "enable_dp_attention", "dp_size"),
    TermKind.DRAFT: ("speculative", "draft"),
    TermKind.ACTIVATION: ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill", "max_model_len",
                          "max_prefill_tokens", "limit_mm", "compile_cache"),
    TermKind.NON_TORCH: ("disable_custom_all_reduce",),
    TermKind.GRAPHS: ("enforce_eager", "cuda_graph", "disable_cuda_graph", "compilation"),
    TermKind.BYTES_PER_TOKEN: ("kv_cache_dtype", "KV cache dtype", "type_k", "type_v", "cache_type", "tp_size", "tensor_parallel",
                               "model", "enable_dp_attention"),
    TermKind.ROUNDING: ("page_size", "block_size", "max_total_tokens", "context_length", "max_running_requests",
                        "num_gpu_blocks_override", "max_tokens_in_paged_kv_cache"),
    TermKind.CELLS: ("n_ctx", "ctx_size", "n_seq_max", "n_slots", "n_parallel", "kv_size", "max_tokens_in_paged"),
}
CAPACITY_SETTINGS = ("max_model_len", "context_len", "max_running_requests")
BYTES_ROUNDING = 0.005  # two bytes-per-token figures from logged GiB ÷ tokens closer than this are one figure
IGNORED_SETTINGS = ("port", "host", "random_seed", "seed", "served_model_name", "log_level", "api_key")
# Settings whose absence means "off": a drafter added to one startup is a change although the other never logged
# the setting. Their values may be objects (vLLM's speculative_config), compared as canonical JSON.
OFF_WHEN_ABSENT = ("speculative_config",)
# What a log shows of the run's conditions rather than its launch (vLLM's torch.compile cache, cold or warm): a
# difference is named as a cause, but whatif is still asked for the settings that changed beside it
CONDITIONS = ("compile_cache",)
OFF_WORDS = ("none", "off", "false", "null")
OFF = "none"


@dataclass(frozen=True)
class Side:
    """One startup as the diff reads it."""

    index: int  # 1-based, in its own input
    file: str
    first_line: int
    engine: str
    version: str
    era: str
    model: str
    kv_tokens: int | None
    kv_tokens_how: str  # "logged", or how it was worked out
    bytes_per_token: int | None
    bytes_per_token_exact: bool  # from the engine's rule (reconciled), not a logged pool ÷ its tokens
    kv_gib: float | None  # the KV memory the engine's rule gave (the pools, or vLLM's available KV memory)
    device_total_gib: float | None
    failed: str | None  # the failure kind, when the startup failed
    budget: KvBudget | None


@dataclass(frozen=True)
class Term:
    kind: TermKind
    label: str
    gib: float | None  # memory moved into (+) or out of (−) the KV cache; None where it is a per-token term
    tokens: int
    cause: str


@dataclass(frozen=True)
class Change:
    what: str
    a: str
    b: str


@dataclass(frozen=True)
class RuleChange:
    rule: str
    a: str
    b: str


@dataclass(frozen=True)
class Predicted:
    flags: str
    low: int
    high: int
    observed: int

    @property
    def within(self) -> bool:
        return self.low <= self.observed <= self.high

    @property
    def error(self) -> float:
        """Relative error of the interval's nearest end (0 when the observed value lies inside)."""
        if self.within or not self.observed:
            return 0.0
        nearest = self.low if self.observed < self.low else self.high
        return (nearest - self.observed) / self.observed


@dataclass(frozen=True)
class Diff:
    a: Side
    b: Side
    terms: tuple[Term, ...]
    changes: tuple[Change, ...]
    rule_changes: tuple[RuleChange, ...]
    predicted: Predicted | None
    notes: tuple[str, ...]

    @property
    def observed_tokens(self) -> int | None:
        if self.a.kv_tokens is None or self.b.kv_tokens is None:
            return None
        return self.b.kv_tokens - self.a.kv_tokens

    @property
    def explained_tokens(self) -> int:
        return sum(t.tokens for t in self.terms)


def _kv_gib(s: Startup) -> float | None:
    cap = s.capacity.available_kv_gib
    if cap is not None:
        return cap
    ref = s.reference_rank
    if ref is None:
        return None
    sizes = [p.size_gib() for p in ref.kv_pools if p.name not in ("draft", "host")]
    return sum(sizes) if sizes and all(x is not None for x in sizes) else None  # type: ignore[misc]


def side(s: Startup, index: int) -> Side:
    engine = engines.get(s.engine)
    bpt, bpt_how = bytes_per_token(s)
    kv_gib = _kv_gib(s)
    tokens, how = s.capacity.kv_tokens, "logged"
    if tokens is None and kv_gib is not None and kv_gib <= 0:
        tokens, how = 0, "no KV memory"
    elif tokens is None and kv_gib is not None and bpt:
        tokens, how = int(kv_gib * GIB // bpt), "from its KV memory ÷ bytes per token"
    ref = s.reference_rank
    total = ref.total_gib if ref is not None and ref.total_gib is not None else finite_number(
        s.assumptions.get("gpu_total_gib"))
    budget = engine.kv_budget(s) if engine.kv_budget is not None else None
    return Side(index, s.file, s.first_line, s.engine, s.engine_version or "", s.era or "", s.model or "",
                tokens, how, bpt, bool(s.reconciliation is not None and s.reconciliation.architecture
                                       and bpt_how.startswith("see the reconciliation")), kv_gib, total,
                s.failure.kind if s.failure is not None else None, budget)


def _settings_changed(a: Startup, b: Startup) -> list[Change]:
    keys = sorted(set(a.settings) | set(b.settings))
    out = []
    for key in keys:
        va, vb = a.settings.get(key), b.settings.get(key)
        if key in OFF_WHEN_ABSENT:
            ta, tb = _canonical(va), _canonical(vb)
            if ta != tb:
                out.append(Change(key, ta, tb))
            continue
        if va is None or vb is None or va == vb or isinstance(va, (dict, list)) or isinstance(vb, (dict, list)):
            continue
        if any(word in key for word in IGNORED_SETTINGS) or key.endswith("_path") and key != "model_path":
            continue
        out.append(Change(key, str(va), str(vb)))
    return out


def _canonical(value: Any) -> str:
    """An off-when-absent setting as one comparable text: "none" when absent, objects as sorted JSON."""
    if value is None or (isinstance(value, (dict, list, str)) and not value) or \
            (isinstance(value, str) and value.strip().lower() in OFF_WORDS):
        return OFF
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _changes(a: Startup, b: Startup, sa: Side, sb: Side) -> list[Change]:
    out = []
    if sa.engine != sb.engine:
        out.append(Change("engine", engines.get(sa.engine).label, engines.get(sb.engine).label))
    if sa.version != sb.version and sa.version and sb.version:  # an era inferred from wordings is a range, not a release
        out.append(Change("engine release", sa.version, sb.version))
    if sa.model != sb.model and sa.model and sb.model:
        out.append(Change("model", sa.model, sb.model))
    if sa.device_total_gib is not None and sb.device_total_gib is not None \
            and abs(sa.device_total_gib - sb.device_total_gib) > SAME_DEVICE_GIB:
        out.append(Change("GPU (device total)", f"{sa.device_total_gib:.2f} GiB", f"{sb.device_total_gib:.2f} GiB"))
    out += [c for c in _settings_changed(a, b) if c.what != "model_path" or not any(x.what == "model" for x in out)]
    named = {c.what for c in out}
    da, db = _pool_dtype(a), _pool_dtype(b)
    if da and db and da != db and not any("dtype" in w or w.startswith("type_") for w in named):
        out.append(Change("KV cache dtype", da, db))
    for key in CAPACITY_SETTINGS:  # the limits a log states in its capacity lines, when its settings do not
        va, vb = getattr(a.capacity, key), getattr(b.capacity, key)
        if va is not None and vb is not None and va != vb and key not in named:
            out.append(Change(key, f"{va:,}" if isinstance(va, int) else str(va), f"{vb:,}" if isinstance(vb, int) else str(vb)))
    return out


def _pool_dtype(s: Startup) -> str:
    ref = s.reference_rank
    if ref is None:
        return ""
    return ", ".join(sorted({p.dtype for p in ref.kv_pools if p.dtype and p.name not in ("draft", "host")}))


def _cause(kind: TermKind, changes: list[Change], fallback: str = "") -> str:
    words = CAUSES.get(kind, ())
    named = [f"{c.what} {c.a} → {c.b}" for c in changes if any(w in c.what for w in words)]
    if not named and kind in (TermKind.WEIGHTS, TermKind.ACTIVATION, TermKind.NON_TORCH, TermKind.GRAPHS,
                              TermKind.BYTES_PER_TOKEN, TermKind.NOT_ITEMIZED):
        named = [f"{c.what} {c.a} → {c.b}" for c in changes if c.what.startswith(("engine release", "model"))]
    if not named and kind is TermKind.BASIS:
        named = [f"{c.what} {c.a} → {c.b}" for c in changes if c.what.startswith("GPU")]
    return "; ".join(named) or fallback


def _memory_terms(sa: Side, sb: Side, changes: list[Change]) -> list[tuple[TermKind, str, float, str]]:
    """(kind, label, GiB into the KV cache, cause) of each itemizable budget term."""
    a, b = sa.budget, sb.budget
    if a is None or b is None:
        return []
    out: list[tuple[TermKind, str, float, str]] = []
    if a.basis_gib is not None and b.basis_gib is not None and a.fraction is not None:
        moved = (b.basis_gib - a.basis_gib) * a.fraction
        fallback = ("the GPU's free memory at start (CUDA context, other processes)"
                    if a.basis_label.startswith("free") else "")
        out.append((TermKind.BASIS, f"{b.basis_label}: {a.basis_gib:.2f} → {b.basis_gib:.2f} GiB × {a.fraction:g}",
                    moved, _cause(TermKind.BASIS, changes, fallback)))
    if b.basis_gib is not None and a.fraction is not None and b.fraction is not None and a.fraction != b.fraction:
        out.append((TermKind.FRACTION, f"{b.fraction_setting}: {a.fraction:g} → {b.fraction:g} × {b.basis_gib:.2f} GiB",
                    b.basis_gib * (b.fraction - a.fraction), _cause(TermKind.FRACTION, changes)))
    for d in b.deductions:
        before = a.deduction(d.kind)
        after = b.deduction(d.kind)
        if before is None or after is None or before == after:
            continue
        out.append((d.kind, f"{d.label}: {before:.2f} → {after:.2f} GiB", -(after - before), _cause(d.kind, changes)))
    return out


def _rules(a: Startup, b: Startup) -> list[RuleChange]:
    if a.engine != b.engine or not a.engine_version or not b.engine_version:
        return []  # the rules of an era inferred from wordings are a guess: compared only for known releases
    rules = engines.get(a.engine).release_rules
    if rules is None:
        return []
    ra: dict[str, str] = {r.name: r.value for r in rules(a) if isinstance(r, RuleFact)}
    rb: dict[str, str] = {r.name: r.value for r in rules(b) if isinstance(r, RuleFact)}
    return [RuleChange(name, ra[name], rb[name]) for name in ra if name in rb and ra[name] != rb[name]]


def _predict(a: Startup, b: Startup, sb: Side, changes: list[Change]) -> Predicted | None:
    """whatif from A with B's settings, when every difference is one whatif models (same release, same GPU)."""
    engine = engines.get(a.engine)
    if a.engine != b.engine or engine.whatif is None or sb.kv_tokens is None or not changes:
        return None
    settable = set(engine.whatif.SUPPORTED)
    # a capacity figure that follows a setting (llama.cpp's context_len from -c) is a consequence, not a change
    changes = [c for c in changes if (c.what in settable or c.what not in CAPACITY_SETTINGS) and c.what not in CONDITIONS]
    if not changes or any(c.what not in settable for c in changes):
        return None
    sets = {c.what: (b.settings.get(c.what) or OFF) if c.what in OFF_WHEN_ABSENT
            else b.settings.get(c.what, getattr(b.capacity, c.what, None)) for c in changes}
    if any(v is None for v in sets.values()):
        return None
    try:
        if not engine.whatif.can_calibrate(a):
            return None
        pred = engine.whatif.build_prediction(a, sets, None, None)
    except Exception:  # noqa: BLE001 - a prediction the calibration cannot make is simply not shown
        return None
    req = pred.get("requested") or {}
    low, high = req.get("kv_tokens_low"), req.get("kv_tokens_high")
    if not isinstance(low, int) or not isinstance(high, int):
        return None
    return Predicted(" ".join(req.get("flags") or []), low, high, sb.kv_tokens)


def diff(a: Startup, b: Startup, index_a: int = 1, index_b: int = 2) -> Diff:
    """The waterfall from A's KV tokens to B's, and what changed between them."""
    sa, sb = side(a, index_a), side(b, index_b)
    notes: list[str] = []
    changes = _changes(a, b, sa, sb)
    sa, sb = _share_bytes_per_token(sa, sb, notes, changes)
    terms: list[Term] = []
    observed = None if sa.kv_tokens is None or sb.kv_tokens is None else sb.kv_tokens - sa.kv_tokens
    token_sized = engines.get(b.engine).kv_budget is None
    if observed is None and sa.kv_gib is not None and sb.kv_gib is not None:
        notes.append("a token count is not in both logs: only the KV memory compares")
        cause = _cause(TermKind.BYTES_PER_TOKEN if token_sized else TermKind.NOT_ITEMIZED, changes)
        terms = [Term(TermKind.BYTES_PER_TOKEN if cause and token_sized else TermKind.NOT_ITEMIZED,
                      f"KV memory {sa.kv_gib:.2f} → {sb.kv_gib:.2f} GiB", sb.kv_gib - sa.kv_gib, 0,
                      cause or "not shown by the logs")]
    elif observed is None:
        notes.append("one of the two startups shows no KV capacity (no token count and no KV memory): nothing to "
                     "compare")
    elif token_sized:
        terms = _token_sized_terms(sa, sb, changes, observed)
    else:
        terms = _budget_terms(sa, sb, changes, observed, notes)
    if sa.kv_tokens_how != "logged" or sb.kv_tokens_how != "logged":
        notes.append("a failed startup's KV tokens are worked out from the KV memory it logged ÷ bytes per token")
    if sa.engine != sb.engine:
        notes.append("two engines: their budgets follow different rules, so only the totals compare")
    return Diff(sa, sb, tuple(terms), tuple(changes), tuple(_rules(a, b)), _predict(a, b, sb, changes), tuple(notes))


def _share_bytes_per_token(sa: Side, sb: Side, notes: list[str], changes: list[Change]) -> tuple[Side, Side]:
    """One side's bytes per token for the other when that one logs none (a failed startup) or when the two
    differ only by the logs' rounding of GiB; its tokens then follow from its KV memory."""
    from dataclasses import replace

    ba, bb = sa.bytes_per_token, sb.bytes_per_token
    if ba and bb and not (sa.bytes_per_token_exact and sb.bytes_per_token_exact) and ba != bb \
            and abs(bb - ba) / ba < BYTES_ROUNDING and sa.model == sb.model:
        exact = sa if sa.bytes_per_token_exact else sb if sb.bytes_per_token_exact else sa
        notes.append(f"bytes per token {ba:,} and {bb:,} differ only by the logs' rounding of GiB: "
                     f"{exact.bytes_per_token:,} used for both")
        sa, sb = (replace(x, bytes_per_token=exact.bytes_per_token,
                          kv_tokens=x.kv_tokens if x.kv_tokens_how == "logged" or x.kv_gib is None
                          else int(x.kv_gib * GIB // exact.bytes_per_token)) for x in (sa, sb))
    if _cause(TermKind.BYTES_PER_TOKEN, changes) or engines.get(sa.engine).kv_budget is None:
        return sa, sb  # a token's cost changed, or the engine sets its cells: the other's figure is not this one's
    for mine, other in ((sa, sb), (sb, sa)):
        if mine.bytes_per_token is None and other.bytes_per_token and mine.engine == other.engine \
                and (mine.model == other.model or not mine.model or not other.model):
            tokens, how = mine.kv_tokens, mine.kv_tokens_how
            if tokens is None and mine.kv_gib is not None:
                tokens, how = int(mine.kv_gib * GIB // other.bytes_per_token), "from its KV memory at the other's bytes per token"
            fixed = replace(mine, bytes_per_token=other.bytes_per_token, kv_tokens=tokens, kv_tokens_how=how)
            notes.append(f"startup {mine.index} logs no bytes per token: the other's {other.bytes_per_token:,} B is used")
            sa, sb = (fixed, sb) if mine is sa else (sa, fixed)
    return sa, sb


def _budget_terms(sa: Side, sb: Side, changes: list[Change], observed: int, notes: list[str]) -> list[Term]:
    ba = sa.bytes_per_token
    if not ba or sa.kv_gib is None or sb.kv_gib is None or not sb.bytes_per_token:
        notes.append("bytes per token or KV memory not in both logs: the difference is not itemized")
        return [Term(TermKind.NOT_ITEMIZED, "KV tokens", None, observed, "what the logs do not show")]
    terms: list[Term] = []
    itemized = 0.0
    for kind, label, gib, cause in _memory_terms(sa, sb, changes):
        itemized += gib
        if abs(gib) * GIB / ba >= 0.5:  # a term that moved nothing is not a row
            terms.append(Term(kind, label, gib, round(gib * GIB / ba), cause))
    rest = (sb.kv_gib - sa.kv_gib) - itemized
    if abs(rest) * GIB / ba >= 0.5:
        what = ("the rest of the budget the logs do not itemize" if terms else
                f"KV memory {sa.kv_gib:.2f} → {sb.kv_gib:.2f} GiB (its terms are not in both logs)")
        terms.append(Term(TermKind.NOT_ITEMIZED, what, rest, round(rest * GIB / ba),
                          _cause(TermKind.NOT_ITEMIZED, changes, "not shown by the logs")))
    bb = sb.bytes_per_token
    if bb != ba:
        per_token = round(sb.kv_gib * GIB / bb - sb.kv_gib * GIB / ba)
        terms.append(Term(TermKind.BYTES_PER_TOKEN, f"bytes per token: {ba:,} → {bb:,} B", None, per_token,
                          _cause(TermKind.BYTES_PER_TOKEN, changes, "the KV layout (not a setting the logs show)")))
    left = observed - sum(t.tokens for t in terms)
    if left:
        terms.append(Term(TermKind.ROUNDING, "page/block rounding, caps and the logs' rounding of GiB", None, left,
                          _cause(TermKind.ROUNDING, changes, "rounding")))
    return terms


def _token_sized_terms(sa: Side, sb: Side, changes: list[Change], observed: int) -> list[Term]:
    """An engine that sizes its cache in tokens: the cells set the tokens; memory follows cells × bytes."""
    ba, bb = sa.bytes_per_token, sb.bytes_per_token
    terms = [Term(TermKind.CELLS, f"KV cells: {sa.kv_tokens:,} → {sb.kv_tokens:,}",
                  observed * ba / GIB if ba else None, observed, _cause(TermKind.CELLS, changes, "the cache size setting"))]
    if ba and bb and ba != bb and sb.kv_tokens:
        terms.append(Term(TermKind.BYTES_PER_TOKEN, f"bytes per cell: {ba:,} → {bb:,} B",
                          sb.kv_tokens * (bb - ba) / GIB, 0, _cause(TermKind.BYTES_PER_TOKEN, changes)))
    return terms


def consecutive(startups: list[Startup]) -> list[tuple[int, int]]:
    """Index pairs (0-based) of consecutive startups of one input that both show a KV capacity."""
    shown = [i for i, s in enumerate(startups) if side(s, i + 1).kv_tokens is not None]
    return list(zip(shown, shown[1:], strict=False))


def as_dict(d: Diff) -> dict[str, Any]:
    """The ``kvscope.diff/1`` object (docs/json-diff.md)."""
    def side_dict(s: Side) -> dict[str, Any]:
        return {"startup": s.index, "file": s.file, "first_line": s.first_line, "engine": s.engine,
                "engine_version": s.version or None, "era": s.era or None, "model": s.model or None,
                "kv_tokens": s.kv_tokens, "kv_tokens_how": s.kv_tokens_how, "bytes_per_token": s.bytes_per_token,
                "kv_gib": _round(s.kv_gib), "device_total_gib": _round(s.device_total_gib), "failed": s.failed}

    return {
        "a": side_dict(d.a), "b": side_dict(d.b),
        "observed_tokens": d.observed_tokens,
        "terms": [{"kind": t.kind.value, "label": t.label, "gib": _round(t.gib), "tokens": t.tokens, "cause": t.cause}
                  for t in d.terms],
        "changes": [{"what": c.what, "a": c.a, "b": c.b} for c in d.changes],
        "rule_changes": [{"rule": r.rule, "a": r.a, "b": r.b} for r in d.rule_changes],
        "predicted": None if d.predicted is None else {
            "flags": d.predicted.flags, "kv_tokens_low": d.predicted.low, "kv_tokens_high": d.predicted.high,
            "observed": d.predicted.observed, "within": d.predicted.within, "error": round(d.predicted.error, 5)},
        "notes": list(d.notes),
    }


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 4)
