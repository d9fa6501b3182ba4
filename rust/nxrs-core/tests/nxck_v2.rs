//! NXCK v2: round trips, determinism, the corruption matrix, and the readers of both versions
//! telling each other's files apart.

mod nxck_support;

use nxck_support::*;
use nxrs_core::adam::AdamConfig;
use nxrs_core::error::Error;
use nxrs_core::mlp::{Mlp, MAX_LAYERS};
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{self, Checkpoint, Verify, PRELUDE_LEN};
use nxrs_core::nxck::{self, model_tensors, v1};
use nxrs_core::{TrainState, Trainer, TrainerConfig, F32};
use proptest::prelude::*;
use serde_json::{json, Value};

fn open(bytes: &[u8], verify: Verify) -> Result<Checkpoint, Error> {
    Checkpoint::from_bytes(FileBytes::from_vec(bytes.to_vec()), verify)
}

fn open_err(bytes: &[u8]) -> Error {
    open(bytes, Verify::Full).expect_err("the reader accepted a broken file")
}

/// A random configuration (small layers) with a state of random bit patterns (NaNs included).
fn config_and_state() -> impl Strategy<Value = (TrainerConfig, TrainState)> {
    let sizes = proptest::collection::vec(1usize..=7, 2..=4);
    let adam = any::<[u32; 4]>();
    (sizes, adam)
        .prop_flat_map(|(sizes, [lr, beta1, beta2, eps])| {
            let config = TrainerConfig {
                sizes: sizes.clone(),
                adam: AdamConfig {
                    lr: F32::from_bits(lr),
                    beta1: F32::from_bits(beta1),
                    beta2: F32::from_bits(beta2),
                    eps: F32::from_bits(eps),
                },
            };
            let lens: Vec<usize> = model_tensors(&Mlp::new(sizes).unwrap())
                .iter()
                .map(|(_, shape)| shape.iter().product())
                .collect();
            let tensors: Vec<_> = lens
                .iter()
                .map(|&n| proptest::collection::vec(any::<u32>(), n))
                .collect();
            (
                Just(config),
                tensors,
                0..=i64::MAX,
                any::<u32>(),
                any::<u32>(),
            )
        })
        .prop_map(|(config, tensors, epoch, b1t, b2t)| {
            let n_params = 2 * (config.sizes.len() - 1);
            let mut state = TrainState::fresh(vec![Vec::new(); n_params]);
            for (slot, bits) in state.tensors_mut().into_iter().zip(tensors) {
                *slot = bits.into_iter().map(F32::from_bits).collect();
            }
            state.epoch = epoch;
            state.b1t = F32::from_bits(b1t);
            state.b2t = F32::from_bits(b2t);
            (config, state)
        })
}

proptest! {
    #![proptest_config(cases(300))]

    #[test]
    fn round_trip_in_memory_is_exact_and_deterministic((config, state) in config_and_state()) {
        let bytes = v2::encode(&config, &state).unwrap();
        prop_assert_eq!(&bytes, &v2::encode(&config, &state.clone()).unwrap());
        // The layout does not depend on the data (the CRCs): the same state with other cells
        // has the same header_len, hence the same offsets and file length.
        let mut other = state.clone();
        for t in other.tensors_mut() {
            t.iter_mut().for_each(|c| *c = F32::from_bits(!c.to_bits()));
        }
        let other_bytes = v2::encode(&config, &other).unwrap();
        prop_assert_eq!(header_len(&other_bytes), header_len(&bytes));
        prop_assert_eq!(other_bytes.len(), bytes.len());
        let (json, padding) = split_header(&bytes);
        prop_assert!(padding.iter().all(|&b| b == b' '));
        prop_assert!(!json.contains(&b' '), "compact JSON");
        for verify in [Verify::Full, Verify::HeaderOnly] {
            let ck = open(&bytes, verify).unwrap();
            prop_assert_eq!(ck.config(), &config);
            prop_assert_eq!(ck.math(), "seed");
            prop_assert_eq!(&ck.to_state(), &state);
            for t in ck.tensors() {
                prop_assert_eq!(t.offset % 64, 0);
                prop_assert_eq!(t.nbytes, 4 * t.shape.iter().product::<usize>());
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn round_trip_through_files((config, state) in config_and_state()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.nxck");
        let expected = v2::encode(&config, &state).unwrap();
        for strategy in [nxck::writer::WriteStrategy::Buffered, nxck::writer::WriteStrategy::Mapped] {
            v2::save_state_with(&config, &state, &path, strategy).unwrap();
            prop_assert_eq!(&std::fs::read(&path).unwrap(), &expected);
            for verify in [Verify::Full, Verify::HeaderOnly] {
                let ck = Checkpoint::open(&path, verify).unwrap();
                prop_assert!(ck.is_mapped());
                prop_assert_eq!(&ck.to_state(), &state);
            }
        }
    }
}

#[test]
fn the_seed_model_file_layout() {
    let t = trained(3);
    let bytes = v2_bytes(&t);
    assert_eq!(&bytes[..4], b"NXCK");
    assert_eq!(u32_at(&bytes, 4), 0xFFFF_FFFF);
    assert_eq!(u32_at(&bytes, 8), 2);
    let file_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    assert_eq!(file_len, bytes.len() as u64);
    let header = header_value(&bytes);
    assert_eq!(header["config"]["sizes"], json!([6, 10, 4]));
    assert_eq!(header["config"]["math"], "seed");
    assert_eq!(header["config"]["adam"]["lr_bits"], 0x3C23_D70A);
    assert_eq!(header["scalars"]["epoch"], 3);
    let names: Vec<&str> = header["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.join(" "),
        "W1 b1 W2 b2 mW1 vW1 mb1 vb1 mW2 vW2 mb2 vb2"
    );
    let ck = open(&bytes, Verify::Full).unwrap();
    let w2 = ck.tensor("W2").unwrap();
    assert_eq!(w2.shape, vec![4, 10]);
    let cells = &t.state().params[2];
    let stored = ck.tensor_bytes("W2").unwrap();
    assert_eq!(&stored[4..8], &cells[1].to_bits().to_le_bytes());
    assert_eq!(ck.tensors()[0].offset, data_start(&bytes));
    assert_eq!(ck.scalars().b1t_bits, t.state().b1t.to_bits());
}

/// The header's JSON text and the bytes after it (up to `header_len`).
fn split_header(bytes: &[u8]) -> (&[u8], &[u8]) {
    let header = &bytes[PRELUDE_LEN..PRELUDE_LEN + header_len(bytes)];
    let mut values = serde_json::Deserializer::from_slice(header).into_iter::<Value>();
    values.next().unwrap().unwrap();
    header.split_at(values.byte_offset())
}

/// nxrs lays a file out with the widest CRC (10 digits) in every table entry and pads the real
/// header with spaces: one space per digit that a CRC has fewer than 10.
#[test]
fn the_header_is_compact_json_padded_with_spaces_to_a_data_independent_length() {
    let t = trained(2);
    let bytes = v2_bytes(&t);
    let (json, padding) = split_header(&bytes);
    let header = header_value(&bytes);
    let missing_digits: usize = header["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| 10 - e["crc32c"].as_u64().unwrap().to_string().len())
        .sum();
    assert!(missing_digits > 0, "this file should have padding");
    assert_eq!(padding, vec![b' '; missing_digits]);
    assert!(!json.contains(&b' '));
    assert_eq!(
        header_len(&bytes),
        json.len() + padding.len(),
        "header_len counts the padding"
    );
    // The same model and scalars with other data: same layout, other CRCs.
    let mut zeros = t.state().clone();
    zeros
        .tensors_mut()
        .into_iter()
        .for_each(|c| c.fill(F32::ZERO));
    let other = v2::encode(&t.config(), &zeros).unwrap();
    assert_eq!(header_len(&other), header_len(&bytes));
    assert_eq!(other.len(), bytes.len());
    assert_ne!(header_value(&other)["tensors"], header["tensors"]);
}

/// The bytes after the JSON value are part of the header: covered by header_crc, and, with a
/// valid checksum, accepted only if they are JSON whitespace (RFC 8259: a JSON text may end in
/// whitespace); anything else there is a `Header` error.
#[test]
fn the_headers_padding_is_checksummed_and_must_be_json_whitespace() {
    let bytes = v2_bytes(&trained(2));
    let end = PRELUDE_LEN + header_len(&bytes);
    let padding_at = end - split_header(&bytes).1.len();
    assert!(padding_at < end);
    let with_last = |byte: u8, fix_crc: bool| {
        let mut b = bytes.clone();
        b[end - 1] = byte;
        if fix_crc {
            fix_header_crc(&mut b);
        }
        b
    };
    // Any change is caught by the header's checksum first.
    for byte in [b'\n', b'x', 0] {
        assert!(matches!(
            open_err(&with_last(byte, false)),
            Error::Checksum { what, .. } if what == "header"
        ));
    }
    // Other JSON whitespace reads the same.
    for byte in [b'\n', b'\t', b'\r'] {
        let ck = open(&with_last(byte, true), Verify::Full).unwrap();
        assert_eq!(ck.to_state(), trained(2).state().clone());
    }
    // Anything else does not.
    for byte in [b'x', b'0', b'}', 0, 0xFF] {
        let err = open_err(&with_last(byte, true));
        assert!(
            matches!(&err, Error::Header(m) if m.contains("JSON header")),
            "{byte:#04x}: {err}"
        );
    }
    // A header with more padding (the data further back) reads the same too.
    let ck = open(&rewrite(&bytes, |_| {}), Verify::Full).unwrap();
    assert_eq!(ck.to_state(), trained(2).state().clone());
}

#[test]
fn every_truncation_and_extension_is_a_length_error() {
    let bytes = v2_bytes(&trained(2));
    for len in 0..bytes.len() {
        let err = open_err(&bytes[..len]);
        assert!(matches!(err, Error::Length { .. }), "len {len}: {err}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(open_err(&longer), Error::Length { .. }));
}

/// Every single-bit flip anywhere in the file is detected, with the error its region documents.
#[test]
fn every_bit_flip_is_detected() {
    let bytes = v2_bytes(&trained(2));
    let ck = open(&bytes, Verify::Full).unwrap();
    let header_end = PRELUDE_LEN + header_len(&bytes);
    let tensor_at = |pos: usize| ck.tensors().iter().find(|t| t.range().contains(&pos));
    let mut flipped = bytes.clone();
    for pos in 0..bytes.len() {
        for bit in 0..8 {
            flipped[pos] ^= 1 << bit;
            let err = open_err(&flipped);
            let ok = match (pos, &err) {
                (0..4, Error::BadMagic { .. }) => true,
                (4..8, Error::UnsupportedVersion(1)) => true,
                (8..12, Error::UnsupportedVersion(v)) => *v != 2,
                (12..16, Error::Length { .. } | Error::Checksum { .. } | Error::Header(_)) => true,
                (16..24, Error::Length { .. }) => true,
                (24..32, Error::Checksum { what, .. }) => what == "header",
                (p, Error::Checksum { what, .. }) if p < header_end => what == "header",
                (p, Error::Checksum { what, .. }) => {
                    tensor_at(p).is_some_and(|t| *what == format!("tensor {}", t.name))
                }
                (p, Error::Header(m)) => tensor_at(p).is_none() && m.contains("padding"),
                _ => false,
            };
            assert!(ok, "flip of bit {bit} at byte {pos}: {err}");
            // Data flips pass a header-only open and are found by verify_tensor.
            if let Some(t) = tensor_at(pos) {
                let ck = open(&flipped, Verify::HeaderOnly).unwrap();
                assert!(matches!(
                    ck.verify_tensor(&t.name),
                    Err(Error::Checksum { .. })
                ));
            }
            flipped[pos] ^= 1 << bit;
        }
    }
}

/// Header fields rewritten (with a valid checksum) to wrong, huge or inconsistent values.
#[test]
fn rewritten_header_fields_give_their_documented_errors() {
    let bytes = v2_bytes(&trained(2));
    let header = |edit: fn(&mut Value)| open_err(&rewrite(&bytes, edit));
    let expect_header = |edit: fn(&mut Value), needle: &str| match header(edit) {
        Error::Header(m) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected a header error with {needle:?}, got {other}"),
    };

    // The unchanged header, re-laid out, still reads.
    assert!(open(&rewrite(&bytes, |_| {}), Verify::Full).is_ok());
    // Unknown keys are ignored at every level.
    let ck = open(
        &rewrite(&bytes, |h| {
            h["future"] = json!({"a": [1, 2]});
            h["config"]["schedule"] = json!("cosine");
            entry(h, "W1")["name_hint"] = json!("fc1.weight");
        }),
        Verify::Full,
    )
    .unwrap();
    assert_eq!(ck.to_state(), trained(2).state().clone());

    // Tensor table.
    expect_header(
        |h| entry(h, "W1")["offset"] = json!(70),
        "not 64-byte aligned",
    );
    expect_header(
        |h| {
            let w1 = entry(h, "W1")["offset"].clone();
            entry(h, "b1")["offset"] = w1;
        },
        "overlaps tensor W1",
    );
    expect_header(
        |h| {
            let w1 = entry(h, "W1")["offset"].as_u64().unwrap();
            entry(h, "W1")["offset"] = json!(w1 - 64);
        },
        "overlaps the header",
    );
    expect_header(|h| entry(h, "vb2")["offset"] = json!(1u64 << 40), "gap");
    expect_header(|h| entry(h, "W1")["offset"] = json!(u64::MAX - 63), "gap");
    expect_header(|h| entry(h, "W1")["nbytes"] = json!(244), "nbytes 244");
    expect_header(|h| entry(h, "W1")["nbytes"] = json!(u64::MAX), "nbytes");
    expect_header(
        |h| entry(h, "W1")["shape"] = json!([10, 7]),
        "shape [10, 7]",
    );
    expect_header(|h| entry(h, "W1")["shape"] = json!([60]), "shape [60]");
    expect_header(
        |h| entry(h, "W1")["shape"] = json!([u64::MAX, u64::MAX]),
        "shape",
    );
    expect_header(|h| entry(h, "W1")["dtype"] = json!("f16"), "dtype \"f16\"");
    expect_header(
        |h| entry(h, "b1")["name"] = json!("W1"),
        "W1: appears more than once",
    );
    expect_header(
        |h| entry(h, "b1")["name"] = json!("W9"),
        "\"W9\" is not a tensor",
    );
    expect_header(
        |h| {
            h["tensors"].as_array_mut().unwrap().pop();
        },
        "tensor vb2 is missing",
    );
    expect_header(|h| h["tensors"] = json!([]), "tensor W1 is missing");
    expect_header(
        |h| {
            // The table's order is the file's order.
            let tensors = h["tensors"].as_array_mut().unwrap();
            tensors.swap(0, 1);
        },
        "leaves a gap of 256 bytes after the header",
    );
    expect_header(
        |h| h["tensors"] = json!(vec![json!({}); 100_000]),
        "JSON header",
    );
    // Configuration.
    expect_header(|h| h["config"]["sizes"] = json!([6]), "fewer than two");
    expect_header(|h| h["config"]["sizes"] = json!([6, 0, 4]), "sizes[1] = 0");
    expect_header(
        |h| h["config"]["sizes"] = json!([6, 1u64 << 40, 4]),
        "sizes[1] = 1099511627776",
    );
    expect_header(
        |h| h["config"]["sizes"] = json!([1 << 24, 1 << 24, 1 << 24]),
        "more than 268435456 parameters",
    );
    expect_header(|h| h["config"]["sizes"] = json!([6, 11, 4]), "shape");
    // Millions of layers named by a few megabytes: refused while the list is read.
    let started = std::time::Instant::now();
    expect_header(
        |h| h["config"]["sizes"] = json!(vec![1; 3_000_000]),
        "config.sizes has more than 4097 items",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // The most layers there may be: the table is still checked entry by entry.
    expect_header(
        |h| {
            h["config"]["sizes"] = json!(vec![1; MAX_LAYERS + 1]);
            h["tensors"] = json!([]);
        },
        "tensor W1 is missing",
    );
    expect_header(
        |h| h["config"]["sizes"] = json!(vec![1; MAX_LAYERS + 1]),
        "W1: shape [10, 6] does not match the configured model's [1, 1]",
    );
    expect_header(
        |h| entry(h, "W1")["shape"] = json!(vec![1; 1_000_000]),
        "a tensor's shape has more than 2 items",
    );
    expect_header(|h| h["config"]["sizes"] = json!([-6, 10, 4]), "JSON header");
    expect_header(
        |h| h["config"]["adam"]["lr_bits"] = json!(1u64 << 32),
        "JSON header",
    );
    expect_header(
        |h| {
            h["config"].as_object_mut().unwrap().remove("adam");
        },
        "missing field `adam`",
    );
    expect_header(|h| h["config"]["math"] = json!("fast"), "math \"fast\"");
    // Scalars.
    expect_header(|h| h["scalars"]["epoch"] = json!(-1), "epoch = -1");
    expect_header(
        |h| h["scalars"]["b1t_bits"] = json!(1u64 << 32),
        "JSON header",
    );
    expect_header(|h| *h = json!([1, 2, 3]), "JSON header");
}

#[test]
fn rewritten_prelude_fields_give_their_documented_errors() {
    let bytes = v2_bytes(&trained(2));
    let with = |at: usize, value: &[u8], fix_crc: bool| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        if fix_crc {
            fix_header_crc(&mut b);
        }
        open_err(&b)
    };
    assert!(matches!(
        with(8, &3u32.to_le_bytes(), true),
        Error::UnsupportedVersion(3)
    ));
    assert!(matches!(
        with(12, &u32::MAX.to_le_bytes(), false),
        Error::Header(m) if m.contains("header_len")
    ));
    assert!(matches!(
        with(12, &(bytes.len() as u32).to_le_bytes(), false),
        Error::Length { .. }
    ));
    assert!(matches!(
        with(16, &u64::MAX.to_le_bytes(), true),
        Error::Length {
            expected: u64::MAX,
            ..
        }
    ));
    assert!(matches!(
        with(24, &1u32.to_le_bytes(), true),
        Error::Header(m) if m.contains("flags")
    ));
    assert!(matches!(
        with(28, &0u32.to_le_bytes(), false),
        Error::Checksum { .. }
    ));
    // Garbage JSON behind a valid checksum.
    let end = PRELUDE_LEN + header_len(&bytes);
    let mut garbage = bytes.clone();
    garbage[PRELUDE_LEN..end].fill(b'{');
    fix_header_crc(&mut garbage);
    assert!(matches!(open_err(&garbage), Error::Header(m) if m.contains("JSON header")));
    // Trailing bytes after the last tensor, with file_len agreeing.
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 64]);
    let len = longer.len() as u64;
    longer[16..24].copy_from_slice(&len.to_le_bytes());
    fix_header_crc(&mut longer);
    assert!(matches!(open_err(&longer), Error::Header(m) if m.contains("64 bytes follow")));
}

#[test]
fn the_versions_reject_each_other_clearly() {
    let t = trained(2);
    let v1_bytes = v1::encode(t.state());
    let v2_bytes = v2_bytes(&t);
    assert!(matches!(
        v1::decode(&v2_bytes, t.state()),
        Err(Error::UnsupportedVersion(2))
    ));
    assert!(matches!(
        open(&v1_bytes, Verify::Full),
        Err(Error::UnsupportedVersion(1))
    ));
    assert_eq!(nxck::detect(&v1_bytes).unwrap(), nxck::Format::V1);
    assert_eq!(nxck::detect(&v2_bytes).unwrap(), nxck::Format::V2);
}

#[test]
fn load_trainer_and_restore_read_both_versions_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (dir.path().join("a.v1"), dir.path().join("a.v2"));
    let t = trained(2);
    v1::save(&t, &p1).unwrap();
    v2::save(&t, &p2).unwrap();

    let data = nxrs_core::dataset::Dataset::seed(8, 6, 4);
    let mut straight = t.clone();
    straight.train_until(&data, 4).unwrap();
    for path in [&p1, &p2] {
        let mut loaded = nxck::load_trainer(path).unwrap();
        assert_eq!(loaded.state(), t.state());
        loaded.train_until(&data, 4).unwrap();
        assert_eq!(loaded.state_hash(), straight.state_hash());

        let mut fresh = Trainer::new(&TrainerConfig::seed_model(), 7).unwrap();
        nxck::restore(&mut fresh, path).unwrap();
        assert_eq!(fresh.state(), t.state());
    }

    // A v2 file of another model is a mismatch, and the trainer is left as it was.
    let other = Trainer::new(
        &TrainerConfig {
            sizes: vec![6, 9, 4],
            adam: AdamConfig::seed(),
        },
        1,
    )
    .unwrap();
    let p3 = dir.path().join("other.v2");
    v2::save(&other, &p3).unwrap();
    let mut target = trained(1);
    let before = target.state().clone();
    assert!(matches!(
        nxck::restore(&mut target, &p3),
        Err(Error::Mismatch(m)) if m.contains("[6, 9, 4]")
    ));
    assert_eq!(target.state(), &before);
    // Another model's trainer is rebuilt from the file's own configuration.
    let loaded = nxck::load_trainer(&p3).unwrap();
    assert_eq!(loaded.config(), other.config());
}

/// `load_trainer` and `restore` check every tensor's CRC-32C (while copying it out) and report
/// the damaged tensor; `restore` then leaves the trainer unchanged.
#[test]
fn load_trainer_and_restore_reject_a_damaged_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.v2");
    let t = trained(2);
    let mut bytes = v2_bytes(&t);
    let vw2 = open(&bytes, Verify::HeaderOnly)
        .unwrap()
        .tensor("vW2")
        .unwrap()
        .clone();
    bytes[vw2.offset + 7] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let is_vw2 = |e: &Error| matches!(e, Error::Checksum { what, .. } if what == "tensor vW2");
    let err = nxck::load_trainer(&path).unwrap_err();
    assert!(is_vw2(&err), "{err}");
    let mut target = trained(1);
    let before = target.state().clone();
    let err = nxck::restore(&mut target, &path).unwrap_err();
    assert!(is_vw2(&err), "{err}");
    assert_eq!(target.state(), &before);
}

#[test]
fn verify_tensor_names_unknown_tensors() {
    let ck = open(&v2_bytes(&trained(1)), Verify::HeaderOnly).unwrap();
    assert!(ck.verify_all().is_ok());
    assert!(matches!(ck.verify_tensor("W7"), Err(Error::Input(_))));
    assert!(ck.tensor_bytes("W7").is_none());
}

#[test]
fn saving_a_state_that_does_not_fit_its_config_is_refused() {
    let t = trained(1);
    let other = TrainerConfig {
        sizes: vec![6, 9, 4],
        adam: AdamConfig::seed(),
    };
    assert!(matches!(
        v2::encode(&other, t.state()),
        Err(Error::Mismatch(_))
    ));
    let mut negative = t.state().clone();
    negative.epoch = -1;
    assert!(matches!(
        v2::encode(&t.config(), &negative),
        Err(Error::Input(_))
    ));
}

#[test]
fn the_checksum_is_crc32c_as_the_spec_defines_it() {
    // docs/FORMAT.md's check value: CRC-32C (Castagnoli), not zlib's CRC-32.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn checkpoints_can_be_shared_across_threads() {
    // The bindings keep a Checkpoint in an Arc behind a Python object, whose views any thread
    // may read.
    fn shareable<T: Send + Sync>() {}
    shareable::<Checkpoint>();
}
