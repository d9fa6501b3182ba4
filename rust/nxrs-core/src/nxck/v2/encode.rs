//! Writing v2 files: the layout of a state, and its bytes as a [`Payload`]: the tensors, and a
//! head (prelude and header) built once their checksums are known.

use super::{
    align_up, header_crc, prelude, AdamJson, ConfigJson, HeaderJson, Scalars, TensorJson,
    DTYPE_F32, MATH_SEED, MAX_HEADER_LEN, PRELUDE_LEN, VERSION, VERSIONED_MARKER,
};
use crate::error::{Error, Result};
use crate::mlp::Mlp;
use crate::nxck::payload::{Payload, Piece};
use crate::nxck::writer::{write_atomically, WriteStrategy};
use crate::nxck::{model_tensors, MAGIC};
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

/// The v2 bytes of a state, in memory. The same state and config always give the same bytes,
/// the same as [`save_state`] writes.
pub fn encode(config: &TrainerConfig, state: &TrainState) -> Result<Vec<u8>> {
    Ok(payload(config, state)?.to_vec())
}

/// The file as a head and pieces: the tensors borrowed from `state`, the prelude and header
/// built once their CRC-32Cs are known (the writer computes them while it writes the tensors).
///
/// The layout does not depend on the checksums: it is made with the widest CRC value
/// ([`CRC_PLACEHOLDER`], 10 digits) in every entry, which fixes `header_len` and the offsets;
/// the real header, never longer, is then padded to `header_len` with spaces.
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

    let table: Vec<TensorJson> = specs
        .into_iter()
        .zip(&tensors)
        .map(|((name, shape), (_, cells))| TensorJson {
            name,
            dtype: DTYPE_F32.to_string(),
            shape: shape.iter().map(|&n| n as u64).collect(),
            offset: 0,
            nbytes: 4 * cells.len() as u64,
            crc32c: CRC_PLACEHOLDER,
        })
        .collect();
    let mut header = header_template(config, state, table);
    let header_len = lay_out(&mut header)?;
    let file_len = header.tensors.last().map_or(0, |t| t.offset + t.nbytes);
    let regions: Vec<(u64, u64)> = header
        .tensors
        .iter()
        .map(|t| (t.offset, t.nbytes))
        .collect();

    let head_len = PRELUDE_LEN + header_len;
    let mut payload = Payload::with_checksummed_head(head_len, move |crcs: &[u32]| {
        head(&header, header_len, file_len, crcs)
    });
    let mut end = head_len as u64;
    for (&(offset, nbytes), (_, cells)) in regions.iter().zip(&tensors) {
        payload.push(Piece::Zeros((offset - end) as usize));
        payload.push(Piece::Cells(cells));
        end = offset + nbytes;
    }
    debug_assert_eq!(payload.len(), file_len);
    Ok(payload)
}

/// The widest value a `crc32c` can have in the JSON (10 digits): the layout is made with it.
const CRC_PLACEHOLDER: u32 = u32::MAX;

/// The prelude and the header with the tensors' real CRC-32Cs (in table order), the JSON padded
/// with spaces to `header_len`.
fn head(template: &HeaderJson, header_len: usize, file_len: u64, crcs: &[u32]) -> Vec<u8> {
    assert_eq!(crcs.len(), template.tensors.len(), "one CRC per tensor");
    let mut header = template.clone();
    for (t, &crc) in header.tensors.iter_mut().zip(crcs) {
        t.crc32c = crc;
    }
    let mut bytes = Vec::with_capacity(PRELUDE_LEN + header_len);
    bytes.resize(PRELUDE_LEN, 0);
    serde_json::to_writer(&mut bytes, &header).expect("the header serialises");
    // Each CRC has at most the placeholder's digits, nothing else changed.
    assert!(
        bytes.len() <= PRELUDE_LEN + header_len,
        "the header outgrew its layout"
    );
    bytes.resize(PRELUDE_LEN + header_len, b' ');

    let mut put = |at: usize, field: &[u8]| bytes[at..at + field.len()].copy_from_slice(field);
    put(0, &MAGIC);
    put(prelude::MARKER, &VERSIONED_MARKER.to_le_bytes());
    put(prelude::VERSION, &VERSION.to_le_bytes());
    put(prelude::HEADER_LEN, &(header_len as u32).to_le_bytes());
    put(prelude::FILE_LEN, &file_len.to_le_bytes());
    put(prelude::FLAGS, &0u32.to_le_bytes());
    let crc = header_crc(&bytes, &bytes[PRELUDE_LEN..]);
    bytes[prelude::HEADER_CRC..PRELUDE_LEN].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The header of `state`, with the tensor table `tensors` (offsets still to be laid out).
fn header_template(
    config: &TrainerConfig,
    state: &TrainState,
    tensors: Vec<TensorJson>,
) -> HeaderJson {
    HeaderJson {
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
        tensors,
    }
}

/// Lays the tensors out behind the header: sets every offset and returns `header_len`, the
/// length of the header's JSON as it is now (with placeholder CRCs).
///
/// The offsets depend on the header's length, which depends on the offsets' digits: start with
/// the data right after the prelude and move it back until the header fits. Each round only
/// moves the data later, which only lengthens the header, so the rounds stop (after two or three
/// in practice) at the first layout where the header fits.
fn lay_out(header: &mut HeaderJson) -> Result<usize> {
    let mut data_start = align_up(PRELUDE_LEN as u64);
    let header_len = loop {
        let mut at = data_start;
        for t in &mut header.tensors {
            t.offset = at;
            at = align_up(at + t.nbytes);
        }
        let len = serde_json::to_vec(&header)
            .expect("the header serialises")
            .len();
        let needed = align_up((PRELUDE_LEN + len) as u64);
        if needed == data_start {
            break len;
        }
        data_start = needed;
    };
    if header_len > MAX_HEADER_LEN {
        return Err(Error::Config(format!(
            "the model's checkpoint header would be {header_len} bytes, over the format's limit \
             of {MAX_HEADER_LEN} (too many layers)"
        )));
    }
    Ok(header_len)
}
