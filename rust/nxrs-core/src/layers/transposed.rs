//! Dense layers' weights transposed, as their forward passes read them: row `j` holds the
//! weights of input `j` for every output, so the product's `B` operand is read in place as
//! contiguous runs of outputs (packing a transposed view instead would scatter every cell, in
//! every thread, at every step). Refreshed from the parameters once per step and shared by the
//! threads.

use super::{Network, Op};
use crate::params::{zeros, Layer as Params};
use crate::softf32::F32;

/// Per parameter slot (the state's order), `Wᵀ` of a layer with one position (Dense), nothing
/// for the others (convolutions read `W` in place, normalisations have no `W` to transpose).
#[derive(Clone, Debug, Default)]
pub struct Transposed {
    /// `(outputs, inputs)` of each slot's `W`, `None` where nothing is transposed.
    shapes: Vec<Option<(usize, usize)>>,
    w: Vec<Vec<F32>>,
}

impl Transposed {
    /// Zeros shaped like `net`'s transposed weights, until [`Transposed::refresh`] (they cost
    /// nothing until written: `params::zeros`).
    pub fn new(net: &Network) -> Transposed {
        let shapes: Vec<Option<(usize, usize)>> = net
            .layers
            .iter()
            .filter(|layer| !layer.tensor_shapes().0.is_empty())
            .map(|layer| match &layer.op {
                Op::Conv(conv) if conv.window.positions() == 1 => {
                    Some((conv.out_channels, conv.window.column()))
                }
                _ => None,
            })
            .collect();
        let w = shapes
            .iter()
            .map(|shape| shape.map_or_else(Vec::new, |(o, j)| zeros(o * j)))
            .collect();
        Transposed { shapes, w }
    }

    /// The transposed weights of `params` (`net`'s).
    pub fn of(net: &Network, params: &[Params]) -> Transposed {
        let mut t = Transposed::new(net);
        t.refresh(params);
        t
    }

    /// Copies `params`' weights in, transposed.
    pub fn refresh(&mut self, params: &[Params]) {
        for ((t, shape), layer) in self.w.iter_mut().zip(&self.shapes).zip(params) {
            if let Some((outputs, inputs)) = *shape {
                crate::transpose::transpose(&layer.w, outputs, inputs, t);
            }
        }
    }

    /// Slot `k`'s `Wᵀ` (`inputs x outputs`, row-major), if it has one.
    pub(super) fn get(&self, k: usize) -> Option<&[F32]> {
        self.shapes[k].map(|_| &self.w[k][..])
    }
}
