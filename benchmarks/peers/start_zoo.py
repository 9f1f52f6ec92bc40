"""The tiny zoo's plain-torch peer (benchmarks/bench_start.py): the reference's way, one run at
a time, dense gd / Adam updates on the same measurements.

Run as a script: ``steps``, the rules' grids (JSON), the seeds (JSON), ``1`` for the convex row.
"""

import json
import math
import sys
import time

import torch

torch.set_num_threads(1)
n, r, steps = 40, 3, int(sys.argv[1])
m = 2 * r * (2 * n - r)
grids = json.loads(sys.argv[2])
seeds = json.loads(sys.argv[3])
convex = sys.argv[4] == "1"
compute, cpu, rows = 0.0, 0.0, []
for seed in seeds:
    g = torch.Generator().manual_seed(seed)
    us, vs = torch.randn(n, r, generator=g) / r**0.5, torch.randn(n, r, generator=g) / r**0.5
    target = us @ vs.T
    A = torch.randn(m, n * n, generator=g)
    y = A @ target.flatten()
    for rule, (adaptive, lrs) in grids.items():
        for lr in lrs:
            g2 = torch.Generator().manual_seed(seed + 7)
            U = 1e-3 * torch.randn(n, n, generator=g2)
            V = 1e-3 * torch.randn(n, n, generator=g2)
            mU, mV, vU, vV = (torch.zeros(n, n) for _ in range(4))
            start, start_cpu = time.perf_counter(), time.process_time()
            for s in range(1, steps + 1):
                res = A @ (U @ V.T).flatten() - y
                loss = float(res @ res) / m
                if not math.isfinite(loss) or loss > 1e8:
                    break
                if s % 200 == 0 and loss < 1e-7:
                    break
                G = (A.T @ res).view(n, n) * (2 / m)
                gU, gV = G @ V, G.T @ U
                if adaptive:
                    for p, gr, mo, ve in ((U, gU, mU, vU), (V, gV, mV, vV)):
                        mo.mul_(0.9).add_(gr, alpha=0.1)
                        ve.mul_(0.999).addcmul_(gr, gr, value=0.001)
                        p.sub_(lr * (mo / (1 - 0.9**s)) / ((ve / (1 - 0.999**s)).sqrt() + 1e-8))
                else:
                    U.sub_(lr * gU)
                    V.sub_(lr * gV)
            compute += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
            norm = torch.linalg.matrix_norm
            err = float(norm(U @ V.T - target) / norm(target))
            rows.append((rule, lr, seed, err))
    if convex:
        import cvxpy as cp
        start = time.perf_counter()
        X = cp.Variable((n, n))
        fit = A.double().numpy() @ cp.vec(X.T) == y.double().numpy()
        cp.Problem(cp.Minimize(cp.normNuc(X)), [fit]).solve(solver="SCS")
        compute += time.perf_counter() - start
for rule, lr, seed, err in rows:
    print(f"{rule:12s} {lr:8.0e} {seed:4d} {err:.3g}")
print(json.dumps({"compute": compute, "cpu": cpu}))
