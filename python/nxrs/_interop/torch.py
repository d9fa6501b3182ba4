"""PyTorch: a trainer as a ``torch.nn.Sequential`` (``to_torch``) and back (``from_torch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, InputError
from nxrs.layers import Layer

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

from nxrs._interop.weights import (
    _layer_list,
    _Numbered,
    _numbered,
    _require,
    _softmax,
    _start,
    from_weights,
    weights,
)


def to_torch(trainer: Trainer, *, softmax: bool = False) -> Any:
    """The model as a ``torch.nn.Sequential`` (float32, on the CPU), ending in
    ``Softmax(dim=-1)`` when ``softmax`` (cross-entropy models only).

    An integer-list model gives ``Linear`` and ``ReLU`` modules. A layer model gives one module
    per layer after ``Input``, of the same name (``Dense`` is ``Linear``): ``Conv1d``, ``Conv2d``
    (kernel, stride, padding), ``MaxPool1d/2d``, ``AvgPool1d/2d``, ``Flatten``, ``ReLU``,
    ``Tanh``, ``Sigmoid``, ``GELU()`` (the exact form), ``Dropout(p)``, ``BatchNorm1d/2d``
    (``momentum``, ``eps``, the running statistics copied) and ``LayerNorm``
    (``normalized_shape`` the layer's input shape, ``eps``); ``Linear`` and ``LayerNorm`` with
    ``bias=False`` for layers without biases; a ``Residual`` is a module of its own class,
    ``x + branch(x)`` with ``branch`` the ``Sequential`` of its layers' modules (nested as the
    layers are). A sequence model (section 15.8) takes ``(batch, T)`` token ids (a
    ``LongTensor``) and outputs its last layer's values per sample (``(batch, T, vocab)`` for a
    GPT): ``Embedding`` is ``nn.Embedding`` (weight ``E``); ``PositionalEmbedding``,
    ``CausalSelfAttention`` (nanoGPT's: ``c_attn`` weight ``Wqkv``, ``c_proj`` weight ``Wo``,
    ``scaled_dot_product_attention(is_causal=True)``) and ``TiedHead`` (``x @ weight.T``, its
    ``weight`` the ``nn.Embedding``'s very parameter, so the tie holds in torch) are modules of
    ``nxrs._interop.torch_sequence``; ``Linear`` acts on each token and ``LayerNorm``
    normalises each token's width (``normalized_shape=(width,)``). Any other model's input is
    ``(batch, *shape)`` of its ``Input``. The module is in
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
        modules = _torch_modules(torch, _numbered(layers), trainer.state_dict())
    else:
        for layer, (w, b) in enumerate(weights(trainer)):
            if layer:
                modules.append(torch.nn.ReLU())
            modules.append(_skip_init(torch, torch.nn.Linear, w.shape[1], w.shape[0]))
            _copy(torch, modules[-1], weight=w, bias=b)
    if with_softmax:
        modules.append(torch.nn.Softmax(dim=-1))
    return torch.nn.Sequential(*modules)


def _skip_init(torch: Any, cls: Any, *args: Any, bias: bool = True, **kwargs: Any) -> Any:
    """A ``cls(*args, **kwargs)`` module without its random initialisation (which would draw
    from torch's global generator) of values overwritten at once."""
    return torch.nn.utils.skip_init(cls, *args, bias=bias, dtype=torch.float32, **kwargs)


def _copy(torch: Any, module: Any, **tensors: npt.NDArray[np.float32]) -> None:
    """Copies the arrays into ``module``'s tensors of those names, bit for bit."""
    with torch.no_grad():
        for name, array in tensors.items():
            getattr(module, name).copy_(torch.from_numpy(array))


def _torch_modules(
    torch: Any,
    layers: list[_Numbered],
    state: dict[str, npt.NDArray[np.float32]],
    embedding: Any = None,
) -> list[Any]:
    """The torch modules of a layer model's layers (``to_torch``), with its tensors;
    ``embedding`` the model's ``nn.Embedding`` once made (a TiedHead shares its weight)."""
    from nxrs._interop import torch_sequence as sequence
    from nxrs._interop.torch_residual import Residual

    nn = torch.nn
    modules = []
    for item in layers:
        layer, n, kind = item.layer, item.n, item.layer["type"]
        # The parameters by their torch names: weight, and bias unless the layer has none.
        tensors = {key: state[name] for key, name in zip(("weight", "bias"), item.tensors())}
        bias = "bias" in tensors
        if kind == "Embedding":
            module = torch.nn.utils.skip_init(
                nn.Embedding, layer["vocab"], layer["width"], dtype=torch.float32
            )
            _copy(torch, module, weight=state[f"E{n}"])
            embedding = module
        elif kind == "PositionalEmbedding":
            module = sequence.PositionalEmbedding(layer["context"], layer["width"])
            _copy(torch, module, weight=state[f"P{n}"])
        elif kind == "CausalSelfAttention":
            module = sequence.CausalSelfAttention(state[f"Wo{n}"].shape[0], layer["heads"])
            _copy(torch, module.c_attn, weight=state[f"Wqkv{n}"])
            _copy(torch, module.c_proj, weight=state[f"Wo{n}"])
        elif kind == "TiedHead":
            module = sequence.TiedHead(embedding.weight)
        elif kind in ("Dense", "Conv1d", "Conv2d"):
            w = state[f"W{n}"]
            if kind == "Dense":
                module = _skip_init(torch, nn.Linear, w.shape[1], w.shape[0], bias=bias)
            else:
                sizes: dict[str, Any] = {
                    key: tuple(layer[key]) for key in ("kernel_size", "stride", "padding")
                }
                module = _skip_init(torch, getattr(nn, kind), w.shape[1], w.shape[0], **sizes)
            _copy(torch, module, **tensors)
        elif kind in ("BatchNorm1d", "BatchNorm2d"):
            # Its initialisation (ones, zeros) draws nothing; it also sets
            # num_batches_tracked, which skip_init would leave undefined.
            module = getattr(nn, kind)(
                len(state[f"gamma{n}"]), eps=layer["eps"], momentum=layer["momentum"]
            )
            _copy(
                torch,
                module,
                **tensors,
                running_mean=state[f"mean{n}"],
                running_var=state[f"var{n}"],
            )
        elif kind == "LayerNorm":
            # Only without a bias: torch before 2.1 has no bias= (and a bias by default).
            no_bias = {} if bias else {"bias": False}
            module = nn.LayerNorm(state[f"gamma{n}"].shape, eps=layer["eps"], **no_bias)
            _copy(torch, module, **tensors)
        elif kind in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
            module = getattr(nn, kind)(tuple(layer["kernel_size"]), tuple(layer["stride"]))
        elif kind == "Dropout":
            module = nn.Dropout(layer["p"])
        elif kind == "Residual":
            module = Residual(*_torch_modules(torch, item.branch, state, embedding))
        else:  # Flatten, ReLU, Tanh, Sigmoid, GELU: torch's modules of the same name, their
            # defaults (GELU's is the exact form, approximate="none")
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


def from_torch(
    trainer_class: type[Trainer], module: Any, *, input_shape: Any = None, **config: Any
) -> Trainer:
    """``nxrs.interop.from_torch``, building a trainer of ``trainer_class``."""
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
        return _from_torch_layers(trainer_class, torch, children, input_shape, config)
    # A module of layers nxrs.layers has: a layer model, which needs the input's shape.
    hint = ""
    if children and all(type(child) in _torch_layer_types(nn) for child in children):
        hint = (
            "; as a layer model (nxrs.layers) it may be: give input_shape=, the shape of one "
            "sample (e.g. (channels, length) for Conv1d, (T,) for T token ids)"
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
    return from_weights(trainer_class, pairs, **config)


def _torch_layer_types(nn: Any) -> tuple[type, ...]:
    """The torch module types ``from_torch`` turns into layers (``_layer_of``, and the
    ``Residual`` and sequence modules ``to_torch`` writes)."""
    from nxrs._interop import torch_sequence as sequence
    from nxrs._interop.torch_residual import Residual

    names = (
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
        "GELU",
        "Embedding",
    )
    own = (Residual, sequence.PositionalEmbedding, sequence.CausalSelfAttention, sequence.TiedHead)
    return (*(getattr(nn, name) for name in names), *own)


def _from_torch_layers(
    trainer_class: type[Trainer],
    torch: Any,
    children: list[Any],
    input_shape: Any,
    config: dict[str, Any],
) -> Trainer:
    """``from_torch`` with ``input_shape``: a layer model of the modules ``children``."""
    from nxrs import layers
    from nxrs._interop.torch_residual import Residual

    if "layers" in config or "sizes" in config:
        raise TypeError("from_torch takes the layers from the module")
    shape = input_shape if isinstance(input_shape, (tuple, list)) else (input_shape,)
    parameters: list[npt.NDArray[Any]] = []
    buffers: list[npt.NDArray[Any]] = []
    norms = []  # each LayerNorm: its name, its module and its tensor number
    n = 0  # the tensor number (section 15.4), counted depth first as the layers are
    embeddings: list[Any] = []  # the nn.Embedding modules, which a TiedHead must share

    def convert(named: list[tuple[str, Any]]) -> list[Layer]:
        """The layers of the modules, each with its name (its index, nested ones as torch's
        ``named_modules`` names them), their tensors gathered in the state's order."""
        nonlocal n
        model: list[Layer] = []
        for k, child in named:
            if type(child) is Residual:
                branch = [(f"{k}.branch.{j}", module) for j, module in enumerate(child.branch)]
                model.append(layers.Residual(convert(branch)))
                continue
            layer, tensors, statistics = _layer_of(torch, k, child)
            if isinstance(layer, layers.Embedding):
                embeddings.append(child)
            if isinstance(layer, layers.TiedHead):
                _check_tied(k, child, embeddings)
            model.append(layer)
            n += bool(tensors)
            parameters.extend(_torch_array(torch, t, f"module {k}'s {name}") for name, t in tensors)
            if isinstance(layer, layers.LayerNorm):
                norms.append((k, child, n))
            buffers.extend(_torch_array(torch, t, f"module {k}'s {name}") for name, t in statistics)
        return model

    model = [layers.Input(*shape), *convert([(str(k), child) for k, child in enumerate(children)])]
    trainer = trainer_class(model, **config)
    state = trainer.state_dict() if norms else {}
    for k, child, number in norms:
        _check_normalized_shape(k, child, state[f"gamma{number}"].shape, bool(embeddings))
    _start(trainer, parameters, buffers)
    return trainer


def _check_tied(k: str, child: Any, embeddings: list[Any]) -> None:
    """Refuses the ``TiedHead`` module ``child`` (module ``k``) unless its weight is the very
    parameter of the ``nn.Embedding`` before it: nxrs's head has no table of its own."""
    if not any(child.weight is embedding.weight for embedding in embeddings):
        raise ConfigError(
            f"module {k} ({child!r}) cannot be represented: its weight is not the weight "
            "parameter of an nn.Embedding before it (the same tensor); nxrs's TiedHead reads "
            "the model's Embedding table and has none of its own"
        )


def _check_normalized_shape(k: str, child: Any, whole: tuple[int, ...], sequence: bool) -> None:
    """Refuses the torch ``LayerNorm`` ``child`` (module ``k``) unless it normalises over the
    cells nxrs's does, of shape ``whole`` (the model's ``gamma``): the whole input of the layer,
    or each token's width in a ``sequence`` model (one that starts with an ``nn.Embedding``)."""
    if tuple(child.normalized_shape) != tuple(whole):
        has, over = (
            ("each token here has the shape", "each token's width")
            if sequence
            else ("its input here has the shape", "the whole input of the layer")
        )
        raise ConfigError(
            f"module {k} ({child!r}) cannot be represented: it normalises over the shape "
            f"{tuple(child.normalized_shape)}, and {has} {tuple(whole)}; nxrs's LayerNorm "
            f"normalises over {over} (PyTorch's LayerNorm({tuple(whole)}))"
        )


#: A module's tensors by their torch names, in the order of nxrs's (section 15.4).
_Tensors = list[tuple[str, Any]]


def _layer_of(torch: Any, k: str, child: Any) -> tuple[Layer, _Tensors, _Tensors]:
    """The nxrs layer of the torch module ``child`` (module ``k``), its parameters and running
    statistics; a ConfigError naming it and why when nxrs has no such layer."""
    from nxrs import layers
    from nxrs._interop import torch_sequence as sequence

    nn = torch.nn
    kind = type(child)

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"module {k} ({child!r}) cannot be represented: {why}")

    def nonzero(value: Any) -> bool:
        return any(np.atleast_1d(value))

    parameters = [
        (name, getattr(child, name))
        for name in ("weight", "bias")
        if getattr(child, name, None) is not None
    ]
    bias = getattr(child, "bias", None) is not None
    if kind in (nn.Conv1d, nn.Conv2d) and not bias:
        raise refuse("it has no bias (bias=False); nxrs's Conv layers have one")
    if kind is nn.Linear:
        return layers.Dense(child.out_features, bias=bias), parameters, []
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
    if kind is nn.GELU:
        if child.approximate != "none":
            raise refuse(
                f"approximate={child.approximate!r}; nxrs's GELU is the exact form, x * Phi(x) "
                "(approximate='none')"
            )
        return layers.GELU(), [], []
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
        if child.weight is None:
            raise refuse("it has no elementwise weight; nxrs's LayerNorm has one")
        return layers.LayerNorm(eps=child.eps, bias=bias), parameters, []
    if kind is nn.Embedding:
        for name, value, default in (
            ("padding_idx", child.padding_idx, None),
            ("max_norm", child.max_norm, None),
            ("scale_grad_by_freq", child.scale_grad_by_freq, False),
        ):
            if value != default:
                raise refuse(f"{name}={value!r}; nxrs's Embedding is a plain table lookup")
        return layers.Embedding(child.num_embeddings, child.embedding_dim), parameters, []
    if kind is sequence.PositionalEmbedding:
        return layers.PositionalEmbedding(*child.weight.shape), parameters, []
    if kind is sequence.CausalSelfAttention:
        if child.c_attn.bias is not None or child.c_proj.bias is not None:
            raise refuse("its projections have biases; nxrs's CausalSelfAttention has none")
        projections = [
            ("c_attn.weight", child.c_attn.weight),
            ("c_proj.weight", child.c_proj.weight),
        ]
        return layers.CausalSelfAttention(child.heads), projections, []
    if kind is sequence.TiedHead:
        return layers.TiedHead(), [], []  # its weight is the Embedding's (_check_tied)
    if getattr(nn, kind.__name__, None) is kind:
        raise refuse(f"nxrs has no layer for torch.nn.{kind.__name__}")
    raise refuse(
        f"nxrs has no layer for {kind} (a residual block is taken as to_torch writes a "
        "Residual layer, x + branch(x) of its own module class, and no other; so are "
        "positional embeddings, causal self-attention and tied heads, of the classes in "
        "nxrs._interop.torch_sequence)"
    )
