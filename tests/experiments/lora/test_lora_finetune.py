"""The LoRA fine-tuning study and inspect_lora on a quick study (2 layers, d_model 32): stored
runs, learning curves recomputed from the saved adapters and deltas, PEFT interop of the written
adapters, resume bit for bit, and the evidence ladder's identities."""

import json
import os
import shutil

import pytest
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora.data import (
    BASE_PREFIX,
    base_model,
    eval_batches,
    load_corpus,
    pretrain_weights,
)
from gaugelab.experiments.lora.ladder import mean_loss
from gaugelab.experiments.lora.run import (
    ALL_TARGETS,
    FinetuneSpec,
    inspect_lora,
    inspect_tables,
    plan,
    quick_spec,
    resolve_targets,
    run_lora_finetune,
    run_lora_inspect,
)
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import SweepInterrupted

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = quick_spec(ranks=(2,), seeds=(0, 1))
RANKS = (1, 2, 32)  # 32 = d_model: every update of the quick model kept whole


@pytest.fixture(scope="module")
def study(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("lora") / "store.sqlite"
    outcome = run_lora_finetune(SPEC, store=store)
    return store, outcome


@pytest.fixture(scope="module")
def inspected(study, one_thread):
    store, outcome = study
    return {c.label: inspect_lora(c.label, store=store, ranks=RANKS)
            for c in outcome.result.candidates}  # fmt: skip


def _artifact_dir(store, identity, name):
    with RunStore(store) as db:
        attempt = [a for a in db.attempts(identity) if a.termination == "completed"][-1]
        found = [a.path for a in db.artifacts(identity) if a.ordinal == attempt.ordinal]
    return next(p if p.name == name else p.parent for p in found
                if name in (p.name, p.parent.name))  # fmt: skip


def _logged(store, identity, name):
    with RunStore(store) as db:
        rows = db.metrics(identity, name=name)
    return rows[-1].value


def _base(store):
    with RunStore(store) as db:
        weights = pretrain_weights(db, SPEC.pretrain)
    corpus = load_corpus(SPEC.pretrain.corpus)
    return base_model(SPEC.pretrain, weights, corpus.d_vocab), eval_batches(corpus, SPEC.pretrain)


def test_pretrain_and_every_candidate_complete_with_both_domains_curves(study):
    store, outcome = study
    result = outcome.result
    assert not result.failures, result.failures
    assert [c.label for c in result.candidates] == ["full", "lora r=2"]
    pre = result.pretrain.curves
    assert pre.steps == [0, 10, 20, 30]
    for c in result.candidates:
        assert c.curves.steps == [0, 10, 20] and c.seeds == [0, 1]
        for domain in ("target", "retention"):
            # every candidate starts from the pretrained weights on the same batches
            start = getattr(c.curves, domain)[0]
            assert start == pytest.approx([getattr(pre, domain)[-1][0]] * 2, rel=1e-6)
            for e, seed in enumerate((0, 1)):
                logged = _logged(store, c.state.identity, f"{domain}/val_loss/seed={seed}")
                assert logged == pytest.approx(c.final(domain)[e], rel=1e-12)
    full, lora = result.candidates
    assert full.final("target")[0] < full.curves.target[0][0]  # full fine-tuning learns
    assert lora.trainable_parameters == 2 * 2 * sum(  # r (d_in + d_out) per projection
        {"q_proj": 64, "k_proj": 64, "v_proj": 64, "o_proj": 64, "fc_in": 96, "fc_out": 96}[t]
        for t in ALL_TARGETS
    )


def test_a_lora_runs_logged_loss_equals_recomputation_from_its_saved_adapter(study):
    store, outcome = study
    lora = outcome.result.candidates[1]
    for seed in (0, 1):
        folder = _artifact_dir(store, lora.state.identity, f"adapter-seed{seed}")
        adapter = Adapter.load(folder)
        assert adapter.config.base_model_name_or_path == BASE_PREFIX + SPEC.pretrain.identity()
        assert {rec.seed for rec in adapter.records.values()} == {seed}
        assert {rec.r for rec in adapter.records.values()} == {2}
        model, val = _base(store)
        adapter.apply(model)
        for domain in ("target", "retention"):
            logged = _logged(store, lora.state.identity, f"{domain}/val_loss/seed={seed}")
            assert mean_loss(model, val[domain]) == pytest.approx(logged, rel=1e-5)


def test_full_finetuning_deltas_rebuild_the_logged_model(study):
    store, outcome = study
    full = outcome.result.candidates[0]
    import safetensors.torch

    deltas = safetensors.torch.load_file(
        str(_artifact_dir(store, full.state.identity, "deltas-seed1.safetensors"))
    )
    model, val = _base(store)
    assert set(deltas) == set(model.state_dict())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p += deltas[name]
    logged = _logged(store, full.state.identity, "target/val_loss/seed=1")
    assert mean_loss(model, val["target"]) == pytest.approx(logged, rel=1e-5)


def test_written_adapters_load_in_peft_with_the_same_delta_w_and_logits(study):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    peft = pytest.importorskip("peft")
    store, outcome = study
    folder = _artifact_dir(store, outcome.result.candidates[1].state.identity, "adapter-seed0")
    ours, _ = _base(store)
    adapter = Adapter.load(folder)
    adapter.apply(ours)
    theirs = peft.PeftModel.from_pretrained(_base(store)[0], str(folder))
    for name in adapter.modules:
        layer = theirs.base_model.model.get_submodule(name)
        assert torch.equal(layer.get_delta_weight("default"), adapter.delta_weight(name)), name
    x = torch.randint(0, SPEC.pretrain.corpus.block_size, (2, 16))
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() <= 1e-6


def test_adapters_of_different_seeds_are_different_trained_factors(study):
    store, outcome = study
    identity = outcome.result.candidates[1].state.identity
    a, b = (Adapter.load(_artifact_dir(store, identity, f"adapter-seed{s}")) for s in (0, 1))
    for name in a.modules:
        assert a.modules[name].B.abs().max() > 0  # B started at zero and trained
        assert not torch.equal(a.delta_weight(name), b.delta_weight(name))


def test_an_interrupted_candidate_resumes_from_its_checkpoint_bit_for_bit(study, tmp_path):
    reference_store, reference = study
    store = tmp_path / "store.sqlite"
    spec = SPEC.model_copy(update={"full": False})

    def stop(label, step, total):
        if label == "lora r=2" and step == 15:  # after the checkpoint at step 10
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted):
        run_lora_finetune(spec, store=store, step_progress=stop, write_report=False)
    again = run_lora_finetune(spec, store=store, write_report=False)
    assert list(again.sweep.resumed.values()) == [10]
    assert len(again.sweep.skipped) == 1  # the pretrain run is reused
    identity = again.result.candidates[0].state.identity
    assert identity == reference.result.candidates[1].state.identity
    with RunStore(store) as db, RunStore(reference_store) as ref:
        got = {(m.name, m.step): m.value for m in db.metrics(identity)}
        want = {(m.name, m.step): m.value for m in ref.metrics(identity)}
    assert got == want  # every logged value, bit for bit


def test_the_ladder_weight_residual_is_the_truncation_tail(inspected):
    for result in inspected.values():
        assert result.has_ladder and len(result.modules) == 2 * len(ALL_TARGETS)
        for m in result.modules:
            energy = sum(s * s for s in m.sigma)
            for row, t in zip(m.ladder, m.truncation, strict=True):
                tail = sum(s * s for s in m.sigma[row.rank :])  # Σ_{i>r} σ_i²
                assert row.weight_residual == pytest.approx(tail, rel=1e-9, abs=1e-12 * energy)
                assert t["frobenius_squared"] == pytest.approx(tail, rel=1e-12, abs=1e-300)
                assert row.update_energy == pytest.approx(energy, rel=1e-9)


def test_keeping_the_whole_update_gives_the_unmodified_loss_exactly(inspected):
    lora, full = inspected["lora r=2"], inspected["full"]
    for m in lora.modules:  # rank >= 2 keeps a rank-2 adapter's update whole
        for row in m.ladder:
            if row.rank >= 2:
                assert row.loss_svd == lora.reference["target"], (m.module, row.rank)
    for m in full.modules:
        assert m.ladder[-1].rank == 32 and m.ladder[-1].loss_svd == full.reference["target"]
    for result in (lora, full):
        last = result.joint[-1]
        assert (last.target_svd, last.retention_svd) == (
            result.reference["target"],
            result.reference["retention"],
        )
    # merged W0 + ΔW against the run's unmerged adapter: the same function up to round-off
    assert lora.reference["target"] == pytest.approx(lora.reference["logged_target"], rel=1e-5)


def test_output_weighted_truncation_never_loses_to_weight_svd_on_the_captured_inputs(inspected):
    for result in inspected.values():
        for m in result.modules:
            for row in m.ladder:
                # optimal on the covariance support; the directions cut off (eigenvalues at or
                # below support_tol) add at most support_tol · ‖ΔW Q_0‖_F²
                slack = row.support_tol * row.invisible_energy + 1e-12 * row.output_energy
                assert row.output_residual_ow <= row.output_residual_svd + slack
                assert row.weight_residual_ow >= row.weight_residual - 1e-12 * row.update_energy
                assert row.n_samples == SPEC.pretrain.val_batches * 8 * 64


def test_the_ladder_table_shows_each_modules_input_support_of_d_in(inspected):
    from gaugelab.experiments.lora.views import ladder_table

    result = inspected["lora r=2"]
    table = ladder_table(result)
    col = table.columns.index("input support")
    rows = iter(table.rows)
    for m in result.modules:
        for ladder_row in m.ladder:
            support, d_in = next(rows)[col].split("/")
            assert (int(support), int(d_in)) == (ladder_row.support_rank, m.shape[1])
            assert 0 < int(support) <= int(d_in)


def test_rank_policies_read_the_configured_rank_of_adapters_and_none_of_dense_updates(inspected):
    for m in inspected["lora r=2"].modules:
        assert m.configured == 2 and m.policy("configured") == 2
        assert m.policy("algebraic") <= 2 and 1 <= m.energy90 <= 2
    for m in inspected["full"].modules:
        assert m.configured is None and m.policy("configured") is None
        assert m.policy("numerical") <= min(m.shape)
    assert "embed.weight" in inspected["full"].other_updates
    titles = [t.title for t in inspect_tables(inspected["full"])]
    assert any("jointly" in t for t in titles) and any("per module" in t for t in titles)


def test_a_plain_peft_folder_gets_what_the_factors_allow_and_says_what_it_could_not(
    study, inspected, tmp_path
):
    store, outcome = study
    source = _artifact_dir(store, outcome.result.candidates[1].state.identity, "adapter-seed0")
    folder = tmp_path / "adapter"
    shutil.copytree(source, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "someone/else"
    (folder / "adapter_config.json").write_text(json.dumps(config))
    result = inspect_lora(folder, store=tmp_path / "none.sqlite", ranks=RANKS)
    assert not result.has_ladder and not result.reference
    assert len(result.not_computed) == 1 and "'someone/else'" in result.not_computed[0]
    by_run = {m.module: m for m in inspected["lora r=2"].modules}
    for m in result.modules:
        assert m.sigma == by_run[m.module].sigma
        assert [p.value for p in m.policies] == [p.value for p in by_run[m.module].policies]
    # the unmodified folder names its base: with the store, the ladder is computed
    named = inspect_lora(source, store=store, ranks=(1,))
    assert named.has_ladder
    assert named.joint[0].target_svd == inspected["lora r=2"].joint[0].target_svd


def test_inspect_resolves_labels_and_prefixes_and_writes_its_report(study, tmp_path):
    store, outcome = study
    identity = outcome.result.candidates[1].state.identity
    result, path = run_lora_inspect(identity[:8], store=store, ranks=(1,), seed=1,
                                    report_dir=tmp_path / "r")  # fmt: skip
    assert result.source == f"run {identity[:12]}" and result.seed == 1
    assert path.name == "report.html" and (tmp_path / "r" / "spectrum.png").exists()
    page = path.read_text(encoding="utf-8")  # it reads a stored run: there are no runs to count
    assert "<h1>Report: inspect " in page and "0 runs" not in page
    data = json.loads((tmp_path / "r" / "inspect.json").read_text())
    assert len(data["modules"]) == len(result.modules)
    with pytest.raises(FileExistsError):
        run_lora_inspect(identity[:8], store=store, ranks=(1,), report_dir=tmp_path / "r")
    with pytest.raises(ValueError, match="seed=7; allowed: 0, 1"):
        inspect_lora("lora r=2", store=store, seed=7)
    with pytest.raises(ValueError, match="no candidate 'lora r=9'"):
        inspect_lora("lora r=9", store=store)
    with pytest.raises(ValueError, match="'lora-pretrain' run"):
        inspect_lora(SPEC.pretrain.identity()[:10], store=store)


def test_plan_makes_one_run_per_candidate_and_shares_the_full_run_across_lora_options():
    spec = quick_spec(ranks=(1, 4))
    runs = plan(spec).specs()
    assert [r.candidates() for r in runs] == [["full"], ["lora r=1"], ["lora r=4"]]
    other = plan(quick_spec(ranks=(4,), rslora=True, lr=1e-2, targets=("q_proj",))).specs()
    assert other[0].identity() == runs[0].identity()  # full fine-tuning reads no LoRA option
    assert other[1].identity() != runs[2].identity()
    assert plan(spec).study == f"lora-finetune-{spec.identity()[:12]}"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"full": False, "ranks": ()}, "nothing to run"),
        ({"ranks": (0,)}, "allowed: integers >= 1"),
        ({"ranks": (2, 2)}, "repeats"),
        ({"targets": ("fc_out", "q_proj")}, "in that order"),
        ({"init": "given"}, "init='given'; allowed: standard"),
        ({"seeds": ()}, "at least one seed"),
    ],
)
def test_bad_specs_name_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        quick_spec(**fields)


def test_targets_resolve_groups_and_names_in_block_order():
    assert resolve_targets("mlp,q_proj") == ("q_proj", "fc_in", "fc_out")
    assert resolve_targets(["attention"]) == ("q_proj", "k_proj", "v_proj", "o_proj")
    with pytest.raises(ValueError, match="targets=x_proj; allowed: attention, mlp, q_proj"):
        resolve_targets("x_proj")
    assert FinetuneSpec.model_fields["targets"].default == ALL_TARGETS


def test_factor_diagnostics_are_logged_on_request_and_change_no_trained_number(study):
    store, reference = study
    assert "diagnostics_every" not in SPEC.spec_dict()  # default identities unchanged
    spec = SPEC.model_copy(update={"full": False, "diagnostics_every": 5})
    outcome = run_lora_finetune(spec, store=store, write_report=False)
    identity = outcome.result.candidates[0].state.identity
    assert identity != reference.result.candidates[1].state.identity
    with RunStore(store) as db:
        logged = {(m.name, m.step): m.value for m in db.metrics(identity)}
        plain = {(m.name, m.step): m.value
                 for m in db.metrics(reference.result.candidates[1].state.identity)}  # fmt: skip
    diag = {key for key in logged if key[0].startswith("diag/")}
    for seed in SPEC.seeds:
        steps = {s for name, s in diag if name.endswith(f"/seed={seed}/norm_B")}
        assert steps == set(range(5, SPEC.steps + 1, 5))
    assert {k: v for k, v in logged.items() if k not in diag} == plain  # bit for bit


def test_a_candidate_blocked_by_a_failed_pretrain_names_the_pretrains_failure(tmp_path):
    from gaugelab.study.runner import AdmissionError
    from gaugelab.study.spec import Manifest

    with RunStore(tmp_path / "s.sqlite") as db:
        with pytest.raises(AdmissionError, match="did not complete: it has not been run; run "
                           "the study with run_lora_finetune"):  # fmt: skip
            pretrain_weights(db, SPEC.pretrain)
        db.register_run(Manifest.for_spec(SPEC.pretrain))
        attempt = db.start_attempt(SPEC.pretrain.identity())
        db.end_attempt(attempt, "numerical_failure", "NonFiniteError: loss is nan at step 3")
        with pytest.raises(AdmissionError) as error:
            pretrain_weights(db, SPEC.pretrain)
    assert str(error.value) == (
        f"the pretrain run {SPEC.pretrain.identity()[:12]} did not complete: it failed: "
        "numerical_failure — NonFiniteError: loss is nan at step 3; the candidates run once "
        "it completes: mend its cause and rerun the same command"
    )
