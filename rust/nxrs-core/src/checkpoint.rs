//! Trainers to checkpoint files and back: a trainer's configuration and state as a
//! [`Record`] the format layer writes ([`crate::nxck`]), and a file's record checked against the
//! model its configuration describes before it becomes a trainer.

use crate::config::TrainerConfig;
use crate::digest;
use crate::error::{clip, Error, Result};
use crate::model::Model;
use crate::model::TensorSpec;
use crate::nxck::v2::direct::{self, Contents, Loaded};
use crate::nxck::v2::{Checkpoint, Header, Verify};
use crate::nxck::{detect, v1, v2, Format, Record, TensorRecord};
use crate::params::Layer;
use crate::softf32::F32;
use crate::state::{check_scalars, TrainState, SCALAR_NAMES};
use crate::trainer::Trainer;
use std::collections::HashMap;
use std::path::Path;

/// What a checkpoint of `trainer` holds: its configuration, scalars and tensors (borrowed).
pub fn record(trainer: &Trainer) -> Record<'_> {
    record_of(trainer.config(), trainer.model(), trainer.state())
}

/// What a checkpoint of `state` (of a trainer configured as `config`, whose model is `model`)
/// holds: [`record`] of a trainer, or of a [`Snapshot`].
fn record_of<'a>(config: &TrainerConfig, model: &Model, state: &'a TrainState) -> Record<'a> {
    let layout = TrainState::layout(model, state.v.len() == state.params.len());
    Record {
        config: config.to_json(),
        scalars: SCALAR_NAMES.into_iter().zip(state.scalars()).collect(),
        tensors: layout
            .into_iter()
            .zip(state.tensors())
            .map(|((name, shape), cells)| TensorRecord { name, shape, cells })
            .collect(),
        metadata: Vec::new(),
    }
}

/// Saves the trainer crash-safely (see [`crate::nxck::writer`]) in `format`. v1, the seed's
/// layout, holds only the seed model at an epoch boundary (see [`record_in`]); any other
/// trainer is refused before the file is touched.
pub fn save(trainer: &Trainer, path: &Path, format: Format) -> Result<()> {
    save_with_metadata(trainer, path, format, Vec::new())
}

/// [`save`] with free-form metadata in the file (v2 only; not part of the state).
pub fn save_with_metadata(
    trainer: &Trainer,
    path: &Path,
    format: Format,
    metadata: Vec<(String, String)>,
) -> Result<()> {
    let record = Record {
        metadata,
        ..record_in(trainer, format)?
    };
    match format {
        Format::V1 => v1::save(&record, path),
        Format::V2 => v2::save(&record, path),
    }
}

/// A copy of a trainer's configuration and state, taken at a step boundary, that a save in the
/// background writes while the trainer goes on (`fit(async_save=True)`). It holds only what a
/// checkpoint holds (no working memory), so it costs one copy of the state; it is written by
/// the same writer as [`save_with_metadata`] (same bytes, same crash safety) and digested as
/// [`Trainer::state_digest`] digests the trainer it was taken from.
#[derive(Clone, Debug)]
pub struct Snapshot {
    config: TrainerConfig,
    model: Model,
    state: TrainState,
}

impl Snapshot {
    /// The copy of `trainer`'s state (and its configuration and model, which are small).
    pub fn of(trainer: &Trainer) -> Snapshot {
        Snapshot {
            config: trainer.config().clone(),
            model: trainer.model().clone(),
            state: trainer.state().clone(),
        }
    }

    /// Makes this the copy of `trainer`'s state, as [`Snapshot::of`], in the memory of the
    /// previous copy where the sizes allow: fresh memory costs a page fault per page on first
    /// touch, several times the copy itself on a loaded VM (bench/bench_async_save.py: 0.4 to 2.7 s
    /// against 0.15 s for 1 GB), so a run saving every few minutes keeps one copy's memory.
    pub fn refill(&mut self, trainer: &Trainer) {
        self.config.clone_from(trainer.config());
        self.model.clone_from(trainer.model());
        // Destructured: a field added to the state is a compile error here, not a silent gap.
        let TrainState {
            params,
            m,
            v,
            buffers,
            epoch,
            batch,
            step,
            b1t,
            b2t,
        } = trainer.state();
        copy_layers(&mut self.state.params, params);
        copy_layers(&mut self.state.m, m);
        copy_layers(&mut self.state.v, v);
        // Vec<Vec<F32>>::clone_from reuses the inner vectors' memory.
        self.state.buffers.clone_from(buffers);
        (self.state.epoch, self.state.batch, self.state.step) = (*epoch, *batch, *step);
        (self.state.b1t, self.state.b2t) = (*b1t, *b2t);
    }

    /// The state copied.
    pub fn state(&self) -> &TrainState {
        &self.state
    }

    /// Saves the copy as a v2 file with `metadata`, crash-safely: the bytes
    /// [`save_with_metadata`] writes for the trainer it was taken from.
    pub fn save(&self, path: &Path, metadata: Vec<(String, String)>) -> Result<()> {
        let record = Record {
            metadata,
            ..record_of(&self.config, &self.model, &self.state)
        };
        v2::save(&record, path)
    }

    /// [`Trainer::state_digest`] of the trainer it was taken from, at that moment.
    pub fn state_digest(&self) -> digest::Digest {
        let second_moments = self.config.optimizer.kind.has_second_moments();
        let layout = TrainState::layout(&self.model, second_moments);
        digest::state_digest(&self.config, &layout, &self.state)
    }
}

/// `into` made equal to `from`, in `into`'s memory where the sizes allow (`Vec::clone_from`
/// reuses a vector's memory; a [`Layer`]'s derived `clone_from` would allocate anew).
fn copy_layers(into: &mut Vec<Layer>, from: &[Layer]) {
    into.truncate(from.len());
    for (to, layer) in into.iter_mut().zip(from) {
        to.w.clone_from(&layer.w);
        to.b.clone_from(&layer.b);
    }
    let done = into.len();
    into.extend_from_slice(&from[done..]);
}

/// The bytes [`save`] writes.
pub fn encode(trainer: &Trainer, format: Format) -> Result<Vec<u8>> {
    let record = record_in(trainer, format)?;
    match format {
        Format::V1 => v1::encode(&record),
        Format::V2 => v2::encode(&record),
    }
}

/// The record of `trainer` that a `format` file holds: every path that writes a trainer
/// ([`save`], [`save_with_metadata`], [`encode`]) gets it here, so this is the one place that
/// decides which trainers a format can hold.
///
/// v2 holds every trainer. v1 has no configuration, no step counter and no position inside
/// an epoch: a v1 file loads as [`TrainerConfig::seed_model`] at the start of an epoch. It holds
/// a trainer only when that is the trainer: the seed model's configuration exactly (the seed
/// included, as the configuration reports it) and an epoch boundary. Anything else would load
/// as another trainer and a resumed run would silently diverge, so it is `Error::Config`
/// naming what v1 lacks. The step counter is the one thing v1 drops (it loads as 0): the seed
/// model's constant learning rate never reads it, so the run continues bit for bit.
pub fn record_in(trainer: &Trainer, format: Format) -> Result<Record<'_>> {
    if format == Format::V1 {
        let mut missing = trainer
            .config()
            .differences(&TrainerConfig::seed_model(), "the seed model");
        let batch = trainer.state().batch;
        if batch != 0 {
            missing.push(format!(
                "the position inside an epoch (batch {batch}; v1 files are at epoch boundaries)"
            ));
        }
        if !missing.is_empty() {
            return Err(Error::Config(format!(
                "a v1 checkpoint holds only the seed model (Trainer.seed_model(), at an epoch \
                 boundary) and cannot hold this trainer's {}; save as v2",
                missing.join(", ")
            )));
        }
    }
    Ok(record(trainer))
}

/// A trainer rebuilt from a checkpoint of either version, all checksums verified. A v2 file
/// gives its own configuration; a v1 file has none and is read as the seed model
/// ([`TrainerConfig::seed_model`]) with its step counter at 0 (v1 stores none).
///
/// The file is read, not mapped (a copy cannot be changed under the reader by another program
/// rewriting the file in place), and a v2 file's tensors are read straight into the memory of
/// the trainer's state ([`direct`]): one copy, one pass.
pub fn load(path: &Path) -> Result<Trainer> {
    from_contents(direct::read_path(path)?)
}

/// A trainer rebuilt from the bytes of a checkpoint of either version ([`encode`]'s, or a
/// file's already read), all checksums verified, as [`load`] rebuilds it from a file (the
/// tensors are copied once, into the state).
pub fn decode(bytes: &[u8]) -> Result<Trainer> {
    from_contents(direct::read_slice(bytes)?)
}

fn from_contents(contents: Contents) -> Result<Trainer> {
    let bytes = match contents {
        Contents::Loaded(loaded) => return trainer_from_loaded(loaded),
        Contents::Whole(bytes) => bytes,
    };
    match detect(&bytes)? {
        Format::V1 => {
            let mut trainer = Trainer::new(TrainerConfig::seed_model())?;
            // A v1 file is read as the seed model: nothing here for it to mismatch, so counts
            // that are not the seed's are the file's defect.
            let state = state_from_v1(&bytes, trainer.state()).map_err(|err| match err {
                Error::Mismatch(m) => Error::Header(m),
                other => other,
            })?;
            trainer.set_state(state)?;
            Ok(trainer)
        }
        // Verified while copied: the same checks as `Verify::Full`, in one pass.
        Format::V2 => trainer_from(
            &Checkpoint::from_bytes(bytes, Verify::HeaderOnly)?,
            Verify::Full,
        ),
    }
}

/// Replaces the trainer's state with a checkpoint's (either version, all checksums verified).
/// A v2 file must hold the trainer's configuration (`Error::Mismatch` otherwise); a v1 file
/// must have the trainer's tensor sizes. On any error the trainer is unchanged. The file is
/// read as [`load`] reads it.
pub fn restore(trainer: &mut Trainer, path: &Path) -> Result<()> {
    let state = match direct::read_path(path)? {
        Contents::Loaded(loaded) => {
            let (header, cells) = loaded.into_parts();
            let config = same_config(trainer, &header)?;
            state_from(&header, &config, || cells)?
        }
        Contents::Whole(bytes) => match detect(&bytes)? {
            Format::V1 => state_from_v1(&bytes, trainer.state())?,
            Format::V2 => {
                let checkpoint = Checkpoint::from_bytes(bytes, Verify::HeaderOnly)?;
                let config = same_config(trainer, &checkpoint)?;
                state_from(&checkpoint, &config, || checkpoint.cells_verified())?
            }
        },
    };
    trainer.set_state(state)
}

/// The configuration a v2 file records, which must be `trainer`'s (`Error::Mismatch`).
fn same_config(trainer: &Trainer, header: &Header) -> Result<TrainerConfig> {
    let config = file_config(header)?;
    if &config != trainer.config() {
        return Err(Error::Mismatch(format!(
            "the file was written by a trainer configured as {}, this trainer is configured as {}",
            clip(&config.to_json()),
            clip(&trainer.config().to_json())
        )));
    }
    Ok(config)
}

/// A trainer with a v2 checkpoint's configuration and a copy of its state. With `Verify::Full`
/// every tensor's CRC-32C is checked while copying; `Verify::HeaderOnly` is for a checkpoint
/// whose tensors were verified already. A configuration the trainer refuses is a defect of the
/// file: `Error::Header`.
pub fn trainer_from(checkpoint: &Checkpoint, verify: Verify) -> Result<Trainer> {
    let config = file_config(checkpoint)?;
    let state = state_from(checkpoint, &config, || match verify {
        Verify::Full => checkpoint.cells_verified(),
        Verify::HeaderOnly => Ok(checkpoint
            .tensors()
            .iter()
            .map(|t| checkpoint.cells(t))
            .collect()),
    })?;
    Trainer::from_state(config, state).map_err(from_file_config)
}

/// A trainer with a file's configuration whose tensors were read into their cells: no copy.
fn trainer_from_loaded(loaded: Loaded) -> Result<Trainer> {
    let (header, cells) = loaded.into_parts();
    let config = file_config(&header)?;
    let state = state_from(&header, &config, || cells)?;
    Trainer::from_state(config, state).map_err(from_file_config)
}

/// The configuration a v2 file records, validated.
pub fn file_config(header: &Header) -> Result<TrainerConfig> {
    TrainerConfig::from_json(header.config_json()).map_err(from_file_config)
}

/// An error of building something from a configuration read from a file. A configuration
/// nxrs cannot build (`Error::Config`) is then a defect of the file, not of the caller's
/// arguments: it becomes `Error::Header`, which says so. Every use of a file's configuration
/// goes through here.
fn from_file_config(err: Error) -> Error {
    match err {
        Error::Config(m) => Error::Header(format!("the file's configuration is invalid: {m}")),
        other => other,
    }
}

/// Checks everything of a v2 file that [`trainer_from`] checks except the tensors' CRC-32Cs,
/// without copying a tensor: its configuration, that its tensors are the configured model's
/// (names and shapes), and its scalars. Returns the configuration (`nxrs.open` checks files
/// this way).
pub fn check_model(checkpoint: &Checkpoint) -> Result<TrainerConfig> {
    let config = file_config(checkpoint)?;
    let mlp = config.validate().map_err(from_file_config)?;
    let second_moments = config.optimizer.kind.has_second_moments();
    tensor_order(checkpoint, &TrainState::layout(&mlp, second_moments))?;
    check_scalars(file_scalars(checkpoint)?)?;
    Ok(config)
}

/// The state a v2 file holds for `config`'s model: every tensor of the model's layout exactly
/// once with its shape (in any order in the file, nothing else), and the scalars. `cells`
/// gives every table entry's cells in table order (with their CRC-32Cs checked, or the
/// `Checksum` error); it is called once the tensors are known to be the model's.
fn state_from(
    header: &Header,
    config: &TrainerConfig,
    cells: impl FnOnce() -> Result<Vec<Vec<F32>>>,
) -> Result<TrainState> {
    let model = config.validate().map_err(from_file_config)?;
    let second_moments = config.optimizer.kind.has_second_moments();
    let order = tensor_order(header, &TrainState::layout(&model, second_moments))?;
    let mut cells: Vec<Option<Vec<F32>>> = cells()?.into_iter().map(Some).collect();

    // The model's tensors, moved (not copied) from the table's order into the slots of a state
    // that has none yet: each layer's slots are the model's (a `b` or none), zero pages that
    // are never touched before they are replaced.
    let buffers = vec![Vec::new(); model.buffer_specs().len()];
    let mut state = TrainState::fresh(model.zeros(), buffers, second_moments);
    for (slot, &i) in state.tensors_mut().into_iter().zip(&order) {
        *slot = cells[i].take().expect("each table entry is one tensor");
    }
    state.set_scalars(file_scalars(header)?)?;
    Ok(state)
}

/// For each tensor of `layout` (a model's), in its order, its index in the file's table, which
/// must hold exactly those tensors with their shapes.
fn tensor_order(header: &Header, layout: &[TensorSpec]) -> Result<Vec<usize>> {
    let position: HashMap<&str, usize> = layout
        .iter()
        .enumerate()
        .map(|(k, (name, _))| (name.as_str(), k))
        .collect();
    let table = header.tensors();
    // Table index of each tensor of the layout.
    let mut found = vec![None; layout.len()];
    for (i, t) in table.iter().enumerate() {
        let Some(&k) = position.get(t.name.as_str()) else {
            return Err(Error::Header(format!(
                "tensor table entry {i}: {} is not a tensor of the configured model",
                clip(&t.name)
            )));
        };
        let expected = &layout[k].1;
        if &t.shape != expected {
            return Err(Error::Header(format!(
                "tensor {}: shape {:?} does not match the configured model's {expected:?}",
                t.name, t.shape
            )));
        }
        found[k] = Some(i);
    }
    found
        .iter()
        .zip(layout)
        .map(|(i, (name, _))| {
            i.ok_or_else(|| {
                Error::Header(format!("tensor {name} is missing from the tensor table"))
            })
        })
        .collect()
}

/// The state's scalars from a v2 file: `epoch`, `b1t_bits` and `b2t_bits` are required;
/// `step` and `batch`, which files written before the general trainer lack, default to 0.
fn file_scalars(header: &Header) -> Result<[i64; 5]> {
    if let Some((name, _)) = header
        .scalars()
        .iter()
        .find(|(name, _)| !SCALAR_NAMES.contains(&name.as_str()))
    {
        return Err(Error::Header(format!("scalar {} is not known", clip(name))));
    }
    let mut values = [0i64; 5];
    for (value, name) in values.iter_mut().zip(SCALAR_NAMES) {
        *value = match (header.scalar(name), name) {
            (Some(v), _) => v,
            (None, "step" | "batch") => 0,
            (None, _) => {
                return Err(Error::Header(format!("scalars.{name} is missing")));
            }
        };
    }
    Ok(values)
}

/// The state of a v1 file shaped like `template` (v1 has no sizes: the model gives them), its
/// step counter at 0 and at an epoch boundary.
fn state_from_v1(bytes: &[u8], template: &TrainState) -> Result<TrainState> {
    let lens: Vec<usize> = template.tensors().iter().map(|t| t.len()).collect();
    let ([epoch, b1t, b2t], tensors) = v1::decode(bytes, &lens)?;
    let mut state = template.clone();
    for (slot, cells) in state.tensors_mut().into_iter().zip(tensors) {
        *slot = cells;
    }
    state.set_scalars([epoch, b1t, b2t, 0, 0])?;
    Ok(state)
}
