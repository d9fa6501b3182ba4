//! Running a check over all 2^32 `u32` inputs on every core, for the exhaustive tests.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Writes a line to stderr directly: libtest swallows `eprintln!` output of a passing test.
pub fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

/// Runs `check` on every block of 2^24 consecutive inputs, covering all of `u32`, and folds the
/// blocks' results into one with `merge` (in no particular order). Threads, one per core, claim
/// blocks in turn, so uneven costs (a NaN is cheaper than a normal) still balance. Returns the
/// folded result, the number of threads and the wall time.
pub fn for_all_u32<T: Default + Send>(
    check: impl Fn(RangeInclusive<u32>) -> T + Sync,
    merge: impl Fn(&mut T, T) + Sync,
) -> (T, usize, Duration) {
    const BLOCK: u64 = 1 << 24;
    let start = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next_block = AtomicU64::new(0);
    let total = Mutex::new(T::default());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let first = next_block.fetch_add(BLOCK, Ordering::Relaxed);
                if first > u64::from(u32::MAX) {
                    break;
                }
                let block = check(first as u32..=(first + BLOCK - 1) as u32);
                merge(&mut total.lock().unwrap(), block);
            });
        }
    });
    (total.into_inner().unwrap(), threads, start.elapsed())
}
