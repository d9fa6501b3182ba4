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
use super::{cells, detect, Format, Record, MAGIC};
use crate::error::{Error, Result};
use crate::softf32::F32;
use std::path::Path;

const HEADER_LEN: usize = 12;

/// The seed's three scalars, in the order v1 stores them.
pub const SCALARS: [&str; 3] = ["epoch", "b1t_bits", "b2t_bits"];

/// The v1 bytes of a record: its tensors in order and its scalars named [`SCALARS`] (v1 has no
/// names, shapes or configuration; the record's others are not stored).
pub fn encode(record: &Record<'_>) -> Result<Vec<u8>> {
    Ok(payload(record)?.to_vec())
}

/// Saves a record as a v1 file, crash-safely.
pub fn save(record: &Record<'_>, path: &Path) -> Result<()> {
    write_atomically(path, &payload(record)?, WriteStrategy::default())
}

/// The v1 file as pieces: the header and scalars, then the tensors borrowed from the record.
fn payload<'a>(record: &Record<'a>) -> Result<Payload<'a>> {
    if !record.metadata.is_empty() {
        return Err(Error::Input(
            "a v1 file cannot hold metadata; save as v2".into(),
        ));
    }
    let mut head = Vec::with_capacity(HEADER_LEN + 8 * SCALARS.len());
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&(record.tensors.len() as u32).to_le_bytes());
    head.extend_from_slice(&(SCALARS.len() as u32).to_le_bytes());
    for name in SCALARS {
        let value = record
            .scalars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| Error::Input(format!("a v1 file needs the scalar {name}")))?;
        head.extend_from_slice(&value.to_le_bytes());
    }
    let mut payload = Payload::new(head);
    for t in &record.tensors {
        payload.push(Piece::Cells(t.cells));
    }
    Ok(payload)
}

/// The exact length of a v1 file holding tensors of these cell counts.
pub fn file_len(tensor_lens: &[usize]) -> u64 {
    let cells: usize = tensor_lens.iter().sum();
    (HEADER_LEN + 8 * SCALARS.len() + 4 * cells) as u64
}

/// Reads v1 bytes holding tensors of the cell counts `lens` (v1 has no sizes: the model gives
/// them): the [`SCALARS`] and the tensors' cells.
pub fn decode(bytes: &[u8], lens: &[usize]) -> Result<([i64; 3], Vec<Vec<F32>>)> {
    let expected_len = file_len(lens);
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
    let (n_buf, n_scalar) = (cells::u32_at(bytes, 4), cells::u32_at(bytes, 8));
    if n_buf as usize != lens.len() || n_scalar as usize != SCALARS.len() {
        return Err(Error::Mismatch(format!(
            "the v1 file holds {n_buf} buffers and {n_scalar} scalars, the model needs {} and {}",
            lens.len(),
            SCALARS.len()
        )));
    }
    if bytes.len() as u64 != expected_len {
        return Err(Error::Length {
            expected: expected_len,
            actual: bytes.len() as u64,
            what: format!("{} cells in {n_buf} buffers", lens.iter().sum::<usize>()),
        });
    }
    let mut offset = HEADER_LEN;
    let mut scalars = [0i64; 3];
    for s in &mut scalars {
        *s = cells::i64_at(bytes, offset);
        offset += 8;
    }
    let tensors = lens
        .iter()
        .map(|&len| {
            let tensor = cells::decode_le(&bytes[offset..offset + 4 * len]);
            offset += 4 * len;
            tensor
        })
        .collect();
    Ok((scalars, tensors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nxck::TensorRecord;

    /// Two tensors of 2 and 3 cells with distinct bit patterns, and the seed's scalars.
    fn cells() -> [Vec<F32>; 2] {
        [
            vec![F32::from_bits(1), F32::from_bits(2)],
            vec![F32::ONE, F32::NEG_ZERO, F32::DEFAULT_NAN],
        ]
    }

    fn record(cells: &[Vec<F32>; 2]) -> Record<'_> {
        Record {
            config: "{}".into(),
            scalars: vec![("epoch", 7), ("b1t_bits", 0x3F00_0000), ("b2t_bits", 4)],
            tensors: cells
                .iter()
                .enumerate()
                .map(|(k, c)| TensorRecord {
                    name: format!("t{k}"),
                    shape: vec![c.len()],
                    cells: c,
                })
                .collect(),
            metadata: Vec::new(),
        }
    }

    #[test]
    fn layout_is_the_seeds() {
        let bytes = encode(&record(&cells())).unwrap();
        // 12 header + 3*8 scalars + 4*5 cells; magic, counts, then the epoch.
        assert_eq!(bytes.len(), 12 + 24 + 20);
        assert_eq!(&bytes[..12], b"NXCK\x02\0\0\0\x03\0\0\0");
        assert_eq!(&bytes[12..20], &7i64.to_le_bytes());
    }

    #[test]
    fn round_trip_restores_everything() {
        let cells = cells();
        let bytes = encode(&record(&cells)).unwrap();
        let (scalars, tensors) = decode(&bytes, &[2, 3]).unwrap();
        assert_eq!(scalars, [7, 0x3F00_0000, 4]);
        assert_eq!(tensors, cells.to_vec());
    }

    #[test]
    fn every_truncation_is_rejected() {
        let bytes = encode(&record(&cells())).unwrap();
        for len in 0..bytes.len() {
            let err = decode(&bytes[..len], &[2, 3]).unwrap_err();
            assert!(matches!(err, Error::Length { .. }), "len {len}: {err}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode(&longer, &[2, 3]),
            Err(Error::Length { .. })
        ));
    }

    #[test]
    fn wrong_magic_and_counts_are_rejected() {
        let mut bytes = encode(&record(&cells())).unwrap();
        assert!(matches!(
            decode(&bytes, &[2, 3, 1]),
            Err(Error::Mismatch(_))
        ));
        bytes[0] = b'X';
        assert!(matches!(
            decode(&bytes, &[2, 3]),
            Err(Error::BadMagic { .. })
        ));
    }
}
