//! Comparisons: the IEEE predicates, and the seed's sign-of-difference `le`.

use super::F32;

impl F32 {
    /// IEEE `==`: false if either is NaN; `+0 == -0`.
    pub fn ieee_eq(self, rhs: F32) -> bool {
        if self.is_nan() || rhs.is_nan() {
            return false;
        }
        self == rhs || (self.is_zero() && rhs.is_zero())
    }

    /// IEEE `<`: false if either is NaN (unordered).
    pub fn ieee_lt(self, rhs: F32) -> bool {
        if self.is_nan() || rhs.is_nan() || (self.is_zero() && rhs.is_zero()) {
            return false;
        }
        self.total_key() < rhs.total_key()
    }

    /// IEEE `<=`: false if either is NaN (unordered).
    pub fn ieee_le(self, rhs: F32) -> bool {
        self.ieee_lt(rhs) || self.ieee_eq(rhs)
    }

    /// The seed's `f32_le(x, y)`, which is NOT IEEE `<=`: it computes `d = x - y` and answers
    /// true when `d` has its sign bit set or is a zero. It differs from `<=` for NaN operands
    /// (the default NaN has its sign bit set, so it answers true), for `inf <= inf` (`inf - inf`
    /// is the default NaN: true), and wherever `x - y` overflows. The seed uses it for ReLU, ReLU's
    /// derivative and the softmax maximum, so reproducing the seed needs exactly this.
    pub fn le_by_sign_of_difference(self, rhs: F32) -> bool {
        (self - rhs).is_sign_negative_or_zero()
    }

    /// The seed's answer for a difference `d = x - y`: `x <= y` when `d` has its sign bit set
    /// or is a zero (see [`F32::le_by_sign_of_difference`]).
    #[inline]
    pub const fn is_sign_negative_or_zero(self) -> bool {
        self.is_sign_negative() || self.is_zero()
    }

    /// Maps non-NaN values to integers in the same order (the IEEE total order restricted to
    /// non-NaN values, with -0 below +0).
    fn total_key(self) -> i64 {
        let magnitude = i64::from(self.abs().to_bits());
        if self.is_sign_negative() {
            -magnitude - 1
        } else {
            magnitude
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ieee_predicates() {
        let two = F32::from_i32(2);
        let minus_one = F32::from_i32(-1);
        assert!(minus_one.ieee_lt(two) && !two.ieee_lt(minus_one));
        assert!(F32::NEG_ZERO.ieee_eq(F32::ZERO) && !F32::NEG_ZERO.ieee_lt(F32::ZERO));
        assert!(F32::ZERO.ieee_le(F32::NEG_ZERO));
        assert!(!F32::DEFAULT_NAN.ieee_eq(F32::DEFAULT_NAN));
        assert!(!F32::DEFAULT_NAN.ieee_le(two) && !two.ieee_le(F32::DEFAULT_NAN));
        assert!(F32::NEG_INFINITY.ieee_lt(minus_one));
    }

    #[test]
    fn sign_of_difference_differs_from_ieee() {
        assert!(F32::INFINITY.le_by_sign_of_difference(F32::INFINITY));
        assert!(F32::DEFAULT_NAN.le_by_sign_of_difference(F32::ONE));
        assert!(F32::ONE.le_by_sign_of_difference(F32::ONE));
        assert!(!F32::ONE.le_by_sign_of_difference(F32::ZERO));
        // A positive NaN operand gives a positive NaN difference: false, unlike the default NaN.
        assert!(!F32::ONE.le_by_sign_of_difference(F32::from_bits(0x7FC0_0000)));
    }
}
