//! NXCK v2: a self-describing, checksummed checkpoint whose tensors can be used in place.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "NXCK"
//!      4     4  u32 0xFFFF_FFFF, the versioned-format marker (a v1 file's buffer count here)
//!      8     4  u32 version = 2
//!     12     4  u32 header_len, bytes of the JSON header (the JSON, then optional spaces)
//!     16     8  u64 file_len, bytes of the whole file
//!     24     4  u32 flags = 0
//!     28     4  u32 header CRC-32C over bytes 0..28 followed by the JSON header
//!     32     .  JSON header: config, scalars, tensor table (names, shapes, offsets, CRC-32Cs),
//!               padded with spaces by nxrs so that its length does not depend on the CRCs
//!      .     .  tensors, each at a 64-byte-aligned offset, zero padding (< 64 bytes) between
//! ```
//! All little-endian. `docs/FORMAT.md` is the specification; this module implements it:
//! [`save`] and friends write (crash-safely, through [`super::writer`]), [`Checkpoint`] reads
//! (memory-mapped, validated before any number in the file is trusted), [`direct`] reads a file
//! straight into a trainer's tensors (the same checks).

mod decode;
pub mod direct;
mod encode;
mod json;

pub use decode::{Checkpoint, Header, TensorInfo, Verify};
pub use encode::{encode, save, save_with};
pub use json::MAX_DEPTH;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// Bytes 4..8 of every versioned NXCK file. In v1 these bytes are the buffer count, and no
/// loadable v1 file has 2^32 - 1 buffers (see `docs/FORMAT.md`).
pub const VERSIONED_MARKER: u32 = 0xFFFF_FFFF;
/// The format version this module reads and writes.
pub const VERSION: u32 = 2;
/// Length of the fixed binary prelude before the JSON header.
pub const PRELUDE_LEN: usize = 32;
/// Every tensor's data starts at a multiple of this (a cache line; any SIMD width).
pub const ALIGN: usize = 64;
/// Largest JSON header a reader accepts (and a writer produces).
pub const MAX_HEADER_LEN: usize = 64 << 20;
/// The one dtype of version 2: IEEE binary32, little-endian.
pub const DTYPE_F32: &str = "f32";
/// Most dimensions of a tensor: vectors, matrices and convolution weights (`out x in x h x w`).
pub const MAX_RANK: usize = 4;
/// Most tensors in one file (a trainer of 4096 layers with Adam has 6 * 4096).
pub const MAX_TENSORS: usize = 1 << 15;
/// Most scalars in one file, and most metadata entries.
pub const MAX_SCALARS: usize = 64;
pub const MAX_METADATA: usize = 64;

/// Byte offsets of the prelude's fields.
mod prelude {
    pub const MARKER: usize = 4;
    pub const VERSION: usize = 8;
    pub const HEADER_LEN: usize = 12;
    pub const FILE_LEN: usize = 16;
    pub const FLAGS: usize = 24;
    pub const HEADER_CRC: usize = 28;
}

/// The JSON header: the configuration record (a JSON object the format carries as text: the
/// trainer reads and writes it), named integer scalars, the tensor table, and optional
/// free-form metadata (string to string). Field order here is the order a writer emits.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct HeaderJson {
    config: Box<RawValue>,
    scalars: Scalars,
    #[serde(deserialize_with = "table")]
    tensors: Vec<TensorJson>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "serialize_metadata",
        deserialize_with = "metadata"
    )]
    metadata: Vec<(String, String)>,
}

/// Named `i64` scalars, in the file's order (a JSON object).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Scalars(Vec<(String, i64)>);

impl Serialize for Scalars {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Scalars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalars, D::Error> {
        crate::bounded::map(d, MAX_SCALARS, "scalars").map(Scalars)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct TensorJson {
    name: String,
    dtype: String,
    #[serde(deserialize_with = "shape")]
    shape: Vec<u64>,
    offset: u64,
    nbytes: u64,
    crc32c: u32,
}

fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    crate::bounded::map(d, MAX_METADATA, "metadata")
}

fn serialize_metadata<S: Serializer>(
    entries: &[(String, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(entries.len()))?;
    for (key, value) in entries {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

fn shape<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    crate::bounded::seq(d, MAX_RANK, "a tensor's shape")
}

fn table<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TensorJson>, D::Error> {
    crate::bounded::seq(d, MAX_TENSORS, "the tensor table")
}

/// `n` rounded up to a multiple of [`ALIGN`].
fn align_up(n: u64) -> u64 {
    n.div_ceil(ALIGN as u64) * ALIGN as u64
}

/// CRC-32C of a header: prelude bytes 0..28, then the JSON.
fn header_crc(prelude: &[u8], json: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&prelude[..prelude::HEADER_CRC]), json)
}
