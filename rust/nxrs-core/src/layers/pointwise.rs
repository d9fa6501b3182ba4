//! The layers that act on each cell alone (`docs/TRAINING.md` sections 15.2, 15.3, 15.5 and
//! 15.7): ReLU (with `math`'s `le`, as the MLP's), Sigmoid and Tanh (compositions of `math`'s
//! `exp` and correctly rounded operations), GELU (of the correctly rounded `Phi` and `phi`, in
//! every `math` setting), and Dropout with its masks.

use crate::arith::Real;
use crate::math::Math;
use crate::rng::{mix64, Domain, Stream};
use crate::softf32::F32;

const SIGN: u32 = 0x8000_0000;

fn with_bits<R: Real>(x: R, f: impl FnOnce(u32) -> u32) -> R {
    R::from_f32(F32::from_bits(f(x.to_f32().to_bits())))
}

/// `y = 1 / (1 + exp(-x))`.
pub fn sigmoid<R: Real>(math: Math, x: &[R], y: &mut [R]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = R::ONE / (R::ONE + math.exp(-x));
    }
}

/// `gx = g * (y * (1 - y))`.
pub fn sigmoid_backward<R: Real>(g: &[R], y: &[R], gx: &mut [R]) {
    for ((gx, &g), &y) in gx.iter_mut().zip(g).zip(y) {
        *gx = g * (y * (R::ONE - y));
    }
}

/// `tanh(|x|) = (1 - t) / (1 + t)` with `t = exp(-(|x| + |x|))`, given `x`'s sign: odd exactly,
/// and no overflow (`t <= 1`).
pub fn tanh<R: Real>(math: Math, x: &[R], y: &mut [R]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let a = with_bits(x, |b| b & !SIGN);
        let t = math.exp(-(a + a));
        let r = (R::ONE - t) / (R::ONE + t);
        let sign = x.to_f32().to_bits() & SIGN;
        *y = with_bits(r, |b| (b & !SIGN) | sign);
    }
}

/// The exact GELU, `y = x * Phi(x)` ([`Real::gelu`]): `Phi` of every cell first
/// ([`Real::normal_cdfs`], into `cdf`, which the backward pass reads), then the products.
pub fn gelu<R: Real>(x: &[R], cdf: &mut [R], y: &mut [R]) {
    R::normal_cdfs(x, cdf);
    for ((y, &x), &cdf) in y.iter_mut().zip(x).zip(&*cdf) {
        *y = x * cdf;
    }
}

/// `gx = g * (Phi(x) + (x * phi(x)))` ([`Real::gelu_derivative`]), `x` the layer's input and
/// `cdf` its `Phi(x)` from the forward pass: `phi` of every cell first ([`Real::normal_pdfs`],
/// into `gx`), then the operations in the order written.
pub fn gelu_backward<R: Real>(g: &[R], (x, cdf): (&[R], &[R]), gx: &mut [R]) {
    R::normal_pdfs(x, gx);
    for (((gx, &g), &x), &cdf) in gx.iter_mut().zip(g).zip(x).zip(cdf) {
        *gx = g * (cdf + (x * *gx));
    }
}

/// `gx = g * (1 - (y * y))`.
pub fn tanh_backward<R: Real>(g: &[R], y: &[R], gx: &mut [R]) {
    for ((gx, &g), &y) in gx.iter_mut().zip(g).zip(y) {
        *gx = g * (R::ONE - (y * y));
    }
}

/// The dropout masks of one step (section 15.5).
#[derive(Clone, Copy, Debug)]
pub struct Dropout<R> {
    /// `stream (seed, DROPOUT, step)`'s initial state, with the layer's position hashed in.
    layer_key: u64,
    /// Cells whose 24 random bits fall below this are dropped.
    threshold: u64,
    /// `1 / (1 - p)`.
    scale: R,
}

impl<R: Real> Dropout<R> {
    /// The masks of the layer at `position` in the list, for the step taken after `step` steps.
    pub fn new(p: F32, seed: i64, step: u64, position: usize) -> Dropout<R> {
        let key = Stream::new(seed, Domain::Dropout, step).key();
        Dropout {
            layer_key: mix64(key ^ position as u64),
            threshold: round_scaled(p),
            scale: R::from_f32(F32::ONE / (F32::ONE - p)),
        }
    }

    /// Whether cell `u` of the batch's sample `s` is dropped.
    pub fn dropped(&self, s: usize, u: usize) -> bool {
        let x = mix64(mix64(self.layer_key ^ s as u64) ^ u as u64);
        (x >> 40) < self.threshold
    }

    /// The training-mode outputs of the samples `first..` of the batch (`cells` each).
    pub fn forward(&self, first: usize, cells: usize, x: &[R], y: &mut [R]) {
        self.each(first, cells, x, y);
    }

    /// The input gradient: `+0` where dropped, else `g * scale`.
    pub fn backward(&self, first: usize, cells: usize, g: &[R], gx: &mut [R]) {
        self.each(first, cells, g, gx);
    }

    fn each(&self, first: usize, cells: usize, x: &[R], y: &mut [R]) {
        for (i, (y, &x)) in y.iter_mut().zip(x).enumerate() {
            let (s, u) = (first + i / cells, i % cells);
            *y = if self.dropped(s, u) {
                R::ZERO
            } else {
                x * self.scale
            };
        }
    }
}

/// `round(p * 2^24)`, ties to even: `p`'s bits times 2^24, exactly (an integer with at most 24
/// significant bits shifted), rounded.
fn round_scaled(p: F32) -> u64 {
    let bits = p.to_bits();
    let exponent = ((bits >> 23) & 0xFF) as i32;
    if exponent == 0 && bits & 0x7F_FFFF == 0 {
        return 0;
    }
    // p = m * 2^(e - 150) for normal p (m with the implicit bit), subnormals e = 1 without it;
    // p * 2^24 = m * 2^(e - 126).
    let (m, e) = if exponent == 0 {
        (u64::from(bits & 0x7F_FFFF), 1)
    } else {
        (u64::from(bits & 0x7F_FFFF | 0x80_0000), exponent)
    };
    let shift = 126 - e;
    if shift <= 0 {
        return m << -shift;
    }
    if shift >= 64 {
        return 0;
    }
    let (q, rest) = (m >> shift, m & ((1u64 << shift) - 1));
    let half = 1u64 << (shift - 1);
    q + u64::from(rest > half || (rest == half && q & 1 == 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_round_to_nearest_even() {
        let f = |bits: u32| round_scaled(F32::from_bits(bits));
        assert_eq!(f(0), 0);
        assert_eq!(f(0x3F00_0000), 1 << 23); // 0.5
        assert_eq!(f(0x3E80_0000), 1 << 22); // 0.25
                                             // 0.1 = 13421773 * 2^-27: times 2^24 = 1677721.625 -> 1677722.
        assert_eq!(f(0x3DCC_CCCD), 1_677_722);
        // 2^-25 * 2^24 = 0.5 -> 0 (tie to even); 3 * 2^-25 -> 1.5 -> 2.
        assert_eq!(f(0x3300_0000), 0);
        assert_eq!(f(0x33C0_0000), 2);
        assert_eq!(f(1), 0); // the smallest subnormal
    }
}
