//! A bounded history of allocator events, its report, and a timeline picture.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::panic::Location;
use std::time::Instant;

use crate::backend::StreamId;
use crate::stats::{Stats, human};

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A block was handed out.
    Alloc {
        /// Its address.
        addr: u64,
        /// Its rounded size.
        size: usize,
        /// The size asked for.
        requested: usize,
        /// Its stream.
        stream: StreamId,
        /// Where it was asked for.
        site: Option<&'static Location<'static>>,
    },
    /// A block was given back.
    Free {
        /// Its address.
        addr: u64,
        /// Its rounded size.
        size: usize,
        /// Its stream.
        stream: StreamId,
    },
    /// A plain segment was allocated from the device.
    SegmentAlloc {
        /// Its address.
        addr: u64,
        /// Its size.
        size: usize,
        /// Its stream.
        stream: StreamId,
    },
    /// A plain segment was freed to the device.
    SegmentFree {
        /// Its address.
        addr: u64,
        /// Its size.
        size: usize,
        /// Its stream.
        stream: StreamId,
    },
    /// Physical memory was mapped into a VMM region.
    SegmentMap {
        /// The mapped address.
        addr: u64,
        /// Bytes mapped.
        size: usize,
        /// The region's stream.
        stream: StreamId,
    },
    /// Physical memory was unmapped from a VMM region.
    SegmentUnmap {
        /// The unmapped address.
        addr: u64,
        /// Bytes unmapped.
        size: usize,
        /// The region's stream.
        stream: StreamId,
    },
}

/// One recorded event with its time and the memory totals right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since recording started.
    pub t_ns: u64,
    /// The event.
    pub event: Event,
    /// Allocated bytes after the event.
    pub allocated: i64,
    /// Reserved bytes after the event.
    pub reserved: i64,
}

/// The last `capacity` events.
#[derive(Debug, Clone)]
pub struct History {
    start: Instant,
    capacity: usize,
    records: VecDeque<Record>,
    dropped: u64,
}

impl History {
    /// An empty history keeping at most `capacity` records.
    pub fn new(capacity: usize) -> History {
        History {
            start: Instant::now(),
            capacity: capacity.max(1),
            records: VecDeque::new(),
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, event: Event, stats: &Stats) {
        if self.records.len() == self.capacity {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(Record {
            t_ns: self.start.elapsed().as_nanos() as u64,
            event,
            allocated: stats.allocated_bytes.all().current,
            reserved: stats.reserved_bytes.all().current,
        });
    }

    /// The records, oldest first.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.iter()
    }

    /// How many old records were dropped to stay within the capacity.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// A text report: counts, bytes, peaks, and the largest allocations with their sites.
    pub fn summary(&self) -> String {
        let (mut allocs, mut frees, mut seg) = (0u64, 0u64, 0u64);
        let mut alloc_bytes = 0u64;
        let (mut peak_a, mut peak_r) = (0i64, 0i64);
        let mut largest: Vec<(usize, String)> = Vec::new();
        for r in &self.records {
            peak_a = peak_a.max(r.allocated);
            peak_r = peak_r.max(r.reserved);
            match &r.event {
                Event::Alloc { size, site, .. } => {
                    allocs += 1;
                    alloc_bytes += *size as u64;
                    largest.push((*size, site.map(|s| s.to_string()).unwrap_or_default()));
                }
                Event::Free { .. } => frees += 1,
                _ => seg += 1,
            }
        }
        largest.sort_by_key(|e| std::cmp::Reverse(e.0));
        largest.truncate(10);
        let mut s = String::new();
        let secs = self
            .records
            .back()
            .map(|r| r.t_ns as f64 / 1e9)
            .unwrap_or(0.0);
        let _ = writeln!(
            s,
            "memory history: {} events over {secs:.3} s ({} dropped)",
            self.records.len(),
            self.dropped
        );
        let _ = writeln!(
            s,
            "  allocations: {allocs} ({}), frees: {frees}, segment events: {seg}",
            human(alloc_bytes as i64)
        );
        let _ = writeln!(
            s,
            "  peak allocated: {}, peak reserved: {}",
            human(peak_a),
            human(peak_r)
        );
        let _ = writeln!(s, "  largest allocations:");
        for (size, site) in largest {
            let _ = writeln!(s, "    {:>12}  {site}", human(size as i64));
        }
        s
    }

    /// The recorded allocations and frees in the genesis-trace format (`corpus/README.md` in
    /// this crate): `a ID SIZE STREAM` with the size asked for, `f ID`, streams numbered 0, 1,
    /// ... in order of first use, after `#` lines naming the source and `workload` and giving
    /// `seconds` (the time from the start of recording to the last event) and `dropped` (events
    /// lost to the capacity). `genesis-mem replay` replays it with other settings. A free of a
    /// block allocated before the recorded events is left out.
    pub fn to_trace(&self, workload: &str) -> String {
        let mut out = String::new();
        let workload: String = workload
            .chars()
            .map(|c| {
                if c.is_whitespace() || c == '=' {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        let _ = writeln!(out, "# genesis-trace v1 source=genesis workload={workload}");
        let seconds = self.records.back().map_or(0.0, |r| r.t_ns as f64 / 1e9);
        let _ = writeln!(out, "# seconds={seconds:.3} dropped={}", self.dropped);
        let mut streams: Vec<StreamId> = Vec::new();
        let mut live: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let mut next = 0u64;
        for r in &self.records {
            match r.event {
                Event::Alloc {
                    addr,
                    requested,
                    stream,
                    ..
                } => {
                    let s = match streams.iter().position(|&x| x == stream) {
                        Some(i) => i,
                        None => {
                            streams.push(stream);
                            streams.len() - 1
                        }
                    };
                    live.insert(addr, next);
                    let _ = writeln!(out, "a {next} {requested} {s}");
                    next += 1;
                }
                Event::Free { addr, .. } => {
                    if let Some(id) = live.remove(&addr) {
                        let _ = writeln!(out, "f {id}");
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// An SVG picture of allocated and reserved bytes over time, with the largest allocations
    /// marked at the moment they were made.
    pub fn timeline_svg(&self) -> String {
        timeline_svg(
            self.records
                .iter()
                .map(|r| (r.t_ns as f64 / 1e6, r.allocated as f64, r.reserved as f64))
                .collect(),
            self.records
                .iter()
                .filter_map(|r| match &r.event {
                    Event::Alloc { size, site, .. } => Some((
                        r.t_ns as f64 / 1e6,
                        *size,
                        site.map(|s| s.to_string()).unwrap_or_default(),
                    )),
                    _ => None,
                })
                .collect(),
            "time (ms)",
        )
    }
}

/// Draws `points` (x, allocated, reserved) as two step lines and marks the eight largest
/// `marks` (x, bytes, label).
pub fn timeline_svg(
    points: Vec<(f64, f64, f64)>,
    mut marks: Vec<(f64, usize, String)>,
    x_label: &str,
) -> String {
    let (w, h, left, bottom, top, right) = (1000.0, 420.0, 80.0, 40.0, 30.0, 20.0);
    let max_x = points.iter().map(|p| p.0).fold(1e-9, f64::max);
    let max_y = points.iter().map(|p| p.2.max(p.1)).fold(1.0, f64::max);
    let sx = |x: f64| left + x / max_x * (w - left - right);
    let sy = |y: f64| h - bottom - y / max_y * (h - bottom - top);
    // At most ~4000 points per line so large traces stay light; each kept point carries the
    // maximum of its window, so peaks are never dropped.
    let step = (points.len() / 4000).max(1);
    let points: Vec<(f64, f64, f64)> = points
        .chunks(step)
        .map(|w| {
            let a = w.iter().map(|p| p.1).fold(f64::MIN, f64::max);
            let r = w.iter().map(|p| p.2).fold(f64::MIN, f64::max);
            (w[0].0, a, r)
        })
        .collect();
    let line = |pick: &dyn Fn(&(f64, f64, f64)) -> f64| {
        let mut d = String::new();
        let mut prev_y = None;
        for p in &points {
            let (x, y) = (sx(p.0), sy(pick(p)));
            match prev_y {
                None => {
                    let _ = write!(d, "M{x:.1},{y:.1}");
                }
                Some(py) => {
                    let _ = write!(d, " L{x:.1},{py:.1} L{x:.1},{y:.1}");
                }
            }
            prev_y = Some(y);
        }
        d
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#fff"/>"##);
    let _ = writeln!(
        s,
        r##"<path d="{}" fill="none" stroke="#d62728" stroke-width="1.5"/>"##,
        line(&|p| p.2)
    );
    let _ = writeln!(
        s,
        r##"<path d="{}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>"##,
        line(&|p| p.1)
    );
    for i in 0..=4 {
        let y = max_y * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="4" y="{:.1}">{}</text>"##,
            w - right,
            sy(y),
            sy(y),
            sy(y) + 4.0,
            human(y as i64)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}">{x_label} (0 to {max_x:.1})</text>"#,
        w / 2.0 - 60.0,
        h - 8.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="18" fill="#1f77b4">allocated</text><text x="{}" y="18" fill="#d62728">reserved</text>"##,
        left + 80.0
    );
    marks.sort_by_key(|m| std::cmp::Reverse(m.1));
    for (k, (x, size, label)) in marks.into_iter().take(8).enumerate() {
        let (cx, top_y) = (sx(x), top + 12.0 * k as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{top_y:.1}" y2="{:.1}" stroke="#2ca02c" stroke-dasharray="2,2"/><text x="{:.1}" y="{:.1}" fill="#2ca02c">{} <title>{}</title></text>"##,
            h - bottom,
            cx + 3.0,
            top_y + 9.0,
            human(size as i64),
            xml_escape(&label)
        );
    }
    s += "</svg>\n";
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
