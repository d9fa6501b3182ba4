"""Layer objects: a model as a list of layers (TRAINING.md section 15), PyTorch's names and
meanings, channels first.

>>> from nxrs.layers import Input, Conv1d, ReLU, Flatten, Dense
>>> model = [Input(1, 40), Conv1d(25, 5, stride=2, padding=1), ReLU(), Flatten(), Dense(10)]
>>> model[1]
Conv1d(25, 5, stride=2, padding=1)
>>> model[1].to_dict()
{'type': 'Conv1d', 'out_channels': 25, 'kernel_size': [5], 'stride': [2], 'padding': [1]}
>>> from_dicts(to_dicts(model)) == model
True

A layer is immutable, compares and hashes by value, and its ``repr`` is the call that builds
it. ``to_dict`` gives its JSON form (section 15.1: the type and every parameter written out,
sizes as lists), which ``--model FILE.json``, ``load_model`` and a checkpoint's configuration
use; ``from_dict`` is the inverse.

These classes only convert types: an argument of the wrong type (a string, a bool, a float
where a size belongs) is a ``nxrs.ConfigError`` naming the layer and the argument, and a size is
anything ``operator.index`` accepts (numpy's integers too), as for every count nxrs takes. The
values themselves (a kernel of at least 1, ``p`` in ``[0, 1)``, a padding smaller than its
kernel, the shapes fitting together) are checked in one place, the Rust core, when a trainer is
built from the list. Floats are kept as given; the core rounds them to binary32.

``preset(name)`` gives the models ``nxrs train --model NAME`` knows (``PRESETS``).
"""

from __future__ import annotations

from nxrs.layers._blocks import Residual
from nxrs.layers._json import from_dict, from_dicts, load_model, to_dicts
from nxrs.layers._objects import (
    GELU,
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    MaxPool1d,
    MaxPool2d,
    ReLU,
    Sigmoid,
    Tanh,
)
from nxrs.layers._objects import (
    Size as Size,
)
from nxrs.layers._presets import PRESETS, preset
from nxrs.layers._presets import RECIPES as RECIPES
from nxrs.layers._sequence import (
    CausalSelfAttention,
    Embedding,
    PositionalEmbedding,
    TiedHead,
    gpt,
)

__all__ = [
    "GELU",
    "PRESETS",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "CausalSelfAttention",
    "Conv1d",
    "Conv2d",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Input",
    "Layer",
    "LayerNorm",
    "MaxPool1d",
    "MaxPool2d",
    "PositionalEmbedding",
    "ReLU",
    "Residual",
    "Sigmoid",
    "Tanh",
    "TiedHead",
    "from_dict",
    "from_dicts",
    "gpt",
    "load_model",
    "preset",
    "to_dicts",
]
