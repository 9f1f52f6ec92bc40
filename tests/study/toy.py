"""A toy experiment for the harness tests (importable by spawned workers and Ray)."""

import errno
from typing import ClassVar, Literal

from pydantic import Field

from gaugelab import NonFiniteError
from gaugelab.study.runner import ValidationStop
from gaugelab.study.spec import ExperimentSpec


class ToySpec(ExperimentSpec):
    """y_t = x·t + seed for t = 1..steps, with an optional scripted failure."""

    kind: ClassVar[str] = "toy"
    x: float = Field(1.0, description="slope")
    seed: int = Field(0, description="offset")
    steps: int = Field(3, ge=1, description="steps")
    fail: Literal["none", "nan", "stop", "flaky-os", "bug", "admission", "missing-file",
                  "disk-full", "no-memory", "torch-no-memory"] = Field(
        "none", description="scripted failure"
    )

    def admit(self) -> None:
        if self.fail == "admission":
            raise ValueError("toy: this spec is not admissible")

    def execute(self, run) -> None:
        for t in range(1, self.steps + 1):
            run.log(t, {"y": self.x * t + self.seed})
            if self.fail == "nan" and t == 2:
                raise NonFiniteError("toy: loss became nan")
            if self.fail == "stop" and t == 2:
                raise ValidationStop("toy: validation loss stopped improving")
        if self.fail == "flaky-os" and run.directory.name == "attempt-1":
            raise OSError("toy: disk hiccup on the first attempt")
        if self.fail == "disk-full":
            raise OSError(errno.ENOSPC, "No space left on device", str(run.directory / "c.pt"))
        if self.fail == "no-memory":
            raise MemoryError
        if self.fail == "torch-no-memory":  # refused by the allocator at once: nothing is used
            import torch

            torch.empty(2**50, dtype=torch.uint8)
        if self.fail == "bug":
            raise ZeroDivisionError("toy: a bug")
        if self.fail == "missing-file":
            open(run.directory / "no-such-input.txt").close()
