"""Tests of gaugelab.study.spec: content-hashed experiment specs and run manifests."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

import gaugelab
from gaugelab.study.spec import (
    ExperimentSpec,
    Manifest,
    canonical_json,
    environment_digest,
    git_commit,
    run_identity,
)

_SPEC_SOURCE = '''
from pydantic import Field
from gaugelab.study.spec import ExperimentSpec

class ToySpec(ExperimentSpec):
    """A small spec with every kind of field the identity must cover."""

    kind = "toy"
    data_seed: int = Field(0, description="seed of the data stream")
    init_seed: int = Field(1, description="seed of the initialisation")
    lr: float = Field(1e-3, description="learning rate η")
    optimizer: str = Field("adam", description="zoo rule name")
    widths: tuple[int, ...] = Field((4, 8), description="hidden widths")
    hyper: dict[str, float] = Field(default_factory=dict, description="extra hyperparameters")
    note: str | None = Field(None, description="free text")
'''
exec(_SPEC_SOURCE)  # the same class text is run in a subprocess by the stability test
ToySpec = globals()["ToySpec"]


class DtypeSpec(ExperimentSpec):
    """A spec with a dtype field and a seeds mapping."""

    kind = "dtype-toy"
    dtype: str = Field("float64", description="compute dtype")
    seed: int = Field(7, description="the run's main seed")
    seeds: dict[str, int] = Field(default_factory=dict, description="seed per role")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("data_seed", 1),
        ("init_seed", 2),
        ("lr", math.nextafter(1e-3, 1.0)),  # the next representable float is a new run
        ("lr", -0.0),
        ("optimizer", "sgd"),
        ("widths", (8, 4)),
        ("hyper", {"eps": 1e-8}),
        ("note", ""),
    ],
)
def test_identity_changes_when_any_field_changes(field, value):
    base = ToySpec()
    changed = ToySpec(**{field: value})
    assert getattr(changed, field) != getattr(base, field)
    assert changed.identity() != base.identity()
    assert changed.canonical_json() != base.canonical_json()


def test_identity_includes_kind_and_version():
    spec = ToySpec()
    assert spec.identity() == run_identity("toy", spec.spec_dict(), gaugelab.__version__)
    assert spec.identity() != run_identity("toy", spec.spec_dict(), "0.0.0")
    assert spec.identity() != run_identity("zoo", spec.spec_dict(), gaugelab.__version__)
    assert re.fullmatch(r"[0-9a-f]{64}", spec.identity())


def test_identity_is_stable_across_processes():
    spec = ToySpec(lr=0.1, hyper={"b": 2.0, "a": 1.0}, widths=(3,), note="ü")
    code = (
        _SPEC_SOURCE
        + "\nspec = ToySpec(lr=0.1, hyper={'a': 1.0, 'b': 2.0}, widths=(3,), note='ü')"
        + "\nprint(spec.identity())"
    )
    identities = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        identities.add(done.stdout.strip())
    assert identities == {spec.identity()}


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5),
                       st.floats(allow_nan=False, allow_infinity=False), max_size=6))
def test_canonical_json_ignores_key_order(hyper):
    reordered = dict(reversed(list(hyper.items())))
    a = ToySpec(hyper=hyper, lr=0.5)
    b = ToySpec(lr=0.5, hyper=reordered)  # keyword order differs too
    assert a.canonical_json() == b.canonical_json()
    assert a.identity() == b.identity()


def test_canonical_json_is_compact_sorted_and_utf8():
    text = ToySpec(note="é").canonical_json()
    assert text == canonical_json("toy", json.loads(text)["spec"])
    assert text.startswith('{"kind":"toy","spec":{"data_seed":0,')
    assert "é" in text and ": " not in text


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_float_is_refused_at_construction_naming_the_field(value):
    with pytest.raises(pydantic.ValidationError, match=f"lr={value!r}; allowed: a finite number"):
        ToySpec(lr=value)
    assert ToySpec(lr=1e308).lr == 1e308


def test_spec_is_frozen_and_rejects_unknown_fields():
    spec = ToySpec()
    with pytest.raises(pydantic.ValidationError):
        spec.lr = 0.5
    with pytest.raises(pydantic.ValidationError):
        ToySpec(learning_rate=0.5)


def test_field_without_description_is_refused():
    with pytest.raises(TypeError, match="'x' has no description"):

        class Bad(ExperimentSpec):
            kind = "bad"
            x: int = 0


def test_set_typed_field_is_refused():
    with pytest.raises(TypeError, match="set-typed"):

        class Bad(ExperimentSpec):
            kind = "bad"
            names: frozenset[str] = Field(frozenset(), description="names")


def test_kind_must_be_kebab_case():
    with pytest.raises(TypeError, match="kebab-case"):

        class Bad(ExperimentSpec):
            kind = "Bad_Kind"


def test_seed_roles_collect_seed_fields_and_seeds_mapping():
    assert ToySpec(data_seed=3, init_seed=4).seed_roles() == {"data_seed": 3, "init_seed": 4}
    spec = DtypeSpec(seeds={"noise": 5, "seed": 9})
    assert spec.seed_roles() == {"noise": 5, "seed": 9}  # the mapping wins over the field


def test_manifest_records_versions_machine_dtype_and_seeds():
    import platform

    import torch

    spec = ToySpec(data_seed=11, init_seed=12)
    m = Manifest.for_spec(spec)
    assert m.identity == spec.identity()
    assert m.kind == "toy" and m.spec == spec.spec_dict()
    assert m.gaugelab_version == gaugelab.__version__
    assert m.torch_version == str(torch.__version__)
    assert m.python_version == platform.python_version()
    assert m.machine.architecture == platform.machine()
    assert m.machine.cpu_count == os.cpu_count()
    assert m.dtype == "float32"  # no dtype field: the experiments' default
    assert m.seeds == {"data_seed": 11, "init_seed": 12}
    assert m.created_at.endswith("+00:00")
    assert Manifest.for_spec(DtypeSpec()).dtype == "float64"


def test_manifest_git_commit_is_head_of_the_checkout():
    commit = git_commit()
    checkout = Path(gaugelab.__file__).resolve().parents[2]
    if (checkout / ".git").exists():
        assert commit is not None and re.fullmatch(r"[0-9a-f]{40}", commit)
    else:
        assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert Manifest.for_spec(ToySpec()).git_commit == commit


def test_manifest_round_trips_and_rejects_a_foreign_identity():
    m = Manifest.for_spec(ToySpec(hyper={"eps": 1e-8}))
    assert Manifest.model_validate_json(m.model_dump_json()) == m
    forged = m.model_dump() | {"identity": ToySpec(lr=2.0).identity()}
    with pytest.raises(pydantic.ValidationError, match="does not match its spec"):
        Manifest.model_validate(forged)


def test_environment_digest_covers_torch_python_and_machine():
    m = Manifest.for_spec(ToySpec())
    assert m.environment_digest() == environment_digest()
    env = {
        "torch_version": m.torch_version,
        "python_version": m.python_version,
        "machine": m.machine.model_dump(),
    }
    assert environment_digest(env) == m.environment_digest()
    assert environment_digest(env | {"torch_version": "0.0"}) != m.environment_digest()
