"""gaugelab.experiments.intrinsic.run: the d90 study on the harness — every trial a stored run, the
estimate with its envelope read back from the store, runs reused across threshold rules, SAID's
d = m reported degenerate, the fine-tuning problem's head inside d, the report."""

import pytest

from gaugelab.experiments.intrinsic.run import (
    collect,
    estimate_intrinsic_dimension,
    plan,
    quick_spec,
    run_intrinsic_dim,
    tables,
)
from gaugelab.experiments.registry import report_study
from gaugelab.study.store.db import RunStore

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
    assert "on tiny-shakespeare (char)" in tables(result)[0].title  # not "digits"
    # d_model 16, 1 block: embeddings 65·16 + 32·16, attention 4·16·16, MLP 2·16·32,
    # two RMSNorm gains and the final one 3·16, unembedding 16·65
    assert result.estimate.ledger["ambient_dim"] == 1040 + 512 + 1024 + 1024 + 48 + 1040


def test_a_failed_trial_is_kept_in_the_records_and_never_selected(tmp_path, monkeypatch):
    from gaugelab.errors import NonFiniteError
    from gaugelab.experiments.intrinsic import train as _intrinsic_train

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
    # the failed seed stays in the median of two seeds: (−inf + S) / 2, not passing
    assert summary.aggregate == float("-inf") and not summary.passes
    assert len(result.records) == 4  # append-only: the failure is in the raw table


def test_problem_size_is_the_model_that_trains(tmp_path):
    import torch

    from gaugelab.experiments.intrinsic.budget import problem_size
    from gaugelab.experiments.intrinsic.train import build_problem, make_mlp
    from gaugelab.lowrank.intrinsic.protocol import SAIDReparameterization, make_projection

    spec = quick_spec()
    model = build_problem(spec).model
    size = problem_size(spec)
    assert size.ambient_dim == sum(p.numel() for p in model.parameters()) == 1482
    said = SAIDReparameterization(model, lambda D, k: make_projection("dense", D, k, 0), 8)
    assert size.groups == len(said.groups) == 3
    finetune = quick_spec(problem="finetune", layers=5, hidden=40)  # the pretrain's body counts
    body = make_mlp(16, 2, 5, 0, torch.float32)
    assert problem_size(finetune).ambient_dim == sum(p.numel() for p in body.parameters())
    char = problem_size(quick_spec(problem="char", layers=1))
    assert char.ambient_dim == 1040 + 512 + 1024 + 1024 + 48 + 1040  # as the char test counts


@pytest.mark.parametrize(
    ("fields", "refused", "admitted"),
    [
        ({"method": "said"}, 2, (3, 1485)),  # m = 3 scales inside d; d − m <= D = 1482
        ({"method": "said", "family": "fastfood"}, 1486, (3, 1485)),
        ({"family": "orthonormal", "normalization": "qr"}, 1483, (1, 1482)),
        ({"problem": "finetune", "method": "said"}, 1401, (3, 1400)),  # D = 1397, new head
    ],
)
def test_an_inadmissible_d_is_refused_before_any_run(tmp_path, fields, refused, admitted):
    for d in admitted:  # the ends of the admissible range plan
        assert plan(quick_spec(dims=(d,), **fields)).specs()
    spec = quick_spec(dims=(admitted[0], refused), **fields)
    with pytest.raises(ValueError, match=rf"^IntrinsicSpec: dims={refused}; allowed: "):
        plan(spec)
    store = tmp_path / "s.sqlite"
    with pytest.raises(ValueError, match=rf"dims={refused}"):
        run_intrinsic_dim(spec, store=store)
    assert not store.exists()  # nothing registered, not even the finetune pretrain


def test_bad_grid_values_name_the_field_and_the_value():
    for fields, message in (
        ({"lrs": (0.03, -1.0)}, "lrs=-1; allowed: rates > 0"),
        ({"full_lrs": (0.0,)}, "full_lrs=0; allowed: rates > 0"),
        ({"dims": (8, 0)}, "dims=0; allowed: integers >= 1"),
        ({"problem": "char", "hidden": 33}, "hidden=33; allowed: an even integer"),
    ):
        with pytest.raises(ValueError, match=f"IntrinsicSpec: {message}"):
            quick_spec(**fields)
    with pytest.raises(ValueError, match=r"seeds=-1; allowed: an integer in \[0, 2\*\*63\)"):
        quick_spec(seeds=(0, -1))  # every spec's seed rule (gaugelab.study.spec)


def test_a_d_where_every_seed_failed_is_failing_and_the_bracket_end(tmp_path, monkeypatch):
    from gaugelab.errors import NonFiniteError
    from gaugelab.experiments.intrinsic import train as _intrinsic_train
    from gaugelab.experiments.intrinsic.run import tables

    train = _intrinsic_train._train

    def failing(model, params, sample, steps, batch, lr, seed, label, run):
        if label.startswith("did d=8 "):  # every seed of the smallest d
            raise NonFiniteError(f"{label}: training loss nan at step 1")
        return train(model, params, sample, steps, batch, lr, seed, label, run)

    monkeypatch.setattr(_intrinsic_train, "_train", failing)
    spec = quick_spec(dims=(8, 32), seeds=(0,), threshold_value=0.01)  # 32 surely passes
    result = run_intrinsic_dim(spec, store=tmp_path / "s.sqlite", write_report=False).result
    c = result.estimate.crossing
    assert (c.state, c.estimate, c.bracket, c.all_failed) == ("crossed", 32, (8, 32), (8,))
    assert c.statement == "d90 = 32 on the tested grid, bracket (8, 32]; every seed failed at d = 8"
    summary, estimate, _ = tables(result)
    state = summary.columns.index("vs target")
    assert [row[0] for row in summary.rows if row[state] == "fail (every seed failed)"] == [8]
    assert ["d where every seed failed", "8"] in estimate.rows


_TRAIN_FRESH = """
import json, sys
import torch
from gaugelab.experiments.intrinsic.train import _train

torch.manual_seed(0)
model = torch.nn.Linear(4, 3).double()

def sample(gen, batch):
    return (torch.randn(batch, 4, generator=gen, dtype=torch.float64),
            torch.randint(0, 3, (batch,), generator=gen))

_train(model, list(model.parameters()), sample, 5, 8, 0.05, 1, "t", None)
print(json.dumps({"loaded": "torch._dynamo" in sys.modules,
                  "w": [p.detach().flatten().tolist() for p in model.parameters()]}))
"""


def test_training_runs_torch_adam_without_loading_the_compiler():
    import json
    import subprocess
    import sys

    import torch
    import torch.nn.functional as F

    done = subprocess.run([sys.executable, "-c", _TRAIN_FRESH], capture_output=True, text=True,
                          check=True, timeout=120)  # fmt: skip
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["loaded"] is False  # torch.optim's own wrappers would import torch._dynamo
    torch.manual_seed(0)  # the same five steps through torch.optim.Adam: the same numbers
    model = torch.nn.Linear(4, 3).double()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(8, 4, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 3, (8,), generator=gen)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    assert got["w"] == [p.detach().flatten().tolist() for p in model.parameters()]


def test_the_figure_of_a_study_whose_every_run_failed_draws_no_empty_legend():
    import warnings

    from gaugelab.experiments.intrinsic.results import IntrinsicResult, figure

    empty = IntrinsicResult(quick_spec(), "s", full=[], states=[], records=[], estimate=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels" on stderr
        fig = figure(empty)
    assert fig.axes[0].get_legend() is None
