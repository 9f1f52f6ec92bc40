"""``Adapter``: the factors, scales, factor records and configuration of one LoRA adapter."""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from gaugelab.adapters import files
from gaugelab.adapters.config import AdapterConfig
from gaugelab.adapters.module import AdapterModule, StoredModules
from gaugelab.adapters.writer import AdapterWriter
from gaugelab.models.lora import FactorRecord, LoRALinear, lora_modules

# Written into a new adapter_config.json beside the interpreted fields (PEFT's defaults).
_PEFT_DEFAULTS = {
    "bias": "none",
    "inference_mode": True,
    "init_lora_weights": True,
    "lora_bias": False,
    "modules_to_save": None,
    "task_type": None,
    "use_dora": False,
}


def _unknown_record(module: str, pair: files.StoredPair, config: AdapterConfig) -> FactorRecord:
    r = pair.a_shape[0]
    return FactorRecord(
        module=module,
        d_in=pair.a_shape[1],
        d_out=pair.b_shape[0],
        r=r,
        alpha=config.alpha_for(module),
        use_rslora=config.use_rslora,
        scale=config.scale_for(module, r),
        init="unknown",
        zero_factor="unknown",
        down_distribution="unknown",
        down_variance=None,
        up_distribution="unknown",
        up_variance=None,
        seed=None,
        dtype=str(pair.dtype).split(".")[-1],
        fan_in_fan_out=config.fan_in_fan_out,
    )


def _records(modules: Mapping[str, AdapterModule]) -> dict[str, FactorRecord]:
    """The records of ``modules``, without reading a stored module's factors."""
    if isinstance(modules, StoredModules):
        return dict(modules.records)
    return {p: m.record for p, m in modules.items()}


class Adapter:
    """A LoRA adapter: per module ``A [r, d_in]``, ``B [d_out, r]``, ``s``, and its record.

    Args:
        modules: module path → :class:`AdapterModule`; a
            :class:`~gaugelab.adapters.module.StoredModules` (what :meth:`load` gives) reads
            each module from its file when looked up, so that one module at a time is in
            memory.
        embeddings: the modules whose pair is embedding LoRA (PEFT's ``lora_embedding_A/B``;
            ``A [r, num_embeddings]``, ``B [embedding_dim, r]``: ``s·B A`` is the transpose
            of the embedding table's update, with the same singular values).
        others: the file's other tensors (``modules_to_save`` copies, trained biases): key →
            ``"[shape] dtype"``; listed, not analysed, not written back by :meth:`save`.
        magnitudes: DoRA's magnitude vectors, module → ``m [d_out]`` (``use_dora``; read by
            :meth:`load` with ``dora=True``). Such an adapter's update needs the base weight
            (:func:`gaugelab.adapters.dora.dora_delta`); it is neither applied nor saved.
        config: the :class:`AdapterConfig`; every module's rank, alpha and rsLoRA flag must be
            the ones the config resolves for it (rank from ``rank_pattern`` / ``r``, alpha
            from ``alpha_pattern`` / ``lora_alpha``), so the files mean one thing to PEFT too.

    Raises:
        ValueError: no modules, a module the config resolves differently, or a magnitude of
            no module or of another length than its ``d_out``.

    Source: PEFT's adapter format (``save_pretrained`` / ``PeftModel.from_pretrained``, 0.21);
    seed 003 §0x07I (the factor record), §0x08K (merge).
    """

    def __init__(
        self,
        modules: Mapping[str, AdapterModule],
        config: AdapterConfig,
        *,
        embeddings: frozenset[str] = frozenset(),
        others: Mapping[str, str] | None = None,
        magnitudes: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        if not modules:
            raise ValueError("Adapter: modules is empty; allowed: at least one adapted module")
        records = _records(modules)
        for path, rec in records.items():
            want = (config.rank_for(path), config.alpha_for(path))
            if (rec.r, rec.alpha) != want or rec.use_rslora != config.use_rslora:
                raise ValueError(
                    f"Adapter: module {path!r} has r={rec.r}, alpha={rec.alpha}, use_rslora="
                    f"{rec.use_rslora}; the config resolves r={want[0]}, alpha={want[1]}, "
                    f"use_rslora={config.use_rslora} (rank_pattern / alpha_pattern / r / "
                    "lora_alpha); PEFT could not load such a file"
                )
            if rec.module != path:
                raise ValueError(f"Adapter: the record of {path!r} names {rec.module!r}")
        if unknown := sorted(embeddings - set(modules)):
            raise ValueError(f"Adapter: embeddings {unknown} are not among the modules")
        magnitudes = dict(magnitudes or {})
        for path, m in magnitudes.items():
            if path not in records or tuple(m.shape) != (records[path].d_out,):
                raise ValueError(
                    f"Adapter: the DoRA magnitude of {path!r} has shape {list(m.shape)}; "
                    "allowed: [d_out] of an adapted module"
                )
        self.modules = modules if isinstance(modules, StoredModules) else dict(modules)
        self.config = config
        self.embeddings = frozenset(embeddings)
        self.others = dict(others or {})
        self.magnitudes = magnitudes

    def _plain(self, owner: str) -> None:
        if self.magnitudes:
            raise ValueError(f"{owner}: a DoRA adapter (use_dora) is not a plain s·B A update; "
                             "allowed: LoRA adapters")  # fmt: skip

    @property
    def records(self) -> dict[str, FactorRecord]:
        """Module path → :class:`FactorRecord`."""
        return _records(self.modules)

    def delta_weight(self, module: str) -> torch.Tensor:
        """``ΔW = s·B A`` of ``module`` in its base weight's layout: ``[d_out, d_in]``, or
        ``[d_in, d_out]`` when ``fan_in_fan_out`` (as PEFT's ``get_delta_weight``, computed
        in the same order: ``(B @ A)``, transposed, times ``s``).

        Raises:
            ValueError: ``module`` is not adapted.
        """
        if module not in self.modules:
            raise ValueError(
                f"Adapter.delta_weight: module {module!r} is not adapted; "
                f"adapted: {', '.join(self.modules)}"
            )
        m = self.modules[module]
        product = m.B @ m.A
        return (product.T if self.config.fan_in_fan_out else product) * m.scale

    def to(self, dtype: torch.dtype) -> Adapter:
        """A copy with the factors cast to ``dtype`` (records updated)."""
        name = str(dtype).split(".")[-1]
        return Adapter(
            {
                p: AdapterModule(
                    m.A.to(dtype), m.B.to(dtype), dataclasses.replace(m.record, dtype=name)
                )
                for p, m in self.modules.items()
            },
            self.config,
            embeddings=self.embeddings,
            others=self.others,
            magnitudes={p: m.to(dtype) for p, m in self.magnitudes.items()},
        )

    def apply(
        self, model: nn.Module, *, dropout: float | None = None, freeze_base: bool = True
    ) -> dict[str, LoRALinear]:
        """Wrap each adapted ``nn.Linear`` of ``model`` in a :class:`LoRALinear` holding copies of
        this adapter's factors and records (in place).

        Args:
            model: the base model the adapter was made for (paths as in ``named_modules``).
            dropout: adapter-input dropout; None uses the config's ``lora_dropout``.
            freeze_base: freeze every non-factor parameter, as PEFT does.

        Returns:
            Path → the new layer.

        Raises:
            ValueError: a DoRA adapter; a path missing from ``model``, not an ``nn.Linear``
                (or already adapted), a weight shape ``[d_out, d_in]`` or dtype that
                disagrees; nothing is changed then.
        """
        self._plain("Adapter.apply")
        bases = {}
        for path, m in self.modules.items():
            try:
                base = model.get_submodule(path)
            except AttributeError:
                raise ValueError(f"Adapter.apply: the model has no module {path!r}") from None
            if type(base) is not nn.Linear:
                raise ValueError(
                    f"Adapter.apply: {path!r} is a {type(base).__name__}; allowed: "
                    "an nn.Linear that is not yet adapted"
                )
            rec = m.record
            if tuple(base.weight.shape) != (rec.d_out, rec.d_in) or base.weight.dtype != m.A.dtype:
                raise ValueError(
                    f"Adapter.apply: {path!r} has weight {list(base.weight.shape)} "
                    f"{base.weight.dtype}; the adapter needs [{rec.d_out}, {rec.d_in}] "
                    f"{m.A.dtype} (cast with Adapter.to(dtype))"
                )
            bases[path] = base
        p = self.config.lora_dropout if dropout is None else dropout
        layers = {}
        for path, m in self.modules.items():
            rec = m.record
            layer = LoRALinear(
                bases[path],
                rec.r,
                rec.alpha,
                use_rslora=rec.use_rslora,
                dropout=p,
                init="given",
                factors=(m.A, m.B),
                name=path,
            )
            layer.record = dataclasses.replace(rec, merged=False)
            model.set_submodule(path, layer)
            layers[path] = layer
        if freeze_base:
            factors = {id(q) for m in lora_modules(model).values() for q in (m.lora_A, m.lora_B)}
            for q in model.parameters():
                if id(q) not in factors:
                    q.requires_grad_(False)
        return layers

    @classmethod
    def from_model(cls, model: nn.Module, *, base_model_name_or_path: str | None = None):
        """The adapter of every :class:`LoRALinear` in ``model`` (factors copied, records kept).

        The config takes the most common rank and alpha as ``r`` / ``lora_alpha`` and lists
        every other module in ``rank_pattern`` / ``alpha_pattern`` under an anchored key
        ``^<escaped path>`` (exactly that module under PEFT's rule); ``target_modules`` lists
        the adapted paths.

        Raises:
            ValueError: no LoRA layer; layers that mix rsLoRA and plain scales or different
                dropout probabilities (one PEFT config cannot state them).
        """
        layers = lora_modules(model)
        if not layers:
            raise ValueError("Adapter.from_model: the model has no LoRALinear module")
        flags = {m.use_rslora for m in layers.values()}
        drops = {float(getattr(m.lora_dropout, "p", 0.0)) for m in layers.values()}
        if len(flags) > 1 or len(drops) > 1:
            raise ValueError(
                "Adapter.from_model: the layers mix use_rslora or dropout values; "
                "allowed: one of each (one PEFT config)"
            )
        r = Counter(m.r for m in layers.values()).most_common(1)[0][0]
        alpha = Counter(m.alpha for m in layers.values()).most_common(1)[0][0]
        exact = {p: "^" + re.escape(p) for p in layers}
        config = AdapterConfig(
            r=r,
            lora_alpha=alpha,
            target_modules=tuple(layers),
            use_rslora=flags.pop(),
            rank_pattern={exact[p]: m.r for p, m in layers.items() if m.r != r},
            alpha_pattern={exact[p]: m.alpha for p, m in layers.items() if m.alpha != alpha},
            lora_dropout=drops.pop(),
            base_model_name_or_path=base_model_name_or_path,
            extra=_PEFT_DEFAULTS,
        )
        modules = {
            p: AdapterModule(m.lora_A.detach().clone(), m.lora_B.detach().clone(), m.record)
            for p, m in layers.items()
        }
        return cls(modules, config)

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write ``adapter_model.safetensors``, ``adapter_config.json`` and
        ``gaugelab_factor_records.json`` into ``directory`` (PEFT's layout and key names).

        Raises:
            FileExistsError: ``directory`` already holds adapter files and not ``overwrite``.
            ValueError: a DoRA adapter (its magnitudes are not written).
        """
        self._plain("Adapter.save")
        with AdapterWriter(directory, owner="Adapter.save", overwrite=overwrite) as writer:
            for path, m in self.modules.items():
                writer.add(path, m.A, m.B, m.record.to_dict(), embedding=path in self.embeddings)
            return writer.finish(self.config.to_json_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, *, dora: bool = False) -> Adapter:
        """Read a PEFT LoRA adapter directory (or a file inside it); with ``dora``, a DoRA
        adapter too (``use_dora``: its magnitudes in :attr:`magnitudes`).

        Each module's rank is read from its tensors and checked against the config's
        ``rank_pattern`` / ``r``; its scale is ``lora_scale(alpha_pattern or lora_alpha, r,
        use_rslora)``. A ``gaugelab_factor_records.json`` beside the files supplies the records
        (checked against tensors and config); without it the records say ``init="unknown"``.
        Every factor is checked when the adapter is loaded, one module at a time; the factors
        are then read from the file when a module is looked up (:attr:`modules` is a
        :class:`~gaugelab.adapters.module.StoredModules`), so that a 7B adapter's memory is one
        module's, not the file's.

        Raises:
            ValueError: a DoRA adapter unless ``dora``; a pickle checkpoint (never
                unpickled), missing files, a bad config or
                tensor (see :func:`gaugelab.adapters.files.read_factors`), a rank that
                disagrees with the config, or records that disagree with the tensors.
        """
        owner = "Adapter.load"
        folder = files.adapter_directory(path, owner=owner)
        config = AdapterConfig.from_json_dict(
            files.read_config(folder, owner=owner), source=str(folder / files.CONFIG), dora=dora
        )
        stored = files.read_factors(folder, owner=owner, dora=dora)
        use_dora = bool(config.extra.get("use_dora"))
        magnitudes = stored.magnitudes
        if missing := sorted(set(stored.factors) - set(magnitudes) if use_dora else magnitudes):
            raise ValueError(f"{owner}: {folder}: use_dora={use_dora} but {missing[0]!r} "
                             f"{'has no' if use_dora else 'has a'} DoRA magnitude in "
                             f"{files.WEIGHTS}")  # fmt: skip
        written = files.read_records(folder, owner=owner)
        if written is not None and set(written) != set(stored.factors):
            raise ValueError(
                f"{owner}: {folder / files.RECORDS} covers {sorted(written)}, the "
                f"tensors {sorted(stored.factors)}"
            )
        records = {}
        for module, pair in stored.factors.items():
            configured = config.rank_for(module)
            if pair.a_shape[0] != configured:
                raise ValueError(
                    f"{owner}: {pair.a_key} has rank {pair.a_shape[0]} but the config resolves "
                    f"r={configured} for {module!r} (rank_pattern / r); PEFT's loader refuses "
                    "such a file"
                )
            derived = record = _unknown_record(module, pair, config)
            if written is not None:
                try:
                    record = FactorRecord.from_dict(written[module])
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{owner}: {folder / files.RECORDS}: {module}: {e}") from None
                keys = ("d_in", "d_out", "r", "alpha", "use_rslora", "scale", "dtype",
                        "fan_in_fan_out")  # fmt: skip
                if any(getattr(record, k) != getattr(derived, k) for k in keys):
                    raise ValueError(
                        f"{owner}: {folder / files.RECORDS}: the record of {module!r} says "
                        f"{ {k: getattr(record, k) for k in keys} }; tensors and config give "
                        f"{ {k: getattr(derived, k) for k in keys} }"
                    )
            records[module] = record
        modules = StoredModules(stored.file, stored.factors, records)
        return cls(modules, config, embeddings=stored.embeddings, others=stored.others,
                   magnitudes=magnitudes)  # fmt: skip
