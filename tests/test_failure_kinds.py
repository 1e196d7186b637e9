"""Each failure kind of the JSON contract, shown by a real log that ends that way (the contract's vocabulary is
the same for every engine; ``docs/json-contract.md``). Kinds no real log in the corpus shows yet are listed in
MISSING_REAL_LOG and checked against the contract, so the list cannot silently go stale."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.core.kinds import CONTRACT_KINDS
from tests.conftest import FIXTURES, case_files

# kind → (fixture case, assumptions): the first startup that fails must fail with that kind
REAL_LOGS = {
    "not-enough-memory": ("harvested/sglang/007", {}),
    "max-len-too-large": ("harvested/vllm/021", {}),
    "weights-oom": ("harvested/vllm/207", {}),
    "oom-cuda-graph": ("harvested/sglang/402", {}),
    "compute-buffer-oom": ("harvested/llamacpp/201", {}),
    "kv-cache-oom": ("harvested/llamacpp/212", {}),
    "killed": ("harvested/vllm/219", {}),
    "engine-init-failed": ("harvested/sglang/006", {}),
}
# no real log in the corpus ends this way yet (their wordings are tested line by line in the engines' tests)
MISSING_REAL_LOG = {"multi-instance-contention", "oom-runtime", "host-memory"}


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
