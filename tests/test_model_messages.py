"""What a user reads about a model file or a layer list that nxrs refuses: a typed error naming
the layer, the parameter and the value as the user wrote it, never a traceback from Python's
JSON parser, a bit pattern, the internal 2-D form of a 1-D layer, or Python's hint about
``sys.set_int_max_str_digits``; labels beyond the model's outputs say how many it needs; a
preset's name where a layer list belongs names the presets."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nxrs
from nxrs.cli import main
from nxrs.layers import (
    BatchNorm1d,
    Conv1d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    LayerNorm,
    load_model,
)

# --- nesting


def test_a_model_file_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(nxrs.ConfigError, match=r"deep\.json: not a model file: its JSON is nested"):
        load_model(deep)
    inside = tmp_path / "inside.json"
    inside.write_text('[{"type": "Input", "shape": ' + "[" * 5000 + "]" * 5000 + "}]")
    with pytest.raises(nxrs.ConfigError, match="nested too deeply"):
        load_model(inside)


def test_nxrs_train_on_a_model_file_nested_too_deeply_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["train", "--model", str(deep)]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"nxrs train: ConfigError: {deep}: not a model file: its JSON is nested too deeply\n"
    )


@pytest.mark.parametrize("depth", [300, 5000])  # beyond the core's parser; beyond Python's
def test_a_layer_dict_nested_too_deeply_is_a_config_error(depth: int) -> None:
    shape: object = 1
    for _ in range(depth):
        shape = [shape]
    layers = [{"type": "Input", "shape": shape}, {"type": "Dense", "units": 2}]
    with pytest.raises(nxrs.ConfigError, match="layer 0: its values are nested too deeply"):
        nxrs.Trainer(layers=layers)


# --- keys given twice


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[{"type": "Input", "shape": [2]}, {"type": "Dense", "units": 3, "units": 2}]', "units"),
        ('[{"type": "Input", "shape": [2]}, {"type": "Dense", "type": "ReLU"}]', "type"),
        ('{"layers": [{"type": "Input", "shape": [3]}], "layers": []}', "layers"),
    ],
)
def test_a_key_given_twice_in_a_model_file_is_refused_naming_it(
    tmp_path: Path, text: str, key: str
) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    message = f"m.json: not a model file: the key '{key}' is given twice in one object"
    with pytest.raises(nxrs.ConfigError, match=re.escape(message)):
        load_model(path)


# --- NaN and infinity


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (Dropout(float("nan")), "layer 1 (Dropout): p = nan is not a finite number"),
        (LayerNorm(eps=float("inf")), "layer 1 (LayerNorm): eps = inf is not a finite number"),
        ({"type": "BatchNorm1d", "momentum": float("-inf")}, "momentum = -inf is not a finite"),
    ],
)
def test_a_layer_value_that_is_not_finite_is_named(layer: object, message: str) -> None:
    with pytest.raises(nxrs.ConfigError) as info:
        nxrs.Trainer(layers=[Input(2), layer, Dense(2)])
    assert message in str(info.value)
    assert "not JSON" not in str(info.value)


# --- values as written


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (Dropout(1.0), "layer 1 (Dropout): p must be in [0, 1), got 1.0"),
        (Dropout(-0.25), "p must be in [0, 1), got -0.25"),
        (BatchNorm1d(momentum=1.5), "layer 1 (BatchNorm1d): momentum must be in [0, 1], got 1.5"),
        (LayerNorm(eps=0.0), "layer 1 (LayerNorm): eps must be finite and > 0, got 0.0"),
    ],
)
def test_a_value_out_of_range_is_shown_as_written(layer: object, message: str) -> None:
    with pytest.raises(nxrs.ConfigError) as info:
        nxrs.Trainer(layers=[Input(2), layer, Dense(2)])
    assert message in str(info.value)
    assert "F32(" not in str(info.value)


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (
            Conv1d(2, 0),
            "layer 1 (Conv1d): kernel sizes and strides must be >= 1, got kernel_size 0",
        ),
        (Conv1d(2, 3, stride=0), "got stride 0"),
        (Conv2d(2, (3, 0)), "layer 1 (Conv2d): kernel sizes and strides must be >= 1, got kernel_"),
    ],
)
def test_a_zero_kernel_or_stride_is_shown_as_written(layer: object, message: str) -> None:
    shape = (1, 8) if isinstance(layer, Conv1d) else (1, 8, 8)
    with pytest.raises(nxrs.ConfigError) as info:
        nxrs.Trainer(layers=[Input(*shape), layer, Flatten(), Dense(2)])
    assert message in str(info.value)
    assert "[1, 0]" not in str(info.value) and "[1, 3]" not in str(info.value)


# --- integers of thousands of digits


BIG = 10**4999  # 5,000 digits: more than Python writes (4,300)


def test_an_integer_of_5000_digits_in_a_model_file_is_named_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(
        '[{"type": "Input", "shape": [2]}, {"type": "Dense", "units": 1' + "0" * 4999 + "}]"
    )
    with pytest.raises(nxrs.ConfigError) as info:
        load_model(path)
    assert "m.json: not a model file: an integer of 5000 digits is larger than any size" in str(
        info.value
    )
    assert "set_int_max_str_digits" not in str(info.value)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Dense(BIG), "Dense: units = an integer of about 5000 digits is too large"),
        (lambda: Input(2, -BIG), "shape[1] = a negative integer of about 5000 digits"),
        (
            lambda: nxrs.Trainer(layers=[Input(2), {"type": "Dense", "units": BIG}]),
            "layer 1 (Dense): units = an integer of about 5000 digits is too large",
        ),
        (lambda: nxrs.Trainer(layers=[2, BIG]), "layers[1] = an integer of about 5000 digits"),
        (lambda: nxrs.Trainer(layers=[2, 2], seed=-BIG), "seed = a negative integer of about"),
        (
            lambda: nxrs.Trainer(layers=[2, 2]).fit(np.zeros((2, 2), np.float32), [0, 1], BIG),
            "epochs = an integer of about 5000 digits",
        ),
    ],
)
def test_an_integer_of_5000_digits_is_named_by_its_size(build: object, message: str) -> None:
    with pytest.raises((nxrs.ConfigError, nxrs.InputError)) as info:
        build()  # type: ignore[operator]
    assert message in str(info.value)
    assert "set_int_max_str_digits" not in str(info.value)


# --- labels beyond the model's outputs


@pytest.mark.parametrize("layers", [[Input(2), Dense(3)], [2, 3]])
def test_labels_beyond_the_outputs_say_how_many_outputs_they_need(layers: list[object]) -> None:
    x, y = np.zeros((10, 2), np.float32), np.arange(10) % 5
    with pytest.raises(nxrs.InputError) as info:
        nxrs.Trainer(layers=layers).fit(x, y, 1)
    message = str(info.value)
    assert "label 3 of sample 3 is outside 0..3, the classes of a model with 3 outputs" in message
    assert "labels go up to 4 (5 classes), so the model needs 5 outputs" in message


def test_a_negative_label_says_labels_are_class_indices() -> None:
    x, y = np.zeros((2, 2), np.float32), np.array([0, -1])
    with pytest.raises(nxrs.InputError, match=r"label -1 of sample 1 is outside 0\.\.3, .* from 0"):
        nxrs.Trainer(layers=[2, 3]).fit(x, y, 1)


# --- a preset's name


@pytest.mark.parametrize("name", ["mnist1d-cnn", "resnet"])
def test_a_string_for_layers_names_the_presets(name: str) -> None:
    with pytest.raises(nxrs.ConfigError) as info:
        nxrs.Trainer(layers=name)
    message = str(info.value)
    assert f"layers = {name!r} is a string" in message
    assert "nxrs.layers.preset(NAME)" in message and "mnist1d-cnn, digits-cnn" in message
