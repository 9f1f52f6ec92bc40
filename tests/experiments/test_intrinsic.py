"""gaugelab.experiments.intrinsic: the d90 study on the harness — every trial a stored run, the
estimate with its envelope read back from the store, runs reused across threshold rules, SAID's
d = m reported degenerate, the fine-tuning problem's head inside d, the report."""

import pytest

from gaugelab.experiments.intrinsic import (
    collect,
    estimate_intrinsic_dimension,
    plan,
    quick_spec,
    run_intrinsic_dim,
)
from gaugelab.experiments.registry import report_study
from gaugelab.study.store import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("intrinsic") / "s.sqlite"
    spec = quick_spec()
    return store, spec, run_intrinsic_dim(spec, store=store)


def test_every_trial_is_a_stored_run_and_the_estimate_is_read_back(scratch):
    store, spec, outcome = scratch
    n = len(spec.full_lrs) + len(spec.dims) * len(spec.seeds) * len(spec.lrs)
    assert len(plan(spec).specs()) == n and len(outcome.sweep.completed) == n
    result = outcome.result
    assert len(result.records) == n - len(spec.full_lrs)
    assert {(r.d, r.seed) for r in result.records} == {
        (d, s) for d in spec.dims for s in spec.seeds
    }
    est = result.estimate
    assert est.full_score == result.full_score and 0 < result.base_score < result.full_score
    assert est.target == pytest.approx(0.9 * result.full_score, abs=1e-12)
    assert est.crossing.state in ("crossed", "left-censored", "right-censored")
    for summary in est.summaries:  # the median of the selected seeds' evaluation scores
        scores = sorted(summary.seed_scores.values())
        assert summary.aggregate == pytest.approx(sum(scores) / 2)  # two seeds: their mean
    assert est.ledger["head"] == "inside d" and est.projections["family"] == "dense"
    assert outcome.report is not None and outcome.report.exists()
    with RunStore(store) as db:
        again = collect(db, outcome.study)
    assert [r.score for r in again.records] == [r.score for r in result.records]


def test_a_second_threshold_rule_reuses_every_trial(scratch):
    store, spec, outcome = scratch
    other = spec.model_copy(update={"threshold": "normalized-gain"})
    assert {s.identity() for s in plan(other).specs()} == {s.identity() for s in plan(spec).specs()}
    est = estimate_intrinsic_dimension(other, store=store)
    first = outcome.result.estimate
    assert est.threshold.startswith("G_d") and est.target == pytest.approx(
        first.base_score + 0.9 * (first.full_score - first.base_score)
    )


def test_report_of_the_stored_study(scratch, tmp_path):
    store, _, outcome = scratch
    with RunStore(store) as db:
        written = report_study(db, outcome.study, tmp_path / "r")
    text = written.path.read_text(encoding="utf-8")
    assert "d90" in text and "data:image/png" in text and "Raw trial records" in text


def test_said_d_equal_m_is_a_degenerate_budget_and_finetune_counts_the_head(tmp_path):
    # three Linear layers = three SAID groups: d = 3 leaves no shared coordinate
    spec = quick_spec(
        problem="finetune", method="said", family="fastfood", dims=(3, 16), seeds=(0,)
    )
    result = run_intrinsic_dim(spec, store=tmp_path / "s.sqlite", write_report=False).result
    by_d = {r.d: r for r in result.records}
    assert by_d[3].status == "degenerate" and by_d[3].score == result.base_score
    assert result.estimate.summaries[0].degenerate
    assert by_d[16].status == "completed"
    ledger = result.estimate.ledger
    assert ledger["method"] == "SAID" and ledger["scales"] == 3
    assert ledger["groups"] == [
        ["0.weight", "0.bias"],
        ["2.weight", "2.bias"],
        ["4.weight", "4.bias"],
    ]
    assert ledger["head"] == "inside d"
    assert ledger["ambient_dim"] == 64 * 16 + 16 + 16 * 16 + 16 + 16 * 5 + 5  # new 5-way head


def test_character_model_is_a_third_problem_scored_by_next_character_accuracy(tmp_path):
    spec = quick_spec(problem="char", dims=(16,), seeds=(0,), steps=20, layers=1)
    result = run_intrinsic_dim(spec, store=tmp_path / "s.sqlite", write_report=False).result
    (record,) = result.records
    assert record.status == "completed" and 0 <= record.score <= 1
    assert 0 < result.base_score < 0.1  # an untrained model: about one character in 65
    # d_model 16, 1 block: embeddings 65·16 + 32·16, attention 4·16·16, MLP 2·16·32,
    # two RMSNorm gains and the final one 3·16, unembedding 16·65
    assert result.estimate.ledger["ambient_dim"] == 1040 + 512 + 1024 + 1024 + 48 + 1040


def test_a_failed_trial_is_kept_in_the_records_and_never_selected(tmp_path, monkeypatch):
    from gaugelab.errors import NonFiniteError
    from gaugelab.experiments import _intrinsic_train

    train = _intrinsic_train._train

    def failing(model, params, sample, steps, batch, lr, seed, label, run):
        if label.startswith("did d=32 seed=1"):
            raise NonFiniteError(f"{label}: training loss nan at step 3")
        return train(model, params, sample, steps, batch, lr, seed, label, run)

    monkeypatch.setattr(_intrinsic_train, "_train", failing)  # runs execute in this process
    result = run_intrinsic_dim(quick_spec(), store=tmp_path / "s.sqlite", write_report=False).result
    failed = [r for r in result.records if r.status != "completed"]
    assert [(r.d, r.seed, r.status) for r in failed] == [(32, 1, "numerical_failure")]
    assert "nan at step 3" in failed[0].message
    summary = {s.d: s for s in result.estimate.summaries}[32]
    assert summary.failed_seeds == [1] and list(summary.seed_scores) == [0]
    assert len(result.records) == 4  # append-only: the failure is in the raw table
