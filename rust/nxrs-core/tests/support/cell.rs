//! The cells of the layer tests' random cases.

use proptest::prelude::*;

/// A cell: mostly ordinary values, sometimes any bit pattern or a special value.
pub fn cell() -> impl Strategy<Value = u32> {
    let ordinary = (0x3C00_0000u32..0x4100_0000, any::<bool>())
        .prop_map(|(m, neg)| m | (u32::from(neg) << 31));
    let specials = prop::sample::select(vec![
        0x7FC0_0000u32,
        0xFFC0_1234,
        0x7F80_0001,
        0x7F80_0000,
        0xFF80_0000,
        0,
        0x8000_0000,
        1,
        0x8000_0001,
        0x007F_FFFF,
    ]);
    prop_oneof![40 => ordinary, 3 => specials, 1 => any::<u32>()]
}
