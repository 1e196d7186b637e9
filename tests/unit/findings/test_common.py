"""The engine-neutral checks: a free-memory figure kvscope derived below zero (two runs' or ranks' lines pasted
together give a "free after the pool" of −52 GiB) is said to be a contradiction of the log, not shown as a row."""

from __future__ import annotations

from kvscope.core.provenance import How
from kvscope.core.startup import LedgerRow, Rank, Startup
from kvscope.findings.common import findings


def _startup(*rows: LedgerRow) -> Startup:
    s = Startup(engine="trtllm", file="log.txt")
    r = Rank("rank=0", total_gib=79.1)
    r.ledger = list(rows)
    s.ranks.append(r)
    return s


def test_a_derived_free_figure_below_zero_is_a_contradiction():
    s = _startup(LedgerRow("KV pool", 60.0, How.READ), LedgerRow("left free after the KV pool", -52.0, How.DERIVED))
    (f,) = [f for f in findings(s) if f.code == "log-inconsistent"]
    assert "left free after the KV pool" in f.detail and "-52.00 GiB" in f.detail


def test_a_printed_negative_or_a_derived_positive_is_left_to_the_engine():
    s = _startup(LedgerRow("free after KV pool", -1.0, How.READ), LedgerRow("left free after the KV pool", 3.0, How.DERIVED),
                 LedgerRow("activation peak + non-torch", -0.2, How.DERIVED))
    assert not [f for f in findings(s) if f.code == "log-inconsistent"]
