//! Snapshots of every segment and block.

use crate::allocator::BlockState;
use crate::backend::StreamId;

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address.
    pub addr: u64,
    /// Size in bytes.
    pub size: usize,
    /// Bytes requested (0 unless allocated).
    pub requested: usize,
    /// State.
    pub state: BlockState,
    /// Allocation site, for allocated blocks with sites recorded.
    pub site: Option<String>,
}

/// One segment: a plain device allocation, or a VMM region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Base address.
    pub addr: u64,
    /// Bytes covered by its blocks (with VMM, unmapped holes included).
    pub total_size: usize,
    /// Its stream.
    pub stream: StreamId,
    /// Whether it is a VMM region.
    pub vmm: bool,
    /// Its blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

/// Every segment and block of an allocator at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The segments.
    pub segments: Vec<SegmentInfo>,
    /// Device memory in bytes.
    pub device_total: usize,
}

fn state_name(s: BlockState) -> &'static str {
    match s {
        BlockState::Allocated => "active_allocated",
        BlockState::PendingFree => "active_pending_free",
        BlockState::Free | BlockState::Cached => "inactive",
        BlockState::Unmapped => "unmapped",
    }
}

impl Snapshot {
    /// The snapshot as JSON, with PyTorch's field names where they exist.
    pub fn to_json(&self) -> String {
        let segments: Vec<serde_json::Value> = self
            .segments
            .iter()
            .map(|s| {
                let blocks: Vec<serde_json::Value> = s
                    .blocks
                    .iter()
                    .map(|b| {
                        serde_json::json!({
                            "address": b.addr,
                            "size": b.size,
                            "requested_size": b.requested,
                            "state": state_name(b.state),
                            "site": b.site,
                        })
                    })
                    .collect();
                let allocated: usize = s
                    .blocks
                    .iter()
                    .filter(|b| b.state == BlockState::Allocated)
                    .map(|b| b.size)
                    .sum();
                serde_json::json!({
                    "address": s.addr,
                    "total_size": s.total_size,
                    "stream": s.stream,
                    "segment_type": if s.vmm { "expandable" } else { "plain" },
                    "allocated_size": allocated,
                    "blocks": blocks,
                })
            })
            .collect();
        serde_json::json!({ "device_total": self.device_total, "segments": segments }).to_string()
    }
}

/// One entry of the `device_traces` of a PyTorch snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// `alloc`, `free_completed`, `segment_alloc`, `segment_free`, `segment_map`,
    /// `segment_unmap`.
    pub action: &'static str,
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: usize,
    /// Stream.
    pub stream: StreamId,
    /// Microseconds since recording started.
    pub time_us: u64,
    /// Call site, if known.
    pub site: Option<String>,
}

/// A minimal pickle (protocol 2) writer for the value shapes a snapshot needs.
struct Pickle {
    out: Vec<u8>,
}

impl Pickle {
    fn new() -> Pickle {
        Pickle { out: vec![0x80, 2] }
    }
    fn finish(mut self) -> Vec<u8> {
        self.out.push(b'.');
        self.out
    }
    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }
    fn int(&mut self, v: i128) {
        if let Ok(small) = i32::try_from(v) {
            self.out.push(b'J');
            self.out.extend_from_slice(&small.to_le_bytes());
        } else {
            // LONG1: little-endian two's complement, shortest form.
            let bytes = v.to_le_bytes();
            let mut n = bytes.len();
            while n > 1 {
                let (last, prev) = (bytes[n - 1], bytes[n - 2]);
                if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.push(0x8a);
            self.out.push(n as u8);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }
    fn bool(&mut self, b: bool) {
        self.out.push(if b { 0x88 } else { 0x89 });
    }
    fn none(&mut self) {
        self.out.push(b'N');
    }
    /// A dict: `EMPTY_DICT MARK key value ... SETITEMS`.
    fn dict(&mut self, items: impl FnOnce(&mut Pickle)) {
        self.out.extend_from_slice(b"}(");
        items(self);
        self.out.push(b'u');
    }
    /// A list: `EMPTY_LIST MARK item ... APPENDS`.
    fn list(&mut self, items: impl FnOnce(&mut Pickle)) {
        self.out.extend_from_slice(b"](");
        items(self);
        self.out.push(b'e');
    }
    fn key(&mut self, k: &str) -> &mut Pickle {
        self.str(k);
        self
    }
}

fn frames(p: &mut Pickle, site: Option<&str>) {
    p.list(|p| {
        if let Some(site) = site {
            // "path:line:col" from std::panic::Location.
            let mut parts = site.rsplitn(3, ':');
            let _col = parts.next();
            let line = parts
                .next()
                .and_then(|l| l.parse::<i128>().ok())
                .unwrap_or(0);
            let file = parts.next().unwrap_or(site);
            p.dict(|p| {
                p.key("filename").str(file);
                p.key("line").int(line);
                p.key("name").str("genesis allocation");
            });
        }
    });
}

impl Snapshot {
    /// The snapshot as a PyTorch memory snapshot pickle (what `torch.cuda.memory._snapshot()`
    /// returns, pickled), which PyTorch's memory viewer (`memory_viz`) opens. Each mapped run
    /// of a VMM region is one segment; `traces` become `device_traces[0]`.
    pub fn to_pytorch_pickle(&self, device: usize, traces: &[TraceEntry]) -> Vec<u8> {
        let mut p = Pickle::new();
        p.dict(|p| {
            p.key("segments").list(|p| {
                for seg in &self.segments {
                    // Split at unmapped holes: PyTorch's segments are mapped memory.
                    let mut runs: Vec<Vec<&BlockInfo>> = vec![Vec::new()];
                    for b in &seg.blocks {
                        if b.state == BlockState::Unmapped {
                            runs.push(Vec::new());
                        } else {
                            // `runs` starts with one run and only ever grows.
                            runs.last_mut().expect("never empty").push(b);
                        }
                    }
                    for run in runs.into_iter().filter(|r| !r.is_empty()) {
                        let total: usize = run.iter().map(|b| b.size).sum();
                        let allocated: usize = run
                            .iter()
                            .filter(|b| b.state == BlockState::Allocated)
                            .map(|b| b.size)
                            .sum();
                        let active: usize = run
                            .iter()
                            .filter(|b| {
                                matches!(b.state, BlockState::Allocated | BlockState::PendingFree)
                            })
                            .map(|b| b.size)
                            .sum();
                        let requested: usize = run.iter().map(|b| b.requested).sum();
                        p.dict(|p| {
                            p.key("device").int(device as i128);
                            p.key("address").int(i128::from(run[0].addr));
                            p.key("total_size").int(total as i128);
                            p.key("allocated_size").int(allocated as i128);
                            p.key("active_size").int(active as i128);
                            p.key("requested_size").int(requested as i128);
                            p.key("stream").int(i128::from(seg.stream));
                            p.key("segment_type").str(if total <= 2 << 20 {
                                "small"
                            } else {
                                "large"
                            });
                            p.key("segment_pool_id");
                            p.out.extend_from_slice(b"J\0\0\0\0J\0\0\0\0\x86");
                            p.key("is_expandable").bool(seg.vmm);
                            p.key("frames").list(|_| {});
                            p.key("blocks").list(|p| {
                                for b in &run {
                                    p.dict(|p| {
                                        p.key("address").int(i128::from(b.addr));
                                        p.key("size").int(b.size as i128);
                                        p.key("requested_size").int(b.requested as i128);
                                        p.key("state").str(state_name(b.state));
                                        p.key("frames");
                                        frames(p, b.site.as_deref());
                                    });
                                }
                            });
                        });
                    }
                }
            });
            p.key("device_traces").list(|p| {
                p.list(|p| {
                    for t in traces {
                        p.dict(|p| {
                            p.key("action").str(t.action);
                            p.key("addr").int(i128::from(t.addr));
                            p.key("size").int(t.size as i128);
                            p.key("stream").int(i128::from(t.stream));
                            p.key("time_us").int(i128::from(t.time_us));
                            p.key("frames");
                            frames(p, t.site.as_deref());
                        });
                    }
                });
            });
            p.key("allocator_settings").dict(|p| {
                p.key("allocator").str("genesis");
            });
            p.key("device_total").int(self.device_total as i128);
            p.key("note");
            p.none();
        });
        p.finish()
    }
}

impl crate::history::History {
    /// The history as PyTorch `device_traces` entries.
    pub fn trace_entries(&self) -> Vec<TraceEntry> {
        use crate::history::Event;
        self.records()
            .map(|r| {
                let (action, addr, size, stream, site) = match &r.event {
                    Event::Alloc {
                        addr,
                        size,
                        stream,
                        site,
                        ..
                    } => ("alloc", *addr, *size, *stream, site.map(|s| s.to_string())),
                    Event::Free { addr, size, stream } => {
                        ("free_completed", *addr, *size, *stream, None)
                    }
                    Event::SegmentAlloc { addr, size, stream } => {
                        ("segment_alloc", *addr, *size, *stream, None)
                    }
                    Event::SegmentFree { addr, size, stream } => {
                        ("segment_free", *addr, *size, *stream, None)
                    }
                    Event::SegmentMap { addr, size, stream } => {
                        ("segment_map", *addr, *size, *stream, None)
                    }
                    Event::SegmentUnmap { addr, size, stream } => {
                        ("segment_unmap", *addr, *size, *stream, None)
                    }
                };
                TraceEntry {
                    action,
                    addr,
                    size,
                    stream,
                    time_us: r.t_ns / 1000,
                    site,
                }
            })
            .collect()
    }
}
