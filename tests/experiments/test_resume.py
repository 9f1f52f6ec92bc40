"""Kill-and-resume: a run killed with SIGKILL after a checkpoint and started again with the same
command resumes from that checkpoint and ends with exactly the metrics of an uninterrupted run
(twins, one zoo rule and a LoRA fine-tune, at reduced size). The killed run is a process of its
own group; the resumed and the uninterrupted runs are children of the fork server."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.support.forkserver import CLIENT

from gaugelab.study.store.db import RunStore

TWINS = """
from gaugelab.experiments.twins.run import TwinSpec, run_twins_study
base = TwinSpec(steps=20, checkpoints=tuple(range(0, 21, 5)))
out = run_twins_study(["adam"], base=base, store={store!r}, write_report=False)
print("RESUMED", *out.sweep.resumed.values())
print("FAILED", len(out.result.failures))
"""

ZOO = """
from gaugelab.experiments.sensing.zoo import ZooSpec, run_zoo
spec = ZooSpec(rules=("adam",), seeds=(42,), steps=3000, check_every=20, convex=False,
               interpolation_loss=1e-30)
out = run_zoo(spec, store={store!r}, write_report=False)
print("RESUMED", *out.sweep.resumed.values())
print("FAILED", len(out.result.failures))
"""


LORA = """
from gaugelab.experiments.lora.run import quick_spec, run_lora_finetune
spec = quick_spec(ranks=(2,), seeds=(0,), full=False, steps=120, eval_every=10,
                  checkpoint_every=10, pretrain={{"checkpoint_every": 1000}})
out = run_lora_finetune(spec, store={store!r}, write_report=False)
print("RESUMED", *out.sweep.resumed.values())
print("FAILED", len(out.result.failures))
"""


def _command(script: str, store: Path) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script.format(store=str(store)))]


def _run_forked(script: str, store: Path, server: dict) -> subprocess.CompletedProcess:
    """The script run to its end in its own process (a child of the fork server)."""
    path = store.parent / "script.py"
    path.write_text(textwrap.dedent(script.format(store=str(store))))
    return subprocess.run(
        [*CLIENT, "script", str(path)], capture_output=True, text=True, check=True,
        env={**os.environ, **server},
    )  # fmt: skip


def _kill_after_first_checkpoint(script: str, store: Path, timeout: float = 300) -> int:
    """Start the script in its own process group, SIGKILL the group as soon as a checkpoint
    exists; returns the checkpoint step that was on disk."""
    proc = subprocess.Popen(
        _command(script, store),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            found = sorted(store.parent.glob("*.artifacts/*/checkpoints/**/step-*.json"))
            if found:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return int(found[0].stem.removeprefix("step-"))
            if proc.poll() is not None:
                pytest.fail("the run ended before its first checkpoint: make it longer")
            time.sleep(0.005)
        pytest.fail("no checkpoint within the timeout")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _trajectory(store: Path) -> dict:
    """Every run's metrics (all runs completed), by run identity."""
    with RunStore(store, create=False) as db:
        runs = db.runs()
        assert runs and all(db.completed(r.identity) for r in runs)
        return {
            r.identity: {(m.name, m.step): m.value for m in db.metrics(r.identity)} for r in runs
        }


@pytest.mark.slow
@pytest.mark.parametrize("script", [TWINS, ZOO, LORA], ids=["twins", "zoo-rule", "lora-finetune"])
def test_a_killed_run_resumes_bit_identically(script, tmp_path, forkserver):
    killed, clean = tmp_path / "killed" / "store.sqlite", tmp_path / "clean" / "store.sqlite"
    killed.parent.mkdir()
    clean.parent.mkdir()
    step = _kill_after_first_checkpoint(script, killed)
    with RunStore(killed, create=False) as db:
        # killed mid-run: the checkpointed run's attempt is still open (LoRA: the pretrain,
        # which writes no checkpoint here, completed before it)
        assert not all(db.completed(r.identity) for r in db.runs())
    again = _run_forked(script, killed, forkserver)
    (resumed_from,) = [int(x) for x in again.stdout.split("RESUMED")[1].split()[:1]]
    assert resumed_from >= step  # the latest checkpoint at the time of the kill
    assert "FAILED 0" in again.stdout
    _run_forked(script, clean, forkserver)
    resumed, uninterrupted = _trajectory(killed), _trajectory(clean)
    assert resumed.keys() == uninterrupted.keys()
    assert resumed == uninterrupted  # bit for bit, every metric at every step
