//! The blocked matrix product gives the definition's bits on every path: for random shapes (1 to
//! 300 in each dimension, primes and powers of two, so every edge tile and every cache block's
//! end), strided operands (transposed views, rows of a larger matrix, padded output rows), every
//! start and operand order, and cells that are ordinary values or any bit pattern (NaN payloads,
//! infinities, signed zeros, subnormals), the product computed by each path this CPU has
//! ([`Isa::supported`]), by the small products' row kernel and by softf32's kernels equals the plain triple loop in softf32
//! ([`MatMul::by_elements`]), bit for bit. The self-check's own products are checked on every
//! path too.

use nxrs_core::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
use nxrs_core::arith::Real;
use nxrs_core::backend::{self, FpEnvGuard, Isa, Native};
use nxrs_core::F32;
use proptest::prelude::*;

/// A dimension: anything from 1 to 300, or a prime or a power of two near a tile or block edge.
fn dimension() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 1usize..=300,
        1 => prop::sample::select(vec![1usize, 2, 3, 5, 7, 13, 17, 31, 37, 61, 127, 251, 257, 293]),
        1 => prop::sample::select(vec![4usize, 8, 16, 32, 64, 128, 256]),
    ]
}

/// Cells: mostly ordinary values (so long chains rarely end in NaN and the vector lanes' own
/// results are checked), sometimes any bit pattern, or often special values.
fn cell(special: u32) -> impl Strategy<Value = u32> {
    let ordinary = (0x3A00_0000u32..0x4500_0000, any::<bool>())
        .prop_map(|(m, neg)| m | (u32::from(neg) << 31));
    let specials = prop::sample::select(vec![
        0x7FC0_0000u32,
        0xFFC0_0000,
        0x7F80_0001,
        0xFF80_1234,
        0x7FBF_FFFF,
        0x7F80_0000,
        0xFF80_0000,
        0,
        0x8000_0000,
        1,
        0x8000_0001,
        0x007F_FFFF,
        0x7F7F_FFFF,
        0xFF7F_FFFF,
    ]);
    prop_oneof![
        1000 - special => ordinary,
        special => prop_oneof![any::<u32>(), specials],
    ]
}

/// How the operands lie in memory.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// `A` stored transposed (`k x m`) and viewed as `m x k`; the same for `B`.
    a_transposed: bool,
    b_transposed: bool,
    /// Cells before each operand's first row and after each row (strides past the width).
    offset: usize,
    padding: usize,
}

/// One product: shape, layout, start, order and cells.
#[derive(Clone, Debug)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    layout: Layout,
    start: u8,
    order: Order,
    a: Vec<u32>,
    b: Vec<u32>,
    row: Vec<u32>,
    column: Vec<u32>,
    matrix: Vec<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    // Two dimensions up to 300, the third kept small enough for the softf32 reference.
    (dimension(), dimension(), dimension(), 0usize..3)
        .prop_map(|(x, y, z, small)| {
            let mut d = [x, y, z];
            d[small] = d[small].min(1 + 20_000 / (d[(small + 1) % 3] * d[(small + 2) % 3]).max(1));
            (d[0], d[1], d[2])
        })
        .prop_flat_map(|(m, n, k)| {
            let layout = (any::<bool>(), any::<bool>(), 0usize..3, 0usize..4).prop_map(
                |(a_transposed, b_transposed, offset, padding)| Layout {
                    a_transposed,
                    b_transposed,
                    offset,
                    padding,
                },
            );
            let special = prop_oneof![3 => Just(2u32), 1 => Just(150u32), 1 => Just(1000u32)];
            (Just((m, n, k)), layout, 0u8..5, any::<bool>(), special)
        })
        .prop_flat_map(|((m, n, k), layout, start, ab, special)| {
            // Cells for the operands as stored (transposed or not), with their offset and padding.
            let size = |rows: usize, cols: usize, t: bool| {
                let (stored_rows, stored_cols) = if t { (cols, rows) } else { (rows, cols) };
                layout.offset + stored_rows * (stored_cols + layout.padding)
            };
            let (a_len, b_len) = (
                size(m, k, layout.a_transposed),
                size(k, n, layout.b_transposed),
            );
            (
                Just((m, n, k, layout, start, ab)),
                prop::collection::vec(cell(special), a_len),
                prop::collection::vec(cell(special), b_len),
                prop::collection::vec(cell(special), n),
                prop::collection::vec(cell(special), m),
                prop::collection::vec(cell(special), m * n),
            )
        })
        .prop_map(
            |((m, n, k, layout, start, ab), a, b, row, column, matrix)| Case {
                m,
                n,
                k,
                layout,
                start: if k == 0 { start % 4 } else { start },
                order: if ab { Order::AB } else { Order::BA },
                a,
                b,
                row,
                column,
                matrix,
            },
        )
}

impl Case {
    /// A `rows x cols` view of `cells` in this case's layout (stored transposed if asked).
    fn view<'a, R: Real>(
        &self,
        cells: &'a [R],
        rows: usize,
        cols: usize,
        t: bool,
    ) -> Matrix<'a, R> {
        let (stored_rows, stored_cols) = if t { (cols, rows) } else { (rows, cols) };
        let stride = stored_cols + self.layout.padding;
        let stored = Matrix::strided(
            &cells[self.layout.offset..],
            stored_rows,
            stored_cols,
            stride,
            1,
        );
        if t {
            stored.t()
        } else {
            stored
        }
    }

    /// The product's output as bits, computed by `compute` in `R`; the output starts as NaNs with
    /// a payload (cells it must overwrite) in rows `padding` cells longer than `n`.
    fn output<R: Real>(&self, compute: impl FnOnce(MatMul<'_, R>)) -> Vec<u32> {
        let cells = |bits: &[u32]| -> Vec<R> {
            bits.iter()
                .map(|&b| R::from_f32(F32::from_bits(b)))
                .collect()
        };
        let (a, b, row) = (cells(&self.a), cells(&self.b), cells(&self.row));
        let (column, matrix) = (cells(&self.column), cells(&self.matrix));
        let stride = self.n + self.layout.padding;
        let mut c = vec![R::from_f32(F32::from_bits(0x7FC0_0ACE)); self.m * stride];
        let start = match self.start {
            0 => Start::Zero,
            1 => Start::Row(&row),
            2 => Start::Column(&column),
            3 => Start::Matrix(&matrix),
            _ => Start::FirstTerm,
        };
        compute(MatMul::new(
            MatrixMut::strided(&mut c, self.m, self.n, stride),
            start,
            self.view(&a, self.m, self.k, self.layout.a_transposed),
            self.view(&b, self.k, self.n, self.layout.b_transposed),
            self.order,
        ));
        c.iter().map(|x| x.to_f32().to_bits()).collect()
    }
}

/// The first element where `got` differs from `want`, described.
fn first_difference(got: &[u32], want: &[u32]) -> Option<String> {
    (0..want.len())
        .find(|&e| got[e] != want[e])
        .map(|e| format!("cell {e}: {:#010x}, want {:#010x}", got[e], want[e]))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_path_gives_the_definitions_bits(case in case()) {
        let want = case.output::<F32>(|mm| mm.by_elements());
        let soft = case.output::<F32>(|mm| mm.run());
        prop_assert!(first_difference(&soft, &want).is_none(), "softf32 blocked: {:?}", first_difference(&soft, &want));
        let _env = FpEnvGuard::new();
        for isa in Isa::supported() {
            let got = case.output::<Native>(|mm| isa.matmul(mm));
            let diff = first_difference(&got, &want);
            prop_assert!(diff.is_none(), "{}: {}", isa.name(), diff.unwrap_or_default());
        }
        // What the passes call: small products element row by element row, the others blocked.
        let got = case.output::<Native>(|mm| mm.run());
        let diff = first_difference(&got, &want);
        prop_assert!(diff.is_none(), "run: {}", diff.unwrap_or_default());
    }
}

/// The self-check's products (special values in short chains, ordinary ones across cache
/// blocks) on every path this CPU has, each checked the way the self-check checks the one in use.
#[test]
fn the_self_checks_products_hold_on_every_path() {
    let cases = backend::self_check_cases();
    let _env = FpEnvGuard::new();
    for product in backend::product_cases(&cases) {
        let want = product.outputs::<F32>(true);
        for isa in Isa::supported() {
            let (m, n, k) = (product.m, product.n, product.k);
            let cells = |bits: &[u32]| -> Vec<Native> {
                bits.iter()
                    .map(|&b| Native::from_f32(F32::from_bits(b)))
                    .collect()
            };
            let (a, b) = (cells(&product.a), cells(&product.b));
            let mut c = vec![Native::ZERO; m * n];
            isa.matmul(MatMul::new(
                MatrixMut::new(&mut c, m, n),
                Start::Zero,
                Matrix::new(&a, m, k),
                Matrix::new(&b, k, n),
                Order::AB,
            ));
            let got: Vec<u32> = c.iter().map(|x| x.to_f32().to_bits()).collect();
            assert_eq!(
                first_difference(&got, &want[0]),
                None,
                "{} on {m} x {k} x {n}",
                isa.name()
            );
        }
        // The path in use, through every start and order.
        assert_eq!(product.outputs::<Native>(false), want);
    }
}

/// The paths this CPU has are named, the widest first, and a path it lacks is refused.
#[test]
fn paths_are_detected_and_chosen_by_name() {
    let supported = Isa::supported();
    assert_eq!(supported.last(), Some(&Isa::Portable));
    assert_eq!(Isa::choose(None), Ok(supported[0]));
    for isa in Isa::ALL {
        let chosen = Isa::choose(Some(isa.name()));
        assert_eq!(chosen.is_ok(), isa.available(), "{chosen:?}");
    }
    let err = Isa::choose(Some("sse9")).unwrap_err();
    assert_eq!(
        err,
        "NXRS_ISA=\"sse9\" is not one of avx512, avx2, portable"
    );
}
