"""The answer first: one diagnosis per startup, in the contract's words, with the fix and its amount.

Runs after the engine's findings. Three steps, engine-neutral:

1. the failure gets the contract's kind (``core.kinds.FailureKind``): an engine's reader may name a
   failure by the wording it saw (a torch OOM, a traceback); the phase the startup reached (weights
   loaded, pool allocated, graph capture begun, server ready) names what actually ran out;
2. advice the situation shows to be wrong is withdrawn: more KV memory when another process holds
   the GPU, when graphs or serving ran out after the pool took its share, or a target outside what
   the flag can take (a negative count, a fraction outside (0, 1]);
3. the answer: the finding that explains the startup (the failure's, else the first warning with a
   fix), its suggestion as the primary move, the other findings' moves as alternatives, and the
   facts that would make it surer (``--assume …``).
"""

from __future__ import annotations

import re

from kvscope import engines
from kvscope.core.facts import RankFacts
from kvscope.core.kinds import CONTRACT_KINDS, MORE_KV_MEMORY_IS_WRONG, FailureKind
from kvscope.core.startup import Answer, Finding, Startup, Suggestion, finite_number

_GRAPH_WORDS = re.compile(r"capture_model|cuda ?graph|cudagraph|graph capturing|capture cuda graph", re.I)
_KV_WORDS = re.compile(r"\bkv[ _-]?cache\b|KVCache|kv_cache|allocate.{0,40}cache", re.I)
_BUFFER_WORDS = re.compile(r"compute buffer|runtime buffer|workspace|decoder buffer|activation", re.I)
_OOM_WORDS = re.compile(r"out of memory|OutOfMemory|\bOOM\b|failed to allocate|cudaMalloc", re.I)


def _capture_began(s: Startup) -> bool:
    return any(r.cuda_graph_gib is not None or RankFacts(r).has(RankFacts.avail_after_graphs_gib) for r in s.ranks) or bool(
        s.failure and s.failure.data.get("stage") == "graph-capture")


def _ready(s: Startup) -> bool:
    return s.runtime is not None or any(r.avail_at_ready_gib is not None for r in s.ranks)


def _pool_allocated(s: Startup) -> bool:
    return s.capacity.kv_tokens is not None or s.capacity.num_gpu_blocks is not None or any(
        r.kv_pools for r in s.ranks)


def contract_kind(s: Startup) -> str | None:
    """The contract's word for the startup's failure, from what the log shows had happened by then."""
    f = s.failure
    if f is None:
        return None
    if f.kind in CONTRACT_KINDS:
        return f.kind
    message = f.message or ""
    if f.kind == "cuda-oom" or _OOM_WORDS.search(message):
        if _ready(s):  # graphs captured before the server was ready: an out of memory after it is a runtime one
            return FailureKind.OOM_RUNTIME.value
        if _capture_began(s) or _GRAPH_WORDS.search(message):
            return FailureKind.OOM_CUDA_GRAPH.value
        if f.data.get("held_past_budget"):  # the process held more than the engine's static budget: past the pool
            return FailureKind.COMPUTE_BUFFER_OOM.value
        ref = s.reference_rank
        if (ref is None or ref.weights_gib is None) and not _pool_allocated(s):  # a pool means weights were in
            return FailureKind.WEIGHTS_OOM.value
        if _KV_WORDS.search(message):
            return FailureKind.KV_CACHE_OOM.value
        if _BUFFER_WORDS.search(message) or not _pool_allocated(s):
            return FailureKind.COMPUTE_BUFFER_OOM.value
        knobs = engines.get(s.engine).knobs  # engines that capture CUDA graphs after the pool
        return FailureKind.OOM_CUDA_GRAPH.value if knobs.graph_batch_flag or knobs.memory else \
            FailureKind.COMPUTE_BUFFER_OOM.value
    if f.kind == "process-killed":
        return FailureKind.KILLED.value
    return FailureKind.ENGINE_INIT_FAILED.value


def normalise_failure(s: Startup) -> None:
    kind = contract_kind(s)
    if s.failure is not None and kind is not None and kind != s.failure.kind:
        s.failure.data.setdefault("read_as", s.failure.kind)  # the wording's name, kept for who wants it
        s.failure.kind = kind


def _is_fraction(flag: str) -> bool:
    return "fraction" in flag or "utilization" in flag


def _valid(s: Startup, sug: Suggestion) -> bool:
    """Whether the move is one the flag can take and the situation does not contradict."""
    to, frm = finite_number(sug.to_value), finite_number(sug.from_value)
    if isinstance(sug.to_value, bool) or sug.to_value is None:
        return True
    if to is None:
        return isinstance(sug.to_value, str)
    if to < 0 or (_is_fraction(sug.flag) and not 0 < to <= 1):
        return False
    kind = s.failure.kind if s.failure else None
    return not (kind in MORE_KV_MEMORY_IS_WRONG and sug.flag in engines.get(s.engine).knobs.kv_memory_flags
                and frm is not None and to > frm)


def guard_suggestions(s: Startup) -> None:
    """Withdraw moves that cannot be made or that the situation shows make it worse."""
    for f in s.findings:
        sug = f.suggestion
        if sug is None:
            continue
        sug.alternatives = [a for a in sug.alternatives if _valid(s, a)]
        if not _valid(s, sug):
            f.suggestion = sug.alternatives[0] if sug.alternatives else None
            if f.suggestion is not None:
                f.suggestion.alternatives = sug.alternatives[1:]


def _primary(s: Startup) -> Finding | None:
    order = [f for f in s.findings if f.severity == "error"]
    if s.failure is not None and order:
        return order[0]
    warn = [f for f in s.findings if f.severity == "warning"]
    return next((f for f in warn if f.suggestion), None) or (warn[0] if warn else None) or next(
        (f for f in s.findings if f.suggestion), None) or next((f for f in s.findings if not f.context), None)


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(\s|$)", text.strip())
    return (m.group(1) if m else text.strip())[:400]


def _missing(s: Startup) -> list[str]:
    out = []
    engine = engines.get(s.engine)
    knob = engine.knobs.memory
    ref = s.reference_rank
    weights_failed = s.failure is not None and s.failure.kind == FailureKind.WEIGHTS_OOM.value
    if knob is not None and s.setting(knob.setting) is None and knob.default is None and not weights_failed:
        # (the memory knob sizes the KV cache after the load: it says nothing about weights that did not fit)
        out.append(f"--assume {knob.setting}=… (the value it was started with: the log does not print it)")
    if ref is not None and ref.total_gib is None and not s.assumptions.get("gpu_total_gib") and knob is not None \
            and knob.default is not None:
        out.append("--assume gpu=… (the GPU model: its total memory sizes the budget)")
    if s.reconciliation is None and not s.assumptions.get("model") and (s.capacity.kv_tokens or s.capacity.num_gpu_blocks):
        out.append("--model … (a config.json or model id: bytes per token, to check the pool against the engine's rule)")
    return out


def build_answer(s: Startup) -> Answer:
    primary = _primary(s)
    suggestions = [f.suggestion for f in s.findings if f.suggestion is not None]
    if primary is None:
        cap = s.capacity
        what = (f"Started with a KV cache of {cap.kv_tokens:,} tokens" if cap.kv_tokens else "Read the startup")
        return Answer(what + "; nothing in the log needs a change.", "", None, [], "medium", _missing(s))
    sug = primary.suggestion
    alts: list[Suggestion] = []
    seen = {sug.flag} if sug else set()
    # a crash's fix is its own finding's: another finding's move (a reconciliation, a capacity step) does not mend it
    others = [] if primary.own_fix_only else [x for x in suggestions if x is not sug]
    for cand in ([*sug.alternatives] if sug else []) + others:
        if cand.flag not in seen:
            seen.add(cand.flag)
            alts.append(cand)
    if sug is None and alts:
        sug, alts = alts[0], alts[1:]
    if primary.suggestion is not None and alts:
        primary.suggestion.alternatives = [*primary.suggestion.alternatives,
                                           *[a for a in alts if a not in primary.suggestion.alternatives]]
    confidence = "high" if s.reconciliation is not None and s.reconciliation.consistent else \
        "low" if s.failure is not None and s.failure.data.get("weak") else "medium"
    return Answer(primary.title, _first_sentence(primary.detail), sug, alts, confidence, _missing(s))


def answer(s: Startup) -> None:
    """Contract kind, guarded advice, then the answer (after the engine's findings)."""
    normalise_failure(s)
    guard_suggestions(s)
    s.answer = build_answer(s)


def _move(sug: Suggestion) -> str:
    """A move as the user types it: '--max-model-len 32768 → 7344' or '--enforce-eager'."""
    if isinstance(sug.to_value, bool):
        return sug.flag if sug.to_value else f"no {sug.flag}"
    if sug.to_value is None:
        return sug.flag
    to = f"{sug.to_value:,}" if isinstance(sug.to_value, int) else str(sug.to_value)
    frm = "" if sug.from_value is None else (f"{sug.from_value:,} → " if isinstance(sug.from_value, int)
                                              and not isinstance(sug.from_value, bool) else f"{sug.from_value} → ")
    if not frm and re.fullmatch(r"[A-Z][A-Z0-9_]+", sug.flag):  # an environment variable is typed NAME=value
        return f"{sug.flag}={sug.to_value}"
    return f"{sug.flag} {frm}{to}"


def answer_lines(s: Startup) -> list[str]:
    """The answer in 2–4 plain lines, the same in every renderer: verdict, the change, alternatives, basis."""
    a = s.answer
    if a is None:
        return []
    lines = [a.situation.rstrip(".") + "."]
    if a.suggestion is not None:
        gain = f" (≈ {a.suggestion.kv_tokens_after:,} KV tokens)" if a.suggestion.kv_tokens_after else ""
        note = f" — {a.suggestion.note}" if a.suggestion.note else ""
        lines.append(f"Change: {_move(a.suggestion)}{gain}{note}.")
    if a.alternatives:
        lines.append("Also works: " + "; ".join(_move(x) for x in a.alternatives[:3]) + ".")
    if a.cause and a.cause.rstrip(".") != a.situation.rstrip("."):
        lines.append(f"Why: {a.cause}")
    if a.missing:
        lines.append("To be surer, add " + "; ".join(a.missing[:2]) + ".")
    return lines
