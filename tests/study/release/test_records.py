"""Tests for gaugelab.study.release.records: the immutable run manifest of one candidate and its
fourteen groups (seed 003 §0x0BG), each present, validated, covered by the digest and frozen;
the post-training record checked against the manifest's metric revisions and peak-memory
accounting."""

from __future__ import annotations

import dataclasses

import pytest

from gaugelab.study.release.selection import (
    MANIFEST_GROUPS,
    PEAK_MEMORY_NOT_MEASURED,
    CandidateManifest,
    CandidateRecord,
    Cost,
    MetricDeclaration,
    SelectionError,
    operational_scores,
    validate_records,
)

# §0x0BG, "Before training, freeze a row for every candidate:", line by line.
SEED_0x0BG_GROUPS = (
    "candidate_id",
    "base_model_id / tokenizer_id",
    "method / configured rank / target-module surface",
    "alpha / dropout / initialization",
    "optimizer / schedule / precision / clipping",
    "train dataset payload hash / sample order / token budget",
    "seed / world size / gradient accumulation",
    "checkpoint cadence / selection rule",
    "target-validation split and metric revision",
    "retention-validation split and metric revision",
    "stress-validation split and metric revision",
    "held-out test split identities",
    "diagnostic probe identities",
    "trainable-state and peak-memory accounting",
)

VALID = dict(
    candidate_id="lora_r2",
    base_model_id="tiny-base@1",
    tokenizer_id="chars@1",
    method="lora",
    rank=2,
    target_modules=("q_proj", "v_proj"),
    alpha=4.0,
    dropout=0.05,
    init="kaiming-a/zero-b",
    optimizer="adamw",
    schedule="cosine",
    precision="float32",
    clipping=1.0,
    data_hash="c" * 64,
    sample_order="seeded-shuffle",
    token_budget=4096,
    seeds=(0, 1, 2),
    world_size=1,
    grad_accumulation=1,
    checkpoint_steps=(100, 200),
    checkpoint_rule="max target",
    target_validation="target-val@v1",
    target_metric_revision="target-metric@v1",
    retention_validation="retention-val@v1",
    retention_metric_revision="retention-metric@v1",
    stress_validation="stress-val@v1",
    stress_metric_revision="stress-metric@v1",
    test_splits=("target-test@v1", "retention-test@v1"),
    probe_ids=("probe@v1",),
    trainable_parameters=16,
    optimizer_state_numel=32,
    peak_memory_accounting=PEAK_MEMORY_NOT_MEASURED,
)

# Another valid value of every field (the digest must see each one).
OTHER = dict(
    candidate_id="lora_r3",
    base_model_id="tiny-base@2",
    tokenizer_id="chars@2",
    method="rslora",
    rank=3,
    target_modules=("q_proj", "v_proj", "o_proj"),
    alpha=8.0,
    dropout=0.1,
    init="gaussian-a/zero-b",
    optimizer="sgd",
    schedule="constant",
    precision="bfloat16",
    clipping=None,
    data_hash="d" * 64,
    sample_order="fixed",
    token_budget=8192,
    seeds=(0, 1),
    world_size=2,
    grad_accumulation=4,
    checkpoint_steps=(100,),
    checkpoint_rule="min stress",
    target_validation="target-val@v2",
    target_metric_revision="target-metric@v2",
    retention_validation="retention-val@v2",
    retention_metric_revision="retention-metric@v2",
    stress_validation="stress-val@v2",
    stress_metric_revision="stress-metric@v2",
    test_splits=("target-test@v2",),
    probe_ids=(),
    trainable_parameters=24,
    optimizer_state_numel=48,
    peak_memory_accounting="torch.cuda.max_memory_allocated over initialization and training",
)

# One-field refusals, at least one per group: (field, bad value, message fragment).
INVALID = [
    ("candidate_id", "", "candidate_id=''"),
    ("base_model_id", "", "base_model_id=''"),
    ("tokenizer_id", "", "tokenizer_id=''"),
    ("method", "dora", "method='dora'"),
    ("rank", 0, "rank=0"),
    ("target_modules", (), "target_modules"),
    ("target_modules", ("q_proj", "q_proj"), "target_modules"),
    ("alpha", None, "alpha=None"),
    ("dropout", 1.0, "dropout=1.0"),
    ("init", "", "init=''"),
    ("optimizer", "", "optimizer=''"),
    ("schedule", "", "schedule=''"),
    ("precision", "", "precision=''"),
    ("clipping", 0.0, "clipping=0.0"),
    ("data_hash", "", "data_hash=''"),
    ("sample_order", "", "sample_order=''"),
    ("token_budget", -1, "token_budget=-1"),
    ("seeds", (1, 1), "seeds"),
    ("world_size", 0, "world_size=0"),
    ("grad_accumulation", 0, "grad_accumulation=0"),
    ("checkpoint_steps", (200, 100), "checkpoint_steps"),
    ("checkpoint_rule", "", "checkpoint_rule=''"),
    ("target_validation", "", "target_validation=''"),
    ("target_metric_revision", "", "target_metric_revision=''"),
    ("retention_validation", "", "retention_validation=''"),
    ("retention_metric_revision", None, "retention_metric_revision=None"),
    ("stress_validation", "", "stress_validation=''"),
    ("stress_metric_revision", "", "stress_metric_revision=''"),
    ("test_splits", (), "test_splits"),
    ("test_splits", ("target-val@v1",), "shared: target-val@v1"),
    ("probe_ids", ("",), "probe_ids"),
    ("probe_ids", ("p@v1", "p@v1"), "probe_ids"),
    ("probe_ids", ("target-test@v1",), "shared: target-test@v1"),
    ("trainable_parameters", -1, "trainable_parameters=-1"),
    ("optimizer_state_numel", -1, "optimizer_state_numel=-1"),
    ("peak_memory_accounting", "", "peak_memory_accounting=''"),
]

GROUP_OF = {name: group for group, names in MANIFEST_GROUPS for name in names}


def _manifest(**changes) -> CandidateManifest:
    return CandidateManifest(**{**VALID, **changes})


def test_seed_0x0BG_the_manifest_holds_the_fourteen_groups_and_nothing_else():
    assert tuple(group for group, _ in MANIFEST_GROUPS) == SEED_0x0BG_GROUPS
    names = [name for _, group in MANIFEST_GROUPS for name in group]
    assert len(names) == len(set(names))  # no field in two groups
    assert names == [f.name for f in dataclasses.fields(CandidateManifest)]  # in field order
    assert all(group for _, group in MANIFEST_GROUPS)  # no group without a field


def test_seed_0x0BG_every_group_has_a_one_field_refusal_and_another_valid_value():
    assert {GROUP_OF[name] for name, _, _ in INVALID} == set(SEED_0x0BG_GROUPS)
    assert set(VALID) == set(OTHER) == set(GROUP_OF)


@pytest.mark.parametrize("group", SEED_0x0BG_GROUPS)
def test_seed_0x0BG_each_group_is_present_hashed_and_frozen(group):
    base = _manifest()
    names = dict(MANIFEST_GROUPS)[group]
    consistent = {  # a changed method needs its rank; a surface change is a set change
        "method": {"method": "rslora"},
        "rank": {"rank": 3},
    }
    for name in names:
        assert name in dataclasses.asdict(base)
        changed = _manifest(**consistent.get(name, {name: OTHER[name]}))
        assert getattr(changed, name) != getattr(base, name)
        assert changed.digest() != base.digest(), name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(base, name, OTHER[name])
    assert _manifest().digest() == base.digest()  # the same row, the same identity


@pytest.mark.parametrize(("name", "bad", "match"), INVALID)
def test_seed_0x0BG_each_group_is_validated(name, bad, match):
    with pytest.raises(SelectionError, match=match):
        _manifest(**{name: bad})


@pytest.mark.parametrize(
    "name",
    [
        "target_metric_revision",
        "retention_metric_revision",
        "stress_metric_revision",
        "peak_memory_accounting",
    ],
)
def test_seed_0x0BG_metric_revisions_and_peak_memory_accounting_are_required(name):
    with pytest.raises(TypeError, match=name):
        CandidateManifest(**{k: v for k, v in VALID.items() if k != name})


def test_seed_0x0BG_metric_revisions_are_the_manifests_own():
    assert _manifest().metric_revisions() == {
        "target": "target-metric@v1",
        "retention": "retention-metric@v1",
        "stress": "stress-metric@v1",
    }


# The post-training record is checked against its manifest (validate_records).

DECLARATIONS = tuple(
    MetricDeclaration(name=m, direction="max", revision=f"{m}-metric@v1")
    for m in ("target", "retention", "stress")
)
SCORES = {"target": 74.0, "retention": 85.0, "stress": 89.0}


def _record(manifest: CandidateManifest, *, peak_mib=None, **revisions) -> CandidateRecord:
    return CandidateRecord.from_manifest(
        manifest,
        checkpoint_id="ck",
        revisions={**manifest.metric_revisions(), **revisions},
        operational=operational_scores(SCORES, SCORES, DECLARATIONS, baseline_id="base"),
        cost=Cost(16, 32, 1.0, peak_mib=peak_mib),
    )


def test_seed_0x0BG_a_record_under_another_metric_revision_is_refused():
    m = _manifest()
    validate_records([_record(m)], DECLARATIONS, manifests=[m])
    # the record and the policy agree on v2; the frozen manifest says v1
    moved = _manifest(target_metric_revision="target-metric@v2")
    declarations = (
        dataclasses.replace(DECLARATIONS[0], revision="target-metric@v2"),
        *DECLARATIONS[1:],
    )
    with pytest.raises(SelectionError, match=r"revisions\['target'\]='target-metric@v2'"):
        validate_records(
            [dataclasses.replace(_record(moved), manifest_digest=m.digest())],
            declarations,
            manifests=[m],
        )


def test_seed_0x0BG_the_measured_peak_follows_the_declared_accounting():
    unmeasured = _manifest()
    with pytest.raises(SelectionError, match=r"peak_mib=512\.0; allowed: None"):
        validate_records(
            [_record(unmeasured, peak_mib=512.0)], DECLARATIONS, manifests=[unmeasured]
        )
    measured = _manifest(peak_memory_accounting=OTHER["peak_memory_accounting"])
    validate_records([_record(measured, peak_mib=512.0)], DECLARATIONS, manifests=[measured])
    with pytest.raises(SelectionError, match="peak_mib=None; allowed: a measurement"):
        validate_records([_record(measured)], DECLARATIONS, manifests=[measured])
