"""Facts beyond the contract fields are typed: every key a report carries in ``extras`` is declared by
its engine's views (core/facts.py), a misspelt fact fails loudly, and only the serialiser and the
store's own methods touch the store by key."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

from kvscope import engines
from kvscope.core.facts import CapacityFacts, Fact, Facts, RankFacts
from kvscope.core.startup import Capacity, Rank
from tests.golden.capture import GOLDEN

SRC = Path(__file__).resolve().parents[2] / "src" / "kvscope"
# The store itself, the contract's serialiser, the holders that declare one (watch's capacity, reading and
# sample) and the reader of recorded watch JSON (a parsed document, not a holder) may name ``.extras``.
STORE_USERS = {"core/facts.py", "core/startup.py", "render/json_out.py", "engines/watch_base.py",
               "engines/recording.py", "watch/sampler.py"}


def _startups(doc):
    if isinstance(doc, dict):
        if isinstance(doc.get("startups"), list):
            yield from doc["startups"]
        for v in doc.values():
            yield from _startups(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _startups(v)


def _golden_docs():
    with gzip.open(GOLDEN) as f:
        golden = json.loads(f.read())
    for name, text in golden.items():
        body = text.split("\n", 1)[1] if text.startswith("exit=") else text
        for chunk in [body, *body.splitlines()]:
            try:
                yield name, json.loads(chunk)
            except ValueError:
                continue


def test_every_extras_key_in_every_golden_report_is_declared():
    undeclared: set[tuple[str, str, str]] = set()
    seen = 0
    for _, doc in _golden_docs():
        for s in _startups(doc):
            engine = engines.get(s.get("engine"))
            for r in s.get("ranks") or []:
                for key in r.get("extras") or {}:
                    seen += 1
                    if not engine.rank_facts.declares(key):
                        undeclared.add((engine.name, "rank", key))
            for key in (s.get("capacity") or {}).get("extras") or {}:
                seen += 1
                if not engine.capacity_facts.declares(key):
                    undeclared.add((engine.name, "capacity", key))
    assert seen > 1000  # the goldens do carry extras: the check has something to check
    assert not undeclared, f"declare these in the engine's facts.py: {sorted(undeclared)}"


def test_a_misspelt_fact_is_an_error_not_an_empty_key():
    r = Rank("0")
    with pytest.raises(AttributeError):
        RankFacts(r).capture_max_batch = 3  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        _ = engines.get("vllm").rank_facts(r).available_kv  # type: ignore[attr-defined]
    assert r.extras == {}


@pytest.mark.parametrize("view", sorted({e.rank_facts for e in engines.REGISTRY.values()}
                                        | {e.capacity_facts for e in engines.REGISTRY.values()}
                                        | {RankFacts, CapacityFacts}, key=lambda c: c.__qualname__))
def test_every_view_is_slotted(view):
    """A view with a __dict__ would take any attribute silently (a subclass that forgot ``__slots__ = ()``)."""
    assert not hasattr(view(Rank("0")), "__dict__")


def test_the_store_keeps_the_order_facts_were_learnt_and_none_is_a_value():
    cap = Capacity()
    f = engines.get("vllm").capacity_facts(cap)
    f.ready = True
    f.kv_cache_memory_bytes = None  # the log named it without a value: the JSON shows null
    f.put("padding_layers", 2)
    assert list(cap.extras) == ["ready", "kv_cache_memory_bytes", "padding_layers"]
    assert f.has(type(f).kv_cache_memory_bytes) and f.kv_cache_memory_bytes is None
    assert not f.has(type(f).hybrid_signal) and f.hybrid_signal is None
    assert f.take("padding_layers") == 2 and f.take("padding_layers") is None
    del f.ready
    assert list(cap.extras) == ["kv_cache_memory_bytes"]


def test_first_wins_and_fill_keeps_what_is_there():
    a, b = Rank("0"), Rank("0")
    fa, fb = RankFacts(a), RankFacts(b)
    fa.put("capture_max_bs", 8, first=True)
    fa.put("capture_max_bs", 16, first=True)
    fb.capture_max_bs, fb.swa_pool_gib = 32, 1.5
    fa.fill_from(fb)
    assert a.extras == {"capture_max_bs": 8, "swa_pool_gib": 1.5}


def test_families_declare_keys_named_from_the_log():
    view = engines.get("trtllm").rank_facts
    assert view.declares("component_sampler_free_before_after_gib")
    assert not view.declares("component_sampler_gib")
    assert "kv_sizing_free_gib" in view.declared() and "graphs" in view.declared()  # its own and the neutral ones


def test_every_fact_has_its_name():
    for view in {e.rank_facts for e in engines.REGISTRY.values()} | {e.capacity_facts for e in engines.REGISTRY.values()}:
        for name, fact in view.declared().items():
            assert isinstance(fact, Fact) and fact.name == name


def test_only_the_store_names_extras():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel in STORE_USERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "extras":
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"read and write facts through the engine's views (core/facts.py): {offenders}"


def test_the_views_are_facts():
    assert issubclass(RankFacts, Facts) and issubclass(CapacityFacts, Facts)
