//! The bytes of a file to be written, described as a head and pieces that borrow the training
//! state.
//!
//! A checkpoint is a small head (prelude and header) followed by tensors that already live in
//! memory. Describing it as pieces lets each write strategy of [`super::writer`] take the
//! tensors straight from the state (a stream of large `write`s, or copies into a mapping)
//! without first assembling the whole file in a second buffer.
//!
//! A v2 head carries the tensors' CRC-32Cs, but its length does not depend on them (see
//! `docs/FORMAT.md`, "Writing"): the head can be written last, once the checksums, computed
//! on another thread while the tensors are written, are known.

use super::cells;
use crate::softf32::F32;
use std::io::{self, Write};

/// One run of a file's bytes after its head.
#[derive(Debug)]
pub(crate) enum Piece<'a> {
    /// Zero bytes (alignment padding).
    Zeros(usize),
    /// Binary32 cells, stored as their little-endian bit patterns.
    Cells(&'a [F32]),
}

impl Piece<'_> {
    fn len(&self) -> usize {
        match self {
            Piece::Zeros(n) => *n,
            Piece::Cells(c) => 4 * c.len(),
        }
    }
}

/// Builds a head from the CRC-32C of every `Cells` piece, in order.
type BuildHead<'a> = Box<dyn Fn(&[u32]) -> Vec<u8> + 'a>;

/// The first bytes of a file.
enum Head<'a> {
    /// Known in advance (v1).
    Ready(Vec<u8>),
    /// Known once the tensors' CRC-32Cs are (v2); always `len` bytes.
    AfterChecksums { len: usize, build: BuildHead<'a> },
}

/// A whole file: its head, then pieces, in order.
pub(crate) struct Payload<'a> {
    head: Head<'a>,
    pieces: Vec<Piece<'a>>,
}

impl<'a> Payload<'a> {
    /// A file that starts with `head`.
    pub(crate) fn new(head: Vec<u8>) -> Payload<'a> {
        Payload {
            head: Head::Ready(head),
            pieces: Vec::new(),
        }
    }

    /// A file whose first `len` bytes are `build(crcs)`, `crcs` being the CRC-32C of each
    /// `Cells` piece in order. `build` must return exactly `len` bytes.
    pub(crate) fn with_checksummed_head(
        len: usize,
        build: impl Fn(&[u32]) -> Vec<u8> + 'a,
    ) -> Payload<'a> {
        Payload {
            head: Head::AfterChecksums {
                len,
                build: Box::new(build),
            },
            pieces: Vec::new(),
        }
    }

    /// Appends a piece. Empty padding is dropped; a tensor is kept even when it has no cells,
    /// since the head has a checksum for every tensor (a record may hold a 0-cell tensor).
    pub(crate) fn push(&mut self, piece: Piece<'a>) {
        if piece.len() > 0 || matches!(piece, Piece::Cells(_)) {
            self.pieces.push(piece);
        }
    }

    /// Length of the head: where the pieces start.
    pub(crate) fn head_len(&self) -> usize {
        match &self.head {
            Head::Ready(bytes) => bytes.len(),
            Head::AfterChecksums { len, .. } => *len,
        }
    }

    /// Total length in bytes.
    pub(crate) fn len(&self) -> u64 {
        let body: u64 = self.pieces.iter().map(|p| p.len() as u64).sum();
        self.head_len() as u64 + body
    }

    /// Whether the head needs [`Payload::checksums`].
    pub(crate) fn needs_checksums(&self) -> bool {
        matches!(self.head, Head::AfterChecksums { .. })
    }

    /// The tensors (the `Cells` pieces), in order: what [`Payload::checksums`] reads. Plain
    /// slices, to be handed to another thread.
    pub(crate) fn cells(&self) -> Vec<&'a [F32]> {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Cells(c) => Some(*c),
                Piece::Zeros(_) => None,
            })
            .collect()
    }

    /// The CRC-32C of each of `cells` (from [`Payload::cells`]).
    pub(crate) fn checksums(cells: &[&[F32]]) -> Vec<u32> {
        cells.iter().map(|c| cells::crc32c(c)).collect()
    }

    /// The head's bytes, given the checksums of [`Payload::checksums`] (ignored by a head
    /// that needs none).
    pub(crate) fn head(&self, crcs: &[u32]) -> Vec<u8> {
        match &self.head {
            Head::Ready(bytes) => bytes.clone(),
            Head::AfterChecksums { len, build } => {
                let bytes = build(crcs);
                assert_eq!(bytes.len(), *len, "a head of another length than laid out");
                bytes
            }
        }
    }

    /// Streams the pieces after the head (`len() - head_len()` bytes) to `out`: one
    /// `write_all` per piece (whole tensors at once on little-endian hosts); wrap `out` in a
    /// `BufWriter` to merge the small pieces.
    pub(crate) fn write_body_to(&self, out: &mut impl Write) -> io::Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        for piece in &self.pieces {
            match piece {
                Piece::Zeros(mut n) => {
                    while n > 0 {
                        let k = n.min(ZEROS.len());
                        out.write_all(&ZEROS[..k])?;
                        n -= k;
                    }
                }
                Piece::Cells(c) => {
                    crate::cell_bytes::for_each_le_chunk(c, |bytes| out.write_all(bytes))?
                }
            }
        }
        Ok(())
    }

    /// The whole file in memory (tests, fuzz seeds, small files).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let crcs = if self.needs_checksums() {
            Payload::checksums(&self.cells())
        } else {
            Vec::new()
        };
        let mut out = Vec::with_capacity(self.len() as usize);
        out.extend_from_slice(&self.head(&crcs));
        self.write_body_to(&mut out)
            .expect("writing to a Vec cannot fail");
        out
    }
}

impl std::fmt::Debug for Payload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payload")
            .field("head_len", &self.head_len())
            .field("needs_checksums", &self.needs_checksums())
            .field("pieces", &self.pieces)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_body_make_the_file() {
        let cells = [F32::from_bits(0x0102_0304), F32::ONE];
        let mut p = Payload::new(b"ab".to_vec());
        p.push(Piece::Zeros(70));
        p.push(Piece::Cells(&cells));
        p.push(Piece::Zeros(0));
        let streamed = p.to_vec();
        assert_eq!(streamed.len() as u64, p.len());
        assert_eq!(&streamed[72..76], &[4, 3, 2, 1]);
        let mut body = Vec::new();
        p.write_body_to(&mut body).unwrap();
        assert_eq!([p.head(&[]), body].concat(), streamed);
    }

    #[test]
    fn a_checksummed_head_gets_every_tensors_crc() {
        let (a, b) = ([F32::ONE; 3], [F32::from_bits(7)]);
        let mut p = Payload::with_checksummed_head(8, |crcs: &[u32]| {
            crcs.iter().flat_map(|c| c.to_le_bytes()).collect()
        });
        p.push(Piece::Cells(&a));
        p.push(Piece::Zeros(4));
        p.push(Piece::Cells(&b));
        assert!(p.needs_checksums());
        let bytes = p.to_vec();
        assert_eq!(bytes.len() as u64, p.len());
        assert_eq!(&bytes[..4], &cells::crc32c(&a).to_le_bytes());
        assert_eq!(&bytes[4..8], &cells::crc32c(&b).to_le_bytes());
    }
}
