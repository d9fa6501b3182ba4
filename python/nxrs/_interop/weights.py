"""What every format shares: the parameters as ``(W, b)`` pairs (``weights``, ``from_weights``),
the layers and their tensors' names, and importing an optional package (``_require``)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, InputError

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

Weights = list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]


def _require(module: str, extra: str, needed_by: str) -> Any:
    """``module``, imported now; an ImportError naming the extra when it is not installed."""
    try:
        imported: ModuleType = importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{needed_by} needs {module.split('.')[0]}, which is not installed: "
            f"pip install 'nxrs[{extra}]'"
        ) from err
    return imported


def weights(trainer: Trainer) -> Weights:
    """Copies of the trainer's parameters, ``[(W1, b1), (W2, b2), ...]``, float32."""
    state = trainer.state_dict()
    return [(state[f"W{layer}"], state[f"b{layer}"]) for layer in range(1, len(trainer.sizes))]


def _softmax(trainer: Trainer, softmax: bool | None) -> bool:
    """Whether the export ends in a softmax: by default for cross-entropy models (their
    ``predict_proba``); never for mse models, whose outputs are the values."""
    classifier: bool = trainer.config["loss"] == "cross_entropy"
    if softmax is None:
        return classifier
    if softmax and not classifier:
        raise ConfigError("softmax=True needs a cross-entropy model; this one's loss is mse")
    return softmax


def _layer_list(trainer: Trainer) -> list[dict[str, Any]] | None:
    """A layer model's layers in their JSON form (section 15.1); None for an integer list."""
    layers: list[Any] = trainer.config["layers"]
    return layers if layers and isinstance(layers[0], dict) else None


#: The layers with tensors and their parameters' names (sections 15.4 and 15.8), as ``W{n}
#: b{n}``; in torch the pairs are ``weight`` and ``bias``. Dense and LayerNorm may lack the second
#: (section 15.7). A TiedHead has none: it reads its Embedding's ``E``.
_TENSORS = {
    "Dense": ("W", "b"),
    "Conv1d": ("W", "b"),
    "Conv2d": ("W", "b"),
    "BatchNorm1d": ("gamma", "beta"),
    "BatchNorm2d": ("gamma", "beta"),
    "LayerNorm": ("gamma", "beta"),
    "Embedding": ("E",),
    "PositionalEmbedding": ("P",),
    "CausalSelfAttention": ("Wqkv", "Wo"),
}
#: Every parameter's name without its number.
_PARAMETER_NAMES = sorted({name for names in _TENSORS.values() for name in names})


@dataclass(frozen=True)
class _Numbered:
    """A layer of a layer model (its JSON form) where it stands: its position (section 15.7,
    depth first, ``Input`` at 0), its tensor number ``n`` (section 15.4; for a layer without
    tensors, the number of the last one before it) and, for a Residual, its branch's layers
    numbered the same way."""

    layer: dict[str, Any]
    position: int
    n: int
    branch: list[_Numbered]

    def tensors(self) -> list[str]:
        """The names of the layer's parameters in the state: ``W{n} b{n}``, ``gamma{n}
        beta{n}``, the first alone without biases, ``E{n}``, ``P{n}``, ``Wqkv{n} Wo{n}``, none
        for a layer without tensors."""
        names = _TENSORS.get(self.layer["type"], ())
        return [f"{name}{self.n}" for name in names[: 1 + self.layer.get("bias", True)]]


def _numbered(layers: list[dict[str, Any]]) -> list[_Numbered]:
    """A layer model's layers after ``Input``, numbered depth first (section 15.7): a Residual
    takes the next position (it has no tensors), then its branch's layers take theirs, then
    the layers after it."""
    position = n = 0

    def walk(layers: list[dict[str, Any]]) -> list[_Numbered]:
        nonlocal position, n
        numbered = []
        for layer in layers:
            position += 1
            n += layer["type"] in _TENSORS
            here = position, n  # before the branch's layers take theirs
            branch = walk(layer["layers"]) if layer["type"] == "Residual" else []
            numbered.append(_Numbered(layer, *here, branch))
        return numbered

    return walk(layers[1:])


def _start(
    trainer: Trainer,
    parameters: Sequence[npt.ArrayLike],
    buffers: Sequence[npt.ArrayLike] | None = None,
) -> None:
    """Restarts ``trainer`` from its parameters (the state's, in order: ``W1 b1 gamma2 ...``)
    and, when given, its running statistics: a new run's state with them."""
    trainer._start_from(list(parameters), buffers)


def from_weights(
    trainer_class: type[Trainer],
    weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
    **config: Any,
) -> Trainer:
    """``nxrs.interop.from_weights``, building a trainer of ``trainer_class``."""
    if "layers" in config or "sizes" in config:
        raise TypeError("from_weights takes the layer sizes from the weights' shapes")
    pairs = list(weights)
    if not pairs:
        raise InputError("weights is empty: a model has at least one (W, b) layer")
    shapes = []
    for layer, pair in enumerate(pairs, 1):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InputError(f"weights[{layer - 1}] is not a pair (W{layer}, b{layer})")
        shape = np.shape(pair[0])
        if len(shape) != 2:
            raise InputError(
                f"W{layer} must have 2 dimensions (outputs, inputs), got shape {shape}"
            )
        shapes.append(shape)
    layers = [shapes[0][1], *(outputs for outputs, _ in shapes)]
    trainer = trainer_class(layers, **config)
    trainer._start_from([array for pair in pairs for array in pair])
    return trainer
