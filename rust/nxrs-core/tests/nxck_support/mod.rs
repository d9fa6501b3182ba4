//! Helpers shared by the `nxck_*` tests: a trained seed model, and v2 files rewritten with a
//! valid header checksum so that the checks behind the checksum can be reached.
#![allow(dead_code)] // each test crate uses a different subset

use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::v2::{self, ALIGN, PRELUDE_LEN};
use nxrs_core::{Trainer, TrainerConfig};
use serde_json::Value;

/// The seed model trained for `epochs` epochs on the seed's data.
pub fn trained(epochs: i64) -> Trainer {
    let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
    t.train_until(&Dataset::seed(8, 6, 4), epochs).unwrap();
    t
}

/// The v2 bytes of a trainer.
pub fn v2_bytes(t: &Trainer) -> Vec<u8> {
    v2::encode(&t.config(), t.state()).unwrap()
}

pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

pub fn header_len(bytes: &[u8]) -> usize {
    u32_at(bytes, 12) as usize
}

/// Where the first tensor starts in a file as nxrs writes it.
pub fn data_start(bytes: &[u8]) -> usize {
    (PRELUDE_LEN + header_len(bytes)).div_ceil(ALIGN) * ALIGN
}

pub fn header_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(&bytes[PRELUDE_LEN..PRELUDE_LEN + header_len(bytes)]).unwrap()
}

/// Recomputes the header CRC-32C (bytes 28..32) after an edit of the prelude or JSON.
pub fn fix_header_crc(bytes: &mut [u8]) {
    let end = PRELUDE_LEN + header_len(bytes);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..28]), &bytes[PRELUDE_LEN..end]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
}

/// The file with its JSON header edited by `edit`, and header_len, file_len and the header CRC
/// made consistent again; the tensor data keeps its place.
///
/// The new JSON is padded with spaces (valid JSON whitespace) up to the old data start, so an
/// edit that shortens the header does not open a gap. If it has grown past the data start, the
/// data moves by whole multiples of 64 and every offset moves with it, which keeps each offset's
/// relation to the others, to the header's end and to alignment as the edit left it.
pub fn rewrite(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value = header_value(bytes);
    edit(&mut value);
    let old_start = data_start(bytes);
    let mut shift = 0;
    let json = loop {
        let mut shifted = value.clone();
        if shift > 0 {
            move_offsets(&mut shifted, shift);
        }
        let json = serde_json::to_vec(&shifted).unwrap();
        let needed = (PRELUDE_LEN + json.len()).div_ceil(ALIGN) * ALIGN;
        if needed <= old_start + shift as usize {
            break json;
        }
        shift = (needed - old_start) as u64;
    };
    let start = old_start + shift as usize;
    let mut out = bytes[..PRELUDE_LEN].to_vec();
    out.extend_from_slice(&json);
    out.resize(start, b' ');
    out.extend_from_slice(&bytes[old_start..]);
    let header_len = (start - PRELUDE_LEN) as u32;
    out[12..16].copy_from_slice(&header_len.to_le_bytes());
    let file_len = out.len() as u64;
    out[16..24].copy_from_slice(&file_len.to_le_bytes());
    fix_header_crc(&mut out);
    out
}

fn move_offsets(header: &mut Value, by: u64) {
    if let Some(Value::Array(tensors)) = header.get_mut("tensors") {
        for t in tensors {
            if let Some(offset) = t.get("offset").and_then(Value::as_u64) {
                if offset < 1 << 62 {
                    t["offset"] = Value::from(offset + by);
                }
            }
        }
    }
}

/// The tensor table entry named `name`.
pub fn entry<'a>(header: &'a mut Value, name: &str) -> &'a mut Value {
    header["tensors"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

/// A proptest configuration of `cases` cases that keeps no regression files in the source tree
/// (integration tests have no `lib.rs` for proptest to put them beside).
pub fn cases(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..Default::default()
    }
}
