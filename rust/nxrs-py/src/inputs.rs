//! Python arguments into core values: ints of any size, and feature and label arrays of the
//! accepted dtypes. Conversions only (exact, or numpy's documented rounding of float64); every
//! range and every check of the values is nxrs-core's.

use crate::errors::InputError;
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use nxrs_core::F32;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

/// A count or other integer parameter, taken by one rule everywhere (`batch_size`, `layers`
/// and `sizes` entries, `threads`, `seed`, `train_until`'s `epoch`, ...): any object
/// `operator.index` accepts (a Python int, a numpy integer, anything with `__index__`) except a
/// bool, which is a flag and not a count; nothing else, so a float (even `2.0`), a string or a
/// numpy bool is refused rather than truncated or read as 1. Python's own `range` and list
/// indexing refuse floats the same way; they accept bools, which here are a mistake.
///
/// Extraction never fails: what was given is kept, and [`AnyInt::to_i64`] gives the caller's
/// typed error (ConfigError, InputError) naming the parameter, which a conversion failing
/// inside PyO3's argument parsing could not (it would be a TypeError without the name). An
/// integer beyond i64 is outside every range nxrs accepts, and is refused the same way.
pub struct AnyInt(Result<i64, Refused>);

/// Why a value is not an [`AnyInt`], with the value as given (its `repr`).
enum Refused {
    TooLarge(String),
    NotAnInteger(String),
}

impl AnyInt {
    pub const fn new(value: i64) -> AnyInt {
        AnyInt(Ok(value))
    }

    /// The value as i64, or `error` naming the parameter and the value as given.
    pub fn to_i64(&self, name: &str, error: fn(String) -> PyErr) -> PyResult<i64> {
        match &self.0 {
            Ok(value) => Ok(*value),
            Err(Refused::TooLarge(given)) => Err(error(format!(
                "{name} = {given} does not fit in a 64-bit signed integer (-2**63 ..= 2**63 - 1)"
            ))),
            Err(Refused::NotAnInteger(given)) => Err(error(format!(
                "{name} = {given} is not an integer (an int or a numpy integer; not a bool or \
                 a float)"
            ))),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for AnyInt {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<AnyInt> {
        let py = obj.py();
        let refused = |obj: Borrowed<'a, 'py, PyAny>| -> PyResult<AnyInt> {
            Ok(AnyInt(Err(Refused::NotAnInteger(shown(&obj)?))))
        };
        if obj.is_instance_of::<PyBool>() {
            return refused(obj);
        }
        let int = if obj.is_instance_of::<PyInt>() {
            obj.to_owned()
        } else {
            match py.import("operator")?.getattr("index")?.call1((obj,)) {
                Ok(int) => int,
                Err(e) if e.is_instance_of::<PyTypeError>(py) => return refused(obj),
                Err(e) => return Err(e),
            }
        };
        match int.extract::<i64>() {
            Ok(value) => Ok(AnyInt::new(value)),
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
                Ok(AnyInt(Err(Refused::TooLarge(shown(&int)?))))
            }
            Err(e) => Err(e),
        }
    }
}

/// A value as a message shows it, by the package's one rule (`nxrs._util.checks._shown`): its
/// repr, clipped, and an integer too long to write (Python refuses over 4,300 digits) by its
/// size.
pub(crate) fn shown(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = value.py();
    py.import(intern!(py, "nxrs._util.checks"))?
        .getattr(intern!(py, "_shown"))?
        .call1((value,))?
        .extract()
}

/// A list of counts (`layers`, `sizes`): the items of any iterable but a string or bytes (a
/// list, a tuple, a 1-D numpy integer array, ...), each under [`AnyInt`]'s rule. Like it, a
/// value that is not one is kept and refused by [`AnyInts::to_i64s`], with the parameter's name.
pub struct AnyInts(Result<Vec<AnyInt>, String>);

impl AnyInts {
    /// The values as i64, or `error` naming the parameter (`name[k]` for an item).
    pub fn to_i64s(&self, name: &str, error: fn(String) -> PyErr) -> PyResult<Vec<i64>> {
        match &self.0 {
            Ok(items) => items
                .iter()
                .enumerate()
                .map(|(k, n)| n.to_i64(&format!("{name}[{k}]"), error))
                .collect(),
            Err(given) => Err(error(format!(
                "{name} = {given} is not a sequence of integers"
            ))),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for AnyInts {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<AnyInts> {
        let refused = || -> PyResult<AnyInts> { Ok(AnyInts(Err(shown(&obj)?))) };
        if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
            return refused();
        }
        let Ok(items) = obj.try_iter() else {
            return refused();
        };
        let items = items
            .map(|item| item?.extract::<AnyInt>())
            .collect::<PyResult<Vec<_>>>()?;
        Ok(AnyInts(Ok(items)))
    }
}

/// A numpy array as given, or `numpy.asarray(value)` for anything else (lists, scalars, other
/// array-likes), which then meets the same dtype rules. `ndim` dimensions, else InputError.
fn ndarray<'py>(value: &Bound<'py, PyAny>, what: &str, ndim: usize) -> PyResult<Bound<'py, PyAny>> {
    let array = as_ndarray(value, what)?;
    if array.cast::<PyUntypedArray>()?.ndim() != ndim {
        return Err(wrong_ndim(&array, what, &[ndim]));
    }
    Ok(array)
}

fn wrong_ndim(array: &Bound<'_, PyAny>, what: &str, ndims: &[usize]) -> PyErr {
    let shape = array
        .getattr("shape")
        .map(|s| s.to_string())
        .unwrap_or_default();
    let wanted = ndims
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(" or ");
    InputError::new_err(format!(
        "{what} must have {wanted} dimension(s), got shape {shape}"
    ))
}

/// `value` as a numpy array (as given, or through `numpy.asarray`).
fn as_ndarray<'py>(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    let array = if value.cast::<PyUntypedArray>().is_ok() {
        value.clone()
    } else {
        let numpy = py.import("numpy")?;
        numpy.call_method1("asarray", (value,)).map_err(|e| {
            // numpy's ValueError for ragged nesting and the like: not an array of numbers.
            if e.is_instance_of::<PyValueError>(py) {
                let err = InputError::new_err(format!("{what} is not an array: {e}"));
                err.set_cause(py, Some(e));
                err
            } else {
                e
            }
        })?
    };
    Ok(array)
}

/// `array` as a native-endian numpy array of `T`: as is if it already is one, else numpy's
/// `astype(dtype)` (the callers only ask for conversions that are exact or documented).
fn as_typed<'py, T: numpy::Element>(
    array: &Bound<'py, PyAny>,
    dtype: &str,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    if let Ok(typed) = array.cast::<PyArrayDyn<T>>() {
        return Ok(typed.clone());
    }
    let dtype = array.py().import("numpy")?.getattr(dtype)?;
    Ok(array
        .call_method1("astype", (dtype,))?
        .cast_into::<PyArrayDyn<T>>()?)
}

/// Features as binary32 cells (in logical order, any strides) with their shape. float32 as is;
/// float64 rounded to nearest (ties to even) by numpy's `astype(numpy.float32)`; any other
/// dtype (integers, float16, longdouble, bool, object, ...) is InputError, but a sequence
/// model's token ids (`ids`) may also be integers of any width, each becoming its binary32
/// value (the core then checks each is an id, an integer in `0..vocab`, `vocab <= 2^24`).
pub fn features(
    value: &Bound<'_, PyAny>,
    ndims: &[usize],
    ids: bool,
) -> PyResult<(Vec<F32>, Vec<usize>)> {
    if ids {
        let array = as_ndarray(value, "x")?;
        let untyped = array.cast::<PyUntypedArray>()?;
        if matches!(untyped.dtype().kind(), b'i' | b'u') {
            let ndim = untyped.ndim();
            if !ndims.contains(&ndim) {
                return Err(wrong_ndim(&array, "x", ndims));
            }
            let shape = untyped.shape().to_vec();
            let ids = labels(&array, ndim)?;
            // Beyond i64 the value is no id anyway: the core names it (as the nearest float).
            let cells = ids
                .iter()
                .map(|&id| F32::from_i64(i64::try_from(id).unwrap_or(i64::MAX)))
                .collect();
            return Ok((cells, shape));
        }
    }
    floats(value, "x", ndims)
}

/// A parameter tensor called `what` with `ndim` dimensions, under the rules of [`features`].
pub fn tensor(
    value: &Bound<'_, PyAny>,
    what: &str,
    ndim: usize,
) -> PyResult<(Vec<F32>, Vec<usize>)> {
    floats(value, what, &[ndim])
}

/// Regression targets: float values under the rules of [`features`], with `ndims` the accepted
/// numbers of dimensions.
pub fn targets(value: &Bound<'_, PyAny>, ndims: &[usize]) -> PyResult<(Vec<F32>, Vec<usize>)> {
    floats(value, "y", ndims)
}

fn floats(
    value: &Bound<'_, PyAny>,
    what: &str,
    ndims: &[usize],
) -> PyResult<(Vec<F32>, Vec<usize>)> {
    let array = as_ndarray(value, what)?;
    let ndim = array.cast::<PyUntypedArray>()?.ndim();
    if !ndims.contains(&ndim) {
        return Err(wrong_ndim(&array, what, ndims));
    }
    let descr = array.cast::<PyUntypedArray>()?.dtype();
    if !(descr.kind() == b'f' && matches!(descr.itemsize(), 4 | 8)) {
        return Err(InputError::new_err(format!(
            "{what} must be float32 (or float64, rounded to float32), got dtype {descr}"
        )));
    }
    let typed = as_typed::<f32>(&array, "float32")?;
    let readonly = typed.readonly();
    let view = readonly.as_array();
    // An array in row-major order is copied as one block of bytes (numpy's usual layout: a
    // cell-by-cell walk costs more than the forward pass of a small model); any other layout
    // (Fortran order, strided views) cell by cell in row-major order. ndarray's `as_slice` is
    // the row-major test (numpy's would also accept Fortran order, whose bytes are by column).
    let cells = match view.as_slice() {
        Some(slice) => bytemuck::cast_slice::<f32, F32>(slice).to_vec(),
        None => view.iter().map(|v| F32::from_bits(v.to_bits())).collect(),
    };
    Ok((cells, view.shape().to_vec()))
}

/// Labels, exactly: any numpy integer dtype, signed or unsigned, of any width and byte order
/// (through int64 or uint64, which hold every value of their kind; i128 holds both). `ndim`
/// dimensions (0 for a single label). Floats, bools, objects (Python ints beyond 64 bits
/// included) and everything else are InputError. Ranges are checked by the core.
pub fn labels(value: &Bound<'_, PyAny>, ndim: usize) -> PyResult<Vec<i128>> {
    let array = ndarray(value, "y", ndim)?;
    let descr = array.cast::<PyUntypedArray>()?.dtype();
    match descr.kind() {
        b'i' => {
            let typed = as_typed::<i64>(&array, "int64")?;
            let readonly = typed.readonly();
            Ok(readonly.as_array().iter().map(|&y| i128::from(y)).collect())
        }
        b'u' => {
            let typed = as_typed::<u64>(&array, "uint64")?;
            let readonly = typed.readonly();
            Ok(readonly.as_array().iter().map(|&y| i128::from(y)).collect())
        }
        _ => Err(InputError::new_err(format!(
            "labels must have an integer dtype (signed or unsigned, any width), got dtype {descr}"
        ))),
    }
}

/// A count parameter: an integer ([`AnyInt`]'s rule) at least `min` (`min` >= 0), or `error`
/// naming it.
pub(crate) fn count(
    value: &AnyInt,
    name: &str,
    min: i64,
    error: fn(String) -> PyErr,
) -> PyResult<i64> {
    let n = value.to_i64(name, error)?;
    if n < min {
        return Err(error(format!("{name} = {n} must be at least {min}")));
    }
    Ok(n)
}
