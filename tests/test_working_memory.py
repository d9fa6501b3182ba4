"""Layer models cannot make nxrs allocate more than docs/TRAINING.md section 15.1's limits say:
every working buffer a pass needs (a convolution's im2col columns and padded input, average
pooling's window table, a thread's group of samples) is bounded when the model is built, and a
model over a limit is a ConfigError naming the layer, the buffer and its size, from the Python
API, a model file, or a checkpoint's configuration alike.

Kernels, paddings and strides at the limits are built (and then predict, or take a step) or
refused within a second each, in a process whose address space is capped: an allocation beyond
the limits fails the test (the process aborts) instead of the machine."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nxck_edit import edit_config
from test_layer_models import data, hashes

import nxrs
from nxrs.layers import Conv1d, Conv2d, Dense, Flatten, Input, ReLU

layers_ref = importlib.import_module("reference.layers_ref")

#: The address space of the sweep's process: about twice what its largest built case needs
#: (a 2^24-cell input and its padded copy, Python, numpy and nxrs), far below what any
#: working buffer beyond the limits asked for (the smallest, a group of samples' columns of
#: the last case before groups were bounded: 3 GiB).
ADDRESS_SPACE = 2 << 30

#: (name, layers between Input and Flatten as Python source, what happens): "built" cases then
#: predict one sample, "step" cases take one training step of two samples, "refused: WORDS"
#: cases are a ConfigError containing WORDS.
CASES = [
    # The columns of a kernel and padding of 1000 on an 8 x 8 image: 1007^2 x 1000^2 cells.
    ("huge kernel", "Input(1, 8, 8), Conv2d(1, 1000, padding=999)",
     "refused: layer 1 (Conv2d): its columns (positions x channels x kernel cells) would have "
     "1014049000000 cells per sample, more than 16777216"),
    # ... and with a stride as long: 2 x 2 positions of 10^6 cells.
    ("huge kernel, huge stride", "Input(1, 8, 8), Conv2d(1, 1000, padding=999, stride=1000)",
     "built"),
    # 64 x 64 positions of 64 x 64 cells: 2^24 columns exactly, then one more row of positions.
    ("columns at the limit", "Input(1, 127, 127), Conv2d(1, 64)", "built"),
    ("columns over the limit", "Input(1, 128, 128), Conv2d(1, 64)",
     "refused: would have 17305600 cells per sample"),
    ("columns over the limit, 1-D", "Input(3, 8), Conv1d(1, 2**40, padding=2**40 - 1, "
     "stride=2**41)", "refused: its columns"),
    # A padded input of 4096 x 4096 cells exactly (a stride as long: 4 positions), then 4098^2.
    ("padded input at the limit", "Input(1, 4094, 4094), Conv2d(1, 2, padding=1, stride=4094)",
     "built"),
    ("padded input over the limit",
     "Input(1, 4096, 4096), Conv2d(1, 2, padding=1, stride=4096)",
     "refused: its padded input (channels x padded height x padded width) would have 16793604"),
    ("padding beyond 2^64", "Input(1, 8), Conv1d(1, 2**64 - 1, padding=2**64 - 2)",
     "refused: padding 18446744073709551614 is too large"),
    ("average pooling at the limit", "Input(1, 127, 127), AvgPool2d(64, stride=1)", "built"),
    ("average pooling over the limit", "Input(1, 128, 128), AvgPool2d(64, stride=1)",
     "refused: layer 1 (AvgPool2d): its window table"),
    # Max pooling keeps no table: its windows are walked where they lie.
    ("max pooling of large windows", "Input(1, 128, 128), MaxPool2d(64, stride=1)", "built"),
    # Two positions of 3 x 2^21-cell columns: a thread gathered 64 samples' columns at a time
    # for the weight gradient (3 GiB), however few samples the block had.
    ("wide columns, few positions", "Input(2**21, 4), Conv1d(1, 3)", "step"),
]  # fmt: skip

SWEEP = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import nxrs
    from nxrs.layers import *

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    for name, layers, _ in CASES:
        start = time.perf_counter()
        try:
            t = nxrs.Trainer(layers=[*eval(layers), Flatten(), Dense(2)], threads=1,
                             batch_size=2)
        except nxrs.ConfigError as err:
            seconds, outcome = time.perf_counter() - start, f"refused: {err}"
        else:
            seconds, outcome = time.perf_counter() - start, "built"
            x = np.zeros((2, t.sizes[0]), np.float32)
            t.predict(x[:1])
            t.train_steps(x, np.array([0, 1]), 1)
        print(json.dumps([name, outcome, seconds]), flush=True)
    """
)


def test_kernels_paddings_and_strides_at_the_limits_are_built_or_refused_at_once() -> None:
    source = f"ADDRESS_SPACE = {ADDRESS_SPACE}\nCASES = {CASES!r}\n{SWEEP}"
    # One thread for numpy's BLAS and few malloc arenas: their reservations grow with the cores
    # (address space, not memory), which would make the cap depend on the machine.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env["MALLOC_ARENA_MAX"] = "2"
    run = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=600, env=env
    )
    seen = {
        name: (outcome, seconds)
        for name, outcome, seconds in map(json.loads, run.stdout.splitlines())
    }
    # Killed (an allocation over the address space aborts) is a failure, naming the case.
    assert run.returncode == 0, (f"killed after {len(seen)} cases", run.stderr[:500])
    for name, _, expected in CASES:
        outcome, seconds = seen[name]
        assert seconds < 1, (name, seconds)
        if expected.startswith("refused: "):
            assert outcome.startswith("refused: "), (name, outcome)
            assert expected.removeprefix("refused: ") in outcome, (name, outcome)
        else:
            assert outcome == "built", (name, outcome)


# --- a checkpoint's configuration goes through the same check


def test_a_checkpoint_whose_configuration_is_over_the_limits_is_refused(tmp_path: Path) -> None:
    small = [Input(1, 8, 8), Conv2d(1, 3, padding=1), Flatten(), Dense(2)]
    data = nxrs.Trainer(layers=small).to_bytes()

    def huge(config: dict[str, Any]) -> None:
        conv = config["layers"][1]
        conv["kernel_size"], conv["padding"] = [1000, 1000], [999, 999]
        # Room in the header for the longer sizes: the same stride, written shorter.
        assert conv["stride"] == [1, 1]
        del conv["stride"]

    forged = edit_config(data, huge)
    (tmp_path / "huge.nxck").write_bytes(forged)
    # The model is built (and refused) as the header is read, before any tensor is.
    message = (
        "the file's configuration is invalid: layer 1 (Conv2d): its columns (positions x "
        "channels x kernel cells) would have 1014049000000 cells per sample"
    )
    for load in (nxrs.Trainer.load, nxrs.open):
        with pytest.raises(nxrs.HeaderError, match=re.escape(message)):
            load(tmp_path / "huge.nxck")
    with pytest.raises(nxrs.HeaderError, match=re.escape(message)):
        nxrs.Trainer.from_bytes(forged)


# --- bounding a thread's group of samples changes no bit


def test_a_convolution_whose_samples_are_grouped_by_cells_matches_the_reference() -> None:
    """A convolution of two positions whose columns are 2^15 cells: 15 samples to a group (of
    at most 2^20 cells), not 64 (of at least 128 positions); the reference knows no groups."""
    layers = [Input(2**14, 3), ReLU(), Conv1d(2, 2), ReLU(), Flatten(), Dense(2)]
    settings: dict[str, Any] = {"batch_size": 20, "lr": 0.01, "seed": 3}
    x, _ = data(layers, 20)
    y = np.arange(20) % 2
    ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(layers), **settings)
    ref.train_steps(x.reshape(len(x), -1), y, 1)
    for backend in ("soft", "hw"):
        t = nxrs.Trainer(layers=layers, backend=backend, threads=2, **settings)
        assert hashes(t, x, y, 1) == [ref.state_hash_hex()], backend
