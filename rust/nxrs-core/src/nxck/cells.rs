//! Binary32 cells as the little-endian bytes every NXCK version stores them as: their
//! checksums and decoding, and the format's fixed-width fields. Writers see a tensor's bytes
//! through [`crate::cell_bytes`], the one encoding of cells as bytes.

use crate::cell_bytes::write_cells;
use crate::softf32::F32;

/// CRC-32C of the cells' little-endian bytes.
pub(crate) fn crc32c(cells: &[F32]) -> u32 {
    let mut crc = 0;
    write_cells(cells, &mut |bytes| crc = crc32c::crc32c_append(crc, bytes));
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
    use crate::cell_bytes::tests::{cells, le_bytes};

    #[test]
    fn decoding_and_checksums_read_the_encoded_bytes() {
        // More than a portable chunk of cells, and not a multiple of it.
        let cells = cells((1 << 17) + 3);
        let bytes = le_bytes(&cells);
        assert_eq!(decode_le(&bytes), cells);
        let mut portable_cells = vec![F32::ZERO; cells.len()];
        decode_le_into(&bytes, &mut portable_cells);
        assert_eq!(portable_cells, cells);
        // A trailing partial cell is ignored.
        assert_eq!(decode_le(&bytes[..9]), &cells[..2]);
        assert_eq!(crc32c(&cells), crc32c::crc32c(&bytes));
    }
}
