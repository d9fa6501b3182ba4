"""nxrs.sklearn: scikit-learn's own estimator checks, and exactness inside scikit-learn.

Golden values come from the independent numpy reference (tests/reference/general_ref.py, which
does not import nxrs) or from comparing two nxrs runs that must agree (n_jobs=1 and n_jobs=2,
two runs, pickled and not), never from nxrs's own output.
"""

from __future__ import annotations

import importlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate
from sklearn.utils.estimator_checks import parametrize_with_checks

import nxrs
from nxrs.sklearn import ExactMLPClassifier, ExactMLPRegressor

gr = importlib.import_module("reference.general_ref")

#: Small models and few epochs keep scikit-learn's whole check suite to a few seconds.
FAST: dict[str, Any] = {"hidden_layer_sizes": (16,), "max_iter": 20, "learning_rate_init": 0.01}


# Every check applies and passes: nothing is marked as an expected failure. The two checks
# scikit-learn itself skips are its array-API ones, which it runs only when the environment
# variable SCIPY_ARRAY_API is set (its reason is printed with pytest -rs).
@parametrize_with_checks([ExactMLPClassifier(**FAST), ExactMLPRegressor(**FAST)])
def test_scikit_learn_estimator_checks(estimator: Any, check: Any) -> None:
    check(estimator)


def data(n: int = 60, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    return x, y


def hash_of(estimator: Any) -> int:
    value: int = estimator.trainer_.state_hash()
    return value


def u32(a: Any) -> list[int]:
    values: list[int] = np.ascontiguousarray(a, np.float32).reshape(-1).view(np.uint32).tolist()
    return values


# --------------------------------------------------------------- the reference's bits


def test_classifier_fit_is_the_reference_run_with_labels_in_sorted_order() -> None:
    x, y = data()
    names = np.array(["zebra", "ant", "moth"])  # sorted: ant, moth, zebra
    labels = names[y]
    est = ExactMLPClassifier(
        hidden_layer_sizes=(5,),
        batch_size=8,
        max_iter=3,
        learning_rate_init=0.01,
        random_state=7,
    ).fit(x, labels)
    assert est.classes_.tolist() == ["ant", "moth", "zebra"]
    ref = gr.Trainer(layers=[4, 5, 3], seed=7, batch_size=8, lr=0.01)
    ref.fit_epochs(x, np.searchsorted(["ant", "moth", "zebra"], labels), 3)
    assert hash_of(est) == ref.state_hash()
    assert est.predict(x).tolist() == est.classes_[ref.predict(x)].tolist()
    assert u32(est.predict_proba(x)) == u32(ref.predict_proba(x))
    assert est.n_iter_ == 3 and est.t_ == 3 * 8
    assert len(est.loss_curve_) == 3 and est.loss_ == est.loss_curve_[-1]
    assert [c.shape for c in est.coefs_] == [(4, 5), (5, 3)]
    assert u32(est.coefs_[0]) == u32(ref.W[0].T)
    assert u32(est.intercepts_[1]) == u32(ref.b[1])


def test_digits_epoch_by_epoch_is_the_golden_reference_run() -> None:
    """partial_fit, one epoch per call, on ``nxrs train``'s digits split gives the numpy
    reference's state hash, mean step loss and test accuracy after every epoch
    (tests/golden/general.json)."""
    golden = json.loads((Path(__file__).parent / "golden" / "general.json").read_text())["digits"]
    x, y = gr.load_digits_f32()
    train, test = gr.split(len(x), golden["test_size"], golden["split_seed"])
    est = ExactMLPClassifier(hidden_layer_sizes=(128,), batch_size=32, random_state=0)
    for expected in golden["per_epoch"]:
        est.partial_fit(x[train], y[train], classes=np.arange(10))
        assert f"{hash_of(est):016x}" == expected["state_hash"]
        assert np.float32(est.loss_).view(np.uint32) == expected["mean_step_loss_bits"]
        assert est.score(x[test], y[test]) == expected["test_accuracy"]
    assert f"{hash_of(est):016x}" == golden["final_state_hash"]


@pytest.mark.parametrize("solver", ["adam", "adamw", "sgd"])
def test_regressor_fit_is_the_reference_run(solver: str) -> None:
    x, _ = data(features=3)
    y = np.stack([x[:, 0] - 2 * x[:, 1], x[:, 2] * x[:, 0]], axis=1).astype(np.float64)
    est = ExactMLPRegressor(
        hidden_layer_sizes=(6, 4),
        solver=solver,
        batch_size=16,
        max_iter=2,
        random_state=3,
        momentum=0.5,
    ).fit(x, y)
    extra = {"momentum": 0.5} if solver == "sgd" else {}
    ref = gr.Trainer(
        layers=[3, 6, 4, 2], loss="mse", optimizer=solver, seed=3, batch_size=16, **extra
    )
    ref.fit_epochs(x, y.astype(np.float32), 2)
    assert hash_of(est) == ref.state_hash()
    prediction = est.predict(x)
    assert prediction.dtype == np.float64 and prediction.shape == (60, 2)
    assert u32(prediction) == u32(ref.predict_proba(x))  # float64 widened exactly
    one = ExactMLPRegressor(hidden_layer_sizes=(), max_iter=1).fit(x, y[:, 0])
    assert one.predict(x).shape == (60,) and one.n_outputs_ == 1


def test_parameters_map_to_the_trainer() -> None:
    x, y = data()
    est = ExactMLPClassifier(
        hidden_layer_sizes=7,
        solver="sgd",
        batch_size="auto",
        learning_rate_init=0.05,
        momentum=0.8,
        shuffle=False,
        math="seed",
        init="glorot",
        grad_block=4,
        backend="soft",
        max_iter=1,
        random_state=np.random.RandomState(0),
    ).fit(x, y)
    config = est.trainer_.config
    assert config["layers"] == [4, 7, 3]
    assert config["batch_size"] == 60  # "auto": min(200, n_samples)
    assert (config["optimizer"], config["shuffle"], config["math"]) == ("sgd", False, "seed")
    assert (config["init"], config["grad_block"]) == ("glorot", 4)
    assert config["lr"] == np.float32(0.05) and config["momentum"] == np.float32(0.8)
    assert config["seed"] == np.random.RandomState(0).randint(np.iinfo(np.int32).max)
    assert est.trainer_.backend == "soft"
    assert ExactMLPClassifier(max_iter=1).fit(x, y).trainer_.config["seed"] == 0
    with pytest.raises(nxrs.ConfigError, match="weight_decay"):
        ExactMLPClassifier(weight_decay=0.1, max_iter=1).fit(x, y)


# --------------------------------------------------------------- continuing a run exactly


def test_partial_fit_continues_exactly() -> None:
    x, y = data()
    whole = ExactMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=1).fit(x, y)
    parts = ExactMLPClassifier(hidden_layer_sizes=(8,), random_state=1)
    for _ in range(3):
        parts.partial_fit(x, y, classes=[0, 1, 2])
    assert hash_of(parts) == hash_of(whole)
    assert parts.loss_curve_ == whole.loss_curve_ and parts.n_iter_ == 3
    with pytest.raises(ValueError, match="first call"):
        ExactMLPClassifier().partial_fit(x, y)
    with pytest.raises(ValueError, match="not in classes"):
        ExactMLPClassifier().partial_fit(x, y, classes=[0, 1])
    with pytest.raises(ValueError, match="was not built with"):
        parts.partial_fit(x, y + 1)
    with pytest.raises(ValueError, match="features"):
        parts.partial_fit(x[:, :3], y)


def test_warm_start_continues_exactly_and_refuses_changed_parameters() -> None:
    x, y = data()
    target = np.asarray(y, dtype=np.float64)
    for kind, labels in ((ExactMLPClassifier, y), (ExactMLPRegressor, target)):
        whole = kind(hidden_layer_sizes=(8,), max_iter=5, random_state=2).fit(x, labels)
        warm = kind(hidden_layer_sizes=(8,), max_iter=3, random_state=2, warm_start=True)
        warm.fit(x, labels)
        # The backend may change between fits: it is not part of the run.
        warm.set_params(max_iter=2, backend="soft").fit(x, labels)
        assert hash_of(warm) == hash_of(whole) and warm.trainer_.backend == "soft"
        assert warm.n_iter_ == 5 and len(warm.loss_curve_) == 5
        with pytest.raises(ValueError, match="lr differ"):
            warm.set_params(learning_rate_init=0.1).fit(x, labels)
    cold = ExactMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=2).fit(x, y)
    again = hash_of(cold)
    assert hash_of(cold.fit(x, y)) == again  # without warm_start, fit starts over


# --------------------------------------------------------------- pickling


def test_pickling_round_trips_the_bits_through_nxck_bytes() -> None:
    x, y = data()
    est = ExactMLPClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=4)
    est.fit(x, np.array(["a", "b", "c"])[y])
    state = est.__getstate__()
    assert "trainer_" not in state
    assert state["_nxck"][:4] == b"NXCK"
    clone_ = pickle.loads(pickle.dumps(est))
    assert hash_of(clone_) == hash_of(est)
    assert u32(clone_.predict_proba(x)) == u32(est.predict_proba(x))
    assert clone_.classes_.tolist() == ["a", "b", "c"]
    # The unpickled run continues exactly.
    est.partial_fit(x, np.array(["a", "b", "c"])[y])
    clone_.partial_fit(x, np.array(["a", "b", "c"])[y])
    assert hash_of(clone_) == hash_of(est)
    unfitted = pickle.loads(pickle.dumps(ExactMLPRegressor(max_iter=3)))
    assert unfitted.get_params() == ExactMLPRegressor(max_iter=3).get_params()


def test_feature_names_from_a_data_frame() -> None:
    x, y = data()
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    est = ExactMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(frame, y)
    assert est.feature_names_in_.tolist() == ["a", "b", "c", "d"] and est.n_features_in_ == 4
    assert est.predict(frame).tolist() == est.classes_[est.trainer_.predict(x)].tolist()
    with pytest.raises(ValueError, match="feature names"):
        est.predict(frame[["b", "a", "c", "d"]])


# --------------------------------------------------------------- exactness in joblib workers


def _digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = gr.load_digits_f32()
    return x[:300], y[:300]


def _hash_scorers() -> dict[str, Any]:
    """The fitted model's 64-bit state hash as two scores (exact in binary64)."""
    return {
        "accuracy": "accuracy",
        "hash_high": lambda est, x, y: hash_of(est) >> 32,
        "hash_low": lambda est, x, y: hash_of(est) & 0xFFFFFFFF,
    }


def test_cross_validation_and_grid_search_are_exact_across_processes_and_runs() -> None:
    x, y = _digits()
    est = ExactMLPClassifier(hidden_layer_sizes=(16,), max_iter=2, random_state=5)
    folds = KFold(3, shuffle=True, random_state=0)

    def cv(n_jobs: int) -> dict[str, list[float]]:
        result = cross_validate(
            clone(est),
            x,
            y,
            cv=folds,
            n_jobs=n_jobs,
            scoring=_hash_scorers(),
            return_estimator=True,
        )
        hashes = [hash_of(e) for e in result["estimator"]]
        assert [
            int(h) << 32 | int(lo)
            for h, lo in zip(result["test_hash_high"], result["test_hash_low"])
        ] == hashes
        return {k: list(v) for k, v in result.items() if k.startswith("test_")}

    def scores(n_jobs: int) -> list[float]:
        return list(cross_val_score(clone(est), x, y, cv=folds, n_jobs=n_jobs))

    def grid(n_jobs: int) -> tuple[dict[str, list[Any]], int]:
        search = GridSearchCV(
            clone(est),
            {"hidden_layer_sizes": [(8,), (16,)], "learning_rate_init": [0.001, 0.01]},
            cv=folds,
            n_jobs=n_jobs,
            scoring=_hash_scorers(),
            refit="accuracy",
        ).fit(x, y)
        results = {k: list(v) for k, v in search.cv_results_.items() if "test_" in k}
        return results, hash_of(search.best_estimator_)

    first = cv(1)
    assert len(set(first["test_hash_low"])) == 3  # three different fitted models
    assert cv(2) == first and cv(2) == first
    assert scores(1) == scores(2) == first["test_accuracy"]
    reference = grid(1)
    assert grid(2) == reference and grid(2) == reference
    assert len(set(reference[0]["split0_test_hash_low"])) == 4
