"""vLLM's memory behaviour by release, as data (docs/research/vllm-memory.md §0, §1, §2.6, §3).

A new release is a new row here, not new code. Logs rarely print the version, so
``infer`` reads the wording of the lines a startup holds: each wording has a known first/last
release (and sometimes an engine, V0 or V1), and the intersection is the era.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvscope.core.versions import Version, parse_version  # noqa: F401 - vLLM's rules name them through this module
from kvscope.engines.shapes import Shape

OLDEST: Version = (0, 0, 0)
NEWEST: Version = (0, 99, 99)
POST_073: Version = (0, 7, 4)  # dev builds between the v0.7.3 tag and v0.8.0
PRE_080: Version = (0, 7, 99)


def fmt(v: Version) -> str:
    return "newest" if v == NEWEST else f"v{v[0]}.{v[1]}.{v[2]}"


@dataclass(frozen=True)
class Era:
    """One era of vLLM's KV sizing (doc §1.1 table, §2.6 table)."""

    name: str
    engine: str  # "V0" | "V1"
    first: Version
    last: Version
    budget: str  # how K is computed, in words
    others_charged: bool  # memory of other processes on the GPU shrinks K
    graphs_in_budget: bool  # the CUDA-graph estimate G is subtracted from the budget by default
    capacity_rule: str  # rules.capacity rule: "v0" | "v1" | "v1-conc"
    default_util: float


ERAS: tuple[Era, ...] = (
    # ≤0.2.4 the profile's peak was torch.cuda.max_memory_allocated(): what NCCL and the CUDA context hold was not
    # counted, and TP > 1 servers overran their budget. PR #2031 ("Fix peak memory profiling", in 0.2.5) counted
    # total − free instead: everything in use on the GPU, other processes' memory too (vllm#2248: "vLLM basically
    # thinks that any occupied GPU memory is attributed to the current running instance"); PR #2863 (merged
    # 2024-02-14, after 0.3.0) subtracts what was in use at init, so other processes stop counting.
    Era("V0 ≤0.2.4", "V0", OLDEST, (0, 2, 4), "K = T·u − torch peak (PyTorch's own allocations only: NCCL, the CUDA "
        "context and other processes not counted)", False, False, "v0", 0.90),
    Era("V0 0.2.5–0.3.0", "V0", (0, 2, 5), (0, 3, 0), "K = T·u − (T − free after profile): everything in use on the "
        "GPU counts, NCCL and other processes too (PR #2031)", True, False, "v0", 0.90),
    Era("V0 0.3.1–0.6.3", "V0", (0, 3, 1), (0, 6, 3), "K = T·u − (free at init − free after profile)", False, False,
        "v0", 0.90),
    Era("V0 0.6.4", "V0", (0, 6, 4), (0, 6, 4), "K = T·u − (absolute torch peak + non-torch)", True, False, "v0", 0.90),
    Era("V0 0.6.5–0.10", "V0", (0, 6, 5), (0, 10, 2), "K = T·u − (weights + activation + non-torch)", False, False,
        "v0", 0.90),
    Era("V1 0.7–0.9.0", "V1", (0, 6, 6), (0, 9, 0), "K = T·u − (absolute torch peak + non-torch)", True, False, "v0", 0.90),
    Era("V1 0.9.1–0.17", "V1", (0, 9, 1), (0, 17, 99), "K = T·u − (weights + activation + non-torch)", False, False,
        "v1", 0.90),
    Era("V1 0.18–0.19", "V1", (0, 18, 0), (0, 19, 99), "K = T·u − (weights + activation + non-torch); graph estimate "
        "logged, subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1", False, False, "v1", 0.90),
    Era("V1 0.20–0.21", "V1", (0, 20, 0), (0, 21, 99), "K = T·u − (weights + activation + non-torch) − CUDA graphs",
        False, True, "v1", 0.92),
    Era("V1 0.22–0.24", "V1", (0, 22, 0), (0, 24, 99), "K = T·u − (weights + activation + non-torch) − CUDA graphs",
        False, True, "v1-conc", 0.92),
    # The consumed-memory ledger replaced W + A + N somewhere in v0.25–v0.28 (doc §1.1): not pinned, so its own row.
    Era("V1 0.25–0.27", "V1", (0, 25, 0), (0, 27, 99), "K = T·u − (weights + activation + non-torch) − CUDA graphs "
        "(v0.28's consumed + transient peak from somewhere in this range)", False, True, "v1-conc", 0.92),
    Era("V1 0.28+", "V1", (0, 28, 0), NEWEST, "K = T·u − (consumed + transient peak) − CUDA graphs", False, True,
        "v1-conc", 0.92),
)


@dataclass(frozen=True)
class Clue:
    """A wording with a known release range (and engine, when only one engine prints it)."""

    pattern: re.Pattern[str]
    first: Version
    last: Version
    engine: str | None
    why: str


def _c(regex: str, first: Version, last: Version, engine: str | None, why: str) -> Clue:
    return Clue(re.compile(regex), first, last, engine, why)


CLUES: tuple[Clue, ...] = (
    _c(r"Loading model weights took [\d.]+ GB", OLDEST, PRE_080, None, "'Loading model weights took … GB'"),
    _c(r"Model loading took [\d.]+ GB and", (0, 8, 0), (0, 8, 4), None, "'Model loading took … GB and'"),
    _c(r"Model loading took [\d.]+ GiB and", (0, 8, 5), (0, 11, 0), None, "'Model loading took … GiB and'"),
    _c(r"Model loading took [\d.]+ GiB memory and", (0, 11, 1), NEWEST, None, "'Model loading took … GiB memory'"),
    _c(r"Memory profiling results: (?:total_gpu_memory|duration)=", (0, 6, 4), (0, 6, 4), "V0",
       "one-line 'Memory profiling results:'"),
    _c(r"Memory profiling results:\s*$", (0, 6, 5), (0, 6, 5), "V0", "tabular 'Memory profiling results:'"),
    _c(r"Memory profiling takes [\d.]+ seconds(?!\. Total)|the current vLLM instance can use", (0, 6, 5), (0, 10, 2), "V0",
       "'the current vLLM instance can use …'"),
    _c(r"# GPU blocks: \d+, # CPU blocks", OLDEST, (0, 6, 6), "V0", "'# GPU blocks: …, # CPU blocks'"),
    _c(r"# (?i:cuda) blocks: \d+", (0, 7, 0), (0, 10, 2), "V0", "'# cuda blocks'"),
    _c(r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d [\w.]+\.py:\d+\]", OLDEST, PRE_080, None,
       "header without '[' before the file name"),
    _c(r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[\w./]+\.py:\d+\]", (0, 8, 0), NEWEST, None,
       "header with '[file.py:line]'"),
    _c(r"KV cache size: [\d,]+ tokens, Maximum concurrency", (0, 27, 0), NEWEST, "V1", "one-line capacity log"),
    _c(r"\b(?:CPU|XPU|TPU|HPU|NPU) KV cache size:", (0, 28, 0), NEWEST, "V1", "'<device> KV cache size'"),
    # Two lines from PR #13596 (dev builds after v0.7.3) until the merge into one, after v0.26 (0.25.1 and 0.26.0 print two).
    _c(r"GPU KV cache size: [\d,]+ tokens$", POST_073, (0, 26, 99), "V1", "two-line capacity log"),
    # V0 throughout, and V1 up to v0.7.x (`# GPU blocks: B` + concurrency): no engine from this alone.
    _c(r"Maximum concurrency for \d{4,} tokens", OLDEST, (0, 10, 2), None, "max_model_len printed without separators"),
    _c(r"# GPU blocks: \d+\s*$", (0, 6, 6), PRE_080, "V1", "'# GPU blocks: N' without CPU blocks (V1 kv_cache_utils)"),
    _c(r"\b(?:gpu_model_runner|kv_cache_utils|gpu_worker)\.py:\d+\]", (0, 6, 6), NEWEST, "V1",
       "V1 source file (gpu_model_runner / kv_cache_utils / gpu_worker)"),
    _c(r"is larger than the maximum number of tokens that can be stored in KV cache", OLDEST, (0, 10, 2), "V0",
       "V0 'max seq len … stored in KV cache' error"),
    _c(r"Available KV cache memory:", (0, 9, 1), NEWEST, "V1", "'Available KV cache memory'"),
    _c(r"\(VllmWorker rank=\d+", (0, 8, 0), (0, 10, 0), "V1", "'(VllmWorker rank=N' prefix"),
    _c(r"\(VllmWorker (?:PP\d+_)?TP\d+", (0, 10, 1), (0, 10, 1), "V1", "'(VllmWorker TPn' prefix"),
    _c(r"\(Worker_(?:DP|PP|TP)", (0, 10, 2), NEWEST, "V1", "'(Worker_TPn' prefix"),
    _c(r"\(EngineCore pid=", (0, 18, 0), NEWEST, "V1", "'(EngineCore pid=' prefix"),
    _c(r"\(VllmWorkerProcess pid=", OLDEST, (0, 10, 2), "V0", "'(VllmWorkerProcess' prefix"),
    _c(r"default since v0\.21\.0", (0, 20, 0), NEWEST, "V1", "CUDA-graph profiling 'default since v0.21.0'"),
    _c(r"will become the default in v0\.19|In v0\.19, CUDA graph memory profiling", (0, 18, 0), (0, 18, 99), "V1",
       "CUDA-graph profiling 'will become the default in v0.19'"),
    _c(r"Estimated CUDA graph memory|CUDA graph pool memory", (0, 18, 0), NEWEST, "V1", "CUDA-graph estimate lines"),
    _c(r"for consumed memory \(weights \+ non-torch\)", (0, 25, 0), NEWEST, "V1", "'consumed memory' ledger line"),
    _c(r"Actual usage is [\d.]+ GiB for weight", (0, 10, 2), (0, 27, 99), None, "'Actual usage is … for weight'"),
    _c(r"models's max seq len", (0, 8, 0), (0, 20, 99), "V1", "'models's max seq len' typo"),
    _c(r"To serve at least one request with the model's max seq len", (0, 21, 0), NEWEST, "V1",
       "'model's max seq len' (typo fixed)"),
    _c(r"This does does not respect", (0, 10, 2), (0, 11, 99), "V1", "'This does does not' typo"),
    _c(r"This does not respect the gpu_memory_utilization", (0, 12, 0), NEWEST, "V1", "'This does not respect'"),
    _c(r"torch\.compile took", (0, 18, 0), NEWEST, None, "'torch.compile took'"),
    _c(r"torch\.compile takes", (0, 7, 0), (0, 17, 99), None, "'torch.compile takes'"),
    _c(r"(?:memory|needed|use is|\(|:) \d+\.\d GiB\b", (0, 14, 0), NEWEST, None, "GiB printed with one decimal (format_gib)"),
    _c(r"Initializing a V1 LLM engine", (0, 6, 6), NEWEST, "V1", "'Initializing a V1 LLM engine'"),
    _c(r"Initializing a V0 LLM engine", (0, 7, 3), (0, 10, 2), "V0", "'Initializing a V0 LLM engine'"),
    _c(r"Initializing an LLM engine", OLDEST, (0, 7, 0), "V0", "'Initializing an LLM engine'"),
    _c(r"non-default args:", (0, 9, 2), NEWEST, None, "'non-default args'"),
    _c(r"Graph capturing finished in \d+ secs?, took", (0, 6, 4), NEWEST, None, "'Graph capturing finished … took'"),
    _c(r"\(EngineCore(?:_DP\d+|_\d+)? pid=|EngineCore failed to start", (0, 8, 0), NEWEST, "V1", "EngineCore process"),
)


@dataclass
class Inferred:
    """What the wording says about the release: a range, an engine and the clues used."""

    first: Version
    last: Version
    engine: str | None
    clues: list[str]
    eras: list[Era]

    def label(self) -> str:
        if len(self.eras) == 1:
            return self.eras[0].name
        if not self.eras:
            return "unknown"
        return f"{self.eras[0].name} … {self.eras[-1].name}"


def era_for(version: Version, engine: str | None = None) -> Era:
    """The era of a known release (V1 unless told otherwise from v0.8; V0 before)."""
    if engine is None:
        engine = "V1" if version >= (0, 8, 0) else "V0"
    for era in ERAS:
        if era.engine == engine and era.first <= version <= era.last:
            return era
    return ERAS[-1] if engine == "V1" else ERAS[2]


def infer(texts: list[str], version: Version | None = None, rows: Sequence[Shape] = ()) -> Inferred:
    """Intersect the ranges of every clue found in the startup's lines, then of the dated shape rows that read
    them where their releases column says more (a logged version wins)."""
    first, last, engine, used = OLDEST, NEWEST, None, []
    for clue in CLUES:
        if not any(clue.pattern.search(t) for t in texts):
            continue
        if clue.first > last or clue.last < first:
            continue  # contradicts stronger clues (a pasted mix); ignore rather than give up
        first, last = max(first, clue.first), min(last, clue.last)
        engine = engine or clue.engine
        used.append(f"{clue.why}: {fmt(clue.first)}–{fmt(clue.last)}")
    for row in rows:
        low, high = row.release_range or (OLDEST, None)
        high = high or NEWEST
        if (low > first or high < last) and low <= last and high >= first:
            first, last = max(first, low), min(last, high)
            used.append(f"'{row.name}' line: {fmt(low)}–{fmt(high)}")
    if version is not None:
        first = last = version
        engine = engine or ("V1" if version >= (0, 11, 0) else None)
    eras = [e for e in ERAS if e.first <= last and e.last >= first and (engine is None or e.engine == engine)]
    if engine is None and eras:
        # Without an engine clue, V1 is the default from v0.8.0 and V0 before.
        v1 = [e for e in eras if e.engine == "V1" and e.last >= (0, 8, 0)]
        v0 = [e for e in eras if e.engine == "V0" and e.first < (0, 8, 0)]
        eras = v1 if first >= (0, 8, 0) or not v0 else v0 if last < (0, 8, 0) else v0 + v1
    return Inferred(first, last, engine, used, eras)
