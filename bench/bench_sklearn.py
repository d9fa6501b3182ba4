"""nxrs.sklearn.ExactMLPClassifier next to scikit-learn's MLPClassifier: fit time and test
accuracy side by side, in one process.

Run from the repository root::

    python bench/bench_sklearn.py              # best of 3 fits per row
    python bench/bench_sklearn.py --repeat 1   # one fit per row

The workload is the same for every row: scikit-learn's ``load_digits()`` (pixels / 16, as
float32), ``nxrs train``'s deterministic split (TRAINING.md section 12: 1437 training and 360
test samples), a 64-128-10 ReLU network, Adam (lr 0.001, betas 0.9/0.999, eps 1e-8), batch size
32, 20 epochs, reshuffled every epoch, random_state 0. MLPClassifier runs with ``alpha=0``
(nxrs has no L2 penalty) and with its convergence stopping switched off (``tol=0``,
``n_iter_no_change`` above ``max_iter``, no early stopping), so both run all 20 epochs.

Rows: ExactMLPClassifier on the "hw" backend (hardware binary32, verified to give softf32's
bits) and on "soft" (softf32, integer operations), and MLPClassifier (numpy/BLAS float64). The
two nxrs rows must end on the same full-state hash (exit status 1 otherwise). BLAS and OpenMP
are held to one thread (set before numpy is imported), so every row uses one core.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from _machine import print_machine  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402

import nxrs  # noqa: E402
from nxrs.data import load_digits, split  # noqa: E402
from nxrs.sklearn import ExactMLPClassifier  # noqa: E402

EPOCHS = 20
SHARED: dict[str, Any] = {
    "hidden_layer_sizes": (128,),
    "solver": "adam",
    "batch_size": 32,
    "learning_rate_init": 0.001,
    "beta_1": 0.9,
    "beta_2": 0.999,
    "epsilon": 1e-8,
    "max_iter": EPOCHS,
    "shuffle": True,
    "random_state": 0,
}


def contenders() -> dict[str, Callable[[], Any]]:
    return {
        "ExactMLPClassifier hw": lambda: ExactMLPClassifier(**SHARED, backend="hw"),
        "ExactMLPClassifier soft": lambda: ExactMLPClassifier(**SHARED, backend="soft"),
        "MLPClassifier": lambda: MLPClassifier(
            **SHARED, alpha=0.0, tol=0.0, n_iter_no_change=EPOCHS + 1, early_stopping=False
        ),
    }


def best_fit(make: Callable[[], Any], x: Any, y: Any, repeat: int) -> tuple[float, Any]:
    """The shortest of ``repeat`` fits (time.perf_counter) and the last fitted model."""
    best, model = float("inf"), None
    for _ in range(repeat):
        model = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            start = time.perf_counter()
            model.fit(x, y)
            best = min(best, time.perf_counter() - start)
    return best, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fits per row (the best counts)")
    args = parser.parse_args(argv)

    x, y = load_digits()
    train, test = split(len(x), 0.2, 0)
    rows = []
    hashes = {}
    for name, make in contenders().items():
        seconds, model = best_fit(make, x[train], y[train], args.repeat)
        accuracy = float(np.mean(model.predict(x[test]) == y[test]))
        rows.append((name, seconds, accuracy))
        if hasattr(model, "trainer_"):
            hashes[name] = model.trainer_.state_hash()

    print_machine()
    print(f"  numpy    : {np.__version__}, scikit-learn {sklearn.__version__}")
    print(f"  nxrs     : {nxrs.__version__}")
    print(
        f"workload: digits 64-128-10, Adam lr 0.001, batch 32, {EPOCHS} epochs, "
        f"{len(train)} train / {len(test)} test samples; best of {args.repeat} fits, one thread"
    )
    reference = next(s for name, s, _ in rows if name == "MLPClassifier")
    print(f"{'contender':<26}{'fit s':>9}{'test acc':>10}{'time / MLPClassifier':>22}")
    for name, seconds, accuracy in rows:
        print(f"{name:<26}{seconds:>9.3f}{accuracy:>10.4f}{seconds / reference:>21.2f}x")
    distinct = set(hashes.values())
    print("nxrs state hashes: " + ", ".join(f"{k} {v:016x}" for k, v in hashes.items()))
    if len(distinct) != 1:
        print("the nxrs backends disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
