//! Every layer's kernels give softf32's bits on the hardware backend (`docs/TRAINING.md`
//! section 14's claim, for section 15's layers): random layers of every type with random odd
//! shapes, strides, padding and kernels (GELU and the layers without biases too), random cells (ordinary values, and often special ones:
//! NaNs with payloads, infinities, signed zeros, subnormals), both `math` settings, training
//! mode (outputs, input gradients, block gradients, BatchNorm's statistics) and evaluation mode,
//! computed by softf32 and by the CPU's floats on 1 and on 3 threads, compared bit for bit.
//! Causal self-attention, whose sums over earlier positions run as whole products, is compared
//! with section 15.8's loops as written on both backends, infinities and NaNs at later positions
//! included.

#[path = "support/backends.rs"]
mod backends;
#[path = "support/cell.rs"]
mod cell;

use cell::cell;
use nxrs_core::arith::Real;
use nxrs_core::backend::{Backend, Compute};
use nxrs_core::layers::pass::{Context, Mode, Saved, Tensors};
use nxrs_core::layers::{Layer, LayerSpec, Network, Op};
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

/// Ordinary cells, a few of them (or none) replaced by infinities or NaNs: one such cell makes its token's `q`, `k` and `v` infinite or NaN, and leaves
/// the other tokens' as they were.
fn cells_maybe_special(n: usize) -> impl Strategy<Value = Vec<u32>> {
    let ordinary = (0x3C00_0000u32..0x4100_0000, any::<bool>())
        .prop_map(|(m, neg)| m | (u32::from(neg) << 31));
    let special = prop::sample::select(vec![
        0x7FC0_0000u32,
        0xFFC0_1234,
        0x7F80_0001,
        0x7F80_0000,
        0xFF80_0000,
    ]);
    let replaced = proptest::collection::vec((0..n, special), 0..3);
    (proptest::collection::vec(ordinary, n), replaced).prop_map(|(mut cells, replaced)| {
        for (at, cell) in replaced {
            cells[at] = cell;
        }
        cells
    })
}

/// Causal self-attention on sequences long enough that its products take the blocked kernels
/// (`T x T x h` past the small products' bound), its inputs, weights and output gradients each
/// either ordinary (so its sums over earlier positions run as whole products) or with special
/// values (so a later position's infinite or NaN `v`, `go`, `q` or `k` makes them take the
/// definition's loop over the earlier positions only).
fn attention_case() -> impl Strategy<Value = Case> {
    (1usize..4, 1usize..13, 1usize..25, 1usize..3)
        .prop_map(|(heads, head, tokens, rows)| {
            let width = heads * head;
            let specs = [
                LayerSpec::Input {
                    shape: vec![tokens],
                },
                LayerSpec::Embedding {
                    vocab: 2,
                    width,
                    std: None,
                },
                LayerSpec::CausalSelfAttention {
                    heads,
                    std: None,
                    proj_std: None,
                },
                LayerSpec::Flatten,
            ];
            let layer = Network::new(&specs).unwrap().layers.remove(1);
            (layer, rows, width)
        })
        .prop_flat_map(|(layer, rows, width)| {
            let cells = rows * layer.input.iter().product::<usize>();
            (
                Just((layer, rows)),
                cells_maybe_special(3 * width * width),
                cells_maybe_special(width * width),
                cells_maybe_special(cells),
                cells_maybe_special(cells),
                any::<bool>(),
            )
        })
        .prop_map(|((layer, rows), wqkv, wo, x, g, seed)| Case {
            layer,
            math: if seed { Math::Seed } else { Math::Ieee },
            rows,
            params: Some((wqkv, wo)),
            running: None,
            x,
            g,
        })
}

/// `z[t][o] = Σ_j w[o][j] * x[t][j]` from +0 (Dense without biases, row by row).
fn dense(w: &[F32], x: &[F32], inputs: usize) -> Vec<F32> {
    let outputs = w.len() / inputs;
    x.chunks_exact(inputs)
        .flat_map(|x| {
            w.chunks_exact(inputs)
                .map(move |w| w.iter().zip(x).fold(F32::ZERO, |z, (&w, &x)| z + w * x))
        })
        .take(x.len() / inputs * outputs)
        .collect()
}

/// Dense without biases backwards: `W`'s block gradient (`δ[t][o] * x[t][j]` over the rows, from
/// the first term) and the input gradient `Σ_o w[o][j] * δ[t][o]` from +0.
fn dense_backward(w: &[F32], x: &[F32], delta: &[F32], inputs: usize) -> (Vec<F32>, Vec<F32>) {
    let outputs = w.len() / inputs;
    let rows = x.len() / inputs;
    let gw = (0..outputs * inputs)
        .map(|c| {
            let (o, j) = (c / inputs, c % inputs);
            let term = |t: usize| delta[t * outputs + o] * x[t * inputs + j];
            (1..rows).fold(term(0), |acc, t| acc + term(t))
        })
        .collect();
    let gx = (0..rows * inputs)
        .map(|c| {
            let (t, j) = (c / inputs, c % inputs);
            (0..outputs).fold(F32::ZERO, |acc, o| {
                acc + w[o * inputs + j] * delta[t * outputs + o]
            })
        })
        .collect();
    (gw, gx)
}

/// Section 15.8's causal self-attention in softf32, every sum a loop over the positions the
/// text names (no product over masked cells): what a case's layer must give, as [`Run`] lists
/// it (training outputs, input gradients, both matrices' block gradients, evaluation outputs).
fn attention_by_definition(c: &Case, heads: usize, tokens: usize) -> Vec<(&'static str, Vec<u32>)> {
    let (wqkv, wo) = c.params.as_ref().map(|(a, b)| (f32s(a), f32s(b))).unwrap();
    let (x, g) = (f32s(&c.x), f32s(&c.g));
    let d = c.layer.input[1];
    let (t, h) = (tokens, d / heads);
    let scale = F32::ONE / F32::from_i64(h as i64).sqrt();
    let qkv = dense(&wqkv, &x, d);
    let at = |s: usize, i: usize, part: usize, a: usize, e: usize| {
        (s * t + i) * 3 * d + part * d + a * h + e
    };
    let mut p = vec![F32::ZERO; c.rows * heads * t * t];
    let mut o = vec![F32::ZERO; c.rows * t * d];
    for s in 0..c.rows {
        for a in 0..heads {
            let p = &mut p[(s * heads + a) * t * t..][..t * t];
            for i in 0..t {
                let row = &mut p[i * t..][..=i];
                for (j, cell) in row.iter_mut().enumerate() {
                    let dot = (0..h).fold(F32::ZERO, |acc, e| {
                        acc + qkv[at(s, i, 0, a, e)] * qkv[at(s, j, 1, a, e)]
                    });
                    *cell = dot * scale;
                }
                let m = row[1..]
                    .iter()
                    .fold(row[0], |m, &x| if m.ieee_lt(x) { x } else { m });
                let mut z = F32::ZERO;
                for cell in row.iter_mut() {
                    *cell = c.math.exp(*cell - m);
                    z = z + *cell;
                }
                for cell in row.iter_mut() {
                    *cell = *cell / z;
                }
                for e in 0..h {
                    o[(s * t + i) * d + a * h + e] =
                        (0..=i).fold(F32::ZERO, |acc, j| acc + row[j] * qkv[at(s, j, 2, a, e)]);
                }
            }
        }
    }
    let y = dense(&wo, &o, d);
    let (g_wo, go) = dense_backward(&wo, &o, &g, d);
    let mut dqkv = vec![F32::ZERO; qkv.len()];
    for s in 0..c.rows {
        for a in 0..heads {
            let p = |i: usize, j: usize| p[(s * heads + a) * t * t + i * t + j];
            let go = |i: usize, e: usize| go[(s * t + i) * d + a * h + e];
            let mut ds = vec![F32::ZERO; t * t];
            for i in 0..t {
                let dp: Vec<F32> = (0..=i)
                    .map(|j| {
                        (0..h).fold(F32::ZERO, |acc, e| acc + go(i, e) * qkv[at(s, j, 2, a, e)])
                    })
                    .collect();
                let r = (0..=i).fold(F32::ZERO, |r, j| r + p(i, j) * dp[j]);
                for j in 0..=i {
                    ds[i * t + j] = (p(i, j) * (dp[j] - r)) * scale;
                }
            }
            for j in 0..t {
                for e in 0..h {
                    let dq = (0..=j).fold(F32::ZERO, |acc, i| {
                        acc + ds[j * t + i] * qkv[at(s, i, 1, a, e)]
                    });
                    let dk = (j..t).fold(F32::ZERO, |acc, i| {
                        acc + ds[i * t + j] * qkv[at(s, i, 0, a, e)]
                    });
                    let dv = (j..t).fold(F32::ZERO, |acc, i| acc + p(i, j) * go(i, e));
                    dqkv[at(s, j, 0, a, e)] = dq;
                    dqkv[at(s, j, 1, a, e)] = dk;
                    dqkv[at(s, j, 2, a, e)] = dv;
                }
            }
        }
    }
    let (g_wqkv, gx) = dense_backward(&wqkv, &x, &dqkv, d);
    vec![
        ("train y", u32s(&y)),
        ("input gradient", u32s(&gx)),
        ("first parameter's gradient", u32s(&g_wqkv)),
        ("second parameter's gradient", u32s(&g_wo)),
        ("eval y", u32s(&y)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn attention_gives_the_definitions_bits_on_every_backend_and_thread_count(c in attention_case()) {
        let Op::Attention(attention) = &c.layer.op else { unreachable!("an attention case") };
        let want = attention_by_definition(&c, attention.heads, attention.tokens);
        for backend in backends::backends() {
            for threads in [Threads::ONE, Threads::splitting_everything(3).unwrap()] {
                let count = threads.count();
                let got = backend.run(Run(&c, threads));
                prop_assert_eq!(got.len(), want.len());
                for ((name, got), (what, want)) in got.iter().zip(&want) {
                    prop_assert_eq!(name, what);
                    prop_assert_eq!(
                        got, want, "{} ({:?}, {} threads) of {:?}", name, backend, count, c.layer.op
                    );
                }
            }
        }
    }
}
