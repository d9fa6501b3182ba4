"""Data that does not fit a run is an InputError; a checkpoint or run
directory of another run is a MismatchError, an NxrsError but not a CheckpointError (which means
a file that cannot be read), so ``except CheckpointError`` no longer catches either."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nxrs


def mid_epoch_trainer(tmp_path: Path) -> nxrs.Trainer:
    """A trainer loaded from a checkpoint written at batch 3 of epoch 0 (8 samples, batch 1)."""
    x, y = nxrs.seed_dataset()
    nxrs.Trainer(seed=1).fit(x, y, epochs=1, checkpoint=tmp_path / "run", every=3, progress=False)
    for path in sorted((tmp_path / "run").glob("*.nxck")):
        t = nxrs.Trainer.load(path)
        if t.batch > 0:
            return t
    raise AssertionError("no mid-epoch checkpoint was written")


def test_data_with_fewer_batches_than_the_state_is_an_input_error(tmp_path: Path) -> None:
    t = mid_epoch_trainer(tmp_path)
    assert t.batch == 3
    x, y = nxrs.seed_dataset()
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match="not the data set it was trained on") as caught:
        t.train_until(x[:2], y[:2], 1)
    assert not isinstance(caught.value, (nxrs.CheckpointError, nxrs.MismatchError))
    assert isinstance(caught.value, ValueError)
    assert t.state_hash() == before


def test_mismatch_error_is_an_nxrs_error_not_a_checkpoint_error() -> None:
    assert issubclass(nxrs.MismatchError, nxrs.NxrsError)
    assert not issubclass(nxrs.MismatchError, nxrs.CheckpointError)
    # A run directory's manifest that cannot be used is a mismatch too (rundir.ManifestError).
    assert issubclass(nxrs.ManifestError, nxrs.MismatchError)


def test_a_run_directory_of_other_data_is_not_a_checkpoint_error(tmp_path: Path) -> None:
    x, y = nxrs.seed_dataset()
    run = tmp_path / "run"
    nxrs.Trainer(seed=1).fit(x, y, epochs=1, checkpoint=run, progress=False)
    other = np.ascontiguousarray(x[::-1])
    with pytest.raises(nxrs.MismatchError, match="other data") as caught:
        nxrs.Trainer(seed=1).fit(other, y[::-1], epochs=2, checkpoint=run, progress=False)
    assert not isinstance(caught.value, nxrs.CheckpointError)


def test_restoring_another_models_checkpoint_is_a_mismatch_not_a_checkpoint_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "six.nxck"
    nxrs.Trainer(seed=1).save(path)
    other = nxrs.Trainer(sizes=[6, 9, 4])
    before = other.state_hash()
    with pytest.raises(nxrs.MismatchError) as caught:
        other.restore(path)
    assert not isinstance(caught.value, nxrs.CheckpointError)
    assert other.state_hash() == before


def test_load_reads_a_v1_file_of_other_counts_as_a_header_defect(tmp_path: Path) -> None:
    """``load`` builds the seed model from a v1 file: there is no trainer for it to mismatch, so
    a file of other counts is unreadable (a CheckpointError, which a CheckpointManager skips)."""
    x, y = nxrs.seed_dataset()
    t = nxrs.Trainer(seed=1)
    t.train_until(x, y, 1)
    good = tmp_path / "good.ckpt"
    t.save(good, format="v1")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(good.read_bytes()[:4] + (8).to_bytes(4, "little") + good.read_bytes()[8:])
    with pytest.raises(nxrs.HeaderError, match="8 buffers"):
        nxrs.Trainer.load(bad)
    with pytest.raises(nxrs.MismatchError, match="8 buffers"):
        nxrs.Trainer(seed=1).restore(bad)
