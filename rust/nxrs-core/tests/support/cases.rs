//! The fixtures' cases (`tests/golden/general.json`, `tests/golden/layers.json`): their
//! configurations rebuilt from their keys and stored binary32 bit patterns, and their data from
//! the fixtures' formula.
#![allow(dead_code)] // each test file uses its own part

use nxrs_core::dataset::Dataset;
use nxrs_core::init::Init;
use nxrs_core::layers::LayerSpec;
use nxrs_core::loss::Loss;
use nxrs_core::math::Math;
use nxrs_core::model::Architecture;
use nxrs_core::optim::{DecayParams, Kind, OptimizerConfig};
use nxrs_core::schedule::{Decay, Schedule};
use nxrs_core::trainer::{Event, Until};
use nxrs_core::{Trainer, TrainerConfig, F32};
use serde_json::Value;
use std::ops::ControlFlow;

pub fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a u64"))
}

pub fn i64_of(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("{v} is not an i64"))
}

pub fn usize_of(v: &Value) -> usize {
    usize::try_from(u64_of(v)).unwrap()
}

pub fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("{v} is not a string"))
}

pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// A binary32 from the fixture's bit pattern.
pub fn bits(v: &Value) -> F32 {
    F32::from_bits(u32::try_from(u64_of(v)).unwrap())
}

pub fn f32i(k: i64) -> F32 {
    F32::from_i64(k)
}

/// The trainer configuration of a case: its keys (`config`) with every binary32 hyperparameter
/// from its stored bit pattern (`hyper_bits`), as a checkpoint would hold it.
pub fn config_of(case: &Value) -> TrainerConfig {
    let c = &case["config"];
    // The binary32 hyperparameters: stored as bit patterns, or (cases without them) the
    // configuration's floats rounded as every float setting is.
    let stored = case.get("hyper_bits");
    let bits = |key: &str| match stored {
        Some(h) => bits(&h[key]),
        None => F32::from_f64_bits(c[key].as_f64().expect("a float").to_bits()),
    };
    let present = |key: &str| match stored {
        Some(h) => !h[key].is_null(),
        None => !c[key].is_null(),
    };
    let kind = Kind::from_name(str_of(&c["optimizer"])).expect("a known optimizer");
    let schedule = Schedule {
        warmup_steps: u64_of(&c["warmup_steps"]),
        decay: match str_of(&c["schedule"]) {
            "constant" => Decay::Constant,
            "linear" => Decay::Linear {
                total_steps: u64_of(&c["total_steps"]),
            },
            "step" => Decay::Step {
                step_size: u64_of(&c["step_size"]),
                gamma: bits("gamma"),
            },
            "cosine" => Decay::Cosine {
                total_steps: u64_of(&c["total_steps"]),
                min_lr: bits("min_lr"),
            },
            other => panic!("schedule {other}"),
        },
    };
    let layers = c["layers"].as_array().unwrap();
    let architecture = if layers.iter().all(Value::is_u64) {
        Architecture::Sizes(layers.iter().map(usize_of).collect())
    } else {
        Architecture::Layers(
            layers
                .iter()
                .enumerate()
                .map(|(i, v)| LayerSpec::from_json(v, i).expect("a valid layer"))
                .collect(),
        )
    };
    let config = TrainerConfig {
        architecture,
        loss: Loss::from_name(str_of(&c["loss"])).expect("a known loss"),
        math: Math::from_name(str_of(&c["math"])).expect("a known math"),
        init: Init::from_name(str_of(&c["init"])).expect("a known init"),
        seed: i64_of(&c["seed"]),
        optimizer: OptimizerConfig {
            kind,
            lr: bits("lr"),
            beta1: bits("beta1"),
            beta2: bits("beta2"),
            eps: bits("eps"),
            weight_decay: bits("weight_decay"),
            momentum: bits("momentum"),
            decay_params: match c.get("decay_params") {
                Some(name) => DecayParams::from_name(str_of(name)).expect("a known rule"),
                None => DecayParams::All,
            },
        },
        schedule,
        clip_norm: present("clip_norm").then(|| bits("clip_norm")),
        batch_size: usize_of(&c["batch_size"]),
        grad_block: (!c["grad_block"].is_null()).then(|| usize_of(&c["grad_block"])),
        shuffle: c["shuffle"].as_bool().unwrap(),
        drop_last: c["drop_last"].as_bool().unwrap(),
    };
    config
        .validate()
        .expect("the fixture's configuration is valid");
    config
}

/// The fixture's data (its `data` formulas): `x[s][i] = f32(((s*7 + i*3) % 11) - 5) / f32(4)`,
/// labels `(s*5) % K`, targets `t[s][o] = f32(((s*3 + o*5) % 7) - 3) / f32(8)`.
pub fn case_data(n: usize, config: &TrainerConfig) -> Dataset {
    let model = config.validate().unwrap();
    let (n_in, k) = (model.inputs(), model.outputs());
    let x: Vec<F32> = (0..n)
        .flat_map(|s| (0..n_in).map(move |i| (s, i)))
        .map(|(s, i)| f32i((((s * 7 + i * 3) % 11) as i64) - 5) / f32i(4))
        .collect();
    match config.loss {
        Loss::CrossEntropy => {
            let labels: Vec<usize> = (0..n).map(|s| (s * 5) % k).collect();
            Dataset::new(n_in, k, x, &labels).unwrap()
        }
        Loss::Mse => {
            let t: Vec<F32> = (0..n)
                .flat_map(|s| (0..k).map(move |o| (s, o)))
                .map(|(s, o)| f32i((((s * 3 + o * 5) % 7) as i64) - 3) / f32i(8))
                .collect();
            Dataset::regression(n_in, x, k, t).unwrap()
        }
    }
}

/// One optimiser step through `run`, so that the epoch and batch counters advance as the
/// reference's do: the step's loss.
pub fn one_step(t: &mut Trainer, data: &Dataset) -> F32 {
    let target = t.state().step + 1;
    let mut loss = None;
    let reached = t
        .run(data, Until::Step(target), |_, event| {
            if let Event::Step(report) = event {
                loss = Some(report.loss);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(reached.is_continue());
    loss.expect("one step ran")
}

/// The fixture's sequence-model data (`sequence_run_data`): `tok[i] = (5*i + (i*i) % 3) % V`,
/// `x[s][t] = f32(tok[3*s + t])`, and labels `"next"` (`y[s][t] = tok[3*s + t + 1]`), `"class"`
/// (`(s*5) % K`) or `"targets"` ([`case_data`]'s).
pub fn sequence_data(n: usize, config: &TrainerConfig, labels: &str) -> Dataset {
    let model = config.validate().unwrap();
    let tokens = model.tokens().expect("a sequence model");
    let (t, vocab) = (tokens.tokens, tokens.vocab);
    let tok = |i: usize| (5 * i + (i * i) % 3) % vocab;
    let x: Vec<F32> = (0..n)
        .flat_map(|s| (0..t).map(move |k| f32i(tok(3 * s + k) as i64)))
        .collect();
    let k = model.classes();
    match labels {
        "next" => {
            let y: Vec<usize> = (0..n)
                .flat_map(|s| (0..t).map(move |k| tok(3 * s + k + 1)))
                .collect();
            Dataset::with_labels(t, k, x, &y, t).unwrap()
        }
        "class" => {
            let y: Vec<usize> = (0..n).map(|s| (s * 5) % k).collect();
            Dataset::new(t, k, x, &y).unwrap()
        }
        "targets" => {
            let values: Vec<F32> = (0..n)
                .flat_map(|s| (0..k).map(move |o| (s, o)))
                .map(|(s, o)| f32i((((s * 3 + o * 5) % 7) as i64) - 3) / f32i(8))
                .collect();
            Dataset::regression(t, x, k, values).unwrap()
        }
        other => panic!("labels {other}"),
    }
}
