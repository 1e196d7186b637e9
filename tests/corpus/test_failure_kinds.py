"""Each failure kind of the JSON contract, shown by a real log that ends that way (the contract's vocabulary is
the same for every engine; ``docs/json-contract.md``). Kinds no real log in the corpus shows yet are listed in
MISSING_REAL_LOG and checked against the contract, so the list cannot silently go stale."""

from __future__ import annotations

import json

import pytest

from kvscope.api import analyze
from kvscope.core.kinds import CONTRACT_KINDS
from tests.conftest import FIXTURES, case_files

# kind → (fixture case, assumptions): the first startup that fails must fail with that kind
REAL_LOGS = {
    "not-enough-memory": ("harvested/sglang/007", {}),
    "max-len-too-large": ("harvested/vllm/021", {}),
    "multi-instance-contention": ("harvested/vllm/511", {}),
    "weights-oom": ("harvested/vllm/207", {}),
    "oom-cuda-graph": ("harvested/sglang/402", {}),
    "compute-buffer-oom": ("harvested/llamacpp/201", {}),
    "kv-cache-oom": ("harvested/llamacpp/212", {}),
    "oom-runtime": ("harvested/sglang/512", {}),
    "host-memory": ("harvested/sglang/510", {}),
    "killed": ("harvested/vllm/219", {}),
    "engine-init-failed": ("harvested/sglang/006", {}),
}
# no real log in the corpus ends this way yet (their wordings are tested line by line in the engines' tests)
MISSING_REAL_LOG: set[str] = set()


def _case(ref: str):
    group, engine, prefix = ref.split("/")
    return next((FIXTURES / group / engine).glob(f"{prefix}-*"))


@pytest.mark.parametrize("kind", sorted(REAL_LOGS))
def test_a_real_log_fails_with_each_kind(kind):
    ref, assumptions = REAL_LOGS[kind]
    kinds = [s.failure.kind for s in analyze(case_files(_case(ref)), assumptions).startups if s.failure]
    assert kinds and kinds[0] == kind, (ref, kinds)


def test_the_table_covers_the_contract():
    assert set(REAL_LOGS) | MISSING_REAL_LOG == set(CONTRACT_KINDS)
    assert not set(REAL_LOGS) & MISSING_REAL_LOG


def _expected_kinds() -> list[tuple[str, object]]:
    """Every harvested case whose meta.json says which failure kind its log shows (null: none of its startups
    fails, though the thread may name one the log does not show)."""
    out = []
    for meta in sorted((FIXTURES / "harvested").glob("*/*/meta.json")):
        truth = json.loads(meta.read_text()).get("ground_truth") or {}
        if "failure_kind" in truth:
            out.append((str(meta.parent.relative_to(FIXTURES)), truth["failure_kind"]))
    return out


@pytest.mark.parametrize(("case", "kind"), _expected_kinds())
def test_the_kind_meta_json_names(case, kind):
    """The expectation is data beside the log: the last startup that fails has that kind, or none fails."""
    kinds = [s.failure.kind for s in analyze(case_files(FIXTURES / case), {}).startups if s.failure]
    assert (kinds[-1] if kinds else None) == kind, (case, kinds)
