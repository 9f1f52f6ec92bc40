"""Tests for gaugelab.study.release.study_manifest: the seed's Loop-2 teaching manifest built
exactly and validated (seed 003 §0x00F–0x00K), and each named error of the validator fired by
the smallest change of that manifest the seed says must fail."""

from __future__ import annotations

import dataclasses

import pytest

from gaugelab.study.release.study_manifest import (
    PROTOCOL_IDS,
    RANK_POLICIES,
    RANK_POLICY_FIELDS,
    TRAINING_PROTOCOL_IDS,
    IdentityError,
    LedgerError,
    LowRankStudyManifest,
    ProtocolEnvelopeError,
    RankPolicyFieldError,
    ShapeError,
    SplitSeparationError,
    StudyManifestError,
    payload_digest,
    study_ledger,
    teaching_manifest,
)

M = teaching_manifest()
NAMESPACES = {
    "parameter_objects": "object_id",
    "matrix_objects": "object_id",
    "function_objects": "object_id",
    "dataset_objects": "split_id",
    "rank_policies": "policy_id",
    "protocols": "envelope_id",
}


def ids(namespace: str) -> list[str]:
    return [getattr(o, NAMESPACES[namespace]) for o in getattr(M, namespace)]


def changed(namespace: str, name: str, **changes) -> LowRankStudyManifest:
    """The teaching manifest with one record of ``namespace`` changed (validated again)."""
    key = NAMESPACES[namespace]
    items = tuple(
        dataclasses.replace(o, **changes) if getattr(o, key) == name else o
        for o in getattr(M, namespace)
    )
    return dataclasses.replace(M, **{namespace: items})


# --- the seed's teaching manifest ------------------------------------------------------------


def test_seed_0x00F_teaching_manifest_has_the_six_namespaces_and_their_objects():
    assert M.manifest_id == "m6-7-linear-study-v1"
    assert M.parameter_schema.text() == "row-major W[4,6] -> theta[24]"
    assert ids("parameter_objects") == ["theta_0", "theta_full", "delta_theta_full", "u"]
    assert ids("matrix_objects") == ["W_0", "W_full", "delta_W_full", "A", "B", "delta_W_lora"]
    assert ids("function_objects") == ["f_theta", "F_train", "J_train", "K_train"]
    assert ids("dataset_objects") == ["train_v1", "eval_v1", "retention_v1"]
    assert ids("rank_policies") == list(RANK_POLICIES) == [
        "configured", "algebraic", "numerical", "stable", "energy", "entropy",
    ]  # fmt: skip
    assert [e.protocol for e in M.protocols] == list(PROTOCOL_IDS)


def test_seed_0x00G_coordinates_factors_and_their_distinct_identities():
    theta0, u = M.obj("theta_0"), M.obj("u")
    assert (theta0.dim, u.dim, u.schema) == (24, 3, theta0.schema)  # theta(u) = theta_0 + M u
    A, B, product = M.obj("A"), M.obj("B"), M.obj("delta_W_lora")
    assert (A.shape, B.shape, A.rank, A.scale) == ((2, 6), (4, 2), 2, 4.0)  # s = α/r = 4
    assert (A.axes, B.axes) == (("rank", "in"), ("out", "rank"))
    assert product.factor_ids == ("B", "A")  # ΔW_LoRA = s·B A
    delta = M.obj("delta_W_full")
    assert (delta.base_id, delta.trained_id, delta.axes) == ("W_0", "W_full", ("out", "in"))
    assert len({A.object_id, B.object_id, product.object_id, delta.object_id}) == 4


def test_seed_0x00H_three_disjoint_splits_6_4_4_and_the_kernel_axes():
    rows = {s.split_id: s.rows for s in M.dataset_objects}
    assert rows == {"train_v1": 6, "eval_v1": 4, "retention_v1": 4}
    train = M.obj("train_v1")
    assert train.payload == tuple(tuple(float(i == j) for j in range(6)) for i in range(6))
    assert train.payload_id == payload_digest(train.payload)  # the identity basis (§0x04H)
    samples = [set(s.sample_ids) for s in M.dataset_objects]
    assert not (samples[0] & samples[1] or samples[0] & samples[2] or samples[1] & samples[2])
    datasets = {s.split_id: s.dataset_id for s in M.dataset_objects}
    assert datasets["retention_v1"] not in (datasets["train_v1"], datasets["eval_v1"])
    assert M.obj("J_train").axes == ("sample*output", "parameter")
    assert M.obj("K_train").axes == ("sample*output", "sample*output")


def test_seed_0x00I_every_rank_policy_names_its_matrix_and_its_fields():
    for policy in M.rank_policies:
        assert policy.matrices and set(policy.fields) == set(RANK_POLICY_FIELDS[policy.policy_id])
    configured = M.rank_policies[0]
    assert (configured.matrices, configured.fields["rank"]) == (("delta_W_lora",), "2")
    numerical = M.rank_policies[2]
    assert numerical.fields["tolerance_rule"] == "sigma_i > 1e-6 * sigma_1 (strict)"  # §0x04I


def test_seed_0x00J_nine_envelopes_each_with_its_record_and_a_content_addressed_result_id():
    assert ids("protocols") == [
        "did_v1", "said_v1", "full_update_v1", "lora_v1", "svd_reconstruction_v1",
        "output_weighted_v1", "subspace_overlap_v1", "kernel_v1", "retention_v1",
    ]  # fmt: skip
    for e in M.protocols:
        training = e.protocol in TRAINING_PROTOCOL_IDS
        assert (e.training is not None, e.analysis is not None) == (training, not training)
    assert M.envelope("lora_v1").trainable == ("A", "B")
    before = M.result_id("lora_v1")
    assert M.result_id("lora_v1") == before  # deterministic
    other = changed("protocols", "lora_v1", sweep="rank sweep only")
    assert other.result_id("lora_v1") != before  # a changed envelope is a new result ID
    assert other.result_id("did_v1") != M.result_id("did_v1")  # another manifest, too


def test_seed_0x00K_teaching_ledger():
    ledger = study_ledger(M)
    assert ledger["D"] == 24  # ambient parameter coordinates
    assert ledger["d[u]"] == 3  # global teaching subspace coordinates
    assert ledger["dense[W_0]"] == 24  # 4 * 6
    assert ledger["factors[delta_W_lora]"] == 20  # 2*(6+4)
    assert ledger["manifold[delta_W_lora]"] == 16  # 2*(6+4-2)
    assert ledger["gauge[delta_W_lora]"] == 4  # 2^2
    rows = [ledger[f"rows[{s}]"] for s in ("train_v1", "eval_v1", "retention_v1")]
    assert rows == [6, 4, 4]
    assert ledger["outputs[F_train]"] == 24  # N*C = 6*4
    assert ledger["shape[J_train]"] == ledger["shape[K_train]"] == (24, 24)
    assert dict(M.ledger) == ledger


def test_the_manifest_is_immutable_and_its_digest_names_its_content():
    with pytest.raises(dataclasses.FrozenInstanceError):
        M.manifest_id = "other"  # type: ignore[misc]
    assert teaching_manifest().digest() == M.digest()
    reordered = dataclasses.replace(M, ledger=dict(reversed(list(M.ledger.items()))))
    assert reordered.digest() == M.digest()
    assert changed("dataset_objects", "eval_v1", revision="metric:v2").digest() != M.digest()


# --- each named error, from the smallest change the seed says must fail -------------------------


def test_named_errors_are_value_errors():
    for err in (IdentityError, ShapeError, SplitSeparationError, RankPolicyFieldError,
                ProtocolEnvelopeError, LedgerError):  # fmt: skip
        assert issubclass(err, StudyManifestError) and issubclass(err, ValueError)


def test_split_separation_error_a_row_shared_between_train_v1_and_eval_v1():
    shared = ("train_v1/0", "eval_v1/1", "eval_v1/2", "eval_v1/3")
    with pytest.raises(SplitSeparationError, match=r"'eval_v1'.*'train_v1/0'.*in 'train_v1'"):
        changed("dataset_objects", "eval_v1", sample_ids=shared)


def test_split_separation_error_a_payload_row_shared_under_another_sample_id():
    rows = ((1.0, 0.0, 0.0, 0.0, 0.0, 0.0), (0.5,) * 6, (0.25,) * 6, (0.125,) * 6)  # e_1 first
    with pytest.raises(SplitSeparationError, match=r"payload row 0 .* of 'train_v1'"):
        changed("dataset_objects", "eval_v1", payload=rows, payload_id=payload_digest(rows))


def test_split_separation_error_retention_v1_on_the_target_dataset():
    with pytest.raises(SplitSeparationError, match=r"retention_v1.*dataset_id.*separate dataset"):
        changed("dataset_objects", "retention_v1", dataset_id="teaching-linear:v1")


def test_shape_error_a_wrong_factor_shape():
    with pytest.raises(ShapeError, match=r"'A'.shape=\[3, 6\]; allowed: \[2, 6\]"):
        changed("matrix_objects", "A", shape=(3, 6))


def test_shape_error_a_schema_tensor_without_coordinates():
    schema = dataclasses.replace(M.parameter_schema, tensors=(("W", (4, 0)),))
    with pytest.raises(ShapeError, match=r"parameter_schema W: shape \(4, 0\)"):
        dataclasses.replace(M, parameter_schema=schema)


def test_shape_error_a_parameter_gram_declared_as_the_output_space_kernel():
    with pytest.raises(ShapeError, match=r"'K_train'.axes.*Jᵀ J is another object"):
        changed("function_objects", "K_train", axes=("parameter", "parameter"))
    with pytest.raises(ShapeError, match=r"'J_train'.shape=\[24, 23\]; allowed: \[24, 24\]"):
        changed("function_objects", "J_train", shape=(24, 23))


def test_identity_error_same_shape_other_coordinate_order():
    # "Shape equality alone is insufficient": theta_full in column-major has 24 coordinates too
    with pytest.raises(IdentityError, match=r"'theta_full'.schema.*shape equality alone"):
        changed("parameter_objects", "theta_full", schema="column-major W[4,6] -> theta[24]")


def test_identity_error_factors_in_the_wrong_multiplication_order_or_a_shared_id():
    with pytest.raises(IdentityError, match=r"factor_ids\[0\]='A' is a matrix factor_A"):
        changed("matrix_objects", "delta_W_lora", factor_ids=("A", "B"))
    with pytest.raises(IdentityError, match="'delta_W_full' is declared twice"):
        changed("matrix_objects", "delta_W_lora", object_id="delta_W_full")


def test_rank_policy_field_error_a_missing_tolerance_rule_or_a_wrong_configured_rank():
    fields = {"dtype": "float64", "svd_backend": "exact (teaching oracle)"}
    with pytest.raises(RankPolicyFieldError, match=r"'numerical'.fields\['tolerance_rule'\]"):
        changed("rank_policies", "numerical", fields=fields)
    with pytest.raises(RankPolicyFieldError, match="configured rank"):
        changed("rank_policies", "configured", fields={"factor_orientation": "B A", "rank": "3"})


def test_protocol_envelope_error_a_missing_envelope():
    protocols = tuple(e for e in M.protocols if e.envelope_id != "full_update_v1")
    with pytest.raises(ProtocolEnvelopeError, match=r"'theta_full'.produced_by='full_update_v1'"):
        dataclasses.replace(M, protocols=protocols)


def test_protocol_envelope_error_a_training_record_without_its_optimizer():
    training = dataclasses.replace(M.envelope("lora_v1").training, optimizer="")
    with pytest.raises(ProtocolEnvelopeError, match=r"'lora_v1'.training.optimizer=''"):
        changed("protocols", "lora_v1", training=training)


def test_ledger_error_a_wrong_or_missing_line():
    with pytest.raises(LedgerError, match=r"ledger\['factors\[delta_W_lora\]'\]=24; allowed: 20"):
        dataclasses.replace(M, ledger={**M.ledger, "factors[delta_W_lora]": 24})
    short = {k: v for k, v in M.ledger.items() if k != "rows[retention_v1]"}
    with pytest.raises(LedgerError, match=r"lacks \['rows\[retention_v1\]'\]"):
        dataclasses.replace(M, ledger=short)
    with pytest.raises(LedgerError, match=r"rows\[eval_v1\]'\]=4; allowed: 3"):
        changed("dataset_objects", "eval_v1", sample_ids=("eval_v1/0", "eval_v1/1", "eval_v1/2"))
