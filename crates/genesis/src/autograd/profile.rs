//! A per-op profile of recorded forwards and of backward nodes: with [`enable`] (or the
//! environment variable `GENESIS_PROFILE=1`), each recorded op's forward and each node's
//! backward is timed between two synchronisations of its device, and [`report`] lists the
//! totals by op, largest first. The synchronisations slow the step down: use it to find where
//! time goes, not to measure the step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::{Device, Result};

static ON: OnceLock<AtomicBool> = OnceLock::new();
static TOTALS: Mutex<Vec<(&'static str, &'static str, u64, f64)>> = Mutex::new(Vec::new());

fn flag() -> &'static AtomicBool {
    ON.get_or_init(|| {
        AtomicBool::new(std::env::var("GENESIS_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"))
    })
}

/// Turns profiling on or off.
pub fn enable(on: bool) {
    flag().store(on, Ordering::Relaxed);
}

/// Whether profiling is on.
pub fn is_enabled() -> bool {
    flag().load(Ordering::Relaxed)
}

/// Forgets the totals.
pub fn reset() {
    TOTALS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The totals so far, one line per op and phase (`forward` or `backward`): calls, total and
/// mean milliseconds, largest total first.
pub fn report() -> String {
    let mut rows = TOTALS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    let total: f64 = rows.iter().map(|r| r.3).sum();
    let mut s = format!(
        "{:<28} {:>8} {:>8} {:>12} {:>10}\n",
        "op", "phase", "calls", "total ms", "mean ms"
    );
    for (name, phase, calls, secs) in rows {
        s += &format!(
            "{name:<28} {phase:>8} {calls:>8} {:>12.3} {:>10.4}\n",
            secs * 1e3,
            secs * 1e3 / calls as f64
        );
    }
    s += &format!("{:<28} {:>8} {:>8} {:>12.3}\n", "all", "", "", total * 1e3);
    s
}

fn sync(device: Device) -> Result<()> {
    if let Device::Cuda(i) = device {
        crate::cuda::synchronize(i)?;
    }
    Ok(())
}

/// Runs `f`, timed under `name` and `phase` when profiling is on.
pub(crate) fn timed<R>(
    name: &'static str,
    phase: &'static str,
    device: Option<Device>,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let Some(device) = device.filter(|_| is_enabled()) else {
        return f();
    };
    sync(device)?;
    let t = Instant::now();
    let r = f()?;
    sync(device)?;
    let secs = t.elapsed().as_secs_f64();
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    match totals.iter_mut().find(|r| r.0 == name && r.1 == phase) {
        Some(row) => {
            row.2 += 1;
            row.3 += secs;
        }
        None => totals.push((name, phase, 1, secs)),
    }
    Ok(r)
}
