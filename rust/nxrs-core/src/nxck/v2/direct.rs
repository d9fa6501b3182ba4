//! Reading a v2 file straight into the memory of its tensors: one pass over the file, each
//! tensor's bytes read (by the kernel, from the page cache or the disk) into the allocation
//! that becomes the training state, its CRC-32C computed on each piece while the piece is still
//! in the cache, no second copy of the file.
//!
//! This is how a trainer is loaded ([`crate::checkpoint::load`], `restore`, `decode`). A
//! [`super::Checkpoint`] holds the whole file (a mapping, for zero-copy views), and copying its
//! tensors out costs a second copy of the state in memory and a second pass over it.
//!
//! The file is read, not mapped, so a program that rewrites it in place while it is read can
//! give an error (`Length` when it ends early or grows, `Checksum` when the bytes changed) but
//! never a `SIGBUS`. Every allocation is sized by a table entry that has passed its checks
//! against the file's length as its metadata gave it (`fstat`), never by a bare number from
//! the file: together the tensors take at most the file's size.
//!
//! The checks and their order are those of [`super::Checkpoint::from_bytes`] (they are the same
//! functions): steps 1-6 and 7's table checks on the head, then 7's zero padding as each gap is
//! read, in table order; step 8 (the tensors' CRC-32Cs) is kept for the caller, who checks the
//! configuration and the model's tensors first (steps 9 and 10), as a loaded checkpoint does.
//! A file whose head fails a table check is read whole and reported as bytes in memory are, so
//! that a bad gap before the failing entry is reported first, as the specification orders.

use super::decode::{check_crc, check_gap, check_prelude, Gaps, Header};
use super::{ALIGN, PRELUDE_LEN};
use crate::error::{Error, Result};
use crate::nxck::mapped::{changed_length, open_for_reading, FileBytes};
use crate::nxck::{cells, detect, Format};
use crate::softf32::F32;
use std::io::{self, Read};
use std::path::Path;

/// Bytes read and checksummed at a time inside a tensor: small enough to be still in the
/// cache (L2) when the CRC-32C reads them, large enough that the syscalls cost little.
const PIECE: usize = 256 << 10;
/// The read-ahead buffer for what is smaller than a piece (the head, padding, small tensors):
/// a file of many small tensors costs one `read` per this many bytes, not one per tensor.
const BUFFER: usize = 64 << 10;

/// What [`read_path`] or [`read_slice`] found.
#[derive(Debug)]
pub enum Contents {
    /// A v2 file read into its tensors.
    Loaded(Loaded),
    /// The whole file's bytes, to be decoded as bytes in memory are: a v1 file, or a v2 file
    /// whose head failed a check (decoding it gives the first failure in the order the
    /// specification lists the checks).
    Whole(FileBytes),
}

/// A v2 file whose steps 1-7 passed, read into one allocation per tensor.
#[derive(Debug)]
pub struct Loaded {
    header: Header,
    /// For each entry of the table, in table order, its cells.
    cells: Vec<Vec<F32>>,
    /// Step 8: the first tensor, in table order, whose CRC-32C did not match.
    crc: Result<()>,
}

impl Loaded {
    /// The validated head: configuration, scalars, metadata, tensor table.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The head, and the cells of every table entry (table order) once every tensor's CRC-32C
    /// has matched (step 8; else the first `Checksum` error in table order).
    pub fn into_parts(self) -> (Header, Result<Vec<Vec<F32>>>) {
        (self.header, self.crc.map(|()| self.cells))
    }
}

/// Reads the regular file at `path` (see the module documentation).
pub fn read_path(path: &Path) -> Result<Contents> {
    let (file, len) = open_for_reading(path)?;
    read(file, len, path, || FileBytes::read(path))
}

/// Reads checkpoint bytes already in memory as [`read_path`] reads a file: their tensors are
/// copied once, into the state's memory (bytes received from elsewhere, `Trainer.from_bytes`).
pub fn read_slice(bytes: &[u8]) -> Result<Contents> {
    let whole = || Ok(FileBytes::from_vec(bytes.to_vec()));
    read(bytes, bytes.len() as u64, Path::new("<bytes>"), whole)
}

fn read(
    src: impl Read,
    len: u64,
    path: &Path,
    whole: impl FnOnce() -> Result<FileBytes>,
) -> Result<Contents> {
    let mut stream = Stream::new(src, len, path);
    let mut head = vec![0; len.min(PRELUDE_LEN as u64) as usize];
    stream.read_exact(&mut head)?;
    if detect(&head)? == Format::V1 {
        return Ok(Contents::Whole(whole()?));
    }
    let header_len = check_prelude(&head, len)?;
    head.resize(PRELUDE_LEN + header_len, 0);
    stream.read_exact(&mut head[PRELUDE_LEN..])?;
    let Ok(header) = Header::parse(&head, len, Gaps::Later) else {
        return Ok(Contents::Whole(whole()?));
    };
    drop(head);

    let mut cells = Vec::with_capacity(header.tensors().len());
    let mut crc = Ok(());
    let mut end = (PRELUDE_LEN + header_len) as u64;
    for t in header.tensors() {
        // The table's checks bound the gap below ALIGN and the tensor inside the file.
        let mut gap = [0; ALIGN];
        let gap = &mut gap[..t.offset - end as usize];
        stream.read_exact(gap)?;
        check_gap(gap, end, &t.name)?;
        let mut tensor: Vec<F32> = bytemuck::zeroed_vec(t.cells());
        cells::advise_huge_pages(&mut tensor);
        let mut sum = 0;
        for piece in bytemuck::cast_slice_mut::<F32, u8>(&mut tensor).chunks_mut(PIECE) {
            stream.read_exact(piece)?;
            sum = crc32c::crc32c_append(sum, piece);
        }
        if crc.is_ok() {
            crc = check_crc(t, sum);
        }
        cells::from_le_in_place(&mut tensor);
        cells.push(tensor);
        end = (t.offset + t.nbytes) as u64;
    }
    stream.check_end()?;
    Ok(Contents::Loaded(Loaded { header, cells, crc }))
}

/// A file read front to back: small reads through a buffer, large ones straight into the
/// caller's memory.
struct Stream<'p, R> {
    src: R,
    /// The length the file had when it was opened.
    len: u64,
    path: &'p Path,
    /// Bytes consumed so far.
    pos: u64,
    buf: Vec<u8>,
    /// `buf[at..filled]` is read and not yet consumed.
    at: usize,
    filled: usize,
}

impl<'p, R: Read> Stream<'p, R> {
    fn new(src: R, len: u64, path: &'p Path) -> Self {
        Stream {
            src,
            len,
            path,
            pos: 0,
            buf: vec![0; BUFFER],
            at: 0,
            filled: 0,
        }
    }

    /// Fills `out` with the next bytes of the file.
    fn read_exact(&mut self, out: &mut [u8]) -> Result<()> {
        let buffered = (self.filled - self.at).min(out.len());
        out[..buffered].copy_from_slice(&self.buf[self.at..self.at + buffered]);
        self.at += buffered;
        let rest = &mut out[buffered..];
        if rest.len() >= BUFFER {
            self.src.read_exact(rest).map_err(|e| self.error(e))?;
        } else if !rest.is_empty() {
            (self.at, self.filled) = (0, 0);
            while self.filled < rest.len() {
                match self.src.read(&mut self.buf[self.filled..]) {
                    Ok(0) => return Err(self.error(io::ErrorKind::UnexpectedEof.into())),
                    Ok(n) => self.filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.error(e)),
                }
            }
            rest.copy_from_slice(&self.buf[..rest.len()]);
            self.at = rest.len();
        }
        self.pos += out.len() as u64;
        Ok(())
    }

    /// Checks that the file ends where it did when it was opened.
    fn check_end(&mut self) -> Result<()> {
        let mut probe = [0];
        let more = self.filled > self.at
            || loop {
                match self.src.read(&mut probe) {
                    Ok(n) => break n > 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.error(e)),
                }
            };
        match more {
            true => Err(changed_length(self.len, self.len + 1)),
            false => Ok(()),
        }
    }

    fn error(&self, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => changed_length(self.len, self.pos),
            _ => Error::Io {
                op: "reading",
                path: self.path.to_path_buf(),
                source: e,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::encode;
    use crate::{Trainer, TrainerConfig};

    /// At most `step` bytes per `read` of `bytes`, an `Interrupted` error before every other.
    struct Dribble<'a> {
        bytes: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl Read for Dribble<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// `bytes` read as a file that was `len` bytes long when opened.
    fn dribbled(bytes: &[u8], len: usize, step: usize) -> Result<Contents> {
        let src = Dribble {
            bytes,
            step,
            interrupt: false,
        };
        read(src, len as u64, Path::new("f"), || unreachable!())
    }

    fn cells(contents: Result<Contents>) -> Vec<Vec<F32>> {
        match contents {
            Ok(Contents::Loaded(loaded)) => loaded.into_parts().1.unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_reads_and_interruptions_read_the_same_cells() {
        let trainer = Trainer::new(TrainerConfig::seed_model()).unwrap();
        let bytes = encode(&trainer, Format::V2).unwrap();
        let want = cells(read_slice(&bytes));
        assert_eq!(want.len(), 12);
        for step in [1, 3, 64, 4099, BUFFER + 1] {
            assert_eq!(cells(dribbled(&bytes, bytes.len(), step)), want, "{step}");
        }
    }

    #[test]
    fn a_file_that_changes_length_while_read_is_a_length_error() {
        let trainer = Trainer::new(TrainerConfig::seed_model()).unwrap();
        let bytes = encode(&trainer, Format::V2).unwrap();
        let n = bytes.len();
        let longer = [&bytes[..], b"x"].concat();
        // Shorter than when opened: inside the prelude, the header, a tensor; longer.
        for (src, step) in [
            (&bytes[..20], 1000),
            (&bytes[..500], 7),
            (&bytes[..n - 1], 1000),
            (&longer[..], 1000),
            (&longer[..], 1),
        ] {
            match dribbled(src, n, step) {
                Err(Error::Length { expected, what, .. }) => {
                    assert_eq!(expected, n as u64);
                    assert!(what.contains("changed length"), "{what}");
                }
                other => panic!("{} bytes: {other:?}", src.len()),
            }
        }
    }
}
