//! Learning-rate schedules (`docs/TRAINING.md`, section 6), in softf32 from integer step counts.
//!
//! The rate is one scalar per step, so it is always computed in softf32 (whatever arithmetic
//! backend runs the per-cell kernels): every backend then starts each step from the same bits.

use crate::error::{Error, Result};
use crate::softf32::F32;

/// How the rate changes after the warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// The base rate throughout.
    Constant,
    /// Linearly from the base rate at the end of the warm-up to zero at `total_steps`.
    Linear { total_steps: u64 },
    /// Multiplied by `gamma` every `step_size` steps.
    Step { step_size: u64, gamma: F32 },
    /// nanoGPT's: half a cosine period from the base rate at the end of the warm-up down to
    /// `min_lr` at `total_steps`, then `min_lr`.
    Cosine { total_steps: u64, min_lr: F32 },
}

crate::names::names! {
    /// The name of a [`Decay`], the configuration's `schedule` setting.
    pub enum DecayKind {
        Constant = "constant",
        Linear = "linear",
        Step = "step",
        Cosine = "cosine",
    }
}

impl DecayKind {
    /// The settings this decay takes, for the message refusing others.
    pub fn takes(self) -> &'static str {
        match self {
            DecayKind::Constant => "no total_steps, step_size, gamma or min_lr",
            DecayKind::Linear => "total_steps (and no step_size, gamma or min_lr)",
            DecayKind::Step => "step_size and gamma (and no total_steps or min_lr)",
            DecayKind::Cosine => "total_steps and min_lr (and no step_size or gamma)",
        }
    }
}

impl Decay {
    pub fn kind(self) -> DecayKind {
        match self {
            Decay::Constant => DecayKind::Constant,
            Decay::Linear { .. } => DecayKind::Linear,
            Decay::Step { .. } => DecayKind::Step,
            Decay::Cosine { .. } => DecayKind::Cosine,
        }
    }

    /// The step at which a linear or cosine decay ends.
    fn total_steps(self) -> Option<u64> {
        match self {
            Decay::Linear { total_steps } | Decay::Cosine { total_steps, .. } => Some(total_steps),
            _ => None,
        }
    }
}

/// A linear warm-up over `warmup_steps` steps, then a [`Decay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub warmup_steps: u64,
    pub decay: Decay,
}

impl Schedule {
    /// The base rate at every step (the seed's).
    pub const CONSTANT: Schedule = Schedule {
        warmup_steps: 0,
        decay: Decay::Constant,
    };

    /// Checks what the definition needs for the base rate `lr`: a linear or cosine decay ends
    /// after the warm-up, a step decay has a positive period and a finite positive factor, a
    /// cosine decay's `min_lr` is 0 or, as `lr`, normal (a subnormal would hold fewer than 24
    /// significant bits of the value given), and at most `lr`.
    pub fn validate(&self, lr: F32) -> Result<()> {
        let counts = [
            ("warmup_steps", self.warmup_steps),
            ("total_steps", self.decay.total_steps().unwrap_or(0)),
            (
                "step_size",
                match self.decay {
                    Decay::Step { step_size, .. } => step_size,
                    _ => 0,
                },
            ),
        ];
        // Step counts are i64 in the state; larger periods could never be reached.
        if let Some((name, n)) = counts.into_iter().find(|&(_, n)| n > i64::MAX as u64) {
            return Err(Error::Config(format!("{name} = {n} exceeds 2^63 - 1")));
        }
        if let Some(total_steps) = self.decay.total_steps() {
            if total_steps <= self.warmup_steps {
                return Err(Error::Config(format!(
                    "total_steps = {total_steps} must be greater than warmup_steps = {}",
                    self.warmup_steps
                )));
            }
        }
        match self.decay {
            Decay::Constant | Decay::Linear { .. } => Ok(()),
            Decay::Cosine { min_lr, .. }
                if !(min_lr.is_zero()
                    || F32::MIN_POSITIVE.ieee_le(min_lr) && min_lr.ieee_le(lr)) =>
            {
                Err(Error::Config(format!(
                    "min_lr = {min_lr} (as binary32) must be 0, or normal and at most lr = {lr}"
                )))
            }
            Decay::Cosine { .. } => Ok(()),
            Decay::Step { step_size: 0, .. } => {
                Err(Error::Config("step_size must be at least 1".into()))
            }
            Decay::Step { gamma, .. }
                if !(gamma.ieee_lt(F32::INFINITY) && F32::ZERO.ieee_lt(gamma)) =>
            {
                Err(Error::Config(format!(
                    "gamma = {} must be finite and greater than 0",
                    f32::from_bits(gamma.to_bits())
                )))
            }
            Decay::Step { .. } => Ok(()),
        }
    }

    /// The rate of the step that follows `t` completed steps: `(lr * warmup) * decay`; after a
    /// cosine decay's warm-up, the cosine curve's rate instead.
    pub fn rate(&self, lr: F32, t: u64) -> F32 {
        let warmup = if t < self.warmup_steps {
            ratio(t + 1, self.warmup_steps)
        } else {
            F32::ONE
        };
        let decay = match self.decay {
            Decay::Constant => F32::ONE,
            Decay::Linear { .. } | Decay::Cosine { .. } if t < self.warmup_steps => F32::ONE,
            Decay::Cosine {
                total_steps,
                min_lr,
            } => {
                return cosine(
                    lr,
                    min_lr,
                    t - self.warmup_steps,
                    total_steps - self.warmup_steps,
                )
            }
            Decay::Linear { total_steps } if t < total_steps => {
                ratio(total_steps - t, total_steps - self.warmup_steps)
            }
            Decay::Linear { .. } => F32::ZERO,
            Decay::Step { step_size, gamma } => power(gamma, t / step_size),
        };
        (lr * warmup) * decay
    }
}

/// nanoGPT's cosine decay `k` steps into a decay of `n` steps: for `k <= n`,
/// `min_lr + (0.5 * (1 + cos(π k / n))) * (lr - min_lr)` in binary32 operations in that order,
/// the cosine from [`F32::cos_pi_ratio`]; `min_lr` after.
fn cosine(lr: F32, min_lr: F32, k: u64, n: u64) -> F32 {
    if k > n {
        return min_lr;
    }
    let half = F32::from_bits(0x3F00_0000);
    let coefficient = half * (F32::ONE + F32::cos_pi_ratio(k, n));
    min_lr + coefficient * (lr - min_lr)
}

/// `f32(n) / f32(d)`, the integers rounded to binary32 as the definition's `f32(k)`. Both are
/// step counts, below 2^63 by [`Schedule::validate`] and the state's `i64` counter.
fn ratio(n: u64, d: u64) -> F32 {
    F32::from_i64(n as i64) / F32::from_i64(d as i64)
}

/// `x^n` by binary exponentiation from the most significant bit of `n` (one square per bit, one
/// multiplication per set bit), the order the definition fixes.
fn power(x: F32, n: u64) -> F32 {
    let mut r = F32::ONE;
    for bit in (0..u64::BITS - n.leading_zeros()).rev() {
        r = r * r;
        if n >> bit & 1 == 1 {
            r = r * x;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    const HALF: u32 = 0x3F00_0000;

    #[test]
    fn constant_is_the_base_rate_bit_for_bit() {
        let lr = f(0x3C23_D70A); // 0.01
        for t in [0, 1, 1 << 40] {
            assert_eq!(Schedule::CONSTANT.rate(lr, t), lr);
        }
    }

    #[test]
    fn warmup_ramps_in_steps_of_one_over_warmup() {
        let s = Schedule {
            warmup_steps: 4,
            decay: Decay::Constant,
        };
        // lr = 0.5: 0.5 * 1/4, 0.5 * 2/4, 0.5 * 3/4, then 0.5 (all exact in binary32).
        let expected = [0x3E00_0000, 0x3E80_0000, 0x3EC0_0000, HALF, HALF];
        for (t, bits) in expected.into_iter().enumerate() {
            assert_eq!(s.rate(f(HALF), t as u64).to_bits(), bits, "t = {t}");
        }
    }

    #[test]
    fn linear_decay_reaches_zero_at_total_steps() {
        let s = Schedule {
            warmup_steps: 2,
            decay: Decay::Linear { total_steps: 6 },
        };
        // t = 0, 1: warm-up 1/2, 2/2; t = 2..5: (6 - t) / 4; t >= 6: 0.
        let expected = [0.25, 0.5, 0.5, 0.375, 0.25, 0.125, 0.0, 0.0];
        for (t, x) in expected.into_iter().enumerate() {
            let bits = (x as f32).to_bits();
            assert_eq!(s.rate(f(HALF), t as u64).to_bits(), bits, "t = {t}");
        }
    }

    #[test]
    fn step_decay_multiplies_by_gamma_every_period() {
        let s = Schedule {
            warmup_steps: 0,
            decay: Decay::Step {
                step_size: 3,
                gamma: f(HALF),
            },
        };
        // 1, 1, 1, 1/2, 1/2, 1/2, 1/4, ... times lr = 1.
        for t in 0..30u64 {
            let expected = 0x3F80_0000 - (((t / 3) as u32) << 23);
            assert_eq!(s.rate(F32::ONE, t).to_bits(), expected, "t = {t}");
        }
    }

    #[test]
    fn power_squares_from_the_top_bit() {
        // The order is part of the definition (other orders can round differently):
        // x^0 = 1, x^1 = 1*1*x, x^2 = (1*1*x)^2, x^5 = ((x^2)^2) * x.
        let x = f(0x3F66_6666);
        assert_eq!(power(x, 0), F32::ONE);
        assert_eq!(power(x, 1), x);
        assert_eq!(power(x, 2), x * x);
        assert_eq!(power(x, 5), ((x * x) * (x * x)) * x);
    }

    #[test]
    fn validation_names_the_problem() {
        let linear = Schedule {
            warmup_steps: 5,
            decay: Decay::Linear { total_steps: 5 },
        };
        assert!(
            matches!(linear.validate(F32::ONE), Err(Error::Config(m)) if m.contains("total_steps"))
        );
        let step = |step_size, gamma| Schedule {
            warmup_steps: 0,
            decay: Decay::Step { step_size, gamma },
        };
        assert!(step(0, f(HALF)).validate(F32::ONE).is_err());
        assert!(step(1, F32::ZERO).validate(F32::ONE).is_err());
        assert!(step(1, F32::INFINITY).validate(F32::ONE).is_err());
        assert!(step(1, F32::DEFAULT_NAN).validate(F32::ONE).is_err());
        assert!(step(1, f(HALF)).validate(F32::ONE).is_ok());
        assert!(Schedule::CONSTANT.validate(F32::ONE).is_ok());
        let cosine = |warmup_steps, total_steps, min_lr| Schedule {
            warmup_steps,
            decay: Decay::Cosine {
                total_steps,
                min_lr,
            },
        };
        let lr = f(HALF);
        assert!(cosine(3, 3, F32::ZERO).validate(lr).is_err());
        assert!(cosine(0, 1, F32::ZERO).validate(lr).is_ok());
        assert!(cosine(2, 3, lr).validate(lr).is_ok());
        assert!(cosine(2, 3, F32::NEG_ZERO).validate(lr).is_ok());
        for bad in [
            F32::ONE,
            F32::INFINITY,
            F32::DEFAULT_NAN,
            f(1),
            f(0xBF00_0000),
        ] {
            let message = match cosine(0, 3, bad).validate(lr) {
                Err(Error::Config(m)) => m,
                other => panic!("{other:?}"),
            };
            assert!(message.starts_with("min_lr = "), "{message}");
        }
    }

    #[test]
    fn cosine_decay_follows_half_a_period_to_min_lr() {
        let s = |min_lr| Schedule {
            warmup_steps: 2,
            decay: Decay::Cosine {
                total_steps: 5,
                min_lr,
            },
        };
        // lr = 1, min_lr = 0, W = 2, T = 5: warm-up 1/2, 2/2; then 0.5 (1 + cos(πk/3)) for
        // k = 0..3: 1, 3/4, 1/4, 0 (cos(π/3) = 1/2 exactly); then 0.
        let expected = [0.5f32, 1.0, 1.0, 0.75, 0.25, 0.0, 0.0, 0.0];
        for (t, x) in expected.into_iter().enumerate() {
            assert_eq!(
                s(F32::ZERO).rate(F32::ONE, t as u64).to_bits(),
                x.to_bits(),
                "t = {t}"
            );
        }
        // min_lr = 1/4: 1/4 + c * 3/4 after the warm-up, 1/4 from T on.
        let expected = [0.5f32, 1.0, 1.0, 0.8125, 0.4375, 0.25, 0.25, 0.25];
        for (t, x) in expected.into_iter().enumerate() {
            let rate = s(F32::from_bits(0x3E80_0000)).rate(F32::ONE, t as u64);
            assert_eq!(rate.to_bits(), x.to_bits(), "t = {t}");
        }
        // Far past T, without overflow of the step difference.
        assert_eq!(s(F32::ZERO).rate(F32::ONE, u64::MAX >> 1), F32::ZERO);
    }
}
