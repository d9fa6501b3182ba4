//! Every layer's kernels against the independent reference's golden cases
//! (`tests/golden/layers.json`, from `tests/reference/layers_ref.py`, written from
//! `docs/TRAINING.md` section 15 alone): for each case and both `math` settings, the
//! training-mode outputs, the input gradient, the parameters' block gradients and BatchNorm's
//! running statistics, and the evaluation-mode outputs, bit for bit, on softf32 and on the
//! hardware backend.

#[path = "support/backends.rs"]
mod backends;
#[path = "support/cases.rs"]
mod cases;

use cases::{bits, case_data, config_of, hex, i64_of, one_step, sequence_data, str_of, usize_of};
use nxrs_core::arith::Real;
use nxrs_core::backend::Backend;
use nxrs_core::backend::Compute;
use nxrs_core::init::Init;
use nxrs_core::layers::pass::{Context, Mode, Saved, Tensors};
use nxrs_core::layers::{LayerSpec, Network, Op};
use nxrs_core::math::Math;
use nxrs_core::model::Architecture;
use nxrs_core::threads::Threads;
use nxrs_core::F32;
use nxrs_core::{TrainState, Trainer, TrainerConfig};
use serde_json::Value;
use std::collections::BTreeMap;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/golden/layers.json"
    );
    let text =
        std::fs::read_to_string(path).expect("tests/golden/layers.json is in the repository");
    serde_json::from_str(&text).expect("the fixture is JSON")
}

fn cells(v: &Value) -> Vec<F32> {
    v.as_array()
        .expect("a list of bit patterns")
        .iter()
        .map(|b| F32::from_bits(u32::try_from(b.as_u64().expect("a bit pattern")).expect("u32")))
        .collect()
}

fn sizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("a list of sizes")
        .iter()
        .map(|n| n.as_u64().expect("a size") as usize)
        .collect()
}

/// What a case's layer computed.
#[derive(Debug, Default)]
struct Outcome {
    /// Field name -> cells, named as the fixture names them.
    fields: BTreeMap<String, Vec<F32>>,
}

struct Case<'a>(&'a Value);

impl Compute for Case<'_> {
    type Output = Outcome;

    fn compute<R: Real>(self) -> Outcome {
        let case = self.0;
        let dropout = case.get("dropout");
        let position = dropout.map_or(1, |d| d["position"].as_u64().unwrap() as usize);
        let spec = LayerSpec::from_json(&case["layer"], position).expect("a valid layer");
        let shape = sizes(&case["input_shape"]);
        // A sequence layer's input comes from an Embedding (section 15.8): the case's layer
        // follows one (of the case's vocabulary for a tied head), whose layer it is not.
        let (specs, index) = match (case.get("sequence"), case.get("vocab")) {
            (Some(_), vocab) => {
                let embedding = LayerSpec::Embedding {
                    vocab: vocab.map_or(1, usize_of),
                    width: shape[1],
                    std: None,
                };
                let input = LayerSpec::Input {
                    shape: vec![shape[0]],
                };
                (vec![input, embedding, spec.clone(), LayerSpec::Flatten], 1)
            }
            (None, _) => {
                let input = LayerSpec::Input { shape };
                (vec![input, spec.clone(), LayerSpec::Flatten], 0)
            }
        };
        let mut layer = Network::new(&specs)
            .expect("the case's layer fits its input")
            .layers
            .remove(index);
        layer.position = position;
        assert_eq!(
            layer.output,
            sizes(&case["output_shape"]),
            "{}",
            case["name"]
        );
        let math = Math::from_name(case["math"].as_str().unwrap()).unwrap();
        let mode = match dropout {
            Some(d) => Mode::Train {
                seed: d["seed"].as_i64().unwrap(),
                step: d["step"].as_u64().unwrap(),
                first_sample: d["first_sample"].as_u64().unwrap() as usize,
            },
            None => Mode::Train {
                seed: 0,
                step: 0,
                first_sample: 0,
            },
        };
        let rows = case["n"].as_u64().unwrap() as usize;
        let tensors: BTreeMap<String, Vec<F32>> = case["tensors"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), cells(v)))
            .collect();
        let names = [("W", "b"), ("E", ""), ("P", ""), ("Wqkv", "Wo")]
            .into_iter()
            .find(|(w, _)| tensors.contains_key(*w))
            .unwrap_or(("gamma", "beta"));
        // A layer without biases has no second tensor: its passes are given an empty one.
        let params = tensors.get(names.0).map(|w| {
            let b = tensors.get(names.1).map_or(&[][..], |b| &b[..]);
            (&w[..], b)
        });
        // A Dense layer's forward pass reads `Wᵀ`, as a network's passes give it.
        let w_t = match &layer.op {
            Op::Conv(conv) if conv.window.positions() == 1 => {
                let (o, j) = (conv.out_channels, conv.window.column());
                let w = &tensors["W"];
                Some(
                    (0..j * o)
                        .map(|k| w[(k % o) * j + k / o])
                        .collect::<Vec<F32>>(),
                )
            }
            _ => None,
        };
        let x = cells(&case["x"]);
        let g = cells(&case["g"]);
        let n_out = rows * layer.output.iter().product::<usize>();
        let mut out = Outcome::default();
        let mut running = (tensors.get("mean").cloned(), tensors.get("var").cloned());

        let mut y = vec![F32::ZERO; n_out];
        let mut saved = Saved::default();
        let context = Context {
            math,
            mode,
            threads: &Threads::ONE,
        };
        layer.forward::<R>(
            context,
            tensors_of(params, &running, w_t.as_deref()),
            &x,
            rows,
            &mut y,
            &mut saved,
        );
        let mut gx = vec![F32::ZERO; x.len()];
        let mut grads = params.map(|(w, b)| (vec![F32::ZERO; w.len()], vec![F32::ZERO; b.len()]));
        layer.backward::<R>(
            context,
            params,
            (&x, &y, &g),
            rows,
            &mut saved,
            Some(&mut gx),
            grads.as_mut().map(|(w, b)| (&mut w[..], &mut b[..])),
        );
        out.fields.insert("train.y".into(), y);
        out.fields.insert("train.x_grad".into(), gx);
        if let Some((w, b)) = grads {
            out.fields
                .insert(format!("train.block_grads.{}", names.0), w);
            if tensors.contains_key(names.1) {
                out.fields
                    .insert(format!("train.block_grads.{}", names.1), b);
            }
        }
        if let (Some(m), Some(v)) = &mut running {
            layer.update_running::<R>(rows, saved.statistics(), m, v);
        }
        if let (Some(m), Some(v)) = running {
            out.fields.insert("train.running_after.mean".into(), m);
            out.fields.insert("train.running_after.var".into(), v);
        }
        if case.get("eval").is_some() {
            let running = (tensors.get("mean").cloned(), tensors.get("var").cloned());
            let mut y = vec![F32::ZERO; n_out];
            let eval = Context {
                math,
                mode: Mode::Eval,
                threads: &Threads::ONE,
            };
            layer.forward::<R>(
                eval,
                tensors_of(params, &running, w_t.as_deref()),
                &x,
                rows,
                &mut y,
                &mut Saved::default(),
            );
            out.fields.insert("eval.y".into(), y);
        }
        out
    }
}

/// The tensors a pass reads: the parameters, BatchNorm's running statistics and a Dense layer's
/// `Wᵀ`.
fn tensors_of<'a>(
    params: Option<(&'a [F32], &'a [F32])>,
    running: &'a (Option<Vec<F32>>, Option<Vec<F32>>),
    transposed: Option<&'a [F32]>,
) -> Tensors<'a> {
    Tensors {
        params,
        running: match running {
            (Some(m), Some(v)) => Some((&m[..], &v[..])),
            _ => None,
        },
        transposed,
    }
}

/// The fixture's expected cells for `field` (`train.y`, `train.block_grads.W`, ...).
fn expected<'a>(case: &'a Value, field: &str) -> Option<&'a Value> {
    field.split('.').try_fold(case, |v, key| v.get(key))
}

#[test]
fn every_layer_matches_the_reference() {
    let fixture = fixture();
    let cases = fixture["layer_cases"].as_array().expect("layer_cases");
    assert!(cases.len() >= 40, "the fixture holds every layer type");
    layers_match(cases);
}

#[test]
fn every_sequence_layer_matches_the_reference() {
    let fixture = fixture();
    let cases = fixture["sequence_layer_cases"]
        .as_array()
        .expect("sequence_layer_cases");
    assert!(cases.len() >= 20, "the fixture holds every sequence layer");
    layers_match(cases);
}

/// Every case's outcome against the fixture's, bit for bit, on every backend.
fn layers_match(cases: &[Value]) {
    let mut failures = Vec::new();
    for backend in backends::backends() {
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let outcome = backend.run(Case(case));
            for (field, got) in &outcome.fields {
                let want = cells(
                    expected(case, field)
                        .unwrap_or_else(|| panic!("{name}: the fixture has no {field}")),
                );
                if let Some(i) = (0..want.len().max(got.len()))
                    .find(|&i| want.get(i).map(|c| c.to_bits()) != got.get(i).map(|c| c.to_bits()))
                {
                    let bits = |c: Option<&F32>| {
                        c.map_or("none".into(), |c| format!("{:#010x}", c.to_bits()))
                    };
                    failures.push(format!(
                        "{backend:?} {name} {field}[{i}]: expected {}, got {}",
                        bits(want.get(i)),
                        bits(got.get(i))
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs one of the fixture's training runs (a layer model, or an integer list given as layer
/// sizes or as the equivalent layer objects) and reports every difference.
fn run_layers_case(
    case: &Value,
    config: TrainerConfig,
    backend: Backend,
    threads: Threads,
) -> Vec<String> {
    let diffs = std::cell::RefCell::new(Vec::new());
    let check = |what: String, got: String, want: String| {
        if got != want {
            diffs
                .borrow_mut()
                .push(format!("{what}: nxrs {got}, reference {want}"));
        }
    };
    let n = usize_of(&case["n"]);
    let data = match case.get("labels") {
        Some(labels) => sequence_data(n, &config, str_of(labels)),
        None => case_data(n, &config),
    };
    let mut t = Trainer::new(config).expect("the case's configuration builds");
    t.set_backend(backend).unwrap();
    t.set_threads(threads);
    if let Some(init) = case.get("init_hash") {
        check(
            "initial hash".into(),
            hex(t.state_hash()),
            str_of(init).into(),
        );
    }
    for want in case["steps"].as_array().unwrap() {
        let loss = one_step(&mut t, &data);
        let at = format!("step {}", want["step"]);
        check(
            format!("{at}: loss bits"),
            format!("{:#010x}", loss.to_bits()),
            format!("{:#010x}", bits(&want["loss_bits"]).to_bits()),
        );
        check(
            format!("{at}: state hash"),
            hex(t.state_hash()),
            str_of(&want["state_hash"]).into(),
        );
    }
    let Some(f) = case.get("final") else {
        return diffs.into_inner();
    };
    let scalars: Vec<i64> = f["scalars"]
        .as_array()
        .unwrap()
        .iter()
        .map(i64_of)
        .collect();
    check(
        "final scalars".into(),
        format!("{:?}", t.state().scalars()),
        format!("{scalars:?}"),
    );
    let layout = TrainState::layout(t.model(), t.config().optimizer.kind.has_second_moments());
    let tensors = f["tensors"].as_object().unwrap();
    let mut names: Vec<&str> = layout.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let fixture_names: Vec<&str> = tensors.keys().map(String::as_str).collect();
    check(
        "tensor names".into(),
        format!("{names:?}"),
        format!("{fixture_names:?}"),
    );
    for ((name, _), got) in layout.iter().zip(t.state().tensors()) {
        let Some(want) = tensors.get(name.as_str()) else {
            continue;
        };
        let want = cells(want);
        if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
            diffs
                .borrow_mut()
                .push(format!("tensor {name}: first difference at cell {i}"));
        }
    }
    let x = data.inputs().to_vec();
    let p = t.predict(&x).unwrap();
    let want = cells(&f["predict_proba"]);
    if let Some(i) = (0..want.len().max(p.len())).find(|&i| want.get(i) != p.get(i)) {
        diffs
            .borrow_mut()
            .push(format!("predict_proba: first difference at cell {i}"));
    }
    let eval = t.evaluate(&data).unwrap();
    check(
        "evaluation loss bits".into(),
        format!("{:#010x}", eval.loss.to_bits()),
        format!("{:#010x}", bits(&f["eval_loss_bits"]).to_bits()),
    );
    diffs.into_inner()
}

/// The layer objects equivalent to layer sizes (section 15: Dense and ReLU, none after the
/// last).
fn as_layer_objects(sizes: &[usize]) -> Vec<LayerSpec> {
    let mut layers = vec![LayerSpec::Input {
        shape: vec![sizes[0]],
    }];
    for (l, &units) in sizes[1..].iter().enumerate() {
        if l > 0 {
            layers.push(LayerSpec::ReLU);
        }
        layers.push(LayerSpec::Dense {
            units,
            bias: true,
            std: None,
        });
    }
    layers
}

#[test]
fn every_training_run_matches_the_reference() {
    let fixture = fixture();
    let mut failed = Vec::new();
    let runs = fixture["runs"].as_array().expect("runs");
    let integer_runs = fixture["integer_runs"].as_array().expect("integer_runs");
    assert!(runs.len() >= 5 && integer_runs.len() >= 2);
    let sequence_runs = fixture["sequence_runs"].as_array().expect("sequence_runs");
    assert!(sequence_runs.len() >= 3);
    for backend in backends::backends() {
        let mut cases: Vec<(String, &Value, TrainerConfig)> = runs
            .iter()
            .chain(sequence_runs)
            .map(|case| (str_of(&case["name"]).to_string(), case, config_of(case)))
            .collect();
        for case in integer_runs {
            let config = config_of(case);
            let Architecture::Sizes(sizes) = &config.architecture else {
                unreachable!()
            };
            let name = str_of(&case["name"]);
            if config.init != Init::Seed {
                let objects = TrainerConfig {
                    architecture: Architecture::Layers(as_layer_objects(sizes)),
                    ..config.clone()
                };
                cases.push((format!("{name} as layer objects"), case, objects));
            }
            cases.push((name.to_string(), case, config));
        }
        for (name, case, config) in cases {
            // One thread, and three threads sharing every product's rows however small.
            let split = Threads::splitting_everything(3).unwrap();
            for (threads, label) in [(Threads::ONE, "1 thread"), (split, "3 threads")] {
                let diffs = run_layers_case(case, config.clone(), backend, threads);
                if !diffs.is_empty() {
                    failed.push(format!(
                        "{name} ({}, {label}):\n    {}",
                        backend.name(),
                        diffs.join("\n    ")
                    ));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "runs that differ:\n{}",
        failed.join("\n")
    );
}
