//! genesis-trace files and their replay through the real allocator over a simulated driver.
//!
//! Format (one event a line): `a ID SIZE STREAM` allocates SIZE bytes as ID on STREAM, `f ID`
//! frees it; `#` lines are metadata (`# key=value ...`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::Instant;

use crate::backend::SimBackend;
use crate::{Allocation, CachingAllocator, Config};

/// One event of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// Allocate `size` bytes as `id` on `stream`.
    Alloc {
        /// The id.
        id: u64,
        /// Bytes.
        size: usize,
        /// The stream.
        stream: u64,
    },
    /// Free `id`.
    Free {
        /// The id.
        id: u64,
    },
}

/// A parsed trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Its name (the file name without `.trace` / `.trace.gz`).
    pub name: String,
    /// Metadata from `#` lines (`segment_allocs`, `peak_reserved`, ...).
    pub meta: HashMap<String, String>,
    /// The events.
    pub events: Vec<TraceEvent>,
}

/// Errors reading a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line that is not an event.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl Trace {
    /// Reads a `.trace` or `.trace.gz` file.
    pub fn read(path: &Path) -> Result<Trace, TraceError> {
        let p = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
            path: p.clone(),
            source,
        })?;
        let gz = path.extension().is_some_and(|e| e == "gz");
        let reader: Box<dyn Read> = if gz {
            Box::new(flate2::read::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .trim_end_matches(".gz")
            .trim_end_matches(".trace")
            .to_string();
        Trace::parse(&name, &p, BufReader::new(reader))
    }

    /// Parses a trace from text.
    pub fn parse(name: &str, path: &str, reader: impl BufRead) -> Result<Trace, TraceError> {
        let mut t = Trace {
            name: name.to_string(),
            ..Trace::default()
        };
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(|source| TraceError::Io {
                path: path.to_string(),
                source,
            })?;
            let err = |message: String| TraceError::Parse {
                path: path.to_string(),
                line: i + 1,
                message,
            };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix('#') {
                for kv in meta.split_whitespace() {
                    if let Some((k, v)) = kv.split_once('=') {
                        t.meta.insert(k.to_string(), v.to_string());
                    }
                }
                continue;
            }
            let mut parts = line.split_whitespace();
            let num = |s: Option<&str>, what: &str| -> Result<u64, TraceError> {
                s.ok_or_else(|| err(format!("missing {what}")))?
                    .parse::<u64>()
                    .map_err(|_| err(format!("bad {what}")))
            };
            match parts.next() {
                Some("a") => {
                    let id = num(parts.next(), "id")?;
                    let size = num(parts.next(), "size")? as usize;
                    let stream = match parts.next() {
                        Some(s) => s.parse().map_err(|_| err("bad stream".into()))?,
                        None => 0,
                    };
                    t.events.push(TraceEvent::Alloc { id, size, stream });
                }
                Some("f") => t.events.push(TraceEvent::Free {
                    id: num(parts.next(), "id")?,
                }),
                Some(other) => return Err(err(format!("unknown event {other:?}"))),
                None => {}
            }
        }
        Ok(t)
    }

    /// PyTorch's segment count for the run (`segment_allocs`), when recorded.
    pub fn pytorch_segments(&self) -> Option<u64> {
        self.meta_u64("segment_allocs")
    }

    fn meta_u64(&self, key: &str) -> Option<u64> {
        self.meta.get(key).and_then(|v| v.parse().ok())
    }

    /// PyTorch's own figures for the workload, as far as the header records them.
    pub fn pytorch_figures(&self) -> PytorchFigures {
        PytorchFigures {
            default_reserved: self.meta_u64("peak_reserved"),
            segments: self.pytorch_segments(),
            expandable_reserved: self.meta_u64("expandable_peak_reserved"),
            expandable_maps: self.meta_u64("expandable_maps"),
            async_reserved: self.meta_u64("async_peak_reserved"),
        }
    }
}

/// PyTorch's figures for a traced workload (header keys in parentheses): peak reserved bytes
/// with its default allocator (`peak_reserved`) and the segments it made (`segment_allocs`),
/// with `expandable_segments:True` (`expandable_peak_reserved`, `expandable_maps`), and with
/// `backend:cudaMallocAsync` (`async_peak_reserved`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PytorchFigures {
    /// Peak reserved bytes, default allocator.
    pub default_reserved: Option<u64>,
    /// Segments the default allocator made.
    pub segments: Option<u64>,
    /// Peak reserved bytes with expandable segments.
    pub expandable_reserved: Option<u64>,
    /// Maps made with expandable segments.
    pub expandable_maps: Option<u64>,
    /// Peak reserved bytes with `cudaMallocAsync`.
    pub async_reserved: Option<u64>,
}

/// The fragmentation bound every trace is held to: peak reserved / peak live.
pub const TARGET_RATIO: f64 = 1.03;

/// Driver calls allowed per segment or map PyTorch made (the larger of the two counts).
pub const CALLS_PER_PYTORCH_SEGMENT: u64 = 4;

impl PytorchFigures {
    /// Each of PyTorch's three peak-reserved figures divided by `peak_live` (default,
    /// expandable segments, cudaMallocAsync).
    pub fn ratios(&self, peak_live: u64) -> [Option<f64>; 3] {
        let r = |b: Option<u64>| {
            b.filter(|_| peak_live > 0)
                .map(|b| b as f64 / peak_live as f64)
        };
        [
            r(self.default_reserved),
            r(self.expandable_reserved),
            r(self.async_reserved),
        ]
    }

    /// The ratio to meet: [`TARGET_RATIO`], or the lowest of PyTorch's figures if lower.
    pub fn target_ratio(&self, peak_live: u64) -> f64 {
        self.ratios(peak_live)
            .into_iter()
            .flatten()
            .fold(TARGET_RATIO, f64::min)
    }

    /// The driver calls allowed: [`CALLS_PER_PYTORCH_SEGMENT`] times the larger of the
    /// default allocator's segments and expandable segments' maps (`None` when neither is
    /// recorded).
    pub fn call_budget(&self) -> Option<u64> {
        match (self.segments, self.expandable_maps) {
            (None, None) => None,
            (a, b) => Some(CALLS_PER_PYTORCH_SEGMENT * a.unwrap_or(0).max(b.unwrap_or(0))),
        }
    }
}

/// What a replay measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayResult {
    /// The trace's name.
    pub trace: String,
    /// Events replayed.
    pub events: usize,
    /// Peak of the sum of requested sizes of live ids.
    pub peak_live_bytes: u64,
    /// Peak reserved bytes of the allocator.
    pub peak_reserved_bytes: u64,
    /// peak reserved / peak live.
    pub ratio: f64,
    /// Driver calls that created, mapped, unmapped or released memory
    /// ([`crate::CallCounts::memory`]): what the call budget counts.
    pub driver_calls: u64,
    /// Every driver call, access grants and address reservations included.
    pub all_driver_calls: u64,
    /// The driver calls' time as the simulated driver prices it ([`crate::SimBackend::PRICES`]),
    /// in nanoseconds.
    pub driver_ns: u64,
    /// Driver calls that created, mapped, unmapped or released memory in the second half of
    /// the trace's events.
    pub late_driver_calls: u64,
    /// Driver calls that created, mapped, unmapped or released memory after reserved memory
    /// last grew: what the allocator does once its footprint is final (a training loop's
    /// steady state, whenever the workload reaches its largest step). A trace whose largest
    /// step comes late has growth in its second half ([`Self::late_driver_calls`]) but none
    /// of these unless the allocator gives memory back and takes it again.
    pub steady_driver_calls: u64,
    /// The traced run's wall time in seconds (header key `seconds`), when recorded.
    pub seconds: Option<f64>,
    /// PyTorch's segment count, when the trace records it.
    pub pytorch_segments: Option<u64>,
    /// PyTorch's figures from the trace's header.
    pub pytorch: PytorchFigures,
    /// Host nanoseconds per operation (alloc or free), averaged.
    pub ns_per_op: f64,
    /// Frees of ids that were never allocated (or already freed): skipped.
    pub unknown_frees: usize,
    /// What the reserved memory held when the peak reserved was reached (the last time it
    /// rose).
    pub at_peak: PeakDetail,
    /// (event index, allocated bytes, reserved bytes) samples, for the timeline.
    pub timeline: Vec<(f64, f64, f64)>,
    /// The largest allocations: (event index, bytes, label), for the timeline.
    pub largest: Vec<(f64, usize, String)>,
}

/// The reserved memory at the peak, by what it held: the event, the bytes handed out
/// (allocated blocks, their rounding included), free bytes mapped (free, cached or waiting
/// blocks) in blocks below 2 MiB and from 2 MiB on, the largest free block, and the free
/// blocks' count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeakDetail {
    /// Index of the event after which the peak was reached.
    pub event: usize,
    /// Bytes in allocated blocks.
    pub allocated: u64,
    /// Free mapped bytes in blocks smaller than 2 MiB.
    pub free_small: u64,
    /// Free mapped bytes in blocks of 2 MiB or more.
    pub free_large: u64,
    /// The largest free mapped block.
    pub largest_free: u64,
    /// Free mapped blocks.
    pub free_blocks: usize,
}

impl PeakDetail {
    fn of(event: usize, snap: &crate::snapshot::Snapshot) -> PeakDetail {
        use crate::BlockState as S;
        let mut d = PeakDetail {
            event,
            ..PeakDetail::default()
        };
        for b in snap.segments.iter().flat_map(|s| &s.blocks) {
            let size = b.size as u64;
            match b.state {
                S::Allocated => d.allocated += size,
                S::Free | S::Cached | S::PendingFree => {
                    if size < 2 << 20 {
                        d.free_small += size;
                    } else {
                        d.free_large += size;
                    }
                    d.largest_free = d.largest_free.max(size);
                    d.free_blocks += 1;
                }
                S::Unmapped => {}
            }
        }
        d
    }
}

/// Replays `trace` through a [`CachingAllocator`] over a simulated device of `device_bytes`.
pub fn replay(
    trace: &Trace,
    config: Config,
    device_bytes: usize,
) -> Result<ReplayResult, crate::Error> {
    replay_evicting(trace, config, device_bytes, 0)
}

/// [`replay`], writing one byte in every 64 of an `evict_bytes` buffer before each operation
/// (outside the timed part): the allocator then runs with caches that other work has filled,
/// as it does inside a program, and [`ReplayResult::ns_per_op`] counts its cache misses. The
/// memory figures do not change.
pub fn replay_evicting(
    trace: &Trace,
    config: Config,
    device_bytes: usize,
    evict_bytes: usize,
) -> Result<ReplayResult, crate::Error> {
    let alloc = CachingAllocator::new(SimBackend::new(device_bytes, config.use_vmm), config)?;
    let mut live: HashMap<u64, Allocation> = HashMap::with_capacity(1024);
    let mut sizes: HashMap<u64, usize> = HashMap::with_capacity(1024);
    let (mut cur, mut peak) = (0u64, 0u64);
    let mut unknown = 0;
    let mut timeline = Vec::new();
    let sample = (trace.events.len() / 20_000).max(1);
    let mut host_ns = 0u128;
    let mut largest: Vec<(f64, usize, String)> = Vec::new();
    let mut evict = vec![0u8; evict_bytes];
    let half = trace.events.len() / 2;
    let mut calls_at_half = 0;
    let mut at_peak = PeakDetail::default();
    let (mut reserved_peak, mut calls_seen, mut calls_at_peak) = (0, 0, 0);
    for (i, ev) in trace.events.iter().enumerate() {
        if i == half {
            calls_at_half = alloc.driver_calls().memory();
        }
        for line in evict.chunks_mut(64) {
            line[0] = line[0].wrapping_add(1);
        }
        std::hint::black_box(&mut evict);
        match *ev {
            TraceEvent::Alloc { id, size, stream } => {
                if size == 0 {
                    continue;
                }
                if let Some(old) = live.remove(&id) {
                    // An id reused without a free: the old one is freed first.
                    cur -= sizes.remove(&id).unwrap_or(0) as u64;
                    alloc.free(old)?;
                }
                let t = Instant::now();
                let a = alloc.alloc(size, stream)?;
                host_ns += t.elapsed().as_nanos();
                live.insert(id, a);
                sizes.insert(id, size);
                if largest.len() < 8
                    || size > largest.last().map_or(0, |l: &(f64, usize, String)| l.1)
                {
                    largest.push((i as f64, size, format!("id {id}, event {i}")));
                    largest.sort_by_key(|l| std::cmp::Reverse(l.1));
                    largest.truncate(8);
                }
                cur += size as u64;
                peak = peak.max(cur);
                // Reserved memory grows only through the driver: look when it was called.
                let calls = alloc.driver_calls().total();
                if calls != calls_seen {
                    calls_seen = calls;
                    let reserved = alloc.stats().reserved_bytes.all().current;
                    if reserved > reserved_peak {
                        reserved_peak = reserved;
                        at_peak = PeakDetail::of(i, &alloc.snapshot());
                        calls_at_peak = alloc.driver_calls().memory();
                    }
                }
            }
            TraceEvent::Free { id } => match live.remove(&id) {
                Some(a) => {
                    cur -= sizes.remove(&id).unwrap_or(0) as u64;
                    let t = Instant::now();
                    alloc.free(a)?;
                    host_ns += t.elapsed().as_nanos();
                }
                None => unknown += 1,
            },
        }
        if i % sample == 0 {
            let s = alloc.stats();
            timeline.push((
                i as f64,
                s.allocated_bytes.all().current as f64,
                s.reserved_bytes.all().current as f64,
            ));
        }
    }
    let stats = alloc.stats();
    let peak_reserved = stats.reserved_bytes.all().peak as u64;
    let ops = trace.events.len().max(1);
    Ok(ReplayResult {
        trace: trace.name.clone(),
        events: trace.events.len(),
        peak_live_bytes: peak,
        peak_reserved_bytes: peak_reserved,
        ratio: if peak == 0 {
            0.0
        } else {
            peak_reserved as f64 / peak as f64
        },
        driver_calls: alloc.driver_calls().memory(),
        all_driver_calls: alloc.driver_calls().total(),
        driver_ns: alloc.driver_calls().nanos,
        late_driver_calls: alloc.driver_calls().memory() - calls_at_half,
        steady_driver_calls: alloc.driver_calls().memory() - calls_at_peak,
        seconds: trace.meta.get("seconds").and_then(|v| v.parse().ok()),
        pytorch_segments: trace.pytorch_segments(),
        pytorch: trace.pytorch_figures(),
        ns_per_op: host_ns as f64 / ops as f64,
        unknown_frees: unknown,
        at_peak,
        timeline,
        largest,
    })
}

impl ReplayResult {
    /// The lowest of PyTorch's three peak-reserved / peak-live figures (`None` when the trace
    /// records none).
    pub fn best_pytorch_ratio(&self) -> Option<f64> {
        self.pytorch
            .ratios(self.peak_live_bytes)
            .into_iter()
            .flatten()
            .reduce(f64::min)
    }

    /// The priced driver time as a fraction of the traced run's wall time (`None` when the
    /// trace does not record it).
    pub fn driver_time_fraction(&self) -> Option<f64> {
        self.seconds
            .filter(|&s| s > 0.0)
            .map(|s| self.driver_ns as f64 / 1e9 / s)
    }

    /// The ratio this trace must meet ([`PytorchFigures::target_ratio`]).
    pub fn target_ratio(&self) -> f64 {
        self.pytorch.target_ratio(self.peak_live_bytes)
    }

    /// The driver calls this trace may make ([`PytorchFigures::call_budget`]).
    pub fn call_budget(&self) -> Option<u64> {
        self.pytorch.call_budget()
    }

    /// Whether the replay met both targets (the ratio, and the call budget when known).
    pub fn meets_targets(&self) -> bool {
        self.ratio <= self.target_ratio()
            && self.call_budget().is_none_or(|b| self.driver_calls <= b)
    }

    /// One JSON object (one line).
    pub fn to_json(&self) -> String {
        let [default, expandable, async_] = self.pytorch.ratios(self.peak_live_bytes);
        serde_json::json!({
            "pytorch_default_ratio": default,
            "pytorch_expandable_ratio": expandable,
            "pytorch_expandable_maps": self.pytorch.expandable_maps,
            "pytorch_async_ratio": async_,
            "target_ratio": self.target_ratio(),
            "call_budget": self.call_budget(),
            "meets_targets": self.meets_targets(),
            "trace": self.trace,
            "events": self.events,
            "peak_live_bytes": self.peak_live_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "ratio": self.ratio,
            "driver_calls": self.driver_calls,
            "all_driver_calls": self.all_driver_calls,
            "driver_ns": self.driver_ns,
            "late_driver_calls": self.late_driver_calls,
            "steady_driver_calls": self.steady_driver_calls,
            "seconds": self.seconds,
            "driver_time_fraction": self.driver_time_fraction(),
            "best_pytorch_ratio": self.best_pytorch_ratio(),
            "at_peak": {
                "event": self.at_peak.event,
                "allocated": self.at_peak.allocated,
                "free_small": self.at_peak.free_small,
                "free_large": self.at_peak.free_large,
                "largest_free": self.at_peak.largest_free,
                "free_blocks": self.at_peak.free_blocks,
            },
            "pytorch_segments": self.pytorch_segments,
            "ns_per_op": self.ns_per_op,
            "unknown_frees": self.unknown_frees,
        })
        .to_string()
    }
}
