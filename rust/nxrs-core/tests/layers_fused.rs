//! A network's passes let a layer take over its neighbours' work while the cells are in the
//! cache (a convolution or Dense applies the ReLU above it, and the max pooling above that; max
//! pooling applies the derivative of the ReLU below it), and let each thread take its samples
//! through a whole model of layers that act on each sample alone: the network's outputs and
//! every parameter's block gradient must be the bits of running each layer's own pass in turn
//! over the whole block (which the golden cases check one by one). Random models `Conv [->
//! Tanh] -> ReLU [-> MaxPool] -> Flatten -> Dense -> ReLU -> Dense` with odd shapes,
//! overlapping or not pooling windows, few positions (convolutions grouping samples) or many,
//! and `Dense -> (ReLU | Tanh | Sigmoid | GELU | Dropout)* -> ... -> Dense` (Dense with or without
//! biases), random cells (special
//! values included), both `math` settings, on every backend, on 1 and 3 threads.

#[path = "support/backends.rs"]
mod backends;
#[path = "support/cell.rs"]
mod cell;

use cell::cell;
use nxrs_core::arith::Real;
use nxrs_core::backend::{Backend, Compute};
use nxrs_core::layers::network::{Cells, Parameters};
use nxrs_core::layers::pass::{Context, Mode, Saved, Tensors};
use nxrs_core::layers::transposed::Transposed;
use nxrs_core::layers::{LayerSpec, Network};
use nxrs_core::math::Math;
use nxrs_core::params::Layer as Params;
use nxrs_core::threads::Threads;
use nxrs_core::F32;
use proptest::prelude::*;

/// A model's layer list: a convolution's, or an MLP's.
fn model() -> impl Strategy<Value = Vec<LayerSpec>> {
    prop_oneof![convolutional(), dense()]
}

/// `[Flatten ->] Dense -> (pointwise ->)* Dense ...`: layers that act on each sample alone, which
/// a thread takes its samples through all at once (the whole model per thread).
fn dense() -> impl Strategy<Value = Vec<LayerSpec>> {
    let pointwise = prop_oneof![
        Just(LayerSpec::ReLU),
        Just(LayerSpec::Tanh),
        Just(LayerSpec::Sigmoid),
        Just(LayerSpec::GELU),
        Just(LayerSpec::Dropout {
            p: F32::ONE / F32::from_i32(4)
        }),
    ];
    let hidden = (
        1usize..6,
        any::<bool>(),
        proptest::collection::vec(pointwise, 0..3),
    );
    (
        proptest::collection::vec(1usize..5, 1..3),
        proptest::collection::vec(hidden, 0..4),
        1usize..4,
    )
        .prop_map(|(shape, hidden, outputs)| {
            let flatten = shape.len() > 1;
            let mut specs = vec![LayerSpec::Input { shape }];
            if flatten {
                specs.push(LayerSpec::Flatten);
            }
            for (units, bias, pointwise) in hidden {
                specs.push(LayerSpec::Dense {
                    units,
                    bias,
                    std: None,
                });
                specs.extend(pointwise);
            }
            specs.push(LayerSpec::Dense {
                units: outputs,
                bias: true,
                std: None,
            });
            specs
        })
}

/// `Conv [-> Tanh] -> ReLU [-> MaxPool] -> Flatten -> Dense -> ReLU -> Dense`.
fn convolutional() -> impl Strategy<Value = Vec<LayerSpec>> {
    let shape = prop_oneof![
        (1usize..3, 4usize..14).prop_map(|(c, l)| vec![c, l]),
        (1usize..3, 4usize..9, 4usize..9).prop_map(|(c, h, w)| vec![c, h, w]),
        // Enough positions for one sample a group (see `Conv::group`).
        Just(vec![1, 12, 12]),
    ];
    let tanh = any::<bool>();
    (
        shape,
        1usize..4,
        1usize..4,
        1usize..3,
        0usize..3,
        1usize..4,
        tanh,
    )
        .prop_map(|(shape, o, k, pool, pool_stride, units, tanh)| {
            let dims = shape.len() - 1;
            let mut specs = vec![
                LayerSpec::Input { shape },
                LayerSpec::Conv {
                    out_channels: o,
                    kernel_size: vec![k; dims],
                    stride: vec![1; dims],
                    padding: vec![k / 2; dims],
                },
            ];
            // A Tanh between leaves the ReLU to itself and max pooling (which then applies the
            // ReLU's derivative in its own backward pass).
            if tanh {
                specs.push(LayerSpec::Tanh);
            }
            specs.push(LayerSpec::ReLU);
            // Pooling windows of 2 (stride 1: overlapping; 2: tiling), or none.
            if pool_stride > 0 && pool > 1 {
                specs.push(LayerSpec::Pool {
                    max: true,
                    kernel_size: vec![pool; dims],
                    stride: vec![pool_stride; dims],
                });
            }
            specs.extend([
                LayerSpec::Flatten,
                LayerSpec::Dense {
                    units: units + 1,
                    bias: true,
                    std: None,
                },
                LayerSpec::ReLU,
                LayerSpec::Dense {
                    units: 2,
                    bias: true,
                    std: None,
                },
            ]);
            specs
        })
}

#[derive(Clone, Debug)]
struct Case {
    net: Network,
    math: Math,
    rows: usize,
    params: Vec<(Vec<u32>, Vec<u32>)>,
    x: Vec<u32>,
    delta: Vec<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    (model(), 1usize..6, any::<bool>())
        .prop_filter_map("a model that fits its input", |(specs, rows, seed)| {
            let net = Network::new(&specs).ok()?;
            let math = if seed { Math::Seed } else { Math::Ieee };
            Some((net, rows, math))
        })
        .prop_flat_map(|(net, rows, math)| {
            let cells = |shape: &[usize]| shape.iter().product::<usize>();
            let params: Vec<_> = net
                .layers
                .iter()
                .map(|layer| layer.tensor_shapes().0)
                .filter(|shapes| !shapes.is_empty())
                .map(|shapes| {
                    (
                        proptest::collection::vec(cell(), cells(&shapes[0])),
                        // A layer without biases has no second tensor.
                        proptest::collection::vec(cell(), shapes.get(1).map_or(0, |s| cells(s))),
                    )
                })
                .collect();
            let (n_in, n_out) = (rows * cells(&net.input), rows * net.outputs());
            (
                Just((net, rows, math)),
                params,
                proptest::collection::vec(cell(), n_in),
                proptest::collection::vec(cell(), n_out),
            )
        })
        .prop_map(|((net, rows, math), params, x, delta)| Case {
            net,
            math,
            rows,
            params,
            x,
            delta,
        })
}

fn f32s(bits: &[u32]) -> Vec<F32> {
    bits.iter().map(|&b| F32::from_bits(b)).collect()
}

fn u32s(cells: &[F32]) -> Vec<u32> {
    cells.iter().map(|c| c.to_bits()).collect()
}

/// The outputs and every parameter's block gradient, as bits: through the network's passes, or
/// through each layer's own passes in turn.
struct Run<'a> {
    case: &'a Case,
    threads: Threads,
    layer_by_layer: bool,
}

impl Compute for Run<'_> {
    type Output = Vec<Vec<u32>>;

    fn compute<R: Real>(self) -> Self::Output {
        let c = self.case;
        let params: Vec<Params> = c
            .params
            .iter()
            .map(|(w, b)| Params {
                w: f32s(w),
                b: f32s(b),
            })
            .collect();
        let (x, delta) = (f32s(&c.x), f32s(&c.delta));
        let context = Context {
            math: c.math,
            mode: Mode::Train {
                seed: 5,
                step: 1,
                first_sample: 0,
            },
            threads: &self.threads,
        };
        let mut grads: Vec<Params> = params
            .iter()
            .map(|p| Params {
                w: vec![F32::ZERO; p.w.len()],
                b: vec![F32::ZERO; p.b.len()],
            })
            .collect();
        let outputs = if self.layer_by_layer {
            layer_by_layer::<R>(c, context, &params, (&x, &delta), &mut grads)
        } else {
            let transposed = Transposed::of(&c.net, &params);
            let parameters = Parameters {
                params: &params,
                running: &[],
                transposed: &transposed,
            };
            let (features, width) = (x.len() / c.rows, c.net.outputs());
            // Each sample's outputs, and its gradient `delta` given to the backward pass.
            let mut outputs = vec![Vec::new(); c.rows];
            c.net.train::<R, Vec<F32>>(
                context,
                parameters,
                &mut Cells::default(),
                |samples, rows| {
                    rows.copy_from_slice(&x[samples.start * features..samples.end * features])
                },
                |samples, z, d, outputs| {
                    let given = &delta[samples.start * width..samples.end * width];
                    for (d, &g) in d.iter_mut().zip(given) {
                        *d = R::from_f32(g);
                    }
                    for (out, z) in outputs.iter_mut().zip(z.chunks_exact(width)) {
                        *out = z.iter().map(|z| z.to_f32()).collect();
                    }
                },
                &mut outputs,
                &mut grads,
            );
            outputs.concat()
        };
        let mut out = vec![u32s(&outputs)];
        for g in &grads {
            out.push(u32s(&g.w));
            out.push(u32s(&g.b));
        }
        out
    }
}

/// Each layer's [`nxrs_core::layers::Layer::forward`] in order, then each one's `backward` in
/// reverse order: returns the last outputs.
fn layer_by_layer<R: Real>(
    c: &Case,
    context: Context<'_>,
    params: &[Params],
    (x, delta): (&[F32], &[F32]),
    grads: &mut [Params],
) -> Vec<F32> {
    let layers = &c.net.layers;
    let mut slots = Vec::new();
    let mut k = 0;
    for layer in layers {
        let has = !layer.tensor_shapes().0.is_empty();
        slots.push(has.then_some(k));
        k += usize::from(has);
    }
    let mut values = vec![x.to_vec()];
    let mut saved: Vec<Saved> = layers.iter().map(|_| Saved::default()).collect();
    for (i, layer) in layers.iter().enumerate() {
        let mut y = vec![F32::ZERO; c.rows * layer.output.iter().product::<usize>()];
        let tensors = Tensors {
            params: slots[i].map(|k| (&params[k].w[..], &params[k].b[..])),
            running: None,
            transposed: None,
        };
        layer.forward::<R>(context, tensors, &values[i], c.rows, &mut y, &mut saved[i]);
        values.push(y);
    }
    let mut g = delta.to_vec();
    for (i, layer) in layers.iter().enumerate().rev() {
        let mut gx = vec![F32::ZERO; values[i].len()];
        let own = slots[i].map(|k| (&params[k].w[..], &params[k].b[..]));
        let grad = slots[i].map(|k| {
            let (w, b) = (&mut grads[k].w, &mut grads[k].b);
            // The grads are split by the borrow checker's rules: one tensor each.
            (w.as_mut_slice(), b.as_mut_slice())
        });
        let (xi, yi) = (&values[i], &values[i + 1]);
        layer.backward::<R>(
            context,
            own,
            (xi, yi, &g),
            c.rows,
            &mut saved[i],
            Some(&mut gx),
            grad,
        );
        g = gx;
    }
    values.pop().expect("the last outputs")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_networks_passes_give_its_layers_own_passes_bits(c in case()) {
        let want = Backend::Soft.run(Run { case: &c, threads: Threads::ONE, layer_by_layer: true });
        for backend in backends::backends() {
            for threads in [Threads::ONE, Threads::splitting_everything(3).unwrap()] {
                let count = threads.count();
                let got = backend.run(Run { case: &c, threads, layer_by_layer: false });
                for (k, (got, want)) in got.iter().zip(&want).enumerate() {
                    prop_assert_eq!(
                        got, want, "result {} ({:?}, {} threads) of {:?}", k, backend, count,
                        c.net.layers.iter().map(|l| &l.op).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
