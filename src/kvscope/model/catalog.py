"""Built-in facts: model architectures (from src/kvscope/data/models.json) and GPU totals (gpus.json).

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

from kvscope.core.errors import InputError
from kvscope.model.arch import Architecture, architecture_from_config

MAX_CONFIG_BYTES = 16 << 20  # the largest real config.json is tens of KB (a VLM with its processor inlined)


@lru_cache(maxsize=1)
def _models() -> list[dict[str, Any]]:
    return json.loads(resources.files("kvscope.data").joinpath("models.json").read_text())


@lru_cache(maxsize=1)
def gpus() -> list[dict[str, Any]]:
    return json.loads(resources.files("kvscope.data").joinpath("gpus.json").read_text())


def torch_total_gib(g: dict[str, Any]) -> float | None:
    """A catalog card's memory as torch sees it (exact bytes, else a reported figure), GiB; None when unknown."""
    if g.get("torch_total_bytes"):
        return float(g["torch_total_bytes"]) / (1 << 30)
    reported = g.get("torch_total_gib_reported")
    return float(reported) if isinstance(reported, (int, float)) else None


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", name.lower())


# Words a repository name adds to the model it packages: quantization, format, tuning, packaging.
_CHECKPOINT_WORD = re.compile(
    r"(?:awq|gptq|gguf|exl2|exl3|bnb|nf4|marlin|int[48]|w\d+a\d+(?:fp8)?|fp8|fp4|nvfp4|mxfp4|fp16|bf16|\d+bits?|"
    r"i?q\d(?:_k)?(?:_[smlx]+)?|q\d_\d|ud|f16|f32|dynamic|static|block|channel|quantized|autoround|instruct|chat|it|hf|"
    r"\d{4}|v\d+(?:\.\d+)?|mlx|onnx|dense|kv|e4m3|e5m2|sym|asym|g\d+|tp\d+)"
)


_GGUF_FILE = re.compile(r"(?:-\d{5}-of-\d{5})?\.gguf$", re.IGNORECASE)  # a GGUF file (or split part) suffix


def _name_parts(tail: str) -> list[str]:
    """A repository or file name's words, lower case: split on '-' and spaces (GGUF's "Q4_K_M" stays one word),
    a ".gguf" file suffix dropped."""
    return [p for p in re.split(r"[-\s]+", _GGUF_FILE.sub("", tail.strip().lower())) if p]


def model_ids() -> list[str]:
    """Every catalog model's Hugging Face id."""
    return [m["hf_id"] for m in _models()]


def catalog_entry(name: str) -> dict[str, Any] | None:
    """Find a catalog model by id or by a path's last component; quantization suffixes tolerated."""
    if not name:
        return None
    wanted = name.strip().rstrip("/")
    tail = _GGUF_FILE.sub("", wanted.split("/")[-1])
    by_id = {m["hf_id"].lower(): m for m in _models()}
    if wanted.lower() in by_id:
        return by_id[wanted.lower()]
    tails: dict[str, dict[str, Any]] = {}
    for m in _models():
        tails.setdefault(_norm(m["hf_id"].split("/")[-1]), m)
    key = _norm(tail)
    if key in tails:
        return tails[key]
    # "Kimi-K2.5-INT4", "Qwen3-32B-AWQ": a catalog name followed only by words that name a checkpoint's
    # format or tuning, never a different model ("DeepSeek-R1-Distill-Qwen-7B" is not DeepSeek-R1)
    parts = _name_parts(tail)
    for cut in range(len(parts) - 1, 0, -1):
        if all(_CHECKPOINT_WORD.fullmatch(p) for p in parts[cut:]):
            found = tails.get(_norm("".join(parts[:cut])))
            if found is not None:
                return found
        else:
            break
    return None


# What a quantization word in a repository name usually means, for a catalog entry that is the
# unquantized model: the common layout of such checkpoints (4-bit AWQ/GPTQ in groups of 128, FP8 in
# 128×128 blocks as Qwen/DeepSeek ship it). Only a fallback: a config.json says exactly.
_NAME_QUANT = (
    (re.compile(r"awq"), {"quant_method": "awq", "bits": 4, "group_size": 128}),
    (re.compile(r"gptq|int4|w4a16|4bits?|autoround"), {"quant_method": "gptq", "bits": 4, "group_size": 128}),
    (re.compile(r"int8|w8a16|8bits?"), {"quant_method": "gptq", "bits": 8, "group_size": 128}),
    (re.compile(r"nvfp4"), {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}),
    (re.compile(r"mxfp4"), {"quant_method": "mxfp4"}),
    (re.compile(r"fp8|w8a8"), {"quant_method": "fp8", "weight_block_size": [128, 128]}),
    (re.compile(r"bnb|nf4"), {"quant_method": "bitsandbytes"}),
    (re.compile(r"i?q\d(?:_k)?(?:_[smlx]+)?|q\d_\d"), {"quant_method": "gguf"}),  # not modelled: said, not sized
)


def name_quantization(name: str, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The quantization a model name adds to an unquantized catalog entry ("Qwen3-32B-AWQ"), or None."""
    if (entry.get("config") or {}).get("quantization_config"):
        return None
    base = _norm(entry["hf_id"].split("/")[-1])
    parts = _name_parts(name.strip().rstrip("/").split("/")[-1])
    for cut in range(len(parts), 0, -1):
        if _norm("".join(parts[:cut])) == base:
            extra = parts[cut:]
            break
    else:
        return None
    for word in extra:
        for pattern, config in _NAME_QUANT:
            if pattern.fullmatch(word):
                return {**config, "assumed_from_name": name}
    return None


def read_local_config(model: str) -> tuple[dict[str, Any], Path] | None:
    """A local config.json (the file, or the one in a model directory), parsed; None if absent or unreadable."""
    try:
        path = Path(model).expanduser()
        cfg_path = path / "config.json" if path.is_dir() else path
        if not (cfg_path.is_file() and cfg_path.suffix == ".json"):
            return None
    except (OSError, ValueError):  # a name too long to be a path, a NUL byte: not a local file
        return None
    try:
        if cfg_path.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"{cfg_path}: {cfg_path.stat().st_size:,} bytes is no config.json (at most "
                             f"{MAX_CONFIG_BYTES >> 20} MiB)")
        cfg = json.loads(cfg_path.read_text())
    except RecursionError:
        raise InputError(f"{cfg_path}: nests deeper than a config.json can (not read)") from None
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


# Words that say nothing about which GPU it is, and words that may be left out ("A100-SXM4-80GB"
# is the catalog's "A100 80GB (SXM4 / PCIe)"; "H100 80GB HBM3" its "H100 SXM 80GB").
_GPU_NOISE = {"nvidia", "geforce", "tesla", "gpu", "gpus", "graphics", "card", "with", "the"}
_GPU_OPTIONAL = {"sxm", "pcie", "hbm3", "hbm3e", "hbm2e", "edition", "generation", "gen", "class", "superchip",
                 "blackwell", "hopper", "ampere", "lovelace", "ultra"}
_GPU_SIZE = re.compile(r"^(\d+)gb$")


def _gpu_word(word: str) -> str | None:
    """One word of a GPU name as matching sees it; None for a word that names nothing."""
    word = re.sub(r"^([a-z]*\d+)x\d+$", r"\1", word)  # "h100x8" → "h100"
    word = re.sub(r"^sxm\d$", "sxm", word)  # SXM4/SXM5/SXM6 → sxm
    if word in _GPU_NOISE or re.fullmatch(r"\d+x|x\d+|nvl\d+", word):  # counts, "NVL72" racks
        return None
    return word


def _gpu_tokens(text: str) -> list[str]:
    """Lower-case words of a GPU name; '96 GB' becomes '96gb', counts and noise are dropped."""
    text = re.sub(r"(\d+)\s*(?:gb|gib|g)\b", r"\1gb", text.lower())
    return [w for w in map(_gpu_word, re.findall(r"[a-z0-9]+", text)) if w]


def _gpu_score(query: list[str], g: dict[str, Any]) -> int | None:
    """How many query words a catalog GPU carries; None when a word it needs is missing.

    Whole words only, so "H20" never finds the H200 nor "L40" the L40S. A size ("80gb") must match the
    entry's name or nominal size; a form-factor word counts when present but is never required.
    """
    names = [g["name"], *(g.get("aliases") or [])]
    have = {w for n in names for w in _gpu_tokens(n)}
    score, named = 0, False
    for w in query:
        size = _GPU_SIZE.match(w)
        if w in have or size and str(g.get("nominal_gb") or "") == size.group(1):
            score += 1
            named = named or not (size or w in _GPU_OPTIONAL)
        elif size or w not in _GPU_OPTIONAL:
            return None
    return score if named else None  # a size alone ("24 GB GPU") names no GPU


def match_gpus(name: str | None) -> list[dict[str, Any]]:
    """Catalog GPUs that fit a loose name equally well (most words matched), shortest name first."""
    query = _gpu_tokens(name or "")
    if not query:
        return []
    scored = [(sc, g) for g in gpus() if (sc := _gpu_score(query, g)) is not None]
    best = max((sc for sc, _ in scored), default=0)
    return sorted((g for sc, g in scored if sc == best), key=lambda g: len(g["name"]))


def pick_gpu(name: str | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the GPU a name means, the candidates): one match, or the one marked as the kind's default
    variant ("H100" is the SXM part); (None, candidates) when the name is ambiguous ("A100", "RTX 6000")."""
    matches = match_gpus(name)
    if len(matches) == 1:
        return matches[0], matches
    defaults = [g for g in matches if g.get("default_variant")]
    return (defaults[0] if len(defaults) == 1 else None), matches


def find_gpu(name: str | None) -> dict[str, Any] | None:
    """A GPU catalog entry by a loose name ("H100", "RTX PRO 6000", "NVIDIA A100-SXM4-80GB"); None when
    the name is unknown or ambiguous."""
    return pick_gpu(name)[0]


def gpu_short_names() -> dict[str, str]:
    """Short ways to name each catalog GPU ('H200', 'RTX PRO 6000', 'DGX Spark') → the short name shown."""
    out: dict[str, str] = {}
    for g in gpus():
        short = re.sub(r"\s*\(.*?\)", "", g["name"]).replace("NVIDIA ", "").replace("GeForce ", "").strip()
        for form in (short, *(g.get("aliases") or [])):
            out.setdefault(form, short)
        for word in short.split():
            if re.search(r"\d", word) and not re.fullmatch(r"\d+GB", word):
                out.setdefault(word, short)
    return out
