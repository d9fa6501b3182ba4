//! Throughput of NXCK v2 saves (both write strategies) and loads on a ~100 MB state.
//! A measurement, not a check: ignored by default. Run it with
//! `cargo test -p nxrs-core --release --test nxck_throughput -- --ignored --nocapture`
//! (`NXRS_BENCH_DIR` picks the directory, default: a temporary one).

use nxrs_core::adam::AdamConfig;
use nxrs_core::nxck::v2::{self, Checkpoint, Verify};
use nxrs_core::nxck::writer::WriteStrategy;
use nxrs_core::{TrainState, TrainerConfig, F32};
use std::time::{Duration, Instant};

/// `[2048, 4096]`: 8.4 M parameters, 3 tensors' worth of cells each: 100.7 MB of data.
fn big_state() -> (TrainerConfig, TrainState) {
    let config = TrainerConfig {
        sizes: vec![2048, 4096],
        adam: AdamConfig::seed(),
    };
    let cells = |n: usize, salt: u32| -> Vec<F32> {
        (0..n as u32)
            .map(|i| F32::from_bits(i.wrapping_mul(0x9E37_79B9) ^ salt))
            .collect()
    };
    let mut state = TrainState::fresh(vec![cells(2048 * 4096, 1), cells(4096, 2)]);
    state.m = vec![cells(2048 * 4096, 3), cells(4096, 4)];
    state.v = vec![cells(2048 * 4096, 5), cells(4096, 6)];
    (config, state)
}

/// Bytes per microsecond are (decimal) megabytes per second.
fn mb_per_s(bytes: u64, d: Duration) -> u128 {
    u128::from(bytes) / d.as_micros().max(1)
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .min()
        .expect("reps > 0")
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn save_and_load_throughput() {
    let (config, state) = big_state();
    let dir = match std::env::var_os("NXRS_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let path = dir.path().join("big.nxck");
    v2::save_state(&config, &state, &path).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    println!("file: {len} bytes");

    for strategy in [
        WriteStrategy::Buffered,
        WriteStrategy::Mapped,
        WriteStrategy::Buffered,
        WriteStrategy::Mapped,
    ] {
        let d = best_of(3, || {
            v2::save_state_with(&config, &state, &path, strategy).unwrap();
        });
        println!(
            "save {strategy:?} (incl. fsync): {:?}, {} MB/s",
            d,
            mb_per_s(len, d)
        );
    }
    let d = best_of(3, || v2::encode(&config, &state).unwrap());
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
    let d = best_of(3, || checkpoint.to_state());
    println!("to_state: {:?}, {} MB/s", d, mb_per_s(len, d));
    assert_eq!(checkpoint.to_state(), state);
    // Includes Trainer::new, whose softf32 initialisation is then replaced by the file's state.
    let d = best_of(1, || nxrs_core::nxck::load_trainer(&path).unwrap());
    println!("nxck::load_trainer: {d:?}");
}
