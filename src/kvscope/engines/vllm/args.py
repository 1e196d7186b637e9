"""vLLM's three ways of stating its configuration: ``non-default args: {…}``, the engine banner
``Initializing a V1 LLM engine (vX) with config: model=…, max_seq_len=…``, and a pasted
``vllm serve MODEL --flag value`` command line. All three become SETTINGS with vLLM's own option
names (``max_model_len``, ``gpu_memory_utilization``, ``tensor_parallel_size`` …) so findings can
name the flag a user would change.
"""

from __future__ import annotations

import ast
import math
import re
import shlex
from typing import Any

# Keys whose values are secrets or noise; never copied into settings (reports get shared in issues).
_SECRET = re.compile(r"(?:^|_)(?:api_key|hf_token|token|secret|password|auth\w*|ssl_\w+|keyfile)$", re.I)
_NOISE = {"model_tag", "served_model_name", "default_chat_template_kwargs", "override_generation_config",
          "chat_template", "middleware", "allowed_origins", "tool_call_parser",
          "reasoning_parser", "enable_auto_tool_choice", "host", "port"}

# Engine-banner fields worth keeping (the banner is long and mostly about tokenizers and tracing).
_BANNER_KEYS = ("model", "dtype", "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size",
                "data_parallel_size", "decode_context_parallel_size", "quantization", "enforce_eager",
                "kv_cache_dtype", "enable_prefix_caching", "chunked_prefill_enabled", "cpu_offload_gb")
_BANNER_FIELD = re.compile(r"(?:^|[ ,(])(" + "|".join(_BANNER_KEYS) + r")=('[^']*'|\"[^\"]*\"|[^,\s)]+)")
_SPEC_CONFIG = re.compile(r"speculative_config=(SpeculativeConfig\([^)]*\)|\{[^}]*\}|None)")
_SPEC_FIELD = re.compile(r"(method|num_spec_tokens|num_speculative_tokens|model)=?:?\s*'?([\w./\-]+)'?")

_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# `vllm serve` flags → option names; flags without a value are booleans.
_FLAGS = {
    "--max-model-len": "max_model_len", "--gpu-memory-utilization": "gpu_memory_utilization",
    "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size", "-pp": "pipeline_parallel_size",
    "--data-parallel-size": "data_parallel_size", "-dp": "data_parallel_size",
    "--kv-cache-dtype": "kv_cache_dtype", "--block-size": "block_size", "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens", "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--kv-cache-memory": "kv_cache_memory_bytes", "--cpu-offload-gb": "cpu_offload_gb",
    "--swap-space": "swap_space", "--quantization": "quantization", "-q": "quantization",
    "--num-gpu-blocks-override": "num_gpu_blocks_override", "--model": "model", "-O": "optimization_level",
    "--kv-offloading-size": "kv_offloading_size",
}
_BOOL_FLAGS = {"--enforce-eager": "enforce_eager", "--enable-prefix-caching": "enable_prefix_caching",
               "--no-enable-prefix-caching": "enable_prefix_caching"}
_INT_KEYS = {"max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "block_size",
             "max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes", "num_gpu_blocks_override"}


def human_int(text: str) -> int | None:
    """vLLM's ``human_readable_int``: k/m/g/t are decimal, K/M/G/T binary ('4M' = 4,194,304)."""
    m = _HUMAN.match(text.strip().replace("_", ""))
    if not m:
        return None
    number, suffix = float(m.group(1)), m.group(2)
    scale = (_DECIMAL.get(suffix) or _BINARY[suffix]) if suffix else 1
    value = number * scale
    return int(value) if math.isfinite(value) and value < 1e18 else None


def _scalar(text: str) -> Any:
    text = text.strip().strip("'\"")
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    if text in ("None", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _sane(value: Any) -> bool:
    """Numbers that can be computed with: finite floats, ints of a printable size."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 10**18
    return True


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Drop secrets and noise, coerce sizes, add the short aliases the rest of kvscope reads."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or _SECRET.search(key) or key in _NOISE or not _sane(value):
            continue
        if key in _INT_KEYS and isinstance(value, str):
            value = human_int(value) if human_int(value) is not None else value
        if isinstance(value, (dict, list, tuple)) and key not in ("speculative_config", "compilation_config",
                                                                  "kv_transfer_config", "limit_mm_per_prompt"):
            continue
        out[key] = value
    if "max_seq_len" in out and "max_model_len" not in out:
        out["max_model_len"] = out.pop("max_seq_len")
    out.pop("max_seq_len", None)
    if "tensor_parallel_size" in out:
        out["tp_size"] = out["tensor_parallel_size"]
    return out


def parse_non_default_args(text: str) -> dict[str, Any]:
    """The dict after ``non-default args:``; a literal when possible, else the scalar ``'k': v`` pairs."""
    start = text.find("{")
    if start < 0:
        return {}
    body = text[start:]
    try:
        value = ast.literal_eval(body)
        if isinstance(value, dict):
            return _normalise(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    pairs = re.findall(r"'(\w+)': ('[^']*'|\"[^\"]*\"|True|False|None|[-+]?[\d.]+(?:[eE][-+]?\d+)?)\s*(?=[,}])", body)
    return _normalise({k: _scalar(v) for k, v in pairs})


def parse_engine_banner(text: str) -> dict[str, Any]:
    """Fields of ``Initializing a V1 LLM engine (vX) with config: …`` that decide memory."""
    raw: dict[str, Any] = {}
    for key, value in _BANNER_FIELD.findall(text):
        raw.setdefault(key, _scalar(value))
    if isinstance(raw.get("dtype"), str):
        raw["dtype"] = raw["dtype"].replace("torch.", "")
    spec = _SPEC_CONFIG.search(text)
    if spec and spec.group(1) != "None":
        fields = {k: _scalar(v) for k, v in _SPEC_FIELD.findall(spec.group(1))}
        if fields:
            raw["speculative_config"] = fields
    return _normalise(raw)


_INLINE_CODE = re.compile(r"`+([^`]*\bvllm serve\b[^`]*)`*")


def parse_command(text: str) -> dict[str, Any]:
    """A pasted ``vllm serve MODEL --flag value …`` line → settings (model under 'model')."""
    if "`" in text:  # inline code: the command is what the backticks hold (a closing one may be glued to a value)
        m = _INLINE_CODE.search(text)
        if m:
            text = m.group(1)
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    if "serve" not in words:
        return {}
    words = words[words.index("serve") + 1 :]
    raw: dict[str, Any] = {}
    if words and not words[0].startswith("-"):
        raw["model"] = words.pop(0)
    i = 0
    while i < len(words):
        word = words[i]
        flag, _, inline = word.partition("=")
        key = _FLAGS.get(flag) or _FLAGS.get(flag.replace("_", "-"))
        if key and (inline or i + 1 < len(words)):
            value = inline or words[i + 1]
            raw[key] = human_int(value) if key in _INT_KEYS and human_int(value) is not None else _scalar(value)
            i += 1 if inline else 2
            continue
        if flag in _BOOL_FLAGS:
            raw[_BOOL_FLAGS[flag]] = not flag.startswith("--no-")
        i += 1
    return _normalise(raw)
