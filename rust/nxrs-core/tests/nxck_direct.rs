//! Loading reads a v2 file straight into the state's memory (`nxck::v2::direct`). Whatever the
//! bytes, it must say exactly what the reader of bytes in memory says (`Checkpoint::from_bytes`
//! then `checkpoint::trainer_from`, the checks in `docs/FORMAT.md`'s order): the same trainer,
//! or the same error. From a file (`load`, `restore`) as from bytes (`decode`).

mod nxck_support;

use nxck_support::*;
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::v2::{Verify, PRELUDE_LEN};
use nxrs_core::nxck::{self, Format};
use nxrs_core::{Error, Trainer, TrainerConfig};
use proptest::prelude::*;
use std::sync::OnceLock;

/// What the reader of bytes in memory makes of a v2 file, as `checkpoint::load` did before it
/// read files straight into the state: the format's checks, then the model's, the tensors'
/// CRC-32Cs once the tensors are known to be the model's.
fn reference(bytes: &[u8]) -> Result<Trainer, Error> {
    checkpoint::trainer_from(&open(bytes, Verify::HeaderOnly)?, Verify::Full)
}

/// The same outcome: equal configurations and states, or errors that read the same.
fn assert_same(got: Result<Trainer, Error>, want: Result<Trainer, Error>, how: &str) {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            assert_eq!(g.config(), w.config(), "{how}");
            assert_eq!(g.state(), w.state(), "{how}");
        }
        (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string(), "{how}"),
        (g, w) => panic!(
            "{how}: {:?} where the reference gives {:?}",
            g.err(),
            w.err()
        ),
    }
}

/// `decode` of the bytes, and `load` and `restore` of them as a file, agree with [`reference`].
fn agrees(bytes: &[u8], file: bool) {
    // A v1 file (a mutation of the marker can make one) is read whole, as before, by one path.
    if nxck::detect(bytes).is_ok_and(|f| f == Format::V1) {
        return;
    }
    let want = || reference(bytes);
    assert_same(checkpoint::decode(bytes), want(), "decode");
    if !file {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.nxck");
    std::fs::write(&path, bytes).unwrap();
    assert_same(checkpoint::load(&path), want(), "load");
    // restore: a trainer of the file's configuration (if it has one) takes the file's state,
    // or refuses with the reference's error and keeps its own.
    let Ok(w) = want() else {
        let mut t = trained(1);
        let before = t.state().clone();
        if checkpoint::restore(&mut t, &path).is_err() {
            assert_eq!(t.state(), &before);
        }
        return;
    };
    let mut t = Trainer::new(w.config().clone()).unwrap();
    checkpoint::restore(&mut t, &path).unwrap();
    assert_eq!(t.state(), w.state());
}

fn v2() -> &'static [u8] {
    static V2: OnceLock<Vec<u8>> = OnceLock::new();
    V2.get_or_init(|| v2_bytes(&trained(2)))
}

proptest! {
    #![proptest_config(cases(3000))]

    #[test]
    fn mutated_files_agree(bytes in mutated(v2()), file in proptest::bool::weighted(0.1)) {
        agrees(&bytes, file);
    }

    #[test]
    fn mutated_headers_with_valid_checksums_agree(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..JSON_BYTES.len()), 1..=6),
        file in proptest::bool::weighted(0.1),
    ) {
        let mut bytes = v2().to_vec();
        let json = PRELUDE_LEN..PRELUDE_LEN + header_len(&bytes);
        for (at, k) in edits {
            bytes[json.start + at.index(json.len())] = JSON_BYTES[k];
        }
        fix_header_crc(&mut bytes);
        agrees(&bytes, file);
    }

    #[test]
    fn general_trainers_round_trip((config, state) in config_and_state()) {
        let t = Trainer::from_state(config, state).unwrap();
        agrees(&v2_bytes(&t), true);
    }
}

/// Where tensor `name`'s data starts and ends in `bytes`.
fn data_of(bytes: &[u8], name: &str) -> (usize, usize) {
    let mut header = header_value(bytes);
    let e = entry(&mut header, name);
    let offset = e["offset"].as_u64().unwrap() as usize;
    (offset, offset + e["nbytes"].as_u64().unwrap() as usize)
}

#[test]
fn a_bad_gap_is_reported_before_later_defects() {
    let good = v2();
    // b1 (10 cells, 40 bytes) is followed by 24 bytes of padding before W2.
    let (_, b1_end) = data_of(good, "b1");
    let (w1, _) = data_of(good, "W1");
    // A nonzero gap byte, and a CRC failure in an earlier tensor: the gap (step 7) first.
    let mut bytes = good.to_vec();
    bytes[b1_end] = 1;
    bytes[w1] ^= 0x80;
    let err = checkpoint::decode(&bytes).unwrap_err();
    assert!(err.to_string().contains("padding byte at offset"), "{err}");
    agrees(&bytes, true);
    // A nonzero gap and a table defect of a later entry: still the gap (the entries' order).
    let mut bytes = rewrite(good, |h| entry(h, "vb2")["dtype"] = "f16".into());
    let (_, b1_end) = data_of(&bytes, "b1");
    bytes[b1_end] = 1;
    let err = checkpoint::decode(&bytes).unwrap_err();
    assert!(err.to_string().contains("padding byte at offset"), "{err}");
    agrees(&bytes, true);
}

#[test]
fn large_tensors_are_read_in_pieces_and_checked() {
    // W1 is 300 x 1000 cells (1.2 MB): several read-and-checksum pieces, past the buffer.
    let config = TrainerConfig::seed_style(vec![1000, 300, 7], 3);
    let mut t = Trainer::new(config).unwrap();
    let x: Vec<_> = (0..2000)
        .map(|i| nxrs_core::F32::from_i64(i % 7 - 3))
        .collect();
    let data = Dataset::new(1000, 7, x, &[1, 4]).unwrap();
    t.train_until(&data, 1).unwrap();
    let bytes = v2_bytes(&t);
    agrees(&bytes, true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.nxck");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(checkpoint::load(&path).unwrap().state(), t.state());
    // One flipped bit deep inside W1 (in its third piece) and one in vW2: W1 is named.
    let (w1, w1_end) = data_of(&bytes, "W1");
    assert!(w1_end - w1 > 4 * (256 << 10));
    let mut bad = bytes.clone();
    bad[w1 + 600_000] ^= 4;
    let (vw2, _) = data_of(&bytes, "vW2");
    bad[vw2] ^= 1;
    let err = checkpoint::decode(&bad).unwrap_err();
    assert!(
        matches!(&err, Error::Checksum { what, .. } if what == "tensor W1"),
        "{err}"
    );
    agrees(&bad, true);
    // v1 and the seed model still load from a file (v1 holds no step counter: it reads as 0).
    let seed = trained(2);
    std::fs::write(&path, checkpoint::encode(&seed, Format::V1).unwrap()).unwrap();
    let mut want = seed.state().clone();
    want.step = 0;
    assert_eq!(checkpoint::load(&path).unwrap().state(), &want);
}
