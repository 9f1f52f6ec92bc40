"""gaugelab lora compare / compose on PEFT folders (the Typer sub-app, registered on a small app
as cli/app.py registers it): tables printed, the report and the composed adapter written,
bad options one-line errors naming the option, nothing overwritten."""

import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from gaugelab.adapters import Adapter, AdapterModule
from gaugelab.cli import lora, lora_compare
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora
from gaugelab.study.store.db import DEFAULT_STORE_PATH

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


lora.register(app)
runner = CliRunner()
SMALL = TransformerConfig(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=12, d_vocab=7, n_ctx=4)


def invoke(*args):
    return runner.invoke(app, ["lora", *map(str, args)], env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two saved adapters (ranks 2 and 3, B ≠ 0) of one tiny Transformer, and the first again."""
    root = tmp_path_factory.mktemp("adapters")
    out = []
    for seed, r in ((1, 2), (2, 3)):
        model = Transformer(SMALL, seed=0, dtype=torch.float64)
        inject_lora(model, ["q_proj", "fc_in"], r, 2.0 * r, init="peft-gaussian", seed=seed)
        made = Adapter.from_model(model, base_model_name_or_path="tiny")
        gen = torch.Generator().manual_seed(seed)
        modules = {p: AdapterModule(m.A, torch.randn(*m.B.shape, generator=gen,
                                                     dtype=torch.float64), m.record)
                   for p, m in made.modules.items()}  # fmt: skip
        out.append(Adapter(modules, made.config).save(root / f"a{seed}"))
    return out


def test_default_store_is_the_study_store_default():
    assert lora_compare.STORE == DEFAULT_STORE_PATH


def test_compare_prints_both_spaces_and_writes_the_report(folders, tmp_path):
    a, b = folders
    result = invoke("compare", a, b, "--quick", "--out", tmp_path / "r", "--store",
                    tmp_path / "none.sqlite")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Update row space" in result.output and "Update column space" in result.output
    assert "Update spans against factor spans" in result.output
    assert (tmp_path / "r" / "report.html").exists() and (tmp_path / "r" / "phi-row.png").exists()
    data = json.loads((tmp_path / "r" / "compare.json").read_text())
    assert {m["module"] for m in data["modules"]} == {"blocks.0.attn.q_proj", "blocks.0.mlp.fc_in"}
    again = invoke("compare", a, b, "--quick", "--out", tmp_path / "r")
    assert again.exit_code != 0 and "already holds" in again.output


def test_compose_writes_a_loadable_adapter_and_prints_the_ledger(folders, tmp_path):
    a, b = folders
    out = tmp_path / "composed"
    result = invoke("compose", a, b, "--weights", "1,-0.5", "--out", out, "--quick",
                    "--report-dir", tmp_path / "rep",
                    "--store", tmp_path / "none.sqlite")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Rank ledger of the composition (cat)" in result.output
    assert "not computed" in result.output  # folders: no base model and data
    flat = " ".join(result.output.split())
    assert "output terms: not computed" in flat and "nats/char" not in flat
    composed, one, two = Adapter.load(out), Adapter.load(a), Adapter.load(b)
    module = "blocks.0.attn.q_proj"
    want = one.delta_weight(module) - 0.5 * two.delta_weight(module)
    torch.testing.assert_close(composed.delta_weight(module), want, rtol=0, atol=1e-12)
    assert composed.modules[module].r == 5  # 2 + 3, concatenated
    svd = invoke("compose", a, b, "--method", "svd", "--rank", "2", "--out", tmp_path / "s",
                 "--no-evaluate", "--no-report")  # fmt: skip
    assert svd.exit_code == 0, svd.output
    assert Adapter.load(tmp_path / "s").modules[module].r == 2
    assert "Σ growth of rank A_cat" in result.output and "new row dims" not in result.output
    assert "capped" not in svd.output
    big = invoke("compose", a, b, "--method", "svd", "--rank", "100", "--out", tmp_path / "c",
                 "--no-evaluate", "--no-report")  # fmt: skip
    assert big.exit_code == 0, big.output
    assert "--method svd --rank 100: capped at the concatenated rank Σ r_j in 2 of 2" in big.output
    assert Adapter.load(tmp_path / "c").modules[module].r == 5


def test_an_adapter_compared_with_itself_says_so(folders, tmp_path):
    a, b = folders
    same = invoke("compare", a, a, "--quick", "--no-report", "--store", tmp_path / "n.sqlite")
    assert same.exit_code == 0, same.output
    assert "are the same update" in " ".join(same.output.split())
    other = invoke("compare", a, b, "--quick", "--no-report", "--store", tmp_path / "n.sqlite")
    assert other.exit_code == 0 and "same update" not in other.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("compare", "{a}"), "give B or --against-full"),
        (("compare", "{a}", "{b}", "--policy", "spectral"), "--policy 'spectral'"),
        (("compose", "{a}", "{b}", "--weights", "1", "--out", "{tmp}/x"), "--weights has 1"),
        (
            ("compose", "{a}", "{b}", "--method", "svd", "--out", "{tmp}/y"),
            "--method svd needs --rank K (K >= 1)",
        ),
        (
            ("compare", "{a}", "{b}", "--policy", "0"),
            "--policy 0; allowed: numerical, algebraic, energy, configured, or an integer k >= 1",
        ),
        (("compare", "{a}", "{b}", "--policy", "-1"), "--policy -1; allowed: "),
        (("compare", "{a}", "{b}", "--dense-rho", "0"), "--dense-rho 0; allowed: (0, 1]"),
        (("compare", "{a}", "{b}", "--rho", "1.5"), "--rho 1.5; allowed: (0, 1]"),
        (("compare", "{tmp}/nope", "{b}"), "no such adapter folder: {tmp}/nope"),
        (("compose", "{a}", "{tmp}/nope", "--out", "{tmp}/x"), "no such adapter folder: "),
        (
            ("compare", "nope", "{b}", "--store", "{tmp}/s.sqlite"),
            "'nope' is not an adapter folder, and there is no run store",
        ),
    ],
)
def test_bad_options_are_one_line_errors(folders, tmp_path, args, message):
    a, b = folders
    filled = [x.format(a=a, b=b, tmp=tmp_path) for x in args]
    result = invoke(*filled)
    assert result.exit_code == 2
    assert message.format(tmp=tmp_path) in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_adapters_of_different_bases_are_refused_naming_the_option_that_allows_them(
    folders, tmp_path
):
    other = Adapter.load(folders[1])
    config = type(other.config)(**{**other.config.__dict__, "base_model_name_or_path": "other"})
    renamed = Adapter(dict(other.modules), config).save(tmp_path / "other")
    refused = invoke("compose", folders[0], renamed, "--out", tmp_path / "c", "--no-report",
                     "--store", tmp_path / "none.sqlite")  # fmt: skip
    assert refused.exit_code == 2 and "--allow-base-mismatch" in refused.output
    assert "allow_different_bases" not in refused.output and not (tmp_path / "c").exists()
    allowed = invoke("compose", folders[0], renamed, "--out", tmp_path / "c", "--no-report",
                     "--allow-base-mismatch", "--store", tmp_path / "none.sqlite")  # fmt: skip
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize(("weights", "message"), [
    ("0.3,nan", "--weights '0.3,nan'; allowed: comma-separated finite numbers"),
    ("0.3", "--weights has 1 values for 2 sources; allowed: one per source"),
])  # fmt: skip
def test_bad_weights_are_refused_naming_the_option(folders, tmp_path, weights, message):
    result = invoke("compose", *folders, "--weights", weights, "--out", tmp_path / "c",
                    "--no-report", "--store", tmp_path / "none.sqlite")  # fmt: skip
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert not (tmp_path / "c").exists()
