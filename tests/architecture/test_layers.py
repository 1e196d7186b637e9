"""The layout holds: imports run one way between layers, no engine is named outside engines/, and no
first-party import is guarded (a broken module must fail loudly, not drop a report section)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "kvscope"

# Lower layers never import higher ones. Same-layer packages may import each other only in the
# order listed inside the tuple (runtime before ledger, ledger before findings).
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("reading", "model", "data"),
    ("engines",),
    ("runtime", "ledger", "findings", "watch", "fleet"),
    ("analysis", "api", "examples"),
    ("render",),
    ("cli", "__main__"),
]
RANK = {pkg: (i, j) for i, layer in enumerate(LAYERS) for j, pkg in enumerate(layer)}
ENGINE_NAMES = ("sglang", "vllm", "llamacpp", "trtllm", "ollama")
OPTIONAL = {"kvscope._bulk", "kvscope", "kvscope.fleet._grid", "pynvml"}  # "kvscope": `from kvscope import _bulk`  # the C helper and NVML may be absent; nothing else


def _modules() -> list[tuple[Path, str, ast.Module]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        top = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        out.append((path, top, ast.parse(path.read_text())))
    return out


def _imported(path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    rel = path.relative_to(SRC)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel.parts[:-1])[: len(rel.parts) - node.level]
                found.append((node.lineno, ".".join(["kvscope", *base] + ([node.module] if node.module else []))))
            elif node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def test_every_top_level_package_has_a_layer():
    tops = {top for _, top, _ in _modules() if top != "__init__"}
    assert tops <= set(RANK), f"give these a layer in LAYERS: {sorted(tops - set(RANK))}"


def test_imports_run_one_way():
    bad = []
    for path, top, tree in _modules():
        if top == "__init__":
            continue
        for line, module in _imported(path, tree):
            if not module.startswith("kvscope.") or module in OPTIONAL:
                continue
            target = module.split(".")[1]
            if target == top or target not in RANK or module == "kvscope.__version__":
                continue
            if RANK[target] > RANK[top]:
                bad.append(f"{path.relative_to(SRC)}:{line} ({top}) imports {module} ({target})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def _compares_engine_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    consts = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return any(c.value in ENGINE_NAMES for c in consts)


def test_no_engine_name_branches_outside_engines():
    bad = []
    for path, top, tree in _modules():
        if top == "engines":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)) and _compares_engine_name(node.test):
                bad.append(f"{path.relative_to(SRC)}:{node.lineno}")
            if isinstance(node, ast.Dict) and sum(isinstance(k, ast.Constant) and k.value in ENGINE_NAMES
                                                  for k in node.keys) >= 2:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} (a table keyed by engine names)")
    assert not bad, "engine knowledge outside engines/ (ask the Engine for it instead):\n" + "\n".join(bad)


def test_no_first_party_import_is_guarded():
    bad = []
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            catches_import = any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                                 for h in node.handlers)
            if not catches_import:
                continue
            for inner in node.body:
                for line, module in _imported(path, ast.Module(body=[inner], type_ignores=[])):
                    if module.startswith("kvscope") and module not in OPTIONAL:
                        bad.append(f"{path.relative_to(SRC)}:{line} guards {module}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["sglang", "vllm", "llamacpp", "trtllm"])
def test_each_engine_is_registered_with_its_capabilities(name):
    from kvscope import engines

    engine = engines.get(name)
    assert engine.name == name and engine.lines is not None and engine.finish is not None
    assert engine.findings is not None


def test_the_layering_test_catches_an_upward_import(tmp_path):
    """The check above can fail: a core module importing the CLI is reported."""
    tree = ast.parse("from kvscope.cli import main\n")
    fake = SRC / "core" / "fake.py"
    found = [m for _, m in _imported(fake, tree)]
    assert found == ["kvscope.cli"] and RANK["cli"] > RANK["core"]
