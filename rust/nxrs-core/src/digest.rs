//! SHA-256 digests (`docs/TRAINING.md` section 16) of a state with its configuration, of a
//! configuration and of data: what a run's transcript records and `nxrs verify` compares.
//!
//! Unlike the 64-bit full-state hash, which tells a person that two runs agree, digests are
//! compared by parties who need not trust each other (an auditor, a buyer of compute), so they
//! use a collision-resistant hash, a tag per kind of thing digested, and an encoding that
//! spells out every name, shape and length: two different states never encode alike.

use crate::cell_bytes::write_cells;
use crate::config::TrainerConfig;
use crate::dataset::Dataset;
use crate::model::TensorSpec;
use crate::state::TrainState;
use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// Tags that open each encoding: a digest of one kind never equals one of another kind.
const STATE_TAG: &[u8] = b"nxrs-state/1\0";
const CONFIG_TAG: &[u8] = b"nxrs-config/1\0";
const DATA_PART_TAG: &[u8] = b"nxrs-data-part/1\0";
const DATA_TAG: &[u8] = b"nxrs-data/1\0";

/// The roles of a run's data, in the order the data digest encodes them.
pub const DATA_ROLES: [&str; 3] = ["train", "validation", "test"];

fn write_u32(h: &mut Sha256, n: usize) {
    h.update((n as u32).to_le_bytes());
}

fn write_u64(h: &mut Sha256, n: usize) {
    h.update((n as u64).to_le_bytes());
}

/// The digest of a whole state and the configuration it belongs to: the configuration record
/// (`config.to_json()`, `docs/FORMAT.md`), then every tensor of `layout` with its name, shape
/// and cells, then the scalars. It depends on nothing else: not the file a state was read from,
/// nor the backend, threads or machine that computed it.
pub fn state_digest(config: &TrainerConfig, layout: &[TensorSpec], state: &TrainState) -> Digest {
    let mut h = Sha256::new();
    h.update(STATE_TAG);
    let record = config.to_json();
    write_u64(&mut h, record.len());
    h.update(record.as_bytes());
    let tensors = state.tensors();
    debug_assert_eq!(tensors.len(), layout.len());
    write_u32(&mut h, tensors.len());
    for ((name, shape), cells) in layout.iter().zip(tensors) {
        debug_assert_eq!(shape.iter().product::<usize>(), cells.len());
        write_u32(&mut h, name.len());
        h.update(name.as_bytes());
        write_u32(&mut h, shape.len());
        shape.iter().for_each(|&d| write_u64(&mut h, d));
        write_cells(cells, &mut |bytes| h.update(bytes));
    }
    let scalars = state.scalars();
    write_u32(&mut h, scalars.len());
    scalars.iter().for_each(|s| h.update(s.to_le_bytes()));
    h.finalize().into()
}

/// The digest of a configuration: its record (`config.to_json()`) after the tag. Two
/// configurations have the same digest exactly when they train the same way.
pub fn config_digest(config: &TrainerConfig) -> Digest {
    let mut h = Sha256::new();
    h.update(CONFIG_TAG);
    h.update(config.to_json().as_bytes());
    h.finalize().into()
}

/// The digest of one part of a run's data (its training split, say): [`Dataset::encode`]'s
/// bytes after the tag, i.e. the data as nxrs trains on it (binary32 features, shapes, labels
/// or targets, the order of the samples).
pub fn data_part_digest(data: &Dataset) -> Digest {
    let mut h = Sha256::new();
    h.update(DATA_PART_TAG);
    data.encode(&mut |bytes| h.update(bytes));
    h.finalize().into()
}

/// The digest of a run's data, from its parts' digests in [`DATA_ROLES`] order (training,
/// validation, test): for each a 0 byte when the run has no such part, or a 1 byte and the
/// part's digest. It covers the split as well as the data: the same rows split otherwise give
/// another digest.
pub fn data_digest(parts: &[Option<Digest>; 3]) -> Digest {
    let mut h = Sha256::new();
    h.update(DATA_TAG);
    for part in parts {
        match part {
            None => h.update([0]),
            Some(digest) => {
                h.update([1]);
                h.update(digest);
            }
        }
    }
    h.finalize().into()
}

/// A digest as 64 lowercase hex digits, as nxrs prints and records it.
pub fn hex(digest: &Digest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256(bytes: &[u8]) -> Digest {
        Sha256::digest(bytes).into()
    }

    #[test]
    fn a_config_digest_is_sha256_of_the_tag_and_the_record() {
        let config = TrainerConfig::seed_model();
        let mut bytes = b"nxrs-config/1\0".to_vec();
        bytes.extend(config.to_json().as_bytes());
        assert_eq!(config_digest(&config), sha256(&bytes));
    }

    #[test]
    fn a_data_digest_sees_which_parts_are_present() {
        let d = [7u8; 32];
        let mut bytes = b"nxrs-data/1\0".to_vec();
        bytes.extend([1]);
        bytes.extend(d);
        bytes.extend([0, 0]);
        assert_eq!(data_digest(&[Some(d), None, None]), sha256(&bytes));
        // The same part as validation data is another run's data.
        assert_ne!(
            data_digest(&[Some(d), None, None]),
            data_digest(&[None, Some(d), None])
        );
    }

    #[test]
    fn hex_is_lowercase_and_fixed_width() {
        let mut d = [0u8; 32];
        d[0] = 0x0a;
        d[31] = 0xff;
        let text = hex(&d);
        assert_eq!(text.len(), 64);
        assert!(text.starts_with("0a00"));
        assert!(text.ends_with("00ff"));
    }
}
