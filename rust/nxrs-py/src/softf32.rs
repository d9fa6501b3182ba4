//! softf32 over numpy arrays, element-wise. The Python module `nxrs.softf32` wraps these with
//! broadcasting and typed signatures; here the operands already have equal shapes.

use crate::errors::{ConfigError, InputError};
use numpy::{PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods, ToPyArray};
use nxrs_core::math::{seed_exp, seed_le, seed_log, seed_sqrt};
use nxrs_core::softf32::{IntRounding, F32};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn bits<'a>(a: &'a PyReadonlyArrayDyn<'_, f32>) -> impl Iterator<Item = F32> + 'a {
    a.as_array()
        .into_iter()
        .map(|&x| F32::from_bits(x.to_bits()))
}

fn same_shape<A, B>(a: &PyReadonlyArrayDyn<'_, A>, b: &PyReadonlyArrayDyn<'_, B>) -> PyResult<()>
where
    A: numpy::Element,
    B: numpy::Element,
{
    if a.shape() != b.shape() {
        return Err(InputError::new_err(format!(
            "operand shapes differ: {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    Ok(())
}

/// Builds an array of `a`'s shape from an iterator of results.
fn collect<'py, T: numpy::Element>(
    py: Python<'py>,
    shape: &[usize],
    values: impl Iterator<Item = T>,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let flat: Vec<T> = values.collect();
    let array = numpy::ndarray::ArrayD::from_shape_vec(shape, flat)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(array.to_pyarray(py))
}

fn to_f32(x: F32) -> f32 {
    f32::from_bits(x.to_bits())
}

/// `op(a, b)` for `op` in add, sub, mul, div.
#[pyfunction]
pub fn f32_binary<'py>(
    py: Python<'py>,
    op: &str,
    a: PyReadonlyArrayDyn<'py, f32>,
    b: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    same_shape(&a, &b)?;
    let f: fn(F32, F32) -> F32 = match op {
        "add" => |x, y| x + y,
        "sub" => |x, y| x - y,
        "mul" => |x, y| x * y,
        "div" => |x, y| x / y,
        _ => return Err(PyValueError::new_err(format!("unknown binary op {op:?}"))),
    };
    let values = bits(&a).zip(bits(&b)).map(|(x, y)| to_f32(f(x, y)));
    collect(py, a.shape(), values)
}

/// `op(a)` for `op` in sqrt, exp, log, phi (the normal CDF), normal_pdf, neg, abs, seed_sqrt,
/// seed_exp, seed_log.
#[pyfunction]
pub fn f32_unary<'py>(
    py: Python<'py>,
    op: &str,
    a: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let f: fn(F32) -> F32 = match op {
        "sqrt" => F32::sqrt,
        "exp" => F32::exp,
        "log" => F32::ln,
        "normal_cdf" => F32::normal_cdf,
        "normal_pdf" => F32::normal_pdf,
        "neg" => |x| -x,
        "abs" => F32::abs,
        "seed_sqrt" => seed_sqrt,
        "seed_exp" => seed_exp,
        "seed_log" => seed_log,
        _ => return Err(PyValueError::new_err(format!("unknown unary op {op:?}"))),
    };
    collect(py, a.shape(), bits(&a).map(|x| to_f32(f(x))))
}

/// `op(a, b)` as booleans for `op` in eq, lt, le, seed_le.
#[pyfunction]
pub fn f32_compare<'py>(
    py: Python<'py>,
    op: &str,
    a: PyReadonlyArrayDyn<'py, f32>,
    b: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<bool>>> {
    same_shape(&a, &b)?;
    let f: fn(F32, F32) -> bool = match op {
        "eq" => F32::ieee_eq,
        "lt" => F32::ieee_lt,
        "le" => F32::ieee_le,
        "seed_le" => seed_le,
        _ => return Err(PyValueError::new_err(format!("unknown comparison {op:?}"))),
    };
    collect(py, a.shape(), bits(&a).zip(bits(&b)).map(|(x, y)| f(x, y)))
}

fn rounding(mode: &str) -> PyResult<IntRounding> {
    match mode {
        "trunc" => Ok(IntRounding::TowardZero),
        "nearest" => Ok(IntRounding::NearestEven),
        _ => Err(ConfigError::new_err(format!(
            "rounding must be 'trunc' or 'nearest', not {mode:?}"
        ))),
    }
}

/// float32 -> int32 with the given rounding ('trunc' or 'nearest'); NaN and out of range give
/// INT32_MIN.
#[pyfunction]
pub fn f32_to_i32<'py>(
    py: Python<'py>,
    a: PyReadonlyArrayDyn<'py, f32>,
    mode: &str,
) -> PyResult<Bound<'py, PyArrayDyn<i32>>> {
    let r = rounding(mode)?;
    collect(py, a.shape(), bits(&a).map(|x| x.to_i32(r)))
}

/// float32 -> int64 with the given rounding; NaN and out of range give INT64_MIN.
#[pyfunction]
pub fn f32_to_i64<'py>(
    py: Python<'py>,
    a: PyReadonlyArrayDyn<'py, f32>,
    mode: &str,
) -> PyResult<Bound<'py, PyArrayDyn<i64>>> {
    let r = rounding(mode)?;
    collect(py, a.shape(), bits(&a).map(|x| x.to_i64(r)))
}

/// int64 -> float32, rounded to nearest even (int32 input is widened by the Python wrapper).
#[pyfunction]
pub fn f32_from_i64<'py>(
    py: Python<'py>,
    a: PyReadonlyArrayDyn<'py, i64>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let values = a.as_array().into_iter().map(|&i| to_f32(F32::from_i64(i)));
    collect(py, a.shape(), values)
}

/// `cos(π k / n)` element-wise, as the cosine learning-rate decay computes it
/// (`F32::cos_pi_ratio`); InputError unless `1 <= n <= 2^63 - 1` and `0 <= k <= n`.
#[pyfunction]
pub fn f32_cos_pi<'py>(
    py: Python<'py>,
    k: PyReadonlyArrayDyn<'py, i64>,
    n: PyReadonlyArrayDyn<'py, i64>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    same_shape(&k, &n)?;
    let pairs: Vec<(i64, i64)> = k
        .as_array()
        .iter()
        .copied()
        .zip(n.as_array().iter().copied())
        .collect();
    if let Some((k, n)) = pairs
        .iter()
        .find(|&&(k, n)| !(n >= 1 && (0..=n).contains(&k)))
    {
        return Err(InputError::new_err(format!(
            "cos_pi(k={k}, n={n}) needs 1 <= n and 0 <= k <= n"
        )));
    }
    let values = pairs
        .into_iter()
        .map(|(k, n)| to_f32(F32::cos_pi_ratio(k as u64, n as u64)));
    collect(py, k.shape(), values)
}
