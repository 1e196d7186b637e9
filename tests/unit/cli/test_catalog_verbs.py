"""``kvscope models`` and ``kvscope gpus`` list the catalogs ``--model`` and ``--gpu`` take, filtered by a word;
a word nothing holds is one line and exit 2."""

from __future__ import annotations

from kvscope.cli import main
from kvscope.model.catalog import gpus, model_ids


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_catalog_model_is_listed(capsys):
    code, out, _ = _run(["models"], capsys)
    assert code == 0 and len(out.splitlines()) == len(model_ids()) > 100
    assert "deepseek-ai/DeepSeek-V3" in out and "MLA" in out


def test_a_word_filters_and_a_miss_is_one_line(capsys):
    code, out, _ = _run(["models", "QWEN3"], capsys)
    assert code == 0 and out and all("qwen3" in line.lower().split()[0] for line in out.splitlines())
    code, _, err = _run(["models", "no-such-model-zz"], capsys)
    assert code == 2 and err.startswith("kvscope: ") and err.count("\n") == 1


def test_gpus_are_listed_with_what_torch_sees(capsys):
    code, out, _ = _run(["gpus"], capsys)
    assert code == 0 and len(out.splitlines()) == len(gpus())
    code, out, _ = _run(["gpus", "h200"], capsys)
    assert code == 0 and "H200" in out and "GiB to torch" in out
    assert _run(["gpus", "zz-none"], capsys)[0] == 2


def test_whatif_help_lists_each_engines_set_keys(capsys):
    from kvscope import engines

    code, out, _ = _run(["whatif", "--help"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    for engine in engines.with_capability("whatif"):
        assert f"{engine.label}:" in flat and all(key in flat for key in engine.whatif.SUPPORTED)
