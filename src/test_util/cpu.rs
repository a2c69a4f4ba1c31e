//! This thread's CPU time, so that ratios measured on a loaded machine stay honest: wall time
//! charges a benchmark for every moment another process held the CPU, and long measurements are
//! preempted more often than short ones, which skews ratios between fast and slow code. (A busy
//! sibling hyperthread still slows the code down; only an idle machine removes that.)

use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
fn cpu_time(clock: i32) -> Option<Duration> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec (64-bit fields on the 64-bit Linux targets we run
    // on); clock_gettime only writes it.
    let ok = unsafe { clock_gettime(clock, &mut t) } == 0;
    ok.then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

#[cfg(not(target_os = "linux"))]
fn cpu_time(_clock: i32) -> Option<Duration> {
    None
}

/// This thread's CPU time (Linux only).
fn thread_cpu_time() -> Option<Duration> {
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    cpu_time(CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time of the whole process, all threads (Linux only): for work that an async runtime
/// may move between threads (examples/peer_driver.rs).
#[allow(dead_code)]
pub fn process_cpu_time() -> Option<Duration> {
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    cpu_time(CLOCK_PROCESS_CPUTIME_ID)
}

/// Thread CPU time where the platform has it (Linux), else wall time.
pub struct Clock {
    cpu: bool,
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            cpu: cfg!(target_pointer_width = "64") && thread_cpu_time().is_some(),
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> Duration {
        if self.cpu {
            thread_cpu_time().unwrap_or_default()
        } else {
            self.start.elapsed()
        }
    }

    pub fn name(&self) -> &'static str {
        if self.cpu {
            "thread CPU time"
        } else {
            "wall time"
        }
    }

    /// Runs `f` once and returns the time it took on this clock.
    pub fn time(&self, f: impl FnOnce()) -> Duration {
        let start = self.now();
        f();
        self.now().saturating_sub(start)
    }
}

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}
