"""Models that leave nxrs, and come in: PyTorch modules, safetensors files, ONNX graphs.

These are the ``Trainer`` methods ``to_torch``, ``save_safetensors``, ``to_onnx`` and the
class methods ``from_weights``, ``from_torch``, ``from_safetensors`` (``nxrs.Trainer`` calls
these functions). torch, onnx and safetensors are optional: each is imported when a
method needs it, and its absence is an ImportError naming the extra that installs it
(``pip install 'nxrs[torch]'``, ``'nxrs[onnx]'``, ``'nxrs[safetensors]'``).

An nxrs model is ``Linear`` layers (with bias) with ReLU between them: layer ``l``'s weight
``Wl`` is ``outputs x inputs``, row-major, as ``torch.nn.Linear.weight`` is, and its bias ``bl``
has ``outputs`` values; a cross-entropy model's outputs go through a softmax. Exporting copies
the binary32 weights bit for bit. What the other runtimes then compute is theirs: they fuse,
reorder and vectorise the sums, so their outputs may differ from nxrs's in the last bits (and
an argmax of two nearly tied outputs may flip); ``Trainer.predict`` is the exact one.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import CheckpointError, ConfigError, InputError, __version__
from nxrs._rundir import write_bytes_atomically
from nxrs._trainer import Trainer

__all__ = [
    "ONNX_OPSET",
    "from_safetensors",
    "from_torch",
    "from_weights",
    "save_safetensors",
    "to_onnx",
    "to_torch",
    "weights",
]

#: The ONNX operator set ``to_onnx`` writes (MatMul, Add, Relu, Softmax over the last axis).
ONNX_OPSET = 13
#: The ONNX IR version of opset 13 (onnxruntime 1.7 and later read it).
_ONNX_IR_VERSION = 7

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


def from_weights(weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], **config: Any) -> Trainer:
    """A trainer at the start of a run whose parameters are ``weights``.

    ``weights`` is ``[(W1, b1), (W2, b2), ...]``: ``Wl`` of shape (outputs, inputs) as
    ``torch.nn.Linear.weight``, ``bl`` of shape (outputs,); the layer sizes come from the
    shapes. Values follow the input rules of ``Trainer.fit`` (float32 as is, float64 rounded to
    nearest, finite). ``config`` is ``Trainer(layers=...)``'s keywords except ``layers``; the
    optimiser starts fresh (zero moments, step 0), and ``seed`` still orders the shuffles.
    InputError for weights that do not make a model, ConfigError for the configuration.
    """
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
    trainer = Trainer(layers, **config)
    trainer._start_from(pairs)
    return trainer


def to_torch(trainer: Trainer, *, softmax: bool = False) -> Any:
    """The model as a ``torch.nn.Sequential`` of ``Linear`` and ``ReLU`` (float32, on the CPU),
    ending in ``Softmax(dim=-1)`` when ``softmax`` (cross-entropy models only).

    Without softmax it outputs logits, what ``torch.nn.CrossEntropyLoss`` trains on. The
    weights are copies; torch's random number generator is not used.
    """
    torch = _require("torch", "torch", "Trainer.to_torch")
    with_softmax = _softmax(trainer, softmax)
    modules: list[Any] = []
    for layer, (w, b) in enumerate(weights(trainer)):
        if layer:
            modules.append(torch.nn.ReLU())
        # skip_init: no random initialisation (which would draw from torch's global generator)
        # of values overwritten at once.
        linear = torch.nn.utils.skip_init(
            torch.nn.Linear, w.shape[1], w.shape[0], bias=True, dtype=torch.float32
        )
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w))
            linear.bias.copy_(torch.from_numpy(b))
        modules.append(linear)
    if with_softmax:
        modules.append(torch.nn.Softmax(dim=-1))
    return torch.nn.Sequential(*modules)


def _torch_array(torch: Any, tensor: Any, name: str) -> npt.NDArray[Any]:
    if tensor.dtype not in (torch.float32, torch.float64):
        raise InputError(f"{name} is {tensor.dtype}: nxrs takes float32 (or float64) weights")
    array: npt.NDArray[Any] = tensor.detach().cpu().numpy()
    return array


def from_torch(module: Any, **config: Any) -> Trainer:
    """A trainer starting from a torch module's weights (``from_weights``).

    ``module`` is a ``torch.nn.Linear`` or a ``torch.nn.Sequential`` of ``Linear`` layers with
    bias, a ``ReLU`` between each two, and optionally a final ``Softmax`` over the last
    dimension (then the loss must be cross-entropy, the default); what ``to_torch`` makes.
    Anything else (another layer or activation, a missing ReLU, a Linear without bias) is a
    ConfigError naming it; weights other than float32 or float64 are an InputError.
    """
    torch = _require("torch", "torch", "Trainer.from_torch")
    nn = torch.nn
    if isinstance(module, nn.Sequential):
        children = list(module)
    elif isinstance(module, nn.Module):
        children = [module]
    else:
        raise ConfigError(f"from_torch takes a torch.nn.Module, not {type(module).__name__}")
    if children and isinstance(children[-1], nn.Softmax):
        if children[-1].dim not in (-1, 1):
            raise ConfigError(
                f"module {len(children) - 1}: Softmax(dim={children[-1].dim}); nxrs's softmax "
                "is over the last dimension (dim=-1)"
            )
        if config.get("loss", "cross_entropy") != "cross_entropy":
            raise ConfigError("a module ending in Softmax is a cross-entropy model, not mse")
        children = children[:-1]
    pairs = []
    for k, child in enumerate(children):
        linear = k % 2 == 0
        expected = nn.Linear if linear else nn.ReLU
        if type(child) is not expected or (linear and child.bias is None):
            raise ConfigError(
                f"module {k} ({child!r}) cannot be represented: nxrs models are Linear layers "
                "with bias and a ReLU between each two, optionally ending in Softmax(dim=-1)"
            )
        if linear:
            w = _torch_array(torch, child.weight, f"module {k}'s weight")
            b = _torch_array(torch, child.bias, f"module {k}'s bias")
            pairs.append((w, b))
    if not children or isinstance(children[-1], nn.ReLU):
        raise ConfigError(
            "the module must end in a Linear layer (or Linear then Softmax): nxrs's outputs "
            "are the last layer's values or their softmax"
        )
    return from_weights(pairs, **config)


def save_safetensors(
    trainer: Trainer, path: str | os.PathLike[str], *, moments: bool = False
) -> None:
    """Writes the weights to ``path`` in the safetensors format, crash-safely (a temporary
    file, fsynced and renamed over ``path``).

    Tensors, all float32 (``F32``), named as in a checkpoint (``docs/TRAINING.md`` section 11):
    ``W<l>`` of shape (outputs, inputs) and ``b<l>`` of shape (outputs,) for ``l = 1..L``; with
    ``moments``, also the optimiser's slots shaped like them: Adam and AdamW ``mW<l> vW<l>
    mb<l> vb<l>`` (first and second moments), SGD ``mW<l> mb<l>`` (momentum buffers). The
    header's metadata holds ``format`` ("nxrs"), ``layers`` (JSON), ``loss`` and
    ``nxrs_version``.

    This is an exchange format, not a checkpoint: an NXCK checkpoint (``Trainer.save``) also
    keeps the configuration, Adam's bias-correction powers ``b1t`` and ``b2t``, the counters
    (epoch, batch, step) and, from ``fit``, the data's fingerprint; without them a run cannot
    continue bit for bit.
    """
    st = _require("safetensors.numpy", "safetensors", "Trainer.save_safetensors")
    tensors = trainer.state_dict()
    if not moments:
        tensors = {name: t for name, t in tensors.items() if _PARAMETER.fullmatch(name)}
    metadata = {
        "format": "nxrs",
        "layers": json.dumps(trainer.sizes),
        "loss": trainer.config["loss"],
        "nxrs_version": __version__,
    }
    write_bytes_atomically(Path(path), st.save(tensors, metadata=metadata))


#: A parameter's name, ``W<l>`` or ``b<l>``, and an optimiser slot's (``m``/``v`` before it).
_PARAMETER = re.compile(r"([Wb])([1-9][0-9]*)")
_SLOT = re.compile(r"[mv][Wb][1-9][0-9]*")


def from_safetensors(path: str | os.PathLike[str], **config: Any) -> Trainer:
    """A trainer starting from the weights in a safetensors file (``from_weights``).

    The file holds ``W1 b1 ... WL bL`` as ``save_safetensors`` names and shapes them (F32; F64
    is rounded to nearest); optimiser slots (``mW1``, ...) may be there and are not used: the
    optimiser starts fresh (see ``save_safetensors`` for what only a checkpoint keeps). Any other
    tensor name, or a missing tensor, is an InputError; a file safetensors cannot read is a
    CheckpointError; a missing file a FileNotFoundError.
    """
    st = _require("safetensors.numpy", "safetensors", "Trainer.from_safetensors")
    error = _require("safetensors", "safetensors", "Trainer.from_safetensors").SafetensorError
    try:
        tensors: dict[str, npt.NDArray[Any]] = st.load_file(os.fspath(path))
    except (error, ValueError, TypeError) as err:
        raise CheckpointError(
            f"{os.fspath(path)!r} is not a readable safetensors file: {err}"
        ) from err
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
    return from_weights(pairs, **config)


def to_onnx(trainer: Trainer, path: str | os.PathLike[str], *, softmax: bool | None = None) -> None:
    """Writes the model's inference as an ONNX model (opset ``ONNX_OPSET``, 13) to ``path``,
    checked by ``onnx.checker`` and written crash-safely.

    Input ``input``: float32 (batch, inputs). Per layer ``l``: ``MatMul`` by the initializer
    ``W<l>T`` (the weight transposed, (inputs, outputs)), ``Add`` of ``b<l>``, ``Relu`` between
    layers. Output: ``probabilities`` (``Softmax`` over the last axis; the default for
    cross-entropy models), ``logits`` (cross-entropy, ``softmax=False``) or ``outputs`` (mse).
    """
    onnx = _require("onnx", "onnx", "Trainer.to_onnx")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    with_softmax = _softmax(trainer, softmax)
    params = weights(trainer)
    if with_softmax:
        output = "probabilities"
    else:
        output = "logits" if trainer.config["loss"] == "cross_entropy" else "outputs"
    nodes, initializers = [], []
    x = "input"
    for layer, (w, b) in enumerate(params, 1):
        last = layer == len(params)
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(w.T), f"W{layer}T"))
        initializers.append(numpy_helper.from_array(b, f"b{layer}"))
        nodes.append(helper.make_node("MatMul", [x, f"W{layer}T"], [f"matmul{layer}"]))
        z = output if last and not with_softmax else f"z{layer}"
        nodes.append(helper.make_node("Add", [f"matmul{layer}", f"b{layer}"], [z]))
        x = z
        if not last:
            nodes.append(helper.make_node("Relu", [z], [f"a{layer}"]))
            x = f"a{layer}"
    if with_softmax:
        nodes.append(helper.make_node("Softmax", [x], [output], axis=-1))
    sizes = trainer.sizes
    graph = helper.make_graph(
        nodes,
        "nxrs_mlp",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="nxrs",
        producer_version=__version__,
    )
    model.ir_version = _ONNX_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    write_bytes_atomically(Path(path), model.SerializeToString())
