"""The HTML report in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, via selenium).

Checks what only a browser can: the page loads from file:// with no network request and no
console error (a CSP violation would be one), the charts are drawn (pixels on the canvases, a
non-blank screenshot, tooltips that say GiB), and a hostile log runs no script and opens no dialog.

Skips only when no Chromium binary exists on the machine (.ci/run installs it when missing);
with the binary present, a driver that cannot start is a failure, not a skip.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kvscope.render import render_analysis
from tests.unit.render.test_render_logs import example_analysis, hostile_analysis

CHROMIUM = next((p for p in (os.environ.get("KVSCOPE_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), shutil.which("google-chrome")) if p), None)
CHROMEDRIVER = os.environ.get("KVSCOPE_CHROMEDRIVER") or shutil.which("chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--window-size=1280,1600", "--hide-scrollbars")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    assert CHROMEDRIVER, "chromium is installed but chromedriver is not (apt-get install chromium-driver)"
    profile = tempfile.mkdtemp(prefix="kvscope-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, path: Path) -> dict:
    """Load a report; return the requests the page made and what its console said."""
    driver.get("about:blank")
    driver.get_log("performance")
    driver.get_log("browser")
    url = path.resolve().as_uri()
    driver.get(url)
    driver.execute_script("return document.readyState")
    events = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    requests = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    return {"url": url, "requests": requests, "console": driver.get_log("browser")}


def _render(tmp_path: Path, analysis, name: str, redact: bool = True) -> Path:
    out = tmp_path / name
    out.write_text(render_analysis(analysis, "html", redact=redact), encoding="utf-8")
    return out


def _no_dialog(driver) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert.dismiss()
    except NoAlertPresentException:
        return True
    return False


INKED_PIXELS = """
return Array.from(document.querySelectorAll('canvas[data-chart]')).map(function (c) {
  var px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0;
  for (var i = 3; i < px.length; i += 4) { if (px[i] > 0) { n++; } }
  return [c.getAttribute('data-chart'), c.width, c.height, n];
});
"""

TOOLTIP = """
var chart = window.kvscopeCharts[0];
chart.tooltip.setActiveElements([{datasetIndex: 1, index: 0}], {x: 10, y: 10});
chart.update();
return chart.tooltip.body.map(function (b) { return b.lines.concat(b.after).join(' | '); })
  .concat([chart.tooltip.title.join(' ')]);
"""


def test_example_loads_offline_and_draws_charts(browser, tmp_path):
    page = _open(browser, _render(tmp_path, example_analysis(), "example.html"))
    assert page["requests"] == [page["url"]]  # the file itself, nothing else
    assert [m for m in page["console"] if m["level"] in ("SEVERE", "WARNING")] == []
    assert browser.execute_script("return typeof Chart") == "function"
    assert browser.execute_script("return window.kvscopeCharts.length") == 2  # memory bars + what-if curve
    inked = {kind: n for kind, _, _, n in browser.execute_script(INKED_PIXELS)}
    assert inked["memory"] > 5000 and inked["whatif"] > 5000
    lines = browser.execute_script(TOOLTIP)  # hovering a bar part names it and gives GiB
    assert any("GiB" in line and "weights" in line for line in lines), lines
    assert browser.find_element("css selector", "details.evidence summary").text.startswith("Source lines (19)")
    assert not browser.find_element("css selector", "details.evidence table").is_displayed()  # collapsed


def test_screenshot_is_not_blank(browser, tmp_path):
    from PIL import Image

    _open(browser, _render(tmp_path, example_analysis(), "shot.html"))
    browser.execute_script("document.querySelector('canvas[data-chart=memory]').scrollIntoView()")
    png = browser.get_screenshot_as_png()
    (tmp_path / "screenshot.png").write_bytes(png)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, bars, lines, legend swatches
    white = sum(n for n, rgb in colours if min(rgb) > 245)
    assert white / (image.width * image.height) < 0.97
    purple = sum(n for n, (r, g, b) in colours if abs(r - 0x8E) < 12 and abs(g - 0x44) < 12 and abs(b - 0xAD) < 12)
    assert purple > 2000  # the weights part of TP0's bar is on screen


@pytest.mark.parametrize("redact", [True, False])
def test_hostile_log_renders_inert(browser, tmp_path, redact):
    page = _open(browser, _render(tmp_path, hostile_analysis(tmp_path), f"hostile-{redact}.html", redact))
    assert _no_dialog(browser)
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    assert page["requests"] == [page["url"]]  # the <img src=x> in the log was never an element
    assert [m for m in page["console"] if m["level"] == "SEVERE"] == []  # no CSP-blocked script either
    counts = browser.execute_script(
        "return [document.scripts.length, document.images.length, document.querySelectorAll('svg,iframe,object').length]")
    assert counts == [3, 0, 0]
    heading = browser.find_element("css selector", "section.startup h2").text
    assert "<script>window.__pwned=1</script>{{7*7}}" in heading  # shown as text
    failure = browser.find_element("css selector", ".failure").text
    assert "<img src=x onerror=alert(1)>" in failure and "{{ config }}" in failure
    assert browser.execute_script("return window.kvscopeCharts.length") >= 2  # still a working report


def test_prediction_and_runtime_charts_draw(browser, tmp_path):
    """A whatif report (calibrated curve) and a report with a runtime timeline draw every chart cleanly."""
    from kvscope.api import analyze
    from tests.conftest import case_dir

    reports = []
    whatif = pytest.importorskip("kvscope.cli.whatif")
    analysis = example_analysis()
    pred = whatif.build_prediction(analysis.startups[0], {"mem_fraction_static": 0.93}, None, None)
    pred["startup_index"] = 0
    reports.append(render_analysis(analysis, "html", extra={"prediction": pred}))
    try:
        import kvscope.engines.vllm.lines  # noqa: F401
        import kvscope.runtime.summary  # noqa: F401
    except ImportError:
        pass
    else:
        reports.append(render_analysis(analyze([str(case_dir("vllm", "902") / "log.txt")]), "html"))
    for i, html in enumerate(reports):
        path = tmp_path / f"report-{i}.html"
        path.write_text(html, encoding="utf-8")
        page = _open(browser, path)
        assert page["requests"] == [page["url"]]
        assert [m for m in page["console"] if m["level"] in ("SEVERE", "WARNING")] == []
        inked = browser.execute_script(INKED_PIXELS)
        assert inked and all(n > 2000 for _, _, _, n in inked), inked
        assert browser.execute_script("return window.kvscopeCharts.length") == len(inked)
    if len(reports) > 1:
        assert "runtime" in [kind for kind, _, _, _ in inked]


CLI_REPORTS = {
    "whatif sglang": ["whatif", "--example", "kimi-k2.5-tp8", "--set", "mem_fraction_static=0.92"],
    "whatif vllm failed startup": ["whatif", "--example", "vllm-max-len-too-large", "--set", "gpu_memory_utilization=0.95"],
    "plan vllm": ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine", "vllm"],
    "plan sglang mla": ["plan", "--model", "moonshotai/Kimi-K2.5", "--gpu", "RTX PRO 6000", "--tp", "8"],
}


def test_diff_report_loads_offline_and_draws_its_waterfall(browser, tmp_path):
    from kvscope.cli import main
    from tests.conftest import FIXTURES

    pair = FIXTURES / "pairs" / "001-vllm-llama31-8b-3090-maxlen-20k-vs-29k"
    path = tmp_path / "diff.html"
    try:
        main(["diff", str(pair / "a.txt"), str(pair / "b.txt"), "--format", "html", "-o", str(path)])
    except SystemExit as exc:
        assert not exc.code
    page = _open(browser, path)
    assert page["requests"] == [page["url"]]
    assert [m for m in page["console"] if m["level"] in ("SEVERE", "WARNING")] == []
    inked = browser.execute_script(INKED_PIXELS)
    assert [kind for kind, _, _, _ in inked] == ["waterfall"] and inked[0][3] > 2000, inked
    assert "31,232 → 23,648" in browser.find_element("css selector", ".answer").text


@pytest.mark.parametrize("name", sorted(CLI_REPORTS))
def test_whatif_and_plan_reports_load_offline_and_draw(browser, tmp_path, name):
    """whatif and plan HTML as the CLI writes it: offline, no console error, the prediction's memory bar and
    curve drawn (a whatif adds the calibrating startup's bars), and a screenshot that is not blank."""
    from PIL import Image

    from kvscope.cli import main

    path = tmp_path / "report.html"
    try:
        main([*CLI_REPORTS[name], "--format", "html", "-o", str(path)])
    except SystemExit as exc:
        assert not exc.code
    page = _open(browser, path)
    assert page["requests"] == [page["url"]]
    assert [m for m in page["console"] if m["level"] in ("SEVERE", "WARNING")] == []
    inked = browser.execute_script(INKED_PIXELS)
    scoped = browser.execute_script(
        "return Array.from(document.querySelectorAll('canvas[data-scope=prediction]')).map(c => c.getAttribute('data-chart'))")
    assert sorted(scoped) == ["memory", "whatif"]
    assert inked and all(n > 2000 for _, _, _, n in inked), inked
    assert browser.execute_script("return window.kvscopeCharts.length") == len(inked)
    answer = browser.find_element("css selector", "#prediction .answer").text
    assert "KV tokens per GPU" in answer
    png = browser.get_screenshot_as_png()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    white = sum(n for n, rgb in colours if min(rgb) > 245)
    assert len(colours) > 50 and white / (image.width * image.height) < 0.97
