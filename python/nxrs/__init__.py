"""nxrs: bit-reproducible neural-network training with exact checkpoint/resume.

All training arithmetic runs on softf32, IEEE 754 binary32 implemented with integer operations
in a fixed order, so a run gives the same bits on every machine, and a run interrupted by a
checkpoint and resumed ends byte-identical to an uninterrupted one.

>>> import nxrs
>>> x, y = nxrs.seed_dataset()
>>> t = nxrs.Trainer(seed=1)
>>> t.train_until(x, y, epoch=2)
>>> t.epoch
2

Checkpoints (NXCK v2 by default) are written crash-safely and read zero-copy:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "run.nxck")
>>> t.save(path)
>>> with nxrs.open(path) as ck:
...     ck.scalars["epoch"], ck["W1"].shape
(2, (10, 6))
>>> nxrs.Trainer.load(path).state_hash() == t.state_hash()
True

The public modules are this one, ``nxrs.data`` (data files and the split), ``nxrs.layers``
(layer objects, model files and presets), ``nxrs.sklearn`` (scikit-learn estimators),
``nxrs.interop`` (PyTorch, ONNX, safetensors), ``nxrs.softf32`` (the arithmetic on numpy arrays)
and ``nxrs.cli`` (the ``nxrs`` command). Every other module is
private (underscored); what of them is public is re-exported here.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from nxrs import _renamed, layers, softf32
from nxrs._audit.diff import DiffReport, diff
from nxrs._audit.verify import SegmentResult, VerifyReport, verify
from nxrs._checkpoint import Checkpoint, open
from nxrs._nxrs import (
    BadMagicError,
    BusyError,
    CheckpointError,
    ChecksumError,
    ConfigError,
    Dataset,
    HeaderError,
    InputError,
    LengthError,
    MismatchError,
    NxrsError,
    UnsupportedVersionError,
    __version__,
    checkpoint_format,
    config_schema,
    hardware_isa,
    seed_dataset,
    sweep_temp_files,
)
from nxrs._runs.checkpoints import CheckpointEntry, CheckpointManager, CorruptCheckpointWarning
from nxrs._runs.errors import (
    CheckpointSaveError,
    ManifestError,
    RecordSaveError,
    RunLockedError,
    RunStopped,
    SaveFailedWarning,
)
from nxrs._runs.lease import LeaseLostError
from nxrs._sweeps import SweepResults, sweep
from nxrs._train.fit import History, NothingToTrainWarning
from nxrs._trainer import Trainer

_renamed.install()
if not _TYPE_CHECKING:  # for type checkers, only the names below exist
    __getattr__ = _renamed.attribute

__all__ = [
    "BadMagicError",
    "BusyError",
    "Checkpoint",
    "CheckpointEntry",
    "CheckpointError",
    "CheckpointManager",
    "CheckpointSaveError",
    "ChecksumError",
    "ConfigError",
    "CorruptCheckpointWarning",
    "Dataset",
    "DiffReport",
    "HeaderError",
    "History",
    "InputError",
    "LeaseLostError",
    "LengthError",
    "ManifestError",
    "MismatchError",
    "NothingToTrainWarning",
    "NxrsError",
    "RecordSaveError",
    "RunLockedError",
    "RunStopped",
    "SaveFailedWarning",
    "SegmentResult",
    "SweepResults",
    "Trainer",
    "UnsupportedVersionError",
    "VerifyReport",
    "__version__",
    "checkpoint_format",
    "config_schema",
    "diff",
    "hardware_isa",
    "layers",
    "open",
    "seed_dataset",
    "softf32",
    "sweep",
    "sweep_temp_files",
    "verify",
]
