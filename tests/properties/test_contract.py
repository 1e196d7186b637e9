"""A validator for ``kvscope explain --format json`` (docs/json-contract.md), and its checks on every real log.

The property, mutation and bad-input tests all end in ``assert_valid(text)``: the output of any input,
however mangled, must still be the documented contract. Kept deliberately small and independent of
kvscope's own code (key lists are written out from the contract, not imported), so a change in
kvscope cannot silently change what is checked.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from kvscope.api import analyze
from kvscope.render import json_out
from tests.conftest import all_cases, case_files

ENGINES = {"sglang", "vllm", "llamacpp", "trtllm"}
SETTINGS_KEYS = ("mem_fraction_static", "tp_size", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len")
RANK_GIB = (
    "total_gib", "pre_load_free_gib", "weights_gib", "avail_after_weights_gib", "activation_peak_gib",
    "non_torch_gib", "usable_gib", "avail_after_pool_gib", "cuda_graph_gib", "avail_at_ready_gib",
)
CAPACITY_INT = ("kv_tokens", "max_total_num_tokens", "max_running_requests", "context_len", "num_gpu_blocks",
                "num_cpu_blocks", "max_model_len")
CAPACITY_NUM = ("available_kv_gib", "max_concurrency")
POOL_NUM = ("gib", "k_gib", "v_gib")


class ContractError(AssertionError):
    pass


def _reject_constant(name: str) -> Any:
    raise ContractError(f"non-JSON number {name} in output")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check(cond: bool, where: str, what: str, errors: list[str]) -> None:
    if not cond:
        errors.append(f"{where}: {what}")


def _opt(v: Any, pred) -> bool:
    return v is None or pred(v)


def _keys(d: Any, keys: tuple[str, ...] | list[str], where: str, errors: list[str]) -> bool:
    if not isinstance(d, dict):
        errors.append(f"{where}: expected an object, got {type(d).__name__}")
        return False
    missing = [k for k in keys if k not in d]
    _check(not missing, where, f"missing keys {missing}", errors)
    return not missing


def _finite_everywhere(v: Any, where: str, errors: list[str]) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        errors.append(f"{where}: non-finite number")
    elif isinstance(v, dict):
        for k, x in v.items():
            _finite_everywhere(x, f"{where}.{k}", errors)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _finite_everywhere(x, f"{where}[{i}]", errors)


def _rank(r: Any, where: str, errors: list[str]) -> None:
    if not _keys(r, ("rank", *RANK_GIB, "kv_pools", "derived"), where, errors):
        return
    _check(isinstance(r["rank"], str) and r["rank"] != "", where, "rank label must be a non-empty string", errors)
    for k in RANK_GIB:
        _check(_opt(r[k], _is_num), where, f"{k} must be a number or null, got {r[k]!r}", errors)
    _check(isinstance(r["derived"], list) and all(isinstance(x, str) for x in r["derived"]), where,
           "derived must be a list of key names", errors)
    if not isinstance(r["kv_pools"], list):
        errors.append(f"{where}: kv_pools must be a list")
        return
    for i, p in enumerate(r["kv_pools"]):
        pw = f"{where}.kv_pools[{i}]"
        if not _keys(p, ("name", "tokens", *POOL_NUM, "dtype"), pw, errors):
            continue
        _check(isinstance(p["name"], str) and p["name"] != "", pw, "pool name must be a non-empty string", errors)
        _check(_opt(p["tokens"], _is_int), pw, f"tokens must be an integer or null, got {p['tokens']!r}", errors)
        for k in POOL_NUM:
            _check(_opt(p[k], _is_num), pw, f"{k} must be a number or null, got {p[k]!r}", errors)
        _check(_opt(p["dtype"], lambda v: isinstance(v, str)), pw, "dtype must be a string or null", errors)


def _startup(s: Any, where: str, errors: list[str]) -> None:
    keys = ("engine", "engine_version", "source", "model", "settings", "ranks", "capacity", "reconciliation",
            "findings", "failure")
    if not _keys(s, keys, where, errors):
        return
    _check(s["engine"] in ENGINES, where, f"engine must be one of {sorted(ENGINES)}, got {s['engine']!r}", errors)
    _check(_opt(s["engine_version"], lambda v: isinstance(v, str)), where, "engine_version: string or null", errors)
    _check(_opt(s["model"], lambda v: isinstance(v, str)), where, "model: string or null", errors)
    src = s["source"]
    if _keys(src, ("file", "first_line", "last_line"), f"{where}.source", errors):
        _check(isinstance(src["file"], str), where, "source.file must be a string", errors)
        ok = _is_int(src["first_line"]) and _is_int(src["last_line"])
        _check(ok, where, "source lines must be integers", errors)
        if ok:
            _check(1 <= src["first_line"] <= src["last_line"], where, f"bad source line range {src}", errors)
    _keys(s["settings"], SETTINGS_KEYS, f"{where}.settings", errors)
    if isinstance(s["ranks"], list):
        for i, r in enumerate(s["ranks"]):
            _rank(r, f"{where}.ranks[{i}]", errors)
    else:
        errors.append(f"{where}: ranks must be a list")
    cap = s["capacity"]
    if _keys(cap, (*CAPACITY_INT, *CAPACITY_NUM), f"{where}.capacity", errors):
        for k in CAPACITY_INT:
            _check(_opt(cap[k], _is_int), where, f"capacity.{k} must be an integer or null, got {cap[k]!r}", errors)
        for k in CAPACITY_NUM:
            _check(_opt(cap[k], _is_num), where, f"capacity.{k} must be a number or null, got {cap[k]!r}", errors)
    rec = s["reconciliation"]
    if rec is not None and _keys(rec, ("bytes_per_token", "kv_tokens_low", "kv_tokens_high", "consistent"),
                                 f"{where}.reconciliation", errors):
        _check(_opt(rec["bytes_per_token"], _is_num), where, "bytes_per_token must be a number or null", errors)
        for k in ("kv_tokens_low", "kv_tokens_high"):
            _check(_opt(rec[k], _is_int), where, f"reconciliation.{k} must be an integer or null, got {rec[k]!r}",
                   errors)
        _check(_opt(rec["consistent"], lambda v: isinstance(v, bool)), where, "consistent: bool or null", errors)
    if isinstance(s["findings"], list):
        for i, f in enumerate(s["findings"]):
            fw = f"{where}.findings[{i}]"
            if not _keys(f, ("code", "severity", "title", "detail", "suggestion"), fw, errors):
                continue
            for k in ("code", "severity", "title", "detail"):
                _check(isinstance(f[k], str), fw, f"{k} must be a string", errors)
            sug = f["suggestion"]
            if sug is not None and _keys(sug, ("flag", "from", "to", "kv_tokens_after"), f"{fw}.suggestion", errors):
                _check(_opt(sug["kv_tokens_after"], _is_int), fw, "kv_tokens_after must be an integer or null", errors)
    else:
        errors.append(f"{where}: findings must be a list")
    fail = s["failure"]
    if fail is not None and _keys(fail, ("kind", "message"), f"{where}.failure", errors):
        _check(isinstance(fail["kind"], str) and isinstance(fail["message"], str), where,
               "failure kind and message must be strings", errors)


def contract_errors(doc: Any) -> list[str]:
    """Every way ``doc`` (parsed JSON) breaks the contract; [] when it holds."""
    errors: list[str] = []
    if not _keys(doc, ("schema", "kvscope_version", "startups"), "$", errors):
        return errors
    _check(doc["schema"] == "kvscope.explain/1", "$", f"schema is {doc['schema']!r}", errors)
    _check(isinstance(doc["kvscope_version"], str), "$", "kvscope_version must be a string", errors)
    _finite_everywhere(doc, "$", errors)
    if not isinstance(doc["startups"], list):
        errors.append("$: startups must be a list")
        return errors
    for i, s in enumerate(doc["startups"]):
        _startup(s, f"$.startups[{i}]", errors)
    inp = doc.get("input")
    if inp is not None and _keys(inp, ("files", "bytes", "lines"), "$.input", errors):
        _check(_is_int(inp["bytes"]) and _is_int(inp["lines"]), "$.input", "bytes and lines must be integers", errors)
    return errors


def assert_valid(text: str) -> dict[str, Any]:
    """Parse ``text`` strictly (no NaN/Infinity) and assert it is the contract; return the document."""
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ContractError(f"output is not JSON: {exc}") from None
    errors = contract_errors(doc)
    if errors:
        raise ContractError("; ".join(errors[:10]))
    return doc


def explain_json(paths: list[str]) -> tuple[str, int]:
    """In-process equivalent of ``kvscope explain PATHS --format json``: (stdout text, exit code)."""
    analysis = analyze(paths)
    text = json_out.render(analysis)
    return text, 0 if analysis.startups else 2


@pytest.mark.parametrize("case", all_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_log_gives_contract_json(case):
    text, code = explain_json(case_files(case))
    doc = assert_valid(text)
    assert code == 0, f"no startup read from {case}"
    assert doc["startups"]


def test_validator_rejects_what_the_contract_forbids():
    good = {"schema": "kvscope.explain/1", "kvscope_version": "0", "startups": []}
    assert contract_errors(good) == []
    with pytest.raises(ContractError):
        assert_valid('{"schema": "kvscope.explain/1", "kvscope_version": "0", "startups": [], "x": NaN}')
    case = all_cases()[0]
    doc = json.loads(explain_json(case_files(case))[0])
    doc["startups"][0]["capacity"]["kv_tokens"] = 1.5
    doc["startups"][0]["ranks"][0]["weights_gib"] = "12"
    errors = " ".join(contract_errors(doc))
    assert "kv_tokens" in errors and "weights_gib" in errors
    del doc["startups"][0]["failure"]
    assert "failure" in " ".join(contract_errors(doc))
