//! NXCK v1, the seed's checkpoint layout, byte for byte.
//!
//! ```text
//! u32 magic 0x4b43584e ("NXCK")   u32 n_buf   u32 n_scalar
//! n_scalar x i64 scalars           (epoch, bits of b1t, bits of b2t)
//! every buffer's cells as u32 binary32 bit patterns, buffers in checkpoint order
//! ```
//! All little-endian. Unlike the seed's `ckpt_load`, [`decode`] checks the counts against the
//! model and the file's length against the counts before it reads any cell.

use super::{read_file, write_file, MAGIC};
use crate::error::{Error, Result};
use crate::softf32::F32;
use crate::trainer::{TrainState, Trainer};
use std::path::Path;

const HEADER_LEN: usize = 12;
const SCALARS: usize = 3;

/// The v1 bytes of a state.
pub fn encode(state: &TrainState) -> Vec<u8> {
    let tensors = state.tensors();
    let cells: usize = tensors.iter().map(|(_, t)| t.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + 8 * SCALARS + 4 * cells);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
    out.extend_from_slice(&(SCALARS as u32).to_le_bytes());
    for s in state.scalars() {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for (_, t) in &tensors {
        for cell in t.iter() {
            out.extend_from_slice(&cell.to_bits().to_le_bytes());
        }
    }
    out
}

/// The exact length of a v1 file holding tensors of these cell counts.
pub fn file_len(tensor_lens: &[usize]) -> u64 {
    let cells: usize = tensor_lens.iter().sum();
    (HEADER_LEN + 8 * SCALARS + 4 * cells) as u64
}

/// Reads v1 bytes into a state shaped like `template` (v1 has no sizes: the model gives them).
/// Nothing in `template` changes unless the whole file is valid.
pub fn decode(bytes: &[u8], template: &TrainState) -> Result<TrainState> {
    let lens = template.tensor_lens();
    let expected_len = file_len(&lens);
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    if bytes.len() < HEADER_LEN {
        return Err(Error::Length {
            expected: expected_len,
            actual: bytes.len() as u64,
            what: "the file ends inside the 12-byte v1 header".into(),
        });
    }
    if bytes[..4] != MAGIC {
        return Err(Error::BadMagic {
            found: bytes[..4].to_vec(),
        });
    }
    let (n_buf, n_scalar) = (u32_at(4), u32_at(8));
    if n_buf as usize != lens.len() || n_scalar as usize != SCALARS {
        return Err(Error::Mismatch(format!(
            "the v1 file holds {n_buf} buffers and {n_scalar} scalars, the model needs {} and {SCALARS}",
            lens.len()
        )));
    }
    if bytes.len() as u64 != expected_len {
        return Err(Error::Length {
            expected: expected_len,
            actual: bytes.len() as u64,
            what: format!("{} cells in {n_buf} buffers", lens.iter().sum::<usize>()),
        });
    }

    let mut state = template.clone();
    let mut offset = HEADER_LEN;
    let mut scalars = [0i64; SCALARS];
    for s in &mut scalars {
        *s = i64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"));
        offset += 8;
    }
    state.set_scalars(scalars)?;
    for tensor in state.tensors_mut() {
        for cell in tensor.iter_mut() {
            *cell = F32::from_bits(u32_at(offset));
            offset += 4;
        }
    }
    Ok(state)
}

/// Saves the trainer's state as a v1 file.
pub fn save(trainer: &Trainer, path: &Path) -> Result<()> {
    write_file(path, &encode(trainer.state()))
}

/// Loads a v1 file into the trainer (which gives the layout); the trainer is unchanged on error.
pub fn load(trainer: &mut Trainer, path: &Path) -> Result<()> {
    let state = decode(&read_file(path)?, trainer.state())?;
    trainer.set_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::TrainerConfig;

    fn trained() -> Trainer {
        let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
        t.train_until(&crate::dataset::Dataset::seed(8, 6, 4), 2)
            .unwrap();
        t
    }

    #[test]
    fn seed_model_file_has_the_seed_length() {
        // 12 header + 3*8 scalars + 4*(60+10+40+4)*3 cells.
        assert_eq!(encode(trained().state()).len(), 12 + 24 + 4 * 342);
    }

    #[test]
    fn round_trip_restores_everything() {
        let t = trained();
        let fresh = Trainer::new(&TrainerConfig::seed_model(), 99).unwrap();
        let back = decode(&encode(t.state()), fresh.state()).unwrap();
        assert_eq!(&back, t.state());
    }

    #[test]
    fn every_truncation_is_rejected() {
        let t = trained();
        let bytes = encode(t.state());
        for len in 0..bytes.len() {
            let err = decode(&bytes[..len], t.state()).unwrap_err();
            assert!(matches!(err, Error::Length { .. }), "len {len}: {err}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode(&longer, t.state()),
            Err(Error::Length { .. })
        ));
    }

    #[test]
    fn wrong_magic_and_counts_are_rejected() {
        let t = trained();
        let mut bytes = encode(t.state());
        bytes[4] = 11;
        assert!(matches!(decode(&bytes, t.state()), Err(Error::Mismatch(_))));
        bytes[0] = b'X';
        assert!(matches!(
            decode(&bytes, t.state()),
            Err(Error::BadMagic { .. })
        ));
    }
}
