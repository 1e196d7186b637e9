"""The watch loop: connect, read capacity once, sample on a fixed cadence, and end cleanly.

Network trouble is normal life for a long watch, so every failure has one of three outcomes, and
all of them end in a message and (once sampling started) a summary, never a hang or a traceback:

* retry with exponential backoff: refused connections, timeouts, 5xx, a malformed page, a
  restarting server. At start for up to ``--wait`` seconds (a server still loading), during the
  watch for up to ``--give-up`` seconds (a restart); then stop.
* stop at once: a refused API key, an untrusted certificate, a URL that is not an engine.
* a restart (counters went down or the process start time changed): capacity is re-read, the
  recording gets a new capacity line, and the totals keep counting.

Exit codes: 0 watched until ``--duration`` or Ctrl-C; 2 could not start watching (nothing to
sample); 3 the server went away or refused us mid-watch (the summary is still printed).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvscope.core.redact import redact_text, redact_value
from kvscope.core.text import visible
from kvscope.engines.watch_base import ReadingFacts
from kvscope.reading import prom
from kvscope.watch.adapters import Adapter, Capacity, detect
from kvscope.watch.http import Client, WatchError, is_loopback
from kvscope.watch.nvml import GPUMemory
from kvscope.watch.recorder import Recorder
from kvscope.watch.sampler import Sample, Sampler
from kvscope.watch.summary import Summary

BACKOFF_START = 0.5
BACKOFF_MAX = 10.0

EXIT_OK, EXIT_START, EXIT_LOST, EXIT_INTERRUPTED = 0, 2, 3, 130


class View(Protocol):
    def start(self) -> None: ...
    def capacity(self, cap: Capacity) -> None: ...
    def sample(self, s: Sample) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


@dataclass
class Options:
    url: str
    interval: float = 2.0
    duration: float | None = None
    api_key: str | None = None
    timeout: float = 10.0
    wait: float = 0.0
    give_up: float = 30.0
    insecure: bool = False
    gpus: bool | None = None  # None: when the server is on this machine
    redact: bool = True  # what the server tells (model paths, ids) redacted like explain's reports


@dataclass
class Result:
    exit_code: int
    ended: str  # why the watch ended, in words
    capacity: Capacity | None = None
    summary: Summary = field(default_factory=Summary)
    error: str | None = None


class _Stop(BaseException):
    """SIGTERM: end like Ctrl-C (summary and all), so `timeout kvscope watch …` still reports. A BaseException, as
    KeyboardInterrupt is, so that no `except Exception` it passes through (NVML's error handling) can swallow it."""


class _Told:
    """The view, behind which every message reaches the user redacted and with its controls and escapes shown, not
    acted on: a message often quotes the server's own answer (an error page, a model id)."""

    def __init__(self, view: View, redact: bool) -> None:
        self.view, self.redact = view, redact

    def start(self) -> None:
        self.view.start()

    def capacity(self, cap: Capacity) -> None:
        self.view.capacity(cap)

    def sample(self, s: Sample) -> None:
        self.view.sample(s)

    def message(self, text: str) -> None:
        self.view.message(said(text, self.redact))

    def stop(self) -> None:
        self.view.stop()


def said(text: str, redact: bool = True) -> str:
    """A server-supplied text as it may be shown: redacted (unless told not to), controls shown as escapes."""
    return visible(redact_text(text) if redact else text)


def told(cap: Capacity, redact: bool = True) -> Capacity:
    """The capacity a server reported as it may be shown and recorded: its strings redacted (a model at
    /home/alice/… becomes ~/…, a token-shaped id a mark) and stripped of what a terminal acts on."""
    safe = redact_value(cap) if redact else cap
    for name in ("model", "version", "kv_cache_dtype", "engine"):
        value = getattr(safe, name)
        if isinstance(value, str):
            setattr(safe, name, visible(value))
    return safe


class Watch:
    """One watch of one server; ``run`` never raises for network reasons."""

    def __init__(self, opts: Options, view: View, recorder: Recorder,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 gpu_factory: Callable[[], GPUMemory] = GPUMemory) -> None:
        self.opts = opts
        self.view: View = _Told(view, opts.redact)
        self.recorder = recorder
        self.clock = clock
        self.sleep = sleep
        self.gpu_factory = gpu_factory
        self.client = Client(opts.url, opts.api_key, opts.timeout, opts.insecure)
        self.summary = Summary()
        self.cap: Capacity | None = None
        self.adapter: Adapter | None = None
        self.gpu: GPUMemory | None = None
        self.stop_requested = False  # SIGTERM seen: the loop ends at its next turn even if the exception was lost

    # -- connecting ---------------------------------------------------------------------------
    def _connect(self) -> tuple[Adapter, Capacity, prom.Metrics | None]:
        deadline = self.clock() + max(0.0, self.opts.wait)
        delay = BACKOFF_START
        while True:
            try:
                adapter, metrics = detect(self.client)
                return adapter, told(adapter.capacity(self.client, metrics), self.opts.redact), metrics
            except WatchError as exc:
                left = deadline - self.clock()
                if not exc.retry:
                    raise
                if left <= 0:
                    hint = (" (pass --wait SECONDS to wait for a server that is still starting)"
                            if self.opts.wait <= 0 else f"; gave up after waiting {self.opts.wait:g} s")
                    raise WatchError(exc.message + hint) from None
                pause = min(delay, left)
                self.view.message(f"{exc.message}; retrying in {pause:.1f} s")
                self.sleep(pause)
                delay = min(delay * 2, BACKOFF_MAX)

    # -- running ------------------------------------------------------------------------------
    def run(self) -> Result:
        restore = self._trap_sigterm()
        self.view.start()
        try:
            return self._run()
        except (KeyboardInterrupt, _Stop):
            if not self.summary.samples:
                return self._finish(EXIT_INTERRUPTED, "stopped before the first sample")
            return self._finish(EXIT_OK, "stopped by the user")
        finally:
            self.view.stop()
            if self.gpu is not None:
                self.gpu.close()
            restore()

    def _run(self) -> Result:
        try:
            self.adapter, self.cap, metrics = self._connect()
        except WatchError as exc:
            return self._finish(EXIT_START, "could not start watching", exc.message)
        self._announce_capacity()
        if metrics is None or not self.cap.metrics:
            return self._finish(EXIT_START, "no usage metrics", (
                f"{self.cap.url} serves no /metrics, so usage cannot be sampled; the capacity above is what "
                "its server info says (start SGLang with --enable-metrics to watch usage)"))
        self._open_gpus()
        return self._sample_loop(metrics)

    def _sample_loop(self, first: prom.Metrics) -> Result:
        assert self.adapter is not None and self.cap is not None
        started = self.clock()
        sampler = Sampler(started=started)
        metrics: prom.Metrics | None = first
        scrape_s: float | None = None
        failing_since: float | None = None
        delay = BACKOFF_START
        next_tick = started
        while True:
            if self.stop_requested:  # the signal's exception was swallowed somewhere below us: end as it asked
                raise _Stop()
            now = self.clock()
            if self.opts.duration is not None and now - started >= self.opts.duration:
                return self._finish(EXIT_OK, f"--duration {self.opts.duration:g} s reached")
            if metrics is None:
                try:
                    resp = self.client.get(self.adapter.scrape_path)
                    metrics, scrape_s = self.adapter.parse(resp.text()), resp.elapsed_s
                except WatchError as exc:
                    if not exc.retry:
                        return self._finish(EXIT_LOST, "the server refused us mid-watch", exc.message)
                    failing_since = failing_since if failing_since is not None else now
                    down = now - failing_since
                    if down == 0:
                        self.recorder.write("event", event=exc.kind, message=exc.message)
                    if down >= self.opts.give_up:
                        return self._finish(EXIT_LOST, "the server stopped answering", (
                            f"{exc.message}; no answer for {down:.0f} s (--give-up {self.opts.give_up:g}), stopping"))
                    pause = min(delay, max(0.05, self.opts.give_up - down))
                    if self.opts.duration is not None:
                        pause = min(pause, max(0.05, started + self.opts.duration - now))
                    self.view.message(f"{exc.message}; retrying in {pause:.1f} s "
                                      f"(giving up after {self.opts.give_up:g} s without an answer)")
                    self.sleep(pause)
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
            if failing_since is not None:
                gap = self.clock() - failing_since
                self.recorder.write("event", event="recovered", message=f"answering again after {gap:.1f} s")
                self.view.message(f"server answering again after {gap:.1f} s")
                failing_since, delay = None, BACKOFF_START
            self._take(sampler, metrics, scrape_s)
            metrics = None
            next_tick += self.opts.interval
            now = self.clock()
            if next_tick < now:  # a slow scrape: do not try to catch up with a burst
                if scrape_s is not None and scrape_s > self.opts.interval:
                    self.view.message(f"the last scrape took {scrape_s:.1f} s, longer than the "
                                      f"{self.opts.interval:g} s interval")
                next_tick = now
            wake = next_tick
            if self.opts.duration is not None:
                wake = min(wake, started + self.opts.duration)
            if wake > now:
                self.sleep(wake - now)

    def _take(self, sampler: Sampler, metrics: prom.Metrics, scrape_s: float | None) -> None:
        assert self.adapter is not None and self.cap is not None
        reading = self.adapter.read(metrics, self.cap)
        if sampler.is_restart(reading):
            self.view.message("the server restarted (its counters went back to zero); re-reading its capacity")
            self.recorder.write("event", event="restart", message="server restarted; counters reset")
            try:
                self.cap = told(self.adapter.capacity(self.client, metrics), self.opts.redact)
            except WatchError as exc:
                self.view.message(f"capacity after the restart not read ({exc.message}); keeping the old one")
            else:
                self._announce_capacity()
            reading = self.adapter.read(metrics, self.cap)
        s = sampler.step(reading, self.cap, wall=time.time(), now=self.clock(), scrape_s=scrape_s)
        if self.gpu is not None:
            s.gpus = self.gpu.read()
        if metrics.malformed_lines:
            ReadingFacts(s).malformed_lines = metrics.malformed_lines
        self.summary.add(s)
        self.view.sample(s)
        data = s.as_dict()
        t = data.pop("t")
        self.recorder.write("sample", t=t, **data)

    def _announce_capacity(self) -> None:
        assert self.cap is not None
        self.view.capacity(self.cap)
        data = self.cap.as_dict()
        engine, url = data.pop("engine"), data.pop("url")
        self.recorder.write("capacity", engine=engine, url=url, capacity=data)

    def _open_gpus(self) -> None:
        want = self.opts.gpus
        if want is None:
            want = is_loopback(self.client.base)
        if not want:
            return
        gpu = self.gpu_factory()
        if gpu.available:
            self.gpu = gpu
        elif self.opts.gpus:
            self.view.message(f"no GPU memory numbers: {gpu.reason}")

    def _finish(self, code: int, ended: str, error: str | None = None) -> Result:
        if error:
            self.view.message(error)
            self.recorder.write("event", event="end", message=error)
        if self.cap is not None and self.summary.samples:
            self.recorder.write("summary", ended=ended, **self.summary.as_dict())
        return Result(code, ended, self.cap, self.summary, said(error, self.opts.redact) if error else None)

    def _trap_sigterm(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def _raise(signum: int, frame: Any) -> None:
            self.stop_requested = True
            raise _Stop()

        try:
            old = signal.signal(signal.SIGTERM, _raise)
        except (ValueError, OSError):
            return lambda: None
        return lambda: signal.signal(signal.SIGTERM, old)
