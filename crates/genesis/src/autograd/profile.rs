//! A per-op profile of recorded forwards and of backward nodes: with [`enable`] (or the
//! environment variable `GENESIS_PROFILE=1`), each recorded op's forward and each node's
//! backward is timed between two synchronisations of its device, and [`report`] lists the
//! totals by op, largest first. The synchronisations slow the step down: use it to find where
//! time goes, not to measure the step. With `GENESIS_PROFILE=host` the device is not
//! synchronised and the times are the host's alone (what queuing each op costs, and where the
//! host waits for the device). With `GENESIS_PROFILE=events` nothing is synchronised either:
//! CUDA events recorded before and after each op give its time on the device as the step
//! runs, and the time since the previous op ended (the device idle while the host queues, or
//! running work no op records), which [`report`] lists beside the totals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::{Device, Result};

static ON: OnceLock<AtomicBool> = OnceLock::new();
/// One line of the profile: op, phase, calls, and two times (total and longest call's
/// seconds; with events, the device's milliseconds in the op and before it).
type Row = (&'static str, &'static str, u64, f64, f64);
static TOTALS: Mutex<Vec<Row>> = Mutex::new(Vec::new());
/// The op and phase during which the CUDA allocator's peak of allocated bytes last rose, the
/// peak after it, and the bytes allocated when the op began.
static PEAK: Mutex<Option<(&'static str, &'static str, u64, u64)>> = Mutex::new(None);
/// With `GENESIS_PROFILE_MEMORY=1`: the live allocations when the peak last rose, as
/// (bytes requested, count), largest first.
static PEAK_BLOCKS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Whether the profile times the host only (`GENESIS_PROFILE=host`).
fn host_only() -> bool {
    static HOST: OnceLock<bool> = OnceLock::new();
    *HOST.get_or_init(|| std::env::var("GENESIS_PROFILE").is_ok_and(|v| v == "host"))
}

/// Whether the profile times the device by events (`GENESIS_PROFILE=events`).
fn by_events() -> bool {
    static EVENTS: OnceLock<bool> = OnceLock::new();
    *EVENTS.get_or_init(|| std::env::var("GENESIS_PROFILE").is_ok_and(|v| v == "events"))
}

/// An op's events on its device's current stream, in the order the ops ran.
struct Mark {
    name: &'static str,
    phase: &'static str,
    start: crate::cuda::Event,
    end: crate::cuda::Event,
}

static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

/// Records an event on device `ordinal`'s current stream.
fn event(ordinal: usize) -> Result<crate::cuda::Event> {
    let e = crate::cuda::Event::new(ordinal, true)?;
    e.record(&crate::cuda::Stream::current(ordinal)?)?;
    Ok(e)
}

/// The device time of the marked ops by op and phase: (op, phase, calls, busy ms, ms between
/// the previous op's end and its start), largest busy first; and the marks' span in ms.
/// Synchronises on the last mark.
fn event_totals() -> Result<(Vec<Row>, f64)> {
    let marks = std::mem::take(&mut *MARKS.lock().unwrap_or_else(|e| e.into_inner()));
    let mut rows: Vec<Row> = Vec::new();
    let Some(last) = marks.last() else {
        return Ok((rows, 0.0));
    };
    last.end.synchronize()?;
    let mut previous: Option<&crate::cuda::Event> = None;
    for m in &marks {
        let busy = f64::from(m.end.elapsed_ms(&m.start)?);
        let idle = match previous {
            Some(p) => f64::from(m.start.elapsed_ms(p)?).max(0.0),
            None => 0.0,
        };
        previous = Some(&m.end);
        match rows.iter_mut().find(|r| r.0 == m.name && r.1 == m.phase) {
            Some(r) => {
                r.2 += 1;
                r.3 += busy;
                r.4 += idle;
            }
            None => rows.push((m.name, m.phase, 1, busy, idle)),
        }
    }
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    let span = f64::from(last.end.elapsed_ms(&marks[0].start)?);
    Ok((rows, span))
}

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
    MARKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    *PEAK.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The totals so far, one line per op and phase (`forward` or `backward`): calls, total, mean
/// and longest call's milliseconds, largest total first.
pub fn report() -> String {
    if by_events() {
        return match event_totals() {
            Ok((rows, span)) => {
                let mut s = format!(
                    "{:<28} {:>8} {:>8} {:>12} {:>14}\n",
                    "op", "phase", "calls", "device ms", "gap before ms"
                );
                let (mut busy, mut idle) = (0.0, 0.0);
                for (name, phase, calls, b, i) in rows {
                    s += &format!("{name:<28} {phase:>8} {calls:>8} {b:>12.3} {i:>14.3}\n");
                    busy += b;
                    idle += i;
                }
                s + &format!(
                    "all: {busy:.3} ms in ops, {idle:.3} ms between them (the device idle, or \
                     running work outside recorded ops: gradient sums, the optimiser), \
                     {span:.3} ms from the first op's start to the last one's end\n"
                )
            }
            Err(e) => format!("the events could not be read: {e}\n"),
        };
    }
    let mut rows = TOTALS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    let total: f64 = rows.iter().map(|r| r.3).sum();
    let mut s = format!(
        "{:<28} {:>8} {:>8} {:>12} {:>10} {:>10}\n",
        "op", "phase", "calls", "total ms", "mean ms", "max ms"
    );
    for (name, phase, calls, secs, longest) in rows {
        s += &format!(
            "{name:<28} {phase:>8} {calls:>8} {:>12.3} {:>10.4} {:>10.4}\n",
            secs * 1e3,
            secs * 1e3 / calls as f64,
            longest * 1e3
        );
    }
    s += &format!("{:<28} {:>8} {:>8} {:>12.3}\n", "all", "", "", total * 1e3);
    if let Some((name, phase, peak, before)) = *PEAK.lock().unwrap_or_else(|e| e.into_inner()) {
        s += &format!(
            "peak allocated {:.1} MiB, reached in {name} {phase} (begun at {:.1} MiB)\n",
            peak as f64 / 1048576.0,
            before as f64 / 1048576.0
        );
        for (bytes, count) in PEAK_BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            s += &format!("  {count:>5} x {:>12.3} MiB\n", *bytes as f64 / 1048576.0);
        }
    }
    s
}

fn memory_detail() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("GENESIS_PROFILE_MEMORY").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// The live allocations of CUDA device `ordinal` by size: (bytes requested, count), largest
/// first.
fn live_sizes(ordinal: usize) -> Result<Vec<(usize, usize)>> {
    let snap = crate::cuda::memory_snapshot(ordinal)?;
    let mut by: std::collections::BTreeMap<usize, usize> = Default::default();
    for b in snap.segments.iter().flat_map(|s| &s.blocks) {
        if b.state == genesis_mem::BlockState::Allocated {
            *by.entry(b.requested).or_default() += 1;
        }
    }
    Ok(by.into_iter().rev().collect())
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
    if let (true, Device::Cuda(i)) = (by_events(), device) {
        let start = event(i)?;
        let r = f()?;
        let end = event(i)?;
        MARKS.lock().unwrap_or_else(|e| e.into_inner()).push(Mark {
            name,
            phase,
            start,
            end,
        });
        return Ok(r);
    }
    if host_only() {
        let t = Instant::now();
        let r = f()?;
        add(name, phase, t.elapsed().as_secs_f64());
        return Ok(r);
    }
    sync(device)?;
    let memory = |f: fn(usize) -> Result<u64>| match device {
        Device::Cuda(i) => f(i),
        _ => Ok(0),
    };
    let (peak_before, before) = (
        memory(crate::cuda::max_memory_allocated)?,
        memory(crate::cuda::memory_allocated)?,
    );
    let t = Instant::now();
    let r = f()?;
    sync(device)?;
    let secs = t.elapsed().as_secs_f64();
    let peak = memory(crate::cuda::max_memory_allocated)?;
    if peak > peak_before {
        *PEAK.lock().unwrap_or_else(|e| e.into_inner()) = Some((name, phase, peak, before));
        if let (Device::Cuda(i), true) = (device, memory_detail()) {
            *PEAK_BLOCKS.lock().unwrap_or_else(|e| e.into_inner()) = live_sizes(i)?;
        }
    }
    add(name, phase, secs);
    Ok(r)
}

fn add(name: &'static str, phase: &'static str, secs: f64) {
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    match totals.iter_mut().find(|r| r.0 == name && r.1 == phase) {
        Some(row) => {
            row.2 += 1;
            row.3 += secs;
            row.4 = row.4.max(secs);
        }
        None => totals.push((name, phase, 1, secs, secs)),
    }
}
