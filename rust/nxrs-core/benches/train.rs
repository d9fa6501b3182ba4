//! Time per optimiser step of the trainer, per backend, on the workloads of
//! `bench/bench_train.py` (which compares them with numpy and PyTorch from Python):
//!
//! - `seed`: the seed's 6-10-4 model, one sample per step;
//! - `digits-b1` and `digits-b32`: a 64-128-10 MLP with TRAINING.md's defaults (ieee math, He
//!   init, Adam, shuffled), batch 1 and 32, on 1797 samples of 64 features in `[0, 1]` (the shape
//!   of scikit-learn's digits; the values are synthetic so the bench needs no data files).
//!
//! `cargo bench -p nxrs-core --bench train`; criterion reports time per step (and samples/s as
//! its throughput).

use criterion::{BenchmarkId, Criterion, Throughput};
use nxrs_core::backend::{self, Backend};
use nxrs_core::dataset::Dataset;
use nxrs_core::trainer::Until;
use nxrs_core::{Trainer, TrainerConfig, F32};
use std::hint::black_box;
use std::ops::ControlFlow;
use std::time::Duration;

fn digits_like() -> Dataset {
    let (n, features) = (1797, 64);
    // A fixed LCG: the bench's data is the same on every run.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 40) as u32
    };
    // Pixel intensities 0..=16 over 16, as the Python bench scales digits.
    let inputs = (0..n * features)
        .map(|_| F32::from_i32((next() % 17) as i32) / F32::from_i32(16))
        .collect();
    let labels: Vec<u8> = (0..n).map(|_| (next() % 10) as u8).collect();
    Dataset::new(features, 10, inputs, &labels).unwrap()
}

fn digits_config(batch_size: usize) -> TrainerConfig {
    let mut config = TrainerConfig::general(vec![64, 128, 10]);
    config.batch_size = batch_size;
    config
}

fn bench_steps(c: &mut Criterion) {
    let digits = digits_like();
    let seed_data = Dataset::seed(8, 6, 4);
    let workloads: [(&str, TrainerConfig, &Dataset); 3] = [
        ("seed", TrainerConfig::seed_model(), &seed_data),
        ("digits-b1", digits_config(1), &digits),
        ("digits-b32", digits_config(32), &digits),
    ];
    let mut backends = vec![Backend::Soft];
    if backend::hardware().is_ok() {
        backends.insert(0, Backend::Hw);
    }
    let mut group = c.benchmark_group("step");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for (name, config, data) in workloads {
        group.throughput(Throughput::Elements(config.batch_size as u64));
        for &backend in &backends {
            let mut t = Trainer::new(config.clone()).unwrap();
            t.set_backend(backend).unwrap();
            group.bench_function(BenchmarkId::new(name, backend.name()), |b| {
                b.iter(|| {
                    let target = t.state().step + 1;
                    let flow = t
                        .run(data, Until::Step(target), |_, _| ControlFlow::Continue(()))
                        .unwrap();
                    let _ = black_box(flow);
                })
            });
        }
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_steps(&mut c);
    c.final_summary();
}
