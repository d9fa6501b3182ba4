"""ONNX: a trainer's inference as an ONNX graph (``to_onnx``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import __version__
from nxrs._util.files import write_bytes_atomically

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

from nxrs._interop.weights import (
    Weights,
    _layer_list,
    _Numbered,
    _numbered,
    _require,
    _softmax,
    weights,
)

#: The ONNX operator set ``to_onnx`` writes for an integer-list model (MatMul, Add, Relu,
#: Softmax over the last axis).
ONNX_OPSET = 13
#: The ONNX IR version of opset 13 (onnxruntime 1.7 and later read it).
_ONNX_IR_VERSION = 7
#: The operator set ``to_onnx`` writes for a layer model: 17, the first with
#: ``LayerNormalization`` (onnxruntime 1.12 and later), and its IR version.
ONNX_LAYERS_OPSET = 17
_ONNX_LAYERS_IR_VERSION = 8


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
    15.4): ``Gemm`` (``Dense``, ``transB=1`` of ``W{n}``, ``b{n}``; without ``C`` for
    ``bias=False``), ``Conv`` (1-D or 2-D kernel, strides, pads), ``MaxPool``, ``AveragePool``,
    ``Flatten``, ``Relu``, ``Tanh``, ``Sigmoid``, ``BatchNormalization`` (inference: ``gamma{n}
    beta{n} mean{n} var{n}``, ``epsilon``), ``LayerNormalization`` (over every axis but the
    batch's, ``epsilon``; without ``B`` for ``bias=False``); ``GELU`` as ``x * (0.5 * (1 +
    Erf(x / sqrt(2))))`` (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``, the constants the
    initializers ``sqrt2``, ``one``, ``half``: opset 17 has no ``Gelu``); a ``Residual`` its
    branch's nodes and an ``Add`` of its input and their output; ``Dropout`` is left out (the
    identity in inference).
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

    def tensors(item: _Numbered) -> list[str]:
        names = item.tensors()
        for name in names:
            initializers.append(numpy_helper.from_array(state[name], name))
        return names

    def constant(name: str, value: float) -> str:
        """A float32 scalar initializer, added once."""
        if all(t.name != name for t in initializers):
            initializers.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def gelu(x: str, y: str) -> list[Any]:
        # x * Phi(x) = x * (0.5 * (1 + erf(x / sqrt(2)))): opset 17 has Erf, not Gelu (20).
        names = [f"{y}_{step}" for step in ("scaled", "erf", "plus1", "phi")]
        steps = [
            ("Div", [x, constant("sqrt2", np.sqrt(2))]),
            ("Erf", [names[0]]),
            ("Add", [names[1], constant("one", 1)]),
            ("Mul", [names[2], constant("half", 0.5)]),
            ("Mul", [x, names[3]]),
        ]
        return [
            helper.make_node(op, inputs, [out]) for (op, inputs), out in zip(steps, [*names, y])
        ]

    def add(items: list[_Numbered], x: str) -> str:
        """Appends the nodes of ``items`` applied to ``x``; the name of their output."""
        for item in items:
            layer, kind, y = item.layer, item.layer["type"], f"h{item.position}"
            if kind == "Dropout":
                continue  # the identity in inference
            if kind == "Dense":
                # Gemm's C (the bias) is optional: a Dense without biases has none.
                nodes.append(helper.make_node("Gemm", [x, *tensors(item)], [y], transB=1))
            elif kind in ("Conv1d", "Conv2d"):
                nodes.append(
                    helper.make_node(
                        "Conv",
                        [x, *tensors(item)],
                        [y],
                        kernel_shape=layer["kernel_size"],
                        strides=layer["stride"],
                        pads=layer["padding"] * 2,  # each dimension's start, then each one's end
                    )
                )
            elif kind in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
                nodes.append(
                    helper.make_node(
                        "MaxPool" if kind.startswith("Max") else "AveragePool",
                        [x],
                        [y],
                        kernel_shape=layer["kernel_size"],
                        strides=layer["stride"],
                    )
                )
            elif kind in ("BatchNorm1d", "BatchNorm2d"):
                n = item.n
                names = [*tensors(item), f"mean{n}", f"var{n}"]
                initializers.extend(numpy_helper.from_array(state[m], m) for m in names[2:])
                nodes.append(
                    helper.make_node("BatchNormalization", [x, *names], [y], epsilon=layer["eps"])
                )
            elif kind == "LayerNorm":
                # LayerNormalization's B (the bias) is optional: one without biases has none.
                nodes.append(
                    helper.make_node(
                        "LayerNormalization",
                        [x, *tensors(item)],
                        [y],
                        axis=1,  # every axis of a sample
                        epsilon=layer["eps"],
                    )
                )
            elif kind == "GELU":
                nodes.extend(gelu(x, y))
            elif kind == "Residual":
                nodes.append(helper.make_node("Add", [x, add(item.branch, x)], [y]))
            else:
                nodes.append(helper.make_node(_ONNX_ELEMENTWISE[kind], [x], [y]))
            x = y
        return x

    if add(_numbered(layers), "input") == "input":  # only Dropout: the input itself
        nodes.append(helper.make_node("Identity", ["input"], [output]))
    else:  # the last node computes the model's output
        nodes[-1].output[0] = output
    return nodes, initializers
