"""nanoGPT's character model on tiny Shakespeare, side by side: nxrs (exact, every machine's
bits) and PyTorch eager (a plain module, as nanoGPT writes it), the anchor's configuration:
4 layers, 4 heads, width 128, context 64, batch 12, AdamW lr 1e-3 betas (0.9, 0.99), weight
decay 0.1 on matrices and embeddings, warm-up 100 steps then cosine to 1e-4 at step 2000,
clipping at 1.0, no dropout.

Run from the repository root (the text from ``$NXRS_DATA``, ``../shared/data``, or downloaded
once by ``nxrs.data.load_tinyshakespeare``)::

    python bench/bench_gpt.py            # ms per step (median of 3 runs of 10), 1 and 2 threads
    python bench/bench_gpt.py --full     # also the anchor's 2000 steps: validation loss, seconds
    python bench/bench_gpt.py --generate # also tokens/s of generation

Each contender runs in a child process of its own (its peak RSS is its own), with its threads
set (``torch.set_num_threads``, nxrs's ``threads=``). Printed: ms per step, the ratio PyTorch /
nxrs (above 1: nxrs is faster), GFLOP/s per thread (the step's multiply-adds x 2 over its time,
the model's matrix products and attention; no-FMA peak for comparison: bench_train.py's (p));
with ``--full`` the validation loss over 200 windows of the validation text drawn by numpy's
``default_rng(1)`` (the same windows for both), the seconds, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONTEXT, BATCH, LAYERS, HEADS, WIDTH = 64, 12, 4, 4, 128
STEPS, WARMUP, LR, MIN_LR = 2000, 100, 1e-3, 1e-4


def text() -> Any:
    import nxrs

    home = os.environ.get("NXRS_DATA") or str(ROOT.parent / "shared" / "data")
    return nxrs.data.load_tinyshakespeare(home if Path(home).is_dir() else None)


def step_flops(vocab: int) -> float:
    """Multiply-adds x 2 of one training step (forward + backward = 3 forwards): the matrix
    products (Dense, attention projections, tied head) and attention's scores and sums."""
    tokens = BATCH * CONTEXT
    per_token = LAYERS * (3 * WIDTH * WIDTH + WIDTH * WIDTH + 2 * 4 * WIDTH * WIDTH)
    per_token += vocab * WIDTH
    attention = LAYERS * BATCH * CONTEXT * CONTEXT * WIDTH  # q.k and p.v, half masked
    return 2.0 * 3.0 * (tokens * per_token + attention)


def lr_at(step: int) -> float:
    """nanoGPT's get_lr."""
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    if step > STEPS:
        return MIN_LR
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def val_windows(val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.random.default_rng(1).integers(0, len(val) - CONTEXT, 200)
    x = np.stack([val[s : s + CONTEXT] for s in starts])
    return x, np.stack([val[s + 1 : s + CONTEXT + 1] for s in starts])


def run_nxrs(threads: int, steps: int, full: bool, generate: bool) -> dict[str, Any]:
    import nxrs

    data = text()
    settings: dict[str, Any] = {
        "optimizer": "adamw", "lr": LR, "beta2": 0.99, "weight_decay": 0.1, "clip_norm": 1.0,
        "batch_size": BATCH, "seed": 1337,
    }  # fmt: skip
    names = {s["name"] for s in nxrs.config_schema()}
    if {"min_lr", "decay_params"} <= names:
        settings |= {
            "schedule": "cosine", "warmup_steps": WARMUP, "total_steps": STEPS,
            "min_lr": MIN_LR, "decay_params": "matrices",
        }  # fmt: skip
    t = nxrs.Trainer(
        layers=nxrs.layers.gpt(len(data.vocab)), backend="hw", threads=threads, **settings
    )
    out: dict[str, Any] = {"contender": "nxrs", "threads": threads, "isa": nxrs.hardware_isa()}
    stream = data.train
    t.fit(stream, steps=1)  # warm-up: the first step allocates
    times = []
    for _ in range(3):
        start = time.perf_counter()
        t.fit(stream, steps=t.steps + steps)
        times.append((time.perf_counter() - start) / steps)
    out["ms_per_step"] = 1000 * sorted(times)[1]
    if full:
        t = nxrs.Trainer(
            layers=nxrs.layers.gpt(len(data.vocab)), backend="hw", threads=threads, **settings
        )
        start = time.perf_counter()
        t.fit(stream, steps=STEPS)
        out["seconds"] = time.perf_counter() - start
        x, y = val_windows(data.val)
        out["val_loss"], _ = t.evaluate(x, y)
        out["state_digest"] = t.state_digest()
    if generate:
        start = time.perf_counter()
        t.generate(data.encode("ROMEO:"), 100, temperature=0.8, top_k=10, seed=1)
        out["tokens_per_s"] = 100 / (time.perf_counter() - start)
    return out


def run_torch(threads: int, steps: int, full: bool, generate: bool) -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    data = text()
    vocab = len(data.vocab)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(WIDTH, bias=False)
            self.c_attn = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
            self.attn_proj = nn.Linear(WIDTH, WIDTH, bias=False)
            self.ln_2 = nn.LayerNorm(WIDTH, bias=False)
            self.c_fc = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
            self.mlp_proj = nn.Linear(4 * WIDTH, WIDTH, bias=False)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(WIDTH, dim=2)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, WIDTH)
            self.wpe = nn.Embedding(CONTEXT, WIDTH)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(WIDTH, bias=False)
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx: Any) -> Any:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99))
    train = torch.from_numpy(np.array(data.train, np.int64))
    rng = torch.Generator().manual_seed(1337)

    def step(i: int) -> None:
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        starts = torch.randint(len(train) - CONTEXT, (BATCH,), generator=rng)
        x = torch.stack([train[s : s + CONTEXT] for s in starts])
        y = torch.stack([train[s + 1 : s + CONTEXT + 1] for s in starts])
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    out: dict[str, Any] = {"contender": "torch", "threads": threads}
    step(0)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        times.append((time.perf_counter() - start) / steps)
    out["ms_per_step"] = 1000 * sorted(times)[1]
    if full:
        torch.manual_seed(1337)
        model.__init__()  # type: ignore[misc]
        opt = torch.optim.AdamW(
            [
                {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0},
            ],
            lr=LR,
            betas=(0.9, 0.99),
        )
        start = time.perf_counter()
        for i in range(STEPS):
            step(i)
        out["seconds"] = time.perf_counter() - start
        x, y = (torch.from_numpy(a) for a in val_windows(np.asarray(data.val, np.int64)))
        with torch.no_grad():
            out["val_loss"] = float(F.cross_entropy(model(x).view(-1, vocab), y.view(-1)))
    if generate:
        idx = torch.tensor([data.encode("ROMEO:")])
        start = time.perf_counter()
        with torch.no_grad():
            for _ in range(100):
                logits = model(idx[:, -CONTEXT:])[:, -1, :] / 0.8
                v, _ = torch.topk(logits, 10)
                logits[logits < v[:, [-1]]] = -float("inf")
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1)
                idx = torch.cat((idx, nxt), dim=1)
        out["tokens_per_s"] = 100 / (time.perf_counter() - start)
    return out


def child(contender: str, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", contender, "--threads", str(threads)]
    command += ["--steps", str(args.steps)] + ["--full"] * args.full
    command += ["--generate"] * args.generate
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if run.returncode != 0:
        return {"contender": contender, "threads": threads, "error": run.stderr[-400:]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--generate", action="store_true")
    parser.add_argument("--child", choices=["nxrs", "torch"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.child:
        run = run_nxrs if args.child == "nxrs" else run_torch
        out = run(args.threads, args.steps, args.full, args.generate)
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return
    vocab = len(text().vocab)
    flops = step_flops(vocab)
    print(f"nanoGPT char model, vocab {vocab}: {flops / 1e9:.2f} GFLOP per training step")
    for threads in (1, 2):
        rows = {c: child(c, threads, args) for c in ("nxrs", "torch")}
        for c, r in rows.items():
            if "error" in r:
                print(f"  {threads} thread(s) {c}: failed: {r['error']}")
                continue
            per_thread = flops / (r["ms_per_step"] / 1000) / 1e9 / threads
            extra = "".join(
                f"  {k} {r[k]:.4g}" for k in ("val_loss", "seconds", "tokens_per_s") if k in r
            )
            if "state_digest" in r:
                extra += f"  digest {r['state_digest'][:8]}"
            print(
                f"  {threads} thread(s) {c:5s} {r['ms_per_step']:8.1f} ms/step  "
                f"{per_thread:6.1f} GFLOP/s/thread  peak RSS {r['peak_rss_mb']:.0f} MB{extra}"
            )
        if all("ms_per_step" in r for r in rows.values()):
            ratio = rows["torch"]["ms_per_step"] / rows["nxrs"]["ms_per_step"]
            print(f"  {threads} thread(s) PyTorch / nxrs step time: {ratio:.2f}x")
        if all("tokens_per_s" in r for r in rows.values()):
            ratio = rows["nxrs"]["tokens_per_s"] / rows["torch"]["tokens_per_s"]
            print(f"  {threads} thread(s) nxrs / PyTorch generation tokens/s: {ratio:.2f}x")


if __name__ == "__main__":
    main()
