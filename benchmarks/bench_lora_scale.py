"""The LoRA tools on a 7B-shaped adapter pair: whole commands, time and peak memory.

Writes two Llama-2-7B-shaped PEFT adapters (``adapter_model.safetensors`` + ``adapter_config.json``
as PEFT's ``save_pretrained`` writes them): 32 layers × 7 modules (q, k, v, o 4096 × 4096; gate,
up 11008 × 4096; down 4096 × 11008), r = 16, α = 32, random factors with non-zero B, in
bfloat16 and float32 (``--quick``: 2 layers, bfloat16 only, no peer). Then runs, each as its
own process as a user would (``python -m gaugelab …``, one torch thread), and reads its wall
time and peak resident memory (the process's own ``VmHWM`` at exit):

- ``lora inspect A --no-evidence`` (every rank policy and truncation row in factor space);
  every command with ``--no-report`` (the HTML report and its figures are timed apart);
- ``lora compare A B`` (row and column principal angles of every module, Haar baselines);
- ``lora compose A B --method cat`` and ``--method svd --rank 16`` (the ledger, the interference
  of the pair, the written adapter).

The peer is the dense path a user would write, per module, in the same process as the benchmark:
form ``s·B A`` in float32 and take ``torch.linalg.svdvals`` (inspect); form both updates and call
``scipy.linalg.subspace_angles`` on their column spaces and their transposes (compare); form the
sum and take its truncated SVD (compose ``svd``). It is timed on one module of each of the three
distinct shapes (4096 × 4096, 11008 × 4096, 4096 × 11008) and multiplied by the number of
modules of that shape (printed as extrapolated): the dense path on every module would take
hours on 2 cores, and even the three timed modules take about ten minutes (scipy's
``subspace_angles`` orthonormalises each dense update by a full SVD). The ratio is peer / ours,
ours being the whole command (start-up, reading, writing included).

Targets (issue 28): inspect ≤ 15 s and ≤ 1.5 GB, ≥ 100× the dense path; compare ≤ 15 s,
≥ 500× scipy on dense; compose cat ≤ 10 s, svd ≤ 20 s, ≤ 2 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import safetensors.torch
import scipy.linalg
import torch

TITLE = "LoRA tools on a 7B-shaped adapter pair (224 modules, r = 16): whole commands"
COLUMNS = ["command", "dtype", "layers", "ours s", "peak RSS MiB", "peer", "peer s",
           "ratio (peer / ours)", "target"]  # fmt: skip

SHAPES = {  # module → (d_out, d_in), Llama-2-7B
    "self_attn.q_proj": (4096, 4096), "self_attn.k_proj": (4096, 4096),
    "self_attn.v_proj": (4096, 4096), "self_attn.o_proj": (4096, 4096),
    "mlp.gate_proj": (11008, 4096), "mlp.up_proj": (11008, 4096),
    "mlp.down_proj": (4096, 11008),
}  # fmt: skip
RANK, ALPHA = 16, 32


def write_adapter(folder: Path, layers: int, dtype: torch.dtype, seed: int) -> Path:
    """A PEFT-format LoRA adapter of ``layers`` Llama-2-7B-shaped layers in ``folder``."""
    folder.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers):
        for name, (d_out, d_in) in SHAPES.items():
            key = f"base_model.model.model.layers.{layer}.{name}"
            tensors[f"{key}.lora_A.weight"] = (torch.randn(RANK, d_in, generator=gen)
                                               / d_in**0.5).to(dtype)  # fmt: skip
            tensors[f"{key}.lora_B.weight"] = (torch.randn(d_out, RANK, generator=gen)
                                               * 0.01).to(dtype)  # fmt: skip
    safetensors.torch.save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA,
              "target_modules": [n.rsplit(".", 1)[1] for n in SHAPES], "lora_dropout": 0.0,
              "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
              "base_model_name_or_path": "meta-llama/Llama-2-7b-hf"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return folder


_PEAK = """
import atexit, runpy, sys
target = sys.argv[1]
def peak():
    with open("/proc/self/status") as status, open(target, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM")))
atexit.register(peak)
sys.argv = ["gaugelab", *sys.argv[2:]]
runpy.run_module("gaugelab", run_name="__main__")
"""


def run_command(args: list[str], cwd: Path) -> tuple[float, float]:
    """``(wall seconds, peak RSS MiB)`` of ``python -m gaugelab *args`` (one torch thread).

    The peak is the process's own ``VmHWM`` read as it exits: ``ru_maxrss`` of a child would
    include the benchmark process's own size at the fork.

    Raises:
        RuntimeError: the command failed (its output is in the message).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    peak_file = cwd / "peak.txt"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(peak_file), *args], cwd=cwd,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"gaugelab {' '.join(args)} failed:\n{proc.stdout.decode()[-2000:]}")
    kib = int(peak_file.read_text().split()[1])  # "VmHWM:  123456 kB"
    return seconds, kib / 1024


def _factors(d_out: int, d_in: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(d_out, RANK, generator=gen) * 0.01, torch.randn(RANK, d_in, generator=gen)


def dense_seconds(kind: str, layers: int) -> float:
    """The dense path's seconds on one module of each distinct shape, times the number of
    modules of that shape in ``layers`` layers."""
    s, total = ALPHA / RANK, 0.0
    counts: dict[tuple[int, int], int] = {}
    for shape in SHAPES.values():
        counts[shape] = counts.get(shape, 0) + layers
    for (d_out, d_in), count in counts.items():
        (B1, A1), (B2, A2) = _factors(d_out, d_in, 0), _factors(d_out, d_in, 1)
        start = time.perf_counter()
        if kind == "inspect":
            torch.linalg.svdvals(s * (B1 @ A1))
        elif kind == "compare":
            X, Y = (s * (B1 @ A1)).numpy(), (s * (B2 @ A2)).numpy()
            scipy.linalg.subspace_angles(X, Y), scipy.linalg.subspace_angles(X.T, Y.T)
        else:  # compose svd: the sum, then its rank-16 truncation
            U, S, Vh = torch.linalg.svd(s * (B1 @ A1) + s * (B2 @ A2), full_matrices=False)
            np.asarray((U[:, :RANK] * S[:RANK]) @ Vh[:RANK])
        total += (time.perf_counter() - start) * count
    return total


def run(*, quick: bool, progress) -> list[list]:
    layers = 2 if quick else 32
    dtypes = [torch.bfloat16] if quick else [torch.bfloat16, torch.float32]
    task = progress.add_task("lora-scale", total=len(dtypes) * 4 + 3)
    rows = []
    kinds = () if quick else ("inspect", "compare", "compose")  # the peer takes ~10 min
    peer = {k: dense_seconds(k, layers) for k in kinds}
    progress.advance(task, 3)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for dtype in dtypes:
            name = str(dtype).split(".")[-1]
            a = write_adapter(root / f"a-{name}", layers, dtype, 0)
            b = write_adapter(root / f"b-{name}", layers, dtype, 1)
            store = ["--store", str(root / "store.sqlite")]
            cases = [
                ("inspect", ["lora", "inspect", str(a), "--no-evidence", "--no-report", *store],
                 "dense ΔW + svdvals", "≤ 15 s, ≤ 1.5 GB, ≥ 100×"),
                ("compare", ["lora", "compare", str(a), str(b), "--no-report", *store],
                 "dense ΔW + scipy subspace_angles", "≤ 15 s, ≥ 500×"),
                ("compose", ["lora", "compose", str(a), str(b), "--out", str(root / f"cat-{name}"),
                             "--no-report", *store], "—", "≤ 10 s, ≤ 2 GB"),
                ("compose", ["lora", "compose", str(a), str(b), "--method", "svd", "--rank",
                             "16", "--out", str(root / f"svd-{name}"), "--no-report", *store],
                 "dense sum + truncated SVD", "≤ 20 s, ≤ 2 GB"),
            ]  # fmt: skip
            for kind, args, peer_name, target in cases:
                seconds, rss = run_command(args, root)
                label = " ".join(a for a in args[:2]) + (" --method svd" if "svd" in args else "")
                dense = peer.get(kind) if peer_name != "—" else None
                ratio = "—" if dense is None else f"{dense / seconds:.0f}×"
                rows.append([label, name, layers, f"{seconds:.1f}", f"{rss:.0f}", peer_name,
                             "—" if dense is None else f"{dense:.0f} (extrapolated)", ratio,
                             target])  # fmt: skip
                progress.advance(task)
    return rows
