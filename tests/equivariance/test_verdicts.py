"""Tests for gaugelab.equivariance.verdicts: the verdict strings never change, each procedure
speaks exactly its documented vocabulary, and the check ↔ twins correspondence is complete."""

import pytest
import torch

from gaugelab.equivariance import check as check_module
from gaugelab.equivariance import verdicts as V
from gaugelab.equivariance.check import EquivarianceReport, _verdict
from gaugelab.equivariance.twins import triplet_verdict

EPS64 = torch.finfo(torch.float64).eps


def test_verdict_strings_are_the_stored_ones():
    # run stores and the README hold these strings: a change would orphan stored verdicts
    assert (V.EQUIVARIANT, V.BREAKS, V.PRECISION_LIMITED, V.NONDETERMINISTIC, V.INCONCLUSIVE) == (
        "equivariant", "breaks", "precision-limited", "nondeterministic", "inconclusive",
    )  # fmt: skip
    assert (V.BASIS_SENSITIVE, V.CHAOTIC) == ("basis-sensitive", "equivariant-then-chaotic")
    # what the atlas records where a check gives no verdict (never a verdict of either procedure)
    assert V.OUTCOMES == (V.ERROR, V.DIVERGED, V.TIMEOUT) == ("error", "diverged", "timeout")
    assert not set(V.OUTCOMES) & set(V.VERDICTS)


def test_the_vocabularies_are_the_documented_sets():
    assert set(V.CHECK_VERDICTS) == {
        "equivariant", "breaks", "precision-limited", "nondeterministic", "inconclusive",
    }  # fmt: skip
    assert set(V.TWIN_VERDICTS) == {
        "basis-sensitive", "equivariant", "equivariant-then-chaotic", "nondeterministic",
        "inconclusive",
    }  # fmt: skip
    for procedure, vocabulary in (("check", V.CHECK_VERDICTS), ("twins", V.TWIN_VERDICTS)):
        emitted = {v.name for v in V.VERDICTS.values() if procedure in v.emitted_by}
        assert emitted == set(vocabulary) and len(vocabulary) == len(emitted)
    assert set(V.VERDICTS) == set(V.CHECK_VERDICTS) | set(V.TWIN_VERDICTS)
    assert all(v.meaning for v in V.VERDICTS.values())


def test_check_to_twins_maps_one_vocabulary_onto_the_other():
    assert set(V.CHECK_TO_TWINS) == set(V.CHECK_VERDICTS)
    assert sorted(V.CHECK_TO_TWINS.values()) == sorted(V.TWIN_VERDICTS)  # a bijection
    assert V.CHECK_TO_TWINS[V.BREAKS] == V.BASIS_SENSITIVE
    assert V.CHECK_TO_TWINS[V.NONDETERMINISTIC] == V.NONDETERMINISTIC


def test_check_uses_the_verdict_constants():
    for name in ("EQUIVARIANT", "BREAKS", "PRECISION_LIMITED", "NONDETERMINISTIC", "INCONCLUSIVE"):
        assert getattr(check_module, name) is getattr(V, name)


def _check_report(gauge, noise, identity=None) -> EquivarianceReport:
    steps = len(gauge)
    return EquivarianceReport(
        optimizer="synthetic", hyperparameters={}, group="Orthogonal(k=3)", problem="sensing",
        dtype="float64", steps=steps, draws=1, seed=0, noise_scale=1e-7,
        distances={"gauge": [gauge], "identity": [identity or [0.0] * steps], "noise": [noise]},
        factor_distances=[[0.0] * steps], moved=0.5, tolerance=1e-9,
    )  # fmt: skip


CHECK_CASES = {
    V.EQUIVARIANT: ([1e-15, 2e-15], [1e-7, 1e-7], None),  # gauge ≤ 1e-9 throughout
    V.BREAKS: ([1e-2, 1e-1], [1e-7, 1e-7], None),  # step 1: ≥ 1e-6 and ≥ 100 × noise
    V.PRECISION_LIMITED: ([1e-5, 1e-4], [2e-5, 1e-4], None),  # within 10×, ≫ 1000·eps
    V.NONDETERMINISTIC: ([1e-15, 1e-15], [1e-7, 1e-7], [0.0, 1e-16]),  # identity twin ≠ 0
    V.INCONCLUSIVE: ([1e-8, 1e-5], [1e-7, 1e-7], None),  # above tolerance, 100× noise late
}


def test_check_speaks_exactly_its_vocabulary():
    emitted = {
        verdict: _verdict(_check_report(*series), EPS64)[0]
        for verdict, series in CHECK_CASES.items()
    }
    assert all(got == want for want, got in emitted.items()), emitted
    assert set(emitted.values()) == set(V.CHECK_VERDICTS)


def _records(gauge, noise, identity=None):
    identity = identity or [0.0] * len(gauge)
    return {
        step: {"gauge/logit_distance": g, "noise/logit_distance": n,
               "identity/logit_distance": i}
        for step, (g, n, i) in enumerate(zip(gauge, noise, identity, strict=True), start=1)
    }  # fmt: skip


TWIN_CASES = {
    V.BASIS_SENSITIVE: ([4e-3, 1e-2], [3e-7, 1e-6], None),  # step 1: ≥ 100 × noise
    V.EQUIVARIANT: ([3e-7, 1e-6], [3e-7, 1e-6], None),  # ≤ 10 × noise throughout
    V.CHAOTIC: ([3e-7, 1e-1], [3e-7, 2e-1], None),  # agree at step 1, both end ≥ 1000 × floor
    V.NONDETERMINISTIC: ([3e-7, 1e-6], [3e-7, 1e-6], [0.0, 1e-9]),  # identity twin ≠ 0
    V.INCONCLUSIVE: ([3e-7, 1e-4], [3e-7, 1e-6], None),  # 100 × noise late, not chaotic
}


@pytest.mark.parametrize("want", list(TWIN_CASES))
def test_the_twin_protocol_gives_each_of_its_verdicts(want):
    assert triplet_verdict(_records(*TWIN_CASES[want]))[0] == want


def test_the_twin_protocol_speaks_exactly_its_vocabulary():
    emitted = {triplet_verdict(_records(*series))[0] for series in TWIN_CASES.values()}
    assert emitted == set(V.TWIN_VERDICTS)
