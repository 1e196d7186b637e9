"""vLLM's KV budget from one startup, for kvscope diff: K = T × gpu_memory_utilization − W − A − N [− G].

T is the device total torch sees, W the weights, A the profile's activation peak, N the non-torch memory
the profile charged, G the CUDA-graph estimate in the releases that subtract it (0.20+, or where the log's
own advisory says it was applied). The figures are the ledger's; a log that lacks one leaves it None, and
the diff then names the difference it cannot itemize instead of guessing it.
"""

from __future__ import annotations

from kvscope.core.budget import Deduction, KvBudget, RuleFact, TermKind
from kvscope.core.startup import Startup, finite_number
from kvscope.engines.vllm.facts import VllmRankFacts
from kvscope.engines.vllm.finish import era_of, graphs_inside, total_gib


def kv_budget(s: Startup) -> KvBudget | None:
    r = s.reference_rank
    if r is None:
        return None
    util = finite_number(s.setting("gpu_memory_utilization"))
    if util is None and s.engine_version:
        util = era_of(s).default_util
    graphs = VllmRankFacts(r).cuda_graph_estimate_gib
    deductions = [Deduction(TermKind.WEIGHTS, "weights", r.weights_gib),
                  Deduction(TermKind.ACTIVATION, "activation peak of the profile run", r.activation_peak_gib),
                  Deduction(TermKind.NON_TORCH, "non-torch memory (NCCL, cuBLAS, other processes)", r.non_torch_gib)]
    if graphs_inside(s) and graphs is not None:
        deductions.append(Deduction(TermKind.GRAPHS, "CUDA-graph estimate (subtracted in this release)", graphs))
    return KvBudget("device total", total_gib(s, r), "gpu_memory_utilization", util, tuple(deductions))


def release_rules(s: Startup) -> tuple[RuleFact, ...]:
    """The rules of the era the startup ran in (eras.py), as the diff compares them."""
    era = era_of(s)
    inside = graphs_inside(s)
    return (RuleFact("KV budget rule", era.budget),
            RuleFact("CUDA-graph estimate subtracted from the budget",
                     "unknown" if inside is None else "yes" if inside else "no"),
            RuleFact("other processes' memory shrinks the budget", "yes" if era.others_charged else "no"),
            RuleFact("default --gpu-memory-utilization", f"{era.default_util:g}"))
