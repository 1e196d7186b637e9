"""kvscope: where did my GPU memory go, why is my KV cache this size, and which flag do I change.

All memory figures are GiB = bytes / 2**30 (what every engine prints, whatever its label says).
"""

__version__ = "0.1.0"

from kvscope.api import Analysis, analyze, read_logs  # noqa: E402
from kvscope.core.startup import KvPool, Rank, Startup  # noqa: E402

__all__ = ["Analysis", "KvPool", "Rank", "Startup", "__version__", "analyze", "read_logs"]
