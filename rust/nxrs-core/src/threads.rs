//! A trainer's threads: fixed parts of a step's work (samples of a block, weight rows, optimiser
//! cells) run on a thread pool. Every value is computed by one task with the operations and
//! order the definition gives it, whatever the part it falls in, so the bits do not depend on
//! the number of threads; the parts only decide which thread computes what.

mod pool;

use crate::error::{Error, Result};
use pool::Pool;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Most threads one trainer may use.
pub const MAX_THREADS: usize = 1024;

/// Below this many multiply-adds (about 10 us of the blocked kernels' work), a part is not worth
/// a thread: each share-out costs a few microseconds (waking the pool's workers, each packing
/// its own panels, waiting for the last), which the digits model at batch 32 (parts of 16
/// samples, about 300,000 multiply-adds a step) measured as a loss: 0.9x on 2 threads. The
/// seed's and such small steps stay on the caller's thread.
const MIN_WORK_PER_PART: usize = 1 << 18;

/// A trainer's threads: `count` of them, as a pool when more than one.
#[derive(Clone, Debug)]
pub struct Threads {
    count: usize,
    pool: Option<Arc<Pool>>,
    /// The least work a part gets (see [`Threads::parts`]).
    min_work: usize,
}

impl Threads {
    /// One thread: everything runs on the caller's.
    pub const ONE: Threads = Threads {
        count: 1,
        pool: None,
        min_work: MIN_WORK_PER_PART,
    };

    /// `count` threads (`1..=MAX_THREADS`).
    pub fn new(count: usize) -> Result<Threads> {
        if !(1..=MAX_THREADS).contains(&count) {
            return Err(Error::Config(format!(
                "threads = {count} is outside 1..={MAX_THREADS}"
            )));
        }
        if count == 1 {
            return Ok(Threads::ONE);
        }
        let pool = Pool::new(count)
            .map_err(|e| Error::Config(format!("cannot start {count} threads: {e}")))?;
        Ok(Threads {
            count,
            pool: Some(Arc::new(pool)),
            min_work: MIN_WORK_PER_PART,
        })
    }

    /// `count` threads that split even the smallest work (one item per part if need be): for
    /// the tests that show the bits do not depend on how the work is split.
    pub fn splitting_everything(count: usize) -> Result<Threads> {
        Ok(Threads {
            min_work: 1,
            ..Threads::new(count)?
        })
    }

    /// The cores this process may use (1 when unknown).
    pub fn available() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// How many parts `items` items of `work_per_item` multiply-adds each are cut into: at most
    /// one per thread and per item, and none smaller than a thread's worth of work.
    pub fn parts(&self, items: usize, work_per_item: usize) -> usize {
        let worth = (items.saturating_mul(work_per_item) / self.min_work).max(1);
        self.count.min(items).min(worth).max(1)
    }

    /// Runs `task` on every part and returns when all are done: part `i` on thread
    /// `i % count` (the caller's is thread 0), or all in order here with one thread or one part.
    /// On one thread nothing is allocated for the parts.
    pub fn run<T: Send>(&self, parts: impl IntoIterator<Item = T>, task: impl Fn(T) + Sync) {
        let Some(pool) = &self.pool else {
            return parts.into_iter().for_each(task);
        };
        let parts: Vec<Mutex<Option<T>>> = parts
            .into_iter()
            .map(|part| Mutex::new(Some(part)))
            .collect();
        let count = self.count;
        let take = |slot: &Mutex<Option<T>>| slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if parts.len() == 1 {
            return parts.iter().filter_map(take).for_each(task);
        }
        pool.run(&|t| {
            parts
                .iter()
                .skip(t)
                .step_by(count)
                .filter_map(take)
                .for_each(&task);
        });
    }
}

/// `0..n` cut into `parts` contiguous ranges whose lengths differ by at most one.
pub fn ranges(n: usize, parts: usize) -> impl Iterator<Item = Range<usize>> + Clone {
    let parts = parts.max(1);
    (0..parts).map(move |i| n * i / parts..n * (i + 1) / parts)
}

/// A slice, shared or mutable, that [`split`] cuts.
pub trait Cells: Default {
    /// The first `at` cells and the rest.
    fn cut(self, at: usize) -> (Self, Self);
}

impl<T> Cells for &[T] {
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl<T> Cells for &mut [T] {
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// `cells` cut at `ranges` scaled by `width` cells per item: each range's items, in order.
pub fn split<C: Cells>(
    cells: C,
    ranges: impl IntoIterator<Item = Range<usize>>,
    width: usize,
) -> impl Iterator<Item = C> {
    let mut rest = cells;
    ranges.into_iter().map(move |range| {
        let (part, tail) = std::mem::take(&mut rest).cut(range.len() * width);
        rest = tail;
        part
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_everything_in_order() {
        for n in 0..20 {
            for parts in 1..6 {
                let r: Vec<_> = ranges(n, parts).collect();
                assert_eq!(r.len(), parts);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[parts - 1].end, n);
                assert!(r.windows(2).all(|w| w[0].end == w[1].start));
                assert!(r
                    .iter()
                    .all(|r| r.len() + 1 >= n / parts && r.len() <= n / parts + 1));
            }
        }
    }

    #[test]
    fn thread_counts_are_checked() {
        assert!(Threads::new(0).is_err());
        assert!(Threads::new(MAX_THREADS + 1).is_err());
        assert_eq!(Threads::new(3).unwrap().count(), 3);
    }
}
