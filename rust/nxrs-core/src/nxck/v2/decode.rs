//! Reading v2 files: validation of every header field before use, then zero-copy access.
//!
//! The checks run in the order `docs/FORMAT.md` lists them, and every one of them bounds what
//! the next may touch: no slice is taken and nothing is allocated from a number in the file
//! before that number has been checked against the file's length or a limit of the format.
//! Whether the tensors are those of the configured model is the trainer's question
//! ([`crate::checkpoint`]), asked of the validated table.

use super::{header_crc, json, prelude, TensorJson, ALIGN, DTYPE_F32, MAX_HEADER_LEN, PRELUDE_LEN};
use crate::error::{clip, Error, Result};
use crate::nxck::mapped::FileBytes;
use crate::nxck::{cells, detect, Format};
use crate::softf32::F32;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

/// How much of a file [`Checkpoint::open`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Everything, including every tensor's CRC-32C (reads every byte of the file).
    Full,
    /// Everything except the tensors' CRC-32Cs: the prelude, the header's CRC, the JSON, the
    /// layout and the padding. Opening then touches only the header's pages; check tensors
    /// later with [`Checkpoint::verify_tensor`] or [`Checkpoint::verify_all`].
    HeaderOnly,
}

/// One entry of the tensor table, validated: a unique name, the one dtype, a shape whose cells
/// fill `nbytes`, data inside the file, 64-byte aligned, overlapping nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Always `"f32"` in version 2: IEEE binary32, little-endian.
    pub dtype: String,
    /// Row-major.
    pub shape: Vec<usize>,
    /// Where the data starts in the file (a multiple of 64).
    pub offset: usize,
    /// Length of the data, `4 * product(shape)`.
    pub nbytes: usize,
    /// CRC-32C of the data, as stored in the header.
    pub crc32c: u32,
}

impl TensorInfo {
    /// The data's byte range in the file.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.nbytes
    }

    /// Number of cells, `product(shape)`.
    pub fn cells(&self) -> usize {
        self.nbytes / 4
    }
}

/// The validated head of a v2 file: its configuration record, scalars, metadata and tensor
/// table (steps 1-7 of `docs/FORMAT.md`'s checks, without the data). A [`Checkpoint`] has one
/// with the file's bytes; [`super::direct`] reads the data straight into the tensors instead.
#[derive(Debug)]
pub struct Header {
    config: Box<RawValue>,
    scalars: Vec<(String, i64)>,
    metadata: Vec<(String, String)>,
    /// In file order (the table's order).
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

/// Where [`Header::parse`] finds the zero padding between tensors.
pub(super) enum Gaps<'a> {
    /// In the whole file's bytes, checked entry by entry with the table.
    In(&'a [u8]),
    /// Not yet read: the caller checks each gap with [`check_gap`] as it reads it, in table
    /// order, once every table entry has passed its other checks.
    Later,
}

impl Header {
    /// Checks 4-7 (the header's CRC, the flags, the JSON, the tensor table) of a file of
    /// `file_len` bytes whose prelude passed [`check_prelude`]: `head` is its first
    /// `PRELUDE_LEN + header_len` bytes.
    pub(super) fn parse(head: &[u8], file_len: u64, gaps: Gaps<'_>) -> Result<Header> {
        let json = check_header(head)?;
        let header = json::parse(json)?;
        // Scalar and metadata names are unique: the JSON check refuses a key twice in an object.
        let tensors = check_table(&header.tensors, file_len, head.len(), gaps)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Header {
            config: header.config,
            scalars: header.scalars.0,
            metadata: header.metadata,
            tensors,
            by_name,
        })
    }

    /// The configuration record: the text of a JSON object (the trainer's configuration, for
    /// files nxrs writes).
    pub fn config_json(&self) -> &str {
        self.config.get()
    }

    /// The named scalars, in the file's order.
    pub fn scalars(&self) -> &[(String, i64)] {
        &self.scalars
    }

    /// The free-form metadata, in the file's order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The scalar called `name`, if the file has one.
    pub fn scalar(&self, name: &str) -> Option<i64> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }
}

/// An open, validated v2 checkpoint. Holds the file's bytes (a read-only mapping when opened
/// from a path); tensor data is borrowed from them without copying. Its [`Header`]'s
/// accessors are its own (`Deref`).
///
/// For zero-copy views in another runtime, share the `Checkpoint` (e.g. in an `Arc`) and hand
/// out pointers from [`Checkpoint::tensor_bytes`]: the bytes are a mapping or a heap buffer that
/// is never reallocated, so their addresses stay valid and unchanged for as long as the
/// `Checkpoint` lives, even if the `Checkpoint` value itself is moved. They are read-only. When
/// [`Checkpoint::is_mapped`], each tensor's bytes start at a 64-byte-aligned address (the
/// mapping is page-aligned and offsets are multiples of 64), so on little-endian hosts they can
/// be viewed as `f32`/`u32` arrays in place.
#[derive(Debug)]
pub struct Checkpoint {
    bytes: FileBytes,
    header: Header,
}

impl std::ops::Deref for Checkpoint {
    type Target = Header;

    fn deref(&self) -> &Header {
        &self.header
    }
}

impl Checkpoint {
    /// Maps and validates the file at `path`, for zero-copy access to its tensors. The mapping
    /// shows the file as it is now: a program that rewrites the file in place (instead of
    /// replacing it by a rename, as nxrs does) changes the tensors under the reader, or gets it
    /// killed by `SIGBUS` (see [`crate::nxck::mapped`]). To copy the state out, read the file
    /// instead: `Checkpoint::from_bytes(FileBytes::read(path)?, verify)`.
    pub fn open(path: &Path, verify: Verify) -> Result<Checkpoint> {
        Checkpoint::from_bytes(FileBytes::map(path)?, verify)
    }

    /// Validates bytes already mapped or in memory.
    pub fn from_bytes(bytes: FileBytes, verify: Verify) -> Result<Checkpoint> {
        let header_len = check_prelude(&bytes, bytes.len() as u64)?;
        let head = &bytes[..PRELUDE_LEN + header_len];
        let header = Header::parse(head, bytes.len() as u64, Gaps::In(&bytes))?;
        let checkpoint = Checkpoint { bytes, header };
        if verify == Verify::Full {
            checkpoint.verify_all()?;
        }
        Ok(checkpoint)
    }

    /// The validated head: configuration, scalars, metadata, tensor table.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// A tensor's data: `nbytes` little-endian binary32 cells, borrowed from the file.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.data(t))
    }

    /// The data of a tensor of this checkpoint's table.
    pub fn data(&self, tensor: &TensorInfo) -> &[u8] {
        &self.bytes[tensor.range()]
    }

    /// Checks one tensor's CRC-32C (`Error::Input` for a name not in the table).
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        let tensor = self
            .tensor(name)
            .ok_or_else(|| Error::Input(format!("the checkpoint has no tensor {name:?}")))?;
        check_crc(tensor, crc32c::crc32c(self.data(tensor)))
    }

    /// Checks every tensor's CRC-32C, in file order.
    pub fn verify_all(&self) -> Result<()> {
        self.tensors
            .iter()
            .try_for_each(|t| self.verify_tensor(&t.name))
    }

    /// A tensor's cells, decoded (copied) out of the file.
    pub fn cells(&self, tensor: &TensorInfo) -> Vec<F32> {
        cells::decode_le(self.data(tensor))
    }

    /// Every tensor's cells in table order, each tensor's CRC-32C checked as [`Verify::Full`]
    /// does. The checksums are computed on a second thread while this one copies the tensors
    /// out (both only read the file's bytes), so the check costs little more than the copy. The
    /// error is the one [`Checkpoint::verify_all`] gives.
    pub fn cells_verified(&self) -> Result<Vec<Vec<F32>>> {
        let (verified, cells) = std::thread::scope(|s| {
            let verifier = s.spawn(|| self.verify_all());
            let cells: Vec<Vec<F32>> = self.tensors.iter().map(|t| self.cells(t)).collect();
            let verified = verifier
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (verified, cells)
        });
        verified.map(|()| cells)
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the bytes are a file mapping (see the type's documentation on alignment).
    pub fn is_mapped(&self) -> bool {
        self.bytes.is_mapped()
    }
}

/// Checks 1-3 of a file of `file_len` bytes (its format, its length, the header's length)
/// from `prefix`, its first `min(file_len, PRELUDE_LEN)` bytes or more; returns `header_len`,
/// which then fits in the file.
pub(super) fn check_prelude(prefix: &[u8], file_len: u64) -> Result<usize> {
    if detect(prefix)? == Format::V1 {
        return Err(Error::UnsupportedVersion(1));
    }
    if file_len < PRELUDE_LEN as u64 {
        return Err(Error::Length {
            expected: PRELUDE_LEN as u64,
            actual: file_len,
            what: format!("the file ends inside the {PRELUDE_LEN}-byte v2 prelude"),
        });
    }
    let recorded = cells::u64_at(prefix, prelude::FILE_LEN);
    if recorded != file_len {
        return Err(Error::Length {
            expected: recorded,
            actual: file_len,
            what: "the prelude's file_len".into(),
        });
    }
    let header_len = cells::u32_at(prefix, prelude::HEADER_LEN) as usize;
    if header_len > MAX_HEADER_LEN {
        return Err(Error::Header(format!(
            "header_len {header_len} exceeds the limit of {MAX_HEADER_LEN} bytes"
        )));
    }
    let header_end = PRELUDE_LEN + header_len;
    if header_end as u64 > file_len {
        return Err(Error::Length {
            expected: header_end as u64,
            actual: file_len,
            what: format!("the prelude's header_len {header_len} runs past the end of the file"),
        });
    }
    Ok(header_len)
}

/// Checks 4-5 (the header's CRC, the flags) of `head`, a file's prelude and header; returns
/// the header (the JSON bytes).
fn check_header(head: &[u8]) -> Result<&[u8]> {
    let json = &head[PRELUDE_LEN..];
    let stored = cells::u32_at(head, prelude::HEADER_CRC);
    let computed = header_crc(head, json);
    if stored != computed {
        return Err(Error::Checksum {
            what: "header".into(),
            stored,
            computed,
        });
    }
    let flags = cells::u32_at(head, prelude::FLAGS);
    if flags != 0 {
        return Err(Error::Header(format!(
            "prelude flags are {flags:#010x}; version 2 defines none, they must be 0"
        )));
    }
    Ok(json)
}

/// Check 8 for one tensor: `computed` is the CRC-32C of its data.
pub(super) fn check_crc(tensor: &TensorInfo, computed: u32) -> Result<()> {
    if computed != tensor.crc32c {
        return Err(Error::Checksum {
            what: format!("tensor {}", tensor.name),
            stored: tensor.crc32c,
            computed,
        });
    }
    Ok(())
}

/// Validates the tensor table against the file: names unique, the one dtype, shapes whose cells
/// fill `nbytes`, data inside the file in table order, 64-byte aligned, each starting less than
/// 64 bytes after the previous region, every gap byte zero, the last tensor ending the file.
/// The work and memory are bounded by the table's length (itself bounded as it is read).
fn check_table(
    table: &[TensorJson],
    file_len: u64,
    header_end: usize,
    gaps: Gaps<'_>,
) -> Result<Vec<TensorInfo>> {
    let mut seen: HashMap<&str, ()> = HashMap::with_capacity(table.len());
    let mut tensors = Vec::with_capacity(table.len());
    let mut prev_end = header_end as u64;
    let mut prev = "the header".to_string();

    for (i, t) in table.iter().enumerate() {
        let name = clip(&t.name).to_string();
        let header = |what: String| Error::Header(format!("tensor {name}: {what}"));
        if seen.insert(&t.name, ()).is_some() {
            return Err(header("appears more than once in the tensor table".into()));
        }
        if t.name.is_empty() {
            return Err(Error::Header(format!(
                "tensor table entry {i} has an empty name"
            )));
        }
        if t.dtype != DTYPE_F32 {
            return Err(header(format!(
                "dtype {} is not supported (version 2 has only {DTYPE_F32:?})",
                clip(&t.dtype)
            )));
        }
        // A product beyond the file's cells cannot fit in it (and cannot overflow below that).
        let max_cells = file_len / 4;
        let cells = t
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d).filter(|&n| n <= max_cells));
        let Some(cells) = cells else {
            return Err(header(format!(
                "shape {} has more cells than the file's {file_len} bytes can hold",
                clip(&t.shape)
            )));
        };
        let nbytes = 4 * cells;
        if t.nbytes != nbytes {
            return Err(header(format!(
                "nbytes {} does not match its shape {:?} (4 * {cells} = {nbytes})",
                t.nbytes, t.shape
            )));
        }
        let offset = t.offset;
        if offset % ALIGN as u64 != 0 {
            return Err(header(format!(
                "offset {offset} is not {ALIGN}-byte aligned"
            )));
        }
        if offset < prev_end {
            return Err(header(format!(
                "offset {offset} overlaps {prev}, which ends at {prev_end}"
            )));
        }
        if offset - prev_end >= ALIGN as u64 {
            return Err(header(format!(
                "offset {offset} leaves a gap of {} bytes after {prev} (ending at {prev_end}); \
                 padding must be shorter than {ALIGN} bytes",
                offset - prev_end
            )));
        }
        // offset < prev_end + 64 <= file_len + 64 and nbytes <= file_len: no overflow.
        let end = offset + nbytes;
        if end > file_len {
            return Err(header(format!(
                "data {offset}..{end} extends past the end of the file ({file_len} bytes)"
            )));
        }
        if let Gaps::In(bytes) = gaps {
            check_gap(
                &bytes[prev_end as usize..offset as usize],
                prev_end,
                &t.name,
            )?;
        }
        tensors.push(TensorInfo {
            name: t.name.clone(),
            dtype: t.dtype.clone(),
            shape: t.shape.iter().map(|&d| d as usize).collect(),
            offset: offset as usize,
            nbytes: nbytes as usize,
            crc32c: t.crc32c,
        });
        prev_end = end;
        prev = format!("tensor {name}");
    }
    if prev_end != file_len {
        return Err(Error::Header(format!(
            "{} bytes follow the end of the last tensor ({prev}, at {prev_end}); \
             it must end the file",
            file_len - prev_end
        )));
    }
    Ok(tensors)
}

/// The zero padding rule for `gap`, the bytes from file offset `from` to the start of tensor
/// `before`.
pub(super) fn check_gap(gap: &[u8], from: u64, before: &str) -> Result<()> {
    match gap.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(k) => Err(Error::Header(format!(
            "padding byte at offset {} (before tensor {}) is {:#04x}, must be 0",
            from + k as u64,
            clip(before),
            gap[k]
        ))),
    }
}
