//! The GPU timing harness of every Genesis bench (`#[path]`-included by each bench binary, so
//! it is no crate's public API).
//!
//! Two clocks: device time between two events recorded around the work on a stream, and the
//! wall clock from before the work to the end of a synchronisation after it (what a caller
//! waits, launch and allocation costs included). Each runs warm-up iterations first, then
//! reports the median and the minimum of the timed runs. With `GENESIS_SOAK_MS` set, benches
//! that support it also time work sustained ([`sustained`]).

use std::time::Instant;

use genesis_cuda::{Event, Stream};

/// The benches' error type.
pub type BoxResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Median and minimum of a set of timings, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The median run.
    pub median_ms: f64,
    /// The fastest run.
    pub min_ms: f64,
}

impl Timing {
    /// Median and minimum of `ms` (at least one value).
    pub fn of(mut ms: Vec<f64>) -> Timing {
        ms.sort_by(f64::total_cmp);
        Timing {
            median_ms: ms[ms.len() / 2],
            min_ms: ms[0],
        }
    }
}

/// Device time of `f` between events on `stream`: `warmup` untimed runs, then `runs` timed
/// ones, each waited for before the next.
pub fn events(
    stream: &Stream,
    warmup: usize,
    runs: usize,
    mut f: impl FnMut() -> BoxResult,
) -> BoxResult<Timing> {
    let ctx = stream.context();
    for _ in 0..warmup {
        f()?;
    }
    stream.synchronize()?;
    let (start, end) = (Event::new(ctx, true)?, Event::new(ctx, true)?);
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        start.record(stream)?;
        f()?;
        end.record(stream)?;
        end.synchronize()?;
        ms.push(f64::from(end.elapsed_ms(&start)?));
    }
    Ok(Timing::of(ms))
}

/// Wall-clock time of `f` followed by `sync`: `warmup` untimed runs, then `runs` timed ones.
pub fn wall(
    warmup: usize,
    runs: usize,
    mut sync: impl FnMut() -> BoxResult,
    mut f: impl FnMut() -> BoxResult,
) -> BoxResult<Timing> {
    for _ in 0..warmup {
        f()?;
    }
    sync()?;
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        sync()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Timing::of(ms))
}

/// `GENESIS_SOAK_MS`: the milliseconds of back-to-back work before a [`sustained`] timing, if
/// set and positive.
pub fn soak_ms() -> Option<u64> {
    std::env::var("GENESIS_SOAK_MS")
        .ok()?
        .parse()
        .ok()
        .filter(|&ms| ms > 0)
}

/// The time of one run of `f` under sustained load, as in training: `f` back to back for
/// `soak_ms` of wall clock (the GPU settles at the clock its power limit allows), then the
/// median of 5 batches of 30 runs queued back to back, each batch's wall clock over 30.
pub fn sustained(
    stream: &Stream,
    soak_ms: u64,
    f: &mut dyn FnMut() -> BoxResult,
) -> BoxResult<f64> {
    let start = Instant::now();
    while start.elapsed().as_millis() < u128::from(soak_ms) {
        for _ in 0..10 {
            f()?;
        }
        stream.synchronize()?;
    }
    let mut ms = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..30 {
            f()?;
        }
        stream.synchronize()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3 / 30.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[2])
}
