//! Throughput of NXCK v2 saves (both write strategies) and loads on a ~100 MB state.
//! A measurement, not a check: ignored by default. Run it with
//! `cargo test -p nxrs-core --release --test nxck_throughput -- --ignored --nocapture`
//! (`NXRS_BENCH_DIR` picks the directory, default: a temporary one; `NXRS_BENCH_GB=1` uses a
//! ~1 GB state, `[4096, 20480]`, instead).

use nxrs_core::checkpoint;
use nxrs_core::nxck::v2::{self, Checkpoint, Verify};
use nxrs_core::nxck::writer::WriteStrategy;
use nxrs_core::nxck::Format;
use nxrs_core::params::Layer;
use nxrs_core::{TrainState, Trainer, TrainerConfig, F32};
use std::time::{Duration, Instant};

/// `[2048, 4096]`: 8.4 M parameters, 3 tensors' worth of cells each: 100.7 MB of data
/// (`[4096, 20480]`, 1007 MB, with `NXRS_BENCH_GB=1`).
fn big_state() -> (TrainerConfig, TrainState) {
    let (n_in, n_out) = if std::env::var_os("NXRS_BENCH_GB").is_some() {
        (4096, 20480)
    } else {
        (2048, 4096)
    };
    let config = TrainerConfig::seed_style(vec![n_in, n_out], 1);
    let cells = |n: usize, salt: u32| -> Vec<F32> {
        (0..n as u32)
            .map(|i| F32::from_bits(i.wrapping_mul(0x9E37_79B9) ^ salt))
            .collect()
    };
    let layer = |salt: u32| Layer {
        w: cells(n_in * n_out, salt),
        b: cells(n_out, salt + 1),
    };
    let mut state = TrainState::fresh(vec![layer(1)], Vec::new(), true);
    state.m = vec![layer(3)];
    state.v = vec![layer(5)];
    (config, state)
}

/// Bytes per microsecond are (decimal) megabytes per second.
fn mb_per_s(bytes: u64, d: Duration) -> u128 {
    u128::from(bytes) / d.as_micros().max(1)
}

fn best_of<T>(reps: usize, f: impl FnMut() -> T) -> Duration {
    best_of_prepared(reps, || {}, f)
}

/// The best of `reps` runs of `f`, each after an untimed `prepare`.
fn best_of_prepared<T>(
    reps: usize,
    mut prepare: impl FnMut(),
    mut f: impl FnMut() -> T,
) -> Duration {
    (0..reps)
        .map(|_| {
            prepare();
            let t = Instant::now();
            let result = std::hint::black_box(f());
            let elapsed = t.elapsed();
            drop(result); // freeing a large result is not part of the operation
            elapsed
        })
        .min()
        .expect("reps > 0")
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn save_and_load_throughput() {
    let (config, state) = big_state();
    let trainer = Trainer::from_state(config.clone(), state.clone()).unwrap();
    let record = checkpoint::record(&trainer);
    let dir = match std::env::var_os("NXRS_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let path = dir.path().join("big.nxck");
    checkpoint::save(&trainer, &path, Format::V2).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    println!("file: {len} bytes");

    for strategy in [
        WriteStrategy::Buffered,
        WriteStrategy::Mapped,
        WriteStrategy::Buffered,
        WriteStrategy::Mapped,
    ] {
        // As bench/bench_checkpoint.py: from nothing on disk, nothing dirty.
        let prepare = || {
            let _ = std::fs::remove_file(&path);
            sync_all_filesystems();
        };
        let d = best_of_prepared(3, prepare, || {
            v2::save_with(&record, &path, strategy).unwrap();
        });
        println!(
            "save {strategy:?} (incl. fsync): {:?}, {} MB/s",
            d,
            mb_per_s(len, d)
        );
    }
    let d = best_of(3, || v2::encode(&record).unwrap());
    println!("encode into memory: {:?}, {} MB/s", d, mb_per_s(len, d));
    let d = best_of(3, || Checkpoint::open(&path, Verify::HeaderOnly).unwrap());
    println!("open HeaderOnly: {d:?}");
    let d = best_of(3, || Checkpoint::open(&path, Verify::Full).unwrap());
    println!(
        "open Full (CRC-32C of every tensor, page cache warm): {:?}, {} MB/s",
        d,
        mb_per_s(len, d)
    );
    let checkpoint = Checkpoint::open(&path, Verify::HeaderOnly).unwrap();
    let d = best_of(3, || {
        checkpoint::trainer_from(&checkpoint, Verify::HeaderOnly).unwrap()
    });
    println!(
        "trainer_from (HeaderOnly, copy): {:?}, {} MB/s",
        d,
        mb_per_s(len, d)
    );
    let back = checkpoint::trainer_from(&checkpoint, Verify::Full).unwrap();
    assert_eq!(back.state(), &state);
    drop(back);
    let d = best_of(3, || checkpoint.cells_verified().unwrap());
    println!("cells_verified (CRCs on a second thread): {d:?}");
    let d = best_of(3, || {
        checkpoint::trainer_from(&checkpoint, Verify::Full).unwrap()
    });
    println!("trainer_from (Full): {d:?}");
    let mut states: Vec<TrainState> = (0..3).map(|_| state.clone()).collect();
    let d = best_of(3, || {
        Trainer::from_state(config.clone(), states.pop().unwrap()).unwrap()
    });
    println!("Trainer::from_state: {d:?}");
    drop(states);
    let d = best_of(3, || checkpoint::load(&path).unwrap());
    println!("checkpoint::load: {d:?}");
}

/// `sync(2)`: no dirty pages left to slow down the next save.
fn sync_all_filesystems() {
    #[cfg(unix)]
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe {
        libc::sync()
    };
}
