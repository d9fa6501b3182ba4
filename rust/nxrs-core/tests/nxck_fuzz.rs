//! Both readers on hostile bytes: arbitrary bytes, mutated valid files, and mutated headers
//! behind a valid checksum. Whatever the bytes, a reader returns (`Ok` or `Err`); a panic fails
//! the property. The cargo-fuzz targets in `fuzz/` run the same entry points unbounded.

mod nxck_support;

use nxck_support::*;
use nxrs_core::checkpoint;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify, PRELUDE_LEN};
use nxrs_core::nxck::{self, v1};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Everything a reader can be asked about `bytes`: the format layer, then the model's checks
/// (`template` is the tensors' cell counts v1 is read with).
fn read_everything(bytes: &[u8], template: &[usize]) {
    let _ = nxck::detect(bytes);
    let _ = v1::decode(bytes, template);
    for verify in [Verify::Full, Verify::HeaderOnly] {
        if let Ok(ck) = Checkpoint::from_bytes(FileBytes::from_vec(bytes.to_vec()), verify) {
            let _ = ck.verify_all();
            for t in ck.tensors() {
                assert_eq!(ck.data(t).len(), t.nbytes);
                assert_eq!(ck.cells(t).len(), t.cells());
            }
            let _ = ck.config_json();
            let _ = ck.cells_verified();
            let _ = checkpoint::file_config(&ck);
            for verify in [Verify::Full, Verify::HeaderOnly] {
                if let Ok(t) = checkpoint::trainer_from(&ck, verify) {
                    let _ = t.state_hash();
                }
            }
        }
    }
}

struct Files {
    template: Vec<usize>,
    v1: Vec<u8>,
    v2: Vec<u8>,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let t = trained(2);
        Files {
            template: t.state().tensors().iter().map(|c| c.len()).collect(),
            v1: v1_bytes(&t),
            v2: v2_bytes(&t),
        }
    })
}

proptest! {
    #![proptest_config(cases(5000))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        read_everything(&bytes, &files().template);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_beginning(
        v2 in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let f = files();
        let mut bytes = if v2 { f.v2[..12].to_vec() } else { f.v1[..12].to_vec() };
        bytes.extend_from_slice(&tail);
        read_everything(&bytes, &f.template);
    }

    #[test]
    fn mutated_v1_files(bytes in mutated(&files().v1)) {
        read_everything(&bytes, &files().template);
    }

    #[test]
    fn mutated_v2_files(bytes in mutated(&files().v2)) {
        read_everything(&bytes, &files().template);
    }

    #[test]
    fn mutated_v2_headers_with_valid_checksums(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..JSON_BYTES.len()), 1..=6),
    ) {
        let f = files();
        let mut bytes = f.v2.clone();
        let json = PRELUDE_LEN..PRELUDE_LEN + header_len(&bytes);
        for (at, k) in edits {
            bytes[json.start + at.index(json.len())] = JSON_BYTES[k];
        }
        fix_header_crc(&mut bytes);
        read_everything(&bytes, &f.template);
    }
}
