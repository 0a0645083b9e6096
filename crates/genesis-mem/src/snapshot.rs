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
