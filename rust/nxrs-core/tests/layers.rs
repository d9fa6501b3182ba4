//! Every layer's kernels against the independent reference's golden cases
//! (`tests/golden/layers.json`, from `tests/reference/layers_ref.py`, written from
//! `docs/TRAINING.md` section 15 alone): for each case and both `math` settings, the
//! training-mode outputs, the input gradient, the parameters' block gradients and BatchNorm's
//! running statistics, and the evaluation-mode outputs, bit for bit, on softf32 and on the
//! hardware backend.

#[path = "support/backends.rs"]
mod backends;

use nxrs_core::arith::Real;
use nxrs_core::backend::Compute;
use nxrs_core::layers::pass::{Context, Mode, Saved, Tensors};
use nxrs_core::layers::{LayerSpec, Network};
use nxrs_core::math::Math;
use nxrs_core::F32;
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
        let input = LayerSpec::Input {
            shape: sizes(&case["input_shape"]),
        };
        let mut layer = Network::new(&[input, spec.clone(), LayerSpec::Flatten])
            .expect("the case's layer fits its input")
            .layers
            .remove(0);
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
        let names = if tensors.contains_key("W") {
            ("W", "b")
        } else {
            ("gamma", "beta")
        };
        let params = tensors
            .get(names.0)
            .map(|w| (&w[..], &tensors[names.1][..]));
        let x = cells(&case["x"]);
        let g = cells(&case["g"]);
        let n_out = rows * layer.output.iter().product::<usize>();
        let mut out = Outcome::default();
        let mut running = (tensors.get("mean").cloned(), tensors.get("var").cloned());

        let mut y = vec![F32::ZERO; n_out];
        let mut saved = Saved::default();
        let context = Context { math, mode };
        layer.forward::<R>(
            context,
            tensors_of(params, &mut running),
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
            out.fields
                .insert(format!("train.block_grads.{}", names.1), b);
        }
        if let (Some(m), Some(v)) = running {
            out.fields.insert("train.running_after.mean".into(), m);
            out.fields.insert("train.running_after.var".into(), v);
        }
        if case.get("eval").is_some() {
            let mut running = (tensors.get("mean").cloned(), tensors.get("var").cloned());
            let mut y = vec![F32::ZERO; n_out];
            let eval = Context {
                math,
                mode: Mode::Eval,
            };
            layer.forward::<R>(
                eval,
                tensors_of(params, &mut running),
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

/// The tensors a pass reads: the parameters, and BatchNorm's running statistics to update.
fn tensors_of<'a>(
    params: Option<(&'a [F32], &'a [F32])>,
    running: &'a mut (Option<Vec<F32>>, Option<Vec<F32>>),
) -> Tensors<'a> {
    Tensors {
        params,
        running: match running {
            (Some(m), Some(v)) => Some((&mut m[..], &mut v[..])),
            _ => None,
        },
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
