"""Built-in facts: model architectures (from ../shared/data/models.json) and GPU totals (gpus.json).

Shipped as package data so ``kvscope plan`` works offline. A model is found by HF id, by the last
part of a path printed in the log (``/models/Kimi-K2.5`` → ``moonshotai/Kimi-K2.5``), or from a
local ``config.json``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from kvscope.capacity.arch import Architecture, architecture_from_config


@lru_cache(maxsize=1)
def _models() -> list[dict[str, Any]]:
    return json.loads(resources.files("kvscope.data").joinpath("models.json").read_text())


@lru_cache(maxsize=1)
def gpus() -> list[dict[str, Any]]:
    return json.loads(resources.files("kvscope.data").joinpath("gpus.json").read_text())


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", name.lower())


def catalog_entry(name: str) -> dict[str, Any] | None:
    """Find a catalog model by id or by a path's last component; quantization suffixes tolerated."""
    if not name:
        return None
    wanted = name.strip().rstrip("/")
    tail = wanted.split("/")[-1]
    by_id = {m["hf_id"].lower(): m for m in _models()}
    if wanted.lower() in by_id:
        return by_id[wanted.lower()]
    tails = {}
    for m in _models():
        tails.setdefault(_norm(m["hf_id"].split("/")[-1]), m)
    key = _norm(tail)
    if key in tails:
        return tails[key]
    # "Kimi-K2.5-INT4", "Qwen3-32B-AWQ": the longest catalog name that prefixes the tail
    best = None
    for cand, m in tails.items():
        if key.startswith(cand) and (best is None or len(cand) > len(best[0])):
            best = (cand, m)
    return best[1] if best else None


def read_local_config(model: str) -> tuple[dict[str, Any], Path] | None:
    """A local config.json (the file, or the one in a model directory), parsed; None if absent or unreadable."""
    path = Path(model).expanduser()
    cfg_path = path / "config.json" if path.is_dir() else path
    if not (cfg_path.is_file() and cfg_path.suffix == ".json"):
        return None
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None
    return (cfg, cfg_path) if isinstance(cfg, dict) else None


def load_architecture(model: str | None) -> tuple[Architecture | None, str]:
    """Architecture for a model path/id: local config.json first, then the catalog. (arch, where from)."""
    if not model:
        return None, ""
    local = read_local_config(model)
    if local is not None:
        cfg, cfg_path = local
        arch = architecture_from_config(cfg, name=str(Path(model).expanduser()))
        if arch:
            return arch, f"config.json at {cfg_path}"
    entry = catalog_entry(model)
    if entry:
        merged = {k: v for k, v in (entry.get("config_extra") or {}).items() if not k.endswith("_note")}
        merged.update({k: v for k, v in entry["config"].items() if v is not None})
        arch = architecture_from_config(merged, name=entry["hf_id"])
        if arch:
            return arch, f"built-in catalog ({entry['hf_id']})"
    return None, ""


def find_gpu(name: str | None) -> dict[str, Any] | None:
    """A GPU catalog entry by a loose name ("H100", "RTX PRO 6000", "H200")."""
    if not name:
        return None
    key = _norm(name)
    best = None
    for g in gpus():
        cand = _norm(g["name"])
        if key in cand and (best is None or len(cand) < len(_norm(best["name"]))):
            best = g
    return best
