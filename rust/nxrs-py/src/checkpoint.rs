//! `nxrs._nxrs._Checkpoint`: a validated NXCK v2 file whose tensors come out as read-only
//! numpy arrays that view the mapped file in place (`nxrs.Checkpoint`, from `nxrs.open(path)`,
//! subclasses it in `python/nxrs/_checkpoint.py`).

use crate::errors::to_py;
use crate::options::config_dict;
use crate::paths::path_arg;
use numpy::ndarray::{ArrayView, IxDyn};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use nxrs_core::checkpoint::{check_model, trainer_from};
use nxrs_core::config::TrainerConfig;
use nxrs_core::nxck;
use nxrs_core::nxck::v2::{Checkpoint, TensorInfo, Verify};
use nxrs_core::Trainer;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList, PyString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// An open NXCK v2 checkpoint.
///
/// The file is memory-mapped and its header validated on open (and, unless `verify=False`,
/// every tensor's CRC-32C). `ck[name]` is a read-only numpy array viewing the file without
/// copying; every such array keeps the mapping alive, so it stays valid after `close()` or the
/// end of a `with` block (which only stop further access through this object). Saving over the
/// file meanwhile does not change what the arrays show: saves replace the file, never rewrite it.
/// A program that rewrites the file in place (`shutil.copyfile`, `cp`) does change them, and
/// can get the process killed by SIGBUS (as with numpy.memmap or safetensors): replace
/// checkpoints with a rename instead.
///
/// A read-only mapping from tensor names (in file order) to those arrays: `len`, `in`,
/// iteration, `keys()`, `values()`, `items()` and `get()` behave as on any
/// `collections.abc.Mapping`, with which the class is registered.
///
/// `nxrs.Checkpoint` is a Python subclass adding no slots (it adds `to_trainer`, which builds
/// an `nxrs.Trainer`); this class knows no trainer class.
#[pyclass(module = "nxrs._nxrs", name = "_Checkpoint", frozen, mapping, subclass)]
pub struct PyCheckpoint {
    inner: Checkpoint,
    /// The configuration the file records, validated on open.
    config: TrainerConfig,
    path: PathBuf,
    /// Whether every tensor's CRC-32C was checked on open (`verify=True`).
    verified: bool,
    closed: AtomicBool,
}

impl PyCheckpoint {
    /// A core trainer holding this checkpoint's configuration and state (a copy). Opened with
    /// `verify=False`, the tensors' checksums are checked now (ChecksumError): a trainer never
    /// starts from unverified bytes.
    pub(crate) fn trainer(&self, py: Python<'_>) -> PyResult<Trainer> {
        let ck = self.open_inner()?;
        let check = if self.verified {
            Verify::HeaderOnly
        } else {
            Verify::Full
        };
        py.detach(|| trainer_from(ck, check)).map_err(to_py)
    }

    fn open_inner(&self) -> PyResult<&Checkpoint> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PyValueError::new_err(format!(
                "checkpoint {} is closed",
                self.path.display()
            )));
        }
        Ok(&self.inner)
    }

    /// The tensor named `key`, None for any other key (a non-string one included, as in a
    /// `dict` of names); ValueError once closed.
    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<&TensorInfo>> {
        let inner = self.open_inner()?;
        Ok(key
            .cast::<PyString>()
            .ok()
            .and_then(|name| inner.tensor(&name.to_cow().ok()?)))
    }

    /// The tensor named `key`; KeyError holding `key` when there is none.
    fn tensor(&self, key: &Bound<'_, PyAny>) -> PyResult<&TensorInfo> {
        self.lookup(key)?
            .ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
    }

    /// A `collections.abc` view (`KeysView`, `ValuesView`, `ItemsView`) of this mapping.
    fn view<'py>(slf: &Bound<'py, Self>, kind: &str) -> PyResult<Bound<'py, PyAny>> {
        slf.get().open_inner()?;
        PyModule::import(slf.py(), "collections.abc")?
            .getattr(kind)?
            .call1((slf,))
    }
}

/// Registers `Checkpoint` as a `collections.abc.Mapping` (a virtual subclass: `isinstance`
/// holds, while the methods stay these native ones).
pub fn register_mapping(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    PyModule::import(py, "collections.abc")?
        .getattr("Mapping")?
        .call_method1("register", (py.get_type::<PyCheckpoint>(),))?;
    Ok(())
}

#[pymethods]
impl PyCheckpoint {
    /// Opens and validates an NXCK v2 file (see the class).
    #[new]
    #[pyo3(signature = (path, *, verify = true))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        verify: bool,
    ) -> PyResult<PyCheckpoint> {
        let mode = if verify {
            Verify::Full
        } else {
            Verify::HeaderOnly
        };
        let (inner, config) = py
            .detach(|| {
                let ck = Checkpoint::open(&path, mode)?;
                let config = check_model(&ck)?;
                Ok((ck, config))
            })
            .map_err(to_py)?;
        Ok(PyCheckpoint {
            inner,
            config,
            path,
            verified: verify,
            closed: AtomicBool::new(false),
        })
    }

    /// The file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether tensors are views of a memory mapping (False only where mapping failed and the
    /// file was read into memory instead).
    #[getter]
    fn is_mapped(&self) -> PyResult<bool> {
        Ok(self.open_inner()?.is_mapped())
    }

    /// The trainer configuration: `docs/TRAINING.md`'s keys (binary32 values as floats, and
    /// as bit patterns under `<key>_bits`), and `sizes` (the layers).
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.open_inner()?;
        config_dict(py, &self.config, true)
    }

    /// The integer scalars by name, in file order: epoch, b1t_bits, b2t_bits, step, batch.
    #[getter]
    fn scalars<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, value) in self.open_inner()?.scalars() {
            dict.set_item(name, value)?;
        }
        Ok(dict)
    }

    /// The free-form metadata (strings), e.g. `data_fingerprint` and `nxrs_version` from `fit`.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, value) in self.open_inner()?.metadata() {
            dict.set_item(name, value)?;
        }
        Ok(dict)
    }

    /// The tensor table in file order: dicts with name, dtype, shape, offset, nbytes, crc32c.
    fn tensor_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let rows = PyList::empty(py);
        for t in self.open_inner()?.tensors() {
            let row = PyDict::new(py);
            row.set_item("name", &t.name)?;
            row.set_item("dtype", &t.dtype)?;
            row.set_item("shape", t.shape.clone())?;
            row.set_item("offset", t.offset)?;
            row.set_item("nbytes", t.nbytes)?;
            row.set_item("crc32c", t.crc32c)?;
            rows.append(row)?;
        }
        Ok(rows)
    }

    /// The tensor names in file order, as a `KeysView`.
    fn keys<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::view(slf, "KeysView")
    }

    /// The tensors (read-only views) in file order, as a `ValuesView`.
    fn values<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::view(slf, "ValuesView")
    }

    /// `(name, tensor)` pairs in file order, as an `ItemsView`.
    fn items<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::view(slf, "ItemsView")
    }

    /// `self[key]`, or `default` when there is no tensor named `key`.
    #[pyo3(signature = (key, default = None, /))]
    fn get<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match slf.get().lookup(key)? {
            Some(_) => Ok(Self::__getitem__(slf, key)?.into_any()),
            None => Ok(default.unwrap_or_else(|| slf.py().None().into_bound(slf.py()))),
        }
    }

    /// An iterator over the tensor names in file order.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        let names = self.open_inner()?.tensors().iter().map(|t| t.name.as_str());
        PyList::new(py, names)?.try_iter()
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.open_inner()?.tensors().len())
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.lookup(key)?.is_some())
    }

    /// A read-only float32 array of the tensor, viewing the mapped file (no copy).
    fn __getitem__<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let this = slf.get();
        let info = this.tensor(key)?;
        let bytes = this.inner.data(info);
        let array = match view_cells(bytes) {
            Some(cells) => {
                let view = ArrayView::from_shape(IxDyn(&info.shape), cells)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                // SAFETY: the cells live in `this.inner`'s bytes (a read-only mapping or a heap
                // buffer never reallocated), which stay at the same address for as long as the
                // `Checkpoint` Python object lives; the array holds a reference to that object
                // as its base, so the object outlives the array.
                unsafe { PyArrayDyn::borrow_from_array(&view, slf.clone().into_any()) }
            }
            // Unaligned bytes or a big-endian host: decode a copy.
            None => {
                let cells: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                PyArray1::from_vec(slf.py(), cells).reshape(info.shape.clone())?
            }
        };
        // The mapping is read-only: a writable view would crash the process when written.
        array.call_method1("setflags", (false,))?;
        Ok(array)
    }

    /// Checks every tensor's CRC-32C (ChecksumError naming the first bad tensor).
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let ck = self.open_inner()?;
        py.detach(|| ck.verify_all()).map_err(to_py)
    }

    /// Checks one tensor's CRC-32C.
    fn verify_tensor(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let ck = self.open_inner()?;
        if ck.tensor(name).is_none() {
            return Err(PyKeyError::new_err(name.to_owned()));
        }
        py.detach(|| ck.verify_tensor(name)).map_err(to_py)
    }

    /// Stops access through this object. Arrays already taken stay valid: they keep the mapping.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!(
            "Checkpoint({:?}, layers={}, epoch={}, tensors={})",
            self.path.display().to_string(),
            self.config
                .get("layers")
                .map_or_else(|_| "?".into(), |v| v.to_string()),
            self.inner.scalar("epoch").unwrap_or(0),
            self.inner.tensors().len()
        )
    }
}

/// The bytes as binary32 cells in place, where the host is little-endian and they are aligned.
fn view_cells(bytes: &[u8]) -> Option<&[f32]> {
    if cfg!(target_endian = "little") {
        bytemuck::try_cast_slice(bytes).ok()
    } else {
        None
    }
}

/// The NXCK format version of the file at `path` (1 or 2), from its first 12 bytes.
#[pyfunction]
pub fn checkpoint_format(#[pyo3(from_py_with = path_arg)] path: PathBuf) -> PyResult<u32> {
    match nxck::format_of(&path).map_err(to_py)? {
        nxck::Format::V1 => Ok(1),
        nxck::Format::V2 => Ok(2),
    }
}

/// Removes temporary files that interrupted saves left in `directory` (only those whose writer
/// is gone); returns their paths.
#[pyfunction]
pub fn sweep_temp_files(
    #[pyo3(from_py_with = path_arg)] directory: PathBuf,
) -> PyResult<Vec<PathBuf>> {
    nxrs_core::nxck::writer::sweep_temp_files(&directory).map_err(to_py)
}

/// `text` cut as nxrs's messages cut a value read from a file: after a fixed number of
/// characters, then its full length (for `nxrs inspect`).
#[pyfunction]
pub fn clip(text: &str) -> String {
    // fmt::Arguments' Debug is its text, unquoted.
    nxrs_core::error::clip(&format_args!("{text}")).to_string()
}
