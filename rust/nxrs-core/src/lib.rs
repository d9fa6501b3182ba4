//! nxrs-core: bit-reproducible neural-network training with exact checkpoint/resume.
//!
//! All training arithmetic runs on [`softf32::F32`], IEEE 754 binary32 implemented with integer
//! operations in a fixed order, so a run gives the same bits on every CPU and under every compiler
//! flag. This crate has no Python in it; `nxrs-py` wraps it.
//!
//! - [`softf32`]: the arithmetic.
//! - [`math`]: the seed program's `exp`, `log`, Newton `sqrt` and sign-of-difference `le`.
//! - [`mlp`], [`adam`], [`trainer`]: the model, the optimiser, and the state they advance.
//! - [`dataset`]: samples and labels, and the seed's synthetic data.
//! - [`hash`]: the seed's state hash and the full-state hash.
//! - [`schedule`]: learning-rate schedules.
//! - [`rng`]: the random streams of initialisation, shuffling and splitting.
//! - [`nxck`]: checkpoint files.

pub mod adam;
pub mod dataset;
pub mod error;
pub mod hash;
pub mod math;
pub mod mlp;
pub mod nxck;
pub mod rng;
pub mod schedule;
pub mod softf32;
pub mod trainer;

pub use error::{Error, Result};
pub use softf32::F32;
pub use trainer::{TrainState, Trainer, TrainerConfig};

/// Any primitive integer type. Layer sizes, dataset sizes and labels arrive as whatever integers
/// the caller holds (a Python int as `i64`, a numpy label array as `i128`); the core checks the
/// value itself against its range, so `-1` gets the same error as any other out-of-range value
/// rather than failing a cast to `usize` before the check.
pub trait Integer: Copy + std::fmt::Display + std::fmt::Debug + TryInto<usize> {}

impl<T: Copy + std::fmt::Display + std::fmt::Debug + TryInto<usize>> Integer for T {}
