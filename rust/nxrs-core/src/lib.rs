//! nxrs-core: bit-reproducible neural-network training with exact checkpoint/resume.
//!
//! All training arithmetic runs on [`softf32::F32`], IEEE 754 binary32 implemented with integer
//! operations in a fixed order, so a run gives the same bits on every CPU and under every compiler
//! flag. This crate has no Python in it; `nxrs-py` wraps it.
//!
//! Dependencies run one way (no module uses one after it):
//! [`softf32`], [`rng`], [`limits`] -> [`arith`], [`init`], [`schedule`], [`threads`] ->
//! [`backend`], [`math`], [`nxck`], [`params`] -> [`layers`], [`loss`], [`optim`] ->
//! [`dataset`], [`mlp`] -> [`model`] -> [`config`], [`state`], [`samples`] -> [`digest`],
//! [`hash`] ->
//! [`trainer`] -> [`checkpoint`].
//!
//! - [`softf32`]: the arithmetic; [`arith`]: the trait the kernels are written over;
//!   [`backend`]: the verified hardware-float backend behind it, and its environment guard.
//! - [`math`]: the two settings of `exp`, `log`, `sqrt` and `le` (the seed's and IEEE's).
//! - [`layers`]: the one engine every model is computed by: the checked layer list, each
//!   layer's kernels, and a network's passes shared out among threads (`docs/TRAINING.md`
//!   section 15); [`loss`]: the losses.
//! - [`mlp`]: what is an MLP's own: its sizes, the seed's initialisation and its layers;
//!   [`model`]: a model as the trainer holds it (its network, and the MLP it stands for);
//!   [`params`], [`init`], [`limits`]: a layer's tensors, their initial draws, the size limits.
//! - [`optim`], [`schedule`]: Adam, AdamW, SGD, clipping; learning-rate schedules.
//! - [`rng`]: the random streams of initialisation, shuffling and splitting.
//! - [`config`], [`state`], [`dataset`]: what a run is built from, what it advances, its data;
//!   [`samples`]: the shapes of data a model takes.
//! - [`hash`]: the seed's state hash and the full-state hash; [`digest`]: the SHA-256 digests
//!   of states, configurations and data.
//! - [`nxck`]: checkpoint files (names, shapes, scalars and a configuration record);
//!   [`checkpoint`]: trainers to those files and back.
//! - [`trainer`]: the training loop (and its bounded stretches), evaluation and prediction.
//!
//! `docs/TRAINING.md` defines every bit a run computes.

pub mod arith;
pub mod backend;
mod bounded;
mod cell_bytes;
pub mod checkpoint;
pub mod config;
pub mod dataset;
pub mod digest;
pub mod error;
mod fnv;
pub mod hash;
pub mod init;
pub mod layers;
pub mod limits;
pub mod loss;
pub mod math;
pub mod mlp;
pub mod model;
mod names;
pub mod nxck;
pub mod optim;
pub mod params;
pub mod rng;
pub mod samples;
pub mod sampling;
pub mod schedule;
pub mod softf32;
pub mod state;
pub mod threads;
pub mod trainer;
mod transpose;

pub use config::TrainerConfig;
pub use error::{Error, Result};
pub use softf32::F32;
pub use state::TrainState;
pub use trainer::Trainer;

/// Any primitive integer type. Layer sizes, dataset sizes and labels arrive as whatever integers
/// the caller holds (a Python int as `i64`, a numpy label array as `i128`); the core checks the
/// value itself against its range, so `-1` gets the same error as any other out-of-range value
/// rather than failing a cast to `usize` before the check.
pub trait Integer: Copy + std::fmt::Display + std::fmt::Debug + TryInto<usize> {}

impl<T: Copy + std::fmt::Display + std::fmt::Debug + TryInto<usize>> Integer for T {}
