"""The atlas against checking one optimizer at a time: seconds per check.

Both sides check the same torch.optim optimizers under the orthogonal gauge on the sensing
problem (10 steps, 3 draws, float64). The atlas runs them through ``run_atlas`` into a fresh run
store each time (registration, claims, one stored result per check): in this process
(``max_workers=1``), and on a pool of two worker processes (their start included). The peer is
what a user without the atlas would do: ``gaugelab check torch.optim:<Name>`` once per
optimizer, one process after another (the same interpreter, ``python -m gaugelab``), each
paying the interpreter's and torch's start. The cost that counts is per check: a call's seconds
over its checks. Both sides are timed interleaved, round by round, after a warm-up
(``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from gaugelab.cli.bench import Timing, ratio_cell, time_calls
from gaugelab.experiments.atlas import atlas_spec, run_atlas

TITLE = "atlas: seconds per check vs `gaugelab check` once per optimizer (sensing, orthogonal)"
COLUMNS = ["atlas", "checks", "atlas s/check", "peer s/check", "ratio (peer / atlas)"]
OPTIMIZERS = ("SGD", "Adam", "Adagrad", "RMSprop")
SETTING = {"groups": ["orthogonal"], "problems": ["sensing"], "steps": 10, "draws": 3}


def _atlas(spec, workers: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        outcome = run_atlas(spec, store=Path(folder) / "store.sqlite", max_workers=workers,
                            write_report=False)  # fmt: skip
        if len(outcome.sweep.completed) != len(spec.optimizers):
            raise AssertionError(f"bench atlas: {outcome.sweep.completed} checks ran")


def _peer(names: tuple[str, ...]) -> None:
    for name in names:
        command = [
            sys.executable, "-m", "gaugelab", "check", f"torch.optim:{name}",
            "--group", "orthogonal", "--problem", "sensing", "--steps", "10", "--draws", "3",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise AssertionError(f"bench atlas: {' '.join(command)}: {done.stderr.strip()}")


def run(*, quick: bool = False, progress=None) -> list[list]:
    names = OPTIMIZERS[:2] if quick else OPTIMIZERS
    repeat = 2 if quick else 3
    spec = atlas_spec(["torch.optim"], only=names, **SETTING)
    task = progress.add_task("atlas", total=repeat) if progress else None
    sides = {"one": lambda: _atlas(spec, 1), "two": lambda: _atlas(spec, 2),
             "peer": lambda: _peer(names)}  # fmt: skip
    t = time_calls(
        sides,
        number=1,
        repeat=repeat,
        progress=(lambda: progress.advance(task)) if progress else None,
    )
    per = {k: Timing(tuple(x / len(names) for x in v.samples)) for k, v in t.items()}
    return [
        [label, len(names), per[key].cell(1, 3), per["peer"].cell(1, 3),
         ratio_cell(per["peer"], per[key])]
        for label, key in (("in this process (1 worker)", "one"),
                           ("2 worker processes (their start included)", "two"))
    ]  # fmt: skip
