//! The configuration at the boundary, translation only: `Trainer(layers, **options)`'s keywords
//! to the core's named settings (each converted by its type in the core's schema, which checks
//! every value and holds every default), a configuration back to a dict with
//! `docs/TRAINING.md`'s keys, the schema itself (`config_schema()`) and the core's comparison of
//! two configurations (`_config_differences`).

use crate::errors::{to_py, ConfigError};
use crate::inputs::{shown, AnyInt, AnyInts};
use nxrs_core::config::schema::Default;
use nxrs_core::config::{
    differences_of, setting, settings, Family, Setting, TrainerConfig, Type, Value,
};
use nxrs_core::layers::LayerSpec;
use nxrs_core::model::layer_table;
use nxrs_core::F32;
use pyo3::exceptions::{PyRecursionError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// What `Trainer(layers, **options)` describes: the configuration, and how this machine
/// computes it (not part of the configuration).
pub(crate) struct TrainerOptions {
    pub(crate) config: TrainerConfig,
    pub(crate) backend: Option<String>,
    pub(crate) threads: Option<AnyInt>,
}

/// `Trainer(layers, **options)`: `layers` (a general trainer) or `sizes` (the seed model's
/// family, the default) chooses the family (the core's `Family::choose`), every other keyword
/// is a setting of the schema or `backend`/`threads`. A keyword that is neither is a TypeError,
/// as for any Python function; a value of the wrong Python type too (a float for a name); a
/// value the setting does not accept is the core's ConfigError. `None` is the default.
pub(crate) fn trainer_options(
    layers: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<TrainerOptions> {
    let mut given = Vec::new();
    let (mut sizes, mut backend, mut threads) = (None, None, None);
    for (key, value) in options.into_iter().flatten() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        match key.as_str() {
            "backend" => {
                backend = Some(value.extract().map_err(|e| argument(value.py(), &key, e))?)
            }
            "threads" => threads = Some(value.extract()?),
            k if k == Family::SeedModel.sizes_keyword() => sizes = Some(value.extract()?),
            k => match setting(k).filter(|s| s.ty != Type::Sizes) {
                Some(setting) => given.push((key.clone(), from_python(setting, &value)?)),
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "Trainer.__new__() got an unexpected keyword argument '{key}'"
                    )))
                }
            },
        }
    }
    let layer_sizes = |sizes: Option<AnyInts>, family: Family| {
        sizes
            .map(|s| {
                s.to_i64s(family.sizes_keyword(), ConfigError::new_err)
                    .map(Value::Ints)
            })
            .transpose()
    };
    let layers = match layers.filter(|l| !l.is_none()) {
        None => None,
        Some(value) if value.is_instance_of::<PyString>() => return Err(not_a_model(value)),
        Some(value) => match layer_objects(value)? {
            Some(objects) => Some(Value::Layers(objects)),
            None => layer_sizes(Some(value.extract()?), Family::General)?,
        },
    };
    let (family, value) =
        Family::choose(layers, layer_sizes(sizes, Family::SeedModel)?).map_err(to_py)?;
    if let Some(value) = value {
        given.push(("layers".into(), value));
    }
    let config = TrainerConfig::from_settings(family, &given).map_err(to_py)?;
    Ok(TrainerOptions {
        config,
        backend,
        threads,
    })
}

/// The ConfigError for `layers` given as a string: a model is a list, and a name (the CLI's
/// `--model NAME`) is a preset's, whose layers `nxrs.layers.preset` gives.
fn not_a_model(name: &Bound<'_, PyAny>) -> PyErr {
    let py = name.py();
    let presets = py
        .import(intern!(py, "nxrs.layers"))
        .and_then(|layers| layers.getattr(intern!(py, "PRESETS")))
        .and_then(|presets| presets.extract::<Vec<String>>())
        .unwrap_or_default();
    let name = shown(name).unwrap_or_else(|_| "?".into());
    ConfigError::new_err(format!(
        "layers = {name} is a string, not a list of layer sizes or layer objects; for a preset \
         model give layers=nxrs.layers.preset(NAME), NAME one of: {}",
        presets.join(", ")
    ))
}

/// A PyO3 conversion's TypeError, naming the argument as PyO3's own argument parsing does.
fn argument(py: Python<'_>, name: &str, err: PyErr) -> PyErr {
    if err.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(format!("argument '{name}': {}", err.value(py)))
    } else {
        err
    }
}

/// A keyword's value as the setting's type: integers by `AnyInt`'s rule (ConfigError naming
/// the setting for a bool, a float, ...), floats, names and flags by PyO3's conversions.
fn from_python(setting: &Setting, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let name = setting.name;
    let argument = |e| argument(value.py(), name, e);
    Ok(match setting.ty {
        Type::Int { .. } => Value::Int(
            value
                .extract::<AnyInt>()?
                .to_i64(name, ConfigError::new_err)?,
        ),
        Type::Float => Value::Float(value.extract().map_err(argument)?),
        Type::Name(_) => Value::Str(value.extract().map_err(argument)?),
        Type::Bool => Value::Bool(value.extract().map_err(argument)?),
        Type::Sizes => match layer_objects(value)? {
            Some(objects) => Value::Layers(objects),
            None => Value::Ints(
                value
                    .extract::<AnyInts>()?
                    .to_i64s(name, ConfigError::new_err)?,
            ),
        },
    })
}

/// Layer objects (`nxrs.layers`, anything with `to_dict()`) or their JSON objects (dicts, as a
/// configuration dict holds them) as the core's layers, which the core parses and checks
/// (`LayerSpec::from_json`); `None` for anything else (layer sizes, or a value the caller
/// refuses as such). A list of layer objects has no integer in it.
fn layer_objects(value: &Bound<'_, PyAny>) -> PyResult<Option<Vec<LayerSpec>>> {
    if !(value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>()) {
        return Ok(None);
    }
    let items = value.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    if items.is_empty() || items.iter().any(|item| item.is_instance_of::<PyInt>()) {
        return Ok(None);
    }
    let py = value.py();
    let json = py.import(intern!(py, "json"))?;
    // JSON has no NaN or infinity: such a value is refused by name below, not written as the
    // `NaN` the core's parser would call "not JSON".
    let strict = [(intern!(py, "allow_nan"), false)].into_py_dict(py)?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let object = if item.hasattr(intern!(py, "to_dict"))? {
                item.call_method0(intern!(py, "to_dict"))?
            } else {
                item.clone()
            };
            let text: String = json
                .call_method(intern!(py, "dumps"), (&object,), Some(&strict))
                .and_then(|t| t.extract())
                .map_err(|why| not_a_layer(i, &object, &why))?;
            LayerSpec::from_json_text(&text, i).map_err(to_py)
        })
        .collect::<PyResult<Vec<_>>>()
        .map(Some)
}

/// The ConfigError for item `i` of a layer list that has no JSON form: a layer object with a
/// value that is not a finite number or an integer too long to write (named, as given), nested
/// deeper than Python's recursion limit, or something that is no layer at all.
fn not_a_layer(i: usize, object: &Bound<'_, PyAny>, why: &PyErr) -> PyErr {
    let py = object.py();
    let shown = |v: &Bound<'_, PyAny>| shown(v).unwrap_or_else(|_| "?".into());
    if why.is_instance_of::<PyRecursionError>(py) {
        return ConfigError::new_err(format!("layer {i}: its values are nested too deeply"));
    }
    if let Ok(dict) = object.cast::<PyDict>() {
        let kind = dict
            .get_item("type")
            .ok()
            .flatten()
            .and_then(|t| t.extract::<String>().ok())
            .unwrap_or_else(|| "?".into());
        for (key, value) in dict.iter() {
            let infinite = value
                .cast::<PyFloat>()
                .is_ok_and(|x| !x.value().is_finite());
            // Python writes no integer of more than 4,300 digits.
            let long = value.is_instance_of::<PyInt>() && value.str().is_err();
            if infinite || long {
                let what = if long {
                    "too large"
                } else {
                    "not a finite number"
                };
                return ConfigError::new_err(format!(
                    "layer {i} ({kind}): {key} = {} is {what}",
                    shown(&value)
                ));
            }
        }
    }
    ConfigError::new_err(format!(
        "layer {i}: {} is neither a layer size nor a layer object",
        shown(object)
    ))
}

/// A value as Python holds it.
fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(n) => n.into_pyobject(py)?.into_any(),
        Value::Float(x) => PyFloat::new(py, *x).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Ints(v) => PyList::new(py, v)?.into_any(),
        Value::Layers(layers) => {
            // Each layer's JSON object as a dict, through the json module (plain values only).
            let objects = py
                .import(intern!(py, "json"))?
                .call_method1(intern!(py, "loads"), (LayerSpec::list_json(layers),))?;
            let ordered = PyList::empty(py);
            for object in objects.try_iter()? {
                ordered.append(in_parameter_order(py, &object?.cast_into::<PyDict>()?)?)?;
            }
            ordered.into_any()
        }
    })
}

/// Every layer object's keys in the order of its parameters (`nxrs.layers`' classes and
/// PyTorch's signatures): `type`, then `Input`'s, `Dense`'s, the convolutions' and pools',
/// `Dropout`'s, the normalisations' (`momentum` before `eps`), the bias switch (after
/// `units` or `eps`), the sequence layers' sizes and `std`s, and a Residual's `layers`. No layer has two of these groups, so one list
/// orders them all.
const PARAMETER_ORDER: [&str; 18] = [
    "type",
    "shape",
    "vocab",
    "context",
    "units",
    "heads",
    "width",
    "out_channels",
    "kernel_size",
    "stride",
    "padding",
    "p",
    "momentum",
    "eps",
    "bias",
    "std",
    "proj_std",
    "layers",
];

/// `object` (a layer's JSON object, its keys sorted as the core's JSON map holds them) with
/// its keys in `PARAMETER_ORDER`, as `Layer.to_dict` and a model file write them: what a user
/// reads (`Trainer.config`, a checkpoint's `config`, `nxrs inspect`). Only the order: the
/// checkpoint's configuration record keeps the core's bytes. A key not in the list follows,
/// in the order it had.
fn in_parameter_order<'py>(
    py: Python<'py>,
    object: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    let ordered = PyDict::new(py);
    for key in PARAMETER_ORDER {
        if let Some(value) = object.get_item(key)? {
            ordered.set_item(key, value)?;
        }
    }
    // A Residual's layers, each in the same order.
    if let Some(layers) = object.get_item("layers")? {
        if let Ok(layers) = layers.cast::<PyList>() {
            let nested = layers
                .iter()
                .map(|layer| match layer.cast::<PyDict>() {
                    Ok(layer) => Ok(in_parameter_order(py, layer)?.into_any()),
                    Err(_) => Ok(layer),
                })
                .collect::<PyResult<Vec<_>>>()?;
            ordered.set_item("layers", PyList::new(py, nested)?)?;
        }
    }
    for (key, value) in object.iter() {
        if !ordered.contains(&key)? {
            ordered.set_item(key, value)?;
        }
    }
    Ok(ordered)
}

/// Any value of a configuration dict (a trainer's, a manifest's, a checkpoint's) for the core's
/// comparison: what it would be as a setting, or its `repr` for anything else.
fn any_value(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::None);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract() {
            return Ok(Value::Int(n));
        }
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(value.extract()?));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::Str(s.to_string()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let ints: Option<Vec<i64>> = value
            .try_iter()?
            .map(|item| {
                let item = item?;
                Ok(
                    (item.is_instance_of::<PyInt>() && !item.is_instance_of::<PyBool>())
                        .then(|| item.extract().ok())
                        .flatten(),
                )
            })
            .collect::<PyResult<_>>()?;
        if let Some(ints) = ints {
            return Ok(Value::Ints(ints));
        }
    }
    Ok(Value::Str(value.repr()?.to_string()))
}

/// A configuration as a dict with `docs/TRAINING.md`'s keys (binary32 values as floats), in
/// the schema's order. With `bits`, also `sizes` (the layers, under the checkpoint record's
/// key) and the bit pattern of every binary32 value as `<key>_bits`.
pub(crate) fn config_dict<'py>(
    py: Python<'py>,
    config: &TrainerConfig,
    bits: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (s, value) in settings()
        .iter()
        .zip(config.settings().into_iter().map(|(_, v)| v))
    {
        dict.set_item(s.name, to_python(py, &value)?)?;
        match (&value, s.ty) {
            (Value::Ints(sizes), Type::Sizes) if bits => dict.set_item("sizes", sizes)?,
            // The record of layer objects has no sizes.
            (Value::Layers(_), Type::Sizes) if bits => dict.set_item("sizes", PyList::empty(py))?,
            (Value::Float(x), Type::Float) if bits => {
                // Exact: the value is a binary32 widened.
                let bits = F32::from_f64_bits(x.to_bits()).to_bits();
                dict.set_item(format!("{}_bits", s.name), bits)?
            }
            (Value::None, Type::Float) if bits => {
                dict.set_item(format!("{}_bits", s.name), py.None())?
            }
            _ => {}
        }
    }
    Ok(dict)
}

/// Every setting of the configuration (`nxrs.config_schema()`): name, type, the accepted names
/// (or None), whether None is accepted, the default in each family, the smallest integer, the
/// accepted values as the documentation says them, and a description.
#[pyfunction]
pub fn config_schema(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let rows = PyList::empty(py);
    for s in settings() {
        let row = PyDict::new(py);
        row.set_item("name", s.name)?;
        row.set_item("type", s.ty.name())?;
        row.set_item(
            "choices",
            match s.ty {
                Type::Name(names) => Some(names.to_vec()),
                _ => None,
            },
        )?;
        row.set_item("optional", s.optional)?;
        let defaults = PyDict::new(py);
        let seed_model = TrainerConfig::seed_model();
        for family in Family::ALL {
            defaults.set_item(
                family.name(),
                to_python(py, &s.default_in(family, &seed_model))?,
            )?;
        }
        row.set_item("default", defaults)?;
        row.set_item(
            "default_layer_objects",
            match s.default {
                Default::ForLayerObjects { objects, .. } => Some(objects),
                _ => None,
            },
        )?;
        row.set_item(
            "default_adamw",
            match s.default {
                Default::ForAdamW { adamw, .. } => Some(adamw),
                _ => None,
            },
        )?;
        row.set_item(
            "default_cosine",
            match s.default {
                Default::ForCosine(cosine) => Some(cosine),
                _ => None,
            },
        )?;
        row.set_item(
            "min",
            match s.ty {
                Type::Int { min } if min > i64::MIN => Some(min),
                _ => None,
            },
        )?;
        row.set_item("range", s.range)?;
        row.set_item("doc", s.doc)?;
        rows.append(row)?;
    }
    Ok(rows)
}

/// The settings in which two configuration dicts differ (the core's one comparison: floats by
/// their bits, the schema's order, then other keys sorted); a key one lacks differs.
#[pyfunction]
pub fn _config_differences(
    mine: &Bound<'_, PyDict>,
    theirs: &Bound<'_, PyDict>,
) -> PyResult<Vec<String>> {
    let values = |d: &Bound<'_, PyDict>| -> PyResult<Vec<(String, Value)>> {
        d.iter()
            .map(|(k, v)| Ok((k.str()?.to_string(), any_value(&v)?)))
            .collect()
    };
    let (mine, theirs) = (values(mine)?, values(theirs)?);
    Ok(differences_of(&mine, &theirs)
        .into_iter()
        .map(|d| d.name.to_owned())
        .collect())
}

/// The checked layer list of `layers` (layer objects or their JSON objects, `Input` first),
/// one row per layer (nested ones depth first): its position, type, depth (the Residuals it is
/// in), input and output shapes and tensors (name and
/// shape; section 15.4's numbering). ConfigError as `Trainer(layers=...)` gives it.
#[pyfunction]
pub fn _layer_table<'py>(layers: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let py = layers.py();
    let specs = layer_objects(layers)?
        .ok_or_else(|| ConfigError::new_err("a layer table needs layer objects, Input first"))?;
    layer_table(&specs)
        .map_err(to_py)?
        .into_iter()
        .map(|row| {
            let dict = PyDict::new(py);
            dict.set_item("position", row.position)?;
            dict.set_item("type", row.type_name)?;
            dict.set_item("depth", row.depth)?;
            dict.set_item("input", row.input)?;
            dict.set_item("output", row.output)?;
            dict.set_item("tensors", row.tensors)?;
            Ok(dict)
        })
        .collect()
}
