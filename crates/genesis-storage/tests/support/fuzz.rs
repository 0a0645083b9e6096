//! The harness of the seeded fuzzers (`fuzz_storage`, genesis-index's `fuzz_plan`,
//! genesis-nn's `fuzz_nn`), which include this file by path: each call runs under
//! `catch_unwind` with a panic hook that records the panic instead of printing it; a panic or
//! a failed check is kept with the seed, the iteration and a description of the input, and
//! [`Fuzz::finish`] fails the test listing the distinct ones. Each fuzzer adds its own input
//! generators in an `impl Fuzz` block of its own.
//!
//! `GENESIS_FUZZ_SEED` (default 0) and `GENESIS_FUZZ_ITERS` (a multiplier of the default
//! iteration counts, default 1) widen a local run; `GENESIS_FUZZ_TRACE` prints each call
//! before it runs; `GENESIS_FUZZ_BACKTRACE` adds a backtrace to each panic reported.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

thread_local! {
    /// The message and location of the last panic on this thread (the hook records it instead
    /// of printing it while a fuzz call runs).
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
    /// Whether a fuzz call is running on this thread.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

fn quiet_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CALL.with(|c| c.get()) {
                default(info);
                return;
            }
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let trace = if std::env::var_os("GENESIS_FUZZ_BACKTRACE").is_some() {
                format!("\n{}", std::backtrace::Backtrace::force_capture())
            } else {
                String::new()
            };
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} (at {at}){trace}"));
        }));
    });
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fuzzer's state: its random numbers, where it is, and what failed.
pub(crate) struct Fuzz {
    pub(crate) rng: SmallRng,
    pub(crate) seed: u64,
    pub(crate) test: &'static str,
    pub(crate) iteration: usize,
    pub(crate) calls: usize,
    pub(crate) failures: Vec<String>,
}

impl Fuzz {
    /// The fuzzer of test `test`, its random numbers seeded by `GENESIS_FUZZ_SEED` and `salt`.
    pub(crate) fn new(test: &'static str, salt: u64) -> Fuzz {
        quiet_panics();
        let seed = env_u64("GENESIS_FUZZ_SEED", 0);
        Fuzz {
            rng: SmallRng::seed_from_u64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            seed,
            test,
            iteration: 0,
            calls: 0,
            failures: Vec::new(),
        }
    }

    /// The iterations of this run: `base` times `GENESIS_FUZZ_ITERS`.
    pub(crate) fn iterations(&self, base: usize) -> usize {
        base * env_u64("GENESIS_FUZZ_ITERS", 1) as usize
    }

    /// Runs `f`; a panic is recorded under `what` (formed only then, or when tracing); an
    /// `Err` from `f` is a failed check.
    pub(crate) fn call(
        &mut self,
        what: &dyn Fn() -> String,
        f: impl FnOnce() -> Result<(), String>,
    ) {
        self.calls += 1;
        if std::env::var_os("GENESIS_FUZZ_TRACE").is_some() {
            eprintln!("[{} iteration {}] {}", self.test, self.iteration, what());
        }
        IN_CALL.with(|c| c.set(true));
        let r = catch_unwind(AssertUnwindSafe(f));
        IN_CALL.with(|c| c.set(false));
        let failure = match r {
            Ok(Ok(())) => return,
            Ok(Err(broken)) => broken,
            Err(_) => format!("panicked: {}", LAST_PANIC.with(|p| p.borrow().clone())),
        };
        let shown: String = what().chars().take(700).collect();
        self.failures.push(format!(
            "[{} seed {} iteration {}] {shown}: {failure}",
            self.test, self.seed, self.iteration
        ));
    }

    /// [`Fuzz::call`] with a description formed up front.
    #[allow(dead_code)]
    pub(crate) fn call_named(&mut self, what: &str, f: impl FnOnce() -> Result<(), String>) {
        self.call(&|| what.to_string(), f)
    }

    /// Fails the test listing the distinct failures (the first 60), if any.
    pub(crate) fn finish(self) {
        let mut distinct: Vec<&String> = Vec::new();
        for f in &self.failures {
            if !distinct.contains(&f) {
                distinct.push(f);
            }
        }
        assert!(
            distinct.is_empty(),
            "{} of {} calls failed:\n{}",
            self.failures.len(),
            self.calls,
            distinct
                .iter()
                .take(60)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    pub(crate) fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.random_range(0..from.len())]
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }
}
