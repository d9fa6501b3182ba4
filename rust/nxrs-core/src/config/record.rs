//! The configuration as a checkpoint records it (`docs/FORMAT.md`). Its keys and their order
//! are the file format's, fixed: files written before load, files written now are
//! byte-identical to those of earlier versions.

use super::TrainerConfig;
use crate::error::{clip, Error, Result};
use crate::init::Init;
use crate::layers::{Floats, LayerSpec};
use crate::limits::MAX_LAYERS;
use crate::loss::Loss;
use crate::math::Math;
use crate::mlp::layer_sizes;
use crate::model::Architecture;
use crate::optim::{DecayParams, Kind, OptimizerConfig};
use crate::schedule::{Decay, DecayKind, Schedule};
use crate::softf32::F32;
use serde::{Deserialize, Serialize};

/// The configuration as a checkpoint records it (`docs/FORMAT.md`): every binary32 value as its
/// bit pattern (decimal text could not round-trip them exactly in every language), names for
/// the settings. Files written before the general trainer hold only `sizes`, `math` and `adam`
/// (the seed's configuration with other sizes); they still load.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRecord {
    /// Layer sizes; empty for a model of layer objects.
    #[serde(deserialize_with = "sizes")]
    sizes: Vec<u64>,
    /// Layer objects in their JSON form (section 15.1), for such a model.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "layers"
    )]
    layers: Option<Vec<serde_json::Value>>,
    math: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    adam: Option<AdamRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    general: Option<GeneralRecord>,
}

/// Adam's hyperparameters in files written before the general trainer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdamRecord {
    lr_bits: u32,
    beta1_bits: u32,
    beta2_bits: u32,
    eps_bits: u32,
}

/// Everything else of a configuration.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GeneralRecord {
    loss: String,
    init: String,
    seed: i64,
    optimizer: OptimizerRecord,
    schedule: ScheduleRecord,
    clip_norm_bits: Option<u32>,
    batch_size: u64,
    grad_block: Option<u64>,
    shuffle: bool,
    drop_last: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptimizerRecord {
    name: String,
    lr_bits: u32,
    beta1_bits: u32,
    beta2_bits: u32,
    eps_bits: u32,
    weight_decay_bits: u32,
    momentum_bits: u32,
    /// Absent for "all" (so records of configurations without it are those of earlier
    /// versions, byte for byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decay_params: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleRecord {
    name: String,
    warmup_steps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    total_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gamma_bits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_lr_bits: Option<u32>,
}

/// The setting called `name`, by `from_name`; `Error::Config` naming `what` when none is.
fn named<T>(what: &str, name: &str, from_name: fn(&str) -> Option<T>) -> Result<T> {
    from_name(name)
        .ok_or_else(|| Error::Config(format!("config.{what} {} is not known", clip(name))))
}

fn sizes<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<u64>, D::Error> {
    crate::bounded::seq(d, MAX_LAYERS + 1, "config.sizes")
}

fn layers<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<serde_json::Value>>, D::Error> {
    crate::bounded::seq(d, MAX_LAYERS + 1, "config.layers").map(Some)
}

impl TrainerConfig {
    /// The configuration record's JSON text (one line, a fixed key order).
    pub fn to_json(&self) -> String {
        let o = &self.optimizer;
        let (total_steps, step_size, gamma_bits, min_lr_bits) = match self.schedule.decay {
            Decay::Constant => (None, None, None, None),
            Decay::Linear { total_steps } => (Some(total_steps), None, None, None),
            Decay::Step { step_size, gamma } => {
                (None, Some(step_size), Some(gamma.to_bits()), None)
            }
            Decay::Cosine {
                total_steps,
                min_lr,
            } => (Some(total_steps), None, None, Some(min_lr.to_bits())),
        };
        let (sizes, layers) = match &self.architecture {
            Architecture::Sizes(sizes) => (sizes.iter().map(|&n| n as u64).collect(), None),
            Architecture::Layers(layers) => (
                Vec::new(),
                Some(layers.iter().map(|l| l.to_json(Floats::Bits)).collect()),
            ),
        };
        let record = ConfigRecord {
            sizes,
            layers,
            math: self.math.name().into(),
            adam: None,
            general: Some(GeneralRecord {
                loss: self.loss.name().into(),
                init: self.init.name().into(),
                seed: self.seed,
                optimizer: OptimizerRecord {
                    name: o.kind.name().into(),
                    lr_bits: o.lr.to_bits(),
                    beta1_bits: o.beta1.to_bits(),
                    beta2_bits: o.beta2.to_bits(),
                    eps_bits: o.eps.to_bits(),
                    weight_decay_bits: o.weight_decay.to_bits(),
                    momentum_bits: o.momentum.to_bits(),
                    decay_params: (o.decay_params != DecayParams::All)
                        .then(|| o.decay_params.name().into()),
                },
                schedule: ScheduleRecord {
                    name: self.schedule.decay.kind().name().into(),
                    warmup_steps: self.schedule.warmup_steps,
                    total_steps,
                    step_size,
                    gamma_bits,
                    min_lr_bits,
                },
                clip_norm_bits: self.clip_norm.map(F32::to_bits),
                batch_size: self.batch_size as u64,
                grad_block: self.grad_block.map(|g| g as u64),
                shuffle: self.shuffle,
                drop_last: self.drop_last,
            }),
        };
        serde_json::to_string(&record).expect("a configuration record serialises")
    }

    /// The configuration a record's JSON text describes, validated. `Error::Config` for a
    /// record that is not one (the caller reading a file reports it as the file's defect).
    pub fn from_json(text: &str) -> Result<TrainerConfig> {
        let record: ConfigRecord = serde_json::from_str(text)
            .map_err(|e| Error::Config(format!("config: {}", clip(&format_args!("{e}")))))?;
        let math = Math::from_name(&record.math).ok_or_else(|| {
            Error::Config(format!(
                "config.math {} is not implemented by this build (known: {:?})",
                clip(&record.math),
                Math::ALL.map(Math::name)
            ))
        })?;
        let architecture = match &record.layers {
            None => Architecture::Sizes(layer_sizes(&record.sizes)?),
            Some(_) if !record.sizes.is_empty() => {
                return Err(Error::Config(
                    "config: a record has sizes or layers, not both".into(),
                ))
            }
            Some(layers) => Architecture::Layers(
                layers
                    .iter()
                    .enumerate()
                    .map(|(i, v)| LayerSpec::from_json(v, i))
                    .collect::<Result<Vec<LayerSpec>>>()?,
            ),
        };
        let bits = F32::from_bits;
        let config = match (record.adam, record.general) {
            (Some(adam), None) => TrainerConfig {
                math,
                optimizer: OptimizerConfig {
                    lr: bits(adam.lr_bits),
                    beta1: bits(adam.beta1_bits),
                    beta2: bits(adam.beta2_bits),
                    eps: bits(adam.eps_bits),
                    ..TrainerConfig::seed_model().optimizer
                },
                architecture,
                ..TrainerConfig::seed_model()
            },
            (None, Some(g)) => {
                let o = &g.optimizer;
                let s = &g.schedule;
                let kind = named("schedule", &s.name, DecayKind::from_name)?;
                let fields = (
                    kind,
                    s.total_steps,
                    s.step_size,
                    s.gamma_bits,
                    s.min_lr_bits,
                );
                let decay = match fields {
                    (DecayKind::Constant, None, None, None, None) => Decay::Constant,
                    (DecayKind::Linear, Some(total_steps), None, None, None) => {
                        Decay::Linear { total_steps }
                    }
                    (DecayKind::Step, None, Some(step_size), Some(gamma), None) => Decay::Step {
                        step_size,
                        gamma: bits(gamma),
                    },
                    (DecayKind::Cosine, Some(total_steps), None, None, Some(min_lr)) => {
                        Decay::Cosine {
                            total_steps,
                            min_lr: bits(min_lr),
                        }
                    }
                    _ => {
                        return Err(Error::Config(format!(
                            "config.schedule {} has the wrong fields for its name",
                            clip(&s.name)
                        )))
                    }
                };
                let count = |what: &str, n: u64| {
                    usize::try_from(n)
                        .map_err(|_| Error::Config(format!("config.{what} = {n} is too large")))
                };
                TrainerConfig {
                    architecture,
                    loss: named("loss", &g.loss, Loss::from_name)?,
                    math,
                    init: named("init", &g.init, Init::from_name)?,
                    seed: g.seed,
                    optimizer: OptimizerConfig {
                        kind: named("optimizer", &o.name, Kind::from_name)?,
                        lr: bits(o.lr_bits),
                        beta1: bits(o.beta1_bits),
                        beta2: bits(o.beta2_bits),
                        eps: bits(o.eps_bits),
                        weight_decay: bits(o.weight_decay_bits),
                        momentum: bits(o.momentum_bits),
                        decay_params: match &o.decay_params {
                            None => DecayParams::All,
                            Some(name) => named("decay_params", name, DecayParams::from_name)?,
                        },
                    },
                    schedule: Schedule {
                        warmup_steps: s.warmup_steps,
                        decay,
                    },
                    clip_norm: g.clip_norm_bits.map(bits),
                    batch_size: count("batch_size", g.batch_size)?,
                    grad_block: g.grad_block.map(|n| count("grad_block", n)).transpose()?,
                    shuffle: g.shuffle,
                    drop_last: g.drop_last,
                }
            }
            _ => {
                return Err(Error::Config(
                    "config must have either `adam` (written before the general trainer) or \
                     `general`, not both"
                        .into(),
                ))
            }
        };
        config.validate()?;
        Ok(config)
    }
}
