"""The engines' patterns are compiled on first use (kvscope.engines.lazy): each must still compile,
and behave as the compiled pattern does."""

from __future__ import annotations

import importlib
import re

import pytest

from kvscope.engines.lazy import LazyPattern, lazy_compile

MODULES = ["kvscope.engines.sglang.lines", "kvscope.engines.vllm.lines", "kvscope.engines.llamacpp.lines",
           "kvscope.engines.trtllm.lines"]


def _lazy_patterns(value, seen=None):
    seen = seen if seen is not None else set()
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, LazyPattern):
        yield value
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _lazy_patterns(item, seen)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _lazy_patterns(item, seen)


@pytest.mark.parametrize("name", MODULES)
def test_every_pattern_of_an_engine_compiles(name):
    module = importlib.import_module(name)
    found = [p for value in vars(module).values() for p in _lazy_patterns(value)]
    assert len(found) >= 20
    for p in found:
        assert isinstance(p.compiled, re.Pattern)  # the first use compiles it


def test_a_lazy_pattern_is_the_compiled_one():
    p = lazy_compile(r"(?P<n>\d+) tokens", re.I)
    assert "compiled" not in vars(p)  # nothing compiled before the first use
    m = p.search("KV: 512 Tokens")
    assert m is not None and m.group("n") == "512"
    assert p.pattern == r"(?P<n>\d+) tokens" and p.flags & re.I and p.groupindex == {"n": 1}
    assert p.sub("N", "1 tokens, 2 tokens") == "N, N" and p.findall("3 tokens") == ["3"]
    assert vars(p)["search"] == p.compiled.search  # later calls go straight to the compiled pattern
    with pytest.raises(AttributeError):
        p.no_such_method  # noqa: B018
