"""The package's layers import downward only (docs/architecture.md): every gaugelab import of
every module, at its top or inside a function, names a module of its own layer or of one below;
no module imports another package's private (``_name``) module; the analysis layer never
reaches the harness, the experiments or the CLI; and no module is over 400 lines."""

import ast
from pathlib import Path

import pytest

import gaugelab

ROOT = Path(gaugelab.__file__).parent
LAYERS = [
    {"gaugelab", "gaugelab.errors", "gaugelab.determinism", "gaugelab.lazy"},
    {"gaugelab.linalg"},
    {"gaugelab.gauge"},
    {"gaugelab.optim"},
    {"gaugelab.models"},
    {"gaugelab.adapters"},
    {"gaugelab.tasks"},
    {"gaugelab.equivariance", "gaugelab.lowrank"},
    {"gaugelab.study"},
    {"gaugelab.experiments"},
    {"gaugelab.cli", "gaugelab.__main__"},
]
"""Lowest first; DESIGN's layer table (numerics, symmetry, optimizers, models, adapters, tasks,
analysis, harness, experiments, interface), with the package's own small modules at the base."""


def layer(module: str) -> int:
    head = ".".join(module.split(".")[:2])
    for i, names in enumerate(LAYERS):
        if head in names:
            return i
    raise AssertionError(f"{module}: in no layer")


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield ".".join(parts), path


def imports(path: Path, module: str, is_package: bool):
    """``(line, imported module)`` of every gaugelab import, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("gaugelab"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, base] if base else anchor)
            if base.startswith("gaugelab"):
                yield node.lineno, base
                yield from ((node.lineno, f"{base}.{a.name}") for a in node.names)


ALL = list(modules())


@pytest.mark.parametrize(("module", "path"), ALL, ids=[m for m, _ in ALL])
def test_every_import_runs_downward_and_names_no_foreign_private_module(module, path):
    own = layer(module)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for line, target in imports(path, module, path.name == "__init__.py"):
        if not (ROOT.parent / (target.replace(".", "/") + ".py")).exists() and not (
            ROOT.parent / target.replace(".", "/")
        ).is_dir():
            continue  # a name imported from a module, not a module
        assert layer(target) <= own, f"{path.name}:{line}: {module} imports {target} (upward)"
        private = [p for p in target.split(".")[1:] if p.startswith("_")]
        if private:
            owner = target[: target.index("._")]
            assert package.startswith(owner), f"{module} imports {target}, private to {owner}"


def test_analysis_reaches_neither_the_harness_nor_above():
    for module, path in ALL:
        if layer(module) <= layer("gaugelab.lowrank"):
            for line, target in imports(path, module, path.name == "__init__.py"):
                assert not target.startswith(
                    ("gaugelab.study", "gaugelab.experiments", "gaugelab.cli")
                ), f"{path.name}:{line}: {module} imports {target}"


def test_the_layer_check_can_fail():
    assert layer("gaugelab.study.store.db") > layer("gaugelab.lowrank.spectra.ranks")
    with pytest.raises(AssertionError, match="in no layer"):
        layer("gaugelab.nowhere")


def test_no_module_is_over_400_lines():
    """One concept per module (docs/architecture.md): a module stays within 400 lines."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert len(sizes) > 200  # the walk found the package
    assert {path: n for path, n in sizes.items() if n > 400} == {}
