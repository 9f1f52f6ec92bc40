"""One adapted module (:class:`AdapterModule`), and a file's modules read one at a time
(:class:`StoredModules`): a 7B adapter's 224 modules are never all in memory at once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from gaugelab.adapters import files
from gaugelab.models.lora import FactorRecord


@dataclass(frozen=True)
class AdapterModule:
    """One adapted module: ``A [r, d_in]``, ``B [d_out, r]`` and its :class:`FactorRecord`.

    Raises:
        ValueError: factor shapes or dtype disagree with the record.
    """

    A: torch.Tensor
    B: torch.Tensor
    record: FactorRecord

    def __post_init__(self) -> None:
        rec = self.record
        if tuple(self.A.shape) != (rec.r, rec.d_in) or tuple(self.B.shape) != (rec.d_out, rec.r):
            raise ValueError(
                f"AdapterModule: {rec.module!r} has A {list(self.A.shape)}, B "
                f"{list(self.B.shape)}; its record allows A [{rec.r}, {rec.d_in}], "
                f"B [{rec.d_out}, {rec.r}]"
            )
        if self.A.dtype != self.B.dtype or str(self.A.dtype).split(".")[-1] != rec.dtype:
            raise ValueError(
                f"AdapterModule: {rec.module!r} has factors {self.A.dtype}, "
                f"{self.B.dtype}; its record says {rec.dtype}"
            )

    @property
    def r(self) -> int:
        """The rank (rows of A)."""
        return self.record.r

    @property
    def scale(self) -> float:
        """The scale ``s``."""
        return self.record.scale


class StoredModules(Mapping[str, AdapterModule]):
    """Module path → :class:`AdapterModule`, each read from ``adapter_model.safetensors`` when
    it is looked up and not kept: memory holds one module's factors at a time, whatever the
    number of layers (:class:`~gaugelab.adapters.files.PairReader` bounds what the file's
    memory map keeps). The file was validated when the adapter was loaded
    (:func:`gaugelab.adapters.files.read_factors`).

    Args:
        file: the safetensors file; pairs: module → its stored pair (keys, shapes, dtype);
        records: module → :class:`FactorRecord` (the same keys as ``pairs``).

    Raises:
        ValueError: ``pairs`` and ``records`` name different modules.
    """

    def __init__(self, file: Path, pairs: Mapping[str, files.StoredPair],
                 records: Mapping[str, FactorRecord]) -> None:  # fmt: skip
        if set(pairs) != set(records):
            raise ValueError(f"StoredModules: pairs {sorted(pairs)} but records {sorted(records)}")
        self.file = Path(file)
        self._reader = files.PairReader(self.file)
        self.pairs = dict(pairs)
        self.records = dict(records)

    def __getitem__(self, module: str) -> AdapterModule:
        A, B = self._reader.read(self.pairs[module])
        return AdapterModule(A, B, self.records[module])

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, module: object) -> bool:
        return module in self.records


class ScaledFactors(Mapping[str, tuple[torch.Tensor, torch.Tensor, float]]):
    """Module path → ``(B [d_out, r], A [r, d_in], s)`` of ``modules``, each looked up when
    asked for (of a :class:`StoredModules`: read then, not kept)."""

    def __init__(self, modules: Mapping[str, AdapterModule]) -> None:
        self._modules = modules

    def __getitem__(self, module: str) -> tuple[torch.Tensor, torch.Tensor, float]:
        m = self._modules[module]
        return m.B, m.A, m.scale

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)
