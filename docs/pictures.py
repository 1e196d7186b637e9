"""Draw the README's pictures from the bundled examples: terminal views as SVG (rich's export), the HTML
reports as PNG screenshots (headless Chromium, when installed).

    python docs/pictures.py            # rewrite docs/images/*
    python docs/pictures.py --check    # exit 1 when a picture is stale (tests/architecture/test_pictures.py)

Why this shape: a picture in a README goes stale silently, so each one is made by running kvscope on a
bundled example, and a test re-runs it. Each picture keeps, in a ``.sha256`` sidecar, the SHA-256 of the
text it was drawn from (the coloured terminal output, the HTML page), and the check compares that: a
screenshot is not byte-reproducible, and a newer rich may draw the same text in other bytes. The example is copied into a temporary directory and read by a
relative name, so no picture holds the path of the machine that drew it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGES = HERE / "images"
WIDTH = 100  # columns of the terminal pictures: what a README shows without scrolling


@dataclass(frozen=True)
class Picture:
    file: str
    example: str
    argv: tuple[str, ...]  # the kvscope command, "LOG" standing for the example's log
    title: str


PICTURES = (
    Picture("explain.svg", "kimi-k2.5-tp8", ("explain", "LOG"), "kvscope explain"),
    Picture("whatif.svg", "kimi-k2.5-tp8", ("whatif", "LOG", "--set", "mem_fraction_static=0.92"), "kvscope whatif"),
    Picture("plan.svg", "", ("plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine", "vllm"),
            "kvscope plan"),
    Picture("explain-html.png", "kimi-k2.5-tp8", ("explain", "LOG", "--format", "html"), "kvscope explain --format html"),
    Picture("plan-html.png", "", ("plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine",
                                  "vllm", "--format", "html"), "kvscope plan --format html"),
)


def chromium() -> str | None:
    return next((p for p in (os.environ.get("KVSCOPE_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), shutil.which("google-chrome")) if p), None)


def _argv(pic: Picture, log: str) -> list[str]:
    from kvscope.examples import EXAMPLES

    argv = [log if a == "LOG" else a for a in pic.argv]
    if pic.example:
        for key, value in EXAMPLES[pic.example].assumptions.items():
            argv += ["--assume", f"{key}={value}"]
    return argv


@contextlib.contextmanager
def _cwd(path: str):  # contextlib.chdir is 3.11+; kvscope runs on 3.10
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run(pic: Picture, colour: bool) -> str:
    """The command's stdout, run in-process in a scratch directory holding the example as ``server.log``."""
    from kvscope.cli import main
    from kvscope.examples import example_path
    from kvscope.render import console

    with tempfile.TemporaryDirectory() as tmp, _cwd(tmp):
        if pic.example:
            shutil.copy(example_path(pic.example)[1], "server.log")
        out = io.StringIO()
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = str(WIDTH)
        try:
            with contextlib.redirect_stdout(out):
                try:
                    main([*_argv(pic, "server.log"), "--color", "always" if colour else "never"])
                except SystemExit as exc:
                    if exc.code not in (0, None):
                        raise RuntimeError(f"{pic.argv}: exit {exc.code}") from None
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
            console._style = console.TerminalStyle()
        return out.getvalue()


def svg(ansi: str, title: str) -> str:
    from rich.console import Console
    from rich.text import Text

    rec = Console(record=True, width=WIDTH, force_terminal=True, color_system="standard", file=io.StringIO())
    rec.print(Text.from_ansi(ansi), end="")
    return rec.export_svg(title=title, unique_id="kvscope")


def screenshot(page: str, out: Path) -> None:
    binary = chromium()
    if binary is None:
        raise RuntimeError("no Chromium to take the screenshot with (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "report.html"
        src.write_text(page, encoding="utf-8")
        subprocess.run([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1100,1500", f"--user-data-dir={tmp}/profile", f"--screenshot={out}",
                        src.as_uri()], check=True, capture_output=True, timeout=120)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def source(pic: Picture) -> str:
    """What the picture shows, as kvscope printed it: the coloured terminal text or the HTML page."""
    return run(pic, colour=pic.file.endswith(".svg"))


def stale() -> list[str]:
    """The pictures whose committed file no longer shows what kvscope prints now (compared by the SHA-256 of
    the printed text, so a newer rich or Chromium drawing the same text differently is not "stale")."""
    out = []
    for pic in PICTURES:
        path = IMAGES / pic.file
        side = path.with_name(path.name + ".sha256")
        if not path.exists() or not side.exists() or side.read_text().strip() != sha256(source(pic)):
            out.append(pic.file)
    return out


def write() -> None:
    IMAGES.mkdir(exist_ok=True)
    for pic in PICTURES:
        path = IMAGES / pic.file
        text = source(pic)
        if pic.file.endswith(".svg"):
            path.write_text(svg(text, pic.title), encoding="utf-8")
        else:
            screenshot(text, path)
        path.with_name(path.name + ".sha256").write_text(sha256(text) + "\n")
        print(f"wrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / "src"))
    if "--check" in sys.argv[1:]:
        bad = stale()
        print("stale: " + ", ".join(bad) if bad else "all pictures are current")
        sys.exit(1 if bad else 0)
    write()
