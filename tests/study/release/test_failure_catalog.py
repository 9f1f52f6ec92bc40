"""Tests for the failure catalog of gaugelab.study.release.design (seed 003 §0x0CB–0x0CC): every
record names an importable detector and an existing test that calls it, ids are unique, the
six alarm families are the seed's, and every coordinate is filled."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

from gaugelab.study.release.design import (
    ALARM_FAMILIES,
    ALARM_FAMILY_TABLE,
    FAILURE_CATALOG,
    FailureRecord,
)

ROOT = Path(__file__).resolve().parents[3]
RECORDS = {r.failure_id: r for r in FAILURE_CATALOG}


def resolve(path: str):
    """Import the longest module prefix of a dotted path, then walk the attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)  # AttributeError: the path names nothing
        return obj
    raise ModuleNotFoundError(path)


@cache
def load_test_module(relative: str):
    """The test module at ``relative`` (repository path), imported under a private name."""
    name = "_catalog_" + re.sub(r"\W", "_", relative)
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def identifiers(obj) -> set[str]:
    """Every name and attribute name in the source of a function."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }


def called_functions(func, namespace: dict) -> list:
    """The gaugelab functions and the test module's own helpers that a test names directly
    (``f``, ``mod.f``, ``Cls.method``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    found = []
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in namespace:
            continue
        obj = namespace[node.id]
        for attr in reversed(chain):
            obj = getattr(obj, attr, None)
        obj = getattr(obj, "__func__", obj)
        own = namespace.get("__name__")
        if inspect.isfunction(obj) and (
            obj.__module__.startswith("gaugelab") or obj.__module__ == own
        ):
            found.append(obj)
    return found


def node_of(record: FailureRecord):
    relative, _, name = record.test.partition("::")
    return load_test_module(relative), name


@pytest.mark.parametrize("failure_id", sorted(RECORDS))
def test_every_detector_imports_and_is_callable(failure_id):
    detector = resolve(RECORDS[failure_id].detector)
    assert callable(detector), RECORDS[failure_id].detector


@pytest.mark.parametrize("failure_id", sorted(RECORDS))
def test_every_test_exists_and_reaches_its_detector(failure_id):
    record = RECORDS[failure_id]
    relative, sep, name = record.test.partition("::")
    assert sep and relative.startswith("tests/") and (ROOT / relative).is_file(), record.test
    module, name = node_of(record)
    func = getattr(module, name, None)
    assert name.startswith("test_") and inspect.isfunction(func), record.test
    leaf = record.detector.rsplit(".", 1)[-1]
    if leaf in identifiers(func):
        return  # the test calls the detector itself
    # or through a public entry point (Adapter.load → files.read_factors) or a local helper
    entries = called_functions(func, vars(module))
    assert any(leaf in identifiers(f) for f in entries), (
        f"{record.test} neither calls {leaf} nor calls a function that does"
    )


def test_resolve_and_the_reach_check_can_fail():
    with pytest.raises(AttributeError):
        resolve("gaugelab.lowrank.spectra.ranks.no_such_rank")
    with pytest.raises(ModuleNotFoundError):
        resolve("nowhere.at_all")
    module = load_test_module("tests/lowrank/spectra/test_ranks.py")
    func = module.test_numerical_rank_records_its_threshold_and_tolerance_rule
    assert "static_merge_exists" not in identifiers(func)
    assert not any(
        "static_merge_exists" in identifiers(f) for f in called_functions(func, vars(module))
    )


def test_failure_ids_are_unique_and_kebab_case():
    ids = [r.failure_id for r in FAILURE_CATALOG]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids), ids


def test_the_six_alarm_families_are_the_seeds_in_order():
    assert ALARM_FAMILIES == (
        "identity-protocol",
        "geometry-reconstruction",
        "optimization-numerics",
        "function-space-theorem",
        "experimental-design-statistics",
        "evidence-publication-release",
    )
    assert [f.title for f in ALARM_FAMILY_TABLE] == [
        "identity and protocol",
        "geometry and reconstruction",
        "optimization and numerics",
        "function space and theorem",
        "experimental design and statistics",
        "evidence, publication, and release",
    ]


def test_every_record_belongs_to_a_declared_family_and_every_family_has_one():
    families = [r.alarm_family for r in FAILURE_CATALOG]
    assert set(families) == set(ALARM_FAMILIES)  # spelled as declared, none missing
    # grouped in the declared order
    assert sorted(families, key=ALARM_FAMILIES.index) == families
    assert 20 <= len(FAILURE_CATALOG) <= 36


def test_every_record_has_its_seven_coordinates_filled():
    for record in FAILURE_CATALOG:
        for field in dataclasses.fields(FailureRecord):
            value = getattr(record, field.name)
            assert isinstance(value, str) and value.strip(), (record.failure_id, field.name)
        assert re.fullmatch(r"§0x0[0-9A-C][A-Z]", record.origin), record.origin
        assert record.detector.startswith(("gaugelab.", "tests.support.")), record.detector


def test_failure_record_refuses_an_unknown_family_and_an_empty_coordinate():
    good = dataclasses.asdict(FAILURE_CATALOG[0])
    with pytest.raises(ValueError, match="alarm_family='identity'; allowed: identity-protocol"):
        FailureRecord(**{**good, "alarm_family": "identity"})
    with pytest.raises(ValueError, match="evidence_limit=''"):
        FailureRecord(**{**good, "evidence_limit": ""})
