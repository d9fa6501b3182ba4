"""Models that leave nxrs, and come in: PyTorch modules, safetensors files, ONNX graphs.

These are the ``Trainer`` methods ``to_torch``, ``save_safetensors``, ``to_onnx`` and the
class methods ``from_weights``, ``from_torch``, ``from_safetensors``: one module per format
(``nxrs._interop.torch``, ``.safetensors``, ``.onnx``, below the Trainer: those that build a
trainer take its class), which ``nxrs.Trainer`` and this module call. torch, onnx and
safetensors are optional: each is imported when a method needs it, and its absence is an
ImportError naming the extra that installs it (``pip install 'nxrs[torch]'``,
``'nxrs[onnx]'``, ``'nxrs[safetensors]'``).

An integer-list nxrs model is ``Linear`` layers (with bias) with ReLU between them: layer
``l``'s weight ``Wl`` is ``outputs x inputs``, row-major, as ``torch.nn.Linear.weight`` is, and
its bias ``bl`` has ``outputs`` values; a cross-entropy model's outputs go through a softmax. A
layer model (``nxrs.layers``, docs/TRAINING.md section 15) maps layer for layer to PyTorch's
modules of the same names (``Dense`` is ``Linear``) and to ONNX operators, its tensors named as
in its state (section 15.4: ``W{n} b{n} gamma{n} beta{n} mean{n} var{n}``). Exporting copies
the binary32 weights bit for bit. What the other runtimes then compute is theirs: they fuse,
reorder and vectorise the sums, so their outputs may differ from nxrs's in the last bits (and
an argmax of two nearly tied outputs may flip); ``Trainer.predict`` is the exact one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy.typing as npt

from nxrs._interop import safetensors as _safetensors
from nxrs._interop import torch as _torch
from nxrs._interop import weights as _weights
from nxrs._interop.onnx import ONNX_LAYERS_OPSET, ONNX_OPSET, to_onnx
from nxrs._interop.safetensors import save_safetensors
from nxrs._interop.torch import to_torch
from nxrs._interop.weights import weights
from nxrs._trainer import Trainer

__all__ = [
    "ONNX_LAYERS_OPSET",
    "ONNX_OPSET",
    "from_safetensors",
    "from_torch",
    "from_weights",
    "save_safetensors",
    "to_onnx",
    "to_torch",
    "weights",
]


def from_weights(weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], **config: Any) -> Trainer:
    """A trainer at the start of a run whose parameters are ``weights``.

    ``weights`` is ``[(W1, b1), (W2, b2), ...]``: ``Wl`` of shape (outputs, inputs) as
    ``torch.nn.Linear.weight``, ``bl`` of shape (outputs,); the layer sizes come from the
    shapes. Values follow the input rules of ``Trainer.fit`` (float32 as is, float64 rounded to
    nearest, finite). ``config`` is ``Trainer(layers=...)``'s keywords except ``layers``; the
    optimiser starts fresh (zero moments, step 0), and ``seed`` still orders the shuffles.
    InputError for weights that do not make a model, ConfigError for the configuration.
    """
    return _weights.from_weights(Trainer, weights, **config)


def from_torch(module: Any, *, input_shape: Any = None, **config: Any) -> Trainer:
    """A trainer at the start of a run with a torch module's weights (``from_weights``).

    Without ``input_shape``, ``module`` is a ``torch.nn.Linear`` or a ``torch.nn.Sequential``
    of ``Linear`` layers with bias, a ``ReLU`` between each two, and optionally a final
    ``Softmax`` over the last dimension (then the loss must be cross-entropy, the default):
    what ``to_torch`` makes of an integer-list model, which it gives again.

    With ``input_shape`` (the shape of one sample: an int, or a tuple such as ``(channels,
    length)``; a convolution's cannot be inferred), ``module`` becomes a layer model
    (``nxrs.layers``, ``Input(*input_shape)`` then one layer per module, optionally ending in
    ``Softmax(dim=-1)``) with its weights and BatchNorm running statistics: what ``to_torch``
    makes of one. The modules it takes are those ``to_torch`` writes, as PyTorch's defaults
    make them or with the settings nxrs has: ``Linear`` (with or without bias: ``Dense(units,
    bias=False)``), ``Conv1d`` and ``Conv2d`` with bias, zero padding (numbers or ``"valid"``),
    no dilation, no groups; ``MaxPool1d/2d`` and ``AvgPool1d/2d`` without padding,
    ``ceil_mode``, dilation or ``divisor_override``; ``Flatten()`` (of each sample:
    ``start_dim=1``, ``end_dim=-1``); ``ReLU``, ``Tanh``, ``Sigmoid``, ``GELU()`` (the exact
    form, ``approximate="none"``), ``Dropout``; ``BatchNorm1d/2d`` with ``affine``,
    ``track_running_stats`` and a ``momentum``; ``LayerNorm`` with its weight (and a bias, or
    ``bias=False``), over the whole input of the layer (over each token's width in a
    sequence); and the ``Residual`` modules ``to_torch`` writes (``x + branch(x)``), their
    branches' modules by the same rules. A residual block cannot be recognised from what a
    module computes: one of any other class is refused. A sequence model (section 15.8,
    ``input_shape=(T,)``) starts with an ``nn.Embedding`` (without ``padding_idx``,
    ``max_norm`` or ``scale_grad_by_freq``) and takes the ``PositionalEmbedding``,
    ``CausalSelfAttention`` (no biases) and ``TiedHead`` modules ``to_torch`` writes
    (``nxrs._interop.torch_sequence``), a ``TiedHead`` only when its weight is the
    ``nn.Embedding``'s very parameter; its layers have no ``std`` or ``proj_std`` (they only
    set the initial draws, and the weights are the module's).

    Any other module (another activation such as ``SiLU``, a setting above) is a ConfigError
    naming its position, the module and why (a module that would need ``input_shape`` when
    it is missing names that); a ``LayerNorm`` over part of its input (its last dimensions)
    is one too. Weights other than float32 or float64, on the meta device (no values), or of
    shapes that do not fit, and a negative BatchNorm running variance, are an InputError.
    ``config`` is ``Trainer``'s keywords but ``layers``.
    """
    return _torch.from_torch(Trainer, module, input_shape=input_shape, **config)


def from_safetensors(path: str | os.PathLike[str], **config: Any) -> Trainer:
    """A trainer starting from the weights in a safetensors file (``from_weights``).

    The file holds ``W1 b1 ... WL bL`` as ``save_safetensors`` names and shapes them (F32; F64
    is rounded to nearest); optimiser slots (``mW1``, ...) may be there and are not used: the
    optimiser starts fresh (see ``save_safetensors`` for what only a checkpoint keeps). A file
    whose metadata ``layers`` is a list of layer objects (a layer model's, from
    ``save_safetensors``) gives that layer model with the file's parameters and, when the file
    has them, its BatchNorm running statistics (all of them; else a fresh run's). Any other
    tensor name, or a missing tensor, is an InputError; a file safetensors cannot read is a
    CheckpointError; a missing file a FileNotFoundError.
    """
    return _safetensors.from_safetensors(Trainer, path, **config)
