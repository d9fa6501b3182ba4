//! Binary32 cells as little-endian bytes: how checkpoint files store them, and how digests and
//! data fingerprints encode them (one encoding, so a file's bytes and a digest's agree).
//!
//! Readers of the bytes get them through [`for_each_le_chunk`]: on a little-endian host that is
//! the cells' own memory, one piece, no copy; elsewhere the cells are converted in bounded
//! chunks, so no full second copy of a large state is ever built. This module depends on
//! nothing but the arithmetic's type, so the data, the digests and the file formats can all use
//! it without depending on each other.

use crate::softf32::F32;

/// Cells per converted chunk on the portable path (256 KiB of bytes).
const CHUNK_CELLS: usize = 1 << 16;

/// Calls `f` with the little-endian bytes of `cells`, in order, in as few pieces as possible.
pub(crate) fn for_each_le_chunk<E>(
    cells: &[F32],
    f: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    #[cfg(target_endian = "little")]
    {
        let mut f = f;
        f(native_bytes(cells))
    }
    #[cfg(not(target_endian = "little"))]
    {
        for_each_converted_chunk(cells, f)
    }
}

/// [`for_each_le_chunk`] for a `write` that cannot fail (a hash being fed).
pub(crate) fn write_cells(cells: &[F32], write: &mut dyn FnMut(&[u8])) {
    let _: Result<(), core::convert::Infallible> = for_each_le_chunk(cells, |bytes| {
        write(bytes);
        Ok(())
    });
}

/// The memory of `cells` as bytes. On a little-endian host these are the cells' LE encoding.
#[cfg(target_endian = "little")]
fn native_bytes(cells: &[F32]) -> &[u8] {
    bytemuck::cast_slice(cells)
}

/// The portable path: converts bounded chunks into a scratch buffer (big-endian hosts).
#[cfg_attr(target_endian = "little", allow(dead_code))]
fn for_each_converted_chunk<E>(
    cells: &[F32],
    mut f: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let mut buf = Vec::with_capacity(4 * cells.len().min(CHUNK_CELLS));
    for chunk in cells.chunks(CHUNK_CELLS) {
        buf.clear();
        buf.extend(chunk.iter().flat_map(|c| c.to_bits().to_le_bytes()));
        f(&buf)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` cells of varied bit patterns.
    pub(crate) fn cells(n: usize) -> Vec<F32> {
        (0..n as u32)
            .map(|i| F32::from_bits(i.wrapping_mul(0x9E37_79B9)))
            .collect()
    }

    /// The bytes both paths give `cells`, after checking that they agree.
    pub(crate) fn le_bytes(cells: &[F32]) -> Vec<u8> {
        let mut fast = Vec::new();
        let mut portable = Vec::new();
        write_cells(cells, &mut |b| fast.extend_from_slice(b));
        let _ = for_each_converted_chunk(cells, |b| {
            portable.extend_from_slice(b);
            Ok::<(), ()>(())
        });
        assert_eq!(fast, portable);
        fast
    }

    #[test]
    fn both_paths_give_the_same_bytes() {
        // More than one chunk, and not a multiple of the chunk size.
        let cells = cells(CHUNK_CELLS * 2 + 3);
        let bytes = le_bytes(&cells);
        assert_eq!(bytes.len(), 4 * cells.len());
        assert_eq!(&bytes[4..8], &cells[1].to_bits().to_le_bytes());
    }
}
