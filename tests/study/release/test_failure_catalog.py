"""Tests for the failure catalog of gaugelab.study.release.design (seed 003 §0x0CB–0x0CC): the
seed's closure manifest is 36 records, four per loop for Loops 2–10, in all six alarm families
(§0x0CC's own table); every record, extensions included, names an importable detector and an
existing test that calls it, ids are unique, and every coordinate is filled."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pytest

from gaugelab.study.release.design import (
    ALARM_FAMILIES,
    ALARM_FAMILY_TABLE,
    FAILURE_CATALOG,
    FAILURE_CATALOG_EXTENSIONS,
    MECHANISM_LOOPS,
    FailureRecord,
    origin_loop,
)

ROOT = Path(__file__).resolve().parents[3]
EVERY = (*FAILURE_CATALOG, *FAILURE_CATALOG_EXTENSIONS)
RECORDS = {r.failure_id: r for r in EVERY}

# §0x0CC, "Six Alarm Families Must Remain Distinct": alarm family, representative invariant,
# detector, typical recovery.
SEED_0x0CC_FAMILIES = [
    (
        "identity and protocol",
        "base, tensor, split, rank policy, and protocol IDs denote the same study objects",
        "manifest digest, axis, split, and object-join audit",
        "reject the run or rebuild the manifest before execution",
    ),
    (
        "geometry and reconstruction",
        "rank, tangent, SVD, covariance support, and subspace metrics use their declared "
        "objects and thresholds",
        "exact rank/projector/residual oracle",
        "recompute the diagnostic; never relabel it",
    ),
    (
        "optimization and numerics",
        "factor gauge, initialization, scaling, optimizer metric, and dtype path match the "
        "derived dynamics",
        "gradient, product-velocity, range, and resume checks",
        "restore factors/optimizer state or narrow the claim",
    ),
    (
        "function space and theorem",
        "Jacobian, kernel, linearization horizon, theorem assumptions, and practical decision "
        "remain separate",
        "current-versus-frozen trajectory and assumption ledger",
        "invalidate the explanation, not the observed score",
    ),
    (
        "experimental design and statistics",
        "candidate cells are paired, complete, validation-only, and direction-aware",
        "design-cell, checkpoint, estimand, and test-access audit",
        "no selection; version a new study if policy changes",
    ),
    (
        "evidence, publication, and release",
        "sources, figures, URLs, artifacts, and evidence classes are complete and correctly scoped",
        "provenance, digest, route, and claim-firewall audit",
        "repair metadata or block publication/release",
    ),
]

# The 36 records: (loop, id, family, the seed's words for the failure). The seed fixes the
# count, four per loop and the families but lists no record (§0x0CC); each row quotes the
# failure as the seed states it in that loop — a failure-lab row (§0x08L, §0x09O, §0x0AY,
# §0x0BY, §0x0E) or the sentence of the record's origin section.
SEED_0x0CC_RECORDS = [
    (2, "adapter-config-variant", "identity-protocol",
     "factor IDs, orientation, rank, scale, initialization"),
    (2, "adapter-applied-to-another-base", "identity-protocol",
     "Shape equality alone is insufficient."),
    (2, "configured-rank-read-as-realized-rank", "identity-protocol",
     "only an upper bound on rank(BA)"),
    (2, "changed-envelope-keeps-its-result-id", "identity-protocol",
     "Reusing a result under a changed envelope creates a new result ID"),
    (3, "reparameterized-projection-same-points", "function-space-theorem",
     "A subspace identity and an optimizer-coordinate identity are separate fields."),
    (3, "projection-adjoint-mutation", "optimization-numerics",
     "Reusing the forward permutation instead of its inverse is a shape-correct adjoint bug."),
    (3, "d90-censoring", "experimental-design-statistics",
     "left-censored; report d_estimate <= d_min, not d_estimate = d_min"),
    (3, "intrinsic-claim-without-envelope", "evidence-publication-release",
     "Without that envelope, $d_{90}$ is a slogan rather than a measurement."),
    (4, "factor-count-read-as-manifold-dimension", "geometry-reconstruction",
     "factor parameter count called manifold dimension"),
    (4, "gauge-direction-read-as-product-motion", "optimization-numerics",
     "these $r^2$ independent gauge directions span the entire kernel of $D\\phi$"),
    (4, "zero-factor-point-read-as-generic", "geometry-reconstruction",
     "All $\\dot A$ directions disappear at first order."),
    (4, "geometry-oracle-mutation", "geometry-reconstruction",
     "All 58 one-field counterexamples are rejected."),
    (5, "truncation-tie", "geometry-reconstruction",
     "A tie at the boundary permits several optimal $r$-dimensional singular subspaces."),
    (5, "weight-truncation-under-skewed-inputs", "geometry-reconstruction",
     "The output optimum is five times better than the weight optimum at the same rank."),
    (5, "float32-product-ranked-in-float64", "geometry-reconstruction",
     "Numerical rank depends on scale and tolerance."),
    (5, "entropy-conventions-share-one-label", "identity-protocol",
     "Two Entropy Conventions Must Not Share One Label"),
    (6, "composition-across-bases", "identity-protocol",
     "A sum of adapters trained against different base checkpoints is not automatically a "
     "meaningful sum in one common coordinate system."),
    (6, "gated-composition-merged", "function-space-theorem",
     "Therefore no one constant merged matrix reproduces this gated operator on both inputs."),
    (6, "factor-span-read-as-update-span", "geometry-reconstruction",
     "Under rank collapse, those equalities can shrink, so decomposing $BA$ is safer than "
     "assuming configured factor width equals learned update rank."),
    (6, "principal-cosine-excess", "geometry-reconstruction",
     "Computing an SVD directly on arbitrary raw factors measures factor scaling and "
     "conditioning as well as span geometry."),
    (7, "zero-product-start-blocked", "optimization-numerics", "both factors initialized to zero"),
    (7, "factor-record-abi", "identity-protocol", "Factor Letters Are Not An Interface"),
    (7, "adam-gauge-compensation", "optimization-numerics", "same $BA$, different training curve"),
    (7, "rebalance-outside-dtype-range", "optimization-numerics",
     "NaN, inf, or zero factor after rebalance"),
    (8, "coordinate-map-called-a-projector", "geometry-reconstruction",
     "$PP^{\\top}$ called a projector without $P^{\\top}P=I$"),
    (8, "frozen-kernel-as-trajectory", "function-space-theorem",
     "first-step Taylor equality treated as long-run linearization"),
    (8, "rank-deletes-probe-directions", "function-space-theorem",
     "random projection theorem applied to deterministic rank one"),
    (8, "sgd-kernel-for-adam", "function-space-theorem", "$JJ^{\\top}$ used for AdamW"),
    (9, "theorem-rank-without-its-scope", "evidence-publication-release",
     "Every claim in this section must declare six coordinates"),
    (9, "one-matrix-rank-read-as-required-rank", "function-space-theorem",
     "$\\operatorname{rank}(W_*-W_0)$ called the required LLM rank"),
    (9, "invariant-block-read-as-rank-r", "optimization-numerics",
     "$2r$ invariant block called rank $r$"),
    (9, "deep-compression-read-as-exact", "geometry-reconstruction", "compression called exact"),
    (10, "kernel-bundle-missing", "function-space-theorem", "omit failed or missing diagnostics"),
    (10, "theorem-rank-as-selector", "experimental-design-statistics",
     "use theorem rank as tie-breaker"),
    (10, "empty-feasible-set", "experimental-design-statistics",
     "no release: the feasible set is empty"),
    (10, "factor-record-disagrees-with-tensors", "evidence-publication-release",
     "adapter checkpoint and target-module map"),
]  # fmt: skip


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
    # a callable, or a declared ledger the test audits (the expressivity CLAIMS)
    assert callable(detector) or isinstance(detector, Mapping), RECORDS[failure_id].detector


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
    ids = [r.failure_id for r in EVERY]
    assert len(ids) == len(set(ids))  # also across the catalog and its extensions
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids), ids


def test_seed_0x0CC_the_six_alarm_families_are_the_seeds_table_in_order():
    assert ALARM_FAMILIES == (
        "identity-protocol",
        "geometry-reconstruction",
        "optimization-numerics",
        "function-space-theorem",
        "experimental-design-statistics",
        "evidence-publication-release",
    )
    assert [
        (f.title, f.invariant, f.detector, f.recovery) for f in ALARM_FAMILY_TABLE
    ] == SEED_0x0CC_FAMILIES


def test_seed_0x0CC_thirty_six_records_four_per_loop_for_loops_2_to_10():
    assert len(FAILURE_CATALOG) == 36
    assert MECHANISM_LOOPS == (2, 3, 4, 5, 6, 7, 8, 9, 10)
    assert Counter(r.loop for r in FAILURE_CATALOG) == dict.fromkeys(MECHANISM_LOOPS, 4)
    loops = [r.loop for r in FAILURE_CATALOG]
    assert loops == sorted(loops)  # in loop order


def test_seed_0x0CC_the_records_use_all_six_alarm_families():
    assert {r.alarm_family for r in FAILURE_CATALOG} == set(ALARM_FAMILIES)


def test_seed_0x0CC_the_records_are_the_seeds_failures_by_loop_name_and_family():
    got = [(r.loop, r.failure_id, r.alarm_family, r.seed_text) for r in FAILURE_CATALOG]
    assert got == SEED_0x0CC_RECORDS


def test_seed_0x0CC_extensions_are_kept_apart_and_not_counted():
    ids = {r.failure_id for r in FAILURE_CATALOG}
    assert FAILURE_CATALOG_EXTENSIONS and not ids & {
        r.failure_id for r in FAILURE_CATALOG_EXTENSIONS
    }
    # Loop 11 (the closure loop itself) is never in the seed's manifest
    assert all(r.loop in MECHANISM_LOOPS for r in FAILURE_CATALOG)
    assert {r.loop for r in FAILURE_CATALOG_EXTENSIONS} == {3, 7, 10, 11}


@pytest.mark.parametrize(
    ("origin", "loop"),
    [
        ("§0x00F", 2),
        ("§0x00K", 2),
        ("§0x02A", 3),
        ("§0x03L", 4),
        ("§0x04M", 5),
        ("§0x05A", 6),
        ("§0x06M", 6),
        ("§0x07A", 7),
        ("§0x08L", 7),
        ("§0x09P", 8),
        ("§0x0AZ", 9),
        ("§0x0BZ", 10),
        ("§0x0CQ", 11),
    ],
)
def test_origin_loop_maps_each_section_to_the_loop_that_owns_it(origin, loop):
    assert origin_loop(origin) == loop


@pytest.mark.parametrize("origin", ["§0x00E", "§0x01F", "§0x0D", "0x04I", "§0x0E", "§0x10A"])
def test_origin_loop_refuses_sections_outside_loops_2_to_11(origin):
    with pytest.raises(ValueError, match="origin_loop: origin="):
        origin_loop(origin)


def test_seed_0x0CB_every_record_has_its_seven_coordinates_filled():
    for record in EVERY:
        for field in dataclasses.fields(FailureRecord):
            value = getattr(record, field.name)
            if field.name == "seed_text" and record in FAILURE_CATALOG_EXTENSIONS:
                assert value is None or value.strip(), record.failure_id
                continue
            assert isinstance(value, str) and value.strip(), (record.failure_id, field.name)
        assert re.fullmatch(r"§0x0[0-9A-C][A-Z]", record.origin), record.origin
        assert record.loop == origin_loop(record.origin)  # origin loop and invariant
        assert record.detector.startswith(("gaugelab.", "tests.support.")), record.detector


def test_failure_record_refuses_an_unknown_family_an_empty_coordinate_and_a_foreign_origin():
    good = dataclasses.asdict(FAILURE_CATALOG[0])
    with pytest.raises(ValueError, match="alarm_family='identity'; allowed: identity-protocol"):
        FailureRecord(**{**good, "alarm_family": "identity"})
    with pytest.raises(ValueError, match="evidence_limit=''"):
        FailureRecord(**{**good, "evidence_limit": ""})
    with pytest.raises(ValueError, match="seed_text=' '"):
        FailureRecord(**{**good, "seed_text": " "})
    with pytest.raises(ValueError, match="origin='§0x01D'"):
        FailureRecord(**{**good, "origin": "§0x01D"})
    assert FailureRecord(**{**good, "seed_text": None}).seed_text is None
