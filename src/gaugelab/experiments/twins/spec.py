"""The twin protocol's configuration: optimizers and their hyperparameters, the model configs,
and :class:`TwinSpec` (one optimizer's twin run).

Source: singh2026lossbasis, §6; docs/protocols.md §5 and §6.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gaugelab.equivariance.twins import GaugeDraw, TwinKind
from gaugelab.models import TransformerConfig
from gaugelab.optim import OPTIMIZERS
from gaugelab.tasks import CharText

HYBRID = "muon-hybrid"
DEFAULT_OPTIMIZERS = ("adam", "heavy-ball", "scalar-adam", HYBRID)
# docs/protocols.md §5: adam 1e-3; heavy-ball μ = 0.9, η = 0.5; scalar-adam 3e-3; muon 0.02
# (+ adam 1e-3 elsewhere).
PROTOCOL_HYPER: dict[str, dict[str, float]] = {
    "adam": {"lr": 1e-3},
    "heavy-ball": {"lr": 0.5, "momentum": 0.9},
    "scalar-adam": {"lr": 3e-3},
    HYBRID: {"lr": 0.02, "adam_lr": 1e-3},
}
# The character model (6 layers, d_model 256) diverges under heavy-ball at the modular task's
# η = 0.5 (non-finite by step 20); at 0.1 and 0.03 it stays finite (and, as singh2026lossbasis
# reports for SGD at this depth, near the unigram loss). docs/protocols.md §6.
TEXT_HYPER: dict[str, dict[str, float]] = {
    **PROTOCOL_HYPER,
    "heavy-ball": {"lr": 0.03, "momentum": 0.9},
}
QUICK_STEPS = 100  # the step-1 split and the early drift; about two minutes on 2 cores
QUICK_CHECKPOINTS = (0, 1, 10, 50, 100)


def twin_optimizers() -> list[str]:
    """The names a twin run accepts: every zoo rule, and ``muon-hybrid``."""
    return [*sorted(OPTIMIZERS), HYBRID]


def twin_model_config(**overrides) -> TransformerConfig:
    """The docs/protocols.md §5 model: 2 pre-RMSNorm blocks, 4 heads × 16, d 64, SiLU MLP 256,
    no mask.

    RMSNorm is ``x/‖x‖·√d·g`` (no stabiliser), all projections bias-free, no qk-norm, learned
    positions, torch's default layer initialisation; the head reads the last position.
    """
    base = dict(
        n_layers=2, d_model=64, n_heads=4, d_head=16, d_mlp=256, d_vocab=48, d_vocab_out=47,
        n_ctx=3, act_fn="silu", normalization="rmsnorm", norm_eps=0.0, norm_placement="pre",
        positional="learned", causal=False, init_std=None,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


def text_model_config(d_vocab: int, block_size: int, **overrides) -> TransformerConfig:
    """The stochastic variant's character model (docs/protocols.md §6): 6 layers, d_model 256,
    8 heads × 32, causal."""
    base = dict(
        n_layers=6, d_model=256, n_heads=8, d_head=32, d_mlp=1024, d_vocab=d_vocab,
        n_ctx=block_size, act_fn="silu", normalization="rmsnorm", norm_eps=1e-6,
        positional="learned", causal=True, init_std=0.02,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


class HFModelRef(BaseModel):
    """A local Hugging Face model that the twin protocol trains in place of ``TwinSpec.model``.

    Built by :func:`gaugelab.experiments.twins.hf.hf_twin`, which reads the folder, checks it
    and records its digest; a run re-checks the digest before it trains.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="The model folder, or its config.json (a random init).")
    model_type: str = Field(description="The config's model_type (gpt2, gpt_neox, llama …).")
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="Digest of the files read: config.json, safetensors weights, tokenizer.",
    )
    weights: Literal["checkpoint", "random"] = Field(
        description="checkpoint: the folder's safetensors; random: an init seeded init_seed."
    )
    tokens: Literal["tokenizer", "bytes"] = Field(
        description="The text through the folder's tokenizer, or as UTF-8 bytes (ids 0–255)."
    )
    block_size: int = Field(64, ge=1, description="Tokens per training window.")


class TwinSpec(BaseModel):
    """One optimizer's twin run (immutable; its JSON is part of the run's identity).

    Source: singh2026lossbasis, §6; docs/protocols.md §5 (every default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: ClassVar[str] = "twins"

    model: TransformerConfig = Field(
        default_factory=twin_model_config,
        description="The Transformer (docs/protocols.md §5); not read when `hf` is set.",
    )
    task: Literal["modular", "text"] = Field(
        "modular", description="modular: full-batch addition mod `modulus`; text: characters."
    )
    modulus: int = Field(47, ge=2, description="Prime of the modular task.")
    train_fraction: float = Field(0.4, gt=0, lt=1, description="Train share of the pairs.")
    split_seed: int = Field(42, description="Seed of the random train/validation split.")
    text_path: str | None = Field(
        None, description="UTF-8 text file for task='text'; None: the packaged tiny-shakespeare."
    )
    text_sha256: str | None = Field(
        None, description="sha256 of the text file; part of the identity, checked before training."
    )
    batch_size: int = Field(32, ge=1, description="Minibatch size for task='text'.")
    val_batches: int = Field(4, ge=1, description="Validation batches for task='text'.")
    optimizer: str = Field("adam", description="A zoo rule or 'muon-hybrid'.")
    hyper: dict[str, float | int | bool | str] = Field(
        default_factory=dict, description="Optimizer hyperparameters (§5 defaults if empty)."
    )
    twins: tuple[TwinKind, ...] = Field(
        ("gauge", "identity", "noise"), description="Twins trained beside the base."
    )
    noise_scale: float = Field(1e-7, gt=0, description="Noise twin: W_Q, W_K += scale·randn.")
    init_seed: int = Field(42, description="Seed of the base model's initialisation.")
    gauge_seed: int = Field(777, description="Seed of the gauge draw (one element per head).")
    gauge_draw: GaugeDraw = Field(
        "reference",
        description="How the twins are drawn. reference: as the reference scripts, each head "
        "rotated by the Q factor of a float32 randn(d_head, d_head) QR without sign fix, and "
        "the noise twin's randn in float32 (reproduces their logged step-1 values); haar: a "
        "sign-fixed Haar draw and float64 noise.",
    )
    noise_seed: int = Field(888, description="Seed of the noise twin's perturbation.")
    data_seed: int = Field(0, description="Seed of the minibatch stream (task='text').")
    steps: int = Field(1500, ge=1, description="Training steps.")
    checkpoints: tuple[int, ...] = Field(
        (0, 1, 10, 50, 100, 300, 600, 1000, 1500), description="Steps at which to measure."
    )
    dtype: Literal["float32", "float64"] = Field("float32", description="Parameter dtype.")
    hf: HFModelRef | None = Field(
        None,
        description="A local Hugging Face model trained on the text task in place of `model` "
        "(None: gaugelab's own Transformer). Left out of the run identity when None.",
    )
    compile: bool = Field(
        False,
        description="Train through torch.compile (about 2× faster on CPU after a one-off "
        "compilation; round-off differs from eager, so it is part of the run's identity).",
    )

    @model_validator(mode="after")
    def _check(self) -> TwinSpec:
        if self.optimizer not in twin_optimizers():
            known = ", ".join(twin_optimizers())
            raise ValueError(f"TwinSpec: optimizer={self.optimizer!r}; allowed: {known}")
        if len(set(self.twins)) != len(self.twins):
            raise ValueError(f"TwinSpec: twins={self.twins!r} repeats a kind")
        if self.hf is not None and self.task != "text":
            raise ValueError(f"TwinSpec: task={self.task!r} with a Hugging Face model; "
                             "allowed: 'text' (its tokens)")  # fmt: skip
        if self.hf is not None and self.compile:
            raise ValueError("TwinSpec: compile=True with a Hugging Face model; allowed: eager "
                             "(the members run one by one)")  # fmt: skip
        return self

    def hyperparameters(self) -> dict:
        """``hyper``, or when empty the docs/protocols.md §5 hyperparameters of the optimizer
        (:data:`TEXT_HYPER` for the text task: heavy-ball at η = 0.03)."""
        if self.hyper:
            return dict(self.hyper)
        defaults = TEXT_HYPER if self.task == "text" else PROTOCOL_HYPER
        return dict(defaults.get(self.optimizer, {}))

    def twin_draw(self) -> dict:
        """``gauge_seed``, ``noise_seed``, ``noise_scale`` and ``gauge_draw``: the keywords of
        :func:`gaugelab.equivariance.twins.make_twins` (and ``make_hf_twins``)."""
        keys = ("gauge_seed", "noise_seed", "noise_scale", "gauge_draw")
        return {k: getattr(self, k) for k in keys}

    def measured_steps(self) -> list[int]:
        """Checkpoint steps within ``[0, steps]``, plus the final step."""
        return sorted({s for s in self.checkpoints if 0 <= s <= self.steps} | {self.steps})

    def text(self) -> CharText:
        """The text of ``task='text'``: ``text_path``, or the packaged tiny-shakespeare.

        Raises:
            FileNotFoundError, ValueError: from :class:`gaugelab.tasks.CharText`; ValueError
                also when the file's sha256 is not ``text_sha256``.
        """
        n_ctx = self.model.n_ctx
        if self.text_path is None:
            text = CharText.tiny_shakespeare(block_size=n_ctx)
        else:
            text = CharText(self.text_path, block_size=n_ctx)
        if self.text_sha256 is not None and text.sha256 != self.text_sha256:
            raise ValueError(
                f"TwinSpec: {text.path} has sha256 {text.sha256[:12]}…, the spec expects "
                f"{self.text_sha256[:12]}…: the file changed"
            )
        return text
