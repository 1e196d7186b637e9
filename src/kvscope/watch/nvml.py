"""Per-GPU device memory from NVML, when the watched server's GPUs are this machine's.

Optional twice over: ``nvidia-ml-py`` (``pip install 'kvscope[watch]'``) may be absent, and NVML
may be absent or broken (no driver, a container without the device nodes, a CPU-only box). Every
failure turns into "no GPU numbers" with one reason string, never an error: GPU memory is context
for the KV numbers, not the point of watch.
"""

from __future__ import annotations

import contextlib
from typing import Any


class GPUMemory:
    """Reads used/total memory of every visible GPU; ``available`` False with ``reason`` otherwise."""

    def __init__(self, nvml: Any = None) -> None:
        self.available = False
        self.reason = ""
        self._nvml = nvml
        self._handles: list[tuple[int, Any, str]] = []
        self._open()

    def _open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                self.reason = "nvidia-ml-py is not installed (pip install 'kvscope[watch]')"
                return
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            for i in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                name = nvml.nvmlDeviceGetName(handle)
                self._handles.append((i, handle, name.decode() if isinstance(name, bytes) else str(name)))
        except Exception as exc:  # noqa: BLE001 - NVMLError has many subclasses; all mean "no numbers"
            self.reason = f"NVML unavailable ({type(exc).__name__}: {str(exc)[:120]})"
            self._handles = []
            return
        if not self._handles:
            self.reason = "NVML sees no GPU"
            return
        self.available = True

    def read(self) -> list[dict[str, Any]]:
        """[{index, name, used_bytes, total_bytes}] or [] (and ``available`` turns False) on failure."""
        if not self.available:
            return []
        out = []
        try:
            for index, handle, name in self._handles:
                info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append({"index": index, "name": name, "used_bytes": int(info.used), "total_bytes": int(info.total)})
        except Exception as exc:  # noqa: BLE001 - a GPU fallen off the bus must not end the watch
            self.available = False
            self.reason = f"NVML stopped answering ({type(exc).__name__})"
            return []
        return out

    def close(self) -> None:
        if self.available and self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down is best effort
                self._nvml.nvmlShutdown()
        self.available = False
