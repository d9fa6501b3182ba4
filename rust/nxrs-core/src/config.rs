//! A trainer's configuration (`docs/TRAINING.md`, section 1): everything that, with the data,
//! determines every bit of a run. It is validated here, once, for every way a trainer is built.

use crate::error::{Error, Result};
use crate::loss::Loss;
use crate::math::Math;
use crate::mlp::{Init, Mlp};
use crate::optim::OptimizerConfig;
use crate::schedule::Schedule;
use crate::softf32::F32;

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

    /// The gradient block length: `grad_block`, or the whole batch.
    pub fn block_len(&self) -> usize {
        self.grad_block.unwrap_or(self.batch_size).min(self.batch_size)
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
