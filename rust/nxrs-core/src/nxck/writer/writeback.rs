//! Streaming a file's bytes with the disk writes started early (Linux `sync_file_range`), so
//! that the final `fsync` finds most of the data written already.

use std::fs::File;
use std::io::Write;

/// Bytes between two requests to start writing back what was written (Linux).
const WRITEBACK_CHUNK: u64 = 8 << 20;

/// Sequential writes into `sink` (the file, or a writable mapping of it), which stands for the
/// file from byte `pos` on, in calls of at most [`WRITEBACK_CHUNK`] bytes. On Linux, each
/// completed chunk is handed to the kernel's writeback at once
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which starts the disk writes without waiting for
/// them), so that the disk works while the next chunks are copied and the final `fsync` finds
/// most of the data written already. Elsewhere the chunks are only writes.
pub(super) struct Writeback<'f, W> {
    sink: W,
    file: &'f File,
    /// The file position of the next byte.
    pos: u64,
    /// Start of the bytes not yet handed to writeback.
    unsent: u64,
}

impl<'f, W: Write> Writeback<'f, W> {
    pub(super) fn new(sink: W, file: &'f File, pos: u64) -> Writeback<'f, W> {
        Writeback {
            sink,
            file,
            pos,
            unsent: pos,
        }
    }
}

impl<W: Write> Write for Writeback<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = WRITEBACK_CHUNK - (self.pos - self.unsent);
        let n = buf.len().min(room as usize);
        let written = self.sink.write(&buf[..n])?;
        self.pos += written as u64;
        if self.pos - self.unsent >= WRITEBACK_CHUNK {
            start_writeback(self.file, self.unsent, self.pos - self.unsent);
            self.unsent = self.pos;
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}

/// Asks the kernel to start writing `len` bytes of `file` at `offset` to the disk, without
/// waiting (Linux; nothing elsewhere). Only a hint: the `fsync` after the last write is what
/// makes the file durable, so a failure here is ignored (`fsync` reports any I/O error).
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (offset.try_into(), len.try_into()) else {
            return;
        };
        // SAFETY: a plain system call on an open file descriptor; it reads no user memory.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
    }
}
