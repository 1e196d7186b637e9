"""``kvscope explain LOG --format prometheus``: the startup ledger and the answer as Prometheus text.

For node_exporter's textfile collector (write it to ``*.prom`` in its directory) and for control planes
that read metrics, not reports. Built from the JSON contract's document (``json_out.to_dict``), so the
two never disagree: every ``*_gib`` figure becomes ``*_bytes`` (GiB × 2^30, to the byte), counts stay counts, a figure
the log does not give is left out (never written as 0). Labels: ``engine``, ``model``, ``startup`` (1, 2…
in time order), ``rank`` as printed, ``pool`` for KV pools; the answer's suggestion is a gauge of the KV
tokens it gives, labelled with the flag and its from / to.
"""

from __future__ import annotations

import math
from typing import Any

from kvscope.render.json_out import to_dict

GIB = 1 << 30

# (metric, contract key, help); rank figures in GiB become bytes
_RANK = [
    ("kvscope_device_total_bytes", "total_gib", "The device's total memory."),
    ("kvscope_pre_load_free_bytes", "pre_load_free_gib", "Free memory before the weights loaded."),
    ("kvscope_weights_bytes", "weights_gib", "Memory the model weights took."),
    ("kvscope_avail_after_weights_bytes", "avail_after_weights_gib", "Free memory after the weights loaded."),
    ("kvscope_activation_peak_bytes", "activation_peak_gib", "Peak activation memory of the engine's profile run."),
    ("kvscope_non_torch_bytes", "non_torch_gib", "Memory outside PyTorch's allocator (NCCL, CUDA context) in the profile."),
    ("kvscope_usable_bytes", "usable_gib", "The engine's memory budget (device total × utilization)."),
    ("kvscope_reserve_bytes", "avail_after_pool_gib", "Free memory left after the KV pool (the reserve for graphs, "
                                                      "activations and other processes)."),
    ("kvscope_cuda_graph_bytes", "cuda_graph_gib", "Memory CUDA graph capture took."),
    ("kvscope_free_at_ready_bytes", "avail_at_ready_gib", "Free memory when the server was ready."),
]
_CAPACITY = [
    ("kvscope_kv_tokens", "kv_tokens", "KV cache capacity in tokens, as the engine counts them."),
    ("kvscope_num_gpu_blocks", "num_gpu_blocks", "KV cache blocks on the GPU."),
    ("kvscope_max_running_requests", "max_running_requests", "The engine's cap on running requests."),
    ("kvscope_max_model_len", "max_model_len", "Longest request the server accepts, in tokens."),
    ("kvscope_max_concurrency", "max_concurrency", "Requests of max_model_len tokens the KV cache holds at once."),
    ("kvscope_available_kv_bytes", "available_kv_gib", "Memory the engine gave the KV cache."),
]


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: dict[str, Any]) -> str:
    kept = {k: v for k, v in pairs.items() if v is not None and v != ""}
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in kept.items()) + "}" if kept else ""


def _value(x: float) -> str:
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 2**53):
        return str(int(x))
    return repr(float(x))


class _Families:
    """Samples grouped by metric: Prometheus' text format wants one HELP / TYPE block per family."""

    def __init__(self) -> None:
        self.help: dict[str, str] = {}
        self.samples: dict[str, list[str]] = {}

    def add(self, name: str, help_text: str, labels: dict[str, Any], value: Any) -> None:
        if value is None or isinstance(value, str):
            return
        if isinstance(value, float) and not math.isfinite(value):
            return
        self.help.setdefault(name, help_text)
        self.samples.setdefault(name, []).append(f"{name}{_labels(labels)} {_value(value)}")

    def text(self) -> str:
        out = []
        for name, lines in self.samples.items():
            out += [f"# HELP {name} {self.help[name]}", f"# TYPE {name} gauge", *lines]
        return "\n".join(out) + "\n"


def render(analysis: Any, extra: dict[str, Any] | None = None) -> str:
    doc = to_dict(analysis, extra)
    fam = _Families()
    for i, s in enumerate(doc["startups"], 1):
        base = {"engine": s.get("engine"), "model": s.get("model"), "startup": str(i)}
        fam.add("kvscope_startup_info", "One per startup read: its engine, release and source file.",
                {**base, "engine_version": s.get("engine_version"), "file": (s.get("source") or {}).get("file")}, 1)
        failure = s.get("failure")
        fam.add("kvscope_startup_failed", "1 when the startup failed; the failure kind is a label.",
                {**base, "kind": failure.get("kind") if failure else None}, 1 if failure else 0)
        cap = s.get("capacity") or {}
        for name, key, help_text in _CAPACITY:
            v = cap.get(key)
            fam.add(name, help_text, base, round(v * GIB) if key.endswith("_gib") and v is not None else v)
        rec = s.get("reconciliation") or {}
        fam.add("kvscope_kv_bytes_per_token", "KV cache bytes per token by the engine's sizing rule.", base,
                rec.get("bytes_per_token"))
        for r in s.get("ranks") or []:
            labels = {**base, "rank": r.get("rank")}
            for name, key, help_text in _RANK:
                v = r.get(key)
                fam.add(name, help_text, labels, round(v * GIB) if v is not None else None)
            for pool in r.get("kv_pools") or []:
                pl = {**labels, "pool": pool.get("name"), "dtype": pool.get("dtype")}
                fam.add("kvscope_kv_pool_tokens", "Tokens a KV pool holds.", pl, pool.get("tokens"))
                gib = pool.get("gib")
                fam.add("kvscope_kv_pool_bytes", "Memory a KV pool takes.", pl, round(gib * GIB) if gib is not None else None)
        for f in s.get("findings") or []:
            fam.add("kvscope_finding", "One per finding: its code and severity.",
                    {**base, "code": f.get("code"), "severity": f.get("severity")}, 1)
        answer = s.get("answer") or {}
        if answer:
            fam.add("kvscope_answer_info", "The answer's situation and how sure it is (explain's first line says it in "
                    "words).", {**base, "situation": answer.get("situation"), "confidence": answer.get("confidence")}, 1)
        sug = answer.get("suggestion")
        if sug:
            fam.add("kvscope_suggested_kv_tokens", "KV tokens the answer's suggested change gives (flag, from, to).",
                    {**base, "flag": sug.get("flag"), "from": sug.get("from"), "to": sug.get("to")},
                    sug.get("kv_tokens_after") if sug.get("kv_tokens_after") is not None else math.nan)
    fam.add("kvscope_startups", "Startups read from the input.", {}, len(doc["startups"]))
    return fam.text()
