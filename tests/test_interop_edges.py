"""``from_torch`` at its edges: running statistics no trained model has (a negative variance,
which makes every prediction NaN), a ``LayerNorm`` over part of its input, and a module on
torch's meta device (shapes without values) are each refused with an nxrs error naming the
module or tensor and why (docs/TRAINING.md section 15; ``nxrs.interop.from_torch``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nxrs

torch = pytest.importorskip("torch")
nn = torch.nn


def batchnorm_model() -> object:
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    with torch.no_grad():
        model[1].running_mean.copy_(torch.tensor([-1.0, 0.5, -2.0]))  # negative means are fine
        model[1].running_var.copy_(torch.tensor([0.5, 2.0, 1.0]))
    return model


def test_a_negative_running_variance_is_refused() -> None:
    model = batchnorm_model()
    nxrs.Trainer.from_torch(model, input_shape=4)  # as a trained model has them: taken
    with torch.no_grad():
        model[1].running_var[1] = -0.25
    with pytest.raises(
        nxrs.InputError, match=r"var2 value 1 \(row-major\) is -0.25: a running variance is never"
    ):
        nxrs.Trainer.from_torch(model, input_shape=4)


def test_a_running_variance_of_minus_zero_is_a_zero() -> None:
    model = batchnorm_model()
    with torch.no_grad():
        model[1].running_var[0] = -0.0
    t = nxrs.Trainer.from_torch(model, input_shape=4)
    assert t.state_dict()["var2"].view(np.uint32)[0] == 0x8000_0000


def test_a_negative_running_variance_in_a_safetensors_file_is_refused(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    t = nxrs.Trainer.from_torch(batchnorm_model(), input_shape=4)
    t.save_safetensors(tmp_path / "m.safetensors")
    tensors = st.load_file(str(tmp_path / "m.safetensors"))
    tensors["var2"] = np.array([1.0, 1.0, -3.0], np.float32)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        metadata = f.metadata()
    st.save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=metadata)
    with pytest.raises(nxrs.InputError, match=r"var2 value 2 \(row-major\) is -3"):
        nxrs.Trainer.from_safetensors(tmp_path / "bad.safetensors")


@pytest.mark.parametrize(
    ("modules", "shape", "k", "normalised", "whole"),
    [
        ([nn.LayerNorm(12), nn.Flatten(), nn.Linear(24, 2)], (2, 12), 0, "(12,)", "(2, 12)"),
        (
            [nn.LayerNorm([6, 6]), nn.Flatten(), nn.Linear(72, 2)],
            (2, 6, 6),
            0,
            "(6, 6)",
            "(2, 6, 6)",
        ),
        (
            [nn.Conv1d(1, 2, 3), nn.LayerNorm(10), nn.Flatten(), nn.Linear(20, 2)],
            (1, 12),
            1,
            "(10,)",
            "(2, 10)",
        ),
    ],
)
def test_a_layernorm_over_part_of_its_input_names_the_module_and_what_nxrs_has(
    modules: list[object], shape: tuple[int, ...], k: int, normalised: str, whole: str
) -> None:
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(nn.Sequential(*modules), input_shape=shape)
    assert str(err.value) == (
        f"module {k} ({modules[k]!r}) cannot be represented: it normalises over the shape "
        f"{normalised}, and its input here has the shape {whole}; nxrs's LayerNorm normalises "
        f"over the whole input of the layer (PyTorch's LayerNorm({whole}))"
    )


def test_a_layernorm_over_its_whole_input_is_taken() -> None:
    model = nn.Sequential(nn.LayerNorm([2, 12]), nn.Flatten(), nn.Linear(24, 2))
    t = nxrs.Trainer.from_torch(model, input_shape=(2, 12))
    assert t.state_dict()["gamma1"].shape == (2, 12)


@pytest.mark.parametrize(
    ("build", "shape", "tensor"),
    [
        (lambda: nn.Linear(4, 2, device="meta"), None, "module 0's weight"),
        (lambda: nn.Sequential(nn.Linear(4, 2, device="meta")), 4, "module 0's weight"),
        (
            lambda: nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2)).to("meta"),
            4,
            "module 0's weight",
        ),
    ],
)
def test_a_module_on_the_meta_device_is_refused(build: object, shape: object, tensor: str) -> None:
    with pytest.raises(nxrs.InputError, match=f"{tensor} is on torch's meta device"):
        nxrs.Trainer.from_torch(build(), input_shape=shape)  # type: ignore[operator]
