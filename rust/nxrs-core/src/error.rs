//! The one error type of nxrs-core. The Python bindings map each variant to one exception class.

use std::path::PathBuf;

/// Everything that can go wrong in nxrs-core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trainer configuration that cannot be built (e.g. fewer than two layer sizes).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// An input whose shape or range does not fit the model (sample length, label, dataset).
    #[error("invalid input: {0}")]
    Input(String),

    /// The operating system refused a file operation.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file does not start with a known checkpoint magic.
    #[error(
        "not an NXCK checkpoint: first bytes are {found:02x?}, expected 4e 58 43 4b (\"NXCK\")"
    )]
    BadMagic { found: Vec<u8> },

    /// A checkpoint of a format version this build cannot read.
    #[error("unsupported NXCK format version {0}")]
    UnsupportedVersion(u32),

    /// The file is shorter or longer than its own header (or the model layout) says.
    #[error("checkpoint length is {actual} bytes, but {expected} are required: {what}")]
    Length {
        expected: u64,
        actual: u64,
        what: String,
    },

    /// The checkpoint describes a different model than the one it is loaded into.
    #[error("checkpoint does not match the model: {0}")]
    Mismatch(String),

    /// A header field is out of range or inconsistent.
    #[error("corrupt checkpoint header: {0}")]
    Header(String),

    /// Stored and computed checksums differ.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        what: String,
        stored: u32,
        computed: u32,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
