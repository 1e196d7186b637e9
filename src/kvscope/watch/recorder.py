"""JSON lines for scripts (``--format jsonl``) and for ``--record FILE``: one object per line.

Every line carries ``"kvscope_watch": 1`` so ``kvscope explain`` recognises a recording among
logs (``kvscope.engines.recording``), and a ``type``: ``capacity`` (first, and again after a server
restart), ``sample``, ``event`` (unreachable, recovered, restart) and ``summary`` (last). Each line
is flushed as written, so a watch killed mid-way leaves a readable file. No API key is ever
written, and the URL loses any user:password.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from datetime import datetime, timezone
from typing import IO, Any

from kvscope.core.errors import InputError
from kvscope.core.redact import redact_value
from kvscope.core.text import json_visible
from kvscope.watch import FORMAT_VERSION, MARKER


def iso(t: float) -> str:
    """Epoch seconds → ISO 8601 UTC with milliseconds (what the explain side parses back)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def line(kind: str, t: float | None = None, redact: bool = True, **data: Any) -> str:
    """One JSON line; its values redacted like explain's reports unless ``redact`` is False (the capacity comes
    redacted already; messages quote the server). ASCII only, so nothing in it is a terminal control."""
    obj: dict[str, Any] = {MARKER: FORMAT_VERSION, "type": kind, "time": iso(time.time() if t is None else t)}
    obj.update({k: (redact_value(v, k) if redact else v) for k, v in data.items() if v is not None})
    return json_visible(json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str))


def _finite(value: Any) -> Any:
    """NaN/Inf → None: JSON has no such numbers, and a reader must never choke on a line we wrote."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class Recorder:
    """Writes lines to any number of streams (stdout for jsonl, a file for --record)."""

    def __init__(self, redact: bool = True) -> None:
        self.redact = redact
        self.streams: list[IO[str]] = []
        self._owned: list[IO[str]] = []
        self._essential: list[IO[str]] = []
        self._paths: dict[int, str] = {}  # a --record file by stream: its write errors end the watch, loudly

    def open_file(self, path: str) -> None:
        try:
            fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise InputError(f"cannot write {path}: {exc.strerror}") from None
        self.streams.append(fh)
        self._owned.append(fh)
        self._paths[id(fh)] = path

    def add_stream(self, stream: IO[str], essential: bool = False) -> None:
        """``essential``: the watch's only output (jsonl on stdout); losing it ends the watch."""
        self.streams.append(stream)
        if essential:
            self._essential.append(stream)

    def write(self, kind: str, t: float | None = None, **data: Any) -> None:
        text = line(kind, t, self.redact, **data) + "\n"
        for stream in list(self.streams):
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError) as exc:
                self.streams.remove(stream)  # a closed pipe stops that stream, not the watch…
                if stream in self._essential:
                    raise BrokenPipeError("the reader of the JSON lines went away") from None  # …unless it is all
                if id(stream) in self._paths:  # the recording the user asked for cannot be kept: say so, stop
                    why = getattr(exc, "strerror", None) or str(exc)
                    raise InputError(f"cannot write the recording {self._paths[id(stream)]}: {why}; "
                                     "the lines before this one are in it") from None

    def close(self) -> None:
        for fh in self._owned:
            with contextlib.suppress(OSError):
                fh.close()
        self.streams, self._owned = [], []
