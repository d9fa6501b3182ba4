//! The one error type of nxrs-core. The Python bindings map each variant to one exception class.

use std::fmt::{self, Display, Write};
use std::path::PathBuf;

/// Everything that can go wrong in nxrs-core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trainer configuration that cannot be built (e.g. fewer than two layer sizes).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// An input whose shape or range does not fit the model (sample length, label, dataset),
    /// or data that does not fit the run (fewer batches per epoch than the state has done).
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

    /// The path names a directory, FIFO, socket or device. Checkpoints are read only from
    /// regular files: opening or reading a FIFO or a device can block forever (and `Ctrl-C`
    /// cannot interrupt a blocked `open`), or never end.
    #[error("{op} {path}: not a regular file ({kind})")]
    NotRegularFile {
        op: &'static str,
        path: PathBuf,
        kind: FileKind,
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

    /// A checkpoint (or state) of another run: another model or configuration than the trainer
    /// it is restored into. The file itself is sound, so this is not a checkpoint defect; data
    /// that does not fit a run is [`Error::Input`].
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

/// What a path names, when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    /// Anything else a platform may have.
    Other,
}

impl FileKind {
    /// The `errno` an operating system gives for reading such a path as a file: `EISDIR` for a
    /// directory, `EINVAL` (an argument of the wrong kind) for the rest.
    pub fn errno(self) -> i32 {
        match self {
            FileKind::Directory => libc::EISDIR,
            _ => libc::EINVAL,
        }
    }
}

impl Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "not a file",
        })
    }
}

/// At most this many characters of a value read from a file appear in a message.
pub const CLIP_CHARS: usize = 100;

/// A value read from a file as a message shows it: its `Debug` text (strings quoted and
/// escaped), cut after [`CLIP_CHARS`] characters, then the text's full length. A hostile header
/// can hold a 64 MiB name or a list of millions of numbers; messages, and the logs and terminals
/// that print them, must stay small.
pub fn clip<T: fmt::Debug + ?Sized>(value: &T) -> Clipped<'_, T> {
    Clipped(value)
}

/// See [`clip`].
pub struct Clipped<'a, T: ?Sized>(&'a T);

impl<T: fmt::Debug + ?Sized> Display for Clipped<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut prefix = Prefix::default();
        write!(prefix, "{:?}", self.0)?;
        if prefix.chars <= CLIP_CHARS {
            f.write_str(&prefix.text)
        } else {
            write!(f, "{}… ({} characters)", prefix.text, prefix.chars)
        }
    }
}

/// Keeps the first [`CLIP_CHARS`] characters written to it and counts them all. Counting
/// costs one pass over the text but no memory, and every value a file can hold is bounded by
/// the header's length, which the reader has parsed once already.
#[derive(Default)]
struct Prefix {
    text: String,
    chars: usize,
}

impl Write for Prefix {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.chars < CLIP_CHARS {
                self.text.push(c);
            }
            self.chars += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_values_and_cuts_long_ones_on_a_char_boundary() {
        assert_eq!(clip("W1").to_string(), "\"W1\"");
        assert_eq!(clip(&[1u64, 2][..]).to_string(), "[1, 2]");
        let long = "é".repeat(1000);
        let shown = clip(long.as_str()).to_string();
        let expected_prefix: String = format!("{long:?}").chars().take(CLIP_CHARS).collect();
        assert_eq!(shown, format!("{expected_prefix}… (1002 characters)"));
        let exactly = "x".repeat(CLIP_CHARS - 2);
        assert_eq!(clip(exactly.as_str()).to_string(), format!("{exactly:?}"));
    }
}
