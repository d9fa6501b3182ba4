//! The configuration at the boundary: `Trainer(...)`'s keyword options to a core
//! [`TrainerConfig`], and a configuration back to a dict with `docs/TRAINING.md`'s keys.

use crate::errors::{to_py, ConfigError};
use crate::inputs::{count, AnyInt, AnyInts};
use crate::trainer::float_of;
use nxrs_core::config::TrainerConfig;
use nxrs_core::loss::Loss;
use nxrs_core::math::Math;
use nxrs_core::mlp::{layer_sizes, Init};
use nxrs_core::optim::{Kind, OptimizerConfig};
use nxrs_core::schedule::{Decay, Schedule};
use nxrs_core::F32;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A configuration as a dict with `docs/TRAINING.md`'s keys (binary32 values as floats). With
/// `bits`, also `sizes` (the layers) and the bit pattern of every binary32 value as `<key>_bits`.
pub(crate) fn config_dict<'py>(
    py: Python<'py>,
    config: &TrainerConfig,
    bits: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let float = |d: &Bound<'py, PyDict>, name: &str, value: Option<F32>| -> PyResult<()> {
        d.set_item(name, value.map(float_of))?;
        if bits {
            d.set_item(format!("{name}_bits"), value.map(F32::to_bits))?;
        }
        Ok(())
    };
    dict.set_item("layers", config.sizes.clone())?;
    if bits {
        dict.set_item("sizes", config.sizes.clone())?;
    }
    dict.set_item("loss", config.loss.name())?;
    dict.set_item("math", config.math.name())?;
    dict.set_item("init", config.init.name())?;
    dict.set_item("seed", config.seed)?;
    dict.set_item("optimizer", config.optimizer.kind.name())?;
    for (name, value) in config.optimizer.named() {
        float(&dict, name, Some(value))?;
    }
    let (schedule, total_steps, step_size, gamma) = match config.schedule.decay {
        Decay::Constant => ("constant", None, None, None),
        Decay::Linear { total_steps } => ("linear", Some(total_steps), None, None),
        Decay::Step { step_size, gamma } => ("step", None, Some(step_size), Some(gamma)),
    };
    dict.set_item("schedule", schedule)?;
    dict.set_item("warmup_steps", config.schedule.warmup_steps)?;
    dict.set_item("total_steps", total_steps)?;
    dict.set_item("step_size", step_size)?;
    float(&dict, "gamma", gamma)?;
    float(&dict, "clip_norm", config.clip_norm)?;
    dict.set_item("batch_size", config.batch_size)?;
    dict.set_item("grad_block", config.grad_block)?;
    dict.set_item("shuffle", config.shuffle)?;
    dict.set_item("drop_last", config.drop_last)?;
    Ok(dict)
}

/// The setting called `name` (ConfigError listing the known names otherwise).
fn named<T: Copy>(
    what: &str,
    name: &str,
    all: &[T],
    name_of: fn(T) -> &'static str,
) -> PyResult<T> {
    all.iter()
        .copied()
        .find(|&v| name_of(v) == name)
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|&v| name_of(v)).collect();
            ConfigError::new_err(format!("{what} = {name:?} is not known (known: {known:?})"))
        })
}

/// A configuration count at least `min` (ConfigError otherwise).
fn setting(value: &AnyInt, name: &str, min: i64) -> PyResult<u64> {
    Ok(count(value, name, min, ConfigError::new_err)? as u64)
}

fn size(value: &AnyInt, name: &str) -> PyResult<usize> {
    usize::try_from(setting(value, name, 1)?)
        .map_err(|_| ConfigError::new_err(format!("{name} is too large")))
}

fn binary32(x: f64) -> F32 {
    F32::from_f64_bits(x.to_bits())
}

/// The keyword arguments of `Trainer(...)` after `layers`.
pub(crate) struct Options {
    pub(crate) seed: Option<AnyInt>,
    pub(crate) sizes: Option<AnyInts>,
    pub(crate) loss: Option<String>,
    pub(crate) math: Option<String>,
    pub(crate) init: Option<String>,
    pub(crate) optimizer: Option<String>,
    pub(crate) lr: Option<f64>,
    pub(crate) beta1: Option<f64>,
    pub(crate) beta2: Option<f64>,
    pub(crate) eps: Option<f64>,
    pub(crate) weight_decay: Option<f64>,
    pub(crate) momentum: Option<f64>,
    pub(crate) schedule: Option<String>,
    pub(crate) warmup_steps: Option<AnyInt>,
    pub(crate) total_steps: Option<AnyInt>,
    pub(crate) step_size: Option<AnyInt>,
    pub(crate) gamma: Option<f64>,
    pub(crate) clip_norm: Option<f64>,
    pub(crate) batch_size: Option<AnyInt>,
    pub(crate) grad_block: Option<AnyInt>,
    pub(crate) shuffle: Option<bool>,
    pub(crate) drop_last: Option<bool>,
}

/// The configuration `Trainer(layers, **options)` describes: the seed family (`layers` None:
/// the seed model's configuration, `sizes` its layer sizes) or the general family (TRAINING.md's
/// defaults), then every option given.
pub(crate) fn build_config(layers: Option<AnyInts>, o: Options) -> PyResult<TrainerConfig> {
    let seed = match &o.seed {
        Some(s) => Some(s.to_i64("seed", ConfigError::new_err)?),
        None => None,
    };
    let mut config = match (layers, &o.sizes) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new_err(
                "give layers (a general trainer) or sizes (the seed model's family), not both",
            ))
        }
        (None, sizes) => {
            let sizes = match sizes {
                Some(s) => {
                    layer_sizes(&s.to_i64s("sizes", ConfigError::new_err)?).map_err(to_py)?
                }
                None => vec![6, 10, 4],
            };
            TrainerConfig::seed_style(sizes, seed.unwrap_or(1))
        }
        (Some(layers), None) => {
            let sizes =
                layer_sizes(&layers.to_i64s("layers", ConfigError::new_err)?).map_err(to_py)?;
            let mut config = TrainerConfig::general(sizes);
            config.seed = seed.unwrap_or(config.seed);
            config
        }
    };
    if let Some(name) = &o.loss {
        config.loss = named("loss", name, &Loss::ALL, Loss::name)?;
    }
    if let Some(name) = &o.math {
        config.math = named("math", name, &Math::ALL, Math::name)?;
    }
    if let Some(name) = &o.init {
        config.init = named("init", name, &Init::ALL, Init::name)?;
    }
    let kind = match &o.optimizer {
        Some(name) => named("optimizer", name, &Kind::ALL, Kind::name)?,
        None => config.optimizer.kind,
    };
    let hyper = [o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.momentum];
    if kind != config.optimizer.kind || hyper.iter().any(Option::is_some) {
        let base = config.optimizer.named().map(|(_, v)| float_of(v));
        let default_decay = if kind == Kind::AdamW { 0.01 } else { 0.0 };
        let values = [
            o.lr.unwrap_or(base[0]),
            o.beta1.unwrap_or(base[1]),
            o.beta2.unwrap_or(base[2]),
            o.eps.unwrap_or(base[3]),
            o.weight_decay.unwrap_or(default_decay),
            o.momentum.unwrap_or(0.0),
        ];
        config.optimizer = OptimizerConfig::from_f64(kind, values).map_err(to_py)?;
    }
    let name = o.schedule.as_deref().unwrap_or("constant");
    let decay = match (name, &o.total_steps, &o.step_size, o.gamma) {
        ("constant", None, None, None) => Decay::Constant,
        ("linear", Some(total), None, None) => Decay::Linear {
            total_steps: setting(total, "total_steps", 1)?,
        },
        ("step", None, Some(step_size), Some(gamma)) => Decay::Step {
            step_size: setting(step_size, "step_size", 1)?,
            gamma: binary32(gamma),
        },
        ("constant" | "linear" | "step", ..) => {
            return Err(ConfigError::new_err(format!(
                "schedule={name:?} takes {}",
                match name {
                    "constant" => "no total_steps, step_size or gamma",
                    "linear" => "total_steps (and no step_size or gamma)",
                    _ => "step_size and gamma (and no total_steps)",
                }
            )))
        }
        _ => {
            return Err(ConfigError::new_err(format!(
                "schedule = {name:?} is not known (known: [\"constant\", \"linear\", \"step\"])"
            )))
        }
    };
    config.schedule = Schedule {
        warmup_steps: match &o.warmup_steps {
            Some(w) => setting(w, "warmup_steps", 0)?,
            None => config.schedule.warmup_steps,
        },
        decay,
    };
    if let Some(c) = o.clip_norm {
        config.clip_norm = Some(binary32(c));
    }
    if let Some(b) = &o.batch_size {
        config.batch_size = size(b, "batch_size")?;
    }
    if let Some(g) = &o.grad_block {
        config.grad_block = Some(size(g, "grad_block")?);
    }
    if let Some(s) = o.shuffle {
        config.shuffle = s;
    }
    if let Some(d) = o.drop_last {
        config.drop_last = d;
    }
    config.validate().map_err(to_py)?;
    Ok(config)
}
