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
        self._v1_only = False
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
                info, reserved = self._memory(handle)
                gpu = {"index": index, "name": name, "used_bytes": int(info.used), "total_bytes": int(info.total)}
                if reserved is not None:
                    gpu["reserved_bytes"] = reserved
                out.append(gpu)
        except Exception as exc:  # noqa: BLE001 - a GPU fallen off the bus must not end the watch
            self.available = False
            self.reason = f"NVML stopped answering ({type(exc).__name__})"
            return []
        return out

    def _memory(self, handle: Any) -> tuple[Any, int | None]:
        """NVML's v2 memory info when the driver has it: its ``used`` leaves out the driver's
        reserved memory, as nvidia-smi does (v1 counts it as used: ~600 MiB on an idle H200)."""
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and not self._v1_only:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                return info, int(info.reserved)
            except Exception:  # noqa: BLE001 - old driver: NVMLError_FunctionNotFound and friends
                self._v1_only = True
        return nvml.nvmlDeviceGetMemoryInfo(handle), None

    def close(self) -> None:
        if self.available and self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down is best effort
                self._nvml.nvmlShutdown()
        self.available = False
