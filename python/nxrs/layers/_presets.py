"""The named models ``nxrs train --model NAME`` knows, and how each is meant to be trained."""

from __future__ import annotations

from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown
from nxrs.layers._objects import (
    Conv1d,
    Conv2d,
    Dense,
    Flatten,
    Input,
    Layer,
    MaxPool2d,
    ReLU,
)
from nxrs.layers._sequence import gpt

#: The character vocabulary of tiny Shakespeare, ``gpt-char``'s data: 65 characters.
SHAKESPEARE_VOCAB = 65

_PRESETS: dict[str, tuple[Layer, ...]] = {
    # The MNIST-1D paper's ConvBase (Greydanus & Kobak): lengths 40 -> 19 -> 10 -> 5, then
    # 25 * 5 = 125 features -> 10 classes.
    "mnist1d-cnn": (
        Input(1, 40),
        Conv1d(25, 5, stride=2, padding=1),
        ReLU(),
        Conv1d(25, 3, stride=2, padding=1),
        ReLU(),
        Conv1d(25, 3, stride=2, padding=1),
        ReLU(),
        Flatten(),
        Dense(10),
    ),
    # scikit-learn's 8x8 digits: 8x8 -> 4x4 -> 2x2, 32 * 2 * 2 = 128 features -> 10 classes.
    # PyTorch (float32, Adam lr 1e-2, batch 32, 20 epochs) trained it to 0.983-0.992 test
    # accuracy on the deterministic split (section 12, seed 0) over five seeds.
    "digits-cnn": (
        Input(1, 8, 8),
        Conv2d(16, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Conv2d(32, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Flatten(),
        Dense(10),
    ),
    # nanoGPT's character model in its CPU configuration (4 layers, 4 heads, width 128,
    # context 64) for tiny Shakespeare's vocabulary; nxrs train builds it for its text's.
    "gpt-char": tuple(gpt(SHAKESPEARE_VOCAB)),
}

#: The names ``preset`` knows (``nxrs train --model NAME``).
PRESETS: tuple[str, ...] = tuple(_PRESETS)

#: How each preset is meant to be trained: its data set and the settings ``nxrs train --model
#: NAME`` takes unless given (the MNIST-1D paper's Adam lr 1e-2, batch 100, 6,000 steps; the
#: digits net's settings found with PyTorch, above; nanoGPT's CPU recipe for the character
#: model: AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the weights and tables, a
#: cosine schedule, clipping at 1.0, batch 12, 2,000 steps, the losses estimated every 250
#: steps on 20 batches).
RECIPES: dict[str, dict[str, Any]] = {
    "mnist1d-cnn": {"data": "mnist1d", "batch_size": 100, "lr": 0.01, "epochs": 150},
    "digits-cnn": {"data": "digits", "batch_size": 32, "lr": 0.01, "epochs": 20},
    "gpt-char": {
        "data": "shakespeare",
        "batch_size": 12,
        "lr": 0.001,
        "optimizer": "adamw",
        "steps": 2000,
        "eval_every": 250,
        "eval_batches": 20,
        "beta2": 0.99,
        "weight_decay": 0.1,
        "decay_params": "matrices",
        "clip_norm": 1.0,
        # nanoGPT's get_lr: 100 warm-up steps, then cosine to min_lr at step 2000 (its warm-up
        # rate is lr * (t+1)/101, nxrs's lr * (t+1)/100: TRAINING.md section 6).
        "schedule": "cosine",
        "warmup_steps": 100,
        "total_steps": 2000,
        "min_lr": 1e-4,
    },
}


def preset(name: str) -> list[Layer]:
    """A named model (``PRESETS``): ``"mnist1d-cnn"``, the MNIST-1D paper's ConvBase (three
    ``Conv1d`` of 25 channels, kernels 5, 3, 3, stride 2, padding 1, then ``Dense(10)``),
    ``"digits-cnn"``, a small ``Conv2d`` net for the 8x8 digits, and ``"gpt-char"``,
    ``nxrs.layers.gpt(65)`` (nanoGPT's character model for tiny Shakespeare's 65 characters).

    >>> preset("mnist1d-cnn")[:2]
    [Input(1, 40), Conv1d(25, 5, stride=2, padding=1)]
    """
    layers = _PRESETS.get(name) if isinstance(name, str) else None
    if layers is None:
        raise ConfigError(f"unknown model preset {_shown(name)} (known: {', '.join(PRESETS)})")
    return list(layers)
