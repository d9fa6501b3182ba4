"""The configuration schema (``nxrs.config_schema()``, the core's one table of settings) against
what uses it: ``docs/TRAINING.md``'s table of defaults, ``Trainer(...)``'s keywords and
signature, the configuration dict, the scikit-learn estimators' defaults, and the one
comparison of configurations (``nxrs._util.config.config_diff``)."""

from __future__ import annotations

import inspect
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs._util import config as _config

TRAINING = Path(__file__).resolve().parents[1] / "docs" / "TRAINING.md"
#: Trainer(...)'s keywords that are not settings: the seed model's name for `layers`, and how
#: this machine computes (not part of the configuration).
NOT_SETTINGS = {"sizes", "backend", "threads"}
SCHEMA = nxrs.config_schema()
NAMES = [s["name"] for s in SCHEMA]


def documented_table(text: str) -> dict[str, tuple[str, str, str]]:
    """TRAINING.md section 1's table: key -> (values, general default, seed model default); a
    row of several keys (`beta1`, `beta2`) gives each its own defaults."""
    section = text.split("## 1. Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        keys = re.findall(r"`(\w+)`", cells[0])
        # One default per key, or one for all of them (`-`).
        split = [c.split(", ") if len(keys) > 1 else [c] for c in cells[2:]]
        split = [d if len(d) == len(keys) else d * len(keys) for d in split]
        for k, key in enumerate(keys):
            rows[key] = (cells[1], split[0][k], split[1][k])
    return rows


def documented_value(cell: str) -> Any:
    """A default as the table writes it: `"ieee"`, `0.001`, `9/10`, `32`, `true`, `[6, 10, 4]`,
    none, - (no value) or required (no default)."""
    cell = re.sub(r"\s*\(.*\)$", "", cell).strip()
    if cell in {"none", "-", "required"}:
        return None
    literal = cell.strip("`")
    if literal.startswith('"'):
        return literal.strip('"')
    if literal in {"true", "false"}:
        return literal == "true"
    if literal.startswith("["):
        return [int(n) for n in literal.strip("[]").split(",")]
    if "/" in literal:
        return Fraction(literal)
    return int(literal) if re.fullmatch(r"-?\d+", literal) else float(literal)


def same_default(documented: Any, schema: Any) -> bool:
    """Floats as the binary32 values they become (`9/10` as the seed computes it)."""
    if isinstance(documented, Fraction):
        quotient = np.float32(documented.numerator) / np.float32(documented.denominator)
        return bool(quotient == np.float32(schema))
    if isinstance(schema, float):
        return isinstance(documented, (int, float)) and bool(
            np.float32(documented) == np.float32(schema)
        )
    return bool(documented == schema and type(documented) is type(schema))


def test_training_md_documents_every_setting_with_the_schemas_defaults() -> None:
    table = documented_table(TRAINING.read_text(encoding="utf-8"))
    assert list(table) == NAMES, "TRAINING.md's table and the schema list other settings"
    for setting in SCHEMA:
        values, general, seed_model = table[setting["name"]]
        for family, cell in [("general", general), ("seed_model", seed_model)]:
            documented = documented_value(cell)
            assert same_default(documented, setting["default"][family]), (
                f"{setting['name']} ({family}): TRAINING.md says {cell}, the schema "
                f"{setting['default'][family]!r}"
            )
        if setting["default_adamw"] is not None:
            adamw = re.search(r"`([^`]+)` for AdamW", general)
            assert adamw is not None, f"{setting['name']}: TRAINING.md omits AdamW's default"
            assert same_default(documented_value(adamw.group(1)), setting["default_adamw"])
        if setting["default_cosine"] is not None:
            for cell in [general, seed_model]:
                cosine = re.search(r"`([^`]+)` for cosine", cell)
                assert cosine is not None, f"{setting['name']}: TRAINING.md omits its default"
                assert same_default(documented_value(cosine.group(1)), setting["default_cosine"])
        if setting["default_layer_objects"] is not None:
            objects = re.search(r"`([^`]+)` for layer objects", general)
            assert objects is not None, f"{setting['name']}: TRAINING.md omits its default"
            assert documented_value(objects.group(1)) == setting["default_layer_objects"]
        for choice in setting["choices"] or []:
            assert f'"{choice}"' in values, f"{setting['name']}: {choice} is not documented"


def test_the_docs_check_can_fail() -> None:
    text = TRAINING.read_text(encoding="utf-8")
    wrong = documented_table(text.replace("| `32` | `1` |", "| `64` | `1` |"))
    assert not same_default(documented_value(wrong["batch_size"][1]), 32)
    assert not same_default(documented_value("`999/1000`"), 0.9)
    assert same_default(documented_value("`999/1000`"), 0.999)


def test_the_schemas_rows() -> None:
    kinds = {"sizes", "int", "float", "str", "bool"}
    for s in SCHEMA:
        assert set(s) == {
            "name",
            "type",
            "choices",
            "optional",
            "default",
            "default_adamw",
            "default_cosine",
            "default_layer_objects",
            "min",
            "range",
            "doc",
        }
        assert s["type"] in kinds
        assert (s["choices"] is not None) == (s["type"] == "str")
        assert set(s["default"]) == {"general", "seed_model"}
        assert s["doc"] and s["range"]
    assert _config.choices("optimizer") == ["adam", "adamw", "sgd"]
    assert _config.choices("schedule") == ["constant", "linear", "step", "cosine"]
    assert _config.choices("decay_params") == ["all", "matrices"]
    assert _config.setting("min_lr")["default_cosine"] == 0.0
    assert _config.default("batch_size") == 32
    assert _config.default("batch_size", "seed_model") == 1
    assert _config.setting("weight_decay")["default_adamw"] == 0.01
    with pytest.raises(KeyError):
        _config.default("lrr")
    with pytest.raises(KeyError):
        _config.choices("lr")


def test_trainers_keywords_are_the_schemas_settings() -> None:
    parameters = list(inspect.signature(nxrs.Trainer).parameters)
    assert parameters[0] == "layers"
    assert set(parameters) == set(NAMES) | NOT_SETTINGS
    assert len(parameters) == len(set(parameters))
    config = nxrs.Trainer(layers=[2, 3]).config
    assert list(config) == NAMES


@pytest.mark.parametrize("family", ["general", "seed_model"])
def test_every_setting_is_reachable_by_name_with_its_default(family: str) -> None:
    base: dict[str, Any] = {"layers": [2, 3]} if family == "general" else {}
    default = nxrs.Trainer(**base).config
    for name in NAMES:
        value = _config.default(name, family)  # type: ignore[arg-type]
        if name == "layers" or value is None:
            continue
        config = nxrs.Trainer(**base, **{name: value}).config
        assert _config.config_diff(config, default) == [], name
        assert same_default(value, config[name]) or value == config[name], name


def test_every_choice_builds_a_trainer() -> None:
    needs = {
        "linear": {"total_steps": 5},
        "step": {"step_size": 2, "gamma": 0.5},
        "cosine": {"total_steps": 5},
        "matrices": {"optimizer": "sgd"},
    }
    # init="torch" is for layer objects (TRAINING.md section 15.4); every other choice is for
    # layer sizes too.
    objects = [nxrs.layers.Input(2), nxrs.layers.Dense(3)]
    for s in SCHEMA:
        for choice in s["choices"] or []:
            extra = needs.get(choice, {}) if s["name"] in {"schedule", "decay_params"} else {}
            layers = objects if choice == "torch" else [2, 3]
            config = nxrs.Trainer(layers=layers, **{s["name"]: choice}, **extra).config
            assert config[s["name"]] == choice


def test_unknown_keywords_and_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'lrr'"):
        nxrs.Trainer(lrr=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="argument 'lr'"):
        nxrs.Trainer(lr="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="argument 'shuffle'"):
        nxrs.Trainer(shuffle=1)  # type: ignore[arg-type]
    with pytest.raises(nxrs.ConfigError, match='optimizer = "adagrad" is not known'):
        nxrs.Trainer(optimizer="adagrad")  # type: ignore[arg-type]


def test_adamw_decays_by_default_in_both_families() -> None:
    adamw = _config.setting("weight_decay")["default_adamw"]
    for base in [{}, {"layers": [2, 3]}]:
        config = nxrs.Trainer(**base, optimizer="adamw").config  # type: ignore[arg-type]
        assert np.float32(config["weight_decay"]) == np.float32(adamw)
        assert nxrs.Trainer(**base, optimizer="sgd").config["weight_decay"] == 0.0  # type: ignore[arg-type]


def test_the_estimators_defaults_are_the_schemas() -> None:
    pytest.importorskip("sklearn")
    from nxrs.sklearn import ExactMLPClassifier

    params = ExactMLPClassifier().get_params()
    schema = {
        "solver": "optimizer",
        "batch_size": "batch_size",
        "learning_rate_init": "lr",
        "shuffle": "shuffle",
        "beta_1": "beta1",
        "beta_2": "beta2",
        "epsilon": "eps",
        "math": "math",
        "init": "init",
    }
    for param, name in schema.items():
        assert params[param] == _config.default(name), param


def test_config_diff_is_the_cores_one_comparison() -> None:
    a = nxrs.Trainer(layers=[2, 3]).config
    b = nxrs.Trainer(layers=[2, 3], lr=0.5, batch_size=4).config
    assert _config.config_diff(a, a) == []
    # The schema's order, not alphabetical; a key only one side holds differs.
    assert _config.config_diff(a, b) == ["lr", "batch_size"]
    assert _config.config_diff(a, {**a, "extra": 1}) == ["extra"]
    assert _config.config_diff({"momentum": 0.0}, {"momentum": -0.0}) == ["momentum"]
    missing = dict(a)
    del missing["seed"]
    assert _config.config_diff(a, missing) == ["seed"]
