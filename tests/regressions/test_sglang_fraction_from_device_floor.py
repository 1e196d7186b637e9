"""A SGLang log that prints no device total and no --mem-fraction-static still shows a floor on the device: the
pool and what was left after it on one GPU. When every catalog card between that floor and a quarter above it gets
the same automatic fraction, the advice can step down from that value. Found on the MI355X AITER log
(sgl-project/sglang#18262): 203.9 GiB of pool + 60.65 GiB left, the attention backend's workspace then failed."""

from __future__ import annotations

from kvscope.api import read_logs
from tests.conftest import FIXTURES


def test_attention_backend_failure_steps_the_automatic_fraction_down():
    log = next((FIXTURES / "harvested" / "sglang").glob("008-qwen3-30b-mi355x-*")) / "log.txt"
    (s,) = read_logs([str(log)])
    sug = next(f.suggestion for f in s.findings if f.code == "startup-exception")
    assert sug is not None and sug.flag == "--mem-fraction-static"
    assert sug.to_value < sug.from_value
    assert "at least 264.6 GiB" in sug.note and "MI355X" in sug.note


def test_a_device_total_given_by_the_user_still_wins():
    log = next((FIXTURES / "harvested" / "sglang").glob("008-qwen3-30b-mi355x-*")) / "log.txt"
    (s,) = read_logs([str(log)], assumptions={"gpu_total_gib": 268.2})
    sug = next(f.suggestion for f in s.findings if f.code == "startup-exception")
    assert sug is not None and "at least" not in sug.note
