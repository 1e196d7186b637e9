"""kvscope diff on real pairs of startups (tests/fixtures/pairs: two startups from one poster or thread, where one
or two things changed; sources in each meta.json): the waterfall's terms sum to the observed difference exactly,
the capacities are the ones the logs printed, the change the thread names is named, and whatif from A predicts B
within 2 % where the pair's expectation (``kvscope_expect`` in meta.json, written from the thread) says it should.
"""

from __future__ import annotations

import json

import pytest

from kvscope.analysis.diff import diff
from kvscope.api import analyze
from tests.conftest import FIXTURES

PAIRS = sorted(p.parent for p in (FIXTURES / "pairs").glob("*/meta.json"))


def _pair(case):
    meta = json.loads((case / "meta.json").read_text())
    a = analyze([str(case / meta["files"][0])]).startups
    b = analyze([str(case / meta["files"][1])]).startups
    return meta, diff(a[-1], b[-1])


def test_the_corpus_has_pairs_of_several_engines():
    engines = {json.loads((c / "meta.json").read_text())["engine"].split()[0] for c in PAIRS}
    assert len(PAIRS) >= 7 and {"vllm", "sglang", "llamacpp"} <= engines


@pytest.mark.parametrize("case", PAIRS, ids=lambda p: p.name[:48])
def test_terms_sum_to_the_observed_difference(case):
    meta, d = _pair(case)
    if d.observed_tokens is not None:
        assert d.explained_tokens == d.observed_tokens, [(t.kind, t.tokens) for t in d.terms]
    else:  # no token count in one log: the memory terms sum to the KV memory's change
        assert d.a.kv_gib is not None and d.b.kv_gib is not None
        assert abs(sum(t.gib or 0 for t in d.terms) - (d.b.kv_gib - d.a.kv_gib)) < 1e-9
    printed = meta["observed"]
    for side, seen in (("a", d.a), ("b", d.b)):
        if "kv_tokens" in printed[side]:
            assert seen.kv_tokens == printed[side]["kv_tokens"]


@pytest.mark.parametrize("case", PAIRS, ids=lambda p: p.name[:48])
def test_the_change_the_thread_names_is_named(case):
    meta, d = _pair(case)
    named = {c.what for c in d.changes}
    assert set(meta["kvscope_expect"]["changes_named"]) <= named, named


@pytest.mark.parametrize("case", PAIRS, ids=lambda p: p.name[:48])
def test_the_release_rule_the_thread_names_is_named(case):
    """Where the thread's resolution is a rule the release changed (vLLM 0.2.5's peak-memory profiling), the diff
    names that rule beside the release."""
    meta, d = _pair(case)
    named = {r.rule for r in d.rule_changes}
    assert set(meta["kvscope_expect"].get("rules_named", [])) <= named, named


@pytest.mark.parametrize("case", PAIRS, ids=lambda p: p.name[:48])
def test_whatif_from_a_predicts_b(case):
    meta, d = _pair(case)
    expect = meta["kvscope_expect"]["prediction"]
    if expect == "none":
        assert d.predicted is None
    elif expect == "holds":
        assert d.predicted is not None and abs(d.predicted.error) <= 0.02, d.predicted
    else:  # the thread shows the flag was not the only difference: the diff must say the prediction fails
        assert d.predicted is not None and abs(d.predicted.error) > 0.02
