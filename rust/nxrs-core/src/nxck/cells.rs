//! Binary32 cells as the little-endian bytes every NXCK version stores them as.
//!
//! Writers and checksums see a tensor's bytes through [`for_each_le_chunk`]: on a little-endian
//! host that is the tensor's own memory, one piece, no copy; elsewhere the cells are converted
//! in bounded chunks, so no full second copy of a large state is ever built.

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

/// The memory of `cells` as bytes. On a little-endian host these are the cells' LE encoding.
#[cfg(target_endian = "little")]
fn native_bytes(cells: &[F32]) -> &[u8] {
    // SAFETY: F32 is `#[repr(transparent)]` over u32, so `cells` is `4 * len` initialised bytes
    // with no padding; u8 has alignment 1; the returned slice borrows `cells`, so the memory
    // outlives it and cannot be mutated while it lives.
    unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), std::mem::size_of_val(cells)) }
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

/// CRC-32C of the cells' little-endian bytes.
pub(crate) fn crc32c(cells: &[F32]) -> u32 {
    let mut crc = 0;
    let _: Result<(), std::convert::Infallible> = for_each_le_chunk(cells, |bytes| {
        crc = crc32c::crc32c_append(crc, bytes);
        Ok(())
    });
    crc
}

/// Copies the cells' little-endian bytes into `out`, which must be exactly `4 * cells.len()`.
pub(crate) fn copy_le_into(cells: &[F32], out: &mut [u8]) {
    let mut at = 0;
    let _: Result<(), std::convert::Infallible> = for_each_le_chunk(cells, |bytes| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
        Ok(())
    });
}

/// Cells from little-endian bytes; a trailing partial cell (never produced by a validated
/// header) is ignored.
pub(crate) fn decode_le(bytes: &[u8]) -> Vec<F32> {
    bytes
        .chunks_exact(4)
        .map(|c| F32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(n: usize) -> Vec<F32> {
        (0..n as u32)
            .map(|i| F32::from_bits(i.wrapping_mul(0x9E37_79B9)))
            .collect()
    }

    #[test]
    fn both_paths_give_the_same_bytes() {
        // More than one chunk, and not a multiple of the chunk size.
        let cells = cells(CHUNK_CELLS * 2 + 3);
        let mut fast = Vec::new();
        let mut portable = Vec::new();
        let _ = for_each_le_chunk(&cells, |b| {
            fast.extend_from_slice(b);
            Ok::<(), ()>(())
        });
        let _ = for_each_converted_chunk(&cells, |b| {
            portable.extend_from_slice(b);
            Ok::<(), ()>(())
        });
        assert_eq!(fast, portable);
        assert_eq!(&fast[4..8], &cells[1].to_bits().to_le_bytes());
        assert_eq!(decode_le(&fast), cells);
        assert_eq!(crc32c(&cells), crc32c::crc32c(&fast));
        let mut copied = vec![0; fast.len()];
        copy_le_into(&cells, &mut copied);
        assert_eq!(copied, fast);
    }
}
