//! The bytes of a file to be written, described as pieces that borrow the training state.
//!
//! A checkpoint is a small header followed by tensors that already live in memory. Describing
//! it as pieces lets each write strategy of [`super::writer`] take the tensors straight from the
//! state (a stream of large `write`s, or copies into a mapping) without first assembling the
//! whole file in a second buffer.

use super::cells;
use crate::softf32::F32;
use std::io::{self, Write};

/// One run of a file's bytes.
#[derive(Debug)]
pub(crate) enum Piece<'a> {
    /// Bytes built for this file (prelude, header).
    Bytes(Vec<u8>),
    /// Zero bytes (alignment padding).
    Zeros(usize),
    /// Binary32 cells, stored as their little-endian bit patterns.
    Cells(&'a [F32]),
}

impl Piece<'_> {
    fn len(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::Zeros(n) => *n,
            Piece::Cells(c) => 4 * c.len(),
        }
    }
}

/// A whole file as pieces, in order.
#[derive(Debug, Default)]
pub(crate) struct Payload<'a> {
    pieces: Vec<Piece<'a>>,
}

impl<'a> Payload<'a> {
    pub(crate) fn push(&mut self, piece: Piece<'a>) {
        if piece.len() > 0 {
            self.pieces.push(piece);
        }
    }

    /// Total length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.pieces.iter().map(|p| p.len() as u64).sum()
    }

    /// Streams the file to `out`: one `write_all` per piece (whole tensors at once on
    /// little-endian hosts); wrap `out` in a `BufWriter` to merge the small pieces.
    pub(crate) fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        for piece in &self.pieces {
            match piece {
                Piece::Bytes(b) => out.write_all(b)?,
                Piece::Zeros(mut n) => {
                    while n > 0 {
                        let k = n.min(ZEROS.len());
                        out.write_all(&ZEROS[..k])?;
                        n -= k;
                    }
                }
                Piece::Cells(c) => cells::for_each_le_chunk(c, |bytes| out.write_all(bytes))?,
            }
        }
        Ok(())
    }

    /// Writes the file into `out`, which must be exactly [`Payload::len`] bytes long.
    pub(crate) fn fill(&self, out: &mut [u8]) {
        let mut at = 0;
        for piece in &self.pieces {
            let dst = &mut out[at..at + piece.len()];
            match piece {
                Piece::Bytes(b) => dst.copy_from_slice(b),
                Piece::Zeros(_) => dst.fill(0),
                Piece::Cells(c) => cells::copy_le_into(c, dst),
            }
            at += dst.len();
        }
    }

    /// The whole file in memory (tests, fuzz seeds, small files).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() as usize);
        self.write_to(&mut out)
            .expect("writing to a Vec cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_and_fill_agree() {
        let cells = [F32::from_bits(0x0102_0304), F32::ONE];
        let mut p = Payload::default();
        p.push(Piece::Bytes(b"ab".to_vec()));
        p.push(Piece::Zeros(70));
        p.push(Piece::Cells(&cells));
        p.push(Piece::Zeros(0));
        let streamed = p.to_vec();
        assert_eq!(streamed.len() as u64, p.len());
        assert_eq!(&streamed[72..76], &[4, 3, 2, 1]);
        let mut filled = vec![0xAA; streamed.len()];
        p.fill(&mut filled);
        assert_eq!(filled, streamed);
    }
}
