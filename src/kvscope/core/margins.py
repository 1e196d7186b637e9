"""The one risk model: how much memory must stay outside the KV pool, for every engine and every part
of a report (explain's findings, the runtime verdict, whatif, plan, the HTML curve), so no two parts
of one report disagree about where the OOM-risk zone starts.

Why these numbers: after the pool is sized, CUDA graphs, the sampler, activations of the largest
batch and any draft model still allocate. SGLang's own default reserve leaves ≈ 2–6 GiB on 80–141 GB
GPUs, and the logs that crashed at capture had less than max(2 GiB, 5 % of the free memory before
weights) left; vLLM's graphs take 1–3 GiB outside its budget (its own warning says so).
"""

from __future__ import annotations

RESERVE_MARGIN_GIB = 2.0  # never leave less than this free at ready
RESERVE_MARGIN_FRACTION = 0.05  # … nor less than this share of the free memory before weights
OUTSIDE_BUDGET_HEADROOM_GIB = 2.0  # vLLM: CUDA context, graphs and sampler outside the utilization budget
MAX_FRACTION = 0.95  # a memory fraction above this leaves no room for activations and graphs

# What a serving figure can be, from a log line or a live server's gauge alike (runtime/stream.py, watch/sampler.py)
MAX_USAGE = 1.05  # a usage is a fraction of the pool: rounding can print 1.00 + a hair, never more
MAX_SERVING_COUNT = 10**15  # requests, tokens, counters: more is a mangled line or a hostile exporter (sums overflow)


def reserve_margin_gib(basis_gib: float) -> float:
    """What must stay free at ready when the fraction is of ``basis_gib`` (free memory before weights)."""
    return max(RESERVE_MARGIN_GIB, RESERVE_MARGIN_FRACTION * basis_gib)
