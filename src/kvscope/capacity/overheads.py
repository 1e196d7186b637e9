"""The budget basis: how much of a GPU an engine sees before it loads weights, per GPU kind.

An engine never sees nvidia-smi's total. The driver keeps a slice (torch's ``total_memory`` is
smaller), the CUDA context takes the next piece, NCCL communicators (TP > 1) the next, and only
then does SGLang measure its "free before weights" baseline (vLLM ≥ 0.11 likewise takes its
snapshot after NCCL). Each number is labelled *measured* (on this GPU kind), *reported* (a public
figure with two decimals), or *assumed* (carried over from the H200 measurement), so a plan can say
how much of its answer is known and how much is borrowed.

Measured on an H200 (../shared/data/measured-overheads.md): driver slice 616 MiB of 143,771 MiB,
CUDA context 0.516 GiB, NCCL communicator + first all-reduce 0.910 GiB per rank at TP2, cuBLAS
handle/workspace 0.096 GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvscope.capacity.catalog import find_gpu, gpus
from kvscope.errors import InputError

MIB = 1 << 20
GIB = 1 << 30

H200_SMI_MIB = 143771
H200_RESERVED_MIB = 616
CUDA_CONTEXT_GIB = 0.516
NCCL_TP2_GIB = 0.910
CUBLAS_GIB = 0.096
# An engine's NCCL memory at TP4 on an NVSwitch GPU (NVLink 4/5: H100/H200 SXM, B200…): vLLM's own
# debug line on an H200 at TP4 (PR #21429, Qwen3-235B-A22B-FP8) reports 2.04 GiB of non-torch
# memory taken from before NCCL's start to after the profile run; less cuBLAS's workspace that is
# 1.94 GiB. More than the 0.910 measured at TP2 because that measurement ran with NVLink multicast
# (NVLS) off, and an engine holds two communicators (torch.distributed's and its own) plus custom
# all-reduce buffers.
NCCL_NVSWITCH_TP4_GIB = 2.04 - CUBLAS_GIB


@dataclass
class Figure:
    """One number of the basis and where it comes from."""

    gib: float
    how: str  # measured | reported | assumed | given


@dataclass
class BudgetBasis:
    """A GPU's memory as an engine sees it, step by step, all in GiB."""

    gpu: str
    nvidia_smi_total_mib: int
    torch_total: Figure
    cuda_context: Figure
    nccl: Figure
    cublas: Figure
    notes: list[str] = field(default_factory=list)

    @property
    def smi_total_gib(self) -> float:
        return self.nvidia_smi_total_mib * MIB / GIB

    @property
    def free_before_weights_gib(self) -> float:
        """SGLang's F (and vLLM ≥ 0.11's snapshot): torch total − CUDA context − NCCL."""
        return self.torch_total.gib - self.cuda_context.gib - self.nccl.gib

    def as_dict(self) -> dict[str, Any]:
        def fig(f: Figure) -> dict[str, Any]:
            return {"gib": f.gib, "how": f.how}

        return {"gpu": self.gpu, "nvidia_smi_total_mib": self.nvidia_smi_total_mib,
                "nvidia_smi_total_gib": self.smi_total_gib, "torch_total": fig(self.torch_total),
                "cuda_context": fig(self.cuda_context), "nccl": fig(self.nccl), "cublas": fig(self.cublas),
                "free_before_weights_gib": self.free_before_weights_gib, "notes": self.notes}


def _torch_total(g: dict[str, Any], smi_mib: int) -> Figure:
    """torch total_memory: exact bytes if known, else a reported figure, else nvidia-smi − scaled H200 slice."""
    if g.get("torch_total_bytes"):
        how = "measured" if g.get("nvidia_smi_reserved_mib") else "reported"
        return Figure(g["torch_total_bytes"] / GIB, how)
    if g.get("torch_total_gib_reported"):
        return Figure(float(g["torch_total_gib_reported"]), "reported")
    reserved = smi_mib * H200_RESERVED_MIB / H200_SMI_MIB
    return Figure((smi_mib - reserved) * MIB / GIB, "assumed")


def nccl_gib(tp_world: int, nvswitch: bool = False) -> Figure:
    """NCCL memory taken before the baseline: none for one rank (engines skip the communicator)."""
    if tp_world <= 1:
        return Figure(0.0, "measured")
    if tp_world == 2:
        return Figure(NCCL_TP2_GIB, "measured")
    if nvswitch:
        return Figure(NCCL_NVSWITCH_TP4_GIB, "reported" if tp_world == 4 else "assumed")
    return Figure(NCCL_TP2_GIB, "assumed")


def nvswitch_kind(entry: dict[str, Any]) -> bool:
    """A GPU kind whose servers join 4-8 GPUs through NVSwitch with NVLink 4/5 (multicast capable)."""
    link = str((entry.get("interconnect") or {}).get("gpu_gpu") or "")
    return ("NVLink 4" in link or "NVLink 5" in link) and "bridge" not in link


def resolve_gpu(name: str) -> tuple[str, int, dict[str, Any]]:
    """A GPU by catalog name, or a bare size ('80GiB', '97887MiB', '96GB'); (label, smi MiB, entry)."""
    m = re.fullmatch(r"\s*([\d.]+)\s*(mib|gib|gb|g)?\s*", name.lower())
    if m:
        value, unit = float(m.group(1)), m.group(2) or "mib"
        mib = int(value if unit == "mib" else value * 1024 if unit in ("gib", "g") else value * 1e9 / MIB)
        return f"{mib} MiB GPU", mib, {}
    g = _find_sized_gpu(name)
    if g is None or not g.get("nvidia_smi_total_mib"):
        known = ", ".join(x["name"].split(" (")[0] for x in gpus() if x.get("nvidia_smi_total_mib"))
        why = "has no nvidia-smi total in the catalog" if g else "is not in the catalog"
        raise InputError(f"GPU {name!r} {why}; give its size instead (e.g. --gpu 97887MiB). Known: {known}")
    return g["name"], int(g["nvidia_smi_total_mib"]), g


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", text.lower())


def _find_sized_gpu(name: str) -> dict[str, Any] | None:
    """Like catalog.find_gpu, but among several matches ('H100') prefer one whose total is known."""
    key = _norm(name)
    matches = [g for g in gpus() if key and key in _norm(g["name"])]
    sized = [g for g in matches if g.get("nvidia_smi_total_mib")]
    if sized:
        return min(sized, key=lambda g: len(g["name"]))
    return find_gpu(name)


def budget_basis(gpu: str, tp_world: int, overrides: dict[str, Any] | None = None) -> BudgetBasis:
    """The basis for one rank of a tp_world-rank job on this GPU kind; overrides win (--set torch_total_gib=…)."""
    overrides = overrides or {}
    label, smi_mib, entry = resolve_gpu(gpu)
    measured_kind = entry.get("nvidia_smi_reserved_mib") is not None
    basis = BudgetBasis(
        label, smi_mib, _torch_total(entry, smi_mib),
        Figure(CUDA_CONTEXT_GIB, "measured" if measured_kind else "assumed"),
        _nccl(entry, tp_world, measured_kind),
        Figure(CUBLAS_GIB, "measured" if measured_kind else "assumed"),
    )
    for key, attr in (("torch_total_gib", "torch_total"), ("cuda_context_gib", "cuda_context"),
                      ("nccl_gib", "nccl"), ("cublas_gib", "cublas")):
        if overrides.get(key) is not None:
            setattr(basis, attr, Figure(float(overrides[key]), "given"))
    if not measured_kind:
        basis.notes.append("driver slice, CUDA context and NCCL sizes are carried over from an H200 measurement "
                           "(H200 only is measured); expect ±0.3 GiB on this GPU kind")
    if tp_world > 2 and nvswitch_kind(entry):
        basis.notes.append(f"NCCL at {tp_world} ranks on an NVSwitch GPU: "
                           f"{NCCL_NVSWITCH_TP4_GIB:.2f} GiB, from vLLM's own report at TP4 on an H200"
                           + ("" if tp_world == 4 else f" (assumed the same at {tp_world} ranks)"))
    elif tp_world > 2:
        basis.notes.append(f"NCCL at {tp_world} ranks assumed equal to the measured TP2 figure")
    return basis


def _nccl(entry: dict[str, Any], tp_world: int, measured_kind: bool) -> Figure:
    """NCCL's figure for this GPU kind: as measured / reported on the H200 (the measured kind), an
    assumption carried over on any other kind (one rank needs none on any)."""
    figure = nccl_gib(tp_world, nvswitch_kind(entry))
    return figure if measured_kind or tp_world <= 1 else Figure(figure.gib, "assumed")
