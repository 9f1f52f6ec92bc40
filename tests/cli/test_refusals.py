"""Values a run could only fail on are refused before the store is touched: one line naming the
option, exit code 2, no store file written (so no failed run is left behind)."""

from typing import ClassVar

import pytest
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from gaugelab.cli.app import app
from gaugelab.experiments.lora.spec import FinetuneSpec
from gaugelab.experiments.sensing.zoo import ZooSpec
from gaugelab.study.spec import ExperimentSpec

runner = CliRunner()


class Inner(BaseModel):
    scale: float = 1.0
    data_seed: int = 0


class Nested(ExperimentSpec):
    kind: ClassVar[str] = "nested"
    grids: dict[str, tuple[float, ...]] = Field({}, description="Per-rule grids.")
    inner: Inner = Field(Inner(), description="A nested record.")
    seeds: dict[str, int] = Field({}, description="Seeds by role.")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("lora", "finetune", "--quick", "--lr", "inf"), "--lr inf; allowed: a finite number"),
        (("lora", "finetune", "--quick", "--alpha-ratio", "inf"),
         "--alpha-ratio inf; allowed: a finite number"),
        (("lora", "finetune", "--quick", "--seeds="),
         "--seeds is empty; allowed: comma-separated integers"),
        (("zoo", "--quick", "--init-scale", "inf"), "--init-scale inf; allowed: a finite number"),
        (("zoo", "--quick", "--seeds", str(2**64)),
         f"--seeds {2**64}; allowed: an integer in [0, 2**63)"),
        (("zoo", "--quick", "--seeds="), "--seeds is empty; allowed: comma-separated integers"),
        (("dial", "--quick", "--ps="), "--ps is empty; allowed: comma-separated numbers"),
        (("dial", "--quick", "--lrs="), "--lrs is empty; allowed: comma-separated numbers"),
        (("zoo", "--quick", "--study="), "--study ''; allowed: a non-empty study name"),
        (("dial", "--quick", "--study", " "), "--study ' '; allowed: a non-empty study name"),
        (("intrinsic-dim", "--quick", "--seeds="),
         "--seeds is empty; allowed: comma-separated integers"),
        (("lora", "finetune", "--quick", "--ranks", "2,33"),
         "--ranks 2,33; allowed: integers in [1, 32], min(d_in, d_out) of the adapted "
         "projections (q_proj 32, k_proj 32, v_proj 32, o_proj 32, fc_in 32, fc_out 32; "
         "d_model 32, d_mlp 64)"),
        (("lora", "twins", "--quick", "--rank", "100000"),
         "--rank 100000; allowed: integers in [1, 32]"),
        (("lora", "kernel", "--quick", "--rank", "33"), "--rank 33; allowed: integers in [1, 32]"),
        (("zoo", "--quick", "--size", "200000"),
         "--size 200000, --measurements 2399982, 1 seed needs at least 1,430,500,745.8 GiB of "
         "memory; this machine has"),
        (("zoo", "--quick", "--measurements", "2000000000"),
         "--size 40, --measurements 2000000000, 1 seed needs at least"),
        (("twins", "--quick", "--pairs", "100000000"),
         "--pairs 100000000 × 4 optimizer(s) needs at least 2,794.0 GiB of memory"),
        (("dial", "--quick", "--size", "100000"), "--size 100000, --measurements 1199982, "),
        (("twins", "--task", "text", "--batch-size", "1000000000"),
         "--batch-size 1000000000 needs at least 1,528,263.1 GiB of memory; this machine has"),
        # one layer's attention scores and MLP activations of the four members: 152.8 GiB
        (("twins", "--task", "text", "--batch-size", "100000"),
         "--batch-size 100000 needs at least 152.8 GiB of memory; this machine has"),
    ],
)  # fmt: skip
def test_a_value_no_run_could_use_is_refused_before_the_store_exists(tmp_path, args, expected):
    store = tmp_path / "runs.sqlite"
    result = runner.invoke(app, [*args, "--store", str(store)], env={"COLUMNS": "250"})
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"error: {expected}")
    assert not store.exists()


@pytest.mark.parametrize(
    ("spec", "fields", "message"),
    [
        (Nested, {"grids": {"adam": (0.1, float("inf"))}}, "grids.adam=inf"),
        (Nested, {"inner": Inner(scale=float("-inf"))}, "inner.scale=-inf"),
        (Nested, {"inner": Inner(data_seed=2**63)}, f"inner.data_seed={2**63}"),
        (Nested, {"seeds": {"init": -2}}, "seeds.init=-2"),
        (ZooSpec, {"seeds": (0, 2**63)}, f"seeds={2**63}"),
        (FinetuneSpec, {"seeds": (-1,)}, "seeds=-1"),
    ],
)
def test_every_spec_refuses_non_finite_floats_and_seeds_beyond_64_bits_at_any_depth(
    spec, fields, message
):
    with pytest.raises(ValueError) as error:
        spec(**fields)
    assert message in str(error.value)


def test_the_largest_64_bit_seed_and_zero_are_accepted():
    assert ZooSpec(seeds=(0, 2**63 - 1)).seeds == (0, 2**63 - 1)


def test_a_hugging_face_twin_batch_is_refused_by_its_attention_scores(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=256, n_positions=32,
                            bos_token_id=0, eos_token_id=0).save_pretrained(tmp_path / "tiny")
    store = tmp_path / "runs.sqlite"
    result = runner.invoke(app, ["twins", "--model", str(tmp_path / "tiny"), "--steps", "2",
                                 "--block-size", "16", "--batch-size", "100000000",
                                 "--store", str(store)], env={"COLUMNS": "250"})  # fmt: skip
    assert result.exit_code == 2, result.output
    # windows 3·8·B·16 bytes + 4 members × B × 16² float32 scores = 417.2 GiB
    assert result.output.strip().splitlines()[-1].startswith(
        "error: --batch-size 100000000 needs at least 417.2 GiB of memory")
    assert not store.exists()
