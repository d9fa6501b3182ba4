"""The cosine learning-rate decay with ``min_lr`` and ``decay_params`` (TRAINING.md sections 6
and 7), against computations written from the docs' text: the cosine with mpmath (correctly
rounded to binary32), every other operation as a numpy float32 operation in the documented
order; and weight decay per tensor against the independent reference (tests/reference)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, cast

import numpy as np
import pytest

import nxrs
from nxrs import softf32

gr: ModuleType = importlib.import_module("reference.general_ref")

f32 = np.float32


cos_pi = gr.cos_pi


def documented_lr(lr: float, min_lr: float, warmup: int, total: int, t: int) -> np.float32:
    """Section 6's ``lr_t`` for ``schedule="cosine"``, op by op in binary32 (the reference's)."""
    config = gr.Config.make(
        layers=[1, 1], optimizer="sgd", lr=lr, schedule="cosine", warmup_steps=warmup,
        total_steps=total, min_lr=min_lr,
    )  # fmt: skip
    return cast(np.float32, gr.lr_at(config, t))


def bits(x: Any) -> int:
    return int(np.asarray(x, dtype=np.float32).view(np.uint32))


@pytest.mark.parametrize("n", [*range(1, 41), 97, 360, 1000, 4096, 12345])
def test_cos_pi_is_the_correctly_rounded_cosine(n: int) -> None:
    ks = np.arange(n + 1)
    got = softf32.cos_pi(ks, n)
    for k in range(n + 1):
        assert bits(got[k]) == bits(cos_pi(k, n)), f"cos(π {k}/{n})"


def test_cos_pi_at_large_step_counts() -> None:
    rng = np.random.default_rng(6)
    for _ in range(300):
        n = int(rng.integers(1, 2**63 - 1, dtype=np.int64))
        k = int(rng.integers(0, n, dtype=np.int64, endpoint=True))
        assert bits(softf32.cos_pi(k, n)) == bits(cos_pi(k, n)), (k, n)
    # Next to k/n = 1/2, where the cosine is smallest, and next to the ends.
    top = 2**63 - 1
    for k, n in [(2**62 - 1, top), (2**62, top), (1, top), (top - 1, top), (2**61 - 1, 2**62)]:
        assert bits(softf32.cos_pi(k, n)) == bits(cos_pi(k, n)), (k, n)


def test_cos_pi_refuses_what_is_not_a_step_ratio() -> None:
    for k, n in [(-1, 3), (4, 3), (0, 0)]:
        with pytest.raises(nxrs.InputError, match="cos_pi"):
            softf32.cos_pi(k, n)
    with pytest.raises(TypeError):
        softf32.cos_pi(np.float32(1), 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lr", "min_lr", "warmup", "total"),
    [(0.1, 0.0, 0, 7), (6e-4, 6e-5, 3, 40), (0.01, 0.001, 5, 6), (1e-3, 1e-3, 2, 9)],
)
def test_every_steps_rate_is_the_documented_one(
    lr: float, min_lr: float, warmup: int, total: int
) -> None:
    t = nxrs.Trainer(
        layers=[1, 1],
        optimizer="sgd",
        lr=lr,
        schedule="cosine",
        warmup_steps=warmup,
        total_steps=total,
        min_lr=min_lr,
        batch_size=1,
        shuffle=False,
    )
    x, y = np.zeros((1, 1), np.float32), np.zeros(1, np.int64)
    for step in range(total + 4):
        expected = documented_lr(lr, min_lr, warmup, total, step)
        assert bits(t.scheduled_lr) == bits(expected), f"step {step}"
        t.train_steps(x, y, 1)


def test_the_rate_ends_at_min_lr_and_starts_the_decay_at_lr() -> None:
    t = nxrs.Trainer(layers=[1, 1], lr=0.5, schedule="cosine", warmup_steps=2, total_steps=4)
    assert t.config["min_lr"] == 0.0  # the cosine decay's default
    assert t.scheduled_lr == 0.25  # warm-up 1/2
    with pytest.raises(nxrs.ConfigError, match=r"takes no total_steps, step_size, gamma or min_lr"):
        nxrs.Trainer(layers=[1, 1], min_lr=0.0)
    with pytest.raises(nxrs.ConfigError, match=r"min_lr = 0\.75 .* at most lr = 0\.5"):
        nxrs.Trainer(layers=[1, 1], lr=0.5, schedule="cosine", total_steps=4, min_lr=0.75)
    with pytest.raises(nxrs.ConfigError, match=r"min_lr = -0\.125"):
        nxrs.Trainer(layers=[1, 1], lr=0.5, schedule="cosine", total_steps=4, min_lr=-0.125)
    with pytest.raises(nxrs.ConfigError, match=r"total_steps = 2 must be greater than"):
        nxrs.Trainer(layers=[1, 1], schedule="cosine", warmup_steps=2, total_steps=2)


def test_cosine_and_decay_params_survive_a_checkpoint(tmp_path: Any) -> None:
    kw: dict[str, Any] = dict(
        layers=[3, 4, 2],
        optimizer="adamw",
        schedule="cosine",
        total_steps=9,
        min_lr=1e-4,
        decay_params="matrices",
        batch_size=2,
    )
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
    y = np.array([0, 1, 1, 0])
    whole = nxrs.Trainer(**kw)
    whole.train_steps(x, y, 6)
    half = nxrs.Trainer(**kw)
    half.train_steps(x, y, 3)
    half.save(tmp_path / "half.nxck")
    resumed = nxrs.Trainer.load(tmp_path / "half.nxck")
    assert resumed.config == half.config
    resumed.train_steps(x, y, 3)
    assert resumed.state_hash() == whole.state_hash()


def test_default_configurations_write_no_new_keys() -> None:
    record = nxrs.Trainer(layers=[2, 3], optimizer="adamw").to_bytes()
    assert b"decay_params" not in record and b"min_lr" not in record
    matrices = nxrs.Trainer(layers=[2, 3], optimizer="sgd", decay_params="matrices").to_bytes()
    assert b'"decay_params":"matrices"' in matrices
    cosine = nxrs.Trainer(layers=[2, 3], schedule="cosine", total_steps=5).to_bytes()
    assert b'"name":"cosine","warmup_steps":0,"total_steps":5,"min_lr_bits":0' in cosine


@pytest.mark.parametrize(
    "keys",
    [
        dict(optimizer="sgd", lr=0.1, weight_decay=0.5, momentum=0.9),
        dict(optimizer="adamw", lr=0.01, weight_decay=0.25),
    ],
)
def test_matrices_decay_the_weights_and_not_the_biases(keys: dict[str, Any]) -> None:
    # One step from the same start: with decay_params="matrices" each W is the reference's
    # with weight decay and each b the reference's without (the step's gradient is computed
    # before any update, so the two do not interact within a step).
    base = dict(layers=[4, 5, 3], seed=3, batch_size=4, shuffle=False, **keys)
    x, y = gr.case_data(8, 4, 3, "cross_entropy")
    decayed = gr.Trainer(**base)
    plain = gr.Trainer(**{**base, "weight_decay": 0.0})
    t = nxrs.Trainer(**base, decay_params="matrices")
    # Biases start at +0, which decay leaves as it is: start them at k/8 instead.
    biases = [(np.arange(len(b), dtype=np.float32) - 2) / 8 for b in decayed.b]
    for ref in (decayed, plain):
        ref.b = [b.copy() for b in biases]
    t._set_params([p for w, b in zip(decayed.W, biases) for p in (w, b)])
    for ref in (decayed, plain):
        ref.train_steps(x, y, 1)
    t.train_steps(x, y, 1)
    state = t.state_dict()
    for layer in range(2):
        w, b = state[f"W{layer + 1}"], state[f"b{layer + 1}"]
        assert np.array_equal(w.view(np.uint32), decayed.W[layer].view(np.uint32))
        assert np.array_equal(b.view(np.uint32), plain.b[layer].view(np.uint32))
        # The check can fail: the rules differ on both tensors.
        assert not np.array_equal(w.view(np.uint32), plain.W[layer].view(np.uint32))
        assert not np.array_equal(b.view(np.uint32), decayed.b[layer].view(np.uint32))
    all_decay = nxrs.Trainer(**base)
    all_decay._set_params([p for w, b in zip(gr.Trainer(**base).W, biases) for p in (w, b)])
    all_decay.train_steps(x, y, 1)
    assert all_decay.state_hash() == decayed.state_hash()


def test_matrices_follow_the_tensor_shapes_of_a_sequence_model() -> None:
    # nanoGPT's groups on a tiny GPT: E, P, Wqkv, Wo and the Dense weights decay; the
    # LayerNorms' gamma does not (one step, from one start, as above).
    model = nxrs.layers.gpt(vocab=5, context=4, layers=1, heads=1, width=8)
    base: dict[str, Any] = dict(layers=model, optimizer="adamw", lr=0.01, batch_size=2)
    x = np.array([[0, 1, 2, 3], [4, 3, 2, 1]], dtype=np.float32)
    y = np.array([[1, 2, 3, 4], [3, 2, 1, 0]])
    runs = {}
    for name, extra in [
        ("matrices", {"decay_params": "matrices", "weight_decay": 0.5}),
        ("all", {"weight_decay": 0.5}),
        ("none", {"weight_decay": 0.0}),
    ]:
        t = nxrs.Trainer(**base, **extra)
        t.train_steps(x, y, 1)
        runs[name] = t.state_dict()
    names = [n for n in runs["matrices"] if not n.startswith(("m", "v"))]
    decayed = [n for n in names if runs["matrices"][n].ndim >= 2]
    for prefix in ("E", "P", "Wqkv", "Wo", "W"):
        assert any(n.rstrip("0123456789") == prefix for n in decayed), (prefix, decayed)
    assert not any(n.startswith("gamma") for n in decayed)
    assert any(n.startswith("gamma") for n in names)
    for n in names:
        expected = runs["all"] if n in decayed else runs["none"]
        assert np.array_equal(runs["matrices"][n].view(np.uint32), expected[n].view(np.uint32)), n


def test_matrices_never_decay_a_normalisation_whatever_its_shape() -> None:
    """A LayerNorm over a whole (C, L) sample has gamma and beta of shape (C, L): by kind they
    are a normalisation's and do not decay; the Dense weight does."""
    from nxrs.layers import Dense, Flatten, Input, LayerNorm

    layers = [Input(2, 3), LayerNorm(), Flatten(), Dense(2)]
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3) / 7
    y = np.array([0, 1, 1, 0])
    runs = {}
    for decay in (0.0, 0.5):
        t = nxrs.Trainer(
            layers=layers, optimizer="adamw", weight_decay=decay, lr=0.1, seed=3,
            decay_params="matrices",
        )  # fmt: skip
        t.train_steps(x, y, 1)  # one step: the gradients are the same in both runs
        runs[decay] = t.state_dict()
    for name in ("gamma1", "beta1", "b2"):
        assert runs[0.0][name].tobytes() == runs[0.5][name].tobytes(), name
    assert runs[0.0]["W2"].tobytes() != runs[0.5]["W2"].tobytes()
    assert runs[0.0]["gamma1"].shape == (2, 3)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("decay_params", ["all", "matrices"])
def test_cosine_runs_match_the_reference(optimizer: str, decay_params: str) -> None:
    # Whole runs through the warm-up, the cosine and past total_steps (min_lr), every tensor
    # compared as bits with the reference's section 6 and 7 (its cosine from mpmath).
    keys: dict[str, Any] = dict(
        optimizer=optimizer, lr=0.05, weight_decay=0.2, decay_params=decay_params,
        schedule="cosine", warmup_steps=2, total_steps=7, min_lr=0.004, seed=5,
    )  # fmt: skip
    base = dict(layers=[4, 6, 3], batch_size=4, **keys)
    x, y = gr.case_data(12, 4, 3, "cross_entropy")
    ref = gr.Trainer(**base)
    t = nxrs.Trainer(**base)
    ref.train_steps(x, y, 10)
    t.train_steps(x, y, 10)
    assert t.state_hash() == ref.state_hash()
    # A tiny GPT, whose norms' gamma and whose tables are told apart by kind.
    layers_ref: ModuleType = importlib.import_module("reference.layers_ref")
    model = nxrs.layers.gpt(vocab=5, context=4, layers=1, heads=1, width=8)
    tokens = np.array([[0, 1, 2, 3], [4, 3, 2, 1], [2, 2, 0, 4]], dtype=np.float32)
    labels = np.array([[1, 2, 3, 4], [3, 2, 1, 0], [2, 0, 4, 1]])
    settings = dict(batch_size=2, **keys)
    lt = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(model), **settings)
    t = nxrs.Trainer(layers=model, **settings)
    lt.train_steps(tokens, labels, 9)
    t.train_steps(tokens, labels, 9)
    state = t.state_dict()
    for name, want in lt.params().items():
        assert np.array_equal(state[name].view(np.uint32), want.view(np.uint32)), name
