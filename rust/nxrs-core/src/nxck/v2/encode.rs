//! Writing v2 files: the layout of a record, and its bytes as a [`Payload`]: the tensors, and a
//! head (prelude and header) built once their checksums are known.

use super::{
    align_up, header_crc, prelude, HeaderJson, Scalars, TensorJson, DTYPE_F32, MAX_HEADER_LEN,
    PRELUDE_LEN, VERSION, VERSIONED_MARKER,
};
use crate::error::{Error, Result};
use crate::nxck::payload::{Payload, Piece};
use crate::nxck::writer::{write_atomically, WriteStrategy};
use crate::nxck::{Record, MAGIC};
use serde_json::value::RawValue;
use std::path::Path;

/// Saves `record` as a v2 file, crash-safely (see [`crate::nxck::writer`]).
pub fn save(record: &Record<'_>, path: &Path) -> Result<()> {
    save_with(record, path, WriteStrategy::default())
}

/// [`save`] with a chosen write strategy (for benchmarks; the files are identical).
pub fn save_with(record: &Record<'_>, path: &Path, strategy: WriteStrategy) -> Result<()> {
    write_atomically(path, &payload(record)?, strategy)
}

/// The v2 bytes of a record, in memory: the same bytes [`save`] writes.
pub fn encode(record: &Record<'_>) -> Result<Vec<u8>> {
    Ok(payload(record)?.to_vec())
}

/// The file as a head and pieces: the tensors borrowed from the record, the prelude and header
/// built once their CRC-32Cs are known (the writer computes them while it writes the tensors).
///
/// The layout does not depend on the checksums: it is made with the widest CRC value
/// ([`CRC_PLACEHOLDER`], 10 digits) in every entry, which fixes `header_len` and the offsets;
/// the real header, never longer, is then padded to `header_len` with spaces.
pub(crate) fn payload<'a>(record: &Record<'a>) -> Result<Payload<'a>> {
    for t in &record.tensors {
        let cells: usize = t.shape.iter().product();
        if cells != t.cells.len() {
            return Err(Error::Mismatch(format!(
                "tensor {} has {} cells, its shape {:?} needs {cells}",
                t.name,
                t.cells.len(),
                t.shape
            )));
        }
    }
    let config = RawValue::from_string(record.config.clone())
        .map_err(|e| Error::Config(format!("the configuration record is not JSON: {e}")))?;
    let table: Vec<TensorJson> = record
        .tensors
        .iter()
        .map(|t| TensorJson {
            name: t.name.clone(),
            dtype: DTYPE_F32.to_string(),
            shape: t.shape.iter().map(|&n| n as u64).collect(),
            offset: 0,
            nbytes: 4 * t.cells.len() as u64,
            crc32c: CRC_PLACEHOLDER,
        })
        .collect();
    let scalars = record
        .scalars
        .iter()
        .map(|&(name, value)| (name.to_string(), value))
        .collect();
    let mut header = HeaderJson {
        config,
        scalars: Scalars(scalars),
        tensors: table,
        metadata: record.metadata.clone(),
    };
    let header_len = lay_out(&mut header)?;
    let file_len = header
        .tensors
        .last()
        .map_or((PRELUDE_LEN + header_len) as u64, |t| t.offset + t.nbytes);
    let regions: Vec<(u64, u64)> = header
        .tensors
        .iter()
        .map(|t| (t.offset, t.nbytes))
        .collect();

    let head_len = PRELUDE_LEN + header_len;
    let mut payload = Payload::with_checksummed_head(head_len, move |crcs: &[u32]| {
        head(&header, header_len, file_len, crcs)
    });
    let mut end = head_len as u64;
    for (&(offset, nbytes), t) in regions.iter().zip(&record.tensors) {
        payload.push(Piece::Zeros((offset - end) as usize));
        payload.push(Piece::Cells(t.cells));
        end = offset + nbytes;
    }
    debug_assert_eq!(payload.len(), file_len);
    Ok(payload)
}

/// The widest value a `crc32c` can have in the JSON (10 digits): the layout is made with it.
const CRC_PLACEHOLDER: u32 = u32::MAX;

/// The prelude and the header with the tensors' real CRC-32Cs (in table order), the JSON padded
/// with spaces to `header_len`.
fn head(template: &HeaderJson, header_len: usize, file_len: u64, crcs: &[u32]) -> Vec<u8> {
    assert_eq!(crcs.len(), template.tensors.len(), "one CRC per tensor");
    let mut header = template.clone();
    for (t, &crc) in header.tensors.iter_mut().zip(crcs) {
        t.crc32c = crc;
    }
    let mut bytes = Vec::with_capacity(PRELUDE_LEN + header_len);
    bytes.resize(PRELUDE_LEN, 0);
    serde_json::to_writer(&mut bytes, &header).expect("the header serialises");
    // Each CRC has at most the placeholder's digits, nothing else changed.
    assert!(
        bytes.len() <= PRELUDE_LEN + header_len,
        "the header outgrew its layout"
    );
    bytes.resize(PRELUDE_LEN + header_len, b' ');

    let mut put = |at: usize, field: &[u8]| bytes[at..at + field.len()].copy_from_slice(field);
    put(0, &MAGIC);
    put(prelude::MARKER, &VERSIONED_MARKER.to_le_bytes());
    put(prelude::VERSION, &VERSION.to_le_bytes());
    put(prelude::HEADER_LEN, &(header_len as u32).to_le_bytes());
    put(prelude::FILE_LEN, &file_len.to_le_bytes());
    put(prelude::FLAGS, &0u32.to_le_bytes());
    let crc = header_crc(&bytes, &bytes[PRELUDE_LEN..]);
    bytes[prelude::HEADER_CRC..PRELUDE_LEN].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Lays the tensors out behind the header: sets every offset and returns `header_len`, the
/// length of the header's JSON as it is now (with placeholder CRCs).
///
/// The offsets depend on the header's length, which depends on the offsets' digits: start with
/// the data right after the prelude and move it back until the header fits. Each round only
/// moves the data later, which only lengthens the header, so the rounds stop (after two or three
/// in practice) at the first layout where the header fits.
fn lay_out(header: &mut HeaderJson) -> Result<usize> {
    let mut data_start = align_up(PRELUDE_LEN as u64);
    let header_len = loop {
        let mut at = data_start;
        for t in &mut header.tensors {
            t.offset = at;
            at = align_up(at + t.nbytes);
        }
        let len = serde_json::to_vec(&header)
            .expect("the header serialises")
            .len();
        let needed = align_up((PRELUDE_LEN + len) as u64);
        if needed == data_start {
            break len;
        }
        data_start = needed;
    };
    if header_len > MAX_HEADER_LEN {
        return Err(Error::Config(format!(
            "the model's checkpoint header would be {header_len} bytes, over the format's limit \
             of {MAX_HEADER_LEN} (too many layers)"
        )));
    }
    Ok(header_len)
}
