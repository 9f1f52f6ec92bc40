"""gaugelab.experiments.lora_compare.run on a quick stored study: comparisons match an independent
dense computation (scipy's principal angles), a full update gets its energy rank, the report is
written once, and a composition of adapters trained on two disjoint target corpora is written
in PEFT format whose losses match the composed adapter applied as LoRA layers; the
``target_corpus`` option leaves default identities unchanged."""

import dataclasses
import math

import numpy as np
import pytest
import scipy.linalg
import torch

from gaugelab.adapters import Adapter, AdapterModule
from gaugelab.experiments.lora.data import base_model, eval_batches, load_corpus, pretrain_weights
from gaugelab.experiments.lora.ladder import mean_loss
from gaugelab.experiments.lora.run import FinetuneSpec, quick_spec, run_lora_finetune
from gaugelab.experiments.lora.sources import open_store
from gaugelab.experiments.lora_compare.run import compare_lora, compose_lora, run_lora_compare
from gaugelab.lowrank import energy_rank
from gaugelab.tasks import two_domain_spec
from gaugelab.tasks.sources import STDLIB_FILES, stdlib_source

pytestmark = pytest.mark.usefixtures("one_thread")

HALVES = (STDLIB_FILES[:3], STDLIB_FILES[16:19])  # two disjoint groups of stdlib modules


@pytest.fixture(scope="module")
def study(tmp_path_factory, one_thread):
    """A quick study (full, r=2 at seeds 0 and 1) and one r=2 adapter per target corpus."""
    store = tmp_path_factory.mktemp("compare") / "s.sqlite"
    run_lora_finetune(quick_spec(ranks=(2,), seeds=(0, 1), steps=10), store=store,
                      write_report=False, study="main")  # fmt: skip
    for i, files in enumerate(HALVES):
        corpus = two_domain_spec(stdlib_source(files), block_size=64)
        spec = quick_spec(ranks=(2,), full=False, steps=10, target_corpus=corpus)
        run_lora_finetune(spec, store=store, write_report=False, study=f"half{i}")
    return store


def _dense(store, label, seed, study="main"):
    from gaugelab.experiments.lora.sources import find

    with open_store(store) as db:
        return find(label, db, seed, study, "test")


def test_comparison_matches_scipy_on_the_dense_updates(study):
    result = compare_lora("lora r=2", "lora r=2", store=study, seed_b=1, study="main")
    a, b = _dense(study, "lora r=2", 0), _dense(study, "lora r=2", 1)
    checked = 0
    for m in result.modules[:3]:
        Ba, Aa, sa = a.source.factors[m.module]
        Bb, Ab, sb = b.source.factors[m.module]
        Da, Db = sa * (Ba.double() @ Aa.double()), sb * (Bb.double() @ Ab.double())
        for side, (Xa, Xb) in {"row": (Da.T, Db.T), "column": (Da, Db)}.items():
            Ua, Ub = np.linalg.svd(Xa.numpy())[0], np.linalg.svd(Xb.numpy())[0]
            ra, rb = m.rank_a, m.rank_b
            ref = np.sort(scipy.linalg.subspace_angles(Ua[:, :ra], Ub[:, :rb]))
            np.testing.assert_allclose(getattr(m, side)["angles"], ref, rtol=0, atol=1e-7)
            mass = getattr(m, side)["projection_mass"]
            assert mass == pytest.approx(float(np.sum(np.cos(ref) ** 2)), abs=1e-7)
            checked += 1
        assert m.factor_row is not None  # LoRA: the factor spans are compared as well
    assert checked == 6 and result.a == "lora r=2 seed 0" and result.b == "lora r=2 seed 1"


def test_an_adapter_compared_with_itself_is_identical_on_both_sides(study, margin):
    result = compare_lora("lora r=2", "lora r=2", store=study, study="main")
    for m in result.modules:
        for side in ("row", "column"):
            c = getattr(m, side)
            assert c["min_rank_overlap"] == pytest.approx(1.0, abs=1e-9)
            assert c["projector_squared"] == pytest.approx(0.0, abs=1e-9)
            # float32 factors, float64 comparison
            margin.below(f"{m.module} {side} angle", max(c["angles"]), 1e-4)
        assert m.phi_row[0][0] == pytest.approx(1.0, abs=1e-9)


def test_full_update_is_ranked_by_energy_and_compared_with_the_adapter(study):
    result = compare_lora("lora r=2", "full", store=study, study="main", dense_rho=0.9)
    full = _dense(study, "full", 0)
    m = result.modules[0]
    want = energy_rank(full.source.dense[m.module].double(), matrix_id="x", rho=0.9).value
    assert m.rank_b == want and m.configured_b is None and m.factor_row is None
    assert m.policy_b.startswith("energy")
    assert m.row["haar_overlap"] == pytest.approx(max(m.rank_a, m.rank_b) / m.shape[1])
    assert "energy (rho=0.9)" in result.policy


def test_report_has_phi_heatmaps_and_is_never_overwritten(study, tmp_path):
    result, path = run_lora_compare("lora r=2", "lora r=2", store=study, study="main",
                                    seed_b=1, report_dir=tmp_path / "r", phi_max=2,
                                    null_samples=20)  # fmt: skip
    assert path.name == "report.html" and (tmp_path / "r" / "phi-row.png").exists()
    assert "<h1>Report: compare " in path.read_text(encoding="utf-8")
    assert (tmp_path / "r" / "compare.json").exists()
    null = result.modules[0].null_row
    assert null.samples == 20 and 0 <= null.overlap_mean <= 1
    with pytest.raises(FileExistsError):
        run_lora_compare("lora r=2", "lora r=2", store=study, study="main",
                         report_dir=tmp_path / "r")  # fmt: skip


def test_composition_of_two_target_corpora_is_written_and_evaluated(study, tmp_path):
    out = tmp_path / "composed"
    with open_store(study) as db:
        runs = {s.name: [r.identity for r in db.runs(s.name)] for s in db.studies()}
    first, second = runs["half0"][0], runs["half1"][0]
    result = compose_lora([first, second], out, store=study, weights=[1.0, 0.5], samples=1)
    composed = Adapter.load(out)
    a = _dense(study, first, None).source.adapter
    b = _dense(study, second, None).source.adapter
    for module in composed.modules:
        want = a.delta_weight(module) + 0.5 * b.delta_weight(module)
        torch.testing.assert_close(composed.delta_weight(module), want, rtol=0, atol=1e-6)
    assert set(result.losses) == {"pretrained", f"{result.sources[0]} alone",
                                  f"{result.sources[1]} alone", "composition"}  # fmt: skip
    # the composition's losses recomputed by applying the written adapter as LoRA layers
    found = _dense(study, first, None)
    with open_store(study) as db:
        weights = pretrain_weights(db, found.source.pretrain)
    corpus = load_corpus(found.source.pretrain.corpus)
    model = base_model(found.source.pretrain, weights, corpus.d_vocab)
    composed.to(torch.float32).apply(model)
    own = load_corpus(found.source.target_corpus, vocabulary=corpus.chars)
    val = eval_batches(own, found.source.pretrain)
    assert result.losses["composition"]["target[0]"] == pytest.approx(
        mean_loss(model, val["target"]), abs=1e-5)  # fmt: skip
    assert result.losses["composition"]["retention"] == pytest.approx(
        mean_loss(model, val["retention"]), abs=1e-5)  # fmt: skip
    first_stage, last_stage = result.stages
    assert first_stage["rank_stage"] == first_stage["rank_total"]
    assert last_stage["rank_total"] <= sum(m.rank_bound for m in result.ledger)
    for key in ("target[0]", "target[1]", "retention"):  # the last running sum = the composition
        assert last_stage[key] == pytest.approx(result.losses["composition"][key], abs=1e-5)
    pair = result.outputs[0]
    assert pair.n_samples == 2 * 8 * 64  # one batch per target × 8 windows × 64 positions
    assert -1 <= pair.output_cosine <= 1 and math.isfinite(pair.cross_term)
    with pytest.raises(FileExistsError):
        compose_lora([first, second], out, store=study)


def test_target_corpus_option_keeps_default_identities():
    default = FinetuneSpec()
    assert "target_corpus" not in default.spec_dict()
    assert FinetuneSpec.model_validate(default.spec_dict()).identity() == default.identity()
    other = quick_spec(target_corpus=two_domain_spec(stdlib_source(HALVES[0]), block_size=64))
    assert other.spec_dict()["target_corpus"]["target"]["files"][0]["path"] == HALVES[0][0]
    assert other.identity() != quick_spec().identity()
    with pytest.raises(ValueError, match="block_size"):
        quick_spec(target_corpus=two_domain_spec(stdlib_source(HALVES[0]), block_size=32))


def test_bad_sources_and_options_name_what_was_given(study, tmp_path):
    with pytest.raises(ValueError, match=r"seed_b=7; allowed: 0, 1$"):
        compare_lora("lora r=2", "lora r=2", store=study, study="main", seed_b=7)
    with pytest.raises(ValueError, match=r"no candidate 'lora r=8' in study 'main'; allowed: "
                                         r"'full', 'lora r=2'$"):  # fmt: skip
        compare_lora("lora r=8", "full", store=study, study="main")
    with pytest.raises(ValueError, match=r"against_full='lora r=2' is a lora fine-tuning update"):
        compare_lora("lora r=2", "lora r=2", store=study, study="main", against_full=True)
    assert compare_lora("lora r=2", "full", store=study, study="main", against_full=True).modules
    with pytest.raises(ValueError, match=r"no such adapter folder: .*/missing$"):
        compare_lora(tmp_path / "missing", "full", store=study, study="main")
    with pytest.raises(ValueError, match=r"'zz' is no adapter folder, no candidate label"):
        compare_lora("zz", "full", store=study, study="main")
    with pytest.raises(ValueError, match=r"policy=0; allowed: .* integer k >= 1"):
        compare_lora("lora r=2", "full", store=study, study="main", policy=0)
    with pytest.raises(ValueError, match=r"dense_rho=0; allowed: \(0, 1\]"):
        compare_lora("lora r=2", "full", store=study, study="main", dense_rho=0.0)


def _wider_than_its_base(study, tmp_path):
    """The stored ``lora r=2`` adapter with its first module's d_in doubled, saved as
    ``tmp_path/wide``: ``(folder, module, d_out, d_in)`` (the base's shape)."""
    adapter = _dense(study, "lora r=2", 0).source.adapter
    module = next(iter(adapter.modules))
    part = adapter.modules[module]
    d_out, d_in = part.B.shape[0], part.A.shape[1]
    wide = torch.ones(part.A.shape[0], 2 * d_in, dtype=part.A.dtype)
    modules = dict(adapter.modules)
    modules[module] = AdapterModule(wide, part.B, dataclasses.replace(part.record, d_in=2 * d_in))
    return Adapter(modules, adapter.config).save(tmp_path / "wide"), module, d_out, d_in


def test_compose_checks_shapes_against_the_base_before_writing(study, tmp_path):
    """An adapter whose module is wider than its base model's: one error naming the module and
    both shapes, before anything is written (``out`` stays empty, a rerun is not refused)."""
    folder, module, d_out, d_in = _wider_than_its_base(study, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    want = (f"module '{module}' is {d_out}×{2 * d_in} in the adapter but {d_out}×{d_in} in its "
            "base model")  # fmt: skip
    with pytest.raises(ValueError, match=want):
        compose_lora([folder, folder], out, store=study)
    assert not any(out.iterdir()) and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    composed = compose_lora(["lora r=2"], out, store=study, study="main", evaluate=False)
    assert composed.out == out and Adapter.load(out).modules[module].r == 2


def test_inspect_of_an_adapter_wider_than_its_base_is_one_line_naming_both_shapes(study, tmp_path):
    from gaugelab.experiments.lora.run import inspect_lora

    folder, module, d_out, d_in = _wider_than_its_base(study, tmp_path)
    with pytest.raises(ValueError, match=rf"^inspect_lora: .*/wide: module '{module}' is "
                       rf"{d_out}×{2 * d_in} in the adapter but {d_out}×{d_in} in its base "
                       r"model \(pretrain run [0-9a-f]{12}\); allowed: adapters of that base "
                       r"model$"):  # fmt: skip
        inspect_lora(folder, store=study)


def test_inspect_evaluates_a_run_on_the_target_corpus_it_was_fine_tuned_on(study):
    from gaugelab.experiments.lora.run import inspect_lora

    result = inspect_lora("lora r=2", store=study, study="half0")
    # the merged adapter on the run's own validation batches is its logged final loss
    assert result.reference["target"] == pytest.approx(result.reference["logged_target"], rel=1e-5)
    spec = quick_spec(ranks=(2,), full=False, steps=10)
    with open_store(study) as db:
        weights = pretrain_weights(db, spec.pretrain)
    chars = load_corpus(spec.pretrain.corpus).chars
    half0 = load_corpus(two_domain_spec(stdlib_source(HALVES[0]), block_size=64), vocabulary=chars)
    model = base_model(spec.pretrain, weights, len(chars) + 1)
    own = mean_loss(model, eval_batches(half0, spec.pretrain)["target"])
    pretrain = mean_loss(
        model, eval_batches(load_corpus(spec.pretrain.corpus), spec.pretrain)["target"]
    )
    assert result.reference["base_target"] == pytest.approx(own, rel=1e-12)
    assert abs(own - pretrain) > 1e-3  # the two targets are told apart
