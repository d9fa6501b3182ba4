"""scikit-learn estimators over nxrs's exact trainer: ``ExactMLPClassifier`` and
``ExactMLPRegressor``.

They are drop-in relatives of ``sklearn.neural_network.MLPClassifier`` and ``MLPRegressor``
(ReLU networks trained with Adam, AdamW or SGD) whose every fit is bit-reproducible: the same
data and parameters give the same weights, bit for bit, on any machine, in any process, under
``GridSearchCV`` and ``cross_val_score`` with any ``n_jobs``. The fitted model is
``estimator.trainer_``, an ``nxrs.Trainer`` (``state_hash()``, ``save``, ``to_torch``, ...).

Parameters shared with ``MLPClassifier`` mean the same, with these differences:

- ``max_iter`` is the number of epochs, always all of them: there is no ``tol`` /
  ``n_iter_no_change`` stopping and no early stopping (so no ConvergenceWarning).
- ``random_state``: an int is nxrs's ``seed`` (weight initialisation and shuffles); None is
  seed 0, so unseeded fits are reproducible too; a ``numpy.random.RandomState`` gives one draw.
- ``batch_size`` defaults to 32 (nxrs's default); "auto" is ``min(200, n_samples)`` as in
  ``MLPClassifier``, fixed when the model is built.
- ``momentum`` (SGD only) is classical momentum as PyTorch's SGD (``MLPClassifier``'s
  ``nesterovs_momentum=False``). ``alpha`` does not exist: ``MLPClassifier``'s L2 penalty
  (added to the loss gradient of the weights only, scaled by the batch size) has no exact
  counterpart; ``weight_decay`` is nxrs's (decoupled for "adamw", coupled and applied to
  biases too for "sgd", not available for "adam"; ``docs/TRAINING.md`` section 7).
- ``solver`` is "adam", "adamw" or "sgd" (no "lbfgs"); ``learning_rate`` schedules and
  ``power_t`` do not exist (the rate is constant); activations are ReLU.
- ``math``, ``init``, ``grad_block`` and ``backend`` are ``nxrs.Trainer``'s.

``partial_fit(X, y)`` trains one epoch (one shuffled pass) over ``X, y``, continuing the run
exactly: ``k`` calls on the same data give the bits of ``fit`` with ``max_iter=k``. With
``warm_start=True``, ``fit`` continues the fitted run for ``max_iter`` more epochs. Both need the
parameters unchanged since the model was built (ConfigError otherwise). Pickling stores the run
as NXCK checkpoint bytes (``Trainer.to_bytes``): the unpickled estimator holds the same bits.

Counts (``max_iter``, ``batch_size``, ``hidden_layer_sizes``, ``grad_block``, an int
``random_state``) are ints or numpy integers, never bools or floats (``nxrs._util.checks``), so
``GridSearchCV`` grids may be numpy arrays. Every parameter is checked when ``fit`` or
``partial_fit`` starts, before the data; a bad value is a ``ConfigError``, bad data an
``InputError`` or scikit-learn's ``ValueError`` (all ``ValueError``s). A call that raises leaves
the estimator as it was: the fitted model, ``classes_``, ``n_features_in_`` and the rest.

Needs scikit-learn 1.6 or later.
"""

from __future__ import annotations

import operator
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
import sklearn  # type: ignore[import-untyped,unused-ignore]
from sklearn.base import (  # type: ignore[import-untyped,unused-ignore]
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
)
from sklearn.utils.multiclass import (  # type: ignore[import-untyped,unused-ignore]
    check_classification_targets,
)
from sklearn.utils.validation import (  # type: ignore[import-untyped,unused-ignore]
    check_is_fitted,
    validate_data,
)

from nxrs._nxrs import ConfigError, InputError
from nxrs._trainer import Trainer
from nxrs._util import config as _config
from nxrs._util.checks import count, flag, optional_count
from nxrs.interop import weights

__all__ = ["ExactMLPClassifier", "ExactMLPRegressor"]

_MIN_SKLEARN = (1, 6)
if tuple(int(part) for part in sklearn.__version__.split(".")[:2]) < _MIN_SKLEARN:
    raise ImportError(
        f"nxrs.sklearn needs scikit-learn >= 1.6 (validate_data, __sklearn_tags__); found "
        f"{sklearn.__version__}: pip install -U 'scikit-learn>=1.6'"
    )

#: The pickled state's key for the run's NXCK bytes.
_STATE_KEY = "_nxck"


@dataclass(frozen=True)
class _Parameters:
    """An estimator's parameters, checked: what builds (or continues) its trainer."""

    hidden: list[int]
    batch_size: int | str  # a count, or "auto" (resolved by the data's size)
    max_iter: int
    warm_start: bool
    #: ``Trainer(layers, batch_size=..., **options)``'s other keywords.
    options: dict[str, Any]


class _ExactMLP(BaseEstimator):  # type: ignore[misc]
    """What the classifier and the regressor share: the parameters, building and continuing the
    trainer, pickling."""

    _loss: ClassVar[Literal["cross_entropy", "mse"]]
    #: The fitted run (set by fit and partial_fit).
    trainer_: Trainer

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (100,),
        *,
        solver: Literal["adam", "adamw", "sgd"] = _config.default("optimizer"),
        batch_size: int | Literal["auto"] = _config.default("batch_size"),
        learning_rate_init: float = _config.default("lr"),
        max_iter: int = 200,
        shuffle: bool = _config.default("shuffle"),
        random_state: int | np.random.RandomState | None = None,
        beta_1: float = _config.default("beta1"),
        beta_2: float = _config.default("beta2"),
        epsilon: float = _config.default("eps"),
        momentum: float = 0.9,  # MLPClassifier's (nxrs's own default, 0, is no momentum)
        weight_decay: float | None = None,
        warm_start: bool = False,
        math: Literal["seed", "ieee"] = _config.default("math"),
        init: Literal["seed", "he", "glorot"] = _config.default("init"),
        grad_block: int | None = None,
        backend: Literal["auto", "hw", "soft"] = "auto",
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.solver = solver
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.warm_start = warm_start
        self.math = math
        self.init = init
        self.grad_block = grad_block
        self.backend = backend

    # -- the trainer --------------------------------------------------------------------------

    def _parameters(self) -> _Parameters:
        """The parameters, checked (ConfigError naming the first bad one); no data needed."""
        batch = self.batch_size
        if not (isinstance(batch, str) and batch == "auto"):
            batch = count("batch_size", batch, minimum=1)
        options: dict[str, Any] = {
            "loss": self._loss,
            "math": self.math,
            "init": self.init,
            "seed": self._seed(),
            "optimizer": self.solver,
            "lr": self.learning_rate_init,
            "grad_block": optional_count("grad_block", self.grad_block, minimum=1),
            "shuffle": flag("shuffle", self.shuffle),
            "weight_decay": self.weight_decay,
            "backend": self.backend,
        }
        # Each optimiser takes only its own hyperparameters (nxrs refuses the others).
        if self.solver == "sgd":
            options["momentum"] = self.momentum
        else:
            options.update(beta1=self.beta_1, beta2=self.beta_2, eps=self.epsilon)
        return _Parameters(
            hidden=self._hidden(),
            batch_size=batch,
            max_iter=count("max_iter", self.max_iter, minimum=1),
            warm_start=flag("warm_start", self.warm_start),
            options=options,
        )

    def _seed(self) -> int:
        state = self.random_state
        if state is None:
            seed: int = _config.default("seed")
            return seed
        if isinstance(state, np.random.RandomState):
            return int(state.randint(np.iinfo(np.int32).max))
        try:
            return count("random_state", state, minimum=None)
        except ConfigError:
            raise ConfigError(
                f"random_state = {state!r} must be an int, a numpy.random.RandomState or None"
            ) from None

    def _hidden(self) -> list[int]:
        """``hidden_layer_sizes`` as a list of counts: one count, or an iterable of them."""
        hidden: Any = self.hidden_layer_sizes
        try:
            operator.index(hidden)
        except TypeError:
            if isinstance(hidden, Iterable) and not isinstance(hidden, (str, bytes)):
                return [
                    count(f"hidden_layer_sizes[{k}]", h, minimum=1) for k, h in enumerate(hidden)
                ]
        return [count("hidden_layer_sizes", hidden, minimum=1)]

    def _new_trainer(
        self, parameters: _Parameters, n_features: int, n_outputs: int, n_samples: int
    ) -> Trainer:
        """The trainer these parameters build for the data's shape (a data set of
        ``n_samples`` resolves ``batch_size="auto"``, ``min(200, n_samples)``)."""
        given = parameters.batch_size
        batch = min(200, n_samples) if isinstance(given, str) else given
        layers = [n_features, *parameters.hidden, n_outputs]
        return Trainer(layers, batch_size=batch, **parameters.options)

    def _continuing(self, parameters: _Parameters, n_outputs: int, n_samples: int) -> Trainer:
        """The fitted trainer, checked to be the one these parameters build."""
        trainer: Trainer = self.trainer_
        built = self._new_trainer(parameters, self.n_features_in_, n_outputs, n_samples)
        old, new = trainer.config, built.config
        if parameters.batch_size == "auto":
            new["batch_size"] = old["batch_size"]
        changed = _config.config_diff(old, new)
        if changed:
            raise ConfigError(
                f"the parameters changed since the model was built (its {', '.join(changed)} "
                "differ): an exact run cannot change them; fit with warm_start=False to start "
                "over"
            )
        return trainer

    def _train(self, x: npt.NDArray[Any], y: npt.NDArray[Any], epochs: int) -> None:
        """Trains ``trainer_`` until ``epochs`` epochs are complete and records the losses."""
        history = self.trainer_.fit(x, y, epochs=epochs, progress=False)
        self.loss_curve_ = [*getattr(self, "loss_curve_", []), *history.history.get("loss", [])]
        self.loss_ = self.loss_curve_[-1] if self.loss_curve_ else None
        self.n_iter_ = self.trainer_.epoch
        self.t_ = self.trainer_.steps

    def _fit(self, x: Any, y: Any, *, incremental: bool, classes: Any = None) -> Any:
        # The parameters first, as scikit-learn's estimators check theirs: a bad one is refused
        # before the data is looked at.
        parameters = self._parameters()
        continuing = hasattr(self, "trainer_") and (incremental or parameters.warm_start)
        # Then the data, the trainer and the data's conversion to it. validate_data records
        # n_features_in_ (and feature_names_in_) on the estimator as it checks X, and _validate
        # sets classes_ or n_outputs_: a call refused anywhere up to the first step restores
        # every attribute, so a failed fit leaves the estimator as it was.
        before = dict(self.__dict__)
        try:
            x, targets, n_outputs = self._validate(x, y, reset=not continuing, classes=classes)
            if continuing:
                trainer = self._continuing(parameters, n_outputs, len(x))
            else:
                trainer = self._new_trainer(parameters, x.shape[1], n_outputs, len(x))
            trainer._dataset(x, targets)  # values nxrs refuses (beyond binary32): InputError
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise
        if continuing:
            # The backend is not part of the run (every backend computes the same bits).
            trainer.backend = self.backend
        else:
            self.loss_curve_ = []
        self.trainer_ = trainer
        epochs = trainer.epoch + (1 if incremental else parameters.max_iter)
        self._train(x, targets, epochs)
        return self

    @abstractmethod
    def _validate(
        self, x: Any, y: Any, *, reset: bool, classes: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
        """``(x, targets, n_outputs)``: checked features and nxrs's targets."""

    def fit(self, X: Any, y: Any) -> Any:
        """Trains ``max_iter`` epochs from the start (or, with ``warm_start`` and a fitted
        model, after the epochs done so far). Returns ``self``."""
        return self._fit(X, y, incremental=False)

    def _outputs(self, X: Any) -> npt.NDArray[np.float32]:
        check_is_fitted(self, "trainer_")
        x = validate_data(self, X, reset=False, dtype=[np.float32, np.float64])
        outputs: npt.NDArray[np.float32] = self.trainer_.predict_proba(x)
        return outputs

    # -- coefficients, as MLPClassifier shows them ---------------------------------------------

    @property
    def coefs_(self) -> list[npt.NDArray[np.float32]]:
        """The weights, layer by layer, shaped (inputs, outputs) as ``MLPClassifier.coefs_``
        (nxrs's ``W<l>`` transposed; copies)."""
        check_is_fitted(self, "trainer_")
        return [w.T.copy() for w, _ in weights(self.trainer_)]

    @property
    def intercepts_(self) -> list[npt.NDArray[np.float32]]:
        """The biases, layer by layer (copies)."""
        check_is_fitted(self, "trainer_")
        return [b for _, b in weights(self.trainer_)]

    # -- pickling: the run as NXCK bytes -------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = dict(super().__getstate__())
        trainer = state.pop("trainer_", None)
        if trainer is not None:
            state[_STATE_KEY] = trainer.to_bytes()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        data = state.pop(_STATE_KEY, None)
        if data is not None:
            state["trainer_"] = Trainer.from_bytes(data, backend=state.get("backend", "auto"))
        super().__setstate__(state)


class ExactMLPClassifier(ClassifierMixin, _ExactMLP):  # type: ignore[misc]
    """A bit-reproducible multi-layer perceptron classifier: ReLU hidden layers
    (``hidden_layer_sizes``), a softmax output over the classes, cross-entropy loss (see the
    module's documentation for the parameters).

    ``classes_`` holds the labels in sorted order (``numpy.unique``; strings too), mapped to
    outputs ``0 .. n_classes - 1``; two classes get two softmax outputs.
    """

    _loss = "cross_entropy"

    def _validate(
        self, x: Any, y: Any, *, reset: bool, classes: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
        x, y = validate_data(self, x, y, reset=reset, dtype=[np.float32, np.float64])
        check_classification_targets(y)
        if reset:
            if classes is not None:
                self.classes_ = np.unique(np.asarray(classes))
                unknown = np.setdiff1d(y, self.classes_)
                if len(unknown):
                    raise InputError(f"y holds labels not in classes: {unknown.tolist()}")
            else:
                self.classes_ = np.unique(y)
            if len(self.classes_) < 2:
                # As scikit-learn's classifiers say it (nxrs's fit refuses a one-output
                # classifier with a ConfigError).
                raise ValueError("Classifier can't train when only one class is present.")
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ConfigError(
                f"classes={classes!r} is not the classes of the first partial_fit call, "
                f"{self.classes_.tolist()}"
            )
        index = np.searchsorted(self.classes_, y)
        index = np.minimum(index, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[index], y):
            unknown = np.setdiff1d(y, self.classes_)
            raise InputError(f"y holds labels the model was not built with: {unknown.tolist()}")
        return x, index.astype(np.int64), len(self.classes_)

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> ExactMLPClassifier:
        """Trains one epoch over ``X, y`` (one shuffled pass), continuing the run exactly; the
        first call builds the model for ``classes`` (all the labels there will be, required
        then, as for ``MLPClassifier``). Returns ``self``."""
        if not hasattr(self, "trainer_") and classes is None:
            raise ConfigError("classes must be passed on the first call to partial_fit")
        result: ExactMLPClassifier = self._fit(X, y, incremental=True, classes=classes)
        return result

    def predict_proba(self, X: Any) -> npt.NDArray[np.float32]:
        """The class probabilities, float32 (n_samples, n_classes), in ``classes_`` order:
        the exact softmax nxrs computes."""
        return self._outputs(X)

    def predict(self, X: Any) -> npt.NDArray[Any]:
        """The most probable class of each sample (``Trainer.predict``'s exact rule)."""
        check_is_fitted(self, "trainer_")
        x = validate_data(self, X, reset=False, dtype=[np.float32, np.float64])
        labels: npt.NDArray[Any] = self.classes_[self.trainer_.predict(x)]
        return labels


class ExactMLPRegressor(RegressorMixin, _ExactMLP):  # type: ignore[misc]
    """A bit-reproducible multi-layer perceptron regressor: ReLU hidden layers
    (``hidden_layer_sizes``), identity outputs, one per target, mean squared error loss
    (``docs/TRAINING.md``: the mean over the outputs of the squared differences, no 1/2 factor).
    See the module's documentation for the parameters.
    """

    _loss = "mse"

    def _validate(
        self, x: Any, y: Any, *, reset: bool, classes: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
        x, y = validate_data(
            self,
            x,
            y,
            reset=reset,
            dtype=[np.float32, np.float64],
            multi_output=True,
            y_numeric=True,
        )
        # nxrs takes float targets: float32 as they are, everything else through float64
        # (rounded to float32 by nxrs, as features are).
        targets = y if y.dtype == np.float32 else y.astype(np.float64)
        n_outputs = 1 if targets.ndim == 1 else targets.shape[1]
        if reset:
            self.n_outputs_ = n_outputs
        elif n_outputs != self.n_outputs_:
            raise InputError(
                f"y has {n_outputs} targets, the model was built for {self.n_outputs_}"
            )
        return x, targets, n_outputs

    def partial_fit(self, X: Any, y: Any) -> ExactMLPRegressor:
        """Trains one epoch over ``X, y`` (one shuffled pass), continuing the run exactly (the
        first call builds the model). Returns ``self``."""
        result: ExactMLPRegressor = self._fit(X, y, incremental=True)
        return result

    def predict(self, X: Any) -> npt.NDArray[np.float64]:
        """The outputs: (n_samples,) for one target, else (n_samples, n_targets). float64, as
        scikit-learn expects of regressors, holding nxrs's float32 outputs exactly (widening
        loses nothing)."""
        outputs = self._outputs(X).astype(np.float64)
        return outputs.ravel() if outputs.shape[1] == 1 else outputs

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y of shape (n, k) trains k outputs
        return tags
