"""The layer reference (``tests/reference/layers_ref.py``) means what PyTorch means.

These are MEANING checks, not bit checks: the reference's float32 results are compared with
PyTorch's float64 modules and autograd within a tolerance (every layer's forward, input
gradient and parameter gradients, BatchNorm's running statistics and evaluation mode, the
output shapes, and a few training steps of a small model). The bits are the fixture's business
(``layers_ref.py --check``). Also: the reference's refusals happen, its state order and
names, the integer list's equivalence with general_ref, the dropout masks' purity, and (bit for
bit) that the vectorised reference equals a scalar, one-operation-at-a-time reading of the text
for convolution, pooling, BatchNorm, LayerNorm, tanh, sigmoid and GELU, special values included.
Section 15.7 (GELU, Residual, Dense and LayerNorm without biases) is checked the same way, with
its positions, numbering and refusals, and its Φ and φ bit for bit against mpmath.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.reference import general_ref as gr
from tests.reference import layers_ref as lr

F32 = np.float32


def rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> lr.F32Array:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def run_layer(
    spec: dict[str, Any],
    in_shape: tuple[int, ...],
    x: lr.F32Array,
    state: dict[str, lr.F32Array],
    g: lr.F32Array,
    train: bool = True,
    math_name: str = "ieee",
) -> tuple[lr.F32Array, lr.F32Array, dict[str, lr.F32Array], dict[str, lr.F32Array]]:
    """The reference's forward and backward of one layer on a block:
    ``(y, input gradient, block gradients, tensors after)``."""
    layer = lr.build_layer(spec, 1)
    layer.infer(in_shape)
    st = {k: v.copy() for k, v in state.items()}
    ctx = lr.Ctx(gr.Math(math_name), train)
    y, cache = layer.forward(st, x, ctx)
    if not train:
        return y, np.empty(0, F32), {}, st
    gx, grads = layer.backward(st, cache, g, ctx)
    return y, gx, grads, st


def close(a: Any, b: Any, tol: float = 2e-5) -> None:
    a64 = np.asarray(a, dtype=np.float64)
    b64 = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b, dtype=np.float64)
    assert a64.shape == b64.shape, (a64.shape, b64.shape)
    np.testing.assert_allclose(a64, b64, rtol=tol, atol=tol * max(1.0, float(np.abs(b64).max())))


# ---------------------------------------------------------------------------
# Refusals (no torch needed)
# ---------------------------------------------------------------------------


def inp(*shape: int) -> dict[str, Any]:
    return {"type": "Input", "shape": list(shape)}


def conv1d(o: int, k: int, s: int = 1, q: int = 0) -> dict[str, Any]:
    return {"type": "Conv1d", "out_channels": o, "kernel_size": [k], "stride": [s], "padding": [q]}


def conv2d(o: int, k: int, s: int = 1, q: int = 0) -> dict[str, Any]:
    sizes = {"kernel_size": [k, k], "stride": [s, s], "padding": [q, q]}
    return {"type": "Conv2d", "out_channels": o, **sizes}


def avg_pool2d(k: int, s: int) -> dict[str, Any]:
    return {"type": "AvgPool2d", "kernel_size": [k, k], "stride": [s, s]}


DENSE2 = {"type": "Dense", "units": 2}
FLAT = {"type": "Flatten"}


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([inp(1, 10), conv1d(2, 3, q=3), FLAT, DENSE2], "padding"),
        ([inp(1, 10), conv1d(2, 3, q=5), FLAT, DENSE2], "padding"),
        (
            [
                inp(1, 5, 5),
                {
                    "type": "Conv2d",
                    "out_channels": 1,
                    "kernel_size": [3, 2],
                    "stride": [1, 1],
                    "padding": [1, 2],
                },
                FLAT,
                DENSE2,
            ],
            "padding",
        ),
        ([inp(1, 4), conv1d(2, 5), FLAT, DENSE2], "longer than its padded input"),
        ([inp(1, 4), conv1d(2, 7, q=1), FLAT, DENSE2], "longer than its padded input"),
        (
            [inp(2, 3, 3), {"type": "MaxPool2d", "kernel_size": [4, 2], "stride": None}, FLAT],
            "longer than its padded input",
        ),
        ([inp(1, 8), conv1d(2, 3)], "last layer's output must be (K)"),
        ([inp(2, 3, 3), {"type": "ReLU"}], "last layer's output must be (K)"),
        ([inp(1, 8), DENSE2], "does not take the shape (1, 8)"),
        ([inp(8), conv1d(2, 3), FLAT, DENSE2], "does not take the shape (8,)"),
        ([inp(1, 8), {"type": "BatchNorm2d"}, FLAT, DENSE2], "does not take the shape"),
        ([DENSE2], "must start with Input"),
        ([inp(3), inp(3), DENSE2], "only the first layer is an Input"),
        ([inp(3), {"type": "Dropout", "p": 1.0}, DENSE2], "p must be in [0, 1)"),
        ([inp(3), {"type": "BatchNorm1d", "momentum": 1.5}, DENSE2], "momentum"),
        ([inp(3), {"type": "LayerNorm", "eps": 0.0}, DENSE2], "eps"),
        ([inp(1, 8), conv1d(0, 3), FLAT, DENSE2], "out_channels"),
        ([inp(1, 8), conv1d(2, 3, s=0), FLAT, DENSE2], "strides"),
        ([inp(0, 3), FLAT, DENSE2], "sizes must be >= 1"),
        ([inp(3), {"type": "Conv3d"}], "unknown layer type"),
        ([inp(4096, 4097), FLAT, DENSE2], "2^24"),
        # Working cells: 1007^2 positions x 1000^2 kernel cells; 65^2 x 64^2; a padded input of
        # 4098^2 (its 4 positions' columns are small); average pooling's table as the columns.
        ([inp(1, 8, 8), conv2d(1, 1000, q=999), FLAT, DENSE2], "columns of 1014049000000"),
        ([inp(1, 128, 128), conv2d(1, 64), FLAT, DENSE2], "columns of 17305600 cells > 2^24"),
        ([inp(1, 4096, 4096), conv2d(1, 2, s=4096, q=1), FLAT, DENSE2], "padded input of"),
        ([inp(1, 128, 128), avg_pool2d(64, 1), FLAT, DENSE2], "window table of"),
    ],
)
def test_refusals(layers: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        lr.parse_layers(layers)
    assert message in str(info.value)


def test_refusal_names_position_and_type() -> None:
    with pytest.raises(ValueError) as info:
        lr.parse_layers([inp(1, 8), {"type": "ReLU"}, conv1d(2, 9), FLAT, DENSE2])
    assert str(info.value).startswith("layer 2 (Conv1d):")


def test_trainer_config_refusals() -> None:
    layers = [inp(3), DENSE2]
    with pytest.raises(ValueError, match="init"):
        lr.LayerTrainer(layers=layers, init="seed")
    lr.LayerTrainer(layers=layers)  # init "torch" by default
    lr.LayerTrainer(layers=[3, 4, 2], init="seed")  # the integer list keeps section 1
    with pytest.raises(ValueError, match="init"):
        lr.LayerTrainer(layers=[3, 4, 2], init="torch")


def test_integer_list_is_its_layer_list() -> None:
    keys: dict[str, Any] = dict(layers=[4, 5, 3], seed=3, lr=0.01, batch_size=3, grad_block=2)
    x, y = gr.case_data(8, 4, 3, "cross_entropy")
    a, b = gr.Trainer(**keys), lr.LayerTrainer(**keys)
    c = lr.LayerTrainer(**dict(keys, layers=lr.integer_list_layers([4, 5, 3]), init="he"))
    for _ in range(4):
        losses = {gr.bits(t.train_steps(x, y, 1)[0]) for t in (a, b, c)}
        assert len(losses) == 1
        assert len({t.state_hash_hex() for t in (a, b, c)}) == 1
    assert b.tensor_names() == a.tensor_names()


def test_state_order_and_names() -> None:
    tr = lr.LayerTrainer(
        layers=[
            inp(1, 6, 6),
            {"type": "Conv2d", "out_channels": 2, "kernel_size": 3, "stride": 1, "padding": 1},
            {"type": "BatchNorm2d"},
            {"type": "ReLU"},
            FLAT,
            {"type": "LayerNorm"},
            {"type": "BatchNorm1d"},
            DENSE2,
        ]
    )
    params = ["W1", "b1", "gamma2", "beta2", "gamma3", "beta3", "gamma4", "beta4", "W5", "b5"]
    slots = [f"{s}{p}" for p in params for s in ("m", "v")]
    assert tr.tensor_names() == params + slots + ["mean2", "var2", "mean4", "var4"]
    sgd = lr.LayerTrainer(layers=[inp(3), {"type": "BatchNorm1d"}, DENSE2], optimizer="sgd")
    sgd_params = ["gamma1", "beta1", "W2", "b2"]
    assert sgd.tensor_names() == [*sgd_params, *(f"m{p}" for p in sgd_params), "mean1", "var1"]


def test_dropout_mask_rate_and_purity() -> None:
    p = F32(0.3)
    d = lr.dropout_dropped(5, 7, 2, 0, 50, 400, p)
    assert abs(d.mean() - lr.dropout_threshold(p) / 2**24) < 0.01
    # Sample s of a block starting at batch position 10 is sample 10 + s of the batch.
    assert np.array_equal(lr.dropout_dropped(5, 7, 2, 10, 40, 400, p), d[10:])
    assert not np.array_equal(lr.dropout_dropped(5, 8, 2, 0, 50, 400, p), d)
    assert not np.array_equal(lr.dropout_dropped(5, 7, 3, 0, 50, 400, p), d)
    assert not lr.dropout_dropped(5, 7, 2, 0, 5, 40, F32(0)).any()


# ---------------------------------------------------------------------------
# Meaning: against PyTorch in float64
# ---------------------------------------------------------------------------


def torch_mod() -> Any:
    return pytest.importorskip("torch")


def t64(torch: Any, a: lr.F32Array, grad: bool = False) -> Any:
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, requires_grad=grad)


CONVS = [
    ("Conv1d", (2, 9), [3], [2], [1], 3),
    ("Conv1d", (1, 11), [4], [3], [0], 2),
    ("Conv1d", (3, 7), [3], [1], [2], 2),
    ("Conv2d", (2, 5, 7), [3, 2], [2, 3], [1, 1], 2),
    ("Conv2d", (1, 6, 6), [3, 3], [1, 1], [1, 1], 3),
    ("Conv2d", (2, 5, 4), [2, 3], [3, 1], [0, 2], 2),
]


@pytest.mark.parametrize(("kind", "shape", "k", "s", "q", "o"), CONVS)
def test_conv_matches_torch(
    kind: str, shape: tuple[int, ...], k: list[int], s: list[int], q: list[int], o: int
) -> None:
    torch = torch_mod()
    rng = np.random.default_rng(1)
    n = 3
    spec = {"type": kind, "out_channels": o, "kernel_size": k, "stride": s, "padding": q}
    layer = lr.build_layer(spec, 1)
    out = layer.infer(shape)
    x = rand(rng, n, *shape)
    W = rand(rng, o, shape[0], *k, scale=0.5)
    b = rand(rng, o)
    g = rand(rng, n, *out)
    y, gx, grads, _ = run_layer(spec, shape, x, {"W": W, "b": b}, g)
    tx, tW, tb = t64(torch, x, True), t64(torch, W, True), t64(torch, b, True)
    fn = torch.nn.functional.conv1d if kind == "Conv1d" else torch.nn.functional.conv2d
    ty = fn(tx, tW, tb, stride=tuple(s), padding=tuple(q))
    assert tuple(ty.shape[1:]) == out
    (ty * t64(torch, g)).sum().backward()
    close(y, ty)
    close(gx, tx.grad)
    close(grads["W"], tW.grad)
    close(grads["b"], tb.grad)


POOLS = [
    ("MaxPool1d", (2, 8), [3], [2]),
    ("MaxPool1d", (3, 7), [2], None),
    ("MaxPool2d", (2, 5, 6), [2, 3], [1, 2]),
    ("MaxPool2d", (1, 5, 5), [2, 2], None),
    ("AvgPool1d", (2, 9), [3], [2]),
    ("AvgPool2d", (2, 4, 5), [2, 2], [1, 1]),
    ("AvgPool2d", (1, 7, 5), [3, 2], None),
]


@pytest.mark.parametrize(("kind", "shape", "k", "s"), POOLS)
def test_pool_matches_torch(
    kind: str, shape: tuple[int, ...], k: list[int], s: list[int] | None
) -> None:
    torch = torch_mod()
    rng = np.random.default_rng(2)
    n = 2
    spec = {"type": kind, "kernel_size": k, "stride": s}
    layer = lr.build_layer(spec, 1)
    out = layer.infer(shape)
    x = rand(rng, n, *shape)  # no ties
    g = rand(rng, n, *out)
    y, gx, _, _ = run_layer(spec, shape, x, {}, g)
    fn = getattr(torch.nn.functional, kind[:-2].lower().replace("pool", "_pool") + kind[-2:])
    tx = t64(torch, x, True)
    ty = fn(tx, tuple(k), None if s is None else tuple(s))
    assert tuple(ty.shape[1:]) == out
    (ty * t64(torch, g)).sum().backward()
    close(y, ty)
    close(gx, tx.grad)


def test_maxpool_ties_and_nan_rules() -> None:
    # Windows of 3, stride 1: the first maximum wins ties (-0 and +0 tie), the first NaN wins.
    nan = np.float32(np.nan)
    x = np.array([[[1, 3, 3, -0.0, 0.0, nan, 2, nan, 5]]], dtype=F32)
    x[0, 0, 7] = lr.from_u32(np.array([0xFFC00001], dtype=np.uint32))[0]
    spec = {"type": "MaxPool1d", "kernel_size": [3], "stride": [1]}
    g = np.arange(1, 8, dtype=F32).reshape(1, 1, 7)
    y, gx, _, _ = run_layer(spec, (1, 9), x, {}, g)
    yb = lr.u32(y).reshape(-1).tolist()
    assert y[0, 0, :2].tolist() == [3, 3] and lr.u32(y)[0, 0, 2] == lr.u32(np.array([3], F32))[0]
    assert all(v == 0x7FC00000 for v in yb[3:6]) and yb[6] == 0xFFC00001
    # Windows 0..2 choose cell 1 (the first 3), window 3 chooses the NaN at 5, ...
    assert gx.reshape(-1).tolist() == [0, 1 + 2, 3, 0, 0, 4 + 5 + 6, 0, 7, 0]


def test_dense_relu_tanh_sigmoid_match_torch() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(3)
    n = 4
    x = rand(rng, n, 5, scale=2)
    W, b, g = rand(rng, 3, 5), rand(rng, 3), rand(rng, n, 3)
    y, gx, grads, _ = run_layer({"type": "Dense", "units": 3}, (5,), x, {"W": W, "b": b}, g)
    tx, tW, tb = t64(torch, x, True), t64(torch, W, True), t64(torch, b, True)
    ty = torch.nn.functional.linear(tx, tW, tb)
    (ty * t64(torch, g)).sum().backward()
    close(y, ty)
    close(gx, tx.grad)
    close(grads["W"], tW.grad)
    close(grads["b"], tb.grad)
    gs = rand(rng, n, 5)
    for kind, fn in (("ReLU", torch.relu), ("Tanh", torch.tanh), ("Sigmoid", torch.sigmoid)):
        for mname in ("seed", "ieee"):
            y, gx, _, _ = run_layer({"type": kind}, (5,), x, {}, gs, math_name=mname)
            tx = t64(torch, x, True)
            ty = fn(tx)
            (ty * t64(torch, gs)).sum().backward()
            # The seed's exp is a Taylor polynomial: a looser tolerance.
            tol = 2e-5 if mname == "ieee" else 1e-4
            close(y, ty, tol)
            close(gx, tx.grad, tol)


def test_tanh_is_odd_and_keeps_signed_zero() -> None:
    x = np.array([[-0.0, 0.0, 1e-30, -1e-30, 0.3, -0.3, 50, -50, np.inf, -np.inf]], dtype=F32)
    for mname in ("seed", "ieee"):
        y, _, _, _ = run_layer({"type": "Tanh"}, (10,), x, {}, x, math_name=mname)
        assert np.array_equal(lr.u32(y[0, 0::2]) ^ 0x80000000, lr.u32(y[0, 1::2]))
        assert lr.u32(y)[0, 0] == 0x80000000 and y[0, 8] == 1 and y[0, 9] == -1


def test_dropout_scales_kept_cells_like_torch() -> None:
    torch = torch_mod()
    p = 0.375
    x = np.linspace(-3, 3, 2 * 60, dtype=F32).reshape(2, 60)
    layer = lr.build_layer({"type": "Dropout", "p": p}, 2)
    layer.infer((60,))
    ctx = lr.Ctx(gr.Math("ieee"), True, seed=3, step=4, first_sample=0)
    y, mask = layer.forward({}, x, ctx)
    gx, _ = layer.backward({}, mask, np.ones_like(x), ctx)
    # PyTorch's dropout in training mode scales the kept cells by 1 / (1 - p).
    torch.manual_seed(0)
    ty = torch.nn.functional.dropout(t64(torch, x), p, training=True)
    tkept = ty.numpy() != 0
    np.testing.assert_allclose(ty.numpy()[tkept], x[tkept].astype(np.float64) / (1 - p), 1e-6)
    kept = ~mask
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(y[kept], x[kept].astype(np.float64) / (1 - p), 1e-6)
    assert (lr.u32(y[mask]) == 0).all() and (lr.u32(gx[mask]) == 0).all()
    np.testing.assert_allclose(gx[kept], 1 / (1 - p), 1e-6)
    ye, _ = layer.forward({}, x, lr.Ctx(gr.Math("ieee"), False))
    assert np.array_equal(lr.u32(ye), lr.u32(x))


BNS = [
    ("BatchNorm1d", (3,), 4, 0.1, 1e-5),
    ("BatchNorm1d", (2, 5), 3, 0.3, 1e-3),
    ("BatchNorm2d", (2, 3, 3), 2, 0.1, 1e-5),
    ("BatchNorm2d", (3, 2, 4), 3, 1.0, 1e-2),
]


@pytest.mark.parametrize(("kind", "shape", "n", "momentum", "eps"), BNS)
def test_batchnorm_matches_torch(
    kind: str, shape: tuple[int, ...], n: int, momentum: float, eps: float
) -> None:
    torch = torch_mod()
    rng = np.random.default_rng(4)
    c = shape[0]
    x = rand(rng, n, *shape, scale=3)
    g = rand(rng, n, *shape)
    st = {
        "gamma": rand(rng, c),
        "beta": rand(rng, c),
        "mean": rand(rng, c),
        "var": (np.abs(rand(rng, c)) + F32(0.5)).astype(F32),
    }
    spec = {"type": kind, "momentum": momentum, "eps": eps}
    y, gx, grads, after = run_layer(spec, shape, x, st, g)
    mod = getattr(torch.nn, kind)(c, eps=eps, momentum=momentum).double()
    with torch.no_grad():
        mod.weight.copy_(t64(torch, st["gamma"]))
        mod.bias.copy_(t64(torch, st["beta"]))
        mod.running_mean.copy_(t64(torch, st["mean"]))
        mod.running_var.copy_(t64(torch, st["var"]))
    mod.train()
    tx = t64(torch, x, True)
    ty = mod(tx)
    (ty * t64(torch, g)).sum().backward()
    tol = 1e-4  # x̂ divides by a small r
    close(y, ty, tol)
    close(gx, tx.grad, tol)
    close(grads["gamma"], mod.weight.grad, tol)
    close(grads["beta"], mod.bias.grad, tol)
    close(after["mean"], mod.running_mean, tol)
    close(after["var"], mod.running_var, tol)
    # Evaluation mode: the running statistics (here the initial ones).
    ye, _, _, _ = run_layer(spec, shape, x, st, g, train=False)
    mod.eval()
    with torch.no_grad():
        mod.running_mean.copy_(t64(torch, st["mean"]))
        mod.running_var.copy_(t64(torch, st["var"]))
        close(ye, mod(t64(torch, x)), tol)


def test_batchnorm_single_value_keeps_running_stats() -> None:
    st = {
        "gamma": np.ones(3, F32),
        "beta": np.zeros(3, F32),
        "mean": np.full(3, 0.25, F32),
        "var": np.full(3, 2.0, F32),
    }
    x = np.array([[1.0, -2.0, 3.0]], dtype=F32)
    y, _, _, after = run_layer({"type": "BatchNorm1d"}, (3,), x, st, x)
    assert (y == 0).all() and np.array_equal(after["mean"], st["mean"])
    assert np.array_equal(after["var"], st["var"])


@pytest.mark.parametrize("shape", [(6,), (2, 5), (2, 3, 2)])
def test_layernorm_matches_torch(shape: tuple[int, ...]) -> None:
    torch = torch_mod()
    rng = np.random.default_rng(5)
    n = 3
    x = rand(rng, n, *shape, scale=2)
    g = rand(rng, n, *shape)
    st = {"gamma": rand(rng, *shape), "beta": rand(rng, *shape)}
    y, gx, grads, _ = run_layer({"type": "LayerNorm", "eps": 1e-5}, shape, x, st, g)
    mod = torch.nn.LayerNorm(shape, eps=1e-5).double()
    with torch.no_grad():
        mod.weight.copy_(t64(torch, st["gamma"]))
        mod.bias.copy_(t64(torch, st["beta"]))
    tx = t64(torch, x, True)
    ty = mod(tx)
    (ty * t64(torch, g)).sum().backward()
    close(y, ty, 1e-4)
    close(gx, tx.grad, 1e-4)
    close(grads["gamma"], mod.weight.grad, 1e-4)
    close(grads["beta"], mod.bias.grad, 1e-4)


SHAPES = [
    (conv1d(4, 5, 2, 1), (1, 40)),
    (conv1d(2, 3, 3, 2), (3, 10)),
    (conv1d(2, 10, 1, 0), (3, 10)),
    (
        {
            "type": "Conv2d",
            "out_channels": 2,
            "kernel_size": [3, 1],
            "stride": [2, 2],
            "padding": [1, 0],
        },
        (1, 8, 7),
    ),
    ({"type": "Conv2d", "out_channels": 2, "kernel_size": 4, "stride": 3, "padding": 2}, (2, 9, 5)),
    ({"type": "MaxPool1d", "kernel_size": [4], "stride": [3]}, (2, 13)),
    ({"type": "AvgPool1d", "kernel_size": 5, "stride": None}, (2, 14)),
    ({"type": "MaxPool2d", "kernel_size": [3, 2], "stride": [1, 3]}, (1, 7, 8)),
    ({"type": "AvgPool2d", "kernel_size": 3, "stride": 2}, (2, 9, 6)),
]


@pytest.mark.parametrize(("spec", "shape"), SHAPES)
def test_output_shapes_match_torch(spec: dict[str, Any], shape: tuple[int, ...]) -> None:
    torch = torch_mod()
    layer = lr.build_layer(spec, 1)
    out = layer.infer(shape)
    kind = spec["type"]
    args = {k: v for k, v in lr.build_layer(spec, 1).to_json().items() if k != "type"}
    if "out_channels" in args:
        mod = getattr(torch.nn, kind)(
            shape[0], **{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}
        )
    else:
        mod = getattr(torch.nn, kind)(**{k: tuple(v) for k, v in args.items()})
    assert tuple(mod(torch.zeros(1, *shape)).shape[1:]) == out


# ---------------------------------------------------------------------------
# A few training steps track PyTorch
# ---------------------------------------------------------------------------


def residual_module(torch: Any, branch: Any) -> Any:
    """``x + branch(x)`` as a torch module (15.7's Residual)."""

    class Residual(torch.nn.Module):  # type: ignore[misc,name-defined,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            self.branch = branch

        def forward(self, x: Any) -> Any:
            return x + self.branch(x)

    return Residual()


def torch_layers(torch: Any, layers: list[lr.Layer], states: list[lr.State]) -> list[Any]:
    """The layers as float64 torch modules holding the reference's tensors (``states`` by
    depth-first position, as the reference keeps them); a Residual's branch is nested."""
    mods = []
    for layer in layers:
        spec = layer.to_json()
        kind = spec.pop("type")
        if isinstance(layer, lr.Residual):
            branch = torch.nn.Sequential(*torch_layers(torch, layer.layers, states))
            mods.append(residual_module(torch, branch))
            continue
        st = states[layer.position - 1]
        if isinstance(layer, lr.Dense):
            m = torch.nn.Linear(layer.in_shape[0], layer.units, bias=layer.bias)
        elif kind in ("Conv1d", "Conv2d"):
            m = getattr(torch.nn, kind)(
                layer.in_shape[0],
                spec["out_channels"],
                tuple(spec["kernel_size"]),
                tuple(spec["stride"]),
                tuple(spec["padding"]),
            )
        elif kind.startswith(("MaxPool", "AvgPool")):
            m = getattr(torch.nn, kind)(tuple(spec["kernel_size"]), tuple(spec["stride"]))
        elif kind.startswith("BatchNorm"):
            m = getattr(torch.nn, kind)(layer.in_shape[0], spec["eps"], spec["momentum"])
        elif isinstance(layer, lr.LayerNorm):
            m = torch.nn.LayerNorm(layer.in_shape, spec["eps"], bias=layer.bias)
        else:
            m = getattr(torch.nn, kind)()
        m = m.double()
        with torch.no_grad():
            for name, tname in (
                ("W", "weight"),
                ("b", "bias"),
                ("gamma", "weight"),
                ("beta", "bias"),
            ):
                if name in st:
                    getattr(m, tname).copy_(t64(torch, st[name]))
            for name, tname in (("mean", "running_mean"), ("var", "running_var")):
                if name in st:
                    getattr(m, tname).copy_(t64(torch, st[name]))
        mods.append(m)
    return mods


def torch_model(torch: Any, tr: lr.LayerTrainer) -> Any:
    """The same model as ``torch.nn.Sequential`` in float64, from the reference's tensors."""
    mods = torch_layers(torch, tr.net.layers, tr.states)
    return torch.nn.Sequential(torch.nn.Unflatten(1, tr.net.input_shape), *mods)


TRACK = [
    (
        [
            inp(1, 12),
            conv1d(3, 3, 1, 1),
            {"type": "ReLU"},
            {"type": "MaxPool1d", "kernel_size": [2], "stride": [2]},
            FLAT,
            {"type": "Dense", "units": 3},
        ],
        "cross_entropy",
        "adam",
    ),
    (
        [
            inp(1, 6, 6),
            {"type": "Conv2d", "out_channels": 2, "kernel_size": 3, "stride": 1, "padding": 1},
            {"type": "BatchNorm2d"},
            {"type": "ReLU"},
            {"type": "AvgPool2d", "kernel_size": 2, "stride": 2},
            FLAT,
            {"type": "Dense", "units": 3},
        ],
        "cross_entropy",
        "sgd",
    ),
    (
        [
            inp(5),
            {"type": "Dense", "units": 6},
            {"type": "LayerNorm"},
            {"type": "Tanh"},
            {"type": "Dense", "units": 4},
            {"type": "Sigmoid"},
            {"type": "Dense", "units": 2},
        ],
        "mse",
        "adam",
    ),
    (
        [
            inp(6),
            {"type": "Dense", "units": 8},
            {
                "type": "Residual",
                "layers": [
                    {"type": "LayerNorm", "bias": False},
                    {"type": "Dense", "units": 8, "bias": False},
                    {"type": "GELU"},
                    {
                        "type": "Residual",
                        "layers": [{"type": "Dense", "units": 8}, {"type": "Tanh"}],
                    },
                ],
            },
            {"type": "GELU"},
            {"type": "Dense", "units": 3},
        ],
        "cross_entropy",
        "adam",
    ),
]


#: Steps, learning rate and tolerance of the tracking runs: float32 against float64 drifts
#: far less than 1e-4 here, while a wrong term (e.g. BatchNorm's gamma left out of the forward
#: pass) moves some parameter by more.
STEPS, LR, TRACK_TOL = 9, 0.05, 1e-4


@pytest.mark.parametrize(("layers", "loss", "opt"), TRACK)
def test_training_tracks_torch(layers: list[dict[str, Any]], loss: str, opt: str) -> None:
    torch = torch_mod()
    keys: dict[str, Any] = dict(
        layers=layers, loss=loss, optimizer=opt, lr=LR, batch_size=4, shuffle=False, seed=2
    )
    if opt == "sgd":
        keys["momentum"] = 0.9
    tr = lr.LayerTrainer(**keys)
    n = 12
    x, y = gr.case_data(n, math.prod(tr.net.input_shape), tr.net.output_size, loss)
    model = torch_model(torch, tr)
    if opt == "adam":
        o = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    else:
        o = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    model.train()
    for step in range(STEPS):
        b = step % 3
        xb, yb = x[4 * b : 4 * b + 4], y[4 * b : 4 * b + 4]
        tr.train_steps(x, y, 1)
        o.zero_grad()
        out = model(t64(torch, xb))
        if loss == "mse":
            lt = torch.nn.functional.mse_loss(out, t64(torch, yb))
        else:
            lt = torch.nn.functional.cross_entropy(out, torch.tensor(yb))
        lt.backward()
        o.step()
    ours = dict(zip(tr.tensor_names(), tr.tensors()))
    theirs = [p for p in model.parameters()]
    names = tr.net.param_names()
    assert len(theirs) == len(names)
    for name, p in zip(names, theirs):
        close(ours[name], p, TRACK_TOL)
    model.eval()
    with torch.no_grad():
        close(
            tr.predict_proba(x),
            torch.softmax(model(t64(torch, x)), 1) if loss != "mse" else model(t64(torch, x)),
            TRACK_TOL,
        )


# ---------------------------------------------------------------------------
# The vectorised reference equals a scalar reading of the text, bit for bit
# ---------------------------------------------------------------------------
#
# One binary32 operation at a time, loops in the text's order: this checks that vectorising
# across independent elements kept every chain's order (an axis mixed up, a fold started from
# the wrong term) on inputs with NaN, infinities, signed zeros and subnormals. NaN results
# follow section 14 (the first NaN operand quieted, else 0xFFC00000), written here on scalars
# independently of the reference's array version.


def f(v: Any) -> np.float32:
    return np.float32(v)


def _bits_of(v: np.float32) -> int:
    return int(np.array([v], dtype=F32).view(np.uint32)[0])


def _from_bits(b: int) -> np.float32:
    return np.array([b], dtype=np.uint32).view(F32)[0]


def op(kind: str, a: Any, b: Any) -> np.float32:
    """One binary32 ``a kind b`` with section 14's NaN."""
    a, b = f(a), f(b)
    for v in (a, b):
        if np.isnan(v):
            return _from_bits(_bits_of(v) | 0x00400000)
    with np.errstate(all="ignore"):
        r = f({"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[kind](a, b))
    return _from_bits(0xFFC00000) if np.isnan(r) else r


def A(a: Any, b: Any) -> np.float32:
    return op("+", a, b)


def S(a: Any, b: Any) -> np.float32:
    return op("-", a, b)


def M(a: Any, b: Any) -> np.float32:
    return op("*", a, b)


def D(a: Any, b: Any) -> np.float32:
    return op("/", a, b)


def same(got: Any, want: Any) -> bool:
    return bool(np.array_equal(lr.u32(np.asarray(got, F32)), lr.u32(np.asarray(want, F32))))


def specials_input(rng: np.random.Generator, *shape: int) -> lr.F32Array:
    x = rand(rng, *shape)
    flat = x.reshape(-1)
    picks = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -3e-39]
    count = min(len(picks), flat.size // 3)
    for i, v in zip(rng.choice(flat.size, size=count, replace=False), picks):
        flat[i] = v
    flat[flat.view(np.uint32) == 0xFFC00000] = _from_bits(0xFFC00123)  # a payload to follow
    return x


def scalar_conv(
    x: lr.F32Array,
    W: lr.F32Array,
    b: lr.F32Array,
    g: lr.F32Array,
    k: tuple[int, int],
    s: tuple[int, int],
    q: tuple[int, int],
) -> tuple[lr.F32Array, lr.F32Array, lr.F32Array, lr.F32Array]:
    """2-D ``(N, C, H, W)`` convolution straight from sections 15.2 and 15.3."""
    n, c, h, w = x.shape
    o_n = W.shape[0]
    Wf = W.reshape(o_n, -1)
    ho, wo = (h + 2 * q[0] - k[0]) // s[0] + 1, (w + 2 * q[1] - k[1]) // s[1] + 1
    y = np.zeros((n, o_n, ho * wo), F32)
    gx = np.zeros_like(x)
    gW = np.zeros_like(Wf)
    gb = np.zeros_like(b)
    first = True
    for si in range(n):
        received: dict[tuple[int, int, int], list[np.float32]] = {}
        for t in range(ho * wo):
            ty, tx = divmod(t, wo)
            col: list[np.float32] = []
            where: list[tuple[int, int, int] | None] = []
            for ci in range(c):
                for dy in range(k[0]):
                    for dx in range(k[1]):
                        r, cc = ty * s[0] + dy - q[0], tx * s[1] + dx - q[1]
                        inside = 0 <= r < h and 0 <= cc < w
                        col.append(x[si, ci, r, cc] if inside else f(0.0))
                        where.append((ci, r, cc) if inside else None)
            d = g[si].reshape(o_n, -1)[:, t]
            for o in range(o_n):
                z = b[o]
                for j, v in enumerate(col):
                    z = A(z, M(Wf[o, j], v))
                y[si, o, t] = z
            for j, cell in enumerate(where):
                hj = f(0.0)
                for o in range(o_n):
                    hj = A(hj, M(Wf[o, j], d[o]))
                if cell is not None:
                    received.setdefault(cell, []).append(hj)
            for o in range(o_n):
                gb[o] = d[o] if first else A(gb[o], d[o])
                for j, v in enumerate(col):
                    gW[o, j] = M(d[o], v) if first else A(gW[o, j], M(d[o], v))
            first = False
        for (ci, r, cc), terms in received.items():
            acc = f(0.0)
            for v in terms:
                acc = A(acc, v)
            gx[si, ci, r, cc] = acc
    return y.reshape(n, o_n, ho, wo), gx, gW.reshape(W.shape), gb


@pytest.mark.parametrize(
    ("shape", "k", "s", "q"),
    [
        ((2, 5, 6), (3, 2), (2, 1), (1, 1)),
        ((1, 4, 4), (2, 2), (1, 3), (1, 0)),
        ((3, 1, 9), (1, 4), (1, 2), (0, 3)),
    ],
)
def test_conv_equals_scalar_reading(
    shape: tuple[int, int, int], k: tuple[int, int], s: tuple[int, int], q: tuple[int, int]
) -> None:
    rng = np.random.default_rng(7)
    n, o = 2, 3
    x = specials_input(rng, n, *shape)
    W = specials_input(rng, o, shape[0], *k)
    b = rand(rng, o)
    spec = {
        "type": "Conv2d",
        "out_channels": o,
        "kernel_size": list(k),
        "stride": list(s),
        "padding": list(q),
    }
    layer = lr.build_layer(spec, 1)
    out = layer.infer(shape)
    g = specials_input(rng, n, *out)
    y, gx, grads, _ = run_layer(spec, shape, x, {"W": W, "b": b}, g)
    ey, egx, egW, egb = scalar_conv(x, W, b, g, k, s, q)
    assert same(y, ey) and same(gx, egx) and same(grads["W"], egW) and same(grads["b"], egb)
    if shape[1] == 1:  # the same as Conv1d
        spec1 = {
            "type": "Conv1d",
            "out_channels": o,
            "kernel_size": [k[1]],
            "stride": [s[1]],
            "padding": [q[1]],
        }
        y1, gx1, g1, _ = run_layer(
            spec1, (shape[0], shape[2]), x[:, :, 0], {"W": W[:, :, 0], "b": b}, g[:, :, 0]
        )
        assert same(y1, ey[:, :, 0]) and same(gx1, egx[:, :, 0]) and same(g1["W"], egW[:, :, 0])


def scalar_norm(
    vals: list[np.float32], eps: np.float32
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """``μ``, ``σ²``, the sum of squares and ``r`` over ``vals`` in order (from the first)."""
    n = gr.f32i(len(vals))
    acc = vals[0]
    for v in vals[1:]:
        acc = A(acc, v)
    mu = D(acc, n)
    ss = M(S(vals[0], mu), S(vals[0], mu))
    for v in vals[1:]:
        ss = A(ss, M(S(v, mu), S(v, mu)))
    var = D(ss, n)
    with np.errstate(all="ignore"):
        r = f(np.sqrt(A(var, eps)))
    return mu, var, ss, r


@pytest.mark.parametrize(("shape", "n"), [((3,), 16), ((2, 9), 5), ((2, 4, 3), 3)])
def test_batchnorm_equals_scalar_reading(shape: tuple[int, ...], n: int) -> None:
    rng = np.random.default_rng(8)
    c = shape[0]
    x = specials_input(rng, n, *shape) if len(shape) == 3 else rand(rng, n, *shape, scale=3)
    g = specials_input(rng, n, *shape)
    st = {
        "gamma": rand(rng, c),
        "beta": rand(rng, c),
        "mean": rand(rng, c),
        "var": np.full(c, 1.5, F32),
    }
    kind = "BatchNorm2d" if len(shape) == 3 else "BatchNorm1d"
    y, gx, grads, after = run_layer({"type": kind, "momentum": 0.3, "eps": 1e-3}, shape, x, st, g)
    eps, mom = f(1e-3), f(0.3)
    xr, gv, yr, gxr = (v.reshape(n, c, -1) for v in (x, g, y, gx))
    for ci in range(c):
        cells = [(si, p) for si in range(n) for p in range(xr.shape[2])]  # samples, positions
        vals = [xr[si, ci, p] for si, p in cells]
        gs = [gv[si, ci, p] for si, p in cells]
        mu, _, ss, r = scalar_norm(vals, eps)
        xh = [D(S(v, mu), r) for v in vals]
        ds = [M(gi, st["gamma"][ci]) for gi in gs]
        nn = gr.f32i(len(vals))
        a_sum, m_sum = ds[0], M(ds[0], xh[0])
        gb, gg = gs[0], M(gs[0], xh[0])
        for i in range(1, len(vals)):
            a_sum, m_sum = A(a_sum, ds[i]), A(m_sum, M(ds[i], xh[i]))
            gb, gg = A(gb, gs[i]), A(gg, M(gs[i], xh[i]))
        a_mean, m_mean = D(a_sum, nn), D(m_sum, nn)
        for i, (si, p) in enumerate(cells):
            assert same(yr[si, ci, p], A(M(st["gamma"][ci], xh[i]), st["beta"][ci]))
            assert same(gxr[si, ci, p], D(S(S(ds[i], a_mean), M(xh[i], m_mean)), r))
        assert same(grads["beta"][ci], gb) and same(grads["gamma"][ci], gg)
        keep = S(f(1), mom)
        assert same(after["mean"][ci], A(M(keep, st["mean"][ci]), M(mom, mu)))
        unbiased = D(ss, gr.f32i(len(vals) - 1))
        assert same(after["var"][ci], A(M(keep, st["var"][ci]), M(mom, unbiased)))


def test_layernorm_equals_scalar_reading() -> None:
    rng = np.random.default_rng(9)
    shape, n = (3, 4, 3), 5
    x = rand(rng, n, *shape, scale=3)
    g = specials_input(rng, n, *shape)
    st = {"gamma": rand(rng, *shape), "beta": rand(rng, *shape)}
    y, gx, grads, _ = run_layer({"type": "LayerNorm", "eps": 1e-5}, shape, x, st, g)
    eps = f(1e-5)
    gam, bet = st["gamma"].reshape(-1), st["beta"].reshape(-1)
    gg = np.zeros(gam.size, F32)
    gb = np.zeros(gam.size, F32)
    for si in range(n):
        vals = list(x[si].reshape(-1))
        gs = g[si].reshape(-1)
        mu, _, _, r = scalar_norm(vals, eps)
        xh = [D(S(v, mu), r) for v in vals]
        ds = [M(gs[i], gam[i]) for i in range(len(vals))]
        a_sum, m_sum = ds[0], M(ds[0], xh[0])
        for i in range(1, len(vals)):
            a_sum, m_sum = A(a_sum, ds[i]), A(m_sum, M(ds[i], xh[i]))
        nn = gr.f32i(len(vals))
        a_mean, m_mean = D(a_sum, nn), D(m_sum, nn)
        for i in range(len(vals)):
            assert same(y[si].reshape(-1)[i], A(M(gam[i], xh[i]), bet[i]))
            assert same(gx[si].reshape(-1)[i], D(S(S(ds[i], a_mean), M(xh[i], m_mean)), r))
            term_g, term_b = M(gs[i], xh[i]), gs[i]
            gg[i] = term_g if si == 0 else A(gg[i], term_g)
            gb[i] = term_b if si == 0 else A(gb[i], term_b)
    assert same(grads["gamma"].reshape(-1), gg) and same(grads["beta"].reshape(-1), gb)


@pytest.mark.parametrize(
    ("kind", "shape", "k", "s"),
    [
        ("MaxPool2d", (2, 5, 6), (2, 3), (1, 2)),
        ("AvgPool2d", (2, 5, 6), (3, 2), (2, 1)),
        ("MaxPool2d", (1, 4, 4), (3, 3), (1, 1)),
    ],
)
def test_pool_equals_scalar_reading(
    kind: str, shape: tuple[int, int, int], k: tuple[int, int], s: tuple[int, int]
) -> None:
    rng = np.random.default_rng(10)
    n = 2
    x = specials_input(rng, n, *shape)
    x[0, 0, 1, :3] = np.array([-0.0, 0.0, -0.0], F32)  # ties of zeros
    spec = {"type": kind, "kernel_size": list(k), "stride": list(s)}
    layer = lr.build_layer(spec, 1)
    out = layer.infer(shape)
    g = specials_input(rng, n, *out)
    y, gx, _, _ = run_layer(spec, shape, x, {}, g)
    c, h, w = shape
    cells_n = gr.f32i(k[0] * k[1])
    for si in range(n):
        for ci in range(c):
            received: dict[tuple[int, int], list[np.float32]] = {}
            for t in range(out[1] * out[2]):
                ty, tx = divmod(t, out[2])
                cells = [
                    (ty * s[0] + dy, tx * s[1] + dx) for dy in range(k[0]) for dx in range(k[1])
                ]
                vals = [x[si, ci, r, cc] for r, cc in cells]
                gt = g[si, ci, ty, tx]
                if kind == "MaxPool2d":
                    i = 0
                    for j in range(1, len(vals)):
                        if vals[j] > vals[i] or (np.isnan(vals[j]) and not np.isnan(vals[i])):
                            i = j
                    want = vals[i]
                    received.setdefault(cells[i], []).append(gt)
                else:
                    acc = vals[0]
                    for v in vals[1:]:
                        acc = A(acc, v)
                    want = D(acc, cells_n)
                    share = D(gt, cells_n)
                    for cell in cells:
                        received.setdefault(cell, []).append(share)
                assert same(y[si, ci, ty, tx], want)
            for r in range(h):
                for cc in range(w):
                    acc = f(0.0)
                    for v in received.get((r, cc), []):
                        acc = A(acc, v)
                    assert same(gx[si, ci, r, cc], acc)


@pytest.mark.parametrize("kind", ["Tanh", "Sigmoid"])
@pytest.mark.parametrize("math_name", ["seed", "ieee"])
def test_activations_equal_scalar_reading(kind: str, math_name: str) -> None:
    rng = np.random.default_rng(11)
    x = specials_input(rng, 3, 9)
    g = specials_input(rng, 3, 9)
    y, gx, _, _ = run_layer({"type": kind}, (9,), x, {}, g, math_name=math_name)
    m = gr.Math(math_name)

    def exp(v: np.float32) -> np.float32:
        return m.exp(np.array([v], dtype=F32))[0]

    for xv, gv, yv, gxv in zip(x.reshape(-1), g.reshape(-1), y.reshape(-1), gx.reshape(-1)):
        bx = _bits_of(xv)
        if kind == "Sigmoid":
            want = D(f(1), A(f(1), exp(_from_bits(bx ^ 0x80000000))))
            want_g = M(gv, M(want, S(f(1), want)))
        else:
            a = _from_bits(bx & 0x7FFFFFFF)
            t = exp(_from_bits(_bits_of(A(a, a)) ^ 0x80000000))
            r = D(S(f(1), t), A(f(1), t))
            want = _from_bits((_bits_of(r) & 0x7FFFFFFF) | (bx & 0x80000000))
            want_g = M(gv, S(f(1), M(want, want)))
        assert same(yv, want) and same(gxv, want_g)


# ---------------------------------------------------------------------------
# Section 15.7: GELU, Residual, layers without biases
# ---------------------------------------------------------------------------


def mp_round_f32(v: Any) -> np.float32:
    """A non-negative mpmath value rounded once to binary32 (nearest, ties to even), by
    scaling to the binary32 grid: an integer count of ulps (subnormals: of 2^-149)."""
    import mpmath

    if v == 0:
        return f(0.0)
    _, k = mpmath.frexp(v)  # v = m * 2^k, 1/2 <= m < 1
    e = max(int(k) - 1, -126)  # the binade's exponent (subnormals share -126's ulp)
    q = mpmath.ldexp(v, 23 - e)  # v in ulps of the binade
    n = mpmath.floor(q)
    frac = q - n
    assert abs(frac - mpmath.mpf(0.5)) > mpmath.mpf(2) ** -100, "too close to a midpoint"
    if frac > 0.5 or (frac == 0.5 and int(n) % 2 == 1):
        n += 1
    with np.errstate(over="ignore"):
        return f(float(mpmath.ldexp(n, e - 23)))


def mp_normal(fn: str, x: np.float32) -> np.float32:
    """Section 2's ``normal_cdf`` / ``normal_pdf`` of a binary32, by mpmath at 200 bits."""
    import mpmath

    b = _bits_of(x)
    if np.isnan(x):
        return _from_bits(b | 0x00400000)
    if np.isinf(x):
        return f(1.0) if fn == "cdf" and x > 0 else f(0.0)
    with mpmath.workprec(200):
        t = mpmath.mpf(float(x))
        if fn == "cdf":
            v = mpmath.erfc(-t / mpmath.sqrt(2)) / 2
        else:
            v = mpmath.exp(-(t * t) / 2) / mpmath.sqrt(2 * mpmath.pi)
        return mp_round_f32(v)


def normal_test_inputs() -> lr.F32Array:
    """Random binary32 inputs over every range where Φ or φ changes (to underflow and to 1),
    the cells whose binary64 Φ or φ lies nearest a binary32 rounding boundary among many
    random ones (the reference's high-precision path), and special values."""
    rng = np.random.default_rng(12)
    wide = rng.uniform(-16, 16, 1500)
    tails = np.concatenate([rng.uniform(-14.5, -12.5, 400), rng.uniform(12.5, 14.5, 200)])
    near_one = rng.uniform(5, 6, 100)
    small = rng.uniform(-1, 1, 200) * 2.0 ** rng.integers(-140, 0, 200)
    many = rng.uniform(-15, 15, 200_000).astype(F32).astype(np.float64)
    cdf64 = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in many])
    pdf64 = np.exp(-(many * many) / 2) / math.sqrt(2 * math.pi)
    hard = []
    for y in (cdf64, pdf64):
        y32 = y.astype(F32)
        up = np.nextafter(y32, F32(np.inf)).astype(np.float64)
        down = np.nextafter(y32, F32(-np.inf)).astype(np.float64)
        c = y32.astype(np.float64)
        dist = np.minimum(np.abs(y - (c + up) / 2), np.abs(y - (c + down) / 2)) / y
        hard.append(many[np.argsort(dist)[:150]])
    specials = [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38]
    specials += [3.4028235e38, -3.4028235e38, 1.0, -1.0, 5.4, -14.2, 14.2, 38.0, -38.0]
    x = np.concatenate([wide, tails, near_one, small, *hard, specials]).astype(F32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FFFFFFF], np.uint32)
    return np.concatenate([x, nans.view(F32)])


def test_normal_cdf_and_pdf_are_correctly_rounded() -> None:
    pytest.importorskip("mpmath")
    x = normal_test_inputs()
    lr._normal_bits.cache_clear()  # so every cell is computed here, none remembered
    hard_before = dict(lr.NORMAL_HARD_CASES)
    cdf, pdf = lr.normal_cdf(x), lr.normal_pdf(x)
    bad = [
        (_bits_of(xv), fn)
        for xv, c, p in zip(x, cdf, pdf)
        for fn, got in (("cdf", c), ("pdf", p))
        if not same(got, mp_normal(fn, xv))
    ]
    assert bad == []
    # The nearest-boundary inputs took the high-precision path, for both functions.
    assert all(lr.NORMAL_HARD_CASES[k] > hard_before[k] for k in hard_before)
    # Section 2's fixed values, as bits.
    fixed = lr.u32(lr.normal_cdf(np.array([0.0, -0.0, np.inf, -np.inf], F32)).astype(F32)).tolist()
    assert fixed == [0x3F000000, 0x3F000000, 0x3F800000, 0]
    assert lr.u32(lr.normal_pdf(np.array([np.inf, -np.inf], F32))).tolist() == [0, 0]
    nan_in = np.array([0x7F800001, 0xFFA00000], np.uint32).view(F32)
    for fn in (lr.normal_cdf, lr.normal_pdf):
        assert lr.u32(fn(nan_in)).tolist() == [0x7FC00001, 0xFFE00000]


def test_gelu_matches_torch() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(13)
    x = rand(rng, 4, 2, 7, scale=3)
    g = rand(rng, 4, 2, 7)
    for mname in ("seed", "ieee"):  # Φ and φ have one form: the settings agree
        y, gx, grads, _ = run_layer({"type": "GELU"}, (2, 7), x, {}, g, math_name=mname)
        assert grads == {}
        tx = t64(torch, x, True)
        ty = torch.nn.functional.gelu(tx, approximate="none")
        (ty * t64(torch, g)).sum().backward()
        close(y, ty)
        close(gx, tx.grad)


def test_layers_without_biases_match_torch() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(14)
    n = 4
    x, W, g = rand(rng, n, 5, scale=2), rand(rng, 3, 5), rand(rng, n, 3)
    spec = {"type": "Dense", "units": 3, "bias": False}
    y, gx, grads, _ = run_layer(spec, (5,), x, {"W": W}, g)
    assert sorted(grads) == ["W"]
    tx, tW = t64(torch, x, True), t64(torch, W, True)
    ty = torch.nn.functional.linear(tx, tW)
    (ty * t64(torch, g)).sum().backward()
    close(y, ty)
    close(gx, tx.grad)
    close(grads["W"], tW.grad)
    shape = (2, 3, 2)
    x, g, gamma = rand(rng, n, *shape, scale=2), rand(rng, n, *shape), rand(rng, *shape)
    spec = {"type": "LayerNorm", "eps": 1e-5, "bias": False}
    y, gx, grads, _ = run_layer(spec, shape, x, {"gamma": gamma}, g)
    assert sorted(grads) == ["gamma"]
    mod = torch.nn.LayerNorm(shape, eps=1e-5, bias=False).double()
    assert [name for name, _ in mod.named_parameters()] == ["weight"]
    with torch.no_grad():
        mod.weight.copy_(t64(torch, gamma))
    tx = t64(torch, x, True)
    ty = mod(tx)
    (ty * t64(torch, g)).sum().backward()
    close(y, ty, 1e-4)
    close(gx, tx.grad, 1e-4)
    close(grads["gamma"], mod.weight.grad, 1e-4)


def res(*layers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Residual", "layers": list(layers)}


GELU = {"type": "GELU"}


def random_states(net: lr.Network, rng: np.random.Generator) -> list[lr.State]:
    return [{name: rand(rng, *shape) for name, shape in layer.params()} for layer in net.flat]


def test_nested_residual_matches_torch() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(15)
    layers = [
        inp(6),
        res(
            {"type": "LayerNorm", "eps": 1e-5},
            {"type": "Dense", "units": 9},
            GELU,
            res({"type": "Dense", "units": 9, "bias": False}, {"type": "Tanh"}),
            {"type": "Dense", "units": 6},
        ),
        res({"type": "LayerNorm", "eps": 1e-5, "bias": False}),
        {"type": "Dense", "units": 3, "bias": False},
    ]
    net = lr.parse_layers(layers)
    assert net.param_names() == ["gamma1", "beta1", "W2", "b2", "W3", "W4", "b4", "gamma5", "W6"]
    states = random_states(net, rng)
    n = 5
    x, g = rand(rng, n, 6, scale=2), rand(rng, n, 3)
    ctx = lr.Ctx(gr.Math("ieee"))
    y, caches = net.forward(states, x, ctx)
    gx, grads = net.backward(states, caches, g, ctx)
    model = torch.nn.Sequential(*torch_layers(torch, net.layers, states))
    tx = t64(torch, x, True)
    ty = model(tx)
    (ty * t64(torch, g)).sum().backward()
    close(y, ty, 1e-4)
    close(gx, tx.grad, 1e-4)
    theirs = list(model.parameters())
    assert len(theirs) == len(net.param_names())
    for name, p in zip(net.param_names(), theirs):
        close(grads[name], p.grad, 1e-4)


def test_residual_adds_in_the_texts_order() -> None:
    # y = x + f(x) and the input gradient g_f + g, bit for bit, on a one-layer branch.
    rng = np.random.default_rng(16)
    net = lr.parse_layers([inp(7), res({"type": "Dense", "units": 7, "bias": False})])
    states = random_states(net, rng)
    x, g = specials_input(rng, 3, 7), specials_input(rng, 3, 7)
    # Two NaNs in a row: at the second, f(x) (and g_f) carry the first one's payload, so the
    # operand order of x + f(x) and g_f + g shows in the bits.
    x[0, :2] = g[0, :2] = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(F32)
    ctx = lr.Ctx(gr.Math("ieee"))
    y, caches = net.forward(states, x, ctx)
    gx, _ = net.backward(states, caches, g, ctx)
    dense = net.layers[0].layers[0]  # type: ignore[attr-defined]
    fx, cache = dense.forward(states[1], x, ctx)
    gf, _ = dense.backward(states[1], cache, g, ctx)
    assert same(y, lr.add(x, fx)) and same(gx, lr.add(gf, g))
    for a, b, want in zip(x.reshape(-1), fx.reshape(-1), y.reshape(-1)):
        assert same(want, A(a, b))


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([inp(8), res({"type": "Dense", "units": 4}), DENSE2], "layer 1 (Residual): its branch"),
        ([inp(8), res({"type": "Dense", "units": 4}), DENSE2], "(4,), not its input's shape (8,)"),
        ([inp(2, 8), res(conv1d(3, 3, q=1)), FLAT, DENSE2], "(3, 8), not its input's shape (2, 8)"),
        (
            [inp(8), res(GELU, res(FLAT, {"type": "Dense", "units": 5})), DENSE2],
            "layer 3 (Residual): its branch gives the shape (5,)",
        ),
        ([inp(8), res(), DENSE2], "at least one layer"),
        ([inp(8), {"type": "Residual"}, DENSE2], "missing parameters ['layers']"),
        ([inp(8), {"type": "Residual", "layers": GELU}, DENSE2], "at least one layer"),
        ([inp(8), res(GELU, inp(8)), DENSE2], "layer 3 (Input): only the first"),
        ([inp(8), res(GELU, conv1d(2, 3)), DENSE2], "layer 3 (Conv1d): does not take"),
        ([inp(8), {"type": "Dense", "units": 2, "bias": 0}], "bias must be true or false"),
        ([inp(8), {"type": "LayerNorm", "bias": "no"}, DENSE2], "bias must be true or false"),
        ([inp(8), {"type": "GELU", "approximate": "tanh"}, DENSE2], "unknown parameters"),
    ],
)
def test_residual_and_bias_refusals(layers: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError) as info:
        lr.parse_layers(layers)
    assert message in str(info.value)


def test_positions_and_numbers_are_depth_first() -> None:
    # Section 15.7's example.
    net = lr.parse_layers(
        [inp(8), res({"type": "LayerNorm"}, {"type": "Dense", "units": 8}), {"type": "ReLU"}]
    )
    assert [(layer.kind, layer.position) for layer in net.flat] == [
        ("Residual", 1),
        ("LayerNorm", 2),
        ("Dense", 3),
        ("ReLU", 4),
    ]
    assert net.param_names() == ["gamma1", "beta1", "W2", "b2"]
    tr = lr.LayerTrainer(
        layers=[inp(8), res({"type": "LayerNorm"}, {"type": "Dense", "units": 8}), {"type": "ReLU"}]
    )
    assert tr.tensor_names()[:4] == ["gamma1", "beta1", "W2", "b2"]
    # Later layers continue after the branch; a nested Residual takes its own position.
    net = lr.parse_layers(
        [inp(4), res(GELU, res({"type": "Dense", "units": 4}), GELU), {"type": "Dense", "units": 2}]
    )
    kinds = [(layer.kind, layer.position, layer.number) for layer in net.flat]
    assert kinds == [
        ("Residual", 1, 0),
        ("GELU", 2, 0),
        ("Residual", 3, 0),
        ("Dense", 4, 1),
        ("GELU", 5, 0),
        ("Dense", 6, 2),
    ]


def test_dropout_in_a_branch_uses_its_depth_first_position() -> None:
    p = 0.5
    net = lr.parse_layers(
        [inp(16), res(GELU, res({"type": "Dropout", "p": p})), {"type": "Dense", "units": 2}]
    )
    drop = net.flat[3]
    assert isinstance(drop, lr.Dropout) and drop.position == 4
    x = np.ones((3, 16), F32)
    ctx = lr.Ctx(gr.Math("ieee"), True, seed=11, step=2, first_sample=1)
    _, dropped = drop.forward({}, x, ctx)
    assert np.array_equal(dropped, lr.dropout_dropped(11, 2, 4, 1, 3, 16, F32(p)))
    assert not np.array_equal(dropped, lr.dropout_dropped(11, 2, 2, 1, 3, 16, F32(p)))
    # Through the model: the Dropout's output is x * 2 or +0 by that mask.
    states = random_states(net, np.random.default_rng(0))
    _, caches = net.forward(states, x, ctx)
    inner_caches = caches[0][1]  # the outer branch's second layer: the inner Residual
    assert np.array_equal(inner_caches[0], dropped)


def test_limits_count_nested_layers_and_residuals() -> None:
    # 4096 layers in all: 1 Residual + 4093 GELUs in its branch + 2 Dense... at the limit.
    inner = [GELU] * 4093
    ok = [inp(2), res(*inner), {"type": "Dense", "units": 2}, DENSE2]
    assert len(lr.parse_layers(ok).flat) == 4096
    with pytest.raises(ValueError, match="at most 4096 layers, not 4097"):
        lr.parse_layers([inp(2), res(*inner, GELU), {"type": "Dense", "units": 2}, DENSE2])


def test_bias_free_json_and_init() -> None:
    plain = [inp(5), {"type": "Dense", "units": 3}, {"type": "LayerNorm"}]
    free = [
        inp(5),
        {"type": "Dense", "units": 3, "bias": False},
        {"type": "LayerNorm", "bias": False},
    ]
    assert lr.parse_layers(plain).to_json()[1:] == [
        {"type": "Dense", "units": 3},
        {"type": "LayerNorm", "eps": 1e-5},
    ]
    assert lr.parse_layers(free).to_json()[1:] == [
        {"type": "Dense", "units": 3, "bias": False},
        {"type": "LayerNorm", "eps": 1e-5, "bias": False},
    ]
    # "bias": true is the default and means the layers of 15.1-15.4 exactly.
    explicit = [inp(5), {"type": "Dense", "units": 3, "bias": True}, {"type": "LayerNorm"}]
    assert lr.parse_layers(explicit).to_json() == lr.parse_layers(plain).to_json()
    for init in ("torch", "he", "glorot"):
        a, b = lr.LayerTrainer(layers=plain, init=init), lr.LayerTrainer(layers=free, init=init)
        assert b.net.param_names() == ["W1", "gamma2"]
        assert "b1" not in b.tensor_names() and "beta2" not in b.tensor_names()
        # The weights' draws are unchanged; no bias is drawn.
        assert same(a.params()["W1"], b.params()["W1"])
    # A Dense after a bias-free Dense draws from its own number's stream either way.
    two = lr.LayerTrainer(layers=[*free[:2], {"type": "Dense", "units": 2}])
    one = lr.LayerTrainer(layers=[inp(3), {"type": "Dense", "units": 2}])
    assert not same(two.params()["W2"], one.params()["W1"])


def test_bias_free_signed_zeros() -> None:
    # Dense without a bias: a chain from +0, so a lone -0 product gives +0 ...
    x = np.array([[-0.0, 1.0]], F32)
    W = np.array([[1.0, -0.0]], F32)  # -0 * 1 + ... : products -0 and -0
    g = np.ones((1, 1), F32)
    y, _, _, _ = run_layer({"type": "Dense", "units": 1, "bias": False}, (2,), x, {"W": W}, g)
    assert lr.u32(y).tolist() == [[0]]
    # ... and LayerNorm without a bias keeps a -0 product.
    x = np.array([[1.0, 1.0, 1.0]], F32)  # x̂ = +0 everywhere
    gamma = np.array([-1.0, 2.0, -0.5], F32)
    spec = {"type": "LayerNorm", "bias": False}
    y, _, _, _ = run_layer(spec, (3,), x, {"gamma": gamma}, x)
    assert lr.u32(y).tolist() == [[0x80000000, 0, 0x80000000]]
    y, _, _, _ = run_layer(
        {"type": "LayerNorm"}, (3,), x, {"gamma": gamma, "beta": np.zeros(3, F32)}, x
    )
    assert lr.u32(y).tolist() == [[0, 0, 0]]


def test_gelu_equals_scalar_reading() -> None:
    pytest.importorskip("mpmath")
    rng = np.random.default_rng(17)
    x = np.concatenate([specials_input(rng, 4, 9).reshape(-1), normal_test_inputs()[-40:]])
    extra = [0x00000001, 0x80000001, 0x007FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0xC1640000, 0x41640000]
    x = np.concatenate([x, np.array(extra, np.uint32).view(F32)])
    g = specials_input(rng, x.size)
    g[: x.size // 3] = rand(rng, x.size // 3)  # finite g over some of the special x too
    # NaN g over the x whose Φ(x) + (x * φ(x)) is a NaN (x a NaN, ±inf): g's payload wins.
    pairs = np.array([[0x7FC00001, 0xFFC00005], [0x7F800000, 0x7FC00006], [0xFF800000, 0xFF812345]])
    x = np.concatenate([x, pairs[:, 0].astype(np.uint32).view(F32)])
    g = np.concatenate([g, pairs[:, 1].astype(np.uint32).view(F32)])
    for mname in ("seed", "ieee"):
        y, gx, _, _ = run_layer({"type": "GELU"}, (x.size,), x[None], {}, g[None], math_name=mname)
        for xv, gv, yv, gxv in zip(x, g, y.reshape(-1), gx.reshape(-1)):
            cdf, pdf = mp_normal("cdf", xv), mp_normal("pdf", xv)
            assert same(yv, M(xv, cdf)), hex(_bits_of(xv))
            assert same(gxv, M(gv, A(cdf, M(xv, pdf)))), hex(_bits_of(xv))


# ---------------------------------------------------------------------------
# Section 15.8: sequences, embeddings, causal self-attention, a tied head
# ---------------------------------------------------------------------------


def emb(vocab: int, width: int, **kw: Any) -> dict[str, Any]:
    return {"type": "Embedding", "vocab": vocab, "width": width, **kw}


def pos(context: int, width: int, **kw: Any) -> dict[str, Any]:
    return {"type": "PositionalEmbedding", "context": context, "width": width, **kw}


def attn(heads: int, **kw: Any) -> dict[str, Any]:
    return {"type": "CausalSelfAttention", "heads": heads, **kw}


TIED = {"type": "TiedHead"}


def sequence_states(net: lr.Network, rng: np.random.Generator) -> list[lr.State]:
    """Random tensors per layer, a TiedHead sharing its Embedding's dict (as the reference)."""
    states = random_states(net, rng)
    for i, layer in enumerate(net.flat):
        if isinstance(layer, lr.TiedHead):
            states[i] = states[layer.embedding.position - 1]
    return states


def torch_sequence(torch: Any, layers: list[lr.Layer], p: dict[str, Any], x: Any) -> Any:
    """The reference's layers as float64 torch functions of the tensors ``p`` (by name, so a
    tied ``E`` is one leaf used twice); dropout-free lists."""
    F = torch.nn.functional
    for layer in layers:
        n = layer.number
        if isinstance(layer, lr.Residual):
            x = x + torch_sequence(torch, layer.layers, p, x)
        elif isinstance(layer, lr.Embedding):
            x = p[f"E{n}"][x.long()]
        elif isinstance(layer, lr.PositionalEmbedding):
            x = x + p[f"P{n}"][: x.shape[1]]
        elif isinstance(layer, lr.CausalSelfAttention):
            b, t_n, d = x.shape
            qkv = x @ p[f"Wqkv{n}"].T
            q, k, v = (
                qkv[..., i * d : (i + 1) * d].reshape(b, t_n, layer.heads, -1).transpose(1, 2)
                for i in range(3)
            )
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = o.transpose(1, 2).reshape(b, t_n, d) @ p[f"Wo{n}"].T
        elif isinstance(layer, lr.TiedHead):
            x = x @ p[f"E{n}"].T
        elif isinstance(layer, lr.Dense):
            x = x @ p[f"W{n}"].T + (p[f"b{n}"] if layer.bias else 0)
        elif isinstance(layer, lr.LayerNorm):
            shape = layer.params()[0][1]
            x = F.layer_norm(x, shape, p[f"gamma{n}"], p.get(f"beta{n}"), float(layer.eps))
        elif isinstance(layer, lr.GELU):
            x = F.gelu(x)
        elif isinstance(layer, lr.Flatten):
            x = x.reshape(x.shape[0], -1)
        else:
            raise AssertionError(f"no torch form for {layer.kind}")
    return x


def reference_pass(
    net: lr.Network, states: list[lr.State], x: Any, g: lr.F32Array
) -> tuple[lr.F32Array, dict[str, lr.F32Array]]:
    ctx = lr.Ctx(gr.Math("ieee"))
    y, caches = net.forward(states, net.samples(x), ctx)
    _, grads = net.backward(states, caches, g, ctx)
    return y, grads


def torch_pass(
    torch: Any, net: lr.Network, states: list[lr.State], x: Any, g: lr.F32Array
) -> tuple[Any, dict[str, Any]]:
    p = {
        f"{name}{layer.number}": t64(torch, st[name], grad=True)
        for layer, st in zip(net.flat, states)
        for name, _ in layer.params()
    }
    y = torch_sequence(torch, net.layers, p, torch.tensor(np.asarray(x, dtype=np.int64)))
    (y * t64(torch, g)).sum().backward()
    return y, {k: v.grad for k, v in p.items()}


@pytest.mark.parametrize(("t_n", "d", "heads"), [(5, 6, 2), (5, 6, 3), (1, 4, 1), (7, 8, 4)])
def test_attention_matches_torch(t_n: int, d: int, heads: int) -> None:
    torch = torch_mod()
    rng = np.random.default_rng(t_n * 100 + d * 10 + heads)
    layer = lr.build_layer(attn(heads), 1)
    layer.infer(lr.Seq((t_n, d), lr.Embedding(0, 1, d)))
    st = {"Wqkv": rand(rng, 3 * d, d, scale=0.5), "Wo": rand(rng, d, d, scale=0.5)}
    x, g = rand(rng, 3, t_n, d), rand(rng, 3, t_n, d)
    ctx = lr.Ctx(gr.Math("ieee"))
    y, cache = layer.forward(st, x, ctx)
    gx, grads = layer.backward(st, cache, g, ctx)
    xt = t64(torch, x, grad=True)
    p = {"Wqkv1": t64(torch, st["Wqkv"], grad=True), "Wo1": t64(torch, st["Wo"], grad=True)}
    layer.number = 1
    yt = torch_sequence(torch, [layer], p, xt)
    (yt * t64(torch, g)).sum().backward()
    close(y, yt)
    close(gx, xt.grad)
    close(grads["Wqkv"], p["Wqkv1"].grad)
    close(grads["Wo"], p["Wo1"].grad)


def test_attention_is_causal() -> None:
    """A later token's values (even a NaN) change nothing at an earlier position."""
    rng = np.random.default_rng(3)
    layer = lr.build_layer(attn(2), 1)
    layer.infer(lr.Seq((5, 4), lr.Embedding(0, 1, 4)))
    st = {"Wqkv": rand(rng, 12, 4), "Wo": rand(rng, 4, 4)}
    x = rand(rng, 1, 5, 4)
    ctx = lr.Ctx(gr.Math("ieee"))
    y, _ = layer.forward(st, x, ctx)
    x2 = x.copy()
    x2[0, 3, 1], x2[0, 4] = np.nan, np.inf
    y2, _ = layer.forward(st, x2, ctx)
    assert np.array_equal(lr.u32(y[0, :3]), lr.u32(y2[0, :3]))
    assert np.isnan(y2[0, 3:]).all()
    # And backward: a gradient at an earlier position only reaches earlier inputs.
    g = np.zeros((1, 5, 4), dtype=F32)
    g[0, 1] = 1
    gx, _ = layer.backward(st, layer.forward(st, x, ctx)[1], g, ctx)
    assert np.array_equal(lr.u32(gx[0, 2:]), np.zeros((3, 4), dtype=np.uint32))


def test_embeddings_and_tied_head_match_torch() -> None:
    """One ``E`` used by the Embedding and the TiedHead: torch's gradient of the leaf used
    twice is the sum of both uses, as 15.8's ``TiedHead's chain + Embedding's chain``."""
    torch = torch_mod()
    rng = np.random.default_rng(21)
    net = lr.parse_layers([inp(5), emb(7, 6), pos(8, 6), {"type": "LayerNorm"}, TIED])
    states = sequence_states(net, rng)
    x = np.array([[0, 3, 3, 1, 5], [5, 5, 0, 1, 2], [1, 1, 1, 1, 1]])
    g = rand(rng, 3, 5, 7)
    y, grads = reference_pass(net, states, x, g)
    yt, gt = torch_pass(torch, net, states, x, g)
    close(y, yt)
    assert sorted(grads) == sorted(gt)
    for k in gt:
        close(grads[k], gt[k])
    # Rows T..context-1 of P get +0; E's unread rows (4, 6) only the head's chain + (+0).
    assert np.array_equal(lr.u32(grads["P2"][5:]), np.zeros((3, 6), dtype=np.uint32))
    ctx = lr.Ctx(gr.Math("ieee"))
    _, caches = net.forward(states, net.samples(x), ctx)
    head = net.flat[-1]
    _, own = head.backward(states[0], caches[-1], g, ctx)
    want = lr.add(own["E"][[4, 6]], F32(0))
    assert np.array_equal(lr.u32(grads["E1"][[4, 6]]), lr.u32(want))


def test_embedding_alone_leaves_unread_rows_zero() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(22)
    net = lr.parse_layers([inp(4), emb(6, 3), {"type": "Dense", "units": 2}])
    states = sequence_states(net, rng)
    x = np.array([[0, 2, 2, 0], [2, 3, 0, 0]])
    g = rand(rng, 2, 4, 2)
    y, grads = reference_pass(net, states, x, g)
    yt, gt = torch_pass(torch, net, states, x, g)
    close(y, yt)
    for k in gt:
        close(grads[k], gt[k])
    assert np.array_equal(lr.u32(grads["E1"][[1, 4, 5]]), np.zeros((3, 3), dtype=np.uint32))
    # A row's chain starts from its first term: row 2's lone -0 stays -0 (read once), and
    # row 0's is (-0 + -0) + +0 = +0 while a row no token reads is +0.
    ids = np.array([[0, 2, 1, 0], [3, 3, 0, 0]], dtype=np.int64)
    g_emb = np.zeros((2, 4, 3), dtype=F32)
    g_emb[0, 1, 0] = g_emb[0, 0, 1] = g_emb[0, 3, 1] = -0.0
    _, own = net.flat[0].backward(states[0], ids, g_emb, lr.Ctx(gr.Math("ieee")))
    assert lr.u32(own["E"])[2, 0] == 0x80000000
    assert lr.u32(own["E"])[0, 1] == 0


def test_token_loss_mean_matches_torch() -> None:
    torch = torch_mod()
    rng = np.random.default_rng(23)
    tr = lr.LayerTrainer(layers=[inp(5), emb(7, 4), TIED], seed=1)
    z = rand(rng, 3, 5, 7, scale=3.0)
    y = rng.integers(0, 7, size=(3, 5))
    losses, delta, p = tr._loss(z, y)
    assert losses.shape == (3,) and delta.shape == z.shape and p.shape == z.shape
    mean = lr.div(lr.fold(losses), lr.f32i(15))
    zt = t64(torch, z, grad=True)
    lt = torch.nn.functional.cross_entropy(zt.reshape(15, 7), torch.tensor(y.reshape(15)))
    lt.backward()
    close(mean, lt.detach())
    # δ is the per-token gradient: the mean's gradient times N*T.
    close(delta, zt.grad * 15)
    # Each sample's loss is its tokens' sum, from the first.
    lt_tokens, _, _ = gr.loss_and_delta(
        gr.Math("ieee"), "cross_entropy", z.reshape(15, 7), y.reshape(15)
    )
    assert np.array_equal(
        lr.u32(losses), lr.u32(lr.fold(np.ascontiguousarray(lt_tokens.reshape(3, 5).T)))
    )


def test_evaluation_of_a_sequence_model() -> None:
    torch = torch_mod()
    tr = lr.LayerTrainer(layers=lr.gpt(7, context=5, layers=1, heads=2, width=4), seed=3)
    x, y = lr.sequence_data(6, 5, 7, "next", 7)
    proba, pred = tr.predict_proba(x), tr.predict(x)
    assert proba.shape == (6, 5, 7) and pred.shape == (6, 5)
    loss, acc = tr.evaluate(x, y)
    assert acc == float(np.mean(pred == y))
    p = {k: t64(torch, v) for k, v in tr.params().items()}
    with torch.no_grad():
        z = torch_sequence(torch, tr.net.layers, p, torch.tensor(x.astype(np.int64)))
        want = torch.nn.functional.cross_entropy(z.reshape(30, 7), torch.tensor(y.reshape(30)))
    close(loss, want)
    close(proba, torch.softmax(z, -1))


def test_gpt_training_tracks_torch() -> None:
    """Steps of a tiny GPT (AdamW, clipping) against torch's from the same weights (the
    "ieee" setting: the seed's exp and sqrt are approximations, not torch's functions)."""
    torch = torch_mod()
    steps, lr_, n = 3, 0.01, 6
    keys: dict[str, Any] = dict(
        layers=lr.gpt(11, context=8, layers=2, heads=2, width=16),
        seed=5,
        optimizer="adamw",
        lr=lr_,
        weight_decay=0.1,
        beta2=0.99,
        clip_norm=1.0,
        batch_size=n,
        shuffle=False,
    )
    tr = lr.LayerTrainer(**keys)
    x, y = lr.sequence_data(n, 8, 11, "next", 11)
    p = {k: t64(torch, v, grad=True) for k, v in tr.params().items()}
    o = torch.optim.AdamW(p.values(), lr=lr_, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    xt, yt = torch.tensor(x.astype(np.int64)), torch.tensor(y.reshape(-1))
    for _ in range(steps):
        loss = tr.train_steps(x, y, 1)[0]
        o.zero_grad()
        z = torch_sequence(torch, tr.net.layers, p, xt)
        lt = torch.nn.functional.cross_entropy(z.reshape(-1, 11), yt)
        close(loss, lt.detach(), 1e-4)
        lt.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        o.step()
    ours = tr.params()
    for k, v in p.items():
        close(ours[k], v, 1e-4)


def test_sequence_classifier_tracks_torch() -> None:
    """Per-token Dense and LayerNorm with biases, uniform init of attention, then Flatten and
    a per-sample head (dropout-free so torch can follow)."""
    torch = torch_mod()
    layers = [
        inp(6),
        emb(9, 6),
        {"type": "Dense", "units": 6},
        pos(8, 6),
        {"type": "LayerNorm"},
        res(attn(3)),
        GELU,
        FLAT,
        {"type": "Dense", "units": 3},
    ]
    tr = lr.LayerTrainer(layers=layers, seed=8, lr=0.01, batch_size=9, shuffle=False)
    x, y = lr.sequence_data(9, 6, 9, "class", 3)
    p = {k: t64(torch, v, grad=True) for k, v in tr.params().items()}
    o = torch.optim.Adam(p.values(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(3):
        tr.train_steps(x, y, 1)
        o.zero_grad()
        z = torch_sequence(torch, tr.net.layers, p, torch.tensor(x.astype(np.int64)))
        torch.nn.functional.cross_entropy(z, torch.tensor(y)).backward()
        o.step()
    ours = tr.params()
    for k, v in p.items():
        close(ours[k], v, 1e-4)


# ---- normal draws ------------------------------------------------------------------------


def scalar_normals(st: gr.Stream, count: int) -> list[np.float32]:
    """15.8's polar method one operation at a time, ``ln`` by mpmath rounded once."""
    import mpmath

    out: list[np.float32] = []
    while len(out) < count:
        x1, x2 = st.next_u64(), st.next_u64()
        u = M(f((x1 >> 40) - 2**23), f(2.0**-23))
        v = M(f((x2 >> 40) - 2**23), f(2.0**-23))
        q = A(M(u, u), M(v, v))
        if q >= f(1) or q == f(0):
            continue
        with mpmath.workprec(200):
            ln_q = -mp_round_f32(-mpmath.log(mpmath.mpf(float(q))))  # q < 1: ln q < 0
        fac = np.sqrt(D(M(f(-2), f(ln_q)), q))
        out.append(M(u, fac))
        if len(out) < count:
            out.append(M(v, fac))
    return out


def test_normal_draws_equal_scalar_reading() -> None:
    for seed, sizes in ((0, (7, 12)), (-9, (1, 3, 2)), (2**63 - 1, (301,))):
        a, b = gr.Stream(seed, gr.INIT, 4), gr.Stream(seed, gr.INIT, 4)
        for size in sizes:  # tensors one after the other on one stream; odd counts too
            got = lr.normal_cells(a, size)
            want = scalar_normals(b, size)
            assert [_bits_of(v) for v in got] == [_bits_of(v) for v in want]
        assert a.state == b.state  # the stream continues from the same draw


def test_normal_draws_distribution() -> None:
    z = lr.normal_cells(gr.Stream(1, gr.INIT, 0), 40000).astype(np.float64)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01
    w = lr.normal_tensor(gr.Stream(1, gr.INIT, 0), (200, 200), F32(0.02)).astype(np.float64)
    assert abs(w.std() - 0.02) < 0.0005


def test_sequence_initialisation_streams() -> None:
    """Each layer's tensors from its stream (seed, INIT, n - 1), one after the other."""
    seed = 13
    tr = lr.LayerTrainer(
        layers=[
            inp(4),
            emb(5, 6),
            pos(4, 6, std=0.5),
            attn(2, std=0.25, proj_std=0.125),
            attn(3),
            {"type": "Dense", "units": 3, "std": 0.75},
            FLAT,
            {"type": "Dense", "units": 2},
        ],
        seed=seed,
        init="he",
    )
    p = tr.params()

    def stream(n: int) -> gr.Stream:
        return gr.Stream(seed, gr.INIT, n - 1)

    assert np.array_equal(lr.u32(p["E1"]), lr.u32(lr.normal_cells(stream(1), 30).reshape(5, 6)))
    assert np.array_equal(lr.u32(p["P2"]), lr.u32(lr.normal_tensor(stream(2), (4, 6), F32(0.5))))
    s3 = stream(3)
    assert np.array_equal(lr.u32(p["Wqkv3"]), lr.u32(lr.normal_tensor(s3, (18, 6), F32(0.25))))
    assert np.array_equal(lr.u32(p["Wo3"]), lr.u32(lr.normal_tensor(s3, (6, 6), F32(0.125))))
    s4 = stream(4)
    a_qkv = lr.uniform_scale("he", 6, 18)
    wqkv = gr.uniform_cells(s4, 108, a_qkv).reshape(18, 6)
    wo = gr.uniform_cells(s4, 36, lr.uniform_scale("he", 6, 6)).reshape(6, 6)
    assert np.array_equal(lr.u32(p["Wqkv4"]), lr.u32(wqkv))
    assert np.array_equal(lr.u32(p["Wo4"]), lr.u32(wo))
    assert np.array_equal(lr.u32(p["W5"]), lr.u32(lr.normal_tensor(stream(5), (3, 6), F32(0.75))))
    assert not p["b5"].any() and lr.u32(p["b5"]).sum() == 0  # +0 under std
    assert tr.tensor_names()[:8] == ["E1", "P2", "Wqkv3", "Wo3", "Wqkv4", "Wo4", "W5", "b5"]


def test_gpt_builder() -> None:
    layers = lr.gpt(11, context=8, layers=2, heads=2, width=16)
    s = 0.02 / math.sqrt(4)
    ln = {"type": "LayerNorm", "eps": 1e-05, "bias": False}
    assert layers[:3] == [
        inp(8),
        emb(11, 16, std=0.02),
        pos(8, 16, std=0.02),
    ]
    assert layers[3] == res(ln, attn(2, std=0.02, proj_std=s))
    assert layers[4] == res(
        ln,
        {"type": "Dense", "units": 64, "bias": False, "std": 0.02},
        GELU,
        {"type": "Dense", "units": 16, "bias": False, "std": s},
    )
    assert layers[5:7] == layers[3:5] and layers[7:] == [ln, TIED]
    net = lr.parse_layers(layers)
    assert net.to_json() == layers  # the JSON form round-trips
    assert net.tokens == 8 and net.output_size == 11
    tr = lr.LayerTrainer(layers=layers)
    assert [k for k in tr.names if not k.startswith("gamma")] == [
        "E1",
        "P2",
        "Wqkv4",
        "Wo4",
        "W6",
        "W7",
        "Wqkv9",
        "Wo9",
        "W11",
        "W12",
    ]


# ---- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([inp(9), emb(5, 4), pos(8, 4), TIED], "9 tokens is longer than its context 8"),
        ([inp(4), {"type": "Dense", "units": 3}, emb(5, 4)], "must come directly after Input"),
        ([inp(4), res(emb(5, 4)), TIED], "must come directly after Input"),
        ([inp(2, 4), emb(5, 4), TIED], "does not take the shape (2, 4)"),
        ([inp(4), emb(5, 4), attn(3), TIED], "3 heads do not divide the width 4"),
        ([inp(4), emb(5, 4), attn(2, bias=True), TIED], "bias=True is not supported"),
        ([inp(4), emb(5, 4), {"type": "Dense", "units": 3}, TIED], "width 3 is not the"),
        ([inp(6), {"type": "Dense", "units": 6}, TIED], "takes a (T, D) sequence"),
        ([inp(6), attn(2), {"type": "Dense", "units": 2}], "takes a (T, D) sequence"),
        ([inp(4), emb(5, 4), pos(8, 3), TIED], "does not take the shape (4, 4)"),
        ([inp(4), emb(5, 4), FLAT, TIED], "takes a (T, D) sequence"),
        ([inp(4), emb(5, 4, std=0.0), TIED], "std must be finite and > 0"),
        ([inp(4), emb(5, 4), attn(2, proj_std=-1.0), TIED], "proj_std must be finite"),
        ([inp(4), emb(5, 4), attn(2, std=1e39), TIED], "std must be finite"),
        ([inp(4), emb(2**24 + 1, 1), TIED], "vocab must be in 1..2^24"),
        ([inp(4), emb(0, 4), TIED], "vocab must be in 1..2^24"),
    ],
)
def test_sequence_refusals(layers: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError) as info:
        lr.parse_layers(layers)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(2.5, "2.5"), (-1, "-1"), (7, "7"), (np.nan, "nan"), (np.inf, "inf"), (1e30, "1e+30")],
)
def test_token_ids_are_refused_naming_sample_and_position(value: float, shown: str) -> None:
    tr = lr.LayerTrainer(layers=[inp(3), emb(7, 2), TIED])
    x = np.array([[0, 1, 2], [3, 4, 5], [6, 0, 1]], dtype=np.float64)
    x[2, 1] = value
    y = np.zeros((3, 3), dtype=np.int64)
    for call in (lambda: tr.train_steps(x, y, 1), lambda: tr.predict(x), lambda: tr.evaluate(x, y)):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith("sample 2, position 1: token id")
        assert shown in str(info.value)
    assert tr.step_count == 0  # refused before anything was computed
    # Integer ids and floats with integer values are taken.
    tr.predict(np.array([[0, 1, 6]]))
    tr.predict(np.array([[0.0, 1.0, 6.0]], dtype=np.float32))


# ---- attention, one operation at a time ----------------------------------------------------


def scalar_attention(
    x: lr.F32Array, wqkv: lr.F32Array, wo: lr.F32Array, g: lr.F32Array, heads: int, mname: str
) -> tuple[Any, Any, Any, Any]:
    """15.8's attention for one sample, loops in the text's order: ``y``, the input gradient,
    ``Wqkv``'s and ``Wo``'s terms (one sample: the terms are the block gradients)."""
    ex = gr.Math(mname).exp
    t_n, d = x.shape
    h = d // heads
    c = D(f(1), np.sqrt(f(h)))

    def lin(w: Any, a: Any) -> Any:  # Dense without bias: from +0, inputs in order
        out = np.zeros((a.shape[0], w.shape[0]), F32)
        for t in range(a.shape[0]):
            for o in range(w.shape[0]):
                acc = f(0)
                for j in range(w.shape[1]):
                    acc = A(acc, M(w[o, j], a[t, j]))
                out[t, o] = acc
        return out

    def lin_back(w: Any, a: Any, gg: Any) -> tuple[Any, Any]:
        gx = np.zeros_like(a)
        for t in range(a.shape[0]):
            for j in range(w.shape[1]):
                acc = f(0)
                for o in range(w.shape[0]):
                    acc = A(acc, M(w[o, j], gg[t, o]))
                gx[t, j] = acc
        gw = np.zeros_like(w)
        for o in range(w.shape[0]):
            for j in range(w.shape[1]):
                acc = M(gg[0, o], a[0, j])
                for t in range(1, a.shape[0]):
                    acc = A(acc, M(gg[t, o], a[t, j]))
                gw[o, j] = acc
        return gx, gw

    qkv = lin(wqkv, x)
    o = np.zeros((t_n, d), F32)
    P: dict[tuple[int, int, int], np.float32] = {}
    for a in range(heads):
        q, k, v = (qkv[:, b * d + a * h : b * d + a * h + h] for b in range(3))
        for i in range(t_n):
            s = []
            for j in range(i + 1):
                acc = f(0)
                for e in range(h):
                    acc = A(acc, M(q[i, e], k[j, e]))
                s.append(M(acc, c))
            m = s[0]
            for j in range(1, i + 1):
                if s[j] > m:
                    m = s[j]
            w = [ex(np.array([S(sj, m)], F32))[0] for sj in s]
            z = f(0)
            for wj in w:
                z = A(z, wj)
            for j in range(i + 1):
                P[a, i, j] = D(w[j], z)
            for e in range(h):
                acc = f(0)
                for j in range(i + 1):
                    acc = A(acc, M(P[a, i, j], v[j, e]))
                o[i, a * h + e] = acc
    y = lin(wo, o)
    go, gwo = lin_back(wo, o, g)
    dqkv = np.zeros((t_n, 3 * d), F32)
    for a in range(heads):
        q, k, v = (qkv[:, b * d + a * h : b * d + a * h + h] for b in range(3))
        gh = go[:, a * h : a * h + h]
        ds: dict[tuple[int, int], np.float32] = {}
        for i in range(t_n):
            dp = []
            for j in range(i + 1):
                acc = f(0)
                for e in range(h):
                    acc = A(acc, M(gh[i, e], v[j, e]))
                dp.append(acc)
            r = f(0)
            for j in range(i + 1):
                r = A(r, M(P[a, i, j], dp[j]))
            for j in range(i + 1):
                ds[i, j] = M(M(P[a, i, j], S(dp[j], r)), c)
        for j in range(t_n):
            for e in range(h):
                dv, dk = f(0), f(0)
                for i in range(j, t_n):
                    dv = A(dv, M(P[a, i, j], gh[i, e]))
                    dk = A(dk, M(ds[i, j], q[i, e]))
                dqkv[j, 2 * d + a * h + e], dqkv[j, d + a * h + e] = dv, dk
        for i in range(t_n):
            for e in range(h):
                acc = f(0)
                for j in range(i + 1):
                    acc = A(acc, M(ds[i, j], k[j, e]))
                dqkv[i, a * h + e] = acc
    gx, gwqkv = lin_back(wqkv, x, dqkv)
    return y, gx, gwqkv, gwo


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("math_name", ["ieee", "seed"])
@pytest.mark.parametrize(("t_n", "d", "heads"), [(4, 6, 2), (3, 6, 3), (5, 4, 1)])
def test_attention_equals_scalar_reading(
    specials: bool, math_name: str, t_n: int, d: int, heads: int
) -> None:
    """Finite values (every chain's rounding seen), and special values (a NaN spreads
    through the chains it enters, so those make most results NaN)."""
    rng = np.random.default_rng(40 + t_n + heads)
    some = specials_input if specials else rand
    x = some(rng, t_n, d)
    x[0] = rand(rng, d)  # a finite first token, so later queries are not all NaN
    wqkv, wo = rand(rng, 3 * d, d), some(rng, d, d)
    g = some(rng, t_n, d)
    layer = lr.build_layer(attn(heads), 1)
    layer.infer(lr.Seq((t_n, d), lr.Embedding(0, 1, d)))
    st = {"Wqkv": wqkv, "Wo": wo}
    ctx = lr.Ctx(gr.Math(math_name))
    y, cache = layer.forward(st, x[None], ctx)
    gx, grads = layer.backward(st, cache, g[None], ctx)
    want = scalar_attention(x, wqkv, wo, g, heads, math_name)
    for got, w in zip((y[0], gx[0], grads["Wqkv"], grads["Wo"]), want):
        assert same(got, w)
