"""How far a plan's KV figure can be off: each unlogged input's spread, from the evidence behind it.

A plan adds up figures of different standing (``core.provenance.Figure.how``: measured, reported,
estimated, assumed, given). Each gets a half-width in GiB from what public logs showed about that
kind of figure; independent errors add in quadrature (root sum of squares), and the KV memory's
half-width becomes a token range. Settings are not in it: a plan answers for the settings it shows,
and a different ``gpu_memory_utilization`` is a different question (whatif / the table).

The evidence for each half-width:

* torch total, reported: printouts of one GPU kind differ with the driver by 0.02–0.05 GiB
  (RTX 3090 23.56 / 23.58; H100 SXM 79.19 / 79.22) → 0.03. Scaled from the H200 (assumed) → 0.15.
* CUDA context: measured on the H200 0.516, its public SGLang logs 0.46–0.52 across releases → 0.05.
  The SM-count formula (estimated) is within 0.07 GiB of seven SGLang logs and 0.12 of a 2024 vLLM
  RTX 3090 log → 0.10.
* Communicators: measured 0.05; a GPU kind's own report 0.10; borrowed from another kind or TP size
  (assumed) 0.30 (an H100's TP8 report is 1.25 GiB where the H200 class gives 2.01).
* cuBLAS: measured 0.01; assumed 0.05 (H200: 0.096 and 0.098 in two measurements).
* Weights from config.json: 0.3 % (five vLLM "Model loading took" lines within 0.005 GiB; the SGLang
  load replays within 0.04) plus 5 % of a vision tower sized from a built-in table.
* SGLang's load replay (allocator slack): 0.05 GiB (the creation order is read from the code).
* vLLM's activation peak (first principles): 7 % where the forward pass sets it (Llama-3.1-8B 2.06 vs
  2.07). 65 % where the dummy sampler run sets it (max_num_seqs rows of logits): the PyTorch sort
  path measured 38.8 B per logit (Qwen3-235B at TP4 on an H200, 5.62 GiB vs the plan's 5.80), but a
  public A100 log (vLLM 0.10.1, gpt-oss-120b, 256 rows × 201,088) shows at most 0.78 GiB of
  activation and non-torch memory together where that path gives 1.9, at least 65 % less. Which
  sampler path a deployment takes is not known from the launch.
* vLLM's CUDA graphs inside the budget, "typical" 0.5 GiB: 0.3 (public estimates 0.1–0.9).
* SGLang's kept float32 MXFP4 expert scales (DeepSeek-V4 on Hopper): 1.0 GiB; one log, which the
  plan's weights miss by 0.8 GiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.provenance import Figure
from kvscope.model.overheads import BudgetBasis
from kvscope.model.weights import KEPT_SCALES_COMPONENT

TORCH_TOTAL = {"measured": 0.0, "given": 0.0, "reported": 0.03, "estimated": 0.10, "assumed": 0.15}
CONTEXT = {"measured": 0.05, "given": 0.0, "reported": 0.07, "estimated": 0.10, "assumed": 0.15}
COMMS = {"measured": 0.05, "given": 0.0, "reported": 0.10, "estimated": 0.20, "assumed": 0.30}
CUBLAS = {"measured": 0.01, "given": 0.0, "reported": 0.03, "estimated": 0.05, "assumed": 0.05}
WEIGHTS_FRACTION = 0.003
VISION_TABLE_FRACTION = 0.05
ALLOCATOR_REPLAY_GIB = 0.05
ACTIVATION_FRACTION = 0.07
SAMPLER_ACTIVATION_FRACTION = 0.65  # one log each way: +3 % and at least −65 %
TYPICAL_GRAPHS_GIB = 0.3
KEPT_SCALES_GIB = 1.0  # SGLang's kept float32 MXFP4 scales on Hopper: one log, 0.8 GiB off


@dataclass
class Spread:
    """Half-widths (GiB) of the inputs a KV figure depends on, already scaled by how it enters."""

    terms: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, gib: float) -> None:
        if gib > 0:
            self.terms[name] = self.terms.get(name, 0.0) + gib

    @property
    def gib(self) -> float:
        return math.sqrt(sum(v * v for v in self.terms.values()))

    def as_dict(self) -> dict[str, Any]:
        return {"gib": self.gib, "terms_gib": dict(sorted(self.terms.items(), key=lambda kv: -kv[1]))}


def _fig(table: dict[str, float], figure: Figure) -> float:
    return table.get(figure.how, max(table.values())) if figure.value else 0.0


def weights_spread(weights: dict[str, Any]) -> float:
    """A weight estimate's half-width: a fraction of it, more for a vision tower from the table."""
    if str(weights.get("method", "")).startswith("given"):
        return 0.0
    gib = float(weights.get("gib_per_rank") or 0.0)
    vision = float((weights.get("by_component_gib") or {}).get("vision") or 0.0)
    from_table = any("built-in table" in n for n in weights.get("notes") or [])
    return gib * WEIGHTS_FRACTION + (vision * VISION_TABLE_FRACTION if from_table else 0.0)


def sglang_spread(basis: BudgetBasis, mfs: float, weights: dict[str, Any], replayed: bool) -> Spread:
    """KV = F × mfs − weights − load extras, F = torch total − context − communicators."""
    s = Spread()
    kept = (weights.get("by_component_gib") or {}).get(KEPT_SCALES_COMPONENT)
    if kept:  # fitted to one log (DeepSeek-V4-Pro TP8 on H200): the plan lands 0.8 GiB under it
        s.add("DeepSeek-V4 expert scales (one log)", KEPT_SCALES_GIB)
    s.add("torch total", mfs * _fig(TORCH_TOTAL, basis.torch_total))
    s.add("CUDA context", mfs * _fig(CONTEXT, basis.cuda_context))
    s.add("communicators", mfs * _fig(COMMS, basis.nccl))
    s.add("weights", weights_spread(weights))
    if replayed:
        s.add("allocator replay", ALLOCATOR_REPLAY_GIB)
    return s


def vllm_spread(basis: BudgetBasis, util: float, weights: dict[str, Any], activation_gib: float,
                charged: tuple[str, ...], typical_graphs: bool, sampler_peak: bool = False) -> Spread:
    """K = util × torch total − weights − activation − the non-torch terms the era charges − graphs.

    ``charged``: which of "context", "communicators", "cublas" the release counts in its budget.
    """
    s = Spread()
    s.add("torch total", util * _fig(TORCH_TOTAL, basis.torch_total))
    s.add("weights", weights_spread(weights))
    if sampler_peak:
        s.add("activation peak (dummy sampler run)", activation_gib * SAMPLER_ACTIVATION_FRACTION)
    else:
        s.add("activation peak", activation_gib * ACTIVATION_FRACTION)
    if "context" in charged:
        s.add("CUDA context", _fig(CONTEXT, basis.cuda_context))
    if "communicators" in charged:
        s.add("communicators", _fig(COMMS, basis.profile_nccl))
    if "cublas" in charged:
        s.add("cuBLAS", _fig(CUBLAS, basis.cublas))
    if typical_graphs:  # the plan charged its typical figure, not one the operator gave
        s.add("CUDA graphs (typical)", TYPICAL_GRAPHS_GIB)
    return s
