"""gaugelab twins: a tiny run prints the triplet table and verdicts and is reused when run
again; bad options are one-line errors that name the option."""

import pytest
from typer.testing import CliRunner

from gaugelab.cli.app import app
from gaugelab.errors import NonFiniteError
from gaugelab.lazy import LazyModule

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["twins", *map(str, args)], env={"COLUMNS": "250"})


def test_a_two_step_run_prints_the_triplet_and_is_reused_when_run_again(tmp_path):
    args = ("--steps", "2", "--optimizers", "scalar-adam", "--store", tmp_path / "s.sqlite")
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    assert "1 twin run(s) (scalar-adam × 1 pair(s)), 2 step(s) each" in first.output
    identity_row = next(line for line in first.output.splitlines() if "identity" in line)
    assert identity_row.split("│")[3].strip() == "0"  # step 1: exactly zero
    assert "scalar-adam: equivariant" in first.output
    assert "report:" in first.output
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert "1 run(s) were already completed in the store: reused" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--steps", "0"), "--steps 0"),
        (("--optimizers", "nope,adam"), "--optimizers nope; allowed: adafactor"),
        (("--optimizers", ","), "--optimizers is empty"),
        (("--task", "text", "--batch-size", "0"), "--batch-size 0"),
        (("--text", "corpus.txt"), "--text corpus.txt is read only with --task text"),
        (("--task", "text", "--text", "missing.txt"), "--text missing.txt: CharText"),
        (("--dtype", "float16"), "--dtype float16; allowed: float32 or float64"),
        (("--pairs", "0"), "--pairs 0"),
        (("--task", "text", "--text", "short.txt"),
         "--text short.txt has 11 characters; allowed: a text of at least 641 characters"),
        (("--gauge-draw", "sobol"), "--gauge-draw sobol; allowed: reference or haar"),
        (("--store", "a-file/s.sqlite"),
         "--store a-file/s.sqlite: {tmp}/a-file is a regular file, not a folder"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_errors_naming_the_option(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "short.txt").write_text("short text\n")  # 11 characters
    (tmp_path / "a-file").write_text("x")
    store = tmp_path / "s.sqlite"
    result = invoke("--store", store, *args)  # a later --store wins
    assert result.exit_code == 2, (args, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    expected = f"error: {message.format(tmp=tmp_path)}"
    assert len(lines) == 1 and lines[0].startswith(expected), result.output
    assert not store.exists()  # nothing was written


def test_ctrl_c_prints_how_many_runs_are_complete_and_exits_130(tmp_path, monkeypatch):
    import gaugelab.cli.twins

    class Interrupted(KeyboardInterrupt):  # as gaugelab.study.sweep.SweepInterrupted
        done, total = 1, 4

    def interrupt(*args, **kwargs):
        raise Interrupted

    monkeypatch.setattr(gaugelab.cli.twins, "run_twins_study", interrupt)
    result = invoke("--steps", "1", "--store", tmp_path / "s.sqlite")
    assert result.exit_code == 130, result.output
    assert result.stderr == (
        "interrupted: 1 of 4 runs complete; rerun the same command to resume from the last "
        "checkpoints\n"
    )


def test_compile_without_a_cxx_compiler_is_a_clear_error(tmp_path):
    store = tmp_path / "s.sqlite"
    result = runner.invoke(
        app, ["twins", "--compile", "--store", str(store)], env={"PATH": "", "CXX": ""}
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --compile needs a C++ compiler"), result.output
    assert not store.exists()


def test_the_text_task_defaults_to_the_packaged_tiny_shakespeare(tmp_path):
    store = tmp_path / "s.sqlite"
    result = invoke(
        *("--task", "text", "--steps", "1", "--batch-size", "2", "--optimizers", "adam"),
        *("--store", store),
    )
    assert result.exit_code == 0, result.output
    assert "adam" in result.output and "report:" in result.output
    from gaugelab.study.store.db import RunStore
    from gaugelab.tasks import TINY_SHAKESPEARE_SHA256

    with RunStore(store, create=False) as db:
        (run,) = db.runs()
        assert run.spec["twin"]["text_path"] is None
        assert run.spec["twin"]["text_sha256"] == TINY_SHAKESPEARE_SHA256


def test_gaugelab_report_writes_the_twin_studys_own_report(tmp_path):
    store = tmp_path / "s.sqlite"
    result = invoke("--steps", "1", "--optimizers", "adam", "--store", store)
    assert result.exit_code == 0, result.output
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        (study,) = [s.name for s in db.studies()]
    out = tmp_path / "again"
    again = runner.invoke(app, ["report", study, "--store", str(store), "--out", str(out)])
    assert again.exit_code == 0, again.output
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Relative logit distance of each twin to its base" in html  # the experiment's table
    assert "adam: basis-sensitive" in html  # and its stored verdict
    assert (out / "logit_distance.png").is_file()


def test_a_study_holds_exactly_the_runs_it_asked_for(tmp_path):
    store = tmp_path / "s.sqlite"
    both = invoke("--steps", "1", "--optimizers", "adam,scalar-adam", "--store", store)
    assert both.exit_code == 0, both.output
    one = invoke("--steps", "1", "--optimizers", "adam", "--store", store)
    assert one.exit_code == 0, one.output
    assert "1 run(s) were already completed in the store: reused" in one.output
    assert "scalar-adam" not in one.output  # the earlier study's other run is not shown


def test_the_gauge_draw_is_part_of_the_run_identity(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ("--steps", "1", "--optimizers", "adam", "--store", store)
    reference = invoke(*args)
    assert reference.exit_code == 0, reference.output
    assert "float32, reference gauge draw; store" in reference.output
    haar = invoke(*args, "--gauge-draw", "haar")
    assert haar.exit_code == 0, haar.output
    assert "reused" not in haar.output  # another draw, another run
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        draws = sorted(run.spec["twin"]["gauge_draw"] for run in db.runs())
    assert draws == ["haar", "reference"]


def test_a_metric_row_edited_in_the_store_makes_the_run_unverified_not_printed(tmp_path):
    import sqlite3

    store = tmp_path / "s.sqlite"
    args = ("--steps", "2", "--optimizers", "scalar-adam", "--store", store)
    assert invoke(*args).exit_code == 0
    conn = sqlite3.connect(store, isolation_level=None)  # a hand with the triggers dropped
    conn.execute("DROP TRIGGER metrics_no_update")
    conn.execute("UPDATE metrics SET value = 1.23e-07 WHERE name = 'gauge/logit_distance' "
                 "AND step = 1")  # fmt: skip
    conn.close()
    from gaugelab.experiments.twins.results import collect
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        (study,) = [s.name for s in db.studies()]
        (row,) = collect(db, study).rows
    assert row.termination == "unverified" and "changed afterwards" in row.message
    assert row.distances["gauge"] == {}  # the edited 1.23e-07 is never shown
    again = invoke(*args)  # executed again, as for a changed file
    assert again.exit_code == 0, again.output
    assert "1.23e-07" not in again.output and "scalar-adam: equivariant" in again.output


def test_a_failed_run_is_not_a_row_its_failure_says_what_to_do_and_the_exit_is_3(
    tmp_path, monkeypatch
):
    import gaugelab.experiments.twins.run as twins_run

    real = twins_run.run_twins

    def diverges(spec, *, sink, **kwargs):  # adam logs its step 1, then its loss is nan
        if spec.optimizer != "adam":
            return real(spec, sink=sink, **kwargs)
        sink(1, {"gauge/logit_distance": 1.23e-07, "noise/logit_distance": 3.6e-03})
        raise NonFiniteError("adam: training loss at step 2 is not finite: [nan]")

    monkeypatch.setattr(twins_run, "run_twins", diverges)
    args = ("--steps", "2", "--optimizers", "scalar-adam,adam", "--store", tmp_path / "s.sqlite")
    result = invoke(*args)
    assert result.exit_code == 3, result.output
    lines = result.output.splitlines()
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert "scalar-adam" in cells and "adam" not in cells  # only what completed
    assert "1.23e-07" not in result.output and "3.60e-03" not in result.output
    assert any(line.startswith("scalar-adam: equivariant") for line in lines)
    assert not any(line.startswith("adam:") for line in lines)  # no verdict for a failure
    assert len([line for line in lines if line.startswith("failed ")]) == 1
    flat = " ".join(result.output.split())  # the failure's line, unwrapped
    assert "numerical_failure — NonFiniteError: adam: training loss at step 2" in flat
    assert "; what to do: a smaller learning rate, or another rule (rerunning the same spec " \
        "gives the same outcome)" in flat
    assert lines[-1] == "1 run did not complete (above, each with its cause); the tables hold " \
        "what completed"


def test_a_hugging_face_model_runs_the_same_table_and_verdicts(tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "llama"
    transformers.LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32, vocab_size=256, max_position_embeddings=16,
                             bos_token_id=0, eos_token_id=0).save_pretrained(folder)  # fmt: skip
    result = invoke("--model", folder / "config.json", "--steps", "2", "--block-size", "16",
                    "--batch-size", "8", "--optimizers", "adam",
                    "--store", tmp_path / "s.sqlite")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"llama from {folder / 'config.json'} (a random init, bytes)" in result.output
    identity_row = next(line for line in result.output.splitlines() if "identity" in line)
    assert identity_row.split("│")[3].strip() == "0"
    assert "adam: basis-sensitive" in result.output


def test_model_refusals_are_one_line(tmp_path, monkeypatch):
    task = invoke("--model", tmp_path / "nowhere", "--task", "text")
    assert task.exit_code == 2
    assert task.output.strip() == (
        "error: --task text is not read with --model (the model's twins train on the packaged "
        "tiny-shakespeare through its tokenizer, or bytes); allowed: --model without --task"
    )
    missing = invoke("--model", tmp_path / "nowhere")
    assert missing.exit_code == 2
    assert (
        missing.output.strip().startswith("error: model: ") and "does not exist" in missing.output
    )
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    monkeypatch.setattr("gaugelab.models.hf.transformers", LazyModule("gaugelab_no_such_module"))
    absent = invoke("--model", tmp_path)
    assert absent.exit_code == 2
    assert absent.output.strip() == (
        "error: Hugging Face model folders need transformers: pip install 'gaugelab[hf]'"
    )
