"""gaugelab.experiments.learn_forget.run: the learning–forgetting rank study with a sealed test set
(issue 18 §4; seed 003 §0x0BB–0x0BU, §0x0CE–0x0CL; biderman2024lora).

The spec's defaults and fail-closed rules; the plan's run identities (a gate is a new study, not
new training); the quick study end to end, every decision value recomputed independently from
the store's logged metrics and recorded states; the sealed test opened once or, under gates no
candidate meets, never; the measures on synthetic matrices with exact oracles.
"""

import itertools
import math
from fractions import Fraction

import pytest
import safetensors.torch
import torch

from gaugelab.determinism import deterministic
from gaugelab.experiments.learn_forget.decide import sealed_store
from gaugelab.experiments.learn_forget.measure import energy_ranks, evaluate, relative_tail
from gaugelab.experiments.learn_forget.run import (
    STRESS_FILES,
    LearnForgetSpec,
    collect,
    default_stress,
    design_manifest,
    not_shown,
    plan,
    quick_spec,
    release,
    run_learn_forget,
)
from gaugelab.experiments.learn_forget.train import cell_ensemble, domain_batches
from gaugelab.experiments.lora.data import base_model, load_corpus, pretrain_weights
from gaugelab.experiments.lora.run import FinetuneSpec, PretrainSpec
from gaugelab.experiments.lora.spec import ALL_TARGETS
from gaugelab.study.release.sealed import SealedTestError
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import run_sweep
from gaugelab.tasks import two_domain_spec
from gaugelab.tasks.sources import STDLIB_FILES, stdlib_source

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
PERMISSIVE = {"min_target_gain": -1e9, "max_forgetting": 1e9, "min_stress_gain": -1e9}
DOMAINS = ("target", "retention", "stress")


# --- fixtures: two quick studies, each in its own store ------------------------------------


@pytest.fixture(scope="module")
def permissive(tmp_path_factory, one_thread):
    """The quick study under gates every candidate meets (base included): it releases."""
    folder = tmp_path_factory.mktemp("learn-forget")
    store = folder / "store.sqlite"
    spec = quick_spec(**PERMISSIVE)
    outcome = run_learn_forget(spec, store=store, report_dir=folder / "report")
    return store, spec, outcome


STRICT_PHASES: list[str] = []
"""What the ``strict`` study's ``phase`` callback was told, in order."""


@pytest.fixture(scope="module")
def strict(tmp_path_factory, one_thread):
    """A quick study (no rsLoRA, to keep it short) under a target gate nothing meets."""
    store = tmp_path_factory.mktemp("learn-forget-strict") / "store.sqlite"
    spec = quick_spec(min_target_gain=1e9, rslora_rank=None)
    outcome = run_learn_forget(spec, store=store, write_report=False, phase=STRICT_PHASES.append)
    return store, spec, outcome


def test_the_progress_display_is_told_that_the_study_is_deciding_after_its_runs(strict):
    # the validation measurements and the decision take seconds after the last run: a bar
    # that only counted runs would sit at n/n with nothing said
    assert STRICT_PHASES == ["measuring every cell on validation, deciding, opening the test"]


def logged(db, cell, domain):
    """Declared step → ``[E]`` logged ``<domain>/val_loss/seed=S`` (seed order) of a cell."""
    per = {}
    for seed in cell.spec.finetune.seeds:
        for row in db.metrics(cell.state.identity, name=f"{domain}/val_loss/seed={seed}"):
            per.setdefault(row.step, []).append(row.value)
    return per


def mean(xs):
    return sum(xs) / len(xs)


def records(result):
    return {r.candidate_id: r for r in result.measured["a"].records}


def accepted(log, event):
    return [e for e in log if e["event"] == event and e["accepted"]]


def selection_rule(recs, spec):
    """§0x0BQ written out over the trained candidates (the base is the reference, never
    released): the gates, then argmin (trainable parameters, rank, id)."""
    feasible = [
        r
        for r in recs.values()
        if r.method != "base"
        and r.operational.target_gain >= spec.min_target_gain
        and r.operational.forgetting <= spec.max_forgetting
        and r.operational.stress_gain >= spec.min_stress_gain
    ]

    def key(r):
        return (r.cost.trainable_parameters, r.configured_rank_or_inf, r.candidate_id)

    return sorted(r.candidate_id for r in feasible), min(feasible, key=key).candidate_id


# --- 1. the spec ---------------------------------------------------------------------------


def test_default_candidates_are_full_lora_ranks_and_rslora_at_sixteen():
    spec = LearnForgetSpec()
    assert spec.candidate_ids() == [
        "full",
        "lora-r1",
        "lora-r2",
        "lora-r4",
        "lora-r8",
        "lora-r16",
        "rslora-r16",
    ]
    assert spec.finetune.seeds == (0, 1) and spec.blocks() == ("a",)


def test_default_checkpoints_are_the_quarters_of_800_steps():
    spec = LearnForgetSpec()
    assert spec.finetune.steps == 800
    assert spec.checkpoint_steps() == (200, 400, 600, 800)


def test_the_stress_package_is_held_out_of_the_target_files():
    assert set(STRESS_FILES).isdisjoint(STDLIB_FILES)
    stress = default_stress()
    assert tuple(f.path for f in stress.target.files) == STRESS_FILES
    base = PretrainSpec().corpus
    for k in ("retention", "val_fraction", "test_fraction", "n_chunks", "seed", "block_size"):
        assert getattr(stress, k) == getattr(base, k)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"checkpoints": (200, 900)}, r"checkpoints=\[200, 900\]; allowed: steps in 1..800"),
        ({"checkpoints": (150,)}, r"checkpoints=\[150\] are not validation steps"),
        ({"checkpoints": (400, 200)}, r"allowed: increasing steps ≥ 1"),
        ({"checkpoints": (0, 200)}, r"allowed: increasing steps ≥ 1"),
        ({"block": "b"}, r"block='b' needs second_target"),
        ({"block": "c"}, r"block='c'; allowed: a, b"),
        ({"candidate": "lora-r3"}, r"candidate='lora-r3'; allowed: full, lora-r1"),
        ({"max_forgetting": float("inf")}, r"max_forgetting=inf; allowed: a finite number"),
        ({"min_target_gain": float("nan")}, r"min_target_gain=nan; allowed: a finite number"),
    ],
)
def test_the_spec_refuses(fields, message):
    with pytest.raises(ValueError, match=message):
        LearnForgetSpec(**fields)


def test_the_spec_refuses_a_seed_its_design_cannot_declare():
    with pytest.raises(ValueError, match=r"seeds=-1; allowed: an integer in \[0, 2\*\*63\)"):
        FinetuneSpec.model_validate({**quick_spec().finetune.spec_dict(), "seeds": [-1]})


def test_every_valid_spec_has_a_design_manifest_before_any_run():
    spec = quick_spec(rslora_rank=None)
    manifest = design_manifest(spec)
    assert [c.candidate_id for c in manifest.candidates] == spec.candidate_ids()
    assert [(n.init_seed, n.order_seed) for n in manifest.nuisance] == [(0, 0), (1, 1)]
    assert manifest.checkpoint_steps == (10, 20)
    assert manifest.gates["target_gain"] == (spec.min_target_gain, None)
    assert design_manifest(quick_spec(rslora_rank=None, max_forgetting=0.1)).digest() != (
        manifest.digest()
    )


def corpus_like(source, **changes):
    """A two-domain spec with the pretrain corpus's retention and split fields."""
    c = PretrainSpec().corpus
    fields = dict(
        retention=c.retention,
        val_fraction=c.val_fraction,
        test_fraction=c.test_fraction,
        n_chunks=c.n_chunks,
        seed=c.seed,
        block_size=c.block_size,
    )
    return two_domain_spec(source, **{**fields, **changes})


def test_a_stress_corpus_sharing_a_target_file_is_refused():
    stress = corpus_like(stdlib_source((*STRESS_FILES, "json/decoder.py")))
    with pytest.raises(ValueError, match=r"shares \['json/decoder.py'\] with a target domain"):
        LearnForgetSpec(stress=stress)


def test_a_stress_corpus_cut_differently_from_the_pretrain_corpus_is_refused():
    stress = corpus_like(stdlib_source(STRESS_FILES), n_chunks=PretrainSpec().corpus.n_chunks + 1)
    with pytest.raises(
        ValueError, match=r"stress differs from the pretrain corpus in \['n_chunks'\]"
    ):
        LearnForgetSpec(stress=stress)


# --- 2. the plan ---------------------------------------------------------------------------


def identities(sweep):
    return {(s.block, s.candidate): s.identity() for s in sweep.specs()}


def test_the_plan_has_one_run_per_block_and_candidate():
    spec = quick_spec()
    runs = [(s.block, s.candidate) for s in plan(spec).specs()]
    assert runs == [("a", c) for c in ("full", "lora-r1", "lora-r4", "rslora-r4")]
    assert len(set(identities(plan(spec)).values())) == 4


def test_a_changed_gate_is_a_new_study_over_the_same_runs():
    one, other = plan(quick_spec()), plan(quick_spec(max_forgetting=0.1))
    assert identities(one) == identities(other)
    assert one.study != other.study
    assert one.study == f"learn-forget-{quick_spec().identity()[:12]}"


def test_a_changed_rank_list_keeps_the_full_run_and_the_shared_ranks():
    spec = quick_spec()
    ft = FinetuneSpec.model_validate({**spec.finetune.spec_dict(), "ranks": [1, 2]})
    before, after = identities(plan(spec)), identities(plan(quick_spec(finetune=ft)))
    assert set(after) == {("a", c) for c in ("full", "lora-r1", "lora-r2", "rslora-r4")}
    for kept in ("full", "lora-r1", "rslora-r4"):
        assert after[("a", kept)] == before[("a", kept)], kept
    assert after[("a", "lora-r2")] not in before.values()


def test_a_second_target_block_adds_block_b_and_keeps_block_a(tmp_path):
    (tmp_path / "target.py").write_text("def f(x):\n    return x + 1\n" * 2000)
    second = corpus_like(tmp_path / "target.py")
    before = identities(plan(quick_spec()))
    after = identities(plan(quick_spec(second_target=second)))
    assert {k for k in after if k[0] == "a"} == set(before)
    assert all(after[k] == before[k] for k in before)
    assert sorted(c for b, c in after if b == "b") == sorted(c for _, c in before)
    assert not set(after[k] for k in after if k[0] == "b") & set(before.values())


# --- 3. end to end, released ---------------------------------------------------------------


def test_every_candidate_and_the_base_have_a_record(permissive):
    _, spec, outcome = permissive
    result = outcome.result
    assert sorted(records(result)) == sorted(["base", *spec.candidate_ids()])
    assert not result.failures and result.incomplete == []


def test_each_checkpoint_is_the_declared_step_of_least_logged_target_loss(permissive):
    store, spec, outcome = permissive
    measured = outcome.result.measured["a"]
    with RunStore(store, create=False) as db:
        for cell in outcome.result.cells:
            target = logged(db, cell, "target")
            means = {s: mean(target[s]) for s in spec.checkpoint_steps()}
            expected = min(spec.checkpoint_steps(), key=lambda s: (means[s], s))  # ties: earliest
            assert measured.chosen[cell.candidate] == expected, cell.candidate
            assert f"@step{expected}:" in records(outcome.result)[cell.candidate].checkpoint_id


def test_record_means_are_the_logged_validation_means_at_the_chosen_step(permissive):
    store, _, outcome = permissive
    result = outcome.result
    recs = records(result)
    with RunStore(store, create=False) as db:
        for cell in result.cells:
            step = result.measured["a"].chosen[cell.candidate]
            op = recs[cell.candidate].operational
            for domain in DOMAINS:
                values = logged(db, cell, domain)[step]
                assert len(values) == 2
                assert getattr(op, domain) == mean(values), (cell.candidate, domain)
                assert result.measured["a"].per_seed[cell.candidate][domain] == values


def test_gains_and_forgetting_are_oriented_against_the_base_record(permissive):
    recs = records(permissive[2].result)
    base = recs["base"].operational
    assert (base.target_gain, base.forgetting, base.stress_gain) == (0.0, 0.0, 0.0)
    assert base.target == permissive[2].result.measured["a"].base["target"]
    for cid, record in recs.items():
        op = record.operational
        assert op.target_gain == base.target - op.target, cid
        assert op.forgetting == op.retention - base.retention, cid
        assert op.stress_gain == base.stress - op.stress, cid


def test_the_recorded_state_reproduces_the_logged_validation_losses(permissive):
    store, spec, outcome = permissive
    result = outcome.result
    with RunStore(store, create=False) as db, deterministic():
        weights = pretrain_weights(db, spec.finetune.pretrain)
        corpus = load_corpus(spec.finetune.pretrain.corpus)
        base = base_model(spec.finetune.pretrain, weights, corpus.d_vocab)
        val = domain_batches(spec, "val")
        for cell in result.cells:
            step = result.measured["a"].chosen[cell.candidate]
            state = safetensors.torch.load_file(cell.states[step].path)
            losses = evaluate(cell_ensemble(cell.spec, base, state), val)
            for domain in DOMAINS:
                assert losses[domain] == logged(db, cell, domain)[step], (cell.candidate, domain)


def test_the_selection_is_the_feasible_candidate_of_least_parameters_then_rank_then_id(
    permissive,
):
    _, spec, outcome = permissive
    decision = outcome.result.decision
    feasible, chosen = selection_rule(records(outcome.result), spec)
    assert sorted(decision.feasible) == feasible
    assert decision.chosen == chosen == "lora-r1"  # every gate open: the fewest parameters
    assert "base" not in decision.feasible and "base" in decision.frontier


def test_the_full_update_energy_rank_is_recomputed_from_the_recorded_states(permissive):
    store, spec, outcome = permissive
    full = next(c for c in outcome.result.cells if c.candidate == "full")
    energy = outcome.result.measured["a"].energy
    assert sorted(energy) == list(spec.checkpoint_steps())
    with RunStore(store, create=False) as db:
        w0 = pretrain_weights(db, spec.finetune.pretrain)
    layers = range(spec.finetune.pretrain.n_layers)
    for step in spec.checkpoint_steps():
        state = safetensors.torch.load_file(full.states[step].path)
        expected = {}
        for layer in layers:
            for name in ALL_TARGETS:
                path = f"blocks.{layer}.{'mlp' if name.startswith('fc_') else 'attn'}.{name}"
                delta = state[f"{path}.weight"].to(F64) - w0[f"{path}.weight"].to(F64)
                sigma2 = torch.linalg.svdvals(delta) ** 2  # [E, q]
                fraction = sigma2.cumsum(-1) / sigma2.sum(-1, keepdim=True)
                ranks = ((fraction < 0.9).sum(-1) + 1).tolist()  # r_0.9 per seed (§0x0BE)
                expected[path] = mean([float(r) for r in ranks])
        assert energy[step] == expected, step


def test_the_test_report_names_the_frozen_selection_and_the_full_reference(permissive):
    result = permissive[2].result
    test, measured = result.test, result.measured["a"]
    assert test["selected"]["candidate"] == result.decision.chosen == "lora-r1"
    assert test["selected"]["step"] == measured.chosen["lora-r1"] and test["base"]["step"] == 0
    assert test["full reference"]["step"] == measured.chosen["full"]
    for domain in DOMAINS:
        assert len(test["base"][domain]) == 1 and len(test["full reference"][domain]) == 2
        assert test["base"][domain][0] != measured.base[domain]  # another split than validation
    assert test["frozen"] == accepted(result.access_log, "freeze")[0]["frozen_digest"]


def test_the_test_is_opened_once_and_a_second_run_opens_nothing(permissive):
    store, spec, outcome = permissive
    log = outcome.result.access_log
    assert [(e["event"], e["accepted"]) for e in log] == [
        ("freeze", True),
        ("open", True),
        ("report", True),
    ]
    again = run_learn_forget(spec, store=store, write_report=False)
    assert len(again.sweep.skipped) == 1 + len(spec.candidate_ids())  # pretrain + every cell
    assert again.result.access_log == log  # no new event, refused or accepted
    assert len(accepted(again.result.access_log, "open")) == 1
    assert again.result.test == outcome.result.test


def test_collect_alone_adds_no_access_event(permissive):
    store, spec, outcome = permissive
    with RunStore(store, create=False) as db:
        before = sealed_store(db, outcome.study, spec).access_log()
        result = collect(db, outcome.study)
        after = sealed_store(db, outcome.study, spec).access_log()
    assert before == after == result.access_log and len(after) == 3


def test_a_gate_study_over_stored_cells_cannot_reopen_the_splits_another_study_opened(
    permissive,
):
    """A changed gate is a new study: it reuses every cell, and collect never opens its test;
    its release freezes its own choice but is refused the held-out splits the first study
    opened (a new versioned study needs new held-out data, seed 003 §0x0CH)."""
    store, _, _ = permissive
    spec = quick_spec(**{**PERMISSIVE, "max_forgetting": 5.0})
    sweep = plan(spec)
    swept = run_sweep(sweep, store=store, max_workers=1, threads=1)
    assert swept.completed == [] and len(swept.skipped) == len(spec.candidate_ids())
    with RunStore(store, create=False) as db:
        sealed = collect(db, sweep.study)
        assert sealed.test is None and sealed.access_log == []
        with pytest.raises(SealedTestError, match="opened by study"):
            release(db, sweep.study)
        result = collect(db, sweep.study)
    assert result.test is None
    assert [(e["event"], e["accepted"]) for e in result.access_log] == [
        ("freeze", True),
        ("open", False),
    ]


def test_the_report_states_what_the_study_does_not_show(permissive):
    report = permissive[2].report
    assert report is not None and report.name == "report.html"
    text = report.read_text()
    assert "What this study does not show" in text
    paragraph = not_shown(permissive[2].result)
    assert paragraph.startswith("What this study does not show")
    # the paragraph describes this study: the quick model's full fine-tuning size, its seeds
    full = next(r for r in permissive[2].result.measured["a"].records if r.method == "full")
    assert f"({full.cost.trainable_parameters:,} parameters)" in paragraph
    assert "2 seeds per candidate" in paragraph and "20 steps" in paragraph


# --- 4. end to end, no release -------------------------------------------------------------


def test_no_feasible_candidate_records_no_release_and_keeps_the_test_sealed(strict):
    store, spec, outcome = strict
    result = outcome.result
    assert result.decision.chosen is None and result.decision.feasible == []
    assert result.decision.reason
    assert result.test is None
    assert [(e["event"], e["accepted"]) for e in result.access_log] == [("no-release", True)]
    with RunStore(store, create=False) as db:
        assert not sealed_store(db, outcome.study, spec).was_opened()


def test_running_a_no_release_study_again_records_nothing_new(strict):
    store, spec, outcome = strict
    again = run_learn_forget(spec, store=store, write_report=False)
    assert again.result.access_log == outcome.result.access_log
    with RunStore(store, create=False) as db:
        assert release(db, outcome.study) is None
        log = sealed_store(db, outcome.study, spec).access_log()
        assert not sealed_store(db, outcome.study, spec).was_opened()
    assert [(e["event"], e["accepted"]) for e in log] == [("no-release", True)]


# --- 5. the measures, synthetic, float64 ---------------------------------------------------


def diagonal(sigma, d_in):
    """``[1, len(sigma), d_in]`` with ``sigma`` on the diagonal."""
    m = torch.zeros(1, len(sigma), d_in, dtype=F64)
    for i, s in enumerate(sigma):
        m[0, i, i] = s
    return m


def test_the_relative_tail_of_a_diagonal_matrix_is_its_exact_energy_beyond_rank():
    sigma2 = [Fraction(16), Fraction(4), Fraction(1), Fraction(1, 4)]  # σ = 4, 2, 1, 1/2
    deltas = {"p": diagonal([4.0, 2.0, 1.0, 0.5], 5)}
    for r in range(5):
        expected = float(sum(sigma2[r:], Fraction(0)) / sum(sigma2))  # Σ_{j>r} σ_j² / Σ σ_j²
        assert relative_tail(deltas, ["p"], r) == [expected], r
    assert relative_tail(deltas, ["p"], 9) == [0.0]  # rank ≥ min(d_out, d_in)


def test_the_relative_tail_pools_energy_over_projections_not_ratios():
    deltas = {"p": diagonal([4.0, 2.0], 3), "q": diagonal([1.0, 1.0], 2)}
    # (4 + 1) / (16 + 4 + 1 + 1), not the mean of 4/20 and 1/2
    assert relative_tail(deltas, ["p", "q"], 1) == [float(Fraction(5, 22))]
    assert relative_tail(deltas, ["q"], 1) == [0.5]


def test_the_relative_tail_is_per_seed_zero_at_full_rank_and_non_increasing_in_rank():
    g = torch.Generator().manual_seed(0)
    deltas = {"p": torch.randn(3, 6, 4, generator=g, dtype=F64)}
    tails = [relative_tail(deltas, ["p"], r) for r in range(6)]
    assert len(tails[0]) == 3 and tails[0] == [1.0, 1.0, 1.0]
    assert tails[4] == tails[5] == [0.0, 0.0, 0.0]
    for lower, higher in itertools.pairwise(tails):
        assert all(h <= lo for h, lo in zip(higher, lower, strict=True))


def test_the_energy_rank_of_diag_3_2_1_0_at_rho_09_is_two():
    # 9 < 0.9·14 = 12.6 ≤ 9 + 4 = 13
    assert energy_ranks({"p": diagonal([3.0, 2.0, 1.0, 0.0], 4)}) == {"p": [2]}
    assert energy_ranks({"p": diagonal([3.0, 2.0, 1.0, 0.0], 4)}, rho=0.6) == {"p": [1]}
    assert energy_ranks({"p": torch.zeros(2, 3, 3, dtype=F64)}) == {"p": [0, 0]}


# --- 6. paired contrasts -------------------------------------------------------------------


def test_paired_contrasts_are_the_per_seed_differences_against_full_fine_tuning(permissive):
    store, spec, outcome = permissive
    result = outcome.result
    measured = result.measured["a"]
    base = measured.base
    cells = {c.candidate: c for c in result.cells}
    by = {(c.candidate, c.metric): c for c in result.contrasts}
    metrics = (("target_gain", "target", -1.0), ("forgetting", "retention", 1.0),
               ("stress_gain", "stress", -1.0))  # fmt: skip
    others = [c for c in spec.candidate_ids() if c != "full"]
    assert sorted(by) == sorted((c, m) for c in others for m, _, _ in metrics)
    with RunStore(store, create=False) as db:

        def outcomes(cid, domain, sign):
            values = logged(db, cells[cid], domain)[measured.chosen[cid]]
            return [sign * (v - base[domain]) for v in values]

        for cid in others:
            for metric, domain, sign in metrics:
                contrast = by[(cid, metric)]
                d = [
                    y - f
                    for y, f in zip(
                        outcomes(cid, domain, sign), outcomes("full", domain, sign), strict=True
                    )
                ]
                assert contrast.reference == "full" and contrast.block == "a"
                assert [s.init_seed for s, _ in contrast.pairs] == [0, 1]
                assert [v for _, v in contrast.pairs] == d, (cid, metric)
                assert contrast.range == (min(d), max(d))
                assert contrast.mean == math.fsum(d) / 2 and contrast.incomplete == ()
