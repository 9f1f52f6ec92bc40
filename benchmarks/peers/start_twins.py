"""The twins' plain-torch peer (benchmarks/bench_start.py): the same 2-block Transformer with
base, gauge, identity and noise twins as plain ``nn.Module`` code. Run as a script:
``optimizers`` ``steps``."""

import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
optimizers, steps = sys.argv[1].split(","), int(sys.argv[2])
P, D, H, DH = 47, 64, 4, 16
pairs = torch.tensor([(a, b) for a in range(P) for b in range(P)])
perm = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(42))
x = torch.cat([pairs, torch.full((len(pairs), 1), P)], 1)
labels = (pairs[:, 0] + pairs[:, 1]) % P
train, val = perm[: int(0.4 * len(pairs))], perm[int(0.4 * len(pairs)):]

class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(D))
    def forward(self, h):
        return h / h.norm(dim=-1, keepdim=True) * D**0.5 * self.g

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = Norm(), Norm()
        self.q, self.k, self.v, self.o = (nn.Linear(D, H * DH, bias=False) for _ in range(4))
        self.fc_in, self.fc_out = nn.Linear(D, 256, bias=False), nn.Linear(256, D, bias=False)
    def forward(self, h):
        a = self.n1(h)
        B, T = a.shape[:2]
        q, k, v = (f(a).view(B, T, H, DH).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) / DH**0.5, -1) @ v
        h = h + self.o(att.transpose(1, 2).reshape(B, T, H * DH))
        return h + self.fc_out(F.silu(self.fc_in(self.n2(h))))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(P + 1, D), nn.Parameter(torch.randn(3, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.norm, self.head = Norm(), nn.Linear(D, P, bias=False)
    def forward(self, tokens):
        h = self.emb(tokens) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h))[:, -1]

def ns5(G):
    X = G / (G.norm() + 1e-7)
    for _ in range(5):
        A = X @ X.T
        X = 3.4445 * X + (-4.7750 * A + 2.0315 * A @ A) @ X
    return X

def make(name, model):
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and "blocks" in n]
    other = [p for n, p in model.named_parameters() if not (p.ndim == 2 and "blocks" in n)]
    if name == "adam":
        return [torch.optim.Adam(model.parameters(), lr=1e-3)], []
    if name == "heavy-ball":
        return [torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)], []
    if name == "scalar-adam":  # Adam with one second moment per tensor
        return [], [("scalar", p, {}) for p in model.parameters()]
    return [torch.optim.Adam(other, lr=1e-3)], [("muon", p, {}) for p in hidden]

def manual_step(items, s):
    for kind, p, st in items:
        g = p.grad
        if kind == "muon":
            st["m"] = 0.95 * st.get("m", torch.zeros_like(g)) + g
            p.data.sub_(0.02 * ns5(st["m"]))
        else:
            st["m"] = 0.9 * st.get("m", torch.zeros_like(g)) + 0.1 * g
            st["v"] = 0.999 * st.get("v", torch.zeros(())) + 0.001 * (g * g).mean()
            v_hat = (st["v"] / (1 - 0.999**s)).sqrt()
            p.data.sub_(3e-3 * (st["m"] / (1 - 0.9**s)) / (v_hat + 1e-8))

for name in optimizers:
    torch.manual_seed(42)
    base = Model()
    twins = [copy.deepcopy(base) for _ in range(3)]
    with torch.no_grad():
        g = torch.Generator().manual_seed(777)
        for blk in twins[0].blocks:  # gauge twin: each head's W_Q, W_K rotated by one Q
            for h in range(H):
                Q = torch.linalg.qr(torch.randn(DH, DH, generator=g)).Q
                rows = slice(h * DH, (h + 1) * DH)
                blk.q.weight[rows] = Q.T @ blk.q.weight[rows]
                blk.k.weight[rows] = Q.T @ blk.k.weight[rows]
        g = torch.Generator().manual_seed(888)
        for blk in twins[2].blocks:  # noise twin
            blk.q.weight.add_(1e-7 * torch.randn(blk.q.weight.shape, generator=g))
    models = [base, *twins]
    opts = [make(name, m) for m in models]
    for s in range(1, steps + 1):
        for m, (torch_opts, manual) in zip(models, opts, strict=True):
            loss = F.cross_entropy(m(x[train]), labels[train])
            for o in torch_opts:
                o.zero_grad()
            m.zero_grad()
            loss.backward()
            for o in torch_opts:
                o.step()
            manual_step(manual, s)
        if s in (1, 10, 50, 100, 300, 600, 1000, 1500) or s == steps:
            with torch.no_grad():
                ref = base(x[val])
                dist = [float((t(x[val]) - ref).norm() / ref.norm()) for t in twins]
            print(name, s, " ".join(f"{d:.2e}" for d in dist))
