//! Writing v2 files: the layout of a state, and its bytes as [`Payload`] pieces.

use super::{
    align_up, header_crc, prelude, AdamJson, ConfigJson, HeaderJson, Scalars, TensorJson,
    DTYPE_F32, MATH_SEED, MAX_HEADER_LEN, PRELUDE_LEN, VERSION, VERSIONED_MARKER,
};
use crate::error::{Error, Result};
use crate::mlp::Mlp;
use crate::nxck::payload::{Payload, Piece};
use crate::nxck::writer::{write_atomically, WriteStrategy};
use crate::nxck::{cells, model_tensors, MAGIC};
use crate::trainer::{TrainState, Trainer, TrainerConfig};
use std::path::Path;

/// Saves the trainer as a v2 file, crash-safely (see [`crate::nxck::writer`]).
pub fn save(trainer: &Trainer, path: &Path) -> Result<()> {
    save_state(&trainer.config(), trainer.state(), path)
}

/// Saves `state` of a trainer built from `config` as a v2 file, crash-safely.
pub fn save_state(config: &TrainerConfig, state: &TrainState, path: &Path) -> Result<()> {
    save_state_with(config, state, path, WriteStrategy::default())
}

/// [`save_state`] with a chosen write strategy (for benchmarks; the files are identical).
pub fn save_state_with(
    config: &TrainerConfig,
    state: &TrainState,
    path: &Path,
    strategy: WriteStrategy,
) -> Result<()> {
    write_atomically(path, &payload(config, state)?, strategy)
}

/// The v2 bytes of a state, in memory. The same state and config always give the same bytes.
pub fn encode(config: &TrainerConfig, state: &TrainState) -> Result<Vec<u8>> {
    Ok(payload(config, state)?.to_vec())
}

/// The file as pieces: the prelude and header built here, the tensors borrowed from `state`.
pub(crate) fn payload<'a>(config: &TrainerConfig, state: &'a TrainState) -> Result<Payload<'a>> {
    let mlp = Mlp::new(config.sizes.clone())?;
    let specs = model_tensors(&mlp);
    let tensors = state.tensors();
    let lens: Vec<usize> = tensors.iter().map(|(_, t)| t.len()).collect();
    let expected: Vec<usize> = specs
        .iter()
        .map(|(_, shape)| shape.iter().product())
        .collect();
    if lens != expected {
        return Err(Error::Mismatch(format!(
            "the state's tensor sizes {lens:?} do not fit the configured model's {expected:?}"
        )));
    }
    if state.epoch < 0 {
        return Err(Error::Input(format!(
            "epoch {} is negative; a checkpoint stores completed epochs",
            state.epoch
        )));
    }

    // One read-only pass for the checksums, which the header (written first) carries.
    let mut table: Vec<TensorJson> = specs
        .into_iter()
        .zip(&tensors)
        .map(|((name, shape), (_, cells))| TensorJson {
            name,
            dtype: DTYPE_F32.to_string(),
            shape: shape.iter().map(|&n| n as u64).collect(),
            offset: 0,
            nbytes: 4 * cells.len() as u64,
            crc32c: cells::crc32c(cells),
        })
        .collect();
    let json = header_json(config, state, &mut table)?;
    let file_len = table.last().map_or(0, |t| t.offset + t.nbytes);

    let mut prelude = vec![0u8; PRELUDE_LEN];
    let mut put = |at: usize, bytes: &[u8]| prelude[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &MAGIC);
    put(prelude::MARKER, &VERSIONED_MARKER.to_le_bytes());
    put(prelude::VERSION, &VERSION.to_le_bytes());
    put(prelude::HEADER_LEN, &(json.len() as u32).to_le_bytes());
    put(prelude::FILE_LEN, &file_len.to_le_bytes());
    put(prelude::FLAGS, &0u32.to_le_bytes());
    let crc = header_crc(&prelude, &json);
    prelude[prelude::HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());

    let mut payload = Payload::default();
    let mut end = (PRELUDE_LEN + json.len()) as u64;
    prelude.extend_from_slice(&json);
    payload.push(Piece::Bytes(prelude));
    for (entry, (_, cells)) in table.iter().zip(&tensors) {
        payload.push(Piece::Zeros((entry.offset - end) as usize));
        payload.push(Piece::Cells(cells));
        end = entry.offset + entry.nbytes;
    }
    debug_assert_eq!(payload.len(), file_len);
    Ok(payload)
}

/// The JSON header, with the tensor offsets in `table` laid out behind it.
///
/// The offsets depend on the header's length, which depends on the offsets' digits: start with
/// the data right after the prelude and move it back until the header fits. Each round only
/// moves the data later, which only lengthens the header, so the rounds stop (after two or three
/// in practice) at the first layout where the header fits.
fn header_json(
    config: &TrainerConfig,
    state: &TrainState,
    table: &mut Vec<TensorJson>,
) -> Result<Vec<u8>> {
    let mut header = HeaderJson {
        config: ConfigJson {
            sizes: config.sizes.iter().map(|&n| n as u64).collect(),
            math: MATH_SEED.to_string(),
            adam: AdamJson {
                lr_bits: config.adam.lr.to_bits(),
                beta1_bits: config.adam.beta1.to_bits(),
                beta2_bits: config.adam.beta2.to_bits(),
                eps_bits: config.adam.eps.to_bits(),
            },
        },
        scalars: Scalars {
            epoch: state.epoch,
            b1t_bits: state.b1t.to_bits(),
            b2t_bits: state.b2t.to_bits(),
        },
        tensors: std::mem::take(table),
    };
    let mut data_start = align_up(PRELUDE_LEN as u64);
    let json = loop {
        let mut at = data_start;
        for t in &mut header.tensors {
            t.offset = at;
            at = align_up(at + t.nbytes);
        }
        let json = serde_json::to_vec(&header).expect("the header serialises");
        let needed = align_up((PRELUDE_LEN + json.len()) as u64);
        if needed == data_start {
            break json;
        }
        data_start = needed;
    };
    if json.len() > MAX_HEADER_LEN {
        return Err(Error::Config(format!(
            "the model's checkpoint header would be {} bytes, over the format's limit of \
             {MAX_HEADER_LEN} (too many layers)",
            json.len()
        )));
    }
    *table = header.tensors;
    Ok(json)
}
