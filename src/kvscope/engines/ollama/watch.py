"""ollama under ``kvscope watch``: it serves no /metrics and no KV usage; what it does say is which models
are loaded and where they sit. ``/api/ps`` lists each loaded model with ``size`` (bytes the model takes,
weights + KV cache + graph), ``size_vram`` (the part of it on the GPUs) and, from 2025, ``context_length``
(its num_ctx); ``/api/version`` the release. So a sample is the loaded models and their share in VRAM: a
model with part of its size outside VRAM runs those layers on the CPU (what ``ollama ps`` shows as
"19%/81% CPU/GPU"), and a model appearing or leaving is a load or an eviction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.errors import WatchError
from kvscope.engines.watch_base import (
    Capacity,
    MetricsAdapter,
    Reading,
    ReadingFacts,
    ServerClient,
    WatchCapacityFacts,
)


@dataclass(frozen=True)
class LoadedModel:
    """One entry of /api/ps (sizes in bytes, as served)."""

    name: str
    size_bytes: int | None
    vram_bytes: int | None
    context_length: int | None
    expires_at: str | None = None

    @property
    def vram_share(self) -> float | None:
        """The part of the model in GPU memory, 0..1 (1: every layer on the GPUs)."""
        if not self.size_bytes or self.vram_bytes is None:
            return None
        return min(1.0, self.vram_bytes / self.size_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size_bytes": self.size_bytes, "vram_bytes": self.vram_bytes,
                "vram_share": None if self.vram_share is None else round(self.vram_share, 4),
                "context_length": self.context_length, "expires_at": self.expires_at}


@dataclass
class PsPage:
    """A parsed /api/ps answer; ``malformed_lines`` counts entries that were not a model (as /metrics does)."""

    models: list[LoadedModel] = field(default_factory=list)
    malformed_lines: int = 0


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_ps(text: str) -> PsPage:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WatchError(f"/api/ps is not JSON ({exc.msg})") from exc
    entries = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise WatchError("/api/ps has no 'models' list: not an ollama server")
    page = PsPage()
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name") or e.get("model"), str):
            page.malformed_lines += 1
            continue
        page.models.append(LoadedModel(str(e.get("name") or e.get("model")), _int(e.get("size")),
                                        _int(e.get("size_vram")), _int(e.get("context_length")),
                                        e.get("expires_at") if isinstance(e.get("expires_at"), str) else None))
    return page


class OllamaAdapter(MetricsAdapter):
    engine = "ollama"
    metric_prefix = "ollama:"  # ollama serves no /metrics; never matched, kept for the registry's loop
    scrape_path = "/api/ps"

    @staticmethod
    def answers(client: ServerClient) -> bool:
        """ollama answers /api/version with {"version": …} (vLLM's is /version, SGLang has neither)."""
        try:
            data = client.get_json("/api/version")
        except WatchError:
            return False
        return isinstance(data, dict) and isinstance(data.get("version"), str)

    def parse(self, text: str) -> PsPage:
        return parse_ps(text)

    def first_page(self, client: ServerClient) -> PsPage:
        return self.parse(client.get(self.scrape_path).text())

    def capacity(self, client: ServerClient, metrics: PsPage | None) -> Capacity:
        cap = Capacity(engine=self.engine, url=client.shown, metrics=metrics is not None, sources=["/api/version"])
        try:
            data = client.get_json("/api/version")
        except WatchError as exc:
            WatchCapacityFacts(cap).note_unread(exc.message)
        else:
            if isinstance(data, dict) and isinstance(data.get("version"), str):
                cap.version = data["version"]
        if metrics is not None:
            cap.sources.append("/api/ps")
            if metrics.models:
                cap.model = ", ".join(m.name for m in metrics.models)
                cap.max_model_len = metrics.models[0].context_length
            WatchCapacityFacts(cap).loaded_models = [m.as_dict() for m in metrics.models]
        return cap

    def read(self, metrics: PsPage, cap: Capacity) -> Reading:
        r = Reading()
        ReadingFacts(r).loaded_models = [m.as_dict() for m in metrics.models]
        return r


def adapter() -> type:
    """The adapter the registry hands kvscope watch (loaded only when watch runs)."""
    return OllamaAdapter
