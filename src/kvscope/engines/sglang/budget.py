"""SGLang's KV budget from one startup, for kvscope diff: rest = F × mem_fraction_static − W [− draft W].

F is the free memory measured before the weights load, W the weights (from 0.5.14 the draft model's weights
load before the profile and come out of the same budget). The pool is the rest less rope tables and the
allocator's rounding, which the log does not itemize. mem_fraction_static is the logged value, else the one
the user assumed, else the one the pool's size implies (a derivation the report marks).
"""

from __future__ import annotations

from kvscope.core.budget import Deduction, KvBudget, RuleFact, TermKind
from kvscope.core.facts import RankFacts
from kvscope.core.startup import Startup, finite_number
from kvscope.core.versions import parse_version
from kvscope.engines.sglang.eras import ERAS, Era, era_for
from kvscope.engines.sglang.facts import SGLangCapacityFacts


def _era(s: Startup) -> Era | None:
    version = parse_version(s.engine_version)
    if version:
        return era_for(version)
    return next((e for e in ERAS if (s.era or "").split(" ")[0] == e.name), None)  # "E3/E4 (…)" pins none


def kv_budget(s: Startup) -> KvBudget | None:
    r = s.reference_rank
    if r is None:
        return None
    mfs = finite_number(s.setting("mem_fraction_static"))
    if mfs is None:
        mfs = finite_number(SGLangCapacityFacts(s.capacity).implied_mem_fraction_static)
    era = _era(s)
    deductions = [Deduction(TermKind.WEIGHTS, "weights", r.weights_gib)]
    draft = RankFacts(r).draft_weights_gib
    if era is not None and era.draft_in_static_budget and draft is not None:
        deductions.append(Deduction(TermKind.DRAFT, "draft weights (in the static budget from 0.5.14)", draft))
    return KvBudget("free before weights", r.pre_load_free_gib, "mem_fraction_static", mfs, tuple(deductions))


def release_rules(s: Startup) -> tuple[RuleFact, ...]:
    era = _era(s)
    if era is None:
        return ()
    yes = {True: "yes", False: "no"}
    return (RuleFact("era", f"{era.name} ({'.'.join(map(str, era.first))} – {'.'.join(map(str, era.last))})"),
            RuleFact("draft weights inside the static budget", yes[era.draft_in_static_budget]),
            RuleFact("MHA cell uses v_head_dim", yes[era.mha_cell_uses_v_head_dim]),
            RuleFact("draft layers inflate the KV cell", yes[era.draft_cell_inflation]),
            RuleFact("request pool has a padding row", yes[era.request_pool_padding_row]),
            RuleFact("EAGLE reserve in the automatic mem_fraction_static (MiB)", str(era.eagle_reserve_mib)))
