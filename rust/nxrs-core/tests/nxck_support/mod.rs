//! Helpers shared by the `nxck_*` and `resume` tests: a trained seed model, random general
//! configurations and states, and v2 files rewritten with a valid header checksum so that the
//! checks behind the checksum can be reached.
#![allow(dead_code)] // each test crate uses a different subset

use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::init::Init;
use nxrs_core::loss::Loss;
use nxrs_core::math::Math;
use nxrs_core::model::Architecture;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify, ALIGN, PRELUDE_LEN};
use nxrs_core::nxck::Format;
use nxrs_core::optim::{DecayParams, Kind, OptimizerConfig};
use nxrs_core::params::Layer;
use nxrs_core::schedule::{Decay, Schedule};
use nxrs_core::{Error, TrainState, Trainer, TrainerConfig, F32};
use proptest::prelude::*;
use serde_json::Value;

/// The seed model trained for `epochs` epochs on the seed's data.
pub fn trained(epochs: i64) -> Trainer {
    let mut t = Trainer::new(TrainerConfig::seed_model()).unwrap();
    t.train_until(&Dataset::seed(8, 6, 4), epochs).unwrap();
    t
}

/// The v2 bytes of a trainer.
pub fn v2_bytes(t: &Trainer) -> Vec<u8> {
    checkpoint::encode(t, Format::V2).unwrap()
}

/// The v1 bytes of a trainer.
pub fn v1_bytes(t: &Trainer) -> Vec<u8> {
    checkpoint::encode(t, Format::V1).unwrap()
}

/// `bytes` opened as a v2 checkpoint (in memory).
pub fn open(bytes: &[u8], verify: Verify) -> Result<Checkpoint, Error> {
    Checkpoint::from_bytes(FileBytes::from_vec(bytes.to_vec()), verify)
}

/// The trainer a v2 file holds: the format's checks, then the model's (configuration, tensors,
/// scalars), as `checkpoint::load` does them.
pub fn trainer_of(bytes: &[u8]) -> Result<Trainer, Error> {
    checkpoint::trainer_from(&open(bytes, Verify::Full)?, Verify::Full)
}

/// The state a v2 file holds (see [`trainer_of`]); panics if it does not load.
pub fn state_of(bytes: &[u8]) -> TrainState {
    trainer_of(bytes).unwrap().state().clone()
}

/// Binary32 bit patterns in `lo..=hi` (both positive).
fn bits_in(lo: u32, hi: u32) -> impl Strategy<Value = F32> {
    (lo..=hi).prop_map(F32::from_bits)
}

/// Positive normal finite binary32 (an `lr` or `eps` the trainer accepts).
fn rate() -> impl Strategy<Value = F32> {
    bits_in(0x0080_0000, 0x7F7F_FFFF)
}

/// `[0, 1)` as binary32 (betas, momentum).
fn unit() -> impl Strategy<Value = F32> {
    bits_in(0, 0x3F7F_FFFF)
}

/// Any optimiser with hyperparameters anywhere in their accepted ranges (the ones an optimiser
/// does not use: neutral where they must be, any bits where they may be).
pub fn any_optimizer() -> impl Strategy<Value = OptimizerConfig> {
    let kind = prop_oneof![Just(Kind::Adam), Just(Kind::AdamW), Just(Kind::Sgd)];
    (
        kind,
        rate(),
        unit(),
        unit(),
        rate(),
        bits_in(0, 0x7F7F_FFFF),
        unit(),
        any::<[u32; 3]>(),
        decay_params(),
    )
        .prop_map(
            |(kind, lr, beta1, beta2, eps, wd, momentum, free, decay_params)| {
                let mut o = OptimizerConfig {
                    kind,
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay: wd,
                    momentum,
                    decay_params,
                };
                match kind {
                    Kind::Adam => {
                        (o.weight_decay, o.momentum) = (F32::ZERO, F32::ZERO);
                        o.decay_params = DecayParams::All;
                    }
                    Kind::AdamW => o.momentum = F32::ZERO,
                    // SGD ignores the betas and eps: any bits are recorded as they are.
                    Kind::Sgd => [o.beta1, o.beta2, o.eps] = free.map(F32::from_bits),
                }
                o
            },
        )
}

/// Any schedule: warm-up, then constant, linear (to a later step) or step decay.
pub fn any_schedule(max_steps: u64) -> impl Strategy<Value = Schedule> {
    let decay = prop_oneof![
        Just(Decay::Constant),
        (1..=max_steps).prop_map(|total_steps| Decay::Linear { total_steps }),
        (1..=max_steps, bits_in(1, 0x7F7F_FFFF))
            .prop_map(|(step_size, gamma)| Decay::Step { step_size, gamma }),
    ];
    (0..max_steps, decay).prop_map(|(warmup_steps, decay)| {
        let decay = match decay {
            // total_steps > warmup_steps
            Decay::Linear { total_steps } => Decay::Linear {
                total_steps: warmup_steps + total_steps,
            },
            other => other,
        };
        Schedule {
            warmup_steps,
            decay,
        }
    })
}

/// A random general configuration of a small model (layer sizes `1..=max_size`, 1 to 3 layers)
/// and the given optimiser and schedule strategies.
pub fn general_config_with(
    max_size: usize,
    max_batch: usize,
    optimizer: impl Strategy<Value = OptimizerConfig>,
    schedule: impl Strategy<Value = Schedule>,
    clip: impl Strategy<Value = F32>,
) -> impl Strategy<Value = TrainerConfig> {
    // Past 16 wide, half the layers are narrow, so wide layers meet narrow ones (and, under a
    // work bound, models with wide layers are not all drawn with tiny batches).
    let size = prop_oneof![1..=max_size.min(16), 1..=max_size];
    let sizes = proptest::collection::vec(size, 2..=4);
    let loss = prop_oneof![Just(Loss::CrossEntropy), Just(Loss::Mse)];
    let math = prop_oneof![Just(Math::Seed), Just(Math::Ieee)];
    let init = prop_oneof![Just(Init::Seed), Just(Init::He), Just(Init::Glorot)];
    let shape = (sizes, loss, math, init, any::<i64>());
    let run = (
        optimizer,
        schedule,
        proptest::option::of(clip),
        1..=max_batch,
        proptest::option::of(1..=max_batch),
        any::<bool>(),
        any::<bool>(),
    );
    (shape, run).prop_map(
        |(
            (sizes, loss, math, init, seed),
            (optimizer, schedule, clip_norm, batch_size, grad_block, shuffle, drop_last),
        )| {
            let config = TrainerConfig {
                architecture: Architecture::Sizes(sizes),
                loss,
                math,
                init,
                seed,
                optimizer,
                schedule,
                clip_norm,
                batch_size,
                grad_block,
                shuffle,
                drop_last,
            };
            config
                .validate()
                .expect("the strategy makes valid configurations");
            config
        },
    )
}

/// Any valid general configuration (every hyperparameter anywhere in its range).
pub fn any_general_config() -> impl Strategy<Value = TrainerConfig> {
    general_config_with(
        7,
        1000,
        any_optimizer(),
        any_schedule(i64::MAX as u64 / 2),
        bits_in(1, 0x7F7F_FFFF),
    )
}

/// A state of `config`'s model with random bit patterns in every tensor (NaNs included) and
/// random scalars in their ranges.
pub fn random_state(config: &TrainerConfig) -> impl Strategy<Value = TrainState> {
    let mlp = config.validate().unwrap();
    let second_moments = config.optimizer.kind.has_second_moments();
    let lens: Vec<usize> = TrainState::layout(&mlp, second_moments)
        .iter()
        .map(|(_, shape)| shape.iter().product())
        .collect();
    let tensors: Vec<_> = lens
        .iter()
        .map(|&n| proptest::collection::vec(any::<u32>(), n))
        .collect();
    let scalars = (
        0..=i64::MAX,
        any::<u32>(),
        any::<u32>(),
        0..=i64::MAX,
        0..=i64::MAX,
    );
    (tensors, scalars).prop_map(move |(tensors, (epoch, b1t, b2t, step, batch))| {
        let params: Vec<Layer> = mlp.zeros();
        let buffers = vec![Vec::new(); mlp.buffer_specs().len()];
        let mut state = TrainState::fresh(params, buffers, second_moments);
        for (slot, bits) in state.tensors_mut().into_iter().zip(tensors) {
            *slot = bits.into_iter().map(F32::from_bits).collect();
        }
        state
            .set_scalars([epoch, i64::from(b1t), i64::from(b2t), step, batch])
            .unwrap();
        state
    })
}

/// A random general configuration with a random state of its model.
pub fn config_and_state() -> impl Strategy<Value = (TrainerConfig, TrainState)> {
    any_general_config().prop_flat_map(|config| (Just(config.clone()), random_state(&config)))
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

/// `n / d` in binary32.
pub fn ratio(n: i32, d: i32) -> F32 {
    F32::from_i32(n) / F32::from_i32(d)
}

/// Optimisers with the hyperparameters a run would use, the rate `lr / 1000` (so that training
/// moves the weights; rates far above 0.05 make some runs overflow into infinities and NaNs).
pub fn useful_optimizer(lr: impl Strategy<Value = i32>) -> impl Strategy<Value = OptimizerConfig> {
    let kind = prop_oneof![Just(Kind::Adam), Just(Kind::AdamW), Just(Kind::Sgd)];
    let optimizer = (kind, lr, 0..=20i32, 0..=9i32, decay_params());
    optimizer.prop_map(|(kind, lr, wd, momentum, decay_params)| OptimizerConfig {
        kind,
        decay_params: if kind == Kind::Adam {
            DecayParams::All
        } else {
            decay_params
        },
        lr: ratio(lr, 1000),
        weight_decay: if kind == Kind::Adam {
            F32::ZERO
        } else {
            ratio(wd, 100)
        },
        momentum: if kind == Kind::Sgd {
            ratio(momentum, 10)
        } else {
            F32::ZERO
        },
        ..TrainerConfig::seed_model().optimizer
    })
}

/// Either rule of which tensors weight decay applies to.
fn decay_params() -> impl Strategy<Value = DecayParams> {
    prop::sample::select(DecayParams::ALL.to_vec())
}

/// Schedules a short run reaches every part of: a warm-up of up to 4 steps, then constant,
/// linear to zero within 20 more steps, step decay by a tenth to nine tenths every 1 to 5, or
/// cosine to 0 or 1e-5 (below every useful rate) within 20 more steps.
pub fn useful_schedule() -> impl Strategy<Value = Schedule> {
    let decay = prop_oneof![
        Just(Decay::Constant),
        (1..=20u64).prop_map(|total_steps| Decay::Linear { total_steps }),
        (1..=5u64, 1..=9i32).prop_map(|(step_size, g)| Decay::Step {
            step_size,
            gamma: ratio(g, 10),
        }),
        (1..=20u64, 0..=1i32).prop_map(|(total_steps, m)| Decay::Cosine {
            total_steps,
            min_lr: ratio(m, 100_000),
        }),
    ];
    (0..=4u64, decay).prop_map(|(warmup_steps, decay)| Schedule {
        warmup_steps,
        decay: match decay {
            Decay::Linear { total_steps } => Decay::Linear {
                total_steps: warmup_steps + total_steps,
            },
            Decay::Cosine {
                total_steps,
                min_lr,
            } => Decay::Cosine {
                total_steps: warmup_steps + total_steps,
                min_lr,
            },
            other => other,
        },
    })
}

/// The shape of a random run (see [`run_case`]).
pub struct RunShape {
    /// Largest layer size and batch size.
    pub max_size: usize,
    pub max_batch: usize,
    /// The most multiply-adds of one step's forward pass (the batch times the weights): the
    /// batch is cut to fit, so that wide layers come with small batches and every case stays
    /// affordable under softf32 (`usize::MAX`: no bound).
    pub max_work: usize,
    /// Samples beyond the fewest an epoch needs (one, or a batch with `drop_last`).
    pub extra_samples: usize,
    /// Ordinary features are `k / divisor` for integers `k` in `-amplitude..=amplitude`; a
    /// third of the data sets also hold any finite binary32 (see [`any_finite_feature`]).
    pub amplitude: i32,
    pub divisor: i32,
    /// The run's length in steps, at most.
    pub max_steps: i64,
}

impl RunShape {
    /// Layers up to 300 wide (past every vector group of the kernels: 8-lane registers, 1 to 7
    /// of them, groups of 64) and batches up to 128, a few steps, each step's work bounded so
    /// that softf32 runs stay affordable.
    pub const WIDE: RunShape = RunShape {
        max_size: 300,
        max_batch: 128,
        max_work: 100_000,
        extra_samples: 8,
        amplitude: 64,
        divisor: 7,
        max_steps: 3,
    };
}

/// A feature from a data set that holds every kind of finite binary32: ordinary `k / divisor`
/// values, any finite bit pattern, subnormals and huge magnitudes (2^113 and up), either sign.
/// Runs on such data overflow into infinities and NaNs, whose bits must agree too.
pub fn any_finite_feature(amplitude: i32, divisor: i32) -> impl Strategy<Value = F32> {
    let signed = |(magnitude, negative): (u32, bool)| {
        F32::from_bits(magnitude | (u32::from(negative) << 31))
    };
    prop_oneof![
        2 => (-amplitude..=amplitude).prop_map(move |k| ratio(k, divisor)),
        1 => (0..0x7F80_0000u32, any::<bool>()).prop_map(signed),
        1 => (1..0x0080_0000u32, any::<bool>()).prop_map(signed),
        1 => (0x7800_0000..0x7F80_0000u32, any::<bool>()).prop_map(signed),
    ]
}

/// A configuration of the given optimisers (useful schedules, clipping at 0.1 to 2), random data
/// that fits it (labels or targets by its loss), the run's length in steps, and a random step
/// inside the run (`0..=steps`) to stop at.
pub fn run_case(
    shape: RunShape,
    optimizer: impl Strategy<Value = OptimizerConfig>,
) -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let (max_batch, max_work) = (shape.max_batch, shape.max_work);
    let config = general_config_with(
        shape.max_size,
        shape.max_batch,
        optimizer,
        useful_schedule(),
        (1..=20i32).prop_map(|c| ratio(c, 10)),
    )
    .prop_map(move |mut config| {
        let weights: usize = sizes(&config).windows(2).map(|w| w[0] * w[1]).sum();
        let most = (max_work / weights).clamp(1, max_batch);
        config.batch_size = config.batch_size.min(most);
        config.grad_block = config.grad_block.map(|block| block.min(most));
        config
            .validate()
            .expect("a smaller batch keeps the configuration valid");
        config
    });
    let sized = config.prop_flat_map(move |config| {
        let min = if config.drop_last {
            config.batch_size
        } else {
            1
        };
        (Just(config), min..=(min + shape.extra_samples))
    });
    let (amplitude, divisor, max_steps) = (shape.amplitude, shape.divisor, shape.max_steps);
    sized.prop_flat_map(move |(config, n)| {
        let features = sizes(&config)[0];
        let outputs = *sizes(&config).last().unwrap();
        let targets = match config.loss {
            Loss::CrossEntropy => n,
            Loss::Mse => n * outputs,
        };
        let ordinary = (-amplitude..=amplitude).prop_map(move |k| ratio(k, divisor));
        let inputs = prop_oneof![
            2 => proptest::collection::vec(ordinary, n * features),
            1 => proptest::collection::vec(any_finite_feature(amplitude, divisor), n * features),
        ];
        (
            Just(config),
            inputs,
            proptest::collection::vec(0..1000usize, targets),
            1..=max_steps,
            any::<prop::sample::Index>(),
        )
            .prop_map(move |(config, inputs, y, total, stop)| {
                let data = match config.loss {
                    Loss::CrossEntropy => {
                        let labels: Vec<usize> = y.iter().map(|v| v % outputs).collect();
                        Dataset::new(features, outputs, inputs, &labels).unwrap()
                    }
                    Loss::Mse => {
                        let t = y.iter().map(|&v| ratio(v as i32 - 500, 250)).collect();
                        Dataset::regression(features, inputs, outputs, t).unwrap()
                    }
                };
                let stop = stop.index(total as usize + 1) as i64;
                (config, data, total, stop)
            })
    })
}

/// Up to 8 byte overwrites and an optional truncation of `base`.
pub fn mutated(base: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    let n = base.len();
    let edits = proptest::collection::vec((0..n, any::<u8>()), 1..=8);
    (edits, proptest::option::of(0..=n)).prop_map(move |(edits, cut)| {
        let mut b = base.to_vec();
        for (at, byte) in edits {
            b[at] = byte;
        }
        b.truncate(cut.unwrap_or(n));
        b
    })
}

/// Bytes JSON is made of, so that mutations reach past the parser into the validation.
pub const JSON_BYTES: &[u8] = b"0123456789-+.eE,:[]{}\" abfilnrstu";

/// The layer sizes of a configuration these strategies made (they make MLPs only).
pub fn sizes(config: &TrainerConfig) -> &[usize] {
    match &config.architecture {
        Architecture::Sizes(sizes) => sizes,
        Architecture::Layers(_) => unreachable!("the strategies make layer sizes"),
    }
}
