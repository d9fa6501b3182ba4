//! Every layer's kernels give softf32's bits on the hardware backend (`docs/TRAINING.md`
//! section 14's claim, for section 15's layers): random layers of every type with random odd
//! shapes, strides, padding and kernels (GELU and the layers without biases too), random cells (ordinary values, and often special ones:
//! NaNs with payloads, infinities, signed zeros, subnormals), both `math` settings, training
//! mode (outputs, input gradients, block gradients, BatchNorm's statistics) and evaluation mode,
//! computed by softf32 and by the CPU's floats on 1 and on 3 threads, compared bit for bit.

#[path = "support/backends.rs"]
mod backends;
#[path = "support/cell.rs"]
mod cell;

use cell::cell;
use nxrs_core::arith::Real;
use nxrs_core::backend::{Backend, Compute};
use nxrs_core::layers::pass::{Context, Mode, Saved, Tensors};
use nxrs_core::layers::{Layer, LayerSpec, Network};
use nxrs_core::math::Math;
use nxrs_core::threads::Threads;
use nxrs_core::F32;
use proptest::prelude::*;

/// A layer and an input shape it takes.
fn layer() -> impl Strategy<Value = (LayerSpec, Vec<usize>)> {
    let spatial1 = (1usize..4, 3usize..12).prop_map(|(c, l)| vec![c, l]);
    let spatial2 = (1usize..3, 3usize..8, 3usize..8).prop_map(|(c, h, w)| vec![c, h, w]);
    let flat = (1usize..9).prop_map(|n| vec![n]);
    let conv1 = (1usize..4, 1usize..4, 1usize..3)
        .prop_flat_map(|(o, k, s)| (Just((o, k, s)), 0..k))
        .prop_map(|((o, k, s), q)| LayerSpec::Conv {
            out_channels: o,
            kernel_size: vec![k],
            stride: vec![s],
            padding: vec![q],
        });
    let conv2 = (1usize..3, 1usize..4, 1usize..3, 1usize..3)
        .prop_flat_map(|(o, kh, kw, s)| (Just((o, kh, kw, s)), 0..kh, 0..kw))
        .prop_map(|((o, kh, kw, s), qh, qw)| LayerSpec::Conv {
            out_channels: o,
            kernel_size: vec![kh, kw],
            stride: vec![s, 1],
            padding: vec![qh, qw],
        });
    let pool = |dims: usize| {
        (any::<bool>(), 1usize..4, 1usize..3).prop_map(move |(max, k, s)| LayerSpec::Pool {
            max,
            kernel_size: vec![k.min(3); dims],
            stride: vec![s; dims],
        })
    };
    let float = |bits: u32| F32::from_bits(bits);
    prop_oneof![
        (1usize..6, any::<bool>(), flat.clone()).prop_map(|(units, bias, s)| (
            LayerSpec::Dense {
                units,
                bias,
                std: None
            },
            s
        )),
        (conv1, spatial1.clone()).prop_map(|(l, s)| (l, s)),
        (conv2, spatial2.clone()).prop_map(|(l, s)| (l, s)),
        (pool(1), spatial1.clone()).prop_map(|(l, s)| (l, s)),
        (pool(2), spatial2.clone()).prop_map(|(l, s)| (l, s)),
        prop_oneof![
            Just(LayerSpec::ReLU),
            Just(LayerSpec::Tanh),
            Just(LayerSpec::Sigmoid),
            Just(LayerSpec::GELU)
        ]
        .prop_flat_map({
            let (flat, spatial1) = (flat.clone(), spatial1.clone());
            move |l| (Just(l), prop_oneof![flat.clone(), spatial1.clone()])
        }),
        (0u32..0x3F80_0000, spatial1.clone())
            .prop_map(move |(p, s)| (LayerSpec::Dropout { p: float(p) }, s)),
        (
            0u32..=0x3F80_0000,
            0x3000_0000u32..0x3F00_0000,
            spatial1.clone()
        )
            .prop_map(move |(m, e, s)| (
                LayerSpec::BatchNorm {
                    dims: 1,
                    momentum: float(m),
                    eps: float(e)
                },
                s
            )),
        (0x3000_0000u32..0x3F00_0000, spatial2.clone()).prop_map(move |(e, s)| {
            (
                LayerSpec::BatchNorm {
                    dims: 2,
                    momentum: float(0x3DCC_CCCD),
                    eps: float(e),
                },
                s,
            )
        }),
        (0x3000_0000u32..0x3F00_0000, any::<bool>(), spatial2).prop_map(move |(e, bias, s)| (
            LayerSpec::LayerNorm {
                eps: float(e),
                bias
            },
            s
        )),
    ]
}

/// One case: a checked layer, its tensors, the block's inputs and output gradients.
#[derive(Clone, Debug)]
struct Case {
    layer: Layer,
    math: Math,
    rows: usize,
    params: Option<(Vec<u32>, Vec<u32>)>,
    running: Option<(Vec<u32>, Vec<u32>)>,
    x: Vec<u32>,
    g: Vec<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    (layer(), 1usize..5, any::<bool>())
        .prop_filter_map(
            "a layer that fits its input",
            |((spec, shape), rows, seed)| {
                let specs = [LayerSpec::Input { shape }, spec, LayerSpec::Flatten];
                let layer = Network::new(&specs).ok()?.layers.remove(0);
                let math = if seed { Math::Seed } else { Math::Ieee };
                Some((layer, rows, math))
            },
        )
        .prop_flat_map(|(layer, rows, math)| {
            let (params, running) = layer.tensor_shapes();
            let cells = |shape: &Vec<usize>| shape.iter().product::<usize>();
            let tensors = |shapes: Vec<Vec<usize>>| {
                shapes
                    .iter()
                    .map(|s| proptest::collection::vec(cell(), cells(s)))
                    .collect::<Vec<_>>()
            };
            let n_in = rows * layer.input.iter().product::<usize>();
            let n_out = rows * layer.output.iter().product::<usize>();
            (
                Just((layer, rows, math)),
                tensors(params),
                tensors(running),
                proptest::collection::vec(cell(), n_in),
                proptest::collection::vec(cell(), n_out),
            )
        })
        .prop_map(|((layer, rows, math), params, running, x, g)| {
            let pair = |v: Vec<Vec<u32>>| {
                let mut v = v.into_iter();
                // A layer without biases has one tensor: its second is empty.
                v.next().map(|a| (a, v.next().unwrap_or_default()))
            };
            Case {
                layer,
                math,
                rows,
                params: pair(params),
                running: pair(running),
                x,
                g,
            }
        })
}

fn f32s(bits: &[u32]) -> Vec<F32> {
    bits.iter().map(|&b| F32::from_bits(b)).collect()
}

fn u32s(cells: &[F32]) -> Vec<u32> {
    cells.iter().map(|c| c.to_bits()).collect()
}

/// Everything a case's layer computes, as bits.
struct Run<'a>(&'a Case, Threads);

impl Compute for Run<'_> {
    type Output = Vec<(&'static str, Vec<u32>)>;

    fn compute<R: Real>(self) -> Self::Output {
        let Run(c, threads) = self;
        let params = c.params.as_ref().map(|(w, b)| (f32s(w), f32s(b)));
        let running = c.running.as_ref().map(|(m, v)| (f32s(m), f32s(v)));
        let (x, g) = (f32s(&c.x), f32s(&c.g));
        let n_out = c.g.len();
        let tensors = || Tensors {
            params: params.as_ref().map(|(w, b)| (&w[..], &b[..])),
            running: running.as_ref().map(|(m, v)| (&m[..], &v[..])),
            transposed: None,
        };
        let mode = Mode::Train {
            seed: -3,
            step: 7,
            first_sample: 2,
        };
        let train = Context {
            math: c.math,
            mode,
            threads: &threads,
        };
        let mut out = Vec::new();
        let mut y = vec![F32::ZERO; n_out];
        let mut saved = Saved::default();
        c.layer
            .forward::<R>(train, tensors(), &x, c.rows, &mut y, &mut saved);
        let mut gx = vec![F32::ZERO; x.len()];
        let mut grads = params
            .as_ref()
            .map(|(w, b)| (vec![F32::ZERO; w.len()], vec![F32::ZERO; b.len()]));
        c.layer.backward::<R>(
            train,
            params.as_ref().map(|(w, b)| (&w[..], &b[..])),
            (&x, &y, &g),
            c.rows,
            &mut saved,
            Some(&mut gx),
            grads.as_mut().map(|(w, b)| (&mut w[..], &mut b[..])),
        );
        out.push(("train y", u32s(&y)));
        out.push(("input gradient", u32s(&gx)));
        if let Some((w, b)) = grads {
            out.push(("first parameter's gradient", u32s(&w)));
            out.push(("second parameter's gradient", u32s(&b)));
        }
        if let Some((mut m, mut v)) = running.clone() {
            c.layer
                .update_running::<R>(c.rows, saved.statistics(), &mut m, &mut v);
            out.push(("running mean", u32s(&m)));
            out.push(("running variance", u32s(&v)));
        }
        let eval = Context {
            math: c.math,
            mode: Mode::Eval,
            threads: &threads,
        };
        let mut y = vec![F32::ZERO; n_out];
        c.layer
            .forward::<R>(eval, tensors(), &x, c.rows, &mut y, &mut Saved::default());
        out.push(("eval y", u32s(&y)));
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn every_layer_gives_softf32s_bits_on_every_backend_and_thread_count(c in case()) {
        let want = Backend::Soft.run(Run(&c, Threads::ONE));
        for backend in backends::backends() {
            for threads in [Threads::ONE, Threads::splitting_everything(3).unwrap()] {
                let count = threads.count();
                let got = backend.run(Run(&c, threads));
                for ((name, got), (_, want)) in got.iter().zip(&want) {
                    prop_assert_eq!(
                        got, want, "{} ({:?}, {} threads) of {:?}", name, backend, count, c.layer.op
                    );
                }
            }
        }
    }
}
