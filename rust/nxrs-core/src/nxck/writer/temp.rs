//! Temporary files of saves: their names (which cannot be mistaken for checkpoints and say
//! which host and process wrote them), their creation, and the sweeping of those left by
//! writers that died.

use super::{io_error, WriteStrategy};
use crate::error::Result;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A temporary file not modified for this long is taken as abandoned even when its writer's
/// liveness cannot be checked (another host, pid reuse).
pub const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// The marker in every temporary file's name: `.<target>.nxck-tmp.<host>.<pid>.<random>`.
const TEMP_MARKER: &str = ".nxck-tmp.";

/// At most this many bytes of the target's name go into a temporary name (NAME_MAX is 255).
const MAX_NAME_IN_TEMP: usize = 128;

/// A temporary file that removes itself unless it was renamed into place.
pub(super) struct TempFile {
    pub(super) path: PathBuf,
    pub(super) renamed: bool,
}

impl TempFile {
    pub(super) fn create(
        dir: &Path,
        target_name: &str,
        strategy: WriteStrategy,
    ) -> Result<(TempFile, File)> {
        let mut options = OpenOptions::new();
        // A writable mapping needs a file opened for reading too.
        options
            .write(true)
            .read(strategy == WriteStrategy::Mapped)
            .create_new(true);
        let mut last_error = None;
        for _ in 0..8 {
            let path = dir.join(TempName::new(target_name).to_string());
            match options.open(&path) {
                Ok(file) => {
                    let temp = TempFile {
                        path,
                        renamed: false,
                    };
                    return Ok((temp, file));
                }
                // Another writer drew the same random name: draw again.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(io_error("creating temporary file", &path, e)),
            }
        }
        let e = last_error.expect("the loop ran");
        Err(io_error("creating temporary file in", dir, e))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The parts of a temporary file's name, `.<target>.nxck-tmp.<host>.<pid>.<random>`:
/// `<host>` 8 lowercase hex digits (CRC-32C of the host name), `<pid>` decimal, `<random>` 16
/// lowercase hex digits. The leading dot hides it; the marker and suffix never end in a
/// checkpoint's extension.
#[derive(Debug, PartialEq, Eq)]
struct TempName {
    target: String,
    host: u32,
    pid: u32,
    random: u64,
}

impl TempName {
    fn new(target_name: &str) -> TempName {
        let mut cut = target_name.len().min(MAX_NAME_IN_TEMP);
        while !target_name.is_char_boundary(cut) {
            cut -= 1;
        }
        TempName {
            target: target_name[..cut].to_string(),
            host: host_tag(),
            pid: std::process::id(),
            random: random_u64(),
        }
    }

    fn parse(name: &str) -> Option<TempName> {
        let rest = name.strip_prefix('.')?;
        let (target, suffix) = rest.rsplit_once(TEMP_MARKER)?;
        let mut parts = suffix.split('.');
        let (host, pid, random) = (parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let decimal = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
        if parts.next().is_some() || !hex(host, 8) || !hex(random, 16) || !decimal {
            return None;
        }
        Some(TempName {
            target: target.to_string(),
            host: u32::from_str_radix(host, 16).ok()?,
            pid: pid.parse().ok()?,
            random: u64::from_str_radix(random, 16).ok()?,
        })
    }
}

impl std::fmt::Display for TempName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let TempName {
            target,
            host,
            pid,
            random,
        } = self;
        write!(f, ".{target}{TEMP_MARKER}{host:08x}.{pid}.{random:016x}")
    }
}

/// Whether `name` is the name of one of nxrs's temporary files (never a checkpoint).
pub fn is_temp_file_name(name: &str) -> bool {
    TempName::parse(name).is_some()
}

/// Removes the temporary files in `dir` left by saves that cannot finish any more, and returns
/// their paths. A temporary file is removed when
/// - it was written on this host (same host tag) by a process that no longer exists
///   (`kill(pid, 0)` fails with `ESRCH`; unix only), or
/// - it has not been modified for [`STALE_AFTER`] (the rule for files of other hosts on a
///   shared filesystem, for reused pids, and on non-unix systems).
///
/// Files of live writers, including other threads of this process, are left alone, and so is
/// every file whose name is not a temporary name.
pub fn sweep_temp_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| io_error("reading directory", dir, e))?;
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(temp) = entry.file_name().to_str().and_then(TempName::parse) else {
            continue;
        };
        let writer_gone = temp.host == host_tag() && !process_alive(temp.pid);
        let stale = || {
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            modified.is_some_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_AFTER))
        };
        if (writer_gone || stale()) && is_file(&entry) {
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                // Another sweeper was faster.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing stale temporary file", &path, e)),
            }
        }
    }
    Ok(removed)
}

fn is_file(entry: &fs::DirEntry) -> bool {
    entry.file_type().is_ok_and(|t| t.is_file())
}

/// Whether a process with this id exists (on unix; elsewhere liveness is unknown: `true`).
fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            // kill(0, ..) and kill(-n, ..) address process groups, not a process.
            return false;
        }
        // SAFETY: signal 0 performs only the existence and permission checks; nothing is sent.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// CRC-32C of this machine's host name: tells temporary files of this host from those of
/// other hosts sharing the directory, whose pids mean nothing here.
fn host_tag() -> u32 {
    crc32c::crc32c(host_name().as_bytes())
}

fn host_name() -> String {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: the pointer and length describe `buf`, which outlives the call.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
        String::new()
    }
    #[cfg(not(unix))]
    {
        std::env::var("COMPUTERNAME").unwrap_or_default()
    }
}

/// 64 unpredictable-enough bits for a temporary name: std's per-instance random hash keys,
/// mixed with the clock and a counter (no RNG dependency needed; uniqueness is enforced by
/// `create_new` anyway).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip_and_are_recognised() {
        let name = TempName::new("ckpt.v2.nxck");
        let text = name.to_string();
        assert!(text.starts_with(".ckpt.v2.nxck.nxck-tmp."));
        assert_eq!(TempName::parse(&text), Some(name));
        assert!(is_temp_file_name(&text));
        for other in [
            "ckpt.nxck",
            ".ckpt.nxck",
            ".a.nxck-tmp.0000000g.1.0123456789abcdef",
            ".a.nxck-tmp.00000000..0123456789abcdef",
            ".a.nxck-tmp.00000000.1.0123456789abcde",
            ".a.nxck-tmp.00000000.1.0123456789abcdef.x",
            "a.nxck-tmp.00000000.1.0123456789abcdef",
        ] {
            assert!(!is_temp_file_name(other), "{other}");
        }
    }

    #[test]
    fn long_target_names_are_cut_on_a_char_boundary() {
        let long = "é".repeat(200);
        let name = TempName::new(&long).to_string();
        assert!(name.len() < 255, "{}", name.len());
        assert!(is_temp_file_name(&name));
    }

    #[test]
    fn this_process_is_alive() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(0));
    }
}
