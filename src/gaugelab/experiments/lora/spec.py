"""The LoRA fine-tuning protocol's configuration: the pretrain run and the fine-tuning study.

:class:`PretrainSpec` is one run: a small causal character Transformer trained on the
*retention* domain of a two-domain corpus (tiny-shakespeare by default). :class:`FinetuneSpec`
is the fine-tuning study on the *target* domain (the pinned standard-library source by default):
full fine-tuning and LoRA at each rank of ``ranks``; a run of it holds exactly one candidate
(``full`` alone, or one rank). It embeds the pretrain spec, so the pretrain run's identity is
part of every fine-tuning run's identity. Every default is the protocol of docs/commands/lora.md
and fits in about ten minutes on two cores.

Source: biderman2024lora (full fine-tuning against LoRA on code, learning against forgetting;
``α = 2r``); hu2021lora, §4.1; seed 003 §0x0BC (the source's configuration).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gaugelab.models import TransformerConfig
from gaugelab.models.lora import INITS, check_init
from gaugelab.study.spec import ExperimentSpec
from gaugelab.tasks import TwoDomainSpec, two_domain_spec

ATTENTION: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The attention projections of :class:`gaugelab.models.Transformer` (module-name suffixes)."""
MLP: tuple[str, ...] = ("fc_in", "fc_out")
"""The MLP projections of the protocol's model (a GELU MLP: no ``fc_gate``)."""
ALL_TARGETS: tuple[str, ...] = ATTENTION + MLP
"""Every projection of a block: the LoRA targets by default, and what is analysed for full
fine-tuning."""
TARGET_GROUPS: dict[str, tuple[str, ...]] = {"attention": ATTENTION, "mlp": MLP}
"""Group names accepted beside module names (``--targets attention``)."""

LORA_LR = 5e-3
"""The protocol's LoRA learning rate (AdamW; ours, chosen on the default corpus)."""
FULL_LR = 1e-3
"""The protocol's full fine-tuning learning rate (AdamW; ours)."""
QUICK: dict[str, Any] = {
    "pretrain": {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_mlp": 64, "steps": 30,
                 "batch_size": 8, "eval_every": 10, "val_batches": 2, "val_batch_size": 8,
                 "warmup": 5, "checkpoint_every": 20},
    "steps": 20, "batch_size": 8, "eval_every": 10, "warmup": 5, "checkpoint_every": 10,
}  # fmt: skip
"""Overrides of the ``--quick`` look (seconds; for tests and docs)."""


def resolve_targets(names: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Module names from names and group names (``attention``, ``mlp``), in block order.

    Args:
        names: a comma-separated string or a sequence of ``q_proj``, ``k_proj``, ``v_proj``,
            ``o_proj``, ``fc_in``, ``fc_out``, ``attention``, ``mlp``.

    Returns:
        The module names, each once, in the order of :data:`ALL_TARGETS`.

    Raises:
        ValueError: an unknown name, or none.
    """
    items = names.split(",") if isinstance(names, str) else list(names)
    items = [n.strip() for n in items if n.strip()]
    chosen: set[str] = set()
    for name in items:
        if name in TARGET_GROUPS:
            chosen.update(TARGET_GROUPS[name])
        elif name in ALL_TARGETS:
            chosen.add(name)
        else:
            allowed = ", ".join((*TARGET_GROUPS, *ALL_TARGETS))
            raise ValueError(f"resolve_targets: targets={name}; allowed: {allowed}")
    if not chosen:
        raise ValueError("resolve_targets: targets is empty; allowed: attention, mlp or names")
    return tuple(t for t in ALL_TARGETS if t in chosen)


def default_corpus() -> TwoDomainSpec:
    """The protocol's corpus: tiny-shakespeare (retention) and the pinned stdlib (target),
    windows of 64 characters, 100 chunks per domain, 10% validation, 10% test."""
    return two_domain_spec(block_size=64)


class PretrainSpec(ExperimentSpec):
    """The pretrain run: a causal character Transformer on the retention domain.

    Pre-RMSNorm blocks, GELU MLP, learned positions, bias-free, normal init (std 0.02); AdamW
    (no weight decay) with a linear warm-up and a cosine decay to a tenth of ``lr``. Validation
    loss of both domains is logged every ``eval_every`` steps on ``val_batches`` fixed batches
    (drawn from ``eval_seed``); the fine-tuning runs evaluate on the same batches.

    Source: karpathy2015char; docs/commands/lora.md (the protocol).
    """

    kind: ClassVar[str] = "lora-pretrain"

    corpus: TwoDomainSpec = Field(
        default_factory=default_corpus,
        description="The two-domain corpus (both sources with their digests, splits, windows).",
    )
    n_layers: int = Field(3, ge=1, description="Transformer blocks.")
    d_model: int = Field(64, ge=1, description="Residual-stream width.")
    n_heads: int = Field(4, ge=1, description="Attention heads (d_head = d_model / n_heads).")
    d_mlp: int = Field(256, ge=1, description="MLP hidden width.")
    init_seed: int = Field(0, description="Seed of the model's initialisation.")
    data_seed: int = Field(0, description="Seed of the training minibatch stream.")
    steps: int = Field(2000, ge=1, description="Training steps.")
    batch_size: int = Field(32, ge=1, description="Windows per training minibatch.")
    lr: float = Field(3e-3, gt=0, description="AdamW peak learning rate.")
    warmup: int = Field(100, ge=0, description="Steps of linear learning-rate warm-up.")
    eval_every: int = Field(250, ge=1, description="Steps between validation evaluations.")
    val_batches: int = Field(8, ge=1, description="Validation batches per domain.")
    val_batch_size: int = Field(32, ge=1, description="Windows per validation batch.")
    eval_seed: int = Field(1234, description="Seed of the fixed validation batches.")
    checkpoint_every: int = Field(500, ge=1, description="Steps between checkpoints.")
    dtype: Literal["float32", "float64"] = Field("float32", description="Parameter dtype.")

    @model_validator(mode="after")
    def _check(self) -> PretrainSpec:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"PretrainSpec: d_model={self.d_model} is not a multiple of n_heads="
                f"{self.n_heads}; allowed: d_model divisible by n_heads"
            )
        return self

    def transformer_config(self, d_vocab: int) -> TransformerConfig:
        """The Transformer for a corpus of ``d_vocab`` tokens (its windows are ``n_ctx``)."""
        return TransformerConfig(
            n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
            d_head=self.d_model // self.n_heads, d_mlp=self.d_mlp, d_vocab=d_vocab,
            n_ctx=self.corpus.block_size, act_fn="gelu", normalization="rmsnorm",
            norm_placement="pre", positional="learned", causal=True, init_std=0.02,
        )  # fmt: skip

    def with_seed_roles(self, own: dict[str, int]) -> dict[str, int]:
        """A spec's ``own`` seed roles and those of this run it starts from, sorted by role:
        ``pretrain_init_seed``, ``pretrain_data_seed``, ``eval_seed``, ``corpus_seed``."""
        roles = {**own, "pretrain_init_seed": self.init_seed, "pretrain_data_seed": self.data_seed,
                 "eval_seed": self.eval_seed, "corpus_seed": self.corpus.seed}  # fmt: skip
        return dict(sorted(roles.items()))

    trainer: ClassVar[str] = "gaugelab.experiments.lora.train:train_pretrain"


class FinetuneSpec(ExperimentSpec):
    """The fine-tuning study on the target domain: full fine-tuning and LoRA at each rank.

    Every candidate starts from the pretrain run's weights and trains its ``seeds`` as one
    ensemble (one member per seed: the seed draws the LoRA factors and the minibatch stream).
    LoRA adapts the ``targets`` of every block with ``α = alpha_ratio · r`` (``s = α/r``, or
    ``α/√r`` with ``rslora``); full fine-tuning trains every parameter. AdamW without weight
    decay, warm-up and cosine decay as the pretrain. A run of this spec holds exactly one
    candidate: :func:`gaugelab.experiments.lora.run.plan` makes one run per candidate, with the
    options the candidate does not read set to their defaults (so a change of LoRA options
    reuses the stored full fine-tuning run).

    Source: biderman2024lora (full fine-tuning against LoRA, ``α = 2r``); hu2021lora, §4.1;
    kalajdzievski2023rank (rsLoRA); docs/commands/lora.md (the protocol).
    """

    kind: ClassVar[str] = "lora-finetune"

    pretrain: PretrainSpec = Field(
        default_factory=PretrainSpec, description="The pretrain run the candidates start from."
    )
    full: bool = Field(True, description="Include full fine-tuning (every parameter trained).")
    ranks: tuple[int, ...] = Field((1, 4, 16), description="LoRA ranks, one candidate each.")
    alpha_ratio: float = Field(2.0, gt=0, description="lora_alpha = alpha_ratio · r (α = 2r).")
    rslora: bool = Field(False, description="rsLoRA scale α/√r instead of α/r.")
    targets: tuple[str, ...] = Field(
        ALL_TARGETS, description="Projections LoRA adapts in every block (module names)."
    )
    init: str = Field(
        "peft-default",
        description="LoRA initialisation (gaugelab.models.lora.INITS). Default peft-default: "
        "PEFT's default start (A Kaiming-uniform, U(±1/√d_in); B = 0), so the fine-tune starts "
        "where PEFT's would; standard is the original LoRA paper's Gaussian A ~ N(0, 1/d_in), "
        "B = 0.",
    )
    seeds: tuple[int, ...] = Field(
        (0,), description="Seeds, trained as one ensemble per candidate."
    )
    lr: float = Field(LORA_LR, gt=0, description="AdamW peak learning rate of LoRA.")
    full_lr: float = Field(FULL_LR, gt=0, description="AdamW peak learning rate of full FT.")
    steps: int = Field(800, ge=1, description="Fine-tuning steps.")
    batch_size: int = Field(32, ge=1, description="Windows per training minibatch.")
    warmup: int = Field(50, ge=0, description="Steps of linear learning-rate warm-up.")
    eval_every: int = Field(100, ge=1, description="Steps between validation evaluations.")
    checkpoint_every: int = Field(200, ge=1, description="Steps between checkpoints.")
    target_corpus: TwoDomainSpec | None = Field(
        None,
        description="Fine-tune on this corpus's target domain instead of the pretrain "
        "corpus's (encoded with the pretrain vocabulary; same retention domain, chunking, "
        "split seed and windows). None (default): the pretrain corpus's target; left out of "
        "the identity then, so default runs keep their identities.",
    )

    diagnostics_every: int | None = Field(
        None,
        ge=1,
        description="Log the LoRA factors' per-step record (lowrank.factor_diagnostics, seed "
        "003 §0x08L) after every this many updates, per seed, into the store as "
        "diag/<module>/seed=S/… metrics. None (default): not logged, and left out of the "
        "identity, so default runs keep their identities.",
    )

    def spec_dict(self) -> dict[str, Any]:
        """The fields in JSON mode; ``target_corpus`` and ``diagnostics_every`` only when set
        (identity-preserving)."""
        data = super().spec_dict()
        for optional in ("target_corpus", "diagnostics_every"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data

    @field_validator("ranks", "seeds")
    @classmethod
    def _distinct(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(values)) != len(values):
            raise ValueError(f"{values} repeats a value")
        return values

    @field_validator("ranks")
    @classmethod
    def _positive(cls, ranks: tuple[int, ...]) -> tuple[int, ...]:
        if any(r < 1 for r in ranks):
            raise ValueError(f"ranks={list(ranks)}; allowed: integers >= 1")
        return ranks

    @model_validator(mode="after")
    def _check(self) -> FinetuneSpec:
        if not self.full and not self.ranks:
            raise ValueError("FinetuneSpec: full=False and no ranks: nothing to run")
        if not self.seeds:
            raise ValueError("FinetuneSpec: seeds=(); allowed: at least one seed")
        check_init("FinetuneSpec", self.init, allowed=tuple(i for i in INITS if i != "given"))
        other = self.target_corpus
        if other is not None:
            differ = self.pretrain.corpus.differs_beyond_target(other)
            if differ:
                raise ValueError(
                    f"FinetuneSpec: target_corpus differs from the pretrain corpus in {differ}; "
                    "allowed: another target domain only (same retention text, chunking, "
                    "split seed and windows)"
                )
        resolved = resolve_targets(self.targets)
        if resolved != tuple(self.targets):
            raise ValueError(
                f"FinetuneSpec: targets={list(self.targets)}; allowed: module names of "
                f"{', '.join(ALL_TARGETS)}, each once, in that order (resolve_targets)"
            )
        check_lora_rank(self.pretrain, self.targets, self.ranks, "ranks")
        return self

    def candidates(self) -> list[str]:
        """The candidates' labels: ``full``, then ``lora r=<r>`` per rank."""
        return (["full"] if self.full else []) + [f"lora r={r}" for r in self.ranks]

    @property
    def candidate(self) -> tuple[str, int | None]:
        """``("full", None)`` or ``("lora", r)`` of a run spec (one candidate).

        Raises:
            ValueError: the spec holds several candidates (a study spec, not a run's).
        """
        if len(self.candidates()) != 1:
            raise ValueError(
                f"FinetuneSpec: {self.candidates()} are several candidates; a run holds one "
                "(plan(spec) makes them)"
            )
        return ("full", None) if self.full else ("lora", self.ranks[0])

    def alpha(self, r: int) -> float:
        """``lora_alpha`` of rank ``r``: ``alpha_ratio · r``."""
        return self.alpha_ratio * r

    def seed_roles(self) -> dict[str, int]:
        return self.pretrain.with_seed_roles({f"seed[{i}]": s for i, s in enumerate(self.seeds)})

    def dtype_name(self) -> str:
        return self.pretrain.dtype

    trainer: ClassVar[str] = "gaugelab.experiments.lora.train:train_finetune"


def quick_spec(**overrides: Any) -> FinetuneSpec:
    """The ``--quick`` look: a 2-layer, d_model 32 model, 30 pretrain and 20 fine-tuning
    steps on small batches (seconds); ``overrides`` are further :class:`FinetuneSpec` fields
    (a ``pretrain`` mapping is merged into the quick pretrain's)."""
    pretrain = {**QUICK["pretrain"], **dict(overrides.pop("pretrain", {}))}
    fields = {k: v for k, v in QUICK.items() if k != "pretrain"}
    return FinetuneSpec(pretrain=PretrainSpec(**pretrain), **{**fields, **overrides})


def check_lora_rank(pretrain: PretrainSpec, targets: tuple[str, ...], ranks: tuple[int, ...],
               field: str) -> None:  # fmt: skip
    """Refuse a LoRA rank above some adapted projection's ``min(d_in, d_out)``.

    The update ``s·B A`` of such a projection has rank at most ``min(d_in, d_out)``, so the
    rank beyond it adds factor parameters (and time: ``--ranks 100000`` crawls), never update
    rank. Attention projections are ``d_model × d_model``, ``fc_in`` and ``fc_out``
    ``d_model × d_mlp`` (the pretrain's widths).

    Raises:
        ValueError: ``field=<ranks>; allowed: integers in [1, <bound>]`` naming the
            projections that bound it.
    """
    smallest = {name: pretrain.d_model for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    smallest |= {"fc_in": min(pretrain.d_model, pretrain.d_mlp),
                 "fc_out": min(pretrain.d_model, pretrain.d_mlp)}  # fmt: skip
    bound = min(smallest[name] for name in targets)
    if max(ranks, default=0) <= bound:
        return
    which = ", ".join(f"{name} {smallest[name]}" for name in targets if smallest[name] == bound)
    shown = ",".join(map(str, ranks))
    raise ValueError(
        f"{field}={shown}; allowed: integers in [1, {bound}], min(d_in, d_out) of the adapted "
        f"projections ({which}; d_model {pretrain.d_model}, d_mlp {pretrain.d_mlp})"
    )
