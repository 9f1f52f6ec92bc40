"""A checkpointing toy for the harness tests (importable by spawned workers and Ray).

``y_t = t + seed`` for t = 1..steps, a checkpoint every ``every`` steps (the state is the
running sum), step progress reported under the label ``"toy"``, and a ``result.json`` artifact
at the end; ``pause`` sleeps that many seconds per step. With ``$TOY_DIE_AT`` set, the process
kills itself at that step (after that step's checkpoint, if any): the same spec (identity)
dies in one process and completes in another. With ``$TOY_INTERRUPT_SEED`` set, the run of that
seed raises ``KeyboardInterrupt`` at its first step, as Ctrl-C would.
"""

import json
import os
import time
from typing import ClassVar

import torch
from pydantic import Field

from gaugelab.study.spec import ExperimentSpec


class CheckpointToySpec(ExperimentSpec):
    """y_t = t + seed, with checkpoints, progress and a result artifact."""

    kind: ClassVar[str] = "checkpoint-toy"
    seed: int = Field(0, description="offset")
    steps: int = Field(8, ge=1, description="steps")
    every: int = Field(2, ge=1, description="checkpoint interval (steps)")
    pause: float = Field(0.0, ge=0, description="seconds of sleep per step")

    def execute(self, run) -> None:
        total, first = torch.zeros((), dtype=torch.float64), 1
        saved = run.resume()
        if saved is not None:
            total, first = saved.model_state["total"].clone(), saved.step + 1
        for t in range(first, self.steps + 1):
            if str(self.seed) == os.environ.get("TOY_INTERRUPT_SEED"):
                raise KeyboardInterrupt
            time.sleep(self.pause)
            total += t
            run.log(t, {"y": float(t + self.seed), "sum": float(total)})
            run.progress("toy", t, self.steps)
            if t % self.every == 0 and t < self.steps:
                run.checkpoint(t, model_state={"total": total}, optimizer_state={})
            if str(t) == os.environ.get("TOY_DIE_AT"):
                os._exit(3)  # as a kill -9 would: nothing recorded, the attempt stays open
        path = run.directory / "result.json"
        path.write_text(json.dumps({"sum": float(total)}))
        run.artifact(path, "result")
