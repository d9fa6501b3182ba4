//! A trainer's configuration (`docs/TRAINING.md`, section 1): everything that, with the data,
//! determines every bit of a run. It is validated here, once, for every way a trainer is built.

use crate::error::{clip, Error, Result};
use crate::loss::Loss;
use crate::math::Math;
use crate::mlp::{layer_sizes, Init, Mlp, MAX_LAYERS};
use crate::optim::{Kind, OptimizerConfig};
use crate::schedule::{Decay, Schedule};
use crate::softf32::F32;
use serde::{Deserialize, Serialize};

/// What a [`crate::Trainer`] is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainerConfig {
    /// Layer sizes, inputs first.
    pub sizes: Vec<usize>,
    pub loss: Loss,
    pub math: Math,
    pub init: Init,
    /// Keys the initialisation and the shuffle.
    pub seed: i64,
    pub optimizer: OptimizerConfig,
    pub schedule: Schedule,
    /// Clip the gradient's global norm to this value.
    pub clip_norm: Option<F32>,
    pub batch_size: usize,
    /// Consecutive samples whose gradients are summed before the block sums are added (the
    /// whole batch when `None`).
    pub grad_block: Option<usize>,
    pub shuffle: bool,
    /// Skip an epoch's last batch when it is shorter than `batch_size`.
    pub drop_last: bool,
}

impl TrainerConfig {
    /// The seed program's model: `[6, 10, 4]`, the seed's arithmetic, initialisation (seed 1) and
    /// Adam, one sample per step in order.
    pub fn seed_model() -> TrainerConfig {
        TrainerConfig::seed_style(vec![6, 10, 4], 1)
    }

    /// `docs/TRAINING.md`'s defaults for a general trainer (section 1): ieee math, He init, seed
    /// 0, Adam (lr 0.001, betas 0.9 and 0.999, eps 1e-8), batches of 32, shuffled.
    pub fn general(sizes: Vec<usize>) -> TrainerConfig {
        TrainerConfig {
            sizes,
            loss: Loss::CrossEntropy,
            math: Math::Ieee,
            init: Init::He,
            seed: 0,
            optimizer: OptimizerConfig::from_f64(Kind::Adam, [0.001, 0.9, 0.999, 1e-8, 0.0, 0.0])
                .expect("the defaults are valid"),
            schedule: Schedule::CONSTANT,
            clip_norm: None,
            batch_size: 32,
            grad_block: None,
            shuffle: true,
            drop_last: false,
        }
    }

    /// The seed's configuration with other layer sizes and initialisation seed.
    pub fn seed_style(sizes: Vec<usize>, seed: i64) -> TrainerConfig {
        TrainerConfig {
            sizes,
            loss: Loss::CrossEntropy,
            math: Math::Seed,
            init: Init::Seed,
            seed,
            optimizer: OptimizerConfig::seed(),
            schedule: Schedule::CONSTANT,
            clip_norm: None,
            batch_size: 1,
            grad_block: None,
            shuffle: false,
            drop_last: false,
        }
    }

    /// Checks every field; the model it describes.
    pub fn validate(&self) -> Result<Mlp> {
        let mlp = Mlp::new(self.sizes.clone())?;
        self.optimizer.validate()?;
        self.schedule.validate()?;
        if let Some(c) = self.clip_norm {
            if !(F32::ZERO.ieee_lt(c) && c.ieee_lt(F32::INFINITY)) {
                return Err(Error::Config(format!(
                    "clip_norm = {} (as binary32) must be finite and > 0",
                    f32::from_bits(c.to_bits())
                )));
            }
        }
        if self.batch_size == 0 {
            return Err(Error::Config("batch_size must be at least 1".into()));
        }
        if self.grad_block == Some(0) {
            return Err(Error::Config("grad_block must be at least 1".into()));
        }
        Ok(mlp)
    }

    /// The settings in which this configuration differs from `other`, each as
    /// `"name value (<label>: value)"` (binary32 values as the floats they are), in
    /// `docs/TRAINING.md`'s order; empty when they are equal. Every field is compared: the
    /// destructuring below does not compile when a field is added without it.
    pub fn differences(&self, other: &TrainerConfig, label: &str) -> Vec<String> {
        let TrainerConfig {
            sizes,
            loss,
            math,
            init,
            seed,
            optimizer,
            schedule,
            clip_norm,
            batch_size,
            grad_block,
            shuffle,
            drop_last,
        } = self;
        let float = |x: F32| f32::from_bits(x.to_bits());
        let mut out = Vec::new();
        let mut differ = |name: &str, mine: String, theirs: String| {
            if mine != theirs {
                out.push(format!("{name} {mine} ({label}: {theirs})"));
            }
        };
        differ("layers", format!("{sizes:?}"), format!("{:?}", other.sizes));
        differ("loss", loss.name().into(), other.loss.name().into());
        differ("math", math.name().into(), other.math.name().into());
        differ("init", init.name().into(), other.init.name().into());
        differ("seed", seed.to_string(), other.seed.to_string());
        let kind = |o: &OptimizerConfig| o.kind.name().to_string();
        differ("optimizer", kind(optimizer), kind(&other.optimizer));
        for ((name, mine), (_, theirs)) in
            optimizer.named().into_iter().zip(other.optimizer.named())
        {
            // Bits, not values: -0.0 and 0.0 (or two NaNs) are different settings.
            if mine.to_bits() != theirs.to_bits() {
                differ(
                    name,
                    format!("{}", float(mine)),
                    format!("{}", float(theirs)),
                );
            }
        }
        differ(
            "schedule",
            format!("{schedule:?}"),
            format!("{:?}", other.schedule),
        );
        let clip = |c: Option<F32>| format!("{:?}", c.map(float));
        differ("clip_norm", clip(*clip_norm), clip(other.clip_norm));
        differ(
            "batch_size",
            batch_size.to_string(),
            other.batch_size.to_string(),
        );
        differ(
            "grad_block",
            format!("{grad_block:?}"),
            format!("{:?}", other.grad_block),
        );
        differ("shuffle", shuffle.to_string(), other.shuffle.to_string());
        differ(
            "drop_last",
            drop_last.to_string(),
            other.drop_last.to_string(),
        );
        out
    }

    /// The gradient block length: `grad_block`, or the whole batch.
    pub fn block_len(&self) -> usize {
        self.grad_block
            .unwrap_or(self.batch_size)
            .min(self.batch_size)
    }

    /// Batches in one epoch of `samples` samples (`ceil`, or `floor` with `drop_last`).
    pub fn batches_per_epoch(&self, samples: usize) -> usize {
        if self.drop_last {
            samples / self.batch_size
        } else {
            samples.div_ceil(self.batch_size)
        }
    }
}

/// The configuration as a checkpoint records it (`docs/FORMAT.md`): every binary32 value as its
/// bit pattern (decimal text could not round-trip them exactly in every language), names for
/// the settings. Files written before the general trainer hold only `sizes`, `math` and `adam`
/// (the seed's configuration with other sizes); they still load.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRecord {
    #[serde(deserialize_with = "sizes")]
    sizes: Vec<u64>,
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
}

/// The setting called `name`, by `from_name`; `Error::Config` naming `what` when none is.
fn named<T>(what: &str, name: &str, from_name: fn(&str) -> Option<T>) -> Result<T> {
    from_name(name)
        .ok_or_else(|| Error::Config(format!("config.{what} {} is not known", clip(name))))
}

fn sizes<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<u64>, D::Error> {
    crate::bounded::seq(d, MAX_LAYERS + 1, "config.sizes")
}

impl TrainerConfig {
    /// The configuration record's JSON text (one line, a fixed key order).
    pub fn to_json(&self) -> String {
        let o = &self.optimizer;
        let (name, total_steps, step_size, gamma_bits) = match self.schedule.decay {
            Decay::Constant => ("constant", None, None, None),
            Decay::Linear { total_steps } => ("linear", Some(total_steps), None, None),
            Decay::Step { step_size, gamma } => {
                ("step", None, Some(step_size), Some(gamma.to_bits()))
            }
        };
        let record = ConfigRecord {
            sizes: self.sizes.iter().map(|&n| n as u64).collect(),
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
                },
                schedule: ScheduleRecord {
                    name: name.into(),
                    warmup_steps: self.schedule.warmup_steps,
                    total_steps,
                    step_size,
                    gamma_bits,
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
        let sizes = layer_sizes(&record.sizes)?;
        let bits = F32::from_bits;
        let config = match (record.adam, record.general) {
            (Some(adam), None) => TrainerConfig {
                math,
                optimizer: OptimizerConfig {
                    lr: bits(adam.lr_bits),
                    beta1: bits(adam.beta1_bits),
                    beta2: bits(adam.beta2_bits),
                    eps: bits(adam.eps_bits),
                    ..OptimizerConfig::seed()
                },
                ..TrainerConfig::seed_style(sizes, 1)
            },
            (None, Some(g)) => {
                let o = &g.optimizer;
                let s = &g.schedule;
                let decay = match (s.name.as_str(), s.total_steps, s.step_size, s.gamma_bits) {
                    ("constant", None, None, None) => Decay::Constant,
                    ("linear", Some(total_steps), None, None) => Decay::Linear { total_steps },
                    ("step", None, Some(step_size), Some(gamma)) => Decay::Step {
                        step_size,
                        gamma: bits(gamma),
                    },
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
                    sizes,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut general = TrainerConfig {
            sizes: vec![5, 7, 3],
            loss: Loss::Mse,
            math: Math::Ieee,
            init: Init::Glorot,
            seed: -3,
            schedule: Schedule {
                warmup_steps: 2,
                decay: Decay::Step {
                    step_size: 4,
                    gamma: F32::ONE / F32::from_i32(2),
                },
            },
            clip_norm: Some(F32::ONE),
            batch_size: 4,
            grad_block: Some(2),
            shuffle: true,
            drop_last: true,
            ..TrainerConfig::seed_model()
        };
        general.optimizer.kind = Kind::Sgd;
        general.optimizer.momentum = F32::ONE / F32::from_i32(2);
        for config in [TrainerConfig::seed_model(), general] {
            let text = config.to_json();
            assert_eq!(TrainerConfig::from_json(&text).unwrap(), config, "{text}");
        }
    }

    #[test]
    fn records_written_before_the_general_trainer_are_the_seed_configuration() {
        let old = r#"{"sizes":[6,10,4],"math":"seed","adam":{"lr_bits":1008981770,
            "beta1_bits":1063675494,"beta2_bits":1065336439,"eps_bits":841731191}}"#;
        assert_eq!(
            TrainerConfig::from_json(old).unwrap(),
            TrainerConfig::seed_model()
        );
    }

    #[test]
    fn bad_records_are_config_errors() {
        let seed = TrainerConfig::seed_model().to_json();
        for bad in [
            seed.replace("\"seed\",\"general\"", "\"fast\",\"general\""),
            seed.replace("\"adam\"", "\"adagrad\""),
            seed.replace("\"cross_entropy\"", "\"hinge\""),
            seed.replace("\"batch_size\":1", "\"batch_size\":0"),
            seed.replace("\"shuffle\"", "\"extra\":1,\"shuffle\""),
            seed.replace("\"sizes\":[6,10,4]", "\"sizes\":[6]"),
            "{}".to_string(),
        ] {
            assert!(
                matches!(TrainerConfig::from_json(&bad), Err(Error::Config(_))),
                "{bad}"
            );
        }
    }
}
