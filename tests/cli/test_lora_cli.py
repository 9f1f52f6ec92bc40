"""gaugelab lora finetune / inspect (the Typer sub-app, registered on a small app as
cli/app.py registers it): a quick study prints its tables and is reused when run again; inspect
reads a candidate, a run and a plain folder; bad options are one-line errors naming the
option, and nothing is written."""

import json
import shutil

import pytest
import typer
from typer.testing import CliRunner

from gaugelab.cli import lora

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


lora.register(app)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["lora", *map(str, args)], env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("cli") / "s.sqlite"
    args = ("finetune", "--quick", "--ranks", "2", "--no-full", "--store", store)
    first = invoke(*args)
    return store, args, first


def test_a_quick_study_prints_its_tables_and_is_reused_when_run_again(finetuned):
    _, args, first = finetuned
    assert first.exit_code == 0, first.output
    out = first.output
    assert "pretrain (2 layers, d_model 32, 30 steps) + 1 candidate(s) (lora r=2)" in out
    assert "validation loss after the last step" in out and "Learning curves" in out
    assert "lora r=2: run " in out and "report:" in out
    assert "gaugelab lora inspect 'lora r=2' --store" in out
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert "2 run(s) were already completed in the store: reused" in again.output


def test_inspect_a_candidate_prints_policies_truncation_and_the_ladder(finetuned, tmp_path):
    store, _, _ = finetuned
    result = invoke("inspect", "lora r=2", "--store", store, "--ranks", "1,2",
                    "--out", tmp_path / "r")  # fmt: skip
    assert result.exit_code == 0, result.output
    for title in ("Rank policies", "90%-energy rank", "Weight-space truncation",
                  "Evidence ladder per module", "every module replaced jointly"):  # fmt: skip
        assert title in result.output, title
    assert "not computed" not in result.output
    assert (tmp_path / "r" / "report.html").exists() and (tmp_path / "r" / "ladder.png").exists()


def test_inspect_a_plain_folder_says_what_it_could_not_compute(finetuned, tmp_path):
    store, _, _ = finetuned
    adapter = next(store.parent.glob("s.sqlite.artifacts/*/attempt-1/adapter-seed0"))
    folder = tmp_path / "adapter"
    shutil.copytree(adapter, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = None
    (folder / "adapter_config.json").write_text(json.dumps(config))
    result = invoke("inspect", folder, "--store", store, "--no-report")
    assert result.exit_code == 0, result.output
    assert "Rank policies" in result.output and "Evidence ladder" not in result.output
    assert "not computed: evidence ladder" in result.output
    assert "report:" not in result.output
    as_json = invoke("inspect", folder, "--store", store, "--no-report", "--json", "--seed", "1")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert [m["module"] for m in data["modules"]][:2] == ["blocks.0.attn.q_proj",
                                                         "blocks.0.attn.k_proj"]  # fmt: skip
    assert all(m["policies"]["configured"] == 2 for m in data["modules"])
    assert any("seed=1 ignored" in line for line in data["not_computed"])  # said, not dropped


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--ranks", "0"), "--ranks 0; allowed: integers >= 1"),
        (("--ranks", "a"), "--ranks 'a'; allowed: comma-separated integers"),
        (("--targets", "x_proj"), "--targets x_proj; allowed: attention, mlp"),
        (("--seeds", ""), "--seeds is empty"),
        (("--steps", "0"), "--steps 0; allowed: an integer >= 1"),
        (("--dtype", "float16"), "--dtype 'float16'; allowed: float32, float64"),
        (("--no-full", "--ranks", ","), "--ranks is empty"),
        (("--max-workers", "0"), "--max-workers 0"),
        (("--diagnostics-every", "0"), "--diagnostics-every 0"),
    ],
)
def test_bad_finetune_options_are_one_line_errors_naming_the_option(tmp_path, args, message):
    store = tmp_path / "s.sqlite"
    result = invoke("finetune", "--quick", *args, "--store", store)
    assert result.exit_code == 2, (args, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output
    assert not store.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("lora r=2", "--seed", "4"), "--seed 4; allowed: 0"),
        (("lora r=7",), "no candidate 'lora r=7'"),
        (("abcdef",), "run: no run in "),
        (("/no/such/adapter",), "no such adapter folder: /no/such/adapter"),
        (("ghij",), "'ghij' is no adapter folder, no candidate label"),
        (("lora r=2", "--ranks", "-1"), "--ranks -1; allowed: integers >= 0"),
    ],
)
def test_bad_inspect_sources_are_one_line_errors(finetuned, args, message):
    store, _, _ = finetuned
    result = invoke("inspect", *args, "--store", store, "--no-report")
    assert result.exit_code == 2, (args, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output


def test_a_study_with_a_failed_run_exits_3_names_it_and_suggests_nothing_about_it(tmp_path):
    args = ("finetune", "--quick", "--ranks", "2", "--seeds", "0", "--no-full", "--lr", "1e30",
            "--store", tmp_path / "s.sqlite")  # fmt: skip
    result = invoke(*args)
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    failed = [line for line in lines if line.startswith("failed ")]
    assert len(failed) == 1 and "numerical_failure" in failed[0] and "not finite" in failed[0]
    assert lines[-1] == "1 run did not complete (above, each with its cause); the tables hold " \
        "what completed"
    assert "inspect a candidate" not in result.output
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert cells == ["pretrained"]  # the failed candidate is no row of any table
    assert "lora r=2: run" not in result.output and "Learning curves" not in result.output
    flat = " ".join(result.output.split())  # the failure's line, unwrapped
    assert "not finite: [nan]" in flat and "; what to do: a smaller learning rate" in flat
    assert invoke(*args).exit_code == 3  # run again: the failure is still the study's status
