"""trtllm-build's defaults by release, as data: what an engine was built with when the user did not say.

The runtime buffers and the decoder are sized for the engine's max_batch_size, so a log whose buffers dwarf
the engine usually comes from a build that kept the default. The default moved twice (TensorRT-LLM's release
notes: 256 "by default now" in the June 2024 update, 0.11; 2048 in the September 2024 update, 0.14), so the
value assumed for an unstated build depends on the release the log names, and is the newest when it names none.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.core.versions import parse_version


@dataclass(frozen=True)
class BuildDefault:
    since: tuple[int, int]  # first release (major, minor) with this default
    max_batch_size: int


# oldest first; the newest row applies to a log that names no release
MAX_BATCH_SIZE_DEFAULTS = (
    BuildDefault((0, 11), 256),
    BuildDefault((0, 14), 2048),
)


def default_max_batch_size(version: str | None) -> tuple[int, str] | None:
    """The default max_batch_size for the release, with where it comes from in words; None before 0.11,
    whose default the notes do not give."""
    parsed = parse_version(version)
    release = parsed[:2] if parsed else None
    rows = [r for r in MAX_BATCH_SIZE_DEFAULTS if release is None or release >= r.since]
    if not rows:
        return None
    row = rows[-1]
    since = f"{row.since[0]}.{row.since[1]}"
    where = (f"trtllm-build's default in {version}" if release is not None
             else f"trtllm-build's default since {since} (the log names no release)")
    return row.max_batch_size, where
