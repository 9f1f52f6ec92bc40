"""The LoRA tools on a 7B-shaped adapter pair: whole commands, time and peak memory.

Writes two Llama-2-7B-shaped PEFT adapters (``adapter_model.safetensors`` + ``adapter_config.json``
as PEFT's ``save_pretrained`` writes them): 32 layers × 7 modules (q, k, v, o 4096 × 4096; gate,
up 11008 × 4096; down 4096 × 11008), r = 16, α = 32, random factors with non-zero B, in
bfloat16 and float32 (``--quick``: 2 layers, bfloat16 only, no peer). Then runs, each as its
own process as a user would (``python -m gaugelab …``, one torch thread), and reads its wall
time and peak resident memory (the process's own ``VmHWM`` at exit), for the bfloat16 pair also
at 2 and 8 layers (peak memory must not grow with the number of layers: the commands work
module by module):

- ``lora inspect A --no-evidence`` (every rank policy and truncation row in factor space);
  every command with ``--no-report`` (the HTML report and its figures are timed apart);
- ``lora compare A B`` (row and column principal angles of every module, Haar baselines);
- ``lora compose A B --method cat`` and ``--method svd --rank 16`` (the ledger, the interference
  of the pair, the written adapter).

The peers, in the same process as the benchmark. For inspect and compare, the dense path a user
would write per module: form ``s·B A`` in float32 and take ``torch.linalg.svdvals`` (inspect);
form both updates and call ``scipy.linalg.subspace_angles`` on their column spaces and their
transposes (compare). It is timed on one module of each of the three distinct shapes (4096 ×
4096, 11008 × 4096, 4096 × 11008) and multiplied by the number of modules of that shape (printed
as extrapolated): the dense path on every module would take hours on 2 cores (scipy's
``subspace_angles`` orthonormalises each dense update by a full SVD). For compose, PEFT's
``add_weighted_adapter`` (``cat``, ``linear``, ``svd`` at ``svd_rank=16`` with
``svd_full_matrices=False``: faster than PEFT's default full SVD, so the ratio is a lower bound)
on a 2-layer Llama built from its config (hidden 4096, intermediate 11008, random weights,
nothing downloaded) holding the first 2 layers of the same adapter pair, timed once and scaled
per layer to 32 layers (printed as extrapolated). PEFT keeps its LoRA factors in float32
whatever the file's dtype, so its time serves both dtypes. PEFT's ``linear`` is not the sum of
the updates (it adds the factors: ``(Σ√λ_j B_j)(Σ√λ_j A_j)``, cross terms included); it is timed
beside ``cat`` for its speed only. The ratio is peer / ours, ours being the whole command
(start-up, reading, writing included).

Targets (issue 28): inspect ≤ 15 s and ≤ 1.5 GB, ≥ 100× the dense path; compare ≤ 15 s,
≥ 500× scipy on dense; compose cat ≤ 10 s, svd ≤ 20 s and ≥ 20× PEFT's ``svd``, ≤ 2 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import peft
import safetensors.torch
import scipy.linalg
import torch
import transformers

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
PEFT_LAYERS, LAYERS = 2, 32
SWEEP = (2, 8)
"""Layer counts of the bfloat16 pair run besides the full one, for peak memory against layers."""


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
    """The dense path's seconds (``kind``: ``inspect`` or ``compare``) on one module of each
    distinct shape, times the number of modules of that shape in ``layers`` layers."""
    s, total = ALPHA / RANK, 0.0
    counts: dict[tuple[int, int], int] = {}
    for shape in SHAPES.values():
        counts[shape] = counts.get(shape, 0) + layers
    for (d_out, d_in), count in counts.items():
        (B1, A1), (B2, A2) = _factors(d_out, d_in, 0), _factors(d_out, d_in, 1)
        start = time.perf_counter()
        if kind == "inspect":
            torch.linalg.svdvals(s * (B1 @ A1))
        else:
            X, Y = (s * (B1 @ A1)).numpy(), (s * (B2 @ A2)).numpy()
            scipy.linalg.subspace_angles(X, Y), scipy.linalg.subspace_angles(X.T, Y.T)
        total += (time.perf_counter() - start) * count
    return total


def peft_seconds(root: Path, layers: int) -> dict[str, float]:
    """Seconds of PEFT's ``add_weighted_adapter`` per combination (``cat``, ``linear``,
    ``svd`` at rank 16) on a :data:`PEFT_LAYERS`-layer Llama holding two adapters written as
    the benchmark's (float32), scaled per layer to ``layers`` layers."""
    config = transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=PEFT_LAYERS,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=64,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    a = write_adapter(root / "peft-a", PEFT_LAYERS, torch.float32, 0)
    b = write_adapter(root / "peft-b", PEFT_LAYERS, torch.float32, 1)
    model = peft.PeftModel.from_pretrained(model, str(a), adapter_name="a")
    model.load_adapter(str(b), adapter_name="b")
    seconds = {}
    for combination in ("cat", "linear", "svd"):
        rank = {"svd_rank": RANK, "svd_full_matrices": False} if combination == "svd" else {}
        start = time.perf_counter()
        model.add_weighted_adapter(["a", "b"], [1.0, 1.0], combination, combination, **rank)
        seconds[combination] = (time.perf_counter() - start) * layers / PEFT_LAYERS
        model.delete_adapter(combination)
    return seconds


def run(*, quick: bool, progress) -> list[list]:
    layers = 2 if quick else LAYERS
    runs = [(torch.bfloat16, layers)]
    if not quick:
        runs = [(torch.bfloat16, n) for n in SWEEP] + runs + [(torch.float32, layers)]
    task = progress.add_task("lora-scale", total=len(runs) * 4 + 3)
    rows, peer = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not quick:  # the peers take minutes
            peer = {f"peft {c}": t for c, t in peft_seconds(root, layers).items()}
            progress.advance(task)
            peer.update({k: dense_seconds(k, layers) for k in ("inspect", "compare")})
        progress.advance(task, 3 if quick else 2)
        for dtype, n in runs:
            name = str(dtype).split(".")[-1]
            a = write_adapter(root / f"a-{name}-{n}", n, dtype, 0)
            b = write_adapter(root / f"b-{name}-{n}", n, dtype, 1)
            store = ["--store", str(root / "store.sqlite")]
            full = n == layers  # the peers are for the full pair
            cases = [
                ("inspect", ["lora", "inspect", str(a), "--no-evidence", "--no-report", *store],
                 "dense ΔW + svdvals", "≤ 15 s, ≤ 1.5 GB, ≥ 100×"),
                ("compare", ["lora", "compare", str(a), str(b), "--no-report", *store],
                 "dense ΔW + scipy subspace_angles", "≤ 15 s, ≥ 500×"),
                ("peft cat", ["lora", "compose", str(a), str(b), "--out",
                              str(root / f"cat-{name}-{n}"), "--no-report", *store],
                 "PEFT add_weighted_adapter cat", "≤ 10 s, ≤ 2 GB"),
                ("peft svd", ["lora", "compose", str(a), str(b), "--method", "svd", "--rank",
                              "16", "--out", str(root / f"svd-{name}-{n}"), "--no-report",
                              *store],
                 "PEFT add_weighted_adapter svd (svd_rank 16)", "≤ 20 s, ≤ 2 GB, ≥ 20×"),
            ]  # fmt: skip
            for kind, args, peer_name, target in cases:
                seconds, rss = run_command(args, root)
                label = " ".join(a for a in args[:2]) + (" --method svd" if "svd" in args else "")
                rows.append(_row(label, name, n, seconds, rss, peer_name,
                                 peer.get(kind) if full else None, target))  # fmt: skip
                if kind == "peft cat" and full and "peft linear" in peer:
                    rows.append(_row(label, name, n, seconds, rss,
                                     "PEFT add_weighted_adapter linear (Σ of factors, not of "
                                     "updates)", peer["peft linear"], "≤ 10 s"))  # fmt: skip
                progress.advance(task)
    return rows


def _row(label: str, dtype: str, layers: int, seconds: float, rss: float, peer_name: str,
         peer: float | None, target: str) -> list:  # fmt: skip
    if peer is None:
        peer_name, cells = "—", ["—", "—"]
    else:
        cells = [f"{_short(peer)} (extrapolated)", f"{_short(peer / seconds)}×"]
    return [label, dtype, layers, f"{seconds:.1f}", f"{rss:.0f}", peer_name, *cells, target]


def _short(x: float) -> str:
    """``x`` with its integer digits and at least two significant ones (0.083, 1.4, 865)."""
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"
