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
"""

from nxrs import softf32
from nxrs._nxrs import (
    BadMagicError,
    CheckpointError,
    ChecksumError,
    ConfigError,
    HeaderError,
    InputError,
    LengthError,
    MismatchError,
    NxrsError,
    Trainer,
    UnsupportedVersionError,
    __version__,
    seed_dataset,
)

__all__ = [
    "BadMagicError",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "HeaderError",
    "InputError",
    "LengthError",
    "MismatchError",
    "NxrsError",
    "Trainer",
    "UnsupportedVersionError",
    "__version__",
    "seed_dataset",
    "softf32",
]
