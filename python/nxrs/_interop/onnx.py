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

    A sequence model (section 15.8) takes int64 token ids (batch, T) and outputs (batch, T,
    K) when its last layer's output is a sequence: ``Gather`` of ``E{n}`` (``Embedding``),
    ``Add`` of the ``Slice`` of ``P{n}``'s first ``T`` rows (``PositionalEmbedding``), ``x @
    Wᵀ`` as ``Transpose`` and ``MatMul`` for a ``Dense`` on a sequence (then ``Add`` of
    ``b{n}``), for the attention's projections ``Wqkv{n}``, ``Wo{n}`` and for ``TiedHead``
    (``E{n}``); the attention's heads by ``Split``, ``Reshape`` and ``Transpose``, their scores
    ``MatMul``, ``Mul`` by ``1 / sqrt(f32(h))`` and ``Add`` of the initializer
    ``causal_mask`` (``-inf`` above the diagonal) before ``Softmax`` and ``MatMul`` by the
    values; ``LayerNormalization`` over each token's width (``axis=-1``).
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
        nodes, initializers, per_token = _onnx_layers(onnx, layers, trainer.state_dict(), last)
        shape, name = layers[0]["shape"], "nxrs_layers"
        opset, ir = ONNX_LAYERS_OPSET, _ONNX_LAYERS_IR_VERSION
    # A sequence model reads token ids; its outputs are per token when its last layer's are.
    tokens = layers is not None and layers[1]["type"] == "Embedding"
    outputs = [trainer.sizes[-1]]
    if tokens and per_token:
        outputs = [shape[0], trainer.sizes[-1] // shape[0]]
    if with_softmax:
        nodes.append(helper.make_node("Softmax", [last], [output], axis=-1))
    input_type = onnx.TensorProto.INT64 if tokens else onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", input_type, ["batch", *shape])],
        [helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, ["batch", *outputs])],
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
) -> tuple[list[Any], list[Any], bool]:
    """A layer model's nodes (inference) and initializers, from ``input`` to ``output``, and
    whether the output is a sequence (section 15.8: after an Embedding, until a Flatten)."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes: list[Any] = []
    initializers: list[Any] = []
    sequence = False  # whether the activations are (batch, T, width) sequences
    table = ""  # the Embedding's table, which a TiedHead reads
    tokens = layers[0]["shape"][0]

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

    def ints(name: str, values: list[int]) -> str:
        """An int64 vector initializer (shapes, slice bounds), added once."""
        if all(t.name != name for t in initializers):
            initializers.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def times(x: str, matrix: str, y: str) -> list[Any]:
        """``x @ matrixᵀ`` on the last axis (Gemm takes matrices only): a sequence's Dense
        without bias, attention's projections, the tied head."""
        return [
            helper.make_node("Transpose", [matrix], [f"{y}_{matrix}T"], perm=[1, 0]),
            helper.make_node("MatMul", [x, f"{y}_{matrix}T"], [y]),
        ]

    def attention(x: str, y: str, item: _Numbered) -> list[Any]:
        """Section 15.8's causal self-attention: the heads' scores scaled by ``c = 1 /
        sqrt(f32(h))``, positions after the query's masked out (-inf before the softmax)."""
        wqkv, wo = tensors(item)
        heads, width = item.layer["heads"], state[wo].shape[0]
        h = width // heads
        c = np.float32(1) / np.sqrt(np.float32(h))
        if all(t.name != "causal_mask" for t in initializers):
            mask = np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)
            initializers.append(numpy_helper.from_array(mask, "causal_mask"))
        by_head = ints(f"heads{heads}x{h}", [0, 0, heads, h])  # (batch, T, heads, h)
        q, k, v = (f"{y}_{part}" for part in "qkv")
        return [
            *times(x, wqkv, f"{y}_qkv"),
            helper.make_node(
                "Split", [f"{y}_qkv", ints(f"thirds{width}", [width] * 3)], [q, k, v], axis=2
            ),
            *(helper.make_node("Reshape", [t, by_head], [f"{t}_heads"]) for t in (q, k, v)),
            helper.make_node("Transpose", [f"{q}_heads"], [f"{q}_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", [f"{k}_heads"], [f"{k}_t"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", [f"{v}_heads"], [f"{v}_t"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [f"{q}_t", f"{k}_t"], [f"{y}_dot"]),
            helper.make_node("Mul", [f"{y}_dot", constant(f"scale{h}", c)], [f"{y}_scores"]),
            helper.make_node("Add", [f"{y}_scores", "causal_mask"], [f"{y}_masked"]),
            helper.make_node("Softmax", [f"{y}_masked"], [f"{y}_p"], axis=-1),
            helper.make_node("MatMul", [f"{y}_p", f"{v}_t"], [f"{y}_o"]),
            helper.make_node("Transpose", [f"{y}_o"], [f"{y}_o_t"], perm=[0, 2, 1, 3]),
            helper.make_node(
                "Reshape", [f"{y}_o_t", ints(f"width{width}", [0, 0, width])], [f"{y}_heads"]
            ),
            *times(f"{y}_heads", wo, y),
        ]

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
        nonlocal sequence, table
        for item in items:
            layer, kind, y = item.layer, item.layer["type"], f"h{item.position}"
            if kind == "Dropout":
                continue  # the identity in inference
            if kind == "Embedding":
                (table,) = tensors(item)
                nodes.append(helper.make_node("Gather", [table, x], [y], axis=0))
                sequence = True
            elif kind == "PositionalEmbedding":
                (positions,) = tensors(item)
                bounds = [ints("zero", [0]), ints(f"tokens{tokens}", [tokens])]
                nodes.append(helper.make_node("Slice", [positions, *bounds], [f"{y}_rows"]))
                nodes.append(helper.make_node("Add", [x, f"{y}_rows"], [y]))
            elif kind == "CausalSelfAttention":
                nodes.extend(attention(x, y, item))
            elif kind == "TiedHead":
                nodes.extend(times(x, table, y))
            elif kind == "Dense" and sequence:
                names = tensors(item)
                product = f"{y}_product" if len(names) == 2 else y
                nodes.extend(times(x, names[0], product))
                if len(names) == 2:
                    nodes.append(helper.make_node("Add", [product, names[1]], [y]))
            elif kind == "Dense":
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
                        # every axis of a sample; each token's width in a sequence
                        axis=-1 if sequence else 1,
                        epsilon=layer["eps"],
                    )
                )
            elif kind == "GELU":
                nodes.extend(gelu(x, y))
            elif kind == "Residual":
                nodes.append(helper.make_node("Add", [x, add(item.branch, x)], [y]))
            else:
                nodes.append(helper.make_node(_ONNX_ELEMENTWISE[kind], [x], [y]))
                sequence = sequence and kind != "Flatten"
            x = y
        return x

    if add(_numbered(layers), "input") == "input":  # only Dropout: the input itself
        nodes.append(helper.make_node("Identity", ["input"], [output]))
    else:  # the last node computes the model's output
        nodes[-1].output[0] = output
    return nodes, initializers, sequence
