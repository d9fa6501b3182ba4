//! State hashes: the seed's `hstate`, and nxrs's hash over the whole training state.

use crate::fnv::Fnv1a64;
use crate::state::TrainState;

/// The seed's `hstate`, bit for bit: an FNV-1-style mix over the weight and bias tensors,
/// `acc = ((acc ^ v) * 16777619) mod 2^56` from `1469598103`.
///
/// It reproduces the seed's quirk: every weight matrix is walked for as many cells as the first
/// one has (the seed walks `W2` for `NH*NIN = 60` cells though it holds 40; the 20 cells past its
/// end are zero memory). Cells beyond a matrix's end count as 0, and a longer matrix is cut off.
/// It sees neither the Adam moments nor the scalars: see [`state_hash`] for that.
pub fn seed_hash(state: &TrainState) -> u64 {
    const MASK_56: u64 = (1 << 56) - 1;
    let walked_weight_cells = state.params[0].w.len();
    let mut acc: u64 = 1_469_598_103;
    for layer in &state.params {
        let weights = (0..walked_weight_cells).map(|c| layer.w.get(c).map_or(0, |x| x.to_bits()));
        let biases = layer.b.iter().map(|x| x.to_bits());
        for v in weights.chain(biases) {
            acc = ((acc ^ u64::from(v)).wrapping_mul(16_777_619)) & MASK_56;
        }
    }
    acc
}

/// The full-state hash: 64-bit FNV-1a over a canonical encoding of everything a checkpoint
/// holds, so that any changed bit of any weight, moment or scalar changes it.
///
/// Encoding (all little-endian, `docs/TRAINING.md` section 11): `u32` tensor count; per tensor
/// in checkpoint order (`W1 b1 W2 b2 ... mW1 vW1 mb1 vb1 ...`) its `u32` cell count then its
/// cells' `u32` bit patterns; `u32` scalar count (5); the scalars as `i64`: epoch, `b1t` bits,
/// `b2t` bits, step, batch.
/// FNV-1a multiplies by an odd prime modulo 2^64 after each byte, a bijection, so two encodings
/// of equal length that differ in any byte always hash differently.
pub fn state_hash(state: &TrainState) -> u64 {
    let mut h = Fnv1a64::new();
    let tensors = state.tensors();
    h.write(&(tensors.len() as u32).to_le_bytes());
    for cells in &tensors {
        h.write(&(cells.len() as u32).to_le_bytes());
        for cell in cells.iter() {
            h.write(&cell.to_bits().to_le_bytes());
        }
    }
    let scalars = state.scalars();
    h.write(&(scalars.len() as u32).to_le_bytes());
    for s in scalars {
        h.write(&s.to_le_bytes());
    }
    h.finish()
}
