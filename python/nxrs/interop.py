"""Models that leave nxrs, and come in: PyTorch modules, safetensors files, ONNX graphs.

These are the ``Trainer`` methods ``to_torch``, ``save_safetensors``, ``to_onnx`` and the
class methods ``from_weights``, ``from_torch``, ``from_safetensors`` (``nxrs.Trainer`` calls
these functions). torch, onnx and safetensors are optional: each is imported when a
method needs it, and its absence is an ImportError naming the extra that installs it
(``pip install 'nxrs[torch]'``, ``'nxrs[onnx]'``, ``'nxrs[safetensors]'``).

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

import importlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import CheckpointError, ConfigError, InputError, __version__
from nxrs._rundir import write_bytes_atomically
from nxrs._trainer import Trainer
from nxrs.layers import Layer

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

#: The ONNX operator set ``to_onnx`` writes for an integer-list model (MatMul, Add, Relu,
#: Softmax over the last axis).
ONNX_OPSET = 13
#: The ONNX IR version of opset 13 (onnxruntime 1.7 and later read it).
_ONNX_IR_VERSION = 7
#: The operator set ``to_onnx`` writes for a layer model: 17, the first with
#: ``LayerNormalization`` (onnxruntime 1.12 and later), and its IR version.
ONNX_LAYERS_OPSET = 17
_ONNX_LAYERS_IR_VERSION = 8

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


#: The layers with tensors and their parameters' names (section 15.4), as ``W{n} b{n}``; in
#: torch both are ``weight`` and ``bias``.
_TENSORS = {
    "Dense": ("W", "b"),
    "Conv1d": ("W", "b"),
    "Conv2d": ("W", "b"),
    "BatchNorm1d": ("gamma", "beta"),
    "BatchNorm2d": ("gamma", "beta"),
    "LayerNorm": ("gamma", "beta"),
}


def _numbered(layers: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], int]]:
    """Each layer after ``Input`` with its tensor number ``n`` (section 15.4; for a layer
    without tensors, the number of the last one before it)."""
    n = 0
    for layer in layers[1:]:
        n += layer["type"] in _TENSORS
        yield layer, n


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
    """The model as a ``torch.nn.Sequential`` (float32, on the CPU), ending in
    ``Softmax(dim=-1)`` when ``softmax`` (cross-entropy models only).

    An integer-list model gives ``Linear`` and ``ReLU`` modules. A layer model gives one module
    per layer after ``Input``, of the same name (``Dense`` is ``Linear``): ``Conv1d``, ``Conv2d``
    (kernel, stride, padding), ``MaxPool1d/2d``, ``AvgPool1d/2d``, ``Flatten``, ``ReLU``,
    ``Tanh``, ``Sigmoid``, ``Dropout(p)``, ``BatchNorm1d/2d`` (``momentum``, ``eps``, the
    running statistics copied) and ``LayerNorm`` (``normalized_shape`` the layer's input shape,
    ``eps``); the input is ``(batch, *shape)`` of the model's ``Input``. The module is in
    torch's default training mode: ``.eval()`` gives nxrs's evaluation mode (section 15.6:
    Dropout the identity, BatchNorm on its running statistics), what ``predict`` computes.

    Without softmax it outputs logits, what ``torch.nn.CrossEntropyLoss`` trains on. The
    weights are copies; torch's random number generator is not used.
    """
    torch = _require("torch", "torch", "Trainer.to_torch")
    with_softmax = _softmax(trainer, softmax)
    layers = _layer_list(trainer)
    modules: list[Any] = []
    if layers is not None:
        modules = _torch_modules(torch, layers, trainer.state_dict())
    else:
        for layer, (w, b) in enumerate(weights(trainer)):
            if layer:
                modules.append(torch.nn.ReLU())
            modules.append(_skip_init(torch, torch.nn.Linear, w.shape[1], w.shape[0]))
            _copy(torch, modules[-1], weight=w, bias=b)
    if with_softmax:
        modules.append(torch.nn.Softmax(dim=-1))
    return torch.nn.Sequential(*modules)


def _skip_init(torch: Any, cls: Any, *args: Any, **kwargs: Any) -> Any:
    """A ``cls(*args, **kwargs)`` module without its random initialisation (which would draw
    from torch's global generator) of values overwritten at once."""
    return torch.nn.utils.skip_init(cls, *args, bias=True, dtype=torch.float32, **kwargs)


def _copy(torch: Any, module: Any, **tensors: npt.NDArray[np.float32]) -> None:
    """Copies the arrays into ``module``'s tensors of those names, bit for bit."""
    with torch.no_grad():
        for name, array in tensors.items():
            getattr(module, name).copy_(torch.from_numpy(array))


def _torch_modules(
    torch: Any, layers: list[dict[str, Any]], state: dict[str, npt.NDArray[np.float32]]
) -> list[Any]:
    """The torch modules of a layer model's layers (``to_torch``), with its tensors."""
    nn = torch.nn
    modules = []
    for layer, n in _numbered(layers):
        kind = layer["type"]
        if kind in ("Dense", "Conv1d", "Conv2d"):
            w = state[f"W{n}"]
            if kind == "Dense":
                module = _skip_init(torch, nn.Linear, w.shape[1], w.shape[0])
            else:
                sizes = {key: tuple(layer[key]) for key in ("kernel_size", "stride", "padding")}
                module = _skip_init(torch, getattr(nn, kind), w.shape[1], w.shape[0], **sizes)
            _copy(torch, module, weight=w, bias=state[f"b{n}"])
        elif kind in ("BatchNorm1d", "BatchNorm2d"):
            # Its initialisation (ones, zeros) draws nothing; it also sets
            # num_batches_tracked, which skip_init would leave undefined.
            module = getattr(nn, kind)(
                len(state[f"gamma{n}"]), eps=layer["eps"], momentum=layer["momentum"]
            )
            _copy(
                torch,
                module,
                weight=state[f"gamma{n}"],
                bias=state[f"beta{n}"],
                running_mean=state[f"mean{n}"],
                running_var=state[f"var{n}"],
            )
        elif kind == "LayerNorm":
            module = nn.LayerNorm(state[f"gamma{n}"].shape, eps=layer["eps"])
            _copy(torch, module, weight=state[f"gamma{n}"], bias=state[f"beta{n}"])
        elif kind in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
            module = getattr(nn, kind)(tuple(layer["kernel_size"]), tuple(layer["stride"]))
        elif kind == "Dropout":
            module = nn.Dropout(layer["p"])
        else:  # Flatten, ReLU, Tanh, Sigmoid: torch's modules of the same name, no arguments
            module = getattr(nn, kind)()
        modules.append(module)
    return modules


def _torch_array(torch: Any, tensor: Any, name: str) -> npt.NDArray[Any]:
    if tensor.is_meta:
        raise InputError(
            f"{name} is on torch's meta device: it has a shape but no values; give the module "
            "its weights first (e.g. module.to_empty(device='cpu'), then load_state_dict)"
        )
    if tensor.dtype not in (torch.float32, torch.float64):
        raise InputError(f"{name} is {tensor.dtype}: nxrs takes float32 (or float64) weights")
    array: npt.NDArray[Any] = tensor.detach().cpu().numpy()
    return array


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
    make them or with the settings nxrs has: ``Linear``, ``Conv1d`` and ``Conv2d`` with bias,
    zero padding (numbers or ``"valid"``), no dilation, no groups; ``MaxPool1d/2d`` and
    ``AvgPool1d/2d`` without padding, ``ceil_mode``, dilation or ``divisor_override``;
    ``Flatten()`` (of each sample: ``start_dim=1``, ``end_dim=-1``); ``ReLU``, ``Tanh``,
    ``Sigmoid``, ``Dropout``; ``BatchNorm1d/2d`` with ``affine``, ``track_running_stats`` and a
    ``momentum``; ``LayerNorm`` with its weight and bias, over the whole input of the layer.

    Any other module (another activation such as ``GELU``, a setting above) is a ConfigError
    naming its position, the module and why (a module that would need ``input_shape`` when
    it is missing names that); a ``LayerNorm`` over part of its input (its last dimensions)
    is one too. Weights other than float32 or float64, on the meta device (no values), or of
    shapes that do not fit, and a negative BatchNorm running variance, are an InputError.
    ``config`` is ``Trainer``'s keywords but ``layers``.
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
    if input_shape is not None:
        return _from_torch_layers(torch, children, input_shape, config)
    # A module of layers nxrs.layers has: a layer model, which needs the input's shape.
    hint = ""
    if children and all(type(child) in _torch_layer_types(nn) for child in children):
        hint = (
            "; as a layer model (nxrs.layers) it may be: give input_shape=, the shape of one "
            "sample (e.g. (channels, length) for Conv1d)"
        )
    pairs = []
    for k, child in enumerate(children):
        linear = k % 2 == 0
        expected = nn.Linear if linear else nn.ReLU
        if type(child) is not expected or (linear and child.bias is None):
            raise ConfigError(
                f"module {k} ({child!r}) cannot be represented: nxrs models are Linear layers "
                f"with bias and a ReLU between each two, optionally ending in Softmax(dim=-1){hint}"
            )
        if linear:
            w = _torch_array(torch, child.weight, f"module {k}'s weight")
            b = _torch_array(torch, child.bias, f"module {k}'s bias")
            pairs.append((w, b))
    if not children or isinstance(children[-1], nn.ReLU):
        raise ConfigError(
            "the module must end in a Linear layer (or Linear then Softmax): nxrs's outputs "
            f"are the last layer's values or their softmax{hint}"
        )
    return from_weights(pairs, **config)


def _torch_layer_types(nn: Any) -> tuple[type, ...]:
    """The torch module types ``from_torch`` turns into layers (``_layer_of``)."""
    return tuple(
        getattr(nn, name)
        for name in (
            "Linear",
            "Conv1d",
            "Conv2d",
            "MaxPool1d",
            "MaxPool2d",
            "AvgPool1d",
            "AvgPool2d",
            "Flatten",
            "ReLU",
            "Tanh",
            "Sigmoid",
            "Dropout",
            "BatchNorm1d",
            "BatchNorm2d",
            "LayerNorm",
        )
    )


def _from_torch_layers(
    torch: Any, children: list[Any], input_shape: Any, config: dict[str, Any]
) -> Trainer:
    """``from_torch`` with ``input_shape``: a layer model of the modules ``children``."""
    from nxrs import layers

    if "layers" in config or "sizes" in config:
        raise TypeError("from_torch takes the layers from the module")
    shape = input_shape if isinstance(input_shape, (tuple, list)) else (input_shape,)
    model: list[Layer] = [layers.Input(*shape)]
    pairs, buffers = [], []
    norms = []  # each LayerNorm: its module, its number and its tensor number
    for k, child in enumerate(children):
        layer, tensors, statistics = _layer_of(torch, k, child)
        model.append(layer)
        arrays = [_torch_array(torch, t, f"module {k}'s {name}") for name, t in tensors]
        if arrays:
            pairs.append((arrays[0], arrays[1]))
        if isinstance(layer, layers.LayerNorm):
            norms.append((k, child, len(pairs)))
        buffers += [_torch_array(torch, t, f"module {k}'s {name}") for name, t in statistics]
    trainer = Trainer(model, **config)
    state = trainer.state_dict() if norms else {}
    for k, child, n in norms:
        _check_normalized_shape(k, child, state[f"gamma{n}"].shape)
    trainer._start_from(pairs, buffers)
    return trainer


def _check_normalized_shape(k: int, child: Any, whole: tuple[int, ...]) -> None:
    """Refuses the torch ``LayerNorm`` ``child`` (module ``k``) unless it normalises over the
    whole input of the layer, of shape ``whole`` (the model's ``gamma``), as nxrs's does."""
    if tuple(child.normalized_shape) != tuple(whole):
        raise ConfigError(
            f"module {k} ({child!r}) cannot be represented: it normalises over the shape "
            f"{tuple(child.normalized_shape)}, and its input here has the shape {tuple(whole)}; "
            "nxrs's LayerNorm normalises over the whole input of the layer (PyTorch's "
            f"LayerNorm({tuple(whole)}))"
        )


#: A module's tensors by their torch names, in the order of nxrs's (section 15.4).
_Tensors = list[tuple[str, Any]]


def _layer_of(torch: Any, k: int, child: Any) -> tuple[Layer, _Tensors, _Tensors]:
    """The nxrs layer of the torch module ``child`` (module ``k``), its parameters and running
    statistics; a ConfigError naming it and why when nxrs has no such layer."""
    from nxrs import layers

    nn = torch.nn
    kind = type(child)

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"module {k} ({child!r}) cannot be represented: {why}")

    def nonzero(value: Any) -> bool:
        return any(np.atleast_1d(value))

    parameters = [("weight", child.weight), ("bias", child.bias)] if hasattr(child, "bias") else []
    if kind in (nn.Linear, nn.Conv1d, nn.Conv2d) and child.bias is None:
        raise refuse("it has no bias (bias=False); nxrs's Dense and Conv layers have one")
    if kind is nn.Linear:
        return layers.Dense(child.out_features), parameters, []
    if kind in (nn.Conv1d, nn.Conv2d):
        if any(d != 1 for d in child.dilation):
            raise refuse(f"dilation={child.dilation}; nxrs's convolutions have none")
        if child.groups != 1:
            raise refuse(f"groups={child.groups}; nxrs's convolutions have one group")
        if child.padding_mode != "zeros":
            raise refuse(f"padding_mode={child.padding_mode!r}; nxrs pads with zeros")
        padding = child.padding
        if isinstance(padding, str):
            if padding != "valid":
                raise refuse(f"padding={padding!r}; give the padding as numbers")
            padding = 0
        conv = layers.Conv1d if kind is nn.Conv1d else layers.Conv2d
        return conv(child.out_channels, child.kernel_size, child.stride, padding), parameters, []
    if kind in (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d):
        if nonzero(child.padding):
            raise refuse(f"padding={child.padding}; nxrs's pooling has none")
        if child.ceil_mode:
            raise refuse("ceil_mode=True; nxrs drops the windows that do not fit, as floor")
        if nonzero(np.subtract(getattr(child, "dilation", 1), 1)):
            raise refuse(f"dilation={child.dilation}; nxrs's pooling has none")
        if getattr(child, "return_indices", False):
            raise refuse("return_indices=True; a layer returns its output alone")
        if getattr(child, "divisor_override", None) is not None:
            raise refuse("divisor_override; nxrs divides by the window's cells")
        pool = getattr(layers, kind.__name__)
        return pool(child.kernel_size, child.stride), [], []
    if kind is nn.Flatten:
        if (child.start_dim, child.end_dim) != (1, -1):
            raise refuse("nxrs's Flatten flattens each sample whole (start_dim=1, end_dim=-1)")
        return layers.Flatten(), [], []
    if kind in (nn.ReLU, nn.Tanh, nn.Sigmoid):
        return getattr(layers, kind.__name__)(), [], []
    if kind is nn.Dropout:
        return layers.Dropout(child.p), [], []
    if kind in (nn.BatchNorm1d, nn.BatchNorm2d):
        if not child.affine:
            raise refuse("affine=False; nxrs's BatchNorm has its weight and bias")
        if not child.track_running_stats or child.running_mean is None:
            raise refuse(
                "track_running_stats=False; nxrs's BatchNorm evaluates with running statistics"
            )
        if child.momentum is None:
            raise refuse(
                "momentum=None (a cumulative average); nxrs's running statistics are "
                "exponential averages with a momentum"
            )
        norm = getattr(layers, kind.__name__)
        statistics = [("running_mean", child.running_mean), ("running_var", child.running_var)]
        return norm(momentum=child.momentum, eps=child.eps), parameters, statistics
    if kind is nn.LayerNorm:
        if not child.elementwise_affine or child.bias is None:
            raise refuse("it has no elementwise weight or no bias; nxrs's LayerNorm has both")
        return layers.LayerNorm(eps=child.eps), parameters, []
    name = f"torch.nn.{kind.__name__}" if getattr(nn, kind.__name__, None) is kind else kind
    raise refuse(f"nxrs has no layer for {name}")


def save_safetensors(
    trainer: Trainer, path: str | os.PathLike[str], *, moments: bool = False
) -> None:
    """Writes the weights to ``path`` in the safetensors format, crash-safely (a temporary
    file, fsynced and renamed over ``path``).

    Tensors, all float32 (``F32``), named as in a checkpoint (``docs/TRAINING.md`` section 11):
    ``W<l>`` of shape (outputs, inputs) and ``b<l>`` of shape (outputs,) for ``l = 1..L``; with
    ``moments``, also the optimiser's slots shaped like them: Adam and AdamW ``mW<l> vW<l>
    mb<l> vb<l>`` (first and second moments), SGD ``mW<l> mb<l>`` (momentum buffers). A layer
    model's are its state's (section 15.4): ``W{n} b{n} gamma{n} beta{n}`` and BatchNorm's
    running statistics ``mean{n} var{n}``, with ``moments`` the slots ``m<p> v<p>`` of each
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
#: The names of the tensors a model computes with (section 15.4): parameters and running
#: statistics, not optimiser slots (``m``/``v`` and a parameter's name, which none of these
#: spellings starts a name of).
_WEIGHT = re.compile(r"(?:W|b|gamma|beta|mean|var)[1-9][0-9]*")
_STATISTIC = re.compile(r"(?:mean|var)[1-9][0-9]*")


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
        return _from_named(tensors, model, config)
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
    tensors: dict[str, npt.NDArray[Any]], layers: list[Layer], config: dict[str, Any]
) -> Trainer:
    """A trainer of the layer model ``layers`` at the start of a run with the tensors named as
    in its state (``from_safetensors``): every parameter, optimiser slots unused, the running
    statistics all or none."""
    if "layers" in config or "sizes" in config:
        raise TypeError("from_safetensors takes the layers from the file's metadata")
    trainer = Trainer(layers, **config)
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
    arrays = [tensors[name] for name in parameters]
    trainer._start_from(
        list(zip(arrays[::2], arrays[1::2])), [tensors[name] for name in given] or None
    )
    return trainer


def to_onnx(trainer: Trainer, path: str | os.PathLike[str], *, softmax: bool | None = None) -> None:
    """Writes the model's inference as an ONNX model to ``path``, checked by ``onnx.checker``
    and written crash-safely. Output: ``probabilities`` (``Softmax`` over the last axis; the
    default for cross-entropy models), ``logits`` (cross-entropy, ``softmax=False``) or
    ``outputs`` (mse), float32 (batch, outputs).

    An integer-list model (opset ``ONNX_OPSET``, 13): input ``input``, float32 (batch, inputs);
    per layer ``l``, ``MatMul`` by the initializer ``W<l>T`` (the weight transposed, (inputs,
    outputs)), ``Add`` of ``b<l>``, ``Relu`` between layers.

    A layer model (opset ``ONNX_LAYERS_OPSET``, 17): input ``input``, float32 (batch, *shape)
    of its ``Input``; one node per layer, its initializers named as in the state (section
    15.4): ``Gemm`` (``Dense``, ``transB=1`` of ``W{n}``, ``b{n}``), ``Conv`` (1-D or 2-D
    kernel, strides, pads), ``MaxPool``, ``AveragePool``, ``Flatten``, ``Relu``, ``Tanh``,
    ``Sigmoid``, ``BatchNormalization`` (inference: ``gamma{n} beta{n} mean{n} var{n}``,
    ``epsilon``), ``LayerNormalization`` (over every axis but the batch's, ``epsilon``);
    ``Dropout`` is left out (the identity in inference).
    """
    onnx = _require("onnx", "onnx", "Trainer.to_onnx")
    helper = onnx.helper
    with_softmax = _softmax(trainer, softmax)
    if with_softmax:
        output = "probabilities"
    else:
        output = "logits" if trainer.config["loss"] == "cross_entropy" else "outputs"
    layers = _layer_list(trainer)
    if layers is None:
        params = weights(trainer)
        # The softmax's input keeps the name it always had: the same bytes as before.
        last = f"z{len(params)}" if with_softmax else output
        nodes, initializers = _onnx_mlp(onnx, params, last)
        shape, name, opset, ir = [trainer.sizes[0]], "nxrs_mlp", ONNX_OPSET, _ONNX_IR_VERSION
    else:
        last = "logits" if with_softmax else output
        nodes, initializers = _onnx_layers(onnx, layers, trainer.state_dict(), last)
        shape, name = layers[0]["shape"], "nxrs_layers"
        opset, ir = ONNX_LAYERS_OPSET, _ONNX_LAYERS_IR_VERSION
    if with_softmax:
        nodes.append(helper.make_node("Softmax", [last], [output], axis=-1))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", *shape])],
        [
            helper.make_tensor_value_info(
                output, onnx.TensorProto.FLOAT, ["batch", trainer.sizes[-1]]
            )
        ],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="nxrs",
        producer_version=__version__,
    )
    model.ir_version = ir
    onnx.checker.check_model(model, full_check=True)
    write_bytes_atomically(Path(path), model.SerializeToString())


def _onnx_mlp(onnx: Any, params: Weights, output: str) -> tuple[list[Any], list[Any]]:
    """An integer-list model's nodes and initializers, from ``input`` to ``output``."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes, initializers = [], []
    x = "input"
    for layer, (w, b) in enumerate(params, 1):
        last = layer == len(params)
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(w.T), f"W{layer}T"))
        initializers.append(numpy_helper.from_array(b, f"b{layer}"))
        nodes.append(helper.make_node("MatMul", [x, f"W{layer}T"], [f"matmul{layer}"]))
        z = output if last else f"z{layer}"
        nodes.append(helper.make_node("Add", [f"matmul{layer}", f"b{layer}"], [z]))
        x = z
        if not last:
            nodes.append(helper.make_node("Relu", [z], [f"a{layer}"]))
            x = f"a{layer}"
    return nodes, initializers


#: The ONNX operators of the layers without tensors and arguments.
_ONNX_ELEMENTWISE = {"Flatten": "Flatten", "ReLU": "Relu", "Tanh": "Tanh", "Sigmoid": "Sigmoid"}


def _onnx_layers(
    onnx: Any,
    layers: list[dict[str, Any]],
    state: dict[str, npt.NDArray[np.float32]],
    output: str,
) -> tuple[list[Any], list[Any]]:
    """A layer model's nodes (inference) and initializers, from ``input`` to ``output``."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes: list[Any] = []
    initializers: list[Any] = []

    def tensors(*names: str) -> list[str]:
        for name in names:
            initializers.append(numpy_helper.from_array(state[name], name))
        return list(names)

    x = "input"
    for i, (layer, n) in enumerate(_numbered(layers), 1):
        kind, y = layer["type"], f"h{i}"
        if kind == "Dropout":
            continue  # the identity in inference
        if kind == "Dense":
            node = helper.make_node("Gemm", [x, *tensors(f"W{n}", f"b{n}")], [y], transB=1)
        elif kind in ("Conv1d", "Conv2d"):
            node = helper.make_node(
                "Conv",
                [x, *tensors(f"W{n}", f"b{n}")],
                [y],
                kernel_shape=layer["kernel_size"],
                strides=layer["stride"],
                pads=layer["padding"] * 2,  # each dimension's start, then each one's end
            )
        elif kind in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
            node = helper.make_node(
                "MaxPool" if kind.startswith("Max") else "AveragePool",
                [x],
                [y],
                kernel_shape=layer["kernel_size"],
                strides=layer["stride"],
            )
        elif kind in ("BatchNorm1d", "BatchNorm2d"):
            names = tensors(f"gamma{n}", f"beta{n}", f"mean{n}", f"var{n}")
            node = helper.make_node("BatchNormalization", [x, *names], [y], epsilon=layer["eps"])
        elif kind == "LayerNorm":
            node = helper.make_node(
                "LayerNormalization",
                [x, *tensors(f"gamma{n}", f"beta{n}")],
                [y],
                axis=1,  # every axis of a sample
                epsilon=layer["eps"],
            )
        else:
            node = helper.make_node(_ONNX_ELEMENTWISE[kind], [x], [y])
        nodes.append(node)
        x = y
    if nodes:
        nodes[-1].output[0] = output
    else:  # only Dropout: the input itself
        nodes.append(helper.make_node("Identity", [x], [output]))
    return nodes, initializers
