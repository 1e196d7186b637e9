"""ollama's default num_ctx by release, as data (envconfig/config.go OLLAMA_CONTEXT_LENGTH; server/routes.go).

A log that prints neither the runner's --ctx-size, nor the load request's NumCtx, nor OLLAMA_CONTEXT_LENGTH
in its `server config` line still came from a release whose default is known; the release is read from the
log (`Listening on … (version X)`) or bounded by the log's date (the newest release out by then).

- up to v0.6.6: 2,048 (the env var from v0.5.13, 2025-02-24);
- v0.6.7 (2025-04-30, "config: update default context length to 4096") to v0.15.4: 4,096;
- from v0.15.5 (2026-02-05, "server: use tiered VRAM-based default context length"): by the sum of the GPUs'
  total VRAM: 4,096 under 23 GiB, 32,768 under 47 GiB, 262,144 from 47 GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvscope.core.versions import Version, parse_version


@dataclass(frozen=True)
class ContextDefault:
    """One era of ollama's default num_ctx: the first release and the date it was tagged."""

    first: Version
    tagged: str  # YYYY-MM-DD
    num_ctx: int | None  # None: tiered by total VRAM (vram_tiered)


ERAS: tuple[ContextDefault, ...] = (
    ContextDefault((0, 0, 0), "0000-00-00", 2048),
    ContextDefault((0, 6, 7), "2025-04-30", 4096),
    ContextDefault((0, 15, 5), "2026-02-05", None),
)
VRAM_TIERS_GIB: tuple[tuple[float, int], ...] = ((47.0, 262144), (23.0, 32768), (0.0, 4096))
_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def vram_tiered(total_vram_gib: float) -> int:
    return next(ctx for floor, ctx in VRAM_TIERS_GIB if total_vram_gib >= floor)


def default_num_ctx(version: str | None, date: str | None, total_vram_gib: float | None) -> tuple[int, str] | None:
    """(num_ctx, how it was chosen) for a load that does not print its context (``date``: the log's YYYY-MM-DD),
    or None when the era's rule needs what the log does not give (the VRAM tier without the GPUs' totals)."""
    parsed = parse_version(version) if version else None
    if parsed is not None:
        era = next(e for e in reversed(ERAS) if parsed >= e.first)
        how = f"ollama {version}'s default"
    elif date and _DATE.fullmatch(date):
        era = next(e for e in reversed(ERAS) if date >= e.tagged)  # ISO dates order as strings
        first = ".".join(map(str, era.first))
        how = (f"the default of the releases out at this log's date ({date}: v{first}+, tagged {era.tagged})"
               if era.tagged != "0000-00-00" else f"the default before v0.6.7 (this log's date, {date})")
    else:
        return None
    if era.num_ctx is not None:
        return era.num_ctx, how
    if total_vram_gib is None:
        return None
    return vram_tiered(total_vram_gib), f"{how}, tiered by {total_vram_gib:,.0f} GiB of total VRAM"
