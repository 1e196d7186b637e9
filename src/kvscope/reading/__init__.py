"""Reading: bytes from files, .gz or stdin → bounded, cleaned text lines (streaming, constant memory)."""

from kvscope.reading.cleanup import clean_line
from kvscope.reading.source import Line, ReadStats, iter_candidate_lines

__all__ = ["Line", "ReadStats", "clean_line", "iter_candidate_lines"]
