//! The GPU timing harness of every Genesis bench (`#[path]`-included by each bench binary, so
//! it is no crate's public API).
//!
//! Two clocks: device time between two events recorded around the work on a stream, and the
//! wall clock from before the work to the end of a synchronisation after it (what a caller
//! waits, launch and allocation costs included). Each runs warm-up iterations first, then
//! reports the median and the minimum of the timed runs.

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
