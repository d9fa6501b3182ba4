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

/// CRC-32C of the cells' little-endian bytes.
pub(crate) fn crc32c(cells: &[F32]) -> u32 {
    let mut crc = 0;
    let _: Result<(), std::convert::Infallible> = for_each_le_chunk(cells, |bytes| {
        crc = crc32c::crc32c_append(crc, bytes);
        Ok(())
    });
    crc
}

/// Cells from little-endian bytes; a trailing partial cell (never produced by a validated
/// header) is ignored.
///
/// The buffer is allocated zeroed (`calloc`: large ones are fresh pages, not written twice),
/// then on a little-endian host the bytes are copied straight in (`memcpy`).
pub(crate) fn decode_le(bytes: &[u8]) -> Vec<F32> {
    let mut cells: Vec<F32> = bytemuck::zeroed_vec(bytes.len() / 4);
    advise_huge_pages(&mut cells);
    #[cfg(target_endian = "little")]
    {
        let n = 4 * cells.len();
        bytemuck::cast_slice_mut::<F32, u8>(&mut cells).copy_from_slice(&bytes[..n]);
    }
    #[cfg(not(target_endian = "little"))]
    decode_le_into(bytes, &mut cells);
    cells
}

/// Asks Linux to back a large new tensor with transparent huge pages (`MADV_HUGEPAGE`, the hint
/// numpy gives its large arrays) before it is first written. Where THP is enabled "on madvise"
/// (a common default), this makes a fresh 1 GB state fault in 2 MiB at a time instead of
/// 4 KiB: decoding one takes half the time. Only whole pages inside the allocation are
/// advised; the hint changes no contents. Nothing elsewhere, or for tensors under 4 MiB.
pub(crate) fn advise_huge_pages(cells: &mut [F32]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let len = std::mem::size_of_val(cells);
        if len < 4 << 20 {
            return;
        }
        let start = (cells.as_mut_ptr() as usize).next_multiple_of(PAGE);
        let end = (cells.as_mut_ptr() as usize + len) / PAGE * PAGE;
        // SAFETY: [start, end) is whole pages inside `cells`' allocation, which we own mutably;
        // MADV_HUGEPAGE only sets how future page faults there are served, never the contents.
        // A failure (THP not built in) leaves ordinary pages: nothing to report.
        let _ =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cells;
    }
}

/// Cells whose memory holds their little-endian bit patterns (bytes read from a file straight
/// into them), made native: nothing on a little-endian host, a byte swap of each elsewhere.
pub(crate) fn from_le_in_place(cells: &mut [F32]) {
    #[cfg(not(target_endian = "little"))]
    for cell in cells.iter_mut() {
        *cell = F32::from_bits(u32::from_le(cell.to_bits()));
    }
    #[cfg(target_endian = "little")]
    let _ = cells;
}

/// The little-endian integer of `N` bytes at `at` (the caller has checked that they exist):
/// the one place the format's fixed-width fields are read.
pub(crate) fn le_bytes<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    std::array::from_fn(|k| bytes[at + k])
}

pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(le_bytes(bytes, at))
}

pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(le_bytes(bytes, at))
}

pub(crate) fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(le_bytes(bytes, at))
}

/// The portable path of [`decode_le`]: cell by cell (big-endian hosts).
#[cfg_attr(target_endian = "little", allow(dead_code))]
fn decode_le_into(bytes: &[u8], cells: &mut [F32]) {
    for (cell, b) in cells.iter_mut().zip(bytes.chunks_exact(4)) {
        *cell = F32::from_bits(u32_at(b, 0));
    }
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
        let mut portable_cells = vec![F32::ZERO; cells.len()];
        decode_le_into(&fast, &mut portable_cells);
        assert_eq!(portable_cells, cells);
        // A trailing partial cell is ignored.
        assert_eq!(decode_le(&fast[..9]), &cells[..2]);
        assert_eq!(crc32c(&cells), crc32c::crc32c(&fast));
    }
}
