"""``nxrs.Trainer``: the Python class over the compiled trainer (``nxrs._nxrs._Trainer``).

The compiled class computes (steps, inference, checkpoints, the state); this subclass adds what
is orchestration, in Python: ``fit`` (``nxrs._train.fit``), the conversions (one module per
format in ``nxrs._interop``), pickling and copying. ``fit`` and the conversions are one-line
delegations to those modules, a layer below, which take this class where they build a trainer
and never import it (``docs/ARCHITECTURE.md``). It adds no slots, so every compiled method is
its own, called without a Python layer in between, and the compiled class methods that build a
trainer (``load``, ``from_bytes``, ``seed_model``) give an ``nxrs.Trainer``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, SupportsIndex, final

import numpy.typing as npt

from nxrs._interop import onnx as _onnx
from nxrs._interop import safetensors as _safetensors
from nxrs._interop import torch as _torch
from nxrs._interop import weights as _weights
from nxrs._nxrs import _Trainer
from nxrs._runs.checkpoints import CheckpointManager
from nxrs._runs.transcript import DataDigests
from nxrs._train import fit as _fit

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nxrs._train.fit import History
    from nxrs._util.signals import StopFlag

__all__ = ["Trainer"]


@final
class Trainer(_Trainer):
    """Bit-reproducible MLP training on softf32 (``docs/TRAINING.md`` defines every bit).

    Two families of configurations, every keyword defaulting to its family's value
    (``nxrs.config_schema()`` lists every setting with both defaults; ``docs/TRAINING.md``
    section 1):

    - ``Trainer(layers=[n_in, ..., n_out], ...)``, the general trainer, with TRAINING.md's
      defaults: cross-entropy, "ieee" math, He init, Adam, shuffled batches (AdamW decays the
      weights by default, the others do not).
    - ``Trainer()`` / ``Trainer(seed=1)`` / ``Trainer.seed_model()``: the seed program's model
      (its layer sizes, math, init, seed, Adam, one sample per step, no shuffle); ``sizes=``
      changes its layer sizes (``layers`` and ``sizes`` together is a ConfigError), other
      keywords override its values. A keyword that is not a setting is a TypeError.

    ``seed`` is any int in -2**63 ..= 2**63 - 1 (ConfigError outside). Layer sizes need at least
    two entries, each in 1 ..= 2**24, with at most 2**28 parameters in all (ConfigError).

    Every integer parameter (``seed``, the entries of ``layers`` and ``sizes``, which may be any
    sequence or 1-D array, ``batch_size``, ``grad_block``, the schedule's step counts,
    ``threads``, and the counts of ``train_until``, ``train_steps`` and ``seed_dataset``) takes
    any integer ``operator.index`` accepts (``int``, numpy integers) except a bool; a bool, a
    float (even ``2.0``), a string or a numpy bool is refused, naming the parameter
    (ConfigError, or InputError for a training call's count), never truncated or read as 1.
    These stubs type such a count ``typing.SupportsIndex`` (a bool passes the type check, as
    ``bool`` is an ``int``, and is refused when called).

    Hyperparameters given as Python floats are rounded to binary32 (to nearest even), then
    checked (ConfigError naming the parameter, the value and the accepted range): ``lr`` and
    ``eps`` finite, positive and normal as binary32 (so ``lr=1e40``, which rounds to inf, and
    ``eps=1e-40``, a subnormal, are refused), ``beta1``, ``beta2`` and ``momentum`` in [0, 1),
    ``weight_decay`` finite and >= 0 (0 for "adam"; "momentum" only for "sgd"), ``min_lr``
    (``schedule="cosine"`` only, default 0) 0 or normal and at most ``lr``.
    ``decay_params="matrices"`` restricts weight decay to the weight matrices and tables
    (Dense and convolution weights, attention's matrices, embedding tables; not biases, not
    normalisations: nanoGPT's choice; "all", the default, decays every tensor).
    ``trainer.scheduled_lr`` is the learning rate of the next step.

    ``backend`` chooses the arithmetic that computes steps, evaluations and predictions (the
    same bits either way; not part of the configuration, the state or a checkpoint, so a run
    saved under one backend resumes under the other): "soft" is softf32 (integer operations),
    "hw" the CPU's binary32 ``+ - * /`` and ``sqrt`` under a floating-point environment guard
    (round to nearest, FTZ/DAZ off, restored after every call), verified once per process
    against softf32 on a fixed set of hard cases. "hw" where it is unavailable (a target other
    than x86_64/aarch64, or a self-check disagreement) is a ConfigError saying why; "auto" (the
    default, None) takes "hw" where available, else "soft" (with a RuntimeWarning naming the
    case when the self-check disagreed). ``trainer.backend`` is the one in use, and is settable.

    ``threads`` is how many threads training, evaluation and prediction use (1 to 1024; None,
    the default: the cores available to the process). Like the backend it is not part of the
    configuration or the state: every value's operations and their order are the same on any
    number of threads, so the bits are too. Work too small to gain from a thread stays on one.
    ``trainer.threads`` is settable.

    One trainer may be used from several Python threads. Reading it (``steps``, ``config``,
    ``predict``, ``state_hash()``, ``to_bytes()``, ``save()``, ...) always works, also while
    another thread trains it: a read waits for the chunk of steps in progress (about 0.1 s, or
    the one step in progress when a step takes longer), which then hands the trainer to it, and
    sees the state between two steps. A call that changes the trainer (``fit``, ``step``,
    ``train_until``, ``train_steps``, ``restore``, setting ``backend`` or ``threads``) while
    another thread is in such a call raises ``BusyError`` at once and changes nothing; a run in
    progress is never disturbed, so its bits are an undisturbed run's.

    ``pickle``, ``copy.copy`` and ``copy.deepcopy`` give an independent trainer with the same
    state and configuration, bit for bit (pickling goes through ``to_bytes``/``from_bytes``). A
    copy keeps the backend and threads; an unpickled trainer has the unpickling process's
    defaults (``backend="auto"``, ``threads=None``), as they describe a machine, not the run.

    >>> t = Trainer(layers=[4, 8, 3], batch_size=2, lr=0.01)
    >>> t.config["math"], t.config["batch_size"], t.steps
    ('ieee', 2, 0)
    """

    # Pickles name the class as the previous releases did (``nxrs.Trainer.from_bytes``).
    __module__ = "nxrs"
    __slots__ = ()

    def fit(
        self,
        x: npt.ArrayLike,
        y: npt.ArrayLike | None = None,
        epochs: SupportsIndex | None = None,
        *,
        steps: SupportsIndex | None = None,
        eval_every: SupportsIndex | None = None,
        eval_batches: SupportsIndex = 20,
        validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | npt.ArrayLike | None = None,
        checkpoint: str | os.PathLike[str] | CheckpointManager | None = None,
        every: SupportsIndex | None = None,
        every_seconds: float | None = None,
        resume: bool = True,
        keep: SupportsIndex | Literal["all"] = 3,
        progress: bool | None = None,
        engine: Literal["local", "ray"] = "local",
        workers: SupportsIndex | None = None,
        ray_address: str | None = None,
        async_save: bool | None = None,
        _stop: StopFlag | None = None,
        _command: list[str] | None = None,
        _say: Callable[[str], None] | None = None,
        _source: Mapping[str, Any] | None = None,
        _data_source: Mapping[str, Any] | None = None,
        _metadata: Mapping[str, str] | None = None,
    ) -> History:
        """Trains until ``epochs`` epochs are complete; returns the history of this call.

        ``epochs`` is the final epoch count, as Keras reads ``epochs`` with ``initial_epoch``:
        a trainer at step 70 of epoch 3 finishes epoch 3 first and stops after epoch ``epochs``.
        It is a count of at least 1 (an int or numpy integer, not a bool or float; ConfigError
        otherwise). When the trainer, or the run it resumes, already completed ``epochs``
        epochs, nothing is trained and ``nxrs.NothingToTrainWarning`` says so. ``x``, ``y``
        follow the input rules of ``train_until``; for ``loss="mse"`` ``y`` holds float
        targets, shape (N, n_out) or (N,) when n_out is 1. ``validation_data=(x_val, y_val)`` is
        evaluated after every epoch.

        ``checkpoint``: a run directory (checkpoints by a ``CheckpointManager`` keeping the
        ``keep`` newest, 3 by default, or ``"all"``; the manifest ``nxrs-run.json``, the
        transcript ``nxrs-transcript.jsonl`` and the lock ``.nxrs-run.lock``; see
        ``docs/RUNS.md``) or a ``CheckpointManager`` (its directory becomes the run directory;
        ``keep`` is then the manager's own). Checkpoints are
        named by the global step and written crash-safely when the step count is a multiple of
        ``every`` (if given), at the first step boundary ``every_seconds`` after the previous
        save (if given), and at the end. Each records the data's fingerprint and nxrs's version
        (``nxrs.open(p).metadata``). The directory is locked for the call: another process's
        ``fit`` or ``nxrs train`` on it raises ``nxrs.RunLockedError``.

        With ``resume=True`` (the default) the newest valid checkpoint there is restored first;
        MismatchError (nothing changed) when the directory holds a run of another configuration
        or other data (manifest or checkpoint), a checkpoint not written by ``fit`` (no
        fingerprint, or a v1 file), or a manifest that is not a valid one
        (``nxrs.ManifestError``). With ``resume=False`` the run starts over from the trainer
        as it is: the directory's checkpoints and manifest are first moved aside to
        ``previous/<UTC time>/``.

        In the main thread, with a checkpoint, SIGINT and SIGTERM are caught for the call (the
        previous handlers restored after it): the step under way finishes (within about 0.1 s),
        a checkpoint of it is saved, the stop is recorded in the manifest, and
        ``nxrs.RunStopped`` (a KeyboardInterrupt) is raised. A periodic save that fails
        is reported with ``nxrs.SaveFailedWarning`` and retried at the next save point;
        the final one (or a stop's) raises ``nxrs.CheckpointSaveError`` (an OSError). In
        either case the previous checkpoint is intact.

        ``async_save=True`` (it needs a ``checkpoint``) takes the periodic saves off the
        training thread: at a save point the state is copied in memory (one copy of the
        parameters and optimiser moments; the GIL released), training goes on, and a background
        thread writes the copy with the same crash-safe writer (the same bytes as a synchronous
        save) and prunes. The checkpoint counts (its transcript entry, the manifest's
        ``progress``) only once durable, recorded at the next step boundary after. At most one
        save is in flight: a save point reached while one is still being written waits for it
        first. A background save that fails is reported at the next step boundary as any
        failed periodic save is. The final save and a stop's wait for the save in flight and
        are themselves synchronous, so their failures raise ``CheckpointSaveError`` as above.
        Memory: the state plus one copy while a save is in flight. See ``docs/RUNS.md``. The
        default (None) is True for a run directory on object storage and False otherwise.

        ``checkpoint`` may be a URL on object storage (``"s3://bucket/run"``, with
        ``pip install 'nxrs[s3]'``; ``"gs://bucket/run"``, with ``'nxrs[gcs]'``;
        ``"az://container/run"``, with ``'nxrs[azure]'``): the same
        run directory as objects, a lease in place of the lock (a second process gets
        ``RunLockedError``; a process whose lease was taken over stops with
        ``nxrs.LeaseLostError``), the newest checkpoint cached locally (``NXRS_CACHE_DIR``;
        ``History.checkpoint`` is that local copy of the object). See ``docs/RUNS.md``, "Run
        directories on object storage".

        The GIL is released while computing. Without a checkpoint (or outside the main thread)
        Ctrl-C stops at a step boundary, saves a checkpoint when one is configured, and
        re-raises KeyboardInterrupt. ``progress``: a tqdm bar with epoch, loss and samples/s; by
        default only when stderr is a terminal.

        Every other setting is checked before anything is read or changed: ``every`` and
        ``workers`` are counts of at least 1, ``every_seconds`` a positive number, ``every``
        and ``every_seconds`` need a ``checkpoint``, ``engine`` is "local" or "ray", and
        ``workers`` and ``ray_address`` need "ray" (ConfigError, a ValueError, otherwise).

        ``engine="ray"`` computes each step's gradient blocks on ``workers`` Ray actors (by
        default one per CPU of the cluster; each reserves a CPU: a cluster this process started
        with fewer CPUs is a ConfigError at once) with ``nxrs._train.distributed``
        (``pip install 'nxrs[ray]'``), and ends in the same bits as ``engine="local"`` for any
        number of workers. Ray is used as already initialised, else at ``ray_address`` (or
        ``RAY_ADDRESS``), else a local cluster is started. A worker whose process dies is
        restarted by Ray and its part of the step recomputed (logged as a warning by the
        ``nxrs.distributed`` logger); checkpoints, resume and stopping work as with
        ``engine="local"``.

        **A token stream** (a sequence model whose output is scored token by token, such as
        ``nxrs.layers.gpt``'s; docs/TRAINING.md section 15.8): ``x`` is the stream, a 1-D array
        of token ids (``nxrs.data.Text.train``), ``y`` is not given, and the run trains by
        ``steps`` (the total step count, as ``epochs`` is for data sets) instead of epochs.
        Each step trains on ``batch_size`` windows of the model's context drawn at random from
        the stream by the step's own random stream, so any machine, thread count and resume
        draws the same ones. ``validation_data`` is then a stream too (``Text.val``). With
        ``eval_every`` or ``validation_data``, every ``eval_every`` steps (and at the end) the
        loss is estimated on ``eval_batches *
        batch_size`` windows of the training stream and of the validation stream, drawn from
        streams of their own (the same windows at every evaluation; evaluating never changes
        the training windows): ``History.step`` lists the steps, ``history["loss"]`` and
        ``history["val_loss"]`` the estimates (and the token accuracies).

        >>> import numpy as np, nxrs
        >>> t = nxrs.Trainer(layers=nxrs.layers.gpt(5, context=4, layers=1, heads=1, width=4),
        ...                  optimizer="adamw", batch_size=2)
        >>> stream = np.arange(40) % 5
        >>> h = t.fit(stream, steps=6, validation_data=stream[:12], eval_every=3, eval_batches=1)
        >>> h.step, t.steps
        ([3, 6], 6)

        ``_stop``, ``_command``, ``_say``, ``_source``, ``_data_source`` and ``_metadata`` (more
        metadata for the run's checkpoints: a text's vocabulary) are for nxrs's own
        command line and sweeps (a stop flag whose signal handlers the caller installed, the
        command recorded in the manifest, where messages go, the whole data file's identity,
        how the data was read); not part of the API.
        """
        return _fit.fit(
            self,
            x,
            y,
            epochs,
            steps=steps,
            eval_every=eval_every,
            eval_batches=eval_batches,
            validation_data=validation_data,
            checkpoint=checkpoint,
            every=every,
            every_seconds=every_seconds,
            resume=resume,
            keep=keep,
            progress=progress,
            engine=engine,
            workers=workers,
            ray_address=ray_address,
            async_save=async_save,
            _stop=_stop,
            _command=_command,
            _say=_say,
            _source=_source,
            _data_source=_data_source,
            _metadata=_metadata,
        )

    def data_digest(
        self,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        test_data: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
    ) -> str:
        """SHA-256 (64 hex digits) of a run's data as this trainer trains on it
        (``docs/TRAINING.md`` section 16): ``(x, y)``, and the validation and test data when
        the run has them (``fit``'s ``validation_data``; ``nxrs train``'s test split). Data
        that converts to the same binary32 features and labels has the same digest; another
        split of the same rows has another. InputError for data this trainer cannot train on.

        >>> import numpy as np, nxrs
        >>> t = nxrs.Trainer(layers=[2, 2])
        >>> x, y = np.zeros((3, 2), np.float32), np.array([0, 1, 0])
        >>> t.data_digest(x, y) == t.data_digest(x.astype(np.float64), y)
        True
        >>> t.data_digest(x, y) == t.data_digest(x, y, test_data=(x, y))
        False
        """
        parts = [None if d is None else self._dataset(*d) for d in (validation_data, test_data)]
        return DataDigests.of(self._dataset(x, y), *parts).digest

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        """Pickling: ``Trainer.from_bytes(self.to_bytes())``, the state and configuration bit
        for bit; the backend and threads are the unpickling process's defaults."""
        return type(self).from_bytes, (self.to_bytes(),)

    def __copy__(self) -> Trainer:
        """An independent trainer with the same state, configuration, backend and threads."""
        return self._copy()

    def __deepcopy__(self, memo: Any, /) -> Trainer:
        """As ``__copy__``: a trainer shares nothing with its copy."""
        return self._copy()

    @classmethod
    def from_weights(
        cls, weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], **config: Any
    ) -> Trainer:
        """A trainer at the start of a run whose parameters are ``weights``, ``[(W1, b1), (W2,
        b2), ...]`` (``Wl`` shaped (outputs, inputs) as ``torch.nn.Linear.weight``, ``bl``
        (outputs,); the layer sizes come from the shapes; values under ``fit``'s input rules).
        ``config``: the keywords of ``Trainer(layers=...)`` but ``layers``. The optimiser starts
        fresh (zero moments, step 0). InputError for weights that make no model, ConfigError
        for the configuration (``nxrs.interop.from_weights``)."""
        return _weights.from_weights(cls, weights, **config)

    def to_torch(self, *, softmax: bool = False) -> Any:
        """The model as a ``torch.nn.Sequential`` (float32, CPU): ``Linear`` and ``ReLU`` for an
        integer list, one module of the same name per layer for a layer model (``.eval()``
        gives nxrs's evaluation mode), ending in ``Softmax(dim=-1)`` when ``softmax``
        (cross-entropy models only, ConfigError otherwise). Needs torch (``pip install
        'nxrs[torch]'``; ImportError naming it). See ``nxrs.interop.to_torch``."""
        return _torch.to_torch(self, softmax=softmax)

    @classmethod
    def from_torch(cls, module: Any, *, input_shape: Any = None, **config: Any) -> Trainer:
        """A trainer starting from a torch module's weights: a ``Linear`` with bias, or a
        ``Sequential`` of them with ``ReLU`` between each two and optionally a final
        ``Softmax(dim=-1)``; with ``input_shape`` (one sample's shape), a ``Sequential`` of
        the modules ``to_torch`` writes for layer models, which becomes one (BatchNorm's
        running statistics included). A module nxrs cannot represent is a ConfigError naming
        it and why. ``config`` as for ``from_weights`` (``nxrs.interop.from_torch``)."""
        return _torch.from_torch(cls, module, input_shape=input_shape, **config)

    def save_safetensors(self, path: str | os.PathLike[str], *, moments: bool = False) -> None:
        """Writes the weights ``W1 b1 ... WL bL`` (float32, shaped as in a checkpoint; a layer
        model's parameters and running statistics by their state names) and, with
        ``moments``, the optimiser's slots (``mW1 vW1 ...``) to ``path`` in the safetensors
        format, crash-safely. Not a checkpoint: see ``nxrs.interop.save_safetensors`` for what
        only NXCK keeps. Needs safetensors (``pip install 'nxrs[safetensors]'``)."""
        _safetensors.save_safetensors(self, path, moments=moments)

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike[str], **config: Any) -> Trainer:
        """A trainer starting from the weights in a safetensors file written by
        ``save_safetensors`` (optimiser slots there are not used; a layer model's file gives
        that layer model, its running statistics included). ``config`` as for
        ``from_weights``."""
        return _safetensors.from_safetensors(cls, path, **config)

    def to_onnx(self, path: str | os.PathLike[str], *, softmax: bool | None = None) -> None:
        """Writes the model's inference as ONNX (opset 13: MatMul, Add, Relu, Softmax; a layer
        model's opset 17: Conv, MaxPool, AveragePool, Flatten, Gemm, Relu, Tanh, Sigmoid,
        BatchNormalization, LayerNormalization), checked by ``onnx.checker``: input ``input``
        (batch, inputs) or (batch, *shape) float32, output ``probabilities`` (the default for
        cross-entropy), ``logits`` (``softmax=False``) or ``outputs`` (mse). Needs onnx
        (``pip install 'nxrs[onnx]'``). See ``nxrs.interop.to_onnx``."""
        _onnx.to_onnx(self, path, softmax=softmax)


# The checkpoint manager (a layer below) gives trainers of this class.
CheckpointManager._trainer_class = Trainer
