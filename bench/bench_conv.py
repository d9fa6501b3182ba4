"""Convolutional networks, side by side in one process: nxrs vs PyTorch (the goal: at or
above PyTorch's speed).

Run from the repository root (needs the ``mnist1d`` and ``torch`` packages)::

    python bench/bench_conv.py           # the MNIST-1D run (6,000 steps) and the Conv2d row
    python bench/bench_conv.py --quick   # 600 MNIST-1D steps, fewer Conv2d steps

Rows:

* MNIST-1D with the ``mnist1d-cnn`` preset (the paper's ConvBase: three Conv1d of 25 channels,
  ReLU, Dense 125 -> 10), Adam lr 1e-2, batch 100, 6,000 steps (150 epochs of the 4,000
  training signals, shuffled), as the paper trains it: nxrs on the hw backend, 1 and 2 threads
  (which must end in the same full-state hash), and PyTorch eager float32 (``nn.Sequential`` of
  the same modules, ``torch.optim.Adam``, the same batches) on 1 and 2 threads. Test accuracy
  on the paper's 1,000 test signals. PyTorch's results are NOT bit-identical to nxrs's (another
  operation order): its accuracy is printed beside.
* A larger Conv2d model where the kernels decide: 3x32x32 random inputs, Conv2d(32, 3,
  padding=1), ReLU, MaxPool2d(2), Conv2d(64, 3, padding=1), ReLU, MaxPool2d(2), Flatten,
  Dense(10), batch 128: seconds per step over a fixed number of steps.

Times are wall-clock seconds of the training loop alone (data generation and model building
excluded), best of the repeats; ratios are PyTorch's time over nxrs's (above 1: nxrs faster).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import nxrs
from nxrs.layers import Conv2d, Dense, Flatten, Input, MaxPool2d, ReLU


def best(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), result


def nxrs_mnist1d(x: np.ndarray, y: np.ndarray, steps: int, threads: int) -> nxrs.Trainer:
    t = nxrs.Trainer(
        layers=nxrs.layers.preset("mnist1d-cnn"),
        batch_size=100,
        lr=0.01,
        seed=0,
        backend="hw",
        threads=threads,
    )
    t.train_steps(x, y, steps)
    return t


def torch_model(layers: list[nxrs.layers.Layer]) -> Any:
    """The same model as PyTorch modules."""
    import torch

    modules: list[Any] = []
    shape = list(layers[0].shape)  # type: ignore[attr-defined]
    for layer in layers[1:]:
        if isinstance(layer, nxrs.layers.Conv1d):
            modules.append(
                torch.nn.Conv1d(
                    shape[0], layer.out_channels, layer.kernel_size, layer.stride, layer.padding
                )
            )
            n = (shape[1] + 2 * layer.padding[0] - layer.kernel_size[0]) // layer.stride[0] + 1
            shape = [layer.out_channels, n]
        elif isinstance(layer, nxrs.layers.Conv2d):
            modules.append(
                torch.nn.Conv2d(
                    shape[0], layer.out_channels, layer.kernel_size, layer.stride, layer.padding
                )
            )
            hw = [
                (shape[1 + d] + 2 * layer.padding[d] - layer.kernel_size[d]) // layer.stride[d] + 1
                for d in range(2)
            ]
            shape = [layer.out_channels, *hw]
        elif isinstance(layer, nxrs.layers.MaxPool2d):
            modules.append(torch.nn.MaxPool2d(layer.kernel_size, layer.stride))
            hw = [(shape[1 + d] - layer.kernel_size[d]) // layer.stride[d] + 1 for d in range(2)]
            shape = [shape[0], *hw]
        elif isinstance(layer, nxrs.layers.ReLU):
            modules.append(torch.nn.ReLU())
        elif isinstance(layer, nxrs.layers.Flatten):
            modules.append(torch.nn.Flatten())
            shape = [int(np.prod(shape))]
        elif isinstance(layer, nxrs.layers.Dense):
            modules.append(torch.nn.Linear(shape[0], layer.units))
            shape = [layer.units]
        else:
            raise ValueError(f"no torch module here for {layer!r}")
    return torch.nn.Sequential(*modules)


def torch_steps(
    layers: list[nxrs.layers.Layer],
    x: np.ndarray,
    y: np.ndarray,
    steps: int,
    batch: int,
    threads: int,
    lr: float,
) -> Any:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_model(layers)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    k = 0
    for _ in range(steps):
        if k + batch > len(order):
            order, k = rng.permutation(len(x)), 0
        idx = torch.from_numpy(order[k : k + batch])
        k += batch
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
        loss.backward()
        opt.step()
    return model


def torch_accuracy(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps = 600 if args.quick else 6000
    repeats = 1 if args.quick else 2
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]

    (xtr, ytr), (xte, yte) = nxrs.data.load_mnist1d()
    xtr, xte = xtr.reshape(-1, 1, 40), xte.reshape(-1, 1, 40)
    print(f"MNIST-1D, mnist1d-cnn, Adam lr 1e-2, batch 100, {steps} steps")
    rows: dict[str, float] = {}
    hashes = set()
    for threads in (1, 2):
        seconds, t = best(lambda k=threads: nxrs_mnist1d(xtr, ytr, steps, k), repeats)
        _, accuracy = t.evaluate(xte, yte)
        hashes.add(t.state_hash())
        rows[f"nxrs {threads}t"] = seconds
        print(f"  nxrs hw, {threads} thread(s): {seconds:7.2f} s   test accuracy {accuracy:.3f}")
    print(f"  nxrs 1 and 2 threads: {'BIT-IDENTICAL' if len(hashes) == 1 else 'DIFFERENT'}")
    if torch is not None:
        layers = nxrs.layers.preset("mnist1d-cnn")
        for threads in (1, 2):
            seconds, model = best(
                lambda k=threads: torch_steps(layers, xtr, ytr, steps, 100, k, 0.01), repeats
            )
            rows[f"torch {threads}t"] = seconds
            print(
                f"  PyTorch, {threads} thread(s): {seconds:7.2f} s   test accuracy "
                f"{torch_accuracy(model, xte, yte):.3f}   "
                f"ratio torch/nxrs {seconds / rows[f'nxrs {threads}t']:.2f}x"
            )

    conv_steps = 5 if args.quick else 20
    layers = [
        Input(3, 32, 32),
        Conv2d(32, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Conv2d(64, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Flatten(),
        Dense(10),
    ]
    rng = np.random.default_rng(21)
    x = rng.standard_normal((1024, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 1024)
    print(f"Conv2d 3x32x32 -> 32 -> 64 channels, batch 128, {conv_steps} steps")
    for threads in (1, 2):
        t = nxrs.Trainer(layers=layers, batch_size=128, backend="hw", threads=threads)
        seconds, _ = best(lambda t=t: t.train_steps(x, y, conv_steps), 1)
        rows[f"conv nxrs {threads}t"] = seconds / conv_steps
        print(f"  nxrs hw, {threads} thread(s): {1000 * seconds / conv_steps:8.1f} ms/step")
    if torch is not None:
        for threads in (1, 2):
            run = lambda k=threads: torch_steps(layers, x, y, conv_steps, 128, k, 0.001)  # noqa: E731
            seconds, _ = best(run, 1)
            per_step = seconds / conv_steps
            print(
                f"  PyTorch, {threads} thread(s): {1000 * per_step:8.1f} ms/step   ratio "
                f"torch/nxrs {per_step / rows[f'conv nxrs {threads}t']:.2f}x"
            )


if __name__ == "__main__":
    main()
