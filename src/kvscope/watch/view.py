"""What a person sees: a rich Live panel on a terminal, one line per sample elsewhere, then a summary.

The live panel redraws in place (numbers, a usage bar, sparklines of the last minute); when output
is not a terminal (piped to a file, CI), redrawing would fill the file with frames, so the plain
view prints one compact line per sample instead. Both views take the same calls, so the loop does
not care which one it drives.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvscope import engines
from kvscope.engines.watch_base import ReadingFacts, WatchCapacityFacts
from kvscope.watch.adapters import Capacity
from kvscope.watch.sampler import Sample
from kvscope.watch.summary import HIGH, Summary

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 60


def sparkline(values: list[float | None], hi: float | None = None) -> str:
    """Values → block characters, scaled to ``hi`` (or the largest value); gaps stay blank."""
    nums = [v for v in values if v is not None]
    top = hi if hi is not None else (max(nums) if nums else 0)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK[0])
        else:
            out.append(SPARK[min(len(SPARK) - 1, max(0, int(v / top * (len(SPARK) - 1) + 0.5)))])
    return "".join(out)


def bar(fraction: float | None, width: int = 30) -> Text:
    if fraction is None:
        return Text("·" * width, style="dim")
    fraction = min(1.0, max(0.0, fraction))
    filled = int(round(fraction * width))
    style = "red" if fraction >= HIGH else "yellow" if fraction >= 0.7 else "green"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def _n(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _bytes(value: int | None) -> str:
    if value is None:
        return "–"
    if value >= 1 << 30:
        return f"{value / (1 << 30):.2f} GiB"
    return f"{value / (1 << 20):.1f} MiB"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def title(cap: Capacity) -> str:
    name = engines.get(cap.engine).label if cap.engine in engines.REGISTRY else cap.engine
    return f"kvscope watch · {name}{' ' + cap.version if cap.version else ''} · {cap.url}"


def capacity_lines(cap: Capacity) -> list[str]:
    """The capacity the server reported, in the words a person uses."""
    lines = []
    if cap.model:
        lines.append(f"model {cap.model}")
    parts = []
    loaded = WatchCapacityFacts(cap).loaded_models
    if loaded is not None:  # ollama: no KV figures, only where each loaded model sits
        lines.extend(loaded_lines(loaded) or ["no model loaded"])
        lines.append("ollama reports no KV usage: each sample shows the loaded models and their share in VRAM")
        return lines
    if cap.kv_tokens is not None:
        estimated = WatchCapacityFacts(cap).kv_tokens_estimated_from
        text = f"KV capacity {'≈' if estimated else ''}{cap.kv_tokens:,} tokens"
        if estimated:
            text += f" (estimated: {estimated})"
        if cap.num_gpu_blocks is not None and cap.block_size:
            text += f" ({cap.num_gpu_blocks:,} blocks × {cap.block_size})"
        if cap.engines > 1:
            text += f" over {cap.engines} engines"
        parts.append(text)
    else:
        parts.append("KV capacity not reported")
    if cap.max_concurrency is not None and cap.max_model_len:
        parts.append(f"max concurrency {cap.max_concurrency:.2f}× at {cap.max_model_len:,} tokens")
    elif cap.max_model_len:
        parts.append(f"context {cap.max_model_len:,}")
    elif limit := WatchCapacityFacts(cap).max_req_input_len:
        parts.append(f"max request input {limit:,} tokens")
    if cap.max_running_requests is not None:
        parts.append(f"max running {cap.max_running_requests:,}")
    lines.append(" · ".join(parts))
    more = []
    if cap.kv_cache_memory_bytes is not None:
        more.append(f"KV memory {_bytes(cap.kv_cache_memory_bytes)}")
    if (pool := WatchCapacityFacts(cap).kv_pool_gib) is not None:
        more.append(f"KV pool {pool:.2f} GB")
    if cap.memory_fraction is not None:
        more.append(f"{cap.memory_fraction_flag} {cap.memory_fraction:g}")
    if cap.kv_cache_dtype:
        more.append(f"KV dtype {cap.kv_cache_dtype}")
    if more:
        lines.append(" · ".join(more))
    return lines


def _model_parts(m: dict[str, Any]) -> list[str]:
    """One loaded ollama model in words: size, share in VRAM (the rest of its layers run on the CPU), context."""
    parts = []
    if m.get("size_bytes"):
        parts.append(_bytes(m["size_bytes"]))
    share = m.get("vram_share")
    if share is not None:
        parts.append("all in VRAM" if share >= 0.995 else
                     f"{share:.0%} in VRAM, {1 - share:.0%} on the CPU" if share > 0 else "all on the CPU")
    if m.get("context_length"):
        parts.append(f"context {m['context_length']:,}")
    return parts


def loaded_lines(models: list[dict[str, Any]]) -> list[str]:
    return [" · ".join([str(m.get("name")), *_model_parts(m)]) for m in models]


class LiveView:
    """The rich Live panel."""

    def __init__(self, console: Console, interval: float) -> None:
        self.console = console
        self.interval = interval
        self.cap: Capacity | None = None
        self.usage: deque[float | None] = deque(maxlen=HISTORY)
        self.running: deque[float | None] = deque(maxlen=HISTORY)
        self.waiting: deque[float | None] = deque(maxlen=HISTORY)
        self.last: Sample | None = None
        self.status = "connecting…"
        self.count = 0
        self._live: Live | None = None

    def start(self) -> None:
        self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def capacity(self, cap: Capacity) -> None:
        self.cap = cap
        self._refresh()

    def sample(self, s: Sample) -> None:
        self.last = s
        self.count += 1
        self.usage.append(s.kv_usage)
        self.running.append(s.running)
        self.waiting.append(s.waiting)
        self.status = ""
        self._refresh()

    def message(self, text: str) -> None:
        self.status = text
        self._refresh()

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()
            self._live = None

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)

    def _render(self) -> Panel:
        rows: list[Any] = []
        if self.cap is not None:
            rows.extend(Text(line, style="bold" if i == 0 else "") for i, line in enumerate(capacity_lines(self.cap)))
            rows.append(Text(""))
        s = self.last
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="cyan", no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        loaded = ReadingFacts(s).loaded_models if s is not None else None
        if loaded is not None:
            for m in loaded:
                grid.add_row(str(m.get("name")), bar(m.get("vram_share"), 20) + Text(f" in VRAM {_pct(m.get('vram_share'))}"),
                             Text(" · ".join(_model_parts(m))))
            if not loaded:
                grid.add_row("models", "none loaded", "")
            rows.append(grid)
        elif s is not None:
            used = f"{_n(s.tokens_used)} / {_n(s.tokens_capacity)} tokens" if s.tokens_capacity else _n(s.tokens_used)
            grid.add_row("KV usage", bar(s.kv_usage) + Text(f" {_pct(s.kv_usage)}  {used}"),
                         Text(sparkline(list(self.usage), hi=1.0), style="magenta"))
            grid.add_row("running", _n(s.running), Text(sparkline(list(self.running)), style="green"))
            grid.add_row("waiting", Text(_n(s.waiting), style="yellow" if (s.waiting or 0) > 0 else ""),
                         Text(sparkline(list(self.waiting)), style="yellow"))
            pre = "–" if s.preemptions is None else f"+{s.preemptions} this interval · {s.preemptions_total} watched"
            grid.add_row("preempted", Text(pre, style="red" if s.preemptions else ""), "")
            grid.add_row("prefix hit", _pct(s.prefix_hit_rate), "")
            for g in s.gpus:
                frac = g["used_bytes"] / g["total_bytes"] if g.get("total_bytes") else None
                grid.add_row(f"GPU{g['index']}", bar(frac, 20) + Text(
                    f" {_bytes(g['used_bytes'])} / {_bytes(g['total_bytes'])}  {g.get('name', '')}"), "")
            rows.append(grid)
        footer = f"sample {self.count} · every {self.interval:g} s"
        if s is not None:
            footer += f" · {_clock(s.elapsed_s)}"
        footer += " · Ctrl-C to stop"
        rows.append(Text(""))
        rows.append(Text(footer, style="dim"))
        if self.status:
            rows.append(Text(self.status, style="yellow"))
        return Panel(Group(*rows), title=Text(title(self.cap) if self.cap else "kvscope watch"), title_align="left")


class PlainView:
    """One line per sample, for output that is not a terminal."""

    def __init__(self, console: Console, err: Console) -> None:
        self.console = console
        self.err = err

    def start(self) -> None:
        pass

    def capacity(self, cap: Capacity) -> None:
        self.console.print(title(cap), markup=False, highlight=False)
        for line in capacity_lines(cap):
            self.console.print("  " + line, markup=False, highlight=False)

    def sample(self, s: Sample) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(s.t))
        loaded = ReadingFacts(s).loaded_models
        if loaded is not None:  # ollama: the loaded models and their share in VRAM are the whole sample
            self.console.print("  ".join([stamp, *(loaded_lines(loaded) or ["no model loaded"])]), markup=False,
                               highlight=False)
            return
        parts = [stamp, f"kv {_pct(s.kv_usage)}"]
        if s.tokens_capacity:
            parts.append(f"{_n(s.tokens_used)}/{_n(s.tokens_capacity)} tok")
        parts += [f"running {_n(s.running)}", f"waiting {_n(s.waiting)}"]
        if s.preemptions is not None:
            parts.append(f"preempted +{s.preemptions}")
        if s.prefix_hit_rate is not None:
            parts.append(f"hit {_pct(s.prefix_hit_rate)}")
        if s.restarted:
            parts.append("(server restarted)")
        for m in ReadingFacts(s).loaded_models or []:
            parts.append(f"{m.get('name')} vram {_pct(m.get('vram_share'))}")
        for g in s.gpus:
            parts.append(f"gpu{g['index']} {_bytes(g['used_bytes'])}")
        self.console.print("  ".join(parts), markup=False, highlight=False)

    def message(self, text: str) -> None:
        self.err.print(f"kvscope: {text}", markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        pass


class QuietView(PlainView):
    """jsonl on stdout: samples go only to the JSON stream; messages still reach stderr."""

    def capacity(self, cap: Capacity) -> None:
        pass

    def sample(self, s: Sample) -> None:
        pass


def render_summary(console: Console, cap: Capacity | None, summary: Summary, ended: str) -> None:
    """The runtime summary and verdict printed when the watch ends."""
    d = summary.as_dict()
    code, sentence = summary.verdict()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="cyan", no_wrap=True)
    grid.add_column()
    grid.add_row("watched", f"{_clock(summary.watched_s)} · {summary.samples} samples · {ended}")
    if summary.peak_usage is not None:
        grid.add_row("KV usage", f"peak {_pct(d.get('peak_usage'))} · p95 {_pct(d.get('p95_usage'))} · "
                                 f"median {_pct(d.get('p50_usage'))}")
        if cap is not None and cap.kv_tokens and summary.peak_tokens is not None:
            grid.add_row("tokens", f"peak {summary.peak_tokens:,} of {cap.kv_tokens:,}")
        grid.add_row(f"above {HIGH:.0%}", f"{summary.above_high_s:.1f} s ({summary.share(summary.above_high_s):.0%})")
    grid.add_row("queueing", f"waiting > 0 for {summary.waiting_time_s:.1f} s "
                             f"({summary.share(summary.waiting_time_s):.0%}) · peak {summary.waiting_peak} waiting · "
                             f"peak {summary.running_peak} running")
    grid.add_row("preemptions", str(summary.preemptions) if summary.preemptions_seen else "not reported")
    if d.get("prefix_hit_rate") is not None:
        grid.add_row("prefix hit", _pct(d["prefix_hit_rate"]))
    if summary.restarts:
        grid.add_row("restarts", str(summary.restarts))
    for idx, used in sorted(summary.gpu_peak_bytes.items()):
        grid.add_row(f"GPU{idx} peak", _bytes(used))
    style = {"capacity-bound": "bold red", "queue-bound": "bold yellow"}.get(code, "bold green")
    body = Group(grid, Text(""), Text(sentence, style=style))
    console.print(Panel(body, title="kvscope watch · summary", title_align="left"))
