//! The table of settings: every setting of a [`TrainerConfig`] with its name, type, default in
//! each [`Family`], accepted values and a one-line description. Building a configuration from
//! named values, reading one back by name, comparing two configurations, the Python
//! configuration dict, `nxrs.config_schema()` (and through it the command line's choices and
//! defaults and the scikit-learn estimators' defaults) all go through this table.

use super::{Family, TrainerConfig};
use crate::error::{Error, Result};
use crate::init::Init;
use crate::layers::{Floats, LayerSpec};
use crate::loss::Loss;
use crate::math::Math;
use crate::mlp::layer_sizes;
use crate::model::Architecture;
use crate::optim::{DecayParams, Kind, OptimizerConfig};
use crate::schedule::{Decay, DecayKind};
use crate::softf32::F32;
use std::fmt;
use std::sync::LazyLock;

/// A setting's value as given or read back: what Python's `int`, `float`, `str`, `bool`,
/// `None` and a list of ints are.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// A binary64 value; a configuration holds it rounded to binary32 (read back widened, so
    /// exactly).
    Float(f64),
    Str(String),
    /// Layer sizes.
    Ints(Vec<i64>),
    /// Layer objects (section 15).
    Layers(Vec<LayerSpec>),
}

impl Value {
    /// Whether two values are the same setting: floats by their bits (`-0.0` and `0.0` are
    /// different settings, two NaNs of one pattern the same), everything else by equality.
    pub fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            _ => self == other,
        }
    }
}

impl Value {
    /// As Python's `repr` shows the value (messages about a value as given).
    pub fn repr(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Str(s) => format!("{s:?}"),
            Value::Float(x) => format!("{x:?}"),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Value {
    /// As messages show a configuration's setting: names bare, binary32 values as the floats
    /// they are (`0.01`, `1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("none"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{}", f32::from_bits(binary32(*x).to_bits())),
            Value::Str(s) => f.write_str(s),
            Value::Ints(v) => write!(f, "{v:?}"),
            Value::Layers(layers) => {
                let json: Vec<serde_json::Value> =
                    layers.iter().map(|l| l.to_json(Floats::Numbers)).collect();
                write!(f, "{}", serde_json::Value::Array(json))
            }
        }
    }
}

/// What a setting holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// Layer sizes, inputs first (`crate::mlp::layer_sizes` checks them), or layer objects
    /// (`crate::layers::Network::new` checks them).
    Sizes,
    /// An integer at least `min`.
    Int {
        min: i64,
    },
    /// A binary64 value rounded to binary32.
    Float,
    /// One of these names.
    Name(&'static [&'static str]),
    Bool,
}

impl Type {
    /// The type's name in `nxrs.config_schema()`.
    pub fn name(self) -> &'static str {
        match self {
            Type::Sizes => "sizes",
            Type::Int { .. } => "int",
            Type::Float => "float",
            Type::Name(_) => "str",
            Type::Bool => "bool",
        }
    }
}

/// A setting's default.
#[derive(Clone, Debug, PartialEq)]
pub enum Default {
    /// The same in both families.
    Both(Value),
    /// The general trainer's, then the seed model's.
    Families(Value, Value),
    /// `adamw` with the AdamW optimiser (decoupled weight decay is its point), else `other`.
    ForAdamW { adamw: f64, other: f64 },
    /// This value with the cosine decay, else none (a setting of that decay alone).
    ForCosine(f64),
    /// `objects` for a model of layer objects (section 15.4), else the families' (`general`,
    /// `seed`).
    ForLayerObjects {
        objects: &'static str,
        general: &'static str,
        seed: &'static str,
    },
}

/// One setting: the table's row.
pub struct Setting {
    pub name: &'static str,
    pub ty: Type,
    /// Whether `Value::None` ("none") is accepted.
    pub optional: bool,
    pub default: Default,
    /// The accepted values, as the documentation says them.
    pub range: &'static str,
    pub doc: &'static str,
    get: fn(&TrainerConfig) -> Value,
    /// Stores a value checked against `ty` into the configuration; the settings before it in
    /// the table are already set (`weight_decay`'s check reads `optimizer`).
    set: fn(&mut TrainerConfig, &Value) -> Result<()>,
}

impl Setting {
    /// The default in `family` for a configuration whose earlier settings are `config`'s.
    pub fn default_in(&self, family: Family, config: &TrainerConfig) -> Value {
        match &self.default {
            Default::Both(v) => v.clone(),
            Default::Families(general, seed) => match family {
                Family::General => general.clone(),
                Family::SeedModel => seed.clone(),
            },
            Default::ForLayerObjects {
                objects,
                general,
                seed,
            } => name(match (&config.architecture, family) {
                (Architecture::Layers(_), _) => objects,
                (_, Family::General) => general,
                (_, Family::SeedModel) => seed,
            }),
            Default::ForCosine(cosine) => match config.schedule.decay {
                Decay::Cosine { .. } => Value::Float(*cosine),
                _ => Value::None,
            },
            Default::ForAdamW { adamw, other } => {
                Value::Float(if config.optimizer.kind == Kind::AdamW {
                    *adamw
                } else {
                    *other
                })
            }
        }
    }

    /// This setting of `config`.
    pub fn get(&self, config: &TrainerConfig) -> Value {
        (self.get)(config)
    }

    /// Checks `value` against the setting's type and range (`Error::Config` naming the
    /// setting and what it accepts), then stores it.
    pub(super) fn set(&self, config: &mut TrainerConfig, value: &Value) -> Result<()> {
        self.check(value)?;
        (self.set)(config, value)
    }

    /// The checks of a value that need no other setting.
    pub fn check(&self, value: &Value) -> Result<()> {
        let name = self.name;
        let refuse = |what: String| Err(Error::Config(format!("{name} = {what}")));
        match (self.ty, value) {
            (_, Value::None) if self.optional => Ok(()),
            (Type::Sizes, Value::Ints(_) | Value::Layers(_)) | (Type::Float, Value::Float(_)) => {
                Ok(())
            }
            (Type::Bool, Value::Bool(_)) => Ok(()),
            (Type::Int { min }, Value::Int(n)) if *n < min => {
                refuse(format!("{n} must be at least {min}"))
            }
            (Type::Int { .. }, Value::Int(_)) => Ok(()),
            (Type::Name(names), Value::Str(s)) if names.contains(&s.as_str()) => Ok(()),
            (Type::Name(names), Value::Str(s)) => {
                refuse(format!("{s:?} is not known (known: {names:?})"))
            }
            (ty, v) => refuse(format!(
                "{} is not {}{}",
                v.repr(),
                match ty {
                    Type::Sizes => "a list of layer sizes or layer objects",
                    Type::Int { .. } => "an integer",
                    Type::Float => "a float",
                    Type::Name(_) => "a name",
                    Type::Bool => "a bool",
                },
                if self.optional { " or none" } else { "" }
            )),
        }
    }
}

/// Every setting, in `docs/TRAINING.md`'s order (which is also the order of the configuration
/// dict, of `differences` and of the checks).
pub fn settings() -> &'static [Setting] {
    &SETTINGS
}

/// The setting called `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The one place each setting is defined. Adding a setting: a field of [`TrainerConfig`], a
/// row here, its use in the kernels, its key in the checkpoint record (`record.rs`, which
/// `docs/FORMAT.md` fixes) and a row of `docs/TRAINING.md`'s table (a test checks it).
static SETTINGS: LazyLock<Vec<Setting>> = LazyLock::new(|| {
    vec![
        Setting {
            name: "layers",
            ty: Type::Sizes,
            optional: false,
            // The general trainer has no default sizes (they are the data's and the model's).
            default: Default::Families(Value::None, Value::Ints(vec![6, 10, 4])),
            range: "2 to 4097 sizes, each 1..=2^24, at most 2^28 parameters; or layer objects \
                    (section 15)",
            doc: "layer sizes, inputs first, or layer objects, Input first",
            get: |c| match &c.architecture {
                Architecture::Sizes(sizes) => {
                    Value::Ints(sizes.iter().map(|&n| n as i64).collect())
                }
                Architecture::Layers(layers) => Value::Layers(layers.clone()),
            },
            set: |c, v| {
                match v {
                    Value::Ints(sizes) => c.architecture = Architecture::Sizes(layer_sizes(sizes)?),
                    Value::Layers(layers) => c.architecture = Architecture::Layers(layers.clone()),
                    _ => {}
                }
                Ok(())
            },
        },
        Setting {
            name: "loss",
            ty: Type::Name(&Loss::NAMES),
            optional: false,
            default: Default::Both(name(Loss::CrossEntropy.name())),
            range: "cross_entropy (softmax outputs, integer labels), mse (identity outputs)",
            doc: "the loss (section 5)",
            get: |c| name(c.loss.name()),
            set: |c, v| {
                c.loss = by_name(v, Loss::from_name)?;
                Ok(())
            },
        },
        Setting {
            name: "math",
            ty: Type::Name(&Math::NAMES),
            optional: false,
            default: Default::Families(name(Math::Ieee.name()), name(Math::Seed.name())),
            range: "seed, ieee",
            doc: "the elementary functions (section 2)",
            get: |c| name(c.math.name()),
            set: |c, v| {
                c.math = by_name(v, Math::from_name)?;
                Ok(())
            },
        },
        Setting {
            name: "init",
            ty: Type::Name(&Init::NAMES),
            optional: false,
            default: Default::ForLayerObjects {
                objects: "torch",
                general: "he",
                seed: "seed",
            },
            range: "seed, he, glorot (layer sizes); torch, he, glorot (layer objects)",
            doc: "the weight initialisation (section 4)",
            get: |c| name(c.init.name()),
            set: |c, v| {
                c.init = by_name(v, Init::from_name)?;
                Ok(())
            },
        },
        Setting {
            name: "seed",
            ty: Type::Int { min: i64::MIN },
            optional: false,
            default: Default::Families(Value::Int(0), Value::Int(1)),
            range: "any i64",
            doc: "keys the initialisation and the shuffle",
            get: |c| Value::Int(c.seed),
            set: |c, v| {
                c.seed = int(v)?;
                Ok(())
            },
        },
        Setting {
            name: "optimizer",
            ty: Type::Name(&Kind::NAMES),
            optional: false,
            default: Default::Both(name(Kind::Adam.name())),
            range: "adam, adamw, sgd",
            doc: "the optimiser (section 7)",
            get: |c| name(c.optimizer.kind.name()),
            set: |c, v| {
                c.optimizer.kind = by_name(v, Kind::from_name)?;
                Ok(())
            },
        },
        Setting {
            name: "lr",
            ty: Type::Float,
            optional: false,
            default: Default::Families(Value::Float(0.001), Value::Float(0.01)),
            range: "finite, > 0 and normal as binary32",
            doc: "the learning rate",
            get: |c| float(c.optimizer.lr),
            set: |c, v| hyper(c, "lr", v, |o| &mut o.lr),
        },
        Setting {
            name: "beta1",
            ty: Type::Float,
            optional: false,
            default: Default::Both(Value::Float(0.9)),
            range: "[0, 1) (adam, adamw)",
            doc: "Adam's first-moment decay",
            get: |c| float(c.optimizer.beta1),
            set: |c, v| hyper(c, "beta1", v, |o| &mut o.beta1),
        },
        Setting {
            name: "beta2",
            ty: Type::Float,
            optional: false,
            default: Default::Both(Value::Float(0.999)),
            range: "[0, 1) (adam, adamw)",
            doc: "Adam's second-moment decay",
            get: |c| float(c.optimizer.beta2),
            set: |c, v| hyper(c, "beta2", v, |o| &mut o.beta2),
        },
        Setting {
            name: "eps",
            ty: Type::Float,
            optional: false,
            default: Default::Both(Value::Float(1e-8)),
            range: "finite, > 0 and normal as binary32 (adam, adamw)",
            doc: "Adam's denominator term",
            get: |c| float(c.optimizer.eps),
            set: |c, v| hyper(c, "eps", v, |o| &mut o.eps),
        },
        Setting {
            name: "weight_decay",
            ty: Type::Float,
            optional: false,
            default: Default::ForAdamW {
                adamw: 0.01,
                other: 0.0,
            },
            range: "finite, >= 0 (adamw, sgd; 0 for adam)",
            doc: "decoupled (adamw) or coupled (sgd) weight decay",
            get: |c| float(c.optimizer.weight_decay),
            set: |c, v| hyper(c, "weight_decay", v, |o| &mut o.weight_decay),
        },
        Setting {
            name: "decay_params",
            ty: Type::Name(&DecayParams::NAMES),
            optional: false,
            default: Default::Both(name(DecayParams::All.name())),
            range: "all, matrices (weights and tables, not biases or norms; adamw, sgd)",
            doc: "the parameter tensors weight_decay applies to (section 7)",
            get: |c| name(c.optimizer.decay_params.name()),
            set: |c, v| {
                c.optimizer.decay_params = by_name(v, DecayParams::from_name)?;
                Ok(())
            },
        },
        Setting {
            name: "momentum",
            ty: Type::Float,
            optional: false,
            default: Default::Both(Value::Float(0.0)),
            range: "[0, 1) (sgd; 0 otherwise)",
            doc: "SGD's classical momentum",
            get: |c| float(c.optimizer.momentum),
            set: |c, v| hyper(c, "momentum", v, |o| &mut o.momentum),
        },
        Setting {
            name: "schedule",
            ty: Type::Name(&DecayKind::NAMES),
            optional: false,
            default: Default::Both(name(DecayKind::Constant.name())),
            range: "constant, linear, step, cosine",
            doc: "the learning-rate decay after the warm-up (section 6)",
            get: |c| name(c.schedule.decay.kind().name()),
            // The decay's own settings follow and fill in its fields.
            set: |c, v| {
                c.schedule.decay = match by_name(v, DecayKind::from_name)? {
                    DecayKind::Constant => Decay::Constant,
                    DecayKind::Linear => Decay::Linear { total_steps: 0 },
                    DecayKind::Step => Decay::Step {
                        step_size: 0,
                        gamma: F32::ZERO,
                    },
                    DecayKind::Cosine => Decay::Cosine {
                        total_steps: 0,
                        min_lr: F32::ZERO,
                    },
                };
                Ok(())
            },
        },
        Setting {
            name: "warmup_steps",
            ty: Type::Int { min: 0 },
            optional: false,
            default: Default::Both(Value::Int(0)),
            range: "integer >= 0",
            doc: "steps of linear warm-up",
            get: |c| Value::Int(c.schedule.warmup_steps as i64),
            set: |c, v| {
                c.schedule.warmup_steps = int(v)? as u64;
                Ok(())
            },
        },
        Setting {
            name: "total_steps",
            ty: Type::Int { min: 1 },
            optional: true,
            default: Default::Both(Value::None),
            range: "integer > warmup_steps (linear, cosine)",
            doc: "the step at which the linear decay reaches 0, the cosine decay min_lr",
            get: |c| match c.schedule.decay {
                Decay::Linear { total_steps } | Decay::Cosine { total_steps, .. } => {
                    Value::Int(total_steps as i64)
                }
                _ => Value::None,
            },
            set: |c, v| {
                match (&mut c.schedule.decay, v) {
                    (
                        Decay::Linear { total_steps } | Decay::Cosine { total_steps, .. },
                        Value::Int(n),
                    ) => *total_steps = *n as u64,
                    (Decay::Linear { .. } | Decay::Cosine { .. }, _) | (_, Value::Int(_)) => {
                        return decay_takes(c)
                    }
                    _ => {}
                }
                Ok(())
            },
        },
        Setting {
            name: "step_size",
            ty: Type::Int { min: 1 },
            optional: true,
            default: Default::Both(Value::None),
            range: "integer >= 1 (step)",
            doc: "the step decay's period",
            get: |c| match c.schedule.decay {
                Decay::Step { step_size, .. } => Value::Int(step_size as i64),
                _ => Value::None,
            },
            set: |c, v| {
                match (&mut c.schedule.decay, v) {
                    (Decay::Step { step_size, .. }, Value::Int(n)) => *step_size = *n as u64,
                    (Decay::Step { .. }, _) | (_, Value::Int(_)) => return decay_takes(c),
                    _ => {}
                }
                Ok(())
            },
        },
        Setting {
            name: "gamma",
            ty: Type::Float,
            optional: true,
            default: Default::Both(Value::None),
            range: "finite, > 0 (step)",
            doc: "the step decay's factor",
            get: |c| match c.schedule.decay {
                Decay::Step { gamma, .. } => float(gamma),
                _ => Value::None,
            },
            set: |c, v| {
                match (&mut c.schedule.decay, v) {
                    (Decay::Step { gamma, .. }, Value::Float(x)) => *gamma = binary32(*x),
                    (Decay::Step { .. }, _) | (_, Value::Float(_)) => return decay_takes(c),
                    _ => {}
                }
                Ok(())
            },
        },
        Setting {
            name: "min_lr",
            ty: Type::Float,
            optional: true,
            default: Default::ForCosine(0.0),
            range: "0, or finite, normal and <= lr as binary32 (cosine)",
            doc: "the rate the cosine decay ends at (section 6)",
            get: |c| match c.schedule.decay {
                Decay::Cosine { min_lr, .. } => float(min_lr),
                _ => Value::None,
            },
            set: |c, v| {
                match (&mut c.schedule.decay, v) {
                    (Decay::Cosine { min_lr, .. }, Value::Float(x)) => *min_lr = binary32(*x),
                    (Decay::Cosine { .. }, _) | (_, Value::Float(_)) => return decay_takes(c),
                    _ => {}
                }
                Ok(())
            },
        },
        Setting {
            name: "clip_norm",
            ty: Type::Float,
            optional: true,
            default: Default::Both(Value::None),
            range: "finite, > 0, or none (section 8)",
            doc: "clip the gradient's global norm to this value",
            get: |c| c.clip_norm.map_or(Value::None, float),
            set: |c, v| {
                c.clip_norm = optional_float(v);
                Ok(())
            },
        },
        Setting {
            name: "batch_size",
            ty: Type::Int { min: 1 },
            optional: false,
            default: Default::Families(Value::Int(32), Value::Int(1)),
            range: "integer >= 1",
            doc: "samples per optimiser step",
            get: |c| Value::Int(c.batch_size as i64),
            set: |c, v| {
                c.batch_size = count("batch_size", int(v)?)?;
                Ok(())
            },
        },
        Setting {
            name: "grad_block",
            ty: Type::Int { min: 1 },
            optional: true,
            default: Default::Both(Value::None),
            range: "integer >= 1, or none for the whole batch (section 5)",
            doc: "consecutive samples whose gradients are summed before the block sums",
            get: |c| c.grad_block.map_or(Value::None, |g| Value::Int(g as i64)),
            set: |c, v| {
                c.grad_block = match v {
                    Value::Int(n) => Some(count("grad_block", *n)?),
                    _ => None,
                };
                Ok(())
            },
        },
        Setting {
            name: "shuffle",
            ty: Type::Bool,
            optional: false,
            default: Default::Families(Value::Bool(true), Value::Bool(false)),
            range: "bool (section 3)",
            doc: "visit each epoch's samples in a seeded random order",
            get: |c| Value::Bool(c.shuffle),
            set: |c, v| {
                c.shuffle = *v == Value::Bool(true);
                Ok(())
            },
        },
        Setting {
            name: "drop_last",
            ty: Type::Bool,
            optional: false,
            default: Default::Both(Value::Bool(false)),
            range: "bool (section 3)",
            doc: "skip an epoch's last batch when it is shorter than batch_size",
            get: |c| Value::Bool(c.drop_last),
            set: |c, v| {
                c.drop_last = *v == Value::Bool(true);
                Ok(())
            },
        },
    ]
});

/// A value's name (`Type::Name` settings).
fn name(s: &str) -> Value {
    Value::Str(s.to_owned())
}

fn binary32(x: f64) -> F32 {
    F32::from_f64_bits(x.to_bits())
}

/// A binary32 setting read back, widened exactly.
fn float(x: F32) -> Value {
    Value::Float(f64::from(f32::from_bits(x.to_bits())))
}

fn optional_float(v: &Value) -> Option<F32> {
    match v {
        Value::Float(x) => Some(binary32(*x)),
        _ => None,
    }
}

/// A checked value's integer (`Type::Int` settings).
fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(Error::Config(format!("{} is not an integer", other.repr()))),
    }
}

fn count(name: &str, n: i64) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::Config(format!("{name} = {n} is too large")))
}

/// A checked value's enum (`Type::Name` settings, whose names are the enum's).
fn by_name<T>(v: &Value, from_name: fn(&str) -> Option<T>) -> Result<T> {
    match v {
        Value::Str(s) => from_name(s),
        _ => None,
    }
    .ok_or_else(|| Error::Config(format!("{} is not a name", v.repr())))
}

/// An optimiser hyperparameter, rounded and checked for the optimiser set before it.
fn hyper(
    c: &mut TrainerConfig,
    name: &str,
    v: &Value,
    field: fn(&mut OptimizerConfig) -> &mut F32,
) -> Result<()> {
    let Value::Float(given) = v else {
        return Err(Error::Config(format!(
            "{name} = {} is not a float",
            v.repr()
        )));
    };
    *field(&mut c.optimizer) = c.optimizer.rounded(name, *given)?;
    Ok(())
}

/// The refusal of a decay setting the schedule does not take (or lacks).
fn decay_takes(c: &TrainerConfig) -> Result<()> {
    let kind = c.schedule.decay.kind();
    Err(Error::Config(format!(
        "schedule={:?} takes {}",
        kind.name(),
        kind.takes()
    )))
}
