//! `nxrs._nxrs._Snapshot`: a copy of a trainer's state taken at a step boundary
//! (`Trainer._snapshot`), which `fit(async_save=True)`'s background writer saves and digests
//! while training goes on (`python/nxrs/_async_save.py`).

use crate::errors::to_py;
use crate::paths::path_arg;
use nxrs_core::checkpoint::Snapshot;
use nxrs_core::digest;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A copy of a trainer's configuration and state (no working memory: one copy of the state).
/// Its methods release the GIL, so a thread saving it does not stop the thread training. Its
/// memory can be refilled with a later copy (`Trainer._snapshot(into=...)`) once nothing uses
/// it any more; the mutex makes a refill during a save wait, never tear it.
#[pyclass(module = "nxrs._nxrs", name = "_Snapshot", frozen)]
pub struct PySnapshot {
    inner: Mutex<Snapshot>,
}

impl PySnapshot {
    pub(crate) fn new(inner: Snapshot) -> PySnapshot {
        PySnapshot {
            inner: Mutex::new(inner),
        }
    }

    /// The copy, locked: only with the GIL released (the lock is held for a whole save).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl PySnapshot {
    /// Writes the copy to `path` as `Trainer.save(path, metadata=...)` would have written the
    /// trainer when the copy was taken: the same bytes, by the same crash-safe writer.
    #[pyo3(signature = (path, *, metadata))]
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        metadata: Vec<(String, String)>,
    ) -> PyResult<()> {
        py.detach(|| self.lock().save(&path, metadata))
            .map_err(to_py)
    }

    /// `Trainer.state_digest()` of the trainer when the copy was taken.
    fn state_digest(&self, py: Python<'_>) -> String {
        digest::hex(&py.detach(|| self.lock().state_digest()))
    }

    /// Optimiser steps taken when the copy was taken.
    #[getter]
    fn steps(&self, py: Python<'_>) -> i64 {
        py.detach(|| self.lock().state().step)
    }

    /// Completed epochs when the copy was taken.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> i64 {
        py.detach(|| self.lock().state().epoch)
    }

    /// Batches of the current epoch done when the copy was taken.
    #[getter]
    fn batch(&self, py: Python<'_>) -> i64 {
        py.detach(|| self.lock().state().batch)
    }
}
