//! NXCK v1, the seed's checkpoint layout, byte for byte.
//!
//! ```text
//! u32 magic 0x4b43584e ("NXCK")   u32 n_buf   u32 n_scalar
//! n_scalar x i64 scalars           (epoch, bits of b1t, bits of b2t)
//! every buffer's cells as u32 binary32 bit patterns, buffers in checkpoint order
//! ```
//! All little-endian. Unlike the seed's `ckpt_load`, [`decode`] checks the counts against the
//! model and the file's length against the counts before it reads any cell, and it rejects a
//! v2 file (whose bytes 4..8 are the versioned-format marker) as `UnsupportedVersion(2)`.
//! Unlike the seed's writer, [`save`] replaces the file crash-safely ([`super::writer`]).

use super::payload::{Payload, Piece};
use super::writer::{write_atomically, WriteStrategy};
use super::{cells, detect, Format, MAGIC};
use crate::error::{Error, Result};
use crate::trainer::{TrainState, Trainer};
use std::path::Path;

const HEADER_LEN: usize = 12;
const SCALARS: usize = 3;

/// The v1 bytes of a state.
pub fn encode(state: &TrainState) -> Vec<u8> {
    payload(state).to_vec()
}

/// The v1 file as pieces: the header and scalars, then the tensors borrowed from `state`.
fn payload(state: &TrainState) -> Payload<'_> {
    let tensors = state.tensors();
    let mut head = Vec::with_capacity(HEADER_LEN + 8 * SCALARS);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
    head.extend_from_slice(&(SCALARS as u32).to_le_bytes());
    for s in state.scalars() {
        head.extend_from_slice(&s.to_le_bytes());
    }
    let mut payload = Payload::new(head);
    for (_, cells) in tensors {
        payload.push(Piece::Cells(cells));
    }
    payload
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
    if detect(bytes)? == Format::V2 {
        return Err(Error::UnsupportedVersion(2));
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
        let len = 4 * tensor.len();
        *tensor = cells::decode_le(&bytes[offset..offset + len]);
        offset += len;
    }
    Ok(state)
}

/// Saves the trainer's state as a v1 file, crash-safely.
pub fn save(trainer: &Trainer, path: &Path) -> Result<()> {
    write_atomically(path, &payload(trainer.state()), WriteStrategy::default())
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
