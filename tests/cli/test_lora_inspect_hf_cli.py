"""gaugelab lora inspect ADAPTER --base FOLDER --data FILE: the ladder's tables (no retention
columns), --json carrying the ladder, and one-line refusals naming the option."""

import json

import pytest
import typer
from tests.support.hf_adapters import TEXT, make_base_and_adapter
from typer.testing import CliRunner

from gaugelab.cli import lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


lora.register(app)
runner = CliRunner()


@pytest.fixture(scope="module")
def made(tmp_path_factory, one_thread):
    tmp = tmp_path_factory.mktemp("hf-cli")
    (tmp / "data.txt").write_text(TEXT)
    make_base_and_adapter(tmp, "gpt2", transformers, peft)
    return tmp


def invoke(tmp, *args):
    base = ("lora", "inspect", str(tmp / "gpt2-adapter"), "--store", str(tmp / "s.sqlite"),
            "--no-report", "--ranks", "1,4")  # fmt: skip
    return runner.invoke(app, [*base, *map(str, args)], env={"COLUMNS": "250"})


def test_the_ladder_tables_and_json(made):
    options = ("--base", made / "gpt2-base", "--data", made / "data.txt", "--tokens", 64,
               "--window", 16)  # fmt: skip
    result = invoke(made, *options)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Evidence ladder per module" in out and "every module replaced jointly" in out
    assert "retention" not in out and "nats/token" in out
    assert "4 window(s) of 16 token(s)" in out and "not computed: evidence ladder" not in out
    as_json = invoke(made, *options, "--json")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)  # the progress of loading goes to stderr
    assert len(data["joint"]) == 2 and data["joint"][0]["retention_svd"] is None
    rows = [row for m in data["modules"] for row in m["ladder"]]
    assert len(rows) == 2 * 6 and {row["n_samples"] for row in rows} == {64}
    quick = json.loads(invoke(made, *options, "--json", "--no-end-to-end").stdout)
    assert not quick["joint"] and "target" not in quick["reference"]
    assert any("--no-end-to-end" in n for n in quick["not_computed"])
    assert [row["output_residual_ow"] for m in quick["modules"] for row in m["ladder"]] == [
        row["output_residual_ow"] for row in rows]  # the same captured inputs
    whole = [row for row in rows if row["rank"] == 4]
    assert all(row["loss_svd"] == pytest.approx(data["reference"]["target"], rel=1e-6)
               for row in whole)  # fmt: skip


def test_base_alone_checks_the_modules_and_leaves_the_ladder_to_data(made):
    result = invoke(made, "--base", f"{made}/gpt2-base", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["modules"] and not any(m["ladder"] for m in data["modules"])


@pytest.mark.parametrize(("args", "message"), [
    (("--data", "{tmp}/data.txt"), "error: --data needs --base"),
    (("--base", "{tmp}/gpt2-base", "--data", "{tmp}/data.txt", "--head", "seq2seq"),
     "error: --head 'seq2seq'; allowed: auto, causal-lm, base"),
    (("--base", "{tmp}/gpt2-base", "--data", "{tmp}/data.txt", "--tokens", "4"),
     "error: --tokens 4; allowed: at least --window (128)"),
    (("--base", "{tmp}/nowhere", "--data", "{tmp}/data.txt"), "does not exist"),
])  # fmt: skip
def test_refusals_are_one_line(made, args, message):
    result = invoke(made, *(a.format(tmp=made) for a in args))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
