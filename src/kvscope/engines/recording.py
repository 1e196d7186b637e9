"""Recorded ``kvscope watch`` lines → events, so ``kvscope explain rec.jsonl server.log`` reads both.

A recording is JSON lines marked ``"kvscope_watch": 1`` (``kvscope.watch.recorder``). A capacity
line starts a startup (BOUNDARY) and says what the server reported: MODEL, VERSION, SETTINGS under
the engine's own option names, CAPACITY under the ledger's field names. Each sample becomes a
RUNTIME event shaped like a vLLM stats line (``src: stats``, usage 0–1, running, queued, tokens,
preempted in the interval, hit_pct) so ``kvscope.runtime`` folds watched samples and logged
samples with the same code. Unreachable / restart / end events become WARNINGs.

The events carry the watched engine's name (vllm / sglang), not "watch": the startup then gets
that engine's finishing rules and findings, like one read from its log. The name is set on this
parser object before ``parse`` returns, which is when the dispatcher stamps it on the events.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import LineContext, Parsed

MARKER = "kvscope_watch"  # key every recorded/streamed JSON line carries, with the format version
FORMAT_VERSION = 1
ANCHORS: tuple[bytes, ...] = (b'"' + MARKER.encode() + b'"',)
ENGINES = ("vllm", "sglang")

_VLLM_SETTINGS = {"memory_fraction": "gpu_memory_utilization", "block_size": "block_size",
                  "kv_cache_memory_bytes": "kv_cache_memory_bytes", "kv_cache_dtype": "kv_cache_dtype",
                  "max_model_len": "max_model_len", "prefix_caching": "enable_prefix_caching"}
_SGLANG_SETTINGS = {"memory_fraction": "mem_fraction_static", "block_size": "page_size",
                    "kv_cache_dtype": "kv_cache_dtype", "max_model_len": "context_length",
                    "max_running_requests": "max_running_requests"}
_SGLANG_EXTRA_SETTINGS = ("tp_size", "pp_size", "dp_size", "chunked_prefill_size", "max_prefill_tokens")


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    v = _num(value)
    return int(v) if v is not None else None


def _dict(value: Any) -> dict[str, Any]:
    """A JSON object as itself; anything else (missing, null, a list…) as an empty one."""
    return value if isinstance(value, dict) else {}


def _capacity(obj: dict[str, Any], engine: str) -> list[Parsed]:
    cap = _dict(obj.get("capacity"))
    stamp = obj.get("time") if isinstance(obj.get("time"), str) else None
    out = [Parsed(ev.BOUNDARY, {"source": "kvscope watch", "url": obj.get("url")}, None, stamp)]
    if isinstance(cap.get("model"), str):
        out.append(Parsed(ev.MODEL, {"model": cap["model"]}, None, stamp))
    if isinstance(cap.get("version"), str):
        out.append(Parsed(ev.VERSION, {"engine_version": cap["version"]}, None, stamp))
    names = _VLLM_SETTINGS if engine == "vllm" else _SGLANG_SETTINGS
    settings = {name: cap[key] for key, name in names.items() if cap.get(key) is not None}
    extras = _dict(cap.get("extras"))
    if engine == "sglang":
        settings.update({k: extras[k] for k in _SGLANG_EXTRA_SETTINGS if isinstance(extras.get(k), int)})
    if settings:
        out.append(Parsed(ev.SETTINGS, settings, None, stamp))
    data: dict[str, Any] = {
        "kv_tokens": _int(cap.get("kv_tokens")),
        "max_running_requests": _int(cap.get("max_running_requests")),
        "max_model_len": _int(cap.get("max_model_len")),
        "max_concurrency": _num(cap.get("max_concurrency")),
        "num_gpu_blocks": _int(cap.get("num_gpu_blocks")),
        "num_cpu_blocks": _int(cap.get("num_cpu_blocks")),
        "watched_url": obj.get("url") if isinstance(obj.get("url"), str) else None,
        "watched_engines": _int(cap.get("engines")),
    }
    if engine == "sglang":
        data["max_total_num_tokens"] = _int(extras.get("max_total_num_tokens"))
        data["context_len"] = _int(cap.get("max_model_len"))
        data["kv_pool_gib"] = _num(extras.get("kv_pool_gib"))
    else:
        data["kv_cache_memory_bytes"] = _int(cap.get("kv_cache_memory_bytes"))
    out.append(Parsed(ev.CAPACITY, {k: v for k, v in data.items() if v is not None}, None, stamp))
    return out


def _sample(obj: dict[str, Any]) -> list[Parsed]:
    stamp = obj.get("time") if isinstance(obj.get("time"), str) else None
    usage = _num(obj.get("kv_usage"))
    running, waiting = _int(obj.get("running")), _int(obj.get("waiting"))
    if usage is None and running is None and waiting is None:
        return []
    hit = _num(obj.get("prefix_hit_rate"))
    # t, usage, running and queued are always present (the runtime stream reads them by key).
    data: dict[str, Any] = {"src": "stats", "t": _epoch(stamp), "usage": usage, "running": running, "queued": waiting}
    extras = _dict(obj.get("extras"))
    optional = {
        "tokens": _int(obj.get("tokens_used")),
        "preempted": _int(obj.get("preemptions")),
        "hit_pct": hit * 100 if hit is not None else None,
        "gen_tps": _num(extras.get("gen_throughput")),
    }
    data.update({k: v for k, v in optional.items() if v is not None})
    return [Parsed(ev.RUNTIME, data, None, stamp)]


def _event(obj: dict[str, Any]) -> list[Parsed]:
    kind = obj.get("event") if isinstance(obj.get("event"), str) else "event"
    if kind == "recovered":
        return []
    message = obj.get("message") if isinstance(obj.get("message"), str) else kind
    return [Parsed(ev.WARNING, {"code": f"watch-{kind}", "message": message}, None, obj.get("time"))]


class WatchLines:
    """EngineLines for ``kvscope watch`` recordings (see the module docstring)."""

    engine = "vllm"
    anchors = ANCHORS

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        start = text.find("{")
        if start < 0 or MARKER not in text:
            return []
        try:
            obj = json.loads(text[start:])
        except ValueError:
            return []
        if not isinstance(obj, dict) or not isinstance(obj.get(MARKER), int):
            return []
        kind = obj.get("type")
        if kind == "capacity":
            engine = obj.get("engine")
            if engine not in ENGINES:
                return []
            ctx.state["watch_engine"] = engine
            self.engine = engine
            return _capacity(obj, engine)
        engine = ctx.state.get("watch_engine")
        if engine is None:
            return []  # samples without their capacity line: no engine to attribute them to
        self.engine = engine
        if kind == "sample":
            return _sample(obj)
        if kind == "event":
            return _event(obj)
        return []

    joins = False

    def wants_join(self, text: str) -> bool:
        return False
