"""llama.cpp's whatif: the KV cache and compute buffers for another -c, -np, -ctk/-ctv, -ngl or -ub.

llama.cpp sizes its cache in cells, not from a memory fraction: ``-c`` cells, each holding every layer's K
and V for one token at the cache types' bytes per element (q8_0 34 B per 32, q4_0 18 B per 32, f16 2 B).
So the calibration is the logged cache: its cells, and its K and V bytes per cell on each device. From it:

* ``-c N``: N cells; each device's KV grows by N ÷ cells (a sliding-window cache, where there is one,
  stays at its window: only the main cache scales);
* ``-ctk`` / ``-ctv``: K (V) bytes scale by the types' bytes per element;
* ``-np N``: the same cells split into N sequences (each request's context is cells ÷ N, unless the cache
  is unified);
* ``-ngl N``: the KV of N repeating layers on the GPUs (equal per layer), the rest in host memory;
* ``-ub N``: compute buffers roughly in proportion to the micro-batch (approximate: they also grow with the
  context unless flash attention is on).

GiB = 2^30 bytes. The engine rounds cells up (to 256 in recent builds): a prediction says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.core.facts import RankFacts
from kvscope.core.startup import Startup, finite_number
from kvscope.engines.llamacpp.facts import LlamaCapacityFacts
from kvscope.engines.llamacpp.rules import type_size
from kvscope.engines.whatif_base import PredictionError, Scenario, assemble_prediction, normalise_changes

SUPPORTED = {"n_ctx", "type_k", "type_v", "n_seq_max", "n_gpu_layers", "n_ubatch"}
ALIASES = {"c": "n_ctx", "ctx_size": "n_ctx", "context": "n_ctx", "num_ctx": "n_ctx", "ctk": "type_k",
           "cache_type_k": "type_k", "ctv": "type_v", "cache_type_v": "type_v", "np": "n_seq_max",
           "parallel": "n_seq_max", "n_parallel": "n_seq_max", "ngl": "n_gpu_layers", "gpu_layers": "n_gpu_layers",
           "ub": "n_ubatch", "ubatch_size": "n_ubatch"}
FLAGS = {"n_ctx": "-c", "type_k": "-ctk", "type_v": "-ctv", "n_seq_max": "-np", "n_gpu_layers": "-ngl",
         "n_ubatch": "-ub"}
GIB = 1 << 30
CPU_DEVICES = ("CPU", "CUDA_Host", "ROCm_Host", "Metal_Mapped", "CPU_Mapped")


@dataclass
class LlamaCalibration:
    cells: int
    seqs: int
    unified: bool
    kv_gib: dict[str, float]  # device → KV GiB of the main cache
    k_share: float  # K's part of a cell's bytes (0.5 when K and V are one type and their split is not logged)
    type_k: str
    type_v: str
    compute_gib: dict[str, float]
    n_ubatch: int | None
    n_layer: int | None
    offloaded: int | None
    flash_attn: bool | None
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_per_cell(self) -> float:
        return sum(self.kv_gib.values()) * GIB / self.cells

    def as_dict(self) -> dict[str, Any]:
        return {"kv_tokens": self.cells, "n_seq_max": self.seqs, "kv_unified": self.unified,
                "bytes_per_token": round(self.bytes_per_cell), "type_k": self.type_k, "type_v": self.type_v,
                "kv_gib_per_device": {k: round(v, 4) for k, v in self.kv_gib.items()},
                "compute_gib_per_device": {k: round(v, 4) for k, v in self.compute_gib.items()},
                "n_ubatch": self.n_ubatch, "n_layer": self.n_layer, "n_gpu_layers_offloaded": self.offloaded,
                "notes": self.notes}


def _int(v: Any) -> int | None:
    n = finite_number(v)
    return int(n) if n is not None and n == int(n) and n >= 0 else None


def can_calibrate(s: Startup) -> bool:
    return bool(s.capacity.kv_tokens) and any(p.size_gib() for r in s.ranks for p in r.kv_pools if p.name == "target")


def calibrate(s: Startup) -> LlamaCalibration:
    cells = s.capacity.kv_tokens
    kv: dict[str, float] = {r.rank: size for r in s.ranks for p in r.kv_pools
                            if p.name == "target" and (size := p.size_gib())}
    if not cells or not kv:
        raise PredictionError("the log shows no KV cache with its cells (llama_kv_cache … cells, K/V MiB)")
    caches = LlamaCapacityFacts(s.capacity).kv_caches or []
    main = next((c for c in caches if c.get("name") == "target"), {})
    type_k = str(s.setting("type_k") or main.get("k_type") or "f16")
    type_v = str(s.setting("type_v") or main.get("v_type") or type_k)
    notes: list[str] = []
    k_gib, v_gib = finite_number(main.get("k_gib")), finite_number(main.get("v_gib"))
    if k_gib and v_gib:
        k_share = k_gib / (k_gib + v_gib)
    else:
        tk, tv = type_size(type_k) or 2.0, type_size(type_v) or 2.0
        k_share = tk / (tk + tv)  # K and V rows of one width: split by their types
        notes.append("K and V sizes not logged apart: split by their types' bytes per element")
    seqs = _int(s.setting("n_seq_max")) or _int(s.setting("n_slots")) or s.capacity.max_running_requests or 1
    unified = str(s.setting("kv_unified")).lower() in ("true", "1")
    compute = {r.rank: g for r in s.ranks if (g := finite_number(RankFacts(r).get("compute_gib"))) is not None}
    if (LlamaCapacityFacts(s.capacity).get("kv_cells_swa") or s.setting("kv_cells_swa")):
        notes.append("a sliding-window cache sits beside the main one: only the main cache scales with -c")
    fa = s.setting("flash_attn")
    notes.append("-c is rounded up by llama.cpp (to a multiple of 256 in recent builds)")
    if compute and str(fa).lower() not in ("1", "true", "on", "enabled"):
        notes.append("without flash attention the compute buffers also grow with -c: their figures are kept as logged")
    return LlamaCalibration(cells, seqs, unified, kv, k_share, type_k, type_v, compute, _int(s.setting("n_ubatch")),
                            _int(s.setting("n_layer")) or _int(s.setting("kv_n_layer")),
                            _int(s.setting("n_gpu_layers_offloaded")),
                            None if fa is None else str(fa).lower() in ("1", "true", "on", "enabled"), notes)


def _type_ratio(old: str, new: str) -> float:
    a, b = type_size(old), type_size(new)
    if a is None or b is None:
        raise PredictionError(f"cache type {new!r} (or the logged {old!r}) is not one kvscope knows the size of")
    return b / a


def predict(cal: LlamaCalibration, changes: dict[str, Any], label: str | None = None) -> Scenario:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "llama.cpp")
    notes: list[str] = []
    approximate = False
    cells = _int(changes.get("n_ctx")) or cal.cells
    if "n_ctx" in changes and not _int(changes["n_ctx"]):
        raise PredictionError("-c takes a number of cells")
    new_v = str(changes.get("type_v", cal.type_v))
    if new_v not in ("f16", "f32", "bf16") and cal.flash_attn is False:
        notes.append(f"a quantized V cache ({new_v}) needs flash attention (-fa on)")
    kv = kv_after(cal, changes, notes)
    approximate = "n_gpu_layers" in changes
    seqs = _int(changes.get("n_seq_max")) or cal.seqs
    per_seq = cells if cal.unified else cells // max(1, seqs)
    compute = dict(cal.compute_gib)
    if "n_ubatch" in changes and cal.n_ubatch and _int(changes["n_ubatch"]):
        approximate = True
        compute = {d: g * _int(changes["n_ubatch"]) / cal.n_ubatch for d, g in compute.items()}  # type: ignore[operator]
        notes.append("compute buffers scaled with the micro-batch (approximate)")
    if "n_ctx" in changes and compute and not cal.flash_attn:
        approximate = True  # the calibration's notes say why, once
    gpu = {d: g for d, g in kv.items() if not d.startswith(CPU_DEVICES)}
    if kv and changes:
        notes.append("KV per device: " + ", ".join(f"{d} {g:.2f} GiB" for d, g in kv.items())
                     + (f"; compute buffers {sum(compute.values()):.2f} GiB" if compute else ""))
    flags = [f"{FLAGS[k]} {v}" for k, v in changes.items()]
    conc = round(cells / per_seq, 2) if per_seq else None
    return Scenario(label=label or (", ".join(f"{k}={v}" for k, v in changes.items()) or "as logged"), changes=changes,
                    kv_tokens_low=cells, kv_tokens_high=cells, node_kv_tokens_low=cells, node_kv_tokens_high=cells,
                    context_tokens=per_seq, concurrency_at_context=conc, reserve_left_gib=None,
                    reserve_basis="unknown", risk="unknown",
                    risk_words=f"the log does not show the GPUs' free memory; the GPUs would hold "
                               f"{sum(gpu.values()):.2f} GiB of KV", flags=flags, notes=notes, approximate=approximate)


def kv_after(cal: LlamaCalibration, changes: dict[str, Any], notes: list[str] | None = None) -> dict[str, float]:
    """Each device's KV GiB under the changes (normalised keys): cells, cache types, offloaded layers."""
    notes = [] if notes is None else notes
    cells = _int(changes.get("n_ctx")) or cal.cells
    k_ratio = _type_ratio(cal.type_k, str(changes["type_k"])) if "type_k" in changes else 1.0
    v_ratio = _type_ratio(cal.type_v, str(changes["type_v"])) if "type_v" in changes else 1.0
    per_cell = cal.k_share * k_ratio + (1 - cal.k_share) * v_ratio
    kv = {d: g * cells / cal.cells * per_cell for d, g in cal.kv_gib.items()}
    if "n_gpu_layers" in changes:
        kv = _offload(cal, kv, _int(changes["n_gpu_layers"]), notes)
    return kv


def _offload(cal: LlamaCalibration, kv: dict[str, float], ngl: int | None, notes: list[str]) -> dict[str, float]:
    """KV of the offloaded layers on the GPUs (equal per layer), the rest in host memory."""
    if ngl is None or not cal.n_layer:
        raise PredictionError("-ngl takes a layer count, and the log must show the model's layer count")
    now = cal.offloaded if cal.offloaded is not None else cal.n_layer
    gpu_total = sum(g for d, g in kv.items() if not d.startswith(CPU_DEVICES))
    host_total = sum(g for d, g in kv.items() if d.startswith(CPU_DEVICES))
    per_layer = (gpu_total + host_total) / cal.n_layer
    on_gpu = min(ngl, cal.n_layer)
    gpus = [d for d in kv if not d.startswith(CPU_DEVICES)] or ["GPU"]
    out = {d: per_layer * on_gpu * (kv.get(d, 0.0) / gpu_total if gpu_total else 1 / len(gpus)) for d in gpus}
    if on_gpu < cal.n_layer:
        out["CPU"] = per_layer * (cal.n_layer - on_gpu)
    notes.append(f"-ngl {ngl}: {on_gpu} of {cal.n_layer} layers' KV on the GPUs (now {min(now, cal.n_layer)}); "
                 "their weights move with them")
    return out


def standard_scenarios(cal: LlamaCalibration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"n_ctx": cal.cells * 2}, {"n_ctx": max(256, cal.cells // 2)}]
    if cal.type_k == "f16":
        out.append({"type_k": "q8_0", "type_v": "q8_0"})
    out.append({"n_seq_max": cal.seqs * 2})
    return out


def build_prediction(startup: Startup, changes: dict[str, Any], context: int | None,
                     host_ram_gb: float | None) -> dict[str, Any]:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "llama.cpp")
    cal = calibrate(startup)
    return assemble_prediction("llamacpp", cal, lambda ch, label: predict(cal, ch, label=label),
                               standard_scenarios(cal), changes, ("bytes_per_cell", round(cal.bytes_per_cell)),
                               ("cells_curve", []))


def calibration_line(pred: dict[str, Any]) -> str:
    cal = pred["calibration"]
    return (f"Calibrated on the logged cache: {cal['kv_tokens']:,} cells × {cal['bytes_per_token']:,} B "
            f"(K {cal['type_k']}, V {cal['type_v']}), {cal['n_seq_max']} sequence(s)")
