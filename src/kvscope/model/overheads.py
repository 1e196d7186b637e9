"""The budget basis: how much of a GPU an engine sees before it loads weights, per GPU kind.

An engine never sees nvidia-smi's total. The driver keeps a slice (torch's ``total_memory`` is
smaller), the CUDA context takes the next piece, NCCL communicators (TP > 1) the next, and only
then does SGLang measure its "free before weights" baseline (vLLM ≥ 0.11 likewise takes its
snapshot after NCCL). Each number is labelled *measured* (on this GPU kind), *reported* (a public
log or printout of this GPU kind), *estimated* (a formula fitted to such reports), or *assumed*
(carried over from another kind), so a plan can say how much of its answer is known and how much
is borrowed.

Measured on an H200 (docs/research/measured-overheads.md): driver slice 616 MiB of 143,771 MiB,
CUDA context 0.516 GiB, NCCL communicator + first all-reduce 0.910 GiB per rank at TP2, cuBLAS
handle/workspace 0.096 GiB.

Other GPU kinds, from public logs (sources in gpus.json and below):

* torch total: ``torch_total_gib_reported`` per kind (get_device_properties printouts, deviceQuery,
  OOM messages). Consumer cards lose 0.4–0.5 GiB to the driver, not the 0.1–0.2 an H200-scaled slice
  gives.
* CUDA context: the driver reserves local memory for every thread an SM can hold (the 1 KiB default
  stack × max threads per SM × SMs), plus a fixed part. SGLang's free memory before weights, less
  its own "Init torch distributed ends. mem usage" (communicators only), gives the context: L4 0.27,
  H100 0.51, H200 0.46–0.50, L40S 0.52, RTX PRO 6000 0.57, B200 0.60 GiB; the fixed part (each
  less its local memory) has median 0.25 GiB, and 0.25 plus the local memory is within 0.07 of
  every one (CONTEXT_BASE_GIB; tests/unit/engines/test_plan.py CONTEXT_FROM_LOGS).
* Communicators at start-up (NCCL + custom all-reduce, what SGLang's "mem usage" reports): 0.13–0.39
  GiB on PCIe-only machines at TP2–TP4, 1.1–2.5 GiB on NVSwitch machines at TP4–TP8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.errors import InputError
from kvscope.core.provenance import Figure, How
from kvscope.core.text import did_you_mean
from kvscope.model.catalog import gpu_short_names, gpus, match_gpus, pick_gpu

MIB = 1 << 20
GIB = 1 << 30

H200_SMI_MIB = 143771
H200_RESERVED_MIB = 616
CUDA_CONTEXT_GIB = 0.516
NCCL_TP2_GIB = 0.910
CUBLAS_GIB = 0.096  # first bf16 matmul on an H200 (torch 2.11, CUDA 13): 66 MiB cuBLAS's own + 32 MiB
# workspace torch allocates; an engine's profile sees the 32 in its torch peak, the 66 as non-torch, and
# charges both, so the plan keeps them as one figure
# An engine's NCCL memory at TP4 on an NVSwitch GPU (NVLink 4/5: H100/H200 SXM, B200…): vLLM's own
# debug line on an H200 at TP4 (PR #21429, Qwen3-235B-A22B-FP8) reports 2.04 GiB of non-torch
# memory taken from before NCCL's start to after the profile run; less cuBLAS's workspace that is
# 1.94 GiB. More than the 0.910 measured at TP2 because that measurement ran with NVLink multicast
# (NVLS) off, and an engine holds two communicators (torch.distributed's and its own) plus custom
# all-reduce buffers.
NCCL_NVSWITCH_TP4_GIB = 2.04 - CUBLAS_GIB

# Before Hopper the cuBLAS charge is far smaller. PyTorch's default workspace (CublasHandlePool.cpp,
# parseChosenWorkspaceSize) is ":4096:2:16:8" = 8,519,680 B on every architecture but sm90's 32 MiB (Blackwell
# joined the 32 MiB from torch 2.11, PR #175344), and cuBLAS's own memory is near nothing: vLLM v0.6.4 on an
# RTX 3090 (vLLM #10517) grows non-torch memory by 0.01 GiB across the profile run that makes the first matmul
# (initial_memory_usage 15.34 → memory_usage_post_profile 15.35 GiB, weights 14.99), where the H200 grows 66 MiB.
TORCH_CUBLAS_WORKSPACE_PRE_HOPPER_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
TORCH_CUBLAS_WORKSPACE_32_MIB_BYTES = 4096 * 8 * 1024
CUBLAS_OWN_PRE_HOPPER_GIB = 0.01
CUBLAS_PRE_HOPPER_GIB = TORCH_CUBLAS_WORKSPACE_PRE_HOPPER_BYTES / GIB + CUBLAS_OWN_PRE_HOPPER_GIB


def torch_cublas_workspace_bytes(sm_major: int | None) -> int:
    """PyTorch's default cuBLAS workspace on this architecture: 32 MiB on Hopper, and on Blackwell (sm100, sm120)
    from torch 2.11 (the releases measured here run it), else ":4096:2:16:8"; an unknown GPU is taken as Hopper."""
    major = 9 if sm_major is None else sm_major
    wide = major in (9, 10, 12)
    return TORCH_CUBLAS_WORKSPACE_32_MIB_BYTES if wide else TORCH_CUBLAS_WORKSPACE_PRE_HOPPER_BYTES

# CUDA context = CONTEXT_BASE_GIB + the local memory the driver reserves for every resident thread.
CONTEXT_BASE_GIB = 0.25  # median over seven SGLang logs on six GPU kinds (module docstring), ±0.07
STACK_BYTES_PER_THREAD = 1024  # cudaLimitStackSize's default
MAX_THREADS_PER_SM = {"8.0": 2048, "8.6": 1536, "8.7": 1536, "8.9": 1536, "9.0": 2048, "10.0": 2048,
                      "10.3": 2048, "12.0": 1536, "12.1": 1536}  # CUDA programming guide, per compute capability

# Communicators an engine creates before weights, by TP size, when the GPU kind has no figure of its
# own (gpus.json ``comms_gib_reported``): SGLang's "Init torch distributed ends. mem usage".
PCIE_COMMS_GIB = {2: 0.26, 4: 0.39}  # RTX 4090 TP2 (sglang#16920), RTX PRO 6000 TP4 (sglang#40558)
NVSWITCH_COMMS_GIB = {2: NCCL_TP2_GIB, 4: NCCL_NVSWITCH_TP4_GIB, 8: 2.01}  # H200: measured, vLLM, SGLang PR #11716


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
    # What vLLM's profile run sees its communicators take (lazy NCCL buffers and custom all-reduce
    # included): vLLM ≤ 0.10 charges it to the budget. Defaults to ``nccl``.
    nccl_after_profile: Figure | None = None

    @property
    def profile_nccl(self) -> Figure:
        return self.nccl_after_profile or self.nccl

    @property
    def smi_total_gib(self) -> float:
        return self.nvidia_smi_total_mib * MIB / GIB

    @property
    def free_before_weights_gib(self) -> float:
        """SGLang's F (and vLLM ≥ 0.11's snapshot): torch total − CUDA context − NCCL."""
        return self.torch_total.value - self.cuda_context.value - self.nccl.value

    def as_dict(self) -> dict[str, Any]:
        def fig(f: Figure) -> dict[str, Any]:
            return {"gib": f.value, "how": f.how, **({"source": f.source} if f.source else {})}

        return {"gpu": self.gpu, "nvidia_smi_total_mib": self.nvidia_smi_total_mib,
                "nvidia_smi_total_gib": self.smi_total_gib, "torch_total": fig(self.torch_total),
                "cuda_context": fig(self.cuda_context), "nccl": fig(self.nccl), "cublas": fig(self.cublas),
                **({"nccl_after_profile": fig(self.nccl_after_profile)} if self.nccl_after_profile else {}),
                "free_before_weights_gib": self.free_before_weights_gib, "notes": self.notes}


def _torch_total(g: dict[str, Any], smi_mib: int) -> Figure:
    """torch total_memory: exact bytes if known, else a reported figure, else nvidia-smi − scaled H200 slice."""
    if g.get("torch_total_bytes"):
        how = How.MEASURED if g.get("nvidia_smi_reserved_mib") else How.REPORTED
        return Figure(g["torch_total_bytes"] / GIB, how)
    if g.get("torch_total_gib_reported"):
        return Figure(float(g["torch_total_gib_reported"]), How.REPORTED)
    reserved = smi_mib * H200_RESERVED_MIB / H200_SMI_MIB
    return Figure((smi_mib - reserved) * MIB / GIB, How.ASSUMED)


def _at_or_below(table: dict[int, float], tp_world: int) -> tuple[int, float] | None:
    """(TP size, figure) at the largest listed TP size ≤ tp_world; None when every listed size is larger."""
    below = [t for t in table if t <= tp_world]
    return (max(below), table[max(below)]) if below else None


def nccl_gib(tp_world: int, nvswitch: bool = False, entry: dict[str, Any] | None = None) -> Figure:
    """Communicator memory taken before weights: none for one rank (engines skip the communicator).

    The figure reported at the largest TP size ≤ tp_world, from this GPU kind's own reports or its
    interconnect class's table (NVSwitch: the H200's; otherwise RTX 4090 / RTX PRO 6000 logs), the
    kind's own winning a tie; a figure reported only at a larger TP is never carried down.
    """
    if tp_world <= 1:
        return Figure(0.0, How.MEASURED)
    own_table = {int(k): float(v) for k, v in ((entry or {}).get("comms_gib_reported") or {}).items()}
    own = _at_or_below(own_table, tp_world)
    table = NVSWITCH_COMMS_GIB if nvswitch else PCIE_COMMS_GIB
    key, gib = _at_or_below(table, tp_world) or (2, table[2])
    if own and own[0] >= key:
        return Figure(own[1], How.REPORTED if own[0] == tp_world else How.ASSUMED, f"this GPU kind's report at TP{own[0]}")
    source = f"{'NVSwitch (H200)' if nvswitch else 'no-NVSwitch (PCIe)'} figure at TP{key}"
    h200 = nvswitch and (entry or {}).get("nvidia_smi_reserved_mib") is not None  # the class figures' own kind
    if not h200 or key != tp_world:
        return Figure(gib, How.ASSUMED, source)
    return Figure(gib, How.MEASURED if key == 2 else How.REPORTED, source)


def cuda_context_gib(entry: dict[str, Any], measured_kind: bool) -> Figure:
    """The CUDA context: measured on the H200; else the fixed part plus this kind's local memory."""
    if measured_kind:
        return Figure(CUDA_CONTEXT_GIB, How.MEASURED)
    threads = MAX_THREADS_PER_SM.get(str(entry.get("compute_capability") or ""))
    sms = entry.get("sm_count")
    if not threads or not sms:
        return Figure(CUDA_CONTEXT_GIB, How.ASSUMED)
    return Figure(CONTEXT_BASE_GIB + int(sms) * threads * STACK_BYTES_PER_THREAD / GIB, How.ESTIMATED)


def cublas_gib(entry: dict[str, Any], measured_kind: bool) -> Figure:
    """cuBLAS's handle and workspace: measured on the H200; by architecture elsewhere (Hopper and later carry the
    H200's figure, earlier kinds PyTorch's 8 MiB workspace and the little cuBLAS keeps for itself)."""
    if measured_kind:
        return Figure(CUBLAS_GIB, How.MEASURED)
    major = str(entry.get("compute_capability") or "").split(".")[0]
    if major.isdigit() and torch_cublas_workspace_bytes(int(major)) < TORCH_CUBLAS_WORKSPACE_32_MIB_BYTES:
        return Figure(CUBLAS_PRE_HOPPER_GIB, How.ESTIMATED, "PyTorch's pre-Hopper workspace + cuBLAS's own")
    return Figure(CUBLAS_GIB, How.ASSUMED)


def nvswitch_kind(entry: dict[str, Any]) -> bool:
    """A GPU kind whose servers join 4-8 GPUs through NVSwitch with NVLink 4/5 (multicast capable)."""
    link = str((entry.get("interconnect") or {}).get("gpu_gpu") or "")
    return ("NVLink 4" in link or "NVLink 5" in link) and "bridge" not in link


def resolve_gpu(name: str | None) -> tuple[str, int, dict[str, Any]]:
    """A GPU by catalog name, or a bare size ('80GiB', '97887MiB', '96GB'); (label, smi MiB, entry)."""
    text = str(name or "").strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(mib|gib|gb|g)?", text.lower())
    if m and not m.group(2) and match_gpus(text):
        m = None  # "--gpu 4090" names the RTX 4090, not a 4,090 MiB GPU
    if m:
        value, unit = float(m.group(1)), m.group(2) or "mib"
        mib = int(value if unit == "mib" else value * 1024 if unit in ("gib", "g") else value * 1e9 / MIB)
        if mib < 1024:
            raise InputError(f"GPU size {text!r} is under 1 GiB; give it as e.g. 97887MiB, 80GiB or 96GB")
        return f"{mib} MiB GPU", mib, {}
    g, candidates = pick_gpu(text)
    if g is None and len(candidates) > 1:
        names = ", ".join(c["name"].split(" (")[0] for c in candidates)
        raise InputError(f"GPU {text!r} could be any of: {names}; name one (or give its size, e.g. --gpu 81920MiB)")
    if g is None or not g.get("nvidia_smi_total_mib"):
        hint = did_you_mean(text, gpu_short_names()) if g is None else ""
        if g is None and not hint:  # nothing near: the catalog's names
            hint = "; known: " + ", ".join(x["name"].split(" (")[0] for x in gpus() if x.get("nvidia_smi_total_mib"))
        why = "has no nvidia-smi total in the catalog" if g else "is not in the catalog"
        raise InputError(f"GPU {text!r} {why}{hint} (or give its size instead, e.g. --gpu 97887MiB)")
    return g["name"], int(g["nvidia_smi_total_mib"]), g


def budget_basis(gpu: str, tp_world: int, overrides: dict[str, Any] | None = None) -> BudgetBasis:
    """The basis for one rank of a tp_world-rank job on this GPU kind; overrides win (--set torch_total_gib=…)."""
    overrides = overrides or {}
    label, smi_mib, entry = resolve_gpu(gpu)
    measured_kind = entry.get("nvidia_smi_reserved_mib") is not None
    nvswitch = nvswitch_kind(entry)
    start = nccl_gib(tp_world, nvswitch, entry)
    basis = BudgetBasis(
        label, smi_mib, _torch_total(entry, smi_mib), cuda_context_gib(entry, measured_kind), start,
        cublas_gib(entry, measured_kind),
        nccl_after_profile=_profile_nccl(tp_world, nvswitch, start),
    )
    for key, attr in (("torch_total_gib", "torch_total"), ("cuda_context_gib", "cuda_context"),
                      ("nccl_gib", "nccl"), ("cublas_gib", "cublas")):
        if overrides.get(key) is not None:
            setattr(basis, attr, Figure(float(overrides[key]), How.GIVEN))
            if key == "nccl_gib":
                basis.nccl_after_profile = None
    basis.notes += _basis_notes(basis, tp_world, measured_kind)
    return basis


def _profile_nccl(tp_world: int, nvswitch: bool, start: Figure) -> Figure | None:
    """vLLM's own TP4 report on an H200 (non-torch growth across NCCL start and the profile run) for
    NVSwitch machines at TP ≥ 4, where it exceeds the start-up figure ``start``; None elsewhere."""
    if not nvswitch or tp_world < 4:
        return None
    if start.value >= NCCL_NVSWITCH_TP4_GIB:
        return None
    return Figure(NCCL_NVSWITCH_TP4_GIB, How.REPORTED if tp_world == 4 else How.ASSUMED,
                  "vLLM's own TP4 report on an H200 (NCCL start to the end of its profile run)")


def _basis_notes(basis: BudgetBasis, tp_world: int, measured_kind: bool) -> list[str]:
    """Say which parts of the basis are borrowed, and from where."""
    notes = []
    if basis.torch_total.how == "assumed":
        notes.append("torch total assumed: nvidia-smi total less a slice scaled from the H200's 616 MiB "
                     "(consumer cards lose 0.4–0.5 GiB); expect ±0.3 GiB, or give --set torch_total_gib=…")
    if basis.cuda_context.how == "estimated":
        notes.append(f"CUDA context {basis.cuda_context.value:.2f} GiB estimated from this GPU's SM count "
                     "(fixed part + per-thread local memory; within 0.07 GiB of seven public SGLang logs on six "
                     "GPU kinds)")
    elif not measured_kind and basis.cuda_context.how == "assumed":
        notes.append("CUDA context carried over from the H200 measurement (SM count unknown for this GPU kind)")
    if tp_world > 1 and basis.nccl.how != "given":
        notes.append(f"communicators at {tp_world} ranks: {basis.nccl.value:.2f} GiB ({basis.nccl.how}: "
                     f"{basis.nccl.source or 'start-up figure'})")
    if basis.nccl_after_profile:
        notes.append(f"vLLM ≤ 0.10 charges {basis.nccl_after_profile.value:.2f} GiB of communicator memory instead "
                     f"({basis.nccl_after_profile.source})")
    return notes
