//! What a step, an evaluation and a prediction read of a trainer besides its state.

use crate::config::TrainerConfig;
use crate::model::Model;
use crate::threads::Threads;

/// A trainer's configuration, model and threads.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setup<'a> {
    pub config: &'a TrainerConfig,
    pub model: &'a Model,
    pub threads: &'a Threads,
}
