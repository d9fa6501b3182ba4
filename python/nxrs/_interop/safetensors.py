"""safetensors: the weights (and optimiser slots) as a safetensors file and back."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from nxrs._nxrs import CheckpointError, ConfigError, InputError, __version__
from nxrs._util.files import write_bytes_atomically
from nxrs.layers import Layer

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

from nxrs._interop.weights import (
    _PARAMETER_NAMES,
    _layer_list,
    _require,
    _start,
    from_weights,
)


def save_safetensors(
    trainer: Trainer, path: str | os.PathLike[str], *, moments: bool = False
) -> None:
    """Writes the weights to ``path`` in the safetensors format, crash-safely (a temporary
    file, fsynced and renamed over ``path``).

    Tensors, all float32 (``F32``), named as in a checkpoint (``docs/TRAINING.md`` section 11):
    ``W<l>`` of shape (outputs, inputs) and ``b<l>`` of shape (outputs,) for ``l = 1..L``; with
    ``moments``, also the optimiser's slots shaped like them: Adam and AdamW ``mW<l> vW<l>
    mb<l> vb<l>`` (first and second moments), SGD ``mW<l> mb<l>`` (momentum buffers). A layer
    model's are its state's (section 15.4, numbered depth first through ``Residual`` blocks,
    section 15.7; a layer without biases has no ``b{n}`` or ``beta{n}``): ``W{n} b{n} gamma{n}
    beta{n}``, a sequence model's ``E{n} P{n} Wqkv{n} Wo{n}`` (section 15.8; ``docs/interop.md``
    maps ``gpt``'s to nanoGPT's names) and BatchNorm's running statistics ``mean{n} var{n}``,
    with ``moments`` the slots
    ``m<p> v<p>`` of each
    parameter ``p``. The header's metadata holds ``format`` ("nxrs"), ``layers`` (JSON: the
    layer sizes, or a layer model's list of layer objects, section 15.1), ``loss`` and
    ``nxrs_version``.

    This is an exchange format, not a checkpoint: an NXCK checkpoint (``Trainer.save``) also
    keeps the configuration, Adam's bias-correction powers ``b1t`` and ``b2t``, the counters
    (epoch, batch, step) and, from ``fit``, the data's fingerprint; without them a run cannot
    continue bit for bit.
    """
    st = _require("safetensors.numpy", "safetensors", "Trainer.save_safetensors")
    tensors = trainer.state_dict()
    if not moments:
        tensors = {name: t for name, t in tensors.items() if _WEIGHT.fullmatch(name)}
    layers = _layer_list(trainer)
    metadata = {
        "format": "nxrs",
        "layers": json.dumps(trainer.sizes if layers is None else layers),
        "loss": trainer.config["loss"],
        "nxrs_version": __version__,
    }
    write_bytes_atomically(Path(path), st.save(tensors, metadata=metadata))


#: A parameter's name, ``W<l>`` or ``b<l>``, and an optimiser slot's (``m``/``v`` before it).
_PARAMETER = re.compile(r"([Wb])([1-9][0-9]*)")
_SLOT = re.compile(r"[mv][Wb][1-9][0-9]*")
#: The names of the tensors a model computes with (sections 15.4 and 15.8): parameters and
#: running statistics, not optimiser slots (``m``/``v`` and a parameter's name, which none of
#: these spellings starts a name of).
_WEIGHT = re.compile(rf"(?:{'|'.join(_PARAMETER_NAMES)}|mean|var)[1-9][0-9]*")
_STATISTIC = re.compile(r"(?:mean|var)[1-9][0-9]*")


def from_safetensors(
    trainer_class: type[Trainer], path: str | os.PathLike[str], **config: Any
) -> Trainer:
    """``nxrs.interop.from_safetensors``, building a trainer of ``trainer_class``."""
    st = _require("safetensors.numpy", "safetensors", "Trainer.from_safetensors")
    safetensors = _require("safetensors", "safetensors", "Trainer.from_safetensors")
    error = safetensors.SafetensorError
    try:
        tensors: dict[str, npt.NDArray[Any]] = st.load_file(os.fspath(path))
        with safetensors.safe_open(os.fspath(path), framework="np") as file:
            metadata: dict[str, str] = file.metadata() or {}
    except (error, ValueError, TypeError) as err:
        raise CheckpointError(
            f"{os.fspath(path)!r} is not a readable safetensors file: {err}"
        ) from err
    model = _file_layers(metadata)
    if model is not None:
        return _from_named(trainer_class, tensors, model, config)
    found: dict[tuple[str, int], npt.NDArray[Any]] = {}
    for name, tensor in tensors.items():
        parameter = _PARAMETER.fullmatch(name)
        if parameter:
            found[parameter[1], int(parameter[2])] = tensor
        elif not _SLOT.fullmatch(name):
            raise InputError(f"tensor {name!r} is not an nxrs parameter (W<l>, b<l>) or slot")
    layers = len(found) // 2
    expected = {(kind, layer) for layer in range(1, layers + 1) for kind in "Wb"}
    if not found or set(found) != expected:
        given = " ".join(f"{kind}{layer}" for kind, layer in sorted(found, key=lambda k: k[::-1]))
        raise InputError(
            f"the file's parameters ({given or 'none'}) are not W1 b1 ... WL bL for some L"
        )
    pairs = [(found["W", layer], found["b", layer]) for layer in range(1, layers + 1)]
    return from_weights(trainer_class, pairs, **config)


def _file_layers(metadata: dict[str, str]) -> list[Layer] | None:
    """A layer model's layers from a safetensors file's metadata ``layers`` (a JSON list of
    layer objects); None when it is not one (an integer-list model's sizes, or none)."""
    from nxrs import layers

    try:
        doc = json.loads(metadata.get("layers", "null"))
    except ValueError:
        return None
    if not (isinstance(doc, list) and doc and isinstance(doc[0], dict)):
        return None
    try:
        return layers.from_dicts(doc)
    except ConfigError as err:
        raise InputError(f"the file's layers are not a model: {err}") from None


def _from_named(
    trainer_class: type[Trainer],
    tensors: dict[str, npt.NDArray[Any]],
    layers: list[Layer],
    config: dict[str, Any],
) -> Trainer:
    """A trainer of the layer model ``layers`` at the start of a run with the tensors named as
    in its state (``from_safetensors``): every parameter, optimiser slots unused, the running
    statistics all or none."""
    if "layers" in config or "sizes" in config:
        raise TypeError("from_safetensors takes the layers from the file's metadata")
    trainer = trainer_class(layers, **config)
    names = list(trainer.state_dict())
    for name in tensors:
        if name not in names:
            raise InputError(f"tensor {name!r} is not one of the model's ({' '.join(names)})")
    parameters = [
        name for name in names if _WEIGHT.fullmatch(name) and not _STATISTIC.fullmatch(name)
    ]
    statistics = [name for name in names if _STATISTIC.fullmatch(name)]
    given = statistics if any(name in tensors for name in statistics) else []
    missing = [name for name in parameters + given if name not in tensors]
    if missing:
        raise InputError(f"the file lacks the model's tensors {' '.join(missing)}")
    _start(
        trainer, [tensors[name] for name in parameters], [tensors[name] for name in given] or None
    )
    return trainer
