//! NXCK v2: round trips of random general configurations and states, determinism, the
//! corruption matrix, the model's checks of a file (configuration, tensors, scalars), and the
//! readers of both versions telling each other's files apart.

mod nxck_support;

use nxck_support::*;
use nxrs_core::checkpoint;
use nxrs_core::error::Error;
use nxrs_core::limits::MAX_LAYERS;
use nxrs_core::model::Architecture;
use nxrs_core::nxck::v2::{self, Checkpoint, Verify, PRELUDE_LEN};
use nxrs_core::nxck::{self, v1, Format};
use nxrs_core::state::SCALAR_NAMES;
use nxrs_core::{TrainState, Trainer, TrainerConfig, F32};
use proptest::prelude::*;
use serde_json::{json, Value};

fn open_err(bytes: &[u8]) -> Error {
    open(bytes, Verify::Full).expect_err("the reader accepted a broken file")
}

/// What a checkpoint of this trainer must read back as, checked on an open file.
fn check_file(ck: &Checkpoint, t: &Trainer) -> Result<(), TestCaseError> {
    let config = t.config();
    prop_assert_eq!(ck.config_json(), config.to_json());
    prop_assert_eq!(&checkpoint::file_config(ck).unwrap(), config);
    let scalars: Vec<(String, i64)> = SCALAR_NAMES
        .iter()
        .map(|n| n.to_string())
        .zip(t.state().scalars())
        .collect();
    prop_assert_eq!(ck.scalars(), &scalars[..]);
    let layout = TrainState::layout(t.model(), config.optimizer.kind.has_second_moments());
    prop_assert_eq!(ck.tensors().len(), layout.len());
    for ((info, (name, shape)), cells) in ck.tensors().iter().zip(&layout).zip(t.state().tensors())
    {
        prop_assert_eq!(&info.name, name);
        prop_assert_eq!(&info.shape, shape);
        prop_assert_eq!(info.offset % 64, 0);
        prop_assert_eq!(info.nbytes, 4 * shape.iter().product::<usize>());
        prop_assert_eq!(&ck.cells(info)[..], cells);
        prop_assert_eq!(ck.tensor(name), Some(info));
    }
    for verify in [Verify::Full, Verify::HeaderOnly] {
        let back = checkpoint::trainer_from(ck, verify).unwrap();
        prop_assert_eq!(back.config(), config);
        prop_assert_eq!(back.state(), t.state());
        prop_assert_eq!(back.state_hash(), t.state_hash());
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(300))]

    /// Random general configurations (loss, math, init, seed, optimizer and every
    /// hyperparameter, schedule, clipping, batching, shuffling) with states of random bits.
    #[test]
    fn round_trip_in_memory_is_exact_and_deterministic((config, state) in config_and_state()) {
        let t = Trainer::from_state(config.clone(), state.clone()).unwrap();
        let bytes = checkpoint::encode(&t, Format::V2).unwrap();
        prop_assert_eq!(&bytes, &checkpoint::encode(&t.clone(), Format::V2).unwrap());
        prop_assert_eq!(&bytes, &v2::encode(&checkpoint::record(&t)).unwrap());
        // The layout does not depend on the data (the CRCs): the same state with other cells
        // has the same header_len, hence the same offsets and file length.
        let mut other = state.clone();
        for c in other.tensors_mut() {
            c.iter_mut().for_each(|c| *c = F32::from_bits(!c.to_bits()));
        }
        let other = Trainer::from_state(config, other).unwrap();
        let other_bytes = v2_bytes(&other);
        prop_assert_eq!(header_len(&other_bytes), header_len(&bytes));
        prop_assert_eq!(other_bytes.len(), bytes.len());
        let (json, padding) = split_header(&bytes);
        prop_assert!(padding.iter().all(|&b| b == b' '));
        prop_assert!(!json.contains(&b' '), "compact JSON");
        for verify in [Verify::Full, Verify::HeaderOnly] {
            check_file(&open(&bytes, verify).unwrap(), &t)?;
        }
    }
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn round_trip_through_files((config, state) in config_and_state()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.nxck");
        let t = Trainer::from_state(config, state).unwrap();
        let expected = v2_bytes(&t);
        let record = checkpoint::record(&t);
        for strategy in [nxck::writer::WriteStrategy::Buffered, nxck::writer::WriteStrategy::Mapped] {
            v2::save_with(&record, &path, strategy).unwrap();
            prop_assert_eq!(&std::fs::read(&path).unwrap(), &expected);
            for verify in [Verify::Full, Verify::HeaderOnly] {
                let ck = Checkpoint::open(&path, verify).unwrap();
                prop_assert!(ck.is_mapped());
                check_file(&ck, &t)?;
            }
        }
        checkpoint::save(&t, &path, Format::V2).unwrap();
        prop_assert_eq!(&std::fs::read(&path).unwrap(), &expected);
        let loaded = checkpoint::load(&path).unwrap();
        prop_assert_eq!(loaded.config(), t.config());
        prop_assert_eq!(loaded.state(), t.state());
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
    let general = &header["config"]["general"];
    assert_eq!(general["optimizer"]["name"], "adam");
    assert_eq!(general["optimizer"]["lr_bits"], 0x3C23_D70A);
    assert_eq!(general["batch_size"], 1);
    assert!(header["config"].get("adam").is_none());
    let b1t = t.state().b1t.to_bits();
    let b2t = t.state().b2t.to_bits();
    // Named scalars, in the state's order: 3 epochs of 8 one-sample steps.
    let text = std::str::from_utf8(split_header(&bytes).0).unwrap();
    let scalars =
        format!(r#""scalars":{{"epoch":3,"b1t_bits":{b1t},"b2t_bits":{b2t},"step":24,"batch":0}}"#);
    assert!(text.contains(&scalars), "{text}");
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
    let cells = &t.state().params[1].w;
    let stored = ck.tensor_bytes("W2").unwrap();
    assert_eq!(&stored[4..8], &cells[1].to_bits().to_le_bytes());
    assert_eq!(ck.tensors()[0].offset, data_start(&bytes));
    assert_eq!(ck.scalar("b1t_bits"), Some(i64::from(b1t)));
    assert_eq!(ck.scalar("step"), Some(24));
    assert_eq!(ck.scalar("lr"), None);
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
    let other = v2_bytes(&Trainer::from_state(t.config().clone(), zeros).unwrap());
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
        assert_eq!(&state_of(&with_last(byte, true)), trained(2).state());
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
    assert_eq!(&state_of(&rewrite(&bytes, |_| {})), trained(2).state());
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

/// Header fields rewritten (with a valid checksum) to wrong, huge or inconsistent values. The
/// format's checks (`docs/FORMAT.md`, reading steps 1-7) fail when the file is opened; the
/// model's (steps 9-11: configuration, tensors, scalars) on a valid v2 file, when a trainer is
/// built from it. Both are `Header` errors.
#[test]
fn rewritten_header_fields_give_their_documented_errors() {
    let bytes = v2_bytes(&trained(2));
    let expect_format = |edit: fn(&mut Value), needle: &str| match open_err(&rewrite(&bytes, edit))
    {
        Error::Header(m) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected a header error with {needle:?}, got {other}"),
    };
    let expect_model = |edit: fn(&mut Value), needle: &str| {
        model_error(&rewrite(&bytes, edit), needle);
    };

    // The unchanged header, re-laid out, still reads.
    assert_eq!(&state_of(&rewrite(&bytes, |_| {})), trained(2).state());
    // Unknown keys are ignored at the top level and in tensor entries.
    let edited = rewrite(&bytes, |h| {
        h["future"] = json!({"a": [1, 2]});
        entry(h, "W1")["name_hint"] = json!("fc1.weight");
    });
    assert_eq!(&state_of(&edited), trained(2).state());
    // Inside the configuration an unknown key changes what a run means: refused.
    expect_model(
        |h| h["config"]["schedule"] = json!("cosine"),
        "unknown field `schedule`",
    );
    expect_model(
        |h| h["config"]["general"]["optimizer"]["nesterov"] = json!(true),
        "unknown field `nesterov`",
    );

    // Tensor table: the format's checks.
    expect_format(
        |h| entry(h, "W1")["offset"] = json!(70),
        "not 64-byte aligned",
    );
    expect_format(
        |h| {
            let w1 = entry(h, "W1")["offset"].clone();
            entry(h, "b1")["offset"] = w1;
        },
        "overlaps tensor \"W1\"",
    );
    expect_format(
        |h| {
            let w1 = entry(h, "W1")["offset"].as_u64().unwrap();
            entry(h, "W1")["offset"] = json!(w1 - 64);
        },
        "overlaps the header",
    );
    expect_format(|h| entry(h, "vb2")["offset"] = json!(1u64 << 40), "gap");
    expect_format(|h| entry(h, "W1")["offset"] = json!(u64::MAX - 63), "gap");
    expect_format(|h| entry(h, "W1")["nbytes"] = json!(244), "nbytes 244");
    expect_format(|h| entry(h, "W1")["nbytes"] = json!(u64::MAX), "nbytes");
    expect_format(
        |h| entry(h, "W1")["shape"] = json!([u64::MAX, u64::MAX]),
        "shape",
    );
    expect_format(|h| entry(h, "W1")["dtype"] = json!("f16"), "dtype \"f16\"");
    expect_format(
        |h| entry(h, "b1")["name"] = json!("W1"),
        "\"W1\": appears more than once",
    );
    expect_format(
        |h| {
            // The table's order is the file's order.
            let tensors = h["tensors"].as_array_mut().unwrap();
            tensors.swap(0, 1);
        },
        "leaves a gap of 256 bytes after the header",
    );
    expect_format(
        |h| h["tensors"] = json!(vec![json!({}); 100_000]),
        "JSON header",
    );
    expect_format(
        |h| entry(h, "W1")["shape"] = json!(vec![1; 1_000_000]),
        "a tensor's shape has more than 4 items",
    );
    // Tensor table: the model's checks (the cells still fill nbytes).
    expect_model(
        |h| entry(h, "W1")["shape"] = json!([6, 10]),
        "W1: shape [6, 10] does not match the configured model's [10, 6]",
    );
    expect_model(
        |h| entry(h, "W1")["shape"] = json!([60]),
        "W1: shape [60] does not match",
    );
    expect_model(
        |h| entry(h, "b1")["name"] = json!("W9"),
        "\"W9\" is not a tensor of the configured model",
    );
    // A tensor missing (a valid file without it, written by the format layer).
    let t = trained(2);
    let mut record = checkpoint::record(&t);
    record.tensors.retain(|t| t.name != "vb2");
    model_error(
        &v2::encode(&record).unwrap(),
        "tensor vb2 is missing from the tensor table",
    );
    // Any order of the tensors in the file is the model's.
    let mut record = checkpoint::record(&t);
    record.tensors.reverse();
    assert_eq!(&state_of(&v2::encode(&record).unwrap()), t.state());
    expect_format(|h| h["tensors"] = json!([]), "bytes follow the end");
    let mut record = checkpoint::record(&t);
    record.tensors.clear();
    model_error(&v2::encode(&record).unwrap(), "tensor W1 is missing");

    // Configuration.
    expect_model(
        |h| h["config"]["sizes"] = json!([6]),
        "at least an input and an output size",
    );
    expect_model(
        |h| h["config"]["sizes"] = json!([6, 0, 4]),
        "layer size 0 is outside 1..=16777216",
    );
    expect_model(
        |h| h["config"]["sizes"] = json!([6, 1u64 << 40, 4]),
        "layer size 1099511627776 is outside",
    );
    expect_model(
        |h| h["config"]["sizes"] = json!([1 << 24, 1 << 24, 1 << 24]),
        "more than 268435456 parameters",
    );
    expect_model(|h| h["config"]["sizes"] = json!([6, 11, 4]), "shape");
    // Millions of layers named by a few megabytes: refused while the list is read.
    let started = std::time::Instant::now();
    expect_model(
        |h| h["config"]["sizes"] = json!(vec![1; 3_000_000]),
        "config.sizes has more than 4097 items",
    );
    // Not a speed claim: a guard against building the whole 3,000,000-item list first.
    // Generous, so that a machine loaded by other work does not fail it (5 s did).
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // The most layers there may be: the table is still checked entry by entry.
    let mut record = checkpoint::record(&t);
    record.tensors.clear();
    record.config = TrainerConfig::seed_style(vec![1; MAX_LAYERS + 1], 1).to_json();
    model_error(&v2::encode(&record).unwrap(), "tensor W1 is missing");
    expect_model(
        |h| h["config"]["sizes"] = json!(vec![1; MAX_LAYERS + 1]),
        "W1: shape [10, 6] does not match the configured model's [1, 1]",
    );
    expect_model(|h| h["config"]["sizes"] = json!([-6, 10, 4]), "config");
    expect_model(
        |h| h["config"]["general"]["optimizer"]["lr_bits"] = json!(1u64 << 32),
        "integer `4294967296`, expected u32",
    );
    expect_model(
        |h| h["config"]["general"]["optimizer"]["lr_bits"] = json!(0),
        "lr = 0.0 is outside the accepted range",
    );
    expect_model(
        |h| h["config"]["general"]["batch_size"] = json!(0),
        "batch_size must be at least 1",
    );
    expect_model(
        |h| h["config"]["general"]["optimizer"]["name"] = json!("adagrad"),
        "config.optimizer \"adagrad\" is not known",
    );
    expect_model(
        |h| {
            h["config"].as_object_mut().unwrap().remove("general");
        },
        "either `adam`",
    );
    expect_model(|h| h["config"]["math"] = json!("fast"), "math \"fast\"");
    expect_model(|h| h["config"] = json!([1, 2]), "config");
    // Scalars.
    expect_model(|h| h["scalars"]["epoch"] = json!(-1), "epoch = -1");
    expect_model(|h| h["scalars"]["step"] = json!(-1), "step = -1");
    expect_model(|h| h["scalars"]["batch"] = json!(-2), "batch = -2");
    expect_model(
        |h| h["scalars"]["b1t_bits"] = json!(1u64 << 32),
        "b1t_bits = 4294967296 is not a binary32 bit pattern",
    );
    expect_model(
        |h| h["scalars"]["lr_bits"] = json!(1),
        "scalar \"lr_bits\" is not known",
    );
    expect_model(
        |h| {
            h["scalars"].as_object_mut().unwrap().remove("b2t_bits");
        },
        "scalars.b2t_bits is missing",
    );
    expect_format(|h| h["scalars"]["epoch"] = json!(1u64 << 63), "JSON header");
    expect_format(|h| h["scalars"] = json!([1]), "JSON header");
    expect_format(|h| *h = json!([1, 2, 3]), "JSON header");
}

/// `edited` is a valid v2 file that the model's checks refuse with a `Header` error containing
/// `needle`, from `trainer_from`, `load` and `restore` alike (`restore` leaving the trainer as it
/// was).
fn model_error(edited: &[u8], needle: &str) {
    let ck = open(edited, Verify::Full).expect("a valid v2 file");
    match checkpoint::trainer_from(&ck, Verify::Full).map(|_| ()) {
        Err(Error::Header(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected a header error with {needle:?}, got {other:?}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edited.nxck");
    std::fs::write(&path, edited).unwrap();
    assert!(matches!(checkpoint::load(&path), Err(Error::Header(m)) if m.contains(needle)));
    let mut target = trained(1);
    let before = target.state().clone();
    assert!(checkpoint::restore(&mut target, &path).is_err());
    assert_eq!(target.state(), &before);
}

/// Files written before the general trainer (a configuration with `adam`, three scalars) still
/// load, as the seed's configuration at step 0 and batch 0.
#[test]
fn files_written_before_the_general_trainer_still_load() {
    let t = trained(2);
    let bytes = v2_bytes(&t);
    let old = rewrite(&bytes, |h| {
        h["config"] = json!({
            "sizes": [6, 10, 4],
            "math": "seed",
            "adam": {"lr_bits": 1008981770, "beta1_bits": 1063675494,
                     "beta2_bits": 1065336439, "eps_bits": 841731191},
        });
        let scalars = h["scalars"].as_object_mut().unwrap();
        scalars.remove("step");
        scalars.remove("batch");
    });
    let loaded = trainer_of(&old).unwrap();
    assert_eq!(loaded.config(), &TrainerConfig::seed_model());
    let mut expected = t.state().clone();
    expected.step = 0;
    assert_eq!(loaded.state(), &expected);
    // Continuing it trains exactly as the seed model continues (the step counter aside).
    let data = nxrs_core::dataset::Dataset::seed(8, 6, 4);
    let (mut a, mut b) = (loaded, t.clone());
    a.train_until(&data, 4).unwrap();
    b.train_until(&data, 4).unwrap();
    assert_eq!(a.seed_hash(), b.seed_hash());
    assert_eq!(a.state().step + 16, b.state().step);
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
    let v1_bytes = v1_bytes(&t);
    let v2_bytes = v2_bytes(&t);
    let lens: Vec<usize> = t.state().tensors().iter().map(|c| c.len()).collect();
    assert!(matches!(
        v1::decode(&v2_bytes, &lens),
        Err(Error::UnsupportedVersion(2))
    ));
    assert!(matches!(
        open(&v1_bytes, Verify::Full),
        Err(Error::UnsupportedVersion(1))
    ));
    assert_eq!(nxck::detect(&v1_bytes).unwrap(), Format::V1);
    assert_eq!(nxck::detect(&v2_bytes).unwrap(), Format::V2);
}

#[test]
fn load_and_restore_read_both_versions_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (dir.path().join("a.v1"), dir.path().join("a.v2"));
    let t = trained(2);
    checkpoint::save(&t, &p1, Format::V1).unwrap();
    checkpoint::save(&t, &p2, Format::V2).unwrap();
    assert_eq!(nxck::format_of(&p1).unwrap(), Format::V1);
    assert_eq!(nxck::format_of(&p2).unwrap(), Format::V2);

    let data = nxrs_core::dataset::Dataset::seed(8, 6, 4);
    let mut straight = t.clone();
    straight.train_until(&data, 4).unwrap();
    // v1 holds every tensor, the epoch and Adam's powers, but no step counter (read as 0).
    let mut v1_state = t.state().clone();
    v1_state.step = 0;
    for (path, expected) in [(&p1, &v1_state), (&p2, t.state())] {
        let mut loaded = checkpoint::load(path).unwrap();
        assert_eq!(loaded.config(), &TrainerConfig::seed_model());
        assert_eq!(loaded.state(), expected);
        loaded.train_until(&data, 4).unwrap();
        let mut resumed = loaded.state().clone();
        resumed.step += t.state().step - expected.step;
        assert_eq!(&resumed, straight.state());

        // Into a trainer elsewhere in its run: a v2 file needs the same configuration, a v1
        // file (no configuration) only the same tensor sizes (the seed's mk_state(99) trick).
        let mut fresh = trained(1);
        checkpoint::restore(&mut fresh, path).unwrap();
        assert_eq!(fresh.state(), expected);
    }
    let mut reseeded = Trainer::new(TrainerConfig::seed_style(vec![6, 10, 4], 99)).unwrap();
    checkpoint::restore(&mut reseeded, &p1).unwrap();
    assert_eq!(reseeded.state(), &v1_state);
    let mut from_v2 = checkpoint::load(&p2).unwrap();
    from_v2.train_until(&data, 4).unwrap();
    assert_eq!(from_v2.state_hash(), straight.state_hash());

    // A v2 file of another model is a mismatch, and the trainer is left as it was.
    let other = Trainer::new(TrainerConfig::seed_style(vec![6, 9, 4], 1)).unwrap();
    let p3 = dir.path().join("other.v2");
    checkpoint::save(&other, &p3, Format::V2).unwrap();
    let mut target = trained(1);
    let before = target.state().clone();
    assert!(matches!(
        checkpoint::restore(&mut target, &p3),
        Err(Error::Mismatch(m)) if m.contains("[6,9,4]")
    ));
    assert_eq!(target.state(), &before);
    // So is one of the same model trained otherwise (here: another seed).
    let reseeded = Trainer::new(TrainerConfig::seed_style(vec![6, 10, 4], 2)).unwrap();
    let p4 = dir.path().join("reseeded.v2");
    checkpoint::save(&reseeded, &p4, Format::V2).unwrap();
    assert!(matches!(
        checkpoint::restore(&mut target, &p4),
        Err(Error::Mismatch(_))
    ));
    assert_eq!(target.state(), &before);
    // Another model's trainer is rebuilt from the file's own configuration.
    let loaded = checkpoint::load(&p3).unwrap();
    assert_eq!(loaded.config(), other.config());
    // A v1 file of another model (which nxrs refuses to write: made from its record by the
    // format layer) does not fit the seed model.
    let p5 = dir.path().join("other.v1");
    std::fs::write(&p5, v1::encode(&checkpoint::record(&other)).unwrap()).unwrap();
    // (same buffer count, other lengths).
    assert!(matches!(checkpoint::load(&p5), Err(Error::Length { .. })));
}

/// A v1 file loads as the seed model at an epoch boundary: every trainer that is not exactly
/// that (any other setting, seed included, or a position inside an epoch) is refused with
/// `Error::Config` naming what v1 lacks, by every path that writes v1, and nothing is written.
/// Only the step counter is dropped (it loads as 0; the seed model's constant rate never reads
/// it).
#[test]
fn v1_refuses_every_trainer_but_the_seed_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.v1");
    let data = nxrs_core::dataset::Dataset::seed(8, 6, 4);
    let seed = TrainerConfig::seed_model;
    let with = |change: fn(&mut TrainerConfig)| {
        let mut config = seed();
        change(&mut config);
        Trainer::new(config).unwrap()
    };
    let mut mid_epoch = Trainer::new(seed()).unwrap();
    let _ = mid_epoch
        .run(&data, nxrs_core::trainer::Until::Step(3), |_, _| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(mid_epoch.state().batch, 3);
    let refused = [
        (
            with(|c| c.optimizer.kind = nxrs_core::optim::Kind::Sgd),
            "optimizer sgd",
        ),
        // AdamW has Adam's tensors, but would load as Adam: a different run.
        (
            with(|c| c.optimizer.kind = nxrs_core::optim::Kind::AdamW),
            "optimizer adamw",
        ),
        (with(|c| c.schedule.warmup_steps = 3), "warmup_steps 3"),
        (
            with(|c| c.architecture = Architecture::Sizes(vec![6, 12, 4])),
            "layers [6, 12, 4] (the seed model: [6, 10, 4])",
        ),
        (
            with(|c| c.architecture = Architecture::Sizes(vec![6, 10, 10, 4])),
            "layers",
        ),
        (with(|c| c.seed = 7), "seed 7 (the seed model: 1)"),
        (with(|c| c.batch_size = 4), "batch_size 4"),
        (with(|c| c.shuffle = true), "shuffle true"),
        (
            with(|c| c.optimizer.lr = F32::ONE),
            "lr 1 (the seed model: 0.01)",
        ),
        (with(|c| c.math = nxrs_core::math::Math::Ieee), "math ieee"),
        (with(|c| c.clip_norm = Some(F32::ONE)), "clip_norm"),
        (mid_epoch, "inside an epoch (batch 3"),
    ];
    // A file already there stays as it was.
    let good = trained(1);
    checkpoint::save(&good, &path, Format::V1).unwrap();
    let before = std::fs::read(&path).unwrap();
    for (t, needle) in refused {
        for result in [
            checkpoint::encode(&t, Format::V1).map(|_| ()),
            checkpoint::save(&t, &path, Format::V1),
            checkpoint::save_with_metadata(&t, &path, Format::V1, Vec::new()),
        ] {
            assert!(
                matches!(&result, Err(Error::Config(m)) if m.contains(needle) && m.contains("v2")),
                "{needle}: {result:?}"
            );
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "{needle}");
        // v2 holds all of it.
        let back = trainer_of(&v2_bytes(&t)).unwrap();
        assert_eq!(back.state_hash(), t.state_hash());
    }
    // The seed model at an epoch boundary, trained or not, is written (and its bytes are the
    // golden fixture's: tests/golden.rs).
    for t in [Trainer::new(seed()).unwrap(), trained(2)] {
        let loaded = checkpoint::decode(&v1_bytes(&t)).unwrap();
        assert_eq!(loaded.config(), t.config());
        assert_eq!(loaded.seed_hash(), t.seed_hash());
    }
}

/// `load` and `restore` check every tensor's CRC-32C (while copying it out) and report the
/// damaged tensor; `restore` then leaves the trainer unchanged.
#[test]
fn load_and_restore_reject_a_damaged_tensor() {
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
    let err = checkpoint::load(&path).unwrap_err();
    assert!(is_vw2(&err), "{err}");
    let mut target = trained(1);
    let before = target.state().clone();
    let err = checkpoint::restore(&mut target, &path).unwrap_err();
    assert!(is_vw2(&err), "{err}");
    assert_eq!(target.state(), &before);
    // trainer_from with Verify::Full finds it too; HeaderOnly trusts the caller.
    let ck = open(&bytes, Verify::HeaderOnly).unwrap();
    let err = checkpoint::trainer_from(&ck, Verify::Full)
        .map(|_| ())
        .unwrap_err();
    assert!(is_vw2(&err), "{err}");
    assert!(checkpoint::trainer_from(&ck, Verify::HeaderOnly).is_ok());
}

#[test]
fn verify_tensor_names_unknown_tensors() {
    let ck = open(&v2_bytes(&trained(1)), Verify::HeaderOnly).unwrap();
    assert!(ck.verify_all().is_ok());
    assert!(matches!(ck.verify_tensor("W7"), Err(Error::Input(_))));
    assert!(ck.tensor_bytes("W7").is_none());
}

/// The format layer checks a record's own consistency: cells that do not fill the shape, a
/// configuration that is not JSON.
#[test]
fn records_that_do_not_fit_themselves_are_refused() {
    let t = trained(1);
    let mut record = checkpoint::record(&t);
    record.tensors[0].shape = vec![9, 6];
    assert!(matches!(v2::encode(&record), Err(Error::Mismatch(_))));
    let mut record = checkpoint::record(&t);
    record.config = "{not json".into();
    assert!(matches!(v2::encode(&record), Err(Error::Config(_))));
    // A state that does not fit its configuration never becomes a trainer.
    let other = TrainerConfig::seed_style(vec![6, 9, 4], 1);
    assert!(matches!(
        Trainer::from_state(other, t.state().clone()),
        Err(Error::Mismatch(_))
    ));
}

/// The format layer carries any names, shapes, scalars and configuration object: it knows no
/// model.
#[test]
fn the_format_layer_knows_no_model() {
    let cells: Vec<F32> = (0..6).map(F32::from_i32).collect();
    let record = nxck::Record {
        config: r#"{"anything":[1,{"goes":null}]}"#.into(),
        scalars: vec![("answer", 42), ("minus", -7)],
        tensors: vec![
            nxck::TensorRecord {
                name: "fc.weight".into(),
                shape: vec![2, 3],
                cells: &cells,
            },
            nxck::TensorRecord {
                name: "empty".into(),
                shape: vec![0],
                cells: &[],
            },
            nxck::TensorRecord {
                name: "tail".into(),
                shape: vec![1],
                cells: &cells[5..],
            },
        ],
        metadata: vec![
            ("data".into(), "digits".into()),
            ("note".into(), "é\n".into()),
        ],
    };
    let bytes = v2::encode(&record).unwrap();
    let ck = open(&bytes, Verify::Full).unwrap();
    assert_eq!(ck.config_json(), r#"{"anything":[1,{"goes":null}]}"#);
    assert_eq!(ck.scalar("answer"), Some(42));
    assert_eq!(ck.scalar("minus"), Some(-7));
    assert_eq!(ck.scalars().len(), 2);
    assert_eq!(
        ck.metadata(),
        &[
            ("data".into(), "digits".into()),
            ("note".into(), "é\n".into())
        ]
    );
    let w = ck.tensor("fc.weight").unwrap();
    assert_eq!(w.shape, vec![2, 3]);
    assert_eq!(ck.cells(w), cells);
    assert_eq!(
        ck.cells_verified().unwrap(),
        vec![cells.clone(), vec![], vec![cells[5]]]
    );
    // Not a trainer's file: the model's checks refuse it.
    assert!(matches!(
        checkpoint::trainer_from(&ck, Verify::Full),
        Err(Error::Header(_))
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
