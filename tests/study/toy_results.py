"""A toy experiment whose runs write files, for the result-reader tests (its trainer is named by
its dotted path, as the experiments' are: ``tests`` is importable from the repository root)."""

import json
from typing import ClassVar

from pydantic import Field

from gaugelab.study.spec import ExperimentSpec


class FilesSpec(ExperimentSpec):
    """Writes ``a.json`` and ``b.json`` (kind ``result``) and ``w.bin`` (kind ``weights``)."""

    kind: ClassVar[str] = "toy-files"
    trainer: ClassVar[str] = "tests.study.toy_results:write_files"
    value: int = Field(1, description="the value written into both JSON files")
    fail: bool = Field(False, description="raise after writing the files")


class NoTrainerSpec(ExperimentSpec):
    """A spec that names no trainer."""

    kind: ClassVar[str] = "toy-untrained"
    value: int = Field(1, description="unused")


def write_files(spec: FilesSpec, run) -> None:
    """The trainer of :class:`FilesSpec`."""
    for name in ("a.json", "b.json"):
        path = run.directory / name
        path.write_text(json.dumps({"name": name, "value": spec.value}), encoding="utf-8")
        run.artifact(path, "result")
    weights = run.directory / "w.bin"
    weights.write_bytes(bytes([0, 1, 2, 255]))
    run.artifact(weights, "weights")
    if spec.fail:
        raise ZeroDivisionError("toy: failed after writing its files")
