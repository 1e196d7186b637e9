"""ollama's whatif: the KV cache, compute buffers and layers on the GPU for another num_ctx,
OLLAMA_NUM_PARALLEL, OLLAMA_KV_CACHE_TYPE, num_gpu or num_batch.

The runner is llama.cpp, so the cache arithmetic is its (``kvscope.engines.llamacpp.whatif``), calibrated on
the runner's logged cache; what ollama adds is how its knobs map onto the runner's and how its scheduler
places layers:

* ``num_ctx`` is per request: the runner's cache is num_ctx × OLLAMA_NUM_PARALLEL cells (ollama starts it
  with ``--ctx-size`` num_ctx × parallel), so each knob scales the cells;
* ``OLLAMA_KV_CACHE_TYPE`` sets K and V together (q8_0, q4_0), and only with OLLAMA_FLASH_ATTENTION=1;
* ``num_gpu`` is the runner's layer count on the GPUs (-ngl), ``num_batch`` its batch (-b / -ub);
* the layers that land on the GPUs follow the scheduler's own estimate from the offload line (memory.available,
  memory.required.full, memory.required.kv, memory.graph.*, memory.weights.*): its KV scales with the cells,
  its graph roughly too (without flash attention it attends over the whole context), the weights do not. That
  part is the scheduler's estimate reproduced, so it is approximate, and says so.

GiB = 2^30 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import Startup, finite_number
from kvscope.engines.llamacpp import whatif as runner
from kvscope.engines.llamacpp.rules import type_size
from kvscope.engines.whatif_base import PredictionError, Scenario, assemble_prediction, normalise_changes

SUPPORTED = {"num_ctx", "num_parallel", "kv_cache_type", "num_gpu", "num_batch"}
ALIASES = {"ollama_context_length": "num_ctx", "context_length": "num_ctx", "ctx": "num_ctx", "n_ctx": "num_ctx",
           "ollama_num_parallel": "num_parallel", "parallel": "num_parallel",
           "ollama_kv_cache_type": "kv_cache_type", "kv_type": "kv_cache_type", "type_k": "kv_cache_type",
           "n_gpu_layers": "num_gpu", "ngl": "num_gpu", "n_batch": "num_batch", "batch": "num_batch"}
FLAGS = {"num_ctx": "num_ctx", "num_parallel": "OLLAMA_NUM_PARALLEL", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE",
         "num_gpu": "num_gpu", "num_batch": "num_batch"}
ENGINE = "ollama"


@dataclass
class Estimate:
    """The scheduler's offload estimate at the logged context (GiB), for placing layers at another one."""

    available_gib: float
    full_gib: float
    kv_gib: float
    graph_gib: float
    weights_gib: float
    layers: int
    offloaded: int


@dataclass
class OllamaCalibration:
    runner: runner.LlamaCalibration | None  # the runner's logged cache, when the log shows it
    cells: int  # num_ctx × parallel at the logged start
    parallel: int
    estimate: Estimate | None
    flash_attn: bool | None
    notes: list[str] = field(default_factory=list)

    @property
    def num_ctx(self) -> int:
        return self.cells // max(1, self.parallel)

    @property
    def bytes_per_cell(self) -> float:
        if self.runner is not None:
            return self.runner.bytes_per_cell
        return self.estimate.kv_gib * runner.GIB / self.cells if self.estimate else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.runner.as_dict() if self.runner is not None else {"kv_tokens": self.cells, "notes": []}
        out.update(num_ctx=self.num_ctx, num_parallel=self.parallel, bytes_per_token=round(self.bytes_per_cell),
                   scheduler_estimate=None if self.estimate is None else dict(self.estimate.__dict__))
        out["notes"] = list(out.get("notes") or []) + self.notes
        return out


def _int(v: Any) -> int | None:
    n = finite_number(v)
    return int(n) if n is not None and n == int(n) and n >= 0 else None


def _float(s: Startup, key: str) -> float | None:
    return finite_number(s.settings.get(key))


def _estimate(s: Startup) -> Estimate | None:
    available, full, kv = (_float(s, f"ollama_memory_{k}_gib") for k in ("available", "required_full", "required_kv"))
    layers, offloaded = _int(s.setting("n_layers_offloadable")), _int(s.setting("n_gpu_layers_offloaded"))
    if not (available and full and kv and layers and offloaded is not None):
        return None
    graph = max(_float(s, "ollama_memory_graph_full_gib") or 0.0, _float(s, "ollama_memory_graph_partial_gib") or 0.0)
    weights = _float(s, "ollama_memory_weights_total_gib") or max(0.0, full - kv - graph)
    return Estimate(available, full, kv, graph, weights, layers, offloaded)


def _cells(s: Startup) -> int | None:
    return (_int(s.capacity.kv_tokens) or _int(s.setting("ctx_size")) or _int(s.setting("ollama_kv_size"))
            or _int(s.setting("n_ctx")))


def can_calibrate(s: Startup) -> bool:
    return bool(_cells(s)) and (runner.can_calibrate(s) or _estimate(s) is not None)


def calibrate(s: Startup) -> OllamaCalibration:
    cells = _cells(s)
    if not cells:
        raise PredictionError("the log shows neither the runner's cache (cells) nor its --ctx-size")
    cal = runner.calibrate(s) if runner.can_calibrate(s) else None
    estimate = _estimate(s)
    if cal is None and estimate is None:
        raise PredictionError("the log shows neither the runner's KV cache nor the scheduler's offload estimate")
    parallel = (_int(s.setting("n_slots")) or _int(s.setting("ollama_parallel")) or _int(s.setting("ollama_num_parallel"))
                or (cal.seqs if cal else 1) or 1)
    fa = s.setting("flash_attn")
    notes = [f"num_ctx {cells // parallel:,} × OLLAMA_NUM_PARALLEL {parallel} = {cells:,} cells"]
    if cal is None:
        notes.append("the runner's cache is not in the log: its size is the scheduler's estimate (memory.required.kv)")
    return OllamaCalibration(cal, cells, parallel, estimate, None if fa is None else fa is True, notes)


def _layers_at(est: Estimate, ratio: float, flash_attn: bool | None) -> tuple[int, float]:
    """(layers on the GPUs, the scheduler's full-model requirement) when the cells scale by ``ratio``."""
    graph = est.graph_gib * (ratio if not flash_attn else 1.0)
    kv = est.kv_gib * ratio
    full = est.full_gib - est.kv_gib - est.graph_gib + kv + graph
    if full <= est.available_gib:
        return est.layers, full
    per_layer_now = (est.weights_gib + est.kv_gib) / est.layers
    per_layer = (est.weights_gib + kv) / est.layers
    if est.offloaded == 0 or per_layer <= 0:
        room = est.available_gib - graph
        return max(0, min(est.layers, int(room // per_layer))) if per_layer > 0 else 0, full
    # calibrated on the split the scheduler chose: the same room, each layer costing its new share
    return max(0, min(est.layers, int(est.offloaded * per_layer_now // per_layer))), full


def predict(cal: OllamaCalibration, changes: dict[str, Any], label: str | None = None) -> Scenario:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "ollama")
    num_ctx = _int(changes.get("num_ctx")) if "num_ctx" in changes else cal.num_ctx
    parallel = _int(changes.get("num_parallel")) if "num_parallel" in changes else cal.parallel
    if not num_ctx or not parallel:
        raise PredictionError("num_ctx and OLLAMA_NUM_PARALLEL take positive whole numbers")
    cells = num_ctx * parallel
    inner: dict[str, Any] = {}
    if cells != cal.cells:
        inner["n_ctx"] = cells
    if parallel != cal.parallel:
        inner["n_seq_max"] = parallel
    notes: list[str] = []
    if "kv_cache_type" in changes:
        kind = str(changes["kv_cache_type"])
        inner["type_k"] = inner["type_v"] = kind
        if kind not in ("f16", "bf16", "f32") and cal.flash_attn is not True:
            notes.append(f"OLLAMA_KV_CACHE_TYPE={kind} takes effect only with OLLAMA_FLASH_ATTENTION=1 (and a model "
                         "that supports flash attention); without it ollama keeps f16")
    if "num_gpu" in changes:
        inner["n_gpu_layers"] = changes["num_gpu"]
    if "num_batch" in changes:
        inner["n_ubatch"] = changes["num_batch"]
    if cal.runner is not None:
        sc = runner.predict(cal.runner, inner, label=label)
    else:
        sc = _from_estimate(cal, inner, label)
    sc.changes = changes
    sc.label = label or (", ".join(f"{k}={v}" for k, v in changes.items()) or "as logged")
    sc.flags = [f"{FLAGS[k]}={v}" if FLAGS[k].startswith("OLLAMA") else f"{FLAGS[k]} {v}"  # env vars are K=V
                for k, v in changes.items()]
    sc.context_tokens = num_ctx
    sc.concurrency_at_context = float(parallel)
    sc.notes = [n.replace("-c is rounded up by llama.cpp", "the runner rounds its cells up")
                for n in sc.notes if not n.startswith("-ngl ")] + notes
    est = cal.estimate
    if est is not None:
        ratio = cells / cal.cells * _type_ratio(cal, inner)
        layers, full = _layers_at(est, ratio, cal.flash_attn)
        if "num_gpu" in changes and _int(changes["num_gpu"]) is not None:
            layers = min(layers, _int(changes["num_gpu"]) or 0)
        sc.approximate = True
        where = "every layer on the GPUs" if layers >= est.layers else f"{layers}/{est.layers} layers on the GPUs"
        sc.notes.append(f"ollama's scheduler would plan ≈ {where} (now {est.offloaded}/{est.layers}): the whole model "
                        f"needs ≈ {full:,.1f} GiB against {est.available_gib:,.1f} GiB available (its estimate, "
                        "scaled: approximate)")
    return sc


def _type_ratio(cal: OllamaCalibration, inner: dict[str, Any]) -> float:
    if "type_k" not in inner:
        return 1.0
    now = cal.runner.type_k if cal.runner is not None else "f16"
    a, b = type_size(now), type_size(str(inner["type_k"]))
    if a is None or b is None:
        raise PredictionError(f"cache type {inner['type_k']!r} is not one kvscope knows the size of (f16, q8_0, q4_0)")
    return b / a


def _from_estimate(cal: OllamaCalibration, inner: dict[str, Any], label: str | None) -> Scenario:
    """Without the runner's cache in the log: the scheduler's KV estimate, scaled."""
    est = cal.estimate
    assert est is not None  # calibrate() refuses a log with neither
    cells = _int(inner.get("n_ctx")) or cal.cells
    kv = est.kv_gib * cells / cal.cells * _type_ratio(cal, inner)
    return Scenario(label=label or "as logged", changes=inner, kv_tokens_low=cells, kv_tokens_high=cells,
                    node_kv_tokens_low=cells, node_kv_tokens_high=cells, context_tokens=None,
                    concurrency_at_context=None, reserve_left_gib=None, reserve_basis="unknown", risk="unknown",
                    risk_words=f"the scheduler's KV estimate becomes ≈ {kv:,.2f} GiB (from {est.kv_gib:,.2f})",
                    flags=[], notes=[f"KV ≈ {kv:,.2f} GiB (the scheduler's estimate, scaled)"], approximate=True)


def standard_scenarios(cal: OllamaCalibration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"num_ctx": cal.num_ctx * 2}, {"num_ctx": max(512, cal.num_ctx // 2)}]
    if cal.parallel > 1:
        out.append({"num_parallel": 1})
    if (cal.runner.type_k if cal.runner is not None else "f16") == "f16":
        out.append({"kv_cache_type": "q8_0"})
    return out


def build_prediction(startup: Startup, changes: dict[str, Any], context: int | None,
                     host_ram_gb: float | None) -> dict[str, Any]:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "ollama")
    cal = calibrate(startup)
    return assemble_prediction(ENGINE, cal, lambda ch, label: predict(cal, ch, label=label),
                               standard_scenarios(cal), changes, ("bytes_per_cell", round(cal.bytes_per_cell)),
                               ("cells_curve", []))


def calibration_line(pred: dict[str, Any]) -> str:
    cal = pred["calibration"]
    head = (f"Calibrated on the logged cache: {cal['kv_tokens']:,} cells × {cal['bytes_per_token']:,} B "
            f"(num_ctx {cal['num_ctx']:,} × OLLAMA_NUM_PARALLEL {cal['num_parallel']})")
    if cal.get("scheduler_estimate"):
        est = cal["scheduler_estimate"]
        head += (f"; the scheduler's estimate: {est['offloaded']}/{est['layers']} layers, "
                 f"{est['full_gib']:,.1f} GiB for all of them against {est['available_gib']:,.1f} GiB available")
    return head
