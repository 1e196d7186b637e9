"""The closed vocabularies of the JSON contract (docs/json-contract.md), as enums."""

from __future__ import annotations

from enum import Enum


class FailureKind(str, Enum):
    """``failure.kind``: one word for what happened, the same for every engine."""

    NOT_ENOUGH_MEMORY = "not-enough-memory"
    MAX_LEN_TOO_LARGE = "max-len-too-large"
    MULTI_INSTANCE_CONTENTION = "multi-instance-contention"
    WEIGHTS_OOM = "weights-oom"
    OOM_CUDA_GRAPH = "oom-cuda-graph"
    COMPUTE_BUFFER_OOM = "compute-buffer-oom"
    KV_CACHE_OOM = "kv-cache-oom"
    OOM_RUNTIME = "oom-runtime"
    HOST_MEMORY = "host-memory"
    KILLED = "killed"
    ENGINE_INIT_FAILED = "engine-init-failed"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


CONTRACT_KINDS = frozenset(k.value for k in FailureKind)
# Kinds where more memory for the KV cache is the wrong direction: the memory is held elsewhere
# (another process) or was short *after* the pool took its share (graphs, serving).
MORE_KV_MEMORY_IS_WRONG = frozenset({FailureKind.MULTI_INSTANCE_CONTENTION.value, FailureKind.OOM_CUDA_GRAPH.value,
                                     FailureKind.OOM_RUNTIME.value, FailureKind.KILLED.value,
                                     FailureKind.COMPUTE_BUFFER_OOM.value, FailureKind.HOST_MEMORY.value})
