"""gaugelab learn-forget (on gaugelab's own app): the help lists the study's options; a quick
study prints the candidate table, the no-release line and what the study does not show, and
`gaugelab report` rebuilds its report; bad options are one-line errors naming the option that
write nothing, and so is a study manifest whose splits share a chunk."""

import pytest
from typer.testing import CliRunner

from gaugelab.cli.app import app
from gaugelab.experiments.learn_forget.run import LearnForgetSpec
from gaugelab.study.store.db import RunStore
from gaugelab.tasks.sources import read_source, tiny_shakespeare_source

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def quick(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("learn-forget-cli") / "s.sqlite"
    return store, invoke("learn-forget", "--quick", "--store", store)


def learn_forget_studies(store):
    with RunStore(store, create=False) as db:
        return [s.name for s in db.studies() if s.name.startswith("learn-forget-")]


def test_the_help_lists_the_study_options():
    result = invoke("learn-forget", "--help")
    assert result.exit_code == 0, result.output
    for option in (
        "--ranks",
        "--seeds",
        "--checkpoints",
        "--min-target-gain",
        "--max-forgetting",
        "--min-stress-gain",
        "--second-target",
        "--quick",
    ):
        assert option in result.output, option


def test_the_help_states_the_spec_default_of_steps():
    result = invoke("learn-forget", "--help")
    assert f"default {LearnForgetSpec().finetune.steps};" in result.output


def test_a_quick_study_prints_candidates_no_release_and_what_it_does_not_show(quick):
    store, result = quick
    assert result.exit_code == 0, result.output
    out = result.output
    assert "4 cell(s): full, lora-r1, lora-r4, rslora-r4 × block(s) a" in out
    assert "checkpoints [10, 20]" in out
    assert "Candidates on validation (block a)" in out
    for cid in ("base", "full", "lora-r1", "lora-r4", "rslora-r4"):
        assert f"│ {cid} " in out, cid
    # the default gate (target gain ≥ 0.5) is out of reach in 20 steps: nothing is released
    assert "no release: the feasible set is empty; the test stays sealed" in out
    assert "What this study does not show" in out
    assert "report: " in out
    assert len(learn_forget_studies(store)) == 1


def test_gaugelab_report_rebuilds_the_learn_forget_report(quick, tmp_path):
    store, first = quick
    assert first.exit_code == 0, first.output
    (study,) = learn_forget_studies(store)
    out = tmp_path / "r"
    result = invoke("report", study, "--store", store, "--out", out)
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert "What this study does not show" in html
    assert "Candidates on validation (block a)" in html
    assert "no release" in html
    assert (out / "pareto.svg").is_file() and (out / "full_update_rank.svg").is_file()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--ranks", "0"), "--ranks"),
        (("--ranks", "1,x"), "--ranks"),
        (("--seeds", "-1"), "--seeds"),
        (("--checkpoints", "30"), "--checkpoints"),  # past --steps 20
        (("--checkpoints", "15"), "--checkpoints"),
        (("--dtype", "float16"), "--dtype"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option_and_write_nothing(
    args, option, tmp_path
):
    store = tmp_path / "s.sqlite"
    result = invoke("learn-forget", "--quick", *args, "--store", store)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert option in result.output
    assert not store.exists()  # nothing trained, nothing written


def test_a_checkpoint_off_the_validation_grid_is_refused_before_anything_runs(tmp_path):
    store = tmp_path / "s.sqlite"
    result = invoke("learn-forget", "--quick", "--checkpoints", "15", "--store", store)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "[15] are not validation steps" in result.output  # eval_every = 10 in --quick
    assert not store.exists()


def test_a_checkpoint_past_the_steps_reads_in_the_commands_terms(tmp_path):
    result = invoke("learn-forget", "--quick", "--checkpoints", "30", "--store", tmp_path / "s")
    assert result.exit_code == 2
    assert "finetune.--" not in result.output


def test_runs_list_names_a_cells_candidate_and_block():
    from gaugelab.cli.runs import trains
    from gaugelab.experiments.learn_forget.run import plan, quick_spec

    cells = plan(quick_spec()).specs()
    assert [trains("learn-forget", c.spec_dict()) for c in cells] == [
        f"{c} (block a)" for c in quick_spec().candidate_ids()
    ]
    assert trains("learn-forget", {"candidate": None}) is None  # another version's spec


def test_a_second_gate_study_is_refused_the_opened_test_in_one_line_and_a_report(tmp_path):
    """The quick study (default gates) leaves the test sealed; an open-gate study opens it
    once; a third gate study over the same cells is refused the splits, says so, reports."""
    store = tmp_path / "s.sqlite"
    assert invoke("learn-forget", "--quick", "--store", store).exit_code == 0
    opened = invoke("learn-forget", "--quick", *OPEN_GATES, "0", "--store", store)
    assert opened.exit_code == 0, opened.output
    assert "selected lora-r1" in opened.output and "Held-out test" in opened.output
    refused = invoke("learn-forget", "--quick", *OPEN_GATES, "-1", "--store", store)
    assert refused.exit_code == 0, refused.output
    assert "Traceback" not in refused.output
    assert "the test was refused: these test splits were opened by study" in refused.output
    assert "report: " in refused.output
    events = sorted(p.name for p in store.parent.glob(f"{store.name}.artifacts/*/events/*"))
    # quick: no-release; open gates: freeze, open, report; the third: freeze, refused open
    assert len(events) == 6 and not (store.parent / "sealed-test").exists()


OPEN_GATES = ("--max-forgetting", "10", "--min-stress-gain", "-1", "--min-target-gain")


def test_a_second_target_that_is_the_retention_text_is_refused_by_the_study_manifest(tmp_path):
    text = tmp_path / "shakespeare.txt"
    text.write_text(read_source(tiny_shakespeare_source()), encoding="utf-8")
    store = tmp_path / "s.sqlite"
    result = invoke("learn-forget", "--quick", "--second-target", text, "--store", store)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "'retention_v1' holds sample id" in result.output  # a chunk trained on in block b
    assert not store.exists()
