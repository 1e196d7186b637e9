"""SGLang's memory behaviour by release, as data (docs/research/sglang-memory.md §0, §2, §3).

A new release is a new row here, not new code. ``infer_version_range`` reads the wording of the
lines a log holds (each wording has a known first/last release) and the log's dates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# One parser for every engine's release numbers: '0.5.6rc1' is 0.5.6 and 'v0.5.2' is 0.5.2 (the version tuple
# type is core's too). SGLang's modules name them through this one.
from kvscope.core.versions import Version, parse_version  # noqa: F401
from kvscope.engines.shapes import Shape


def fmt(v: Version) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class Era:
    """One era of SGLang's KV sizing."""

    name: str
    first: Version
    last: Version
    mha_cell_uses_v_head_dim: bool  # head_dim + v_head_dim (0.5.7+) vs 2 × head_dim
    eagle_token_headroom: bool  # E0: draft & target get profiled + headroom tokens
    draft_in_static_budget: bool  # E3+: draft weights loaded before the profile
    draft_cell_inflation: bool  # E3+: cell += cell × draft_layers / target_layers
    mla_real_row: bool  # E4: DSA fp8 MLA row uses the real stored width
    request_pool_padding_row: bool  # ≥0.5.14 request pool has size + 1 rows
    eagle_reserve_mib: int  # default mem_fraction_static reserve added for EAGLE


ERAS: tuple[Era, ...] = (
    Era("E0", (0, 3, 0), (0, 5, 6), False, True, False, False, False, False, 2048),
    Era("E1", (0, 5, 7), (0, 5, 9), True, False, False, False, False, False, 2048),
    Era("E2", (0, 5, 10), (0, 5, 13), True, False, False, False, False, False, 4096),
    Era("E3", (0, 5, 14), (0, 5, 17), True, False, True, True, False, True, 0),
    Era("E4", (0, 5, 18), (0, 9, 99), True, False, True, True, True, True, 0),
)

# Wheel build dates (doc §0) to bound the version by the log's own date.
BUILD_DATES: tuple[tuple[str, Version], ...] = (
    ("2025-04-27", (0, 4, 6)),
    ("2025-07-06", (0, 4, 9)),
    ("2025-09-11", (0, 5, 2)),
    ("2025-10-24", (0, 5, 4)),
    ("2025-12-03", (0, 5, 6)),
    ("2026-01-01", (0, 5, 7)),
    ("2026-01-23", (0, 5, 8)),
    ("2026-02-23", (0, 5, 9)),
    ("2026-04-05", (0, 5, 10)),
    ("2026-05-16", (0, 5, 12)),
    ("2026-06-11", (0, 5, 13)),
    ("2026-06-26", (0, 5, 14)),
    ("2026-07-10", (0, 5, 15)),
    ("2026-08-21", (0, 5, 18)),
    ("2026-09-18", (0, 5, 20)),
    ("2026-10-30", (0, 5, 23)),
)

OLDEST: Version = (0, 3, 0)
NEWEST: Version = (0, 9, 99)


def era_for(version: Version) -> Era:
    for era in ERAS:
        if era.first <= version <= era.last:
            return era
    return ERAS[-1] if version > ERAS[-1].last else ERAS[0]


@dataclass
class VersionRange:
    low: Version = OLDEST
    high: Version = NEWEST
    clues: list[str] | None = None

    def narrow(self, low: Version | None, high: Version | None, clue: str) -> None:
        if high and high < OLDEST and self.low == OLDEST:  # a wording older than the table: E0's rules, honestly dated
            self.low, self.high = low or (0, 0, 0), high
            (self.clues if self.clues is not None else []).append(clue)
            return
        if low and low > self.low and low <= self.high:
            self.low = low
        if high and high < self.high and high >= self.low:
            self.high = high
        (self.clues if self.clues is not None else []).append(clue)

    @property
    def eras(self) -> list[Era]:
        if self.high < OLDEST:  # before the first era read: the oldest rules are the nearest
            return [ERAS[0]]
        return [e for e in ERAS if e.last >= self.low and e.first <= self.high]

    def label(self) -> str:
        names = "/".join(e.name for e in self.eras)
        if self.high < OLDEST:
            return f"{names} rules (before {fmt(OLDEST)}: {self.high[0]}.{self.high[1]}.x wording)"
        high = "newest" if self.high == NEWEST else fmt(self.high)
        return f"{names} ({fmt(self.low)} – {high})"


def infer_version_range(features: dict[str, Any], log_date: str | None, rows: Sequence[Shape] = ()) -> VersionRange:
    """Bound the SGLang version from which wordings the log used (doc §7), the dated shape rows that read its
    lines (their releases column, where it says more than the wordings did) and its date."""
    vr = VersionRange(clues=[])
    rules: list[tuple[str, Version | None, Version | None, str]] = [
        ("pool_dtype_field", (0, 5, 13), None, "'KV Cache is allocated. dtype:' (≥0.5.13)"),
        ("using_kv_dtype_line", (0, 5, 4), (0, 5, 12), "'Using KV cache dtype' (0.5.4–0.5.12)"),
        ("load_elapsed", (0, 5, 9), None, "'Load weight end. elapsed=' (≥0.5.9)"),
        ("load_quant", (0, 5, 10), None, "'Load weight end … quant=' (≥0.5.10)"),
        ("load_dtype", None, (0, 5, 9), "'Load weight end … dtype=' (≤0.5.9)"),
        ("load_no_usage", None, (0, 4, 3), "'Load weight end' without mem usage (≤0.4.3)"),
        ("phased_graph_lines", (0, 5, 14), None, "'Capture target decode … graph' (≥0.5.14)"),
        ("old_graph_lines", None, (0, 5, 13), "'Capture cuda graph begin/end' (≤0.5.13)"),
        ("memory_baseline", (0, 5, 23), None, "'Memory baseline taken' (≥0.5.23)"),
        ("server_args_dict", (0, 5, 20), None, "server_args as a dict (≥0.5.20)"),
        ("server_args_repr", None, (0, 5, 18), "server_args=ServerArgs(…) (≤0.5.18)"),
        ("ready_without_gpu_mem", None, (0, 4, 8), "ready line without available_gpu_mem (≤0.4.8)"),
        ("pool_without_tokens", (0, 4, 3), (0, 4, 3), "pool line without #tokens (0.4.3)"),
        ("draft_same_tokens", (0, 5, 7), None, "draft pool has exactly the target's #tokens (≥0.5.7)"),
        ("draft_more_tokens", None, (0, 5, 6), "draft pool has more tokens than the target (≤0.5.6)"),
        ("dsv4_sizing", (0, 5, 12), None, "'DSV4 memory calculation' (DeepSeek-V4, ≥0.5.12)"),
        ("dsv4_fixed_states", (0, 5, 15), None, "V4 sizing with c128_state_fixed (≥0.5.15)"),
        ("gpu_id_prefix", (0, 2, 0), (0, 2, 99), "'[gpu_id=N]' line prefix (0.2.x, before the TP rank prefix)"),
    ]
    for key, low, high, clue in rules:
        if features.get(key):
            vr.narrow(low, high, clue)
    for row in rows:
        first, last = row.release_range or (OLDEST, None)
        tightens = first > vr.low or (last is not None and last < vr.high)
        if tightens and first <= vr.high and (last is None or last >= vr.low):  # a pasted mix contradicts: ignored
            vr.narrow(first, last, f"'{row.name}' line ({row.releases})")
    if log_date:  # a dated stamp only: finish._log_date skips 0.3.x's time-only prefixes
        newest_built = None
        for date, version in BUILD_DATES:
            if date <= log_date[:10]:
                newest_built = version
        if newest_built and log_date[:10] < "2026-12-31":
            vr.narrow(None, _next_release(newest_built), f"log dated {log_date[:10]}")
    return vr


NEWEST_BUILT: Version = max(v for _, v in BUILD_DATES)  # the newest release whose wheel was read


def _next_release(v: Version) -> Version:
    """The newest version that could exist at a date: up to (but excluding) the next listed build."""
    later = [ver for _, ver in BUILD_DATES if ver > v]
    if not later:
        return NEWEST
    nxt = later[0]
    return (nxt[0], nxt[1], nxt[2] - 1) if nxt[2] > 0 else v
