//! The worker threads behind [`Threads`](super::Threads): `count - 1` threads that, with the
//! calling thread, run the parts of one job and then wait for the next by spinning.
//!
//! A training step hands out three jobs of microseconds to tens of microseconds each. A
//! general-purpose pool puts idle workers to sleep quickly, and waking one through the kernel
//! cost 50 to 100 us on the 2-core VMs nxrs is measured on (with rayon's `scope`, digits
//! 64-128-10 at batch 32 ran slower on 2 threads than on 1). Here a worker waits for
//! [`PATIENCE`] after a job (spinning, then yielding) before it sleeps, so within a run of steps
//! a job starts in about a microsecond, and the caller runs a share of the parts itself instead
//! of waiting idle. With more threads than cores, workers sleep at once: a waiting worker would
//! take the core that another thread needs.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker waits for the next job (spinning, then yielding) before it sleeps.
const PATIENCE: Duration = Duration::from_millis(2);

/// Spins of a wait before it starts yielding the core to other threads (a few microseconds):
/// on an oversubscribed machine the thread being waited for may need this core.
const SPINS: u32 = 1024;

/// One job: thread `t` (0 is the caller) runs `task(t)`.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

/// A job as the workers see it: the task, with its lifetime erased (see [`Pool::run`]).
struct Job {
    task: *const Task<'static>,
}

/// What the caller and the workers share.
struct Shared {
    /// Bumped to publish a job (and to stop the workers).
    generation: AtomicU64,
    /// The current job; valid from its publication until `pending` is back to 0.
    job: AtomicPtr<Job>,
    /// Workers that have not finished the current job.
    pending: AtomicUsize,
    /// The first panic of a worker's task in the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Workers that went to sleep, and what wakes them.
    sleeping: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

/// `count - 1` worker threads; the caller of [`Pool::run`] is thread 0.
pub(super) struct Pool {
    count: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held while a job runs: one job at a time (another caller runs its parts itself).
    running: Mutex<()>,
    /// The process that started the workers: a child forked from it has none of them (a
    /// `fork` copies only the calling thread), so there every part runs on the caller.
    process: u32,
}

/// How long idle workers wait for a job before they sleep: [`PATIENCE`], or not at all when
/// there are more threads than cores.
fn patience(count: usize) -> Duration {
    if count <= super::Threads::available() {
        PATIENCE
    } else {
        Duration::ZERO
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("count", &self.count).finish()
    }
}

impl Pool {
    /// Starts `count - 1` workers.
    pub(super) fn new(count: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            pending: AtomicUsize::new(0),
            panic: Mutex::new(None),
            sleeping: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut pool = Pool {
            count,
            shared,
            workers: Vec::with_capacity(count - 1),
            running: Mutex::new(()),
            process: std::process::id(),
        };
        let patience = patience(count);
        for t in 1..count {
            let shared = Arc::clone(&pool.shared);
            let worker = std::thread::Builder::new()
                .name(format!("nxrs-{t}"))
                .spawn(move || work(&shared, t, patience))?;
            pool.workers.push(worker); // on an error, dropping `pool` stops the ones started
        }
        Ok(pool)
    }

    /// Runs `task(t)` on every thread `t` in `0..count` (0 here) and returns when all are
    /// done; a panic in any of them is raised here afterwards. If another job is running (a
    /// second caller), or in a forked child, every `task(t)` runs here, in order.
    pub(super) fn run(&self, task: &Task<'_>) {
        if std::process::id() != self.process {
            return (0..self.count).for_each(task);
        }
        let _running = match self.running.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..self.count).for_each(task),
        };
        let shared = &*self.shared;
        // SAFETY: only the lifetime is erased. The workers dereference the task only between
        // this publication and their decrement of `pending`, and this function does not return
        // (or unwind) before `pending` is 0, so the task outlives every use.
        let task: *const Task<'static> = unsafe { std::mem::transmute(task) };
        let job = Job { task };
        shared.pending.store(self.count - 1, SeqCst);
        shared.job.store(&job as *const Job as *mut Job, SeqCst);
        shared.generation.fetch_add(1, SeqCst);
        wake_sleepers(shared);
        // SAFETY: `job.task` is the caller's task, alive for this whole call.
        let own = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.task)(0) }));
        while !wait_for(|| shared.pending.load(SeqCst) == 0, PATIENCE) {}
        shared.job.store(std::ptr::null_mut(), SeqCst);
        let worker_panic = shared
            .panic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Err(panic) = own {
            resume_unwind(panic);
        }
        if let Some(panic) = worker_panic {
            resume_unwind(panic);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.shared.generation.fetch_add(1, SeqCst);
        wake_sleepers(&self.shared);
        for worker in self.workers.drain(..) {
            let _ = worker.join(); // a worker never panics: tasks' panics are caught
        }
    }
}

/// Wakes the workers that went to sleep (after a job was published or `stop` set). A worker
/// counts itself in `sleeping` and then checks the generation, both under `sleep`; this bumps
/// the generation and then reads `sleeping` (all `SeqCst`), so either it sees the worker and
/// notifies it under the lock, or the worker sees the new generation and does not sleep.
fn wake_sleepers(shared: &Shared) {
    if shared.sleeping.load(SeqCst) > 0 {
        let _lock = shared.sleep.lock().unwrap_or_else(|p| p.into_inner());
        shared.wake.notify_all();
    }
}

/// Waits until `done()` or `patience` has passed, spinning [`SPINS`] times and then yielding
/// the core between checks; returns whether `done()`.
fn wait_for(done: impl Fn() -> bool, patience: Duration) -> bool {
    let start = Instant::now();
    let mut spins = 0;
    while !done() {
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
        } else if start.elapsed() >= patience {
            return false;
        } else {
            std::thread::yield_now();
        }
    }
    true
}

/// Worker `t`: waits for each job (for `patience`, then asleep), runs its part, reports.
fn work(shared: &Shared, t: usize, patience: Duration) {
    let mut seen = 0;
    loop {
        seen = next_generation(shared, seen, patience);
        if shared.stop.load(SeqCst) {
            return;
        }
        let job = shared.job.load(SeqCst);
        // SAFETY: a job is published before its generation, and the caller keeps it and its
        // task alive until `pending` (decremented just below) reaches 0.
        let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*(*job).task)(t) }));
        if let Err(panic) = result {
            let mut first = shared.panic.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert(panic);
        }
        shared.pending.fetch_sub(1, SeqCst);
    }
}

/// Waits for a generation other than `seen` and returns it: for `patience`, then asleep.
fn next_generation(shared: &Shared, seen: u64, patience: Duration) -> u64 {
    let changed = || shared.generation.load(SeqCst) != seen;
    if !wait_for(changed, patience) {
        let mut lock = shared.sleep.lock().unwrap_or_else(|p| p.into_inner());
        shared.sleeping.fetch_add(1, SeqCst);
        while !changed() {
            lock = shared.wake.wait(lock).unwrap_or_else(|p| p.into_inner());
        }
        shared.sleeping.fetch_sub(1, SeqCst);
    }
    shared.generation.load(SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_thread_runs_every_job() {
        let pool = Pool::new(3).unwrap();
        let runs = [
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ];
        for job in 0..1000 {
            if job == 500 {
                std::thread::sleep(PATIENCE * 2); // the workers fall asleep and must be woken
            }
            pool.run(&|t| {
                runs[t].fetch_add(1, SeqCst);
            });
        }
        assert!(runs.iter().all(|r| r.load(SeqCst) == 1000));
    }

    #[test]
    fn a_workers_panic_reaches_the_caller_after_the_job() {
        let pool = Pool::new(2).unwrap();
        let done = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|t| {
                if t == 1 {
                    panic!("part 1 failed");
                }
                done.fetch_add(1, SeqCst);
            })
        }));
        assert!(result.is_err());
        assert_eq!(done.load(SeqCst), 1);
        pool.run(&|_| {
            done.fetch_add(1, SeqCst);
        });
        assert_eq!(done.load(SeqCst), 3, "the pool still works");
    }
}
