"""gaugelab.experiments.learn_forget.manifest: the study declares its own low-rank study manifest
(seed 003 §0x00F–0x00K) before any run; a spec whose manifest is invalid is refused by the plan."""

import pytest

from gaugelab.experiments.learn_forget.design import split_ids
from gaugelab.experiments.learn_forget.run import (
    LearnForgetSpec,
    plan,
    quick_spec,
    run_learn_forget,
    study_manifest,
)
from gaugelab.experiments.lora.run import FinetuneSpec
from gaugelab.study.release.study_manifest import (
    SplitSeparationError,
    study_ledger,
    validate_study_manifest,
)


def finetune(spec, **changes) -> FinetuneSpec:
    return FinetuneSpec.model_validate({**spec.finetune.spec_dict(), **changes})


def test_the_quick_study_declares_its_objects_splits_and_envelopes():
    spec = quick_spec()
    m = study_manifest(spec)
    validate_study_manifest(m)
    assert m.manifest_id == f"learn-forget-{spec.identity()[:12]}"
    assert [e.envelope_id for e in m.protocols] == [
        "full_update_v1", "lora_v1", "lora_v1.rslora", "svd_reconstruction_v1",
        "subspace_overlap_v1", "retention_v1",
    ]  # fmt: skip
    p = spec.finetune.pretrain
    assert m.parameter_schema.text().startswith("row-major blocks.0.attn.q_proj.weight[32,32], ")
    # 2 layers × (4 attention projections 32×32 + fc_in 64×32 + fc_out 32×64)
    assert study_ledger(m)["D"] == p.n_layers * (4 * 32 * 32 + 2 * 32 * 64) == 16384
    rows = {s.split_id: s.rows for s in m.dataset_objects}
    assert rows == {"train_v1:a": 80, "eval_v1:a": 10, "test_v1:target:a": 10,
                    "retention_v1": 10, "stress_v1": 10, "test_v1:retention": 10,
                    "test_v1:stress": 10}  # fmt: skip
    samples = [set(s.sample_ids) for s in m.dataset_objects]
    assert sum(map(len, samples)) == len(set().union(*samples))  # no chunk in two splits
    sealed = [m.obj(f"test_v1:{d}").payload_id for d in ("target:a", "retention", "stress")]
    assert tuple(sealed) == split_ids(spec, "a", "test")  # the sealed store's test splits


def test_every_lora_factor_pair_carries_its_rank_scale_and_envelope():
    m = study_manifest(quick_spec())
    A, B = m.obj("A:a:lora-r4:blocks.1.mlp.fc_in"), m.obj("B:a:lora-r4:blocks.1.mlp.fc_in")
    assert (A.shape, B.shape, A.rank, A.scale) == ((4, 32), (64, 4), 4, 2.0)  # α = 2r: s = 2
    assert m.obj("A:a:rslora-r4:blocks.0.attn.q_proj").scale == 4.0  # α/√r = 8/2
    assert A.produced_by == "lora_v1"
    assert m.obj("A:a:rslora-r4:blocks.0.attn.q_proj").produced_by == "lora_v1.rslora"
    product = m.obj("delta_W_lora:a:lora-r4:blocks.1.mlp.fc_in")
    assert product.factor_ids == (B.object_id, A.object_id)
    assert study_ledger(m)[f"factors[{product.object_id}]"] == 4 * (64 + 32)
    configured = [r for r in m.rank_policies if r.policy_id == "configured"]
    assert [r.fields["rank"] for r in configured] == ["1", "4", "4"]


def test_a_study_without_full_fine_tuning_declares_no_full_update_or_its_analyses():
    spec = quick_spec(finetune=finetune(quick_spec(), full=False), rslora_rank=None)
    m = study_manifest(spec)
    assert [e.envelope_id for e in m.protocols] == ["lora_v1", "retention_v1"]
    assert [r.policy_id for r in m.rank_policies] == ["configured", "configured"]


def test_the_default_study_manifest_validates():
    m = study_manifest(LearnForgetSpec())
    assert len([w for w in m.matrix_objects if w.kind == "product"]) == 6 * 3 * 6  # cands·L·T


def test_a_target_domain_that_is_the_retention_text_is_refused_before_any_run(tmp_path):
    corpus = quick_spec().finetune.pretrain.corpus
    target = corpus.with_target(corpus.retention)  # accepted by the spec: same cut, same fields
    spec = quick_spec(finetune=finetune(quick_spec(), target_corpus=target.model_dump()))
    refused = r"'retention_v1' holds sample id .* in 'train_v1:a' too"
    with pytest.raises(SplitSeparationError, match=refused):
        plan(spec)
    store = tmp_path / "store.sqlite"
    with pytest.raises(SplitSeparationError):
        run_learn_forget(spec, store=store, write_report=False)
    assert not store.exists()


def test_a_second_block_on_the_first_blocks_target_is_refused():
    spec = quick_spec(second_target=quick_spec().finetune.pretrain.corpus)
    with pytest.raises(SplitSeparationError, match=r"'train_v1:b' holds .* in 'train_v1:a'"):
        plan(spec)
