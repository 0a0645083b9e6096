//! The caching allocator: policy, block bookkeeping, limits and recovery.
//!
//! # Policy
//!
//! Requests are rounded up to 512 bytes. Each stream has its own free blocks; a block is handed
//! out again only on the stream it was freed on, or once events show the other streams' work on
//! it is done.
//!
//! - **Fast path.** A freed block goes to a per-(stream, size) quick list without coalescing; a
//!   request of the same size pops it in O(1). Quick lists are flushed (coalesced into the free
//!   index) whenever the free index cannot serve a request, so they never cause growth.
//! - **Placement** over the coalesced free blocks (indexed by size, then address), looking at
//!   no more than the 64 smallest blocks that fit. The block is split; the rest stays free.
//!   - *Small* requests (at most [`Config::small_bytes`], 64 KiB) go first fit: the lowest
//!     address that fits. Small, short-lived blocks pack together at the low end instead of
//!     cutting into the holes that larger blocks leave.
//!   - Other requests go best fit (the smallest block, lowest address first). With virtual
//!     memory a placement that would pin a *wholly free* physical handle of 8 granules
//!     (16 MiB) or more is avoided: the request goes to the other end of the block, or to the
//!     next fitting block, and pins such a handle only when every choice does (the fewest
//!     bytes of them). Free big handles stay whole, for a large request or for a growth to
//!     move.
//!   - *Large* requests (at least [`Config::large_bytes`]; virtual memory only; none by
//!     default) first look for a run of consecutive wholly free handles that they fill with at
//!     most 1/8 left over, best fill first; a run within a granule of the request is taken
//!     whole. Otherwise they are placed as other requests.
//! - **Growth with virtual memory** (when the backend supports it): each stream has one region of
//!   reserved address space. New memory goes where it needs the fewest new bytes: after the free
//!   block at the end of the region, or into an unmapped hole of the region next to free blocks
//!   (filled from its front or its back). It comes first from *moving* physical handles that lie
//!   wholly under free ranges elsewhere (a map, no new memory: the old mapping stays, stale,
//!   under an unmapped range until new memory is mapped there or the handle is released; a move
//!   to another stream's region first waits for the old stream), and only then from new handles,
//!   none larger than [`Config::max_handle_bytes`] (80 MiB; 32 MiB in [`Config::memory_first`]).
//!   A handle is mapped whole, so one live block on it keeps all of it in place: finer handles
//!   let more free memory move, at the cost of more driver calls. When [`Config::large_bytes`] is
//!   set, a large request is rounded up to the granularity and starts at a handle boundary, on
//!   [`Config::large_handle_pieces`] equal handles of its own (it may start at the first handle
//!   of the free block at the region's end): once freed, its memory is reused whole by the next
//!   large request or moved by a growth in a few remaps. Growths that come within 64 operations
//!   of each other are a burst (loading a model, a first training step); there the region grows
//!   ahead of the request, by 16 MiB doubling up to 1/64 of reserved memory, as long as what is
//!   left cached stays within max(16 MiB, 1/64 of allocated memory) (the defaults of
//!   [`Config::burst_headroom_div`] and [`Config::burst_headroom_granules`]): far fewer driver
//!   calls for little memory ahead. A lone growth maps exactly what the request lacks. Handles
//!   that lie wholly under free ranges are used before any new memory, and no address of a live
//!   block ever moves.
//! - **Growth with plain segments**: a segment of exactly the rounded request (2 MiB for small
//!   requests). Before reserved memory would pass its earlier peak, wholly free segments are
//!   freed, least recently used first. Placement is best fit.
//! - **Out of memory**: release every cached byte the allocator can (waiting for pending
//!   events), retry once, then return [`Error::OutOfMemory`] with the numbers and the largest
//!   live allocations and their call sites. The allocator stays usable.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::backend::{Backend, BackendError, CallCounts, EventId, PhysHandle, StreamId};
use crate::stats::{Pool, Stats};

/// Every block is a multiple of this many bytes, and aligned to it.
pub const ALIGNMENT: usize = 512;

const NONE: u32 = u32::MAX;

/// A growth that comes within this many operations (allocs and frees) of the previous one
/// continues a burst of growth.
const BURST_OPS: u64 = 64;

/// The default of [`Config::burst_headroom_div`] and [`Config::burst_headroom_granules`].
const HEADROOM_DIV: usize = 64;
const HEADROOM_GRANULES: usize = 8;

/// The default of [`Config::max_handle_bytes`]: 80 MiB.
const MAX_HANDLE_BYTES: usize = 80 << 20;

/// [`Config::max_handle_bytes`] in [`Config::memory_first`]: 32 MiB.
const MEMORY_FIRST_HANDLE_BYTES: usize = 32 << 20;

/// Wholly free handles of at least this many granules are kept whole by placement when it can.
const PROTECT_GRANULES: usize = 8;

/// A large request reuses a run of wholly free handles that exceeds it by at most
/// 1/`LARGE_SLACK_DIV`.
const LARGE_SLACK_DIV: usize = 8;

/// Placement looks at no more than this many fitting free blocks (smallest first).
const SCAN_LIMIT: usize = 64;

/// Errors of the allocator.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device could not provide the memory, even after releasing the cache.
    #[error(
        "out of memory: tried to allocate {} ({requested} bytes); {} allocated, {} reserved, \
         largest free block {}, device free {} of {}{}{}",
        crate::stats::human(*requested as i64),
        crate::stats::human(*allocated as i64),
        crate::stats::human(*reserved as i64),
        crate::stats::human(*largest_free as i64),
        crate::stats::human(*device_free as i64),
        crate::stats::human(*device_total as i64),
        limit.map(|l| format!("; limit {}", crate::stats::human(l as i64))).unwrap_or_default(),
        format_top(top_allocations)
    )]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes in allocated blocks.
        allocated: usize,
        /// Bytes held from the device.
        reserved: usize,
        /// Largest free block.
        largest_free: usize,
        /// Free device memory, as the driver reported it.
        device_free: usize,
        /// Total device memory.
        device_total: usize,
        /// The memory-fraction limit in bytes, if one applies.
        limit: Option<usize>,
        /// The largest live allocations: (bytes, call site).
        top_allocations: Vec<(usize, String)>,
    },
    /// A request for zero bytes.
    #[error("zero-size allocation")]
    ZeroSize,
    /// A request larger than the device (or than the address space).
    #[error("requested {requested} bytes, more than the device's {total}")]
    TooLarge {
        /// Bytes asked for.
        requested: usize,
        /// Device memory in bytes.
        total: usize,
    },
    /// A memory fraction outside (0, 1].
    #[error("memory fraction {0} is outside (0, 1]")]
    InvalidFraction(f64),
    /// A [`Config`] field outside the values it can take.
    #[error("invalid configuration: {field} {value}: {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// Its value, as text.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// A size string that did not parse.
    #[error(transparent)]
    Size(#[from] crate::size::SizeError),
    /// An allocation given back to an allocator that did not make it.
    #[error("the allocation at {ptr:#x} belongs to another allocator")]
    ForeignAllocation {
        /// Its address.
        ptr: u64,
    },
    /// A backend call failed for a reason other than memory.
    #[error("backend: {0}")]
    Backend(BackendError),
}

fn format_top(top: &[(usize, String)]) -> String {
    if top.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = top
        .iter()
        .map(|(b, site)| format!("{} at {site}", crate::stats::human(*b as i64)))
        .collect();
    format!("; largest live allocations: {}", parts.join(", "))
}

/// Allocator settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Use the virtual-memory arena when the backend supports it.
    pub use_vmm: bool,
    /// At most this share of device memory is reserved, in (0, 1].
    pub memory_fraction: f64,
    /// At most this many bytes are kept cached (reserved but not allocated); `None`: no limit.
    pub cache_limit: Option<usize>,
    /// Largest physical handle the VMM arena creates (80 MiB by default); smaller handles can
    /// be moved and given back at a finer grain, at the cost of more driver calls. A handle is
    /// mapped whole, so a live block anywhere on it keeps all of it where it is: with larger
    /// handles, a small block placed where a large one was freed pins the large one's memory.
    pub max_handle_bytes: usize,
    /// Address space reserved per VMM region.
    pub region_bytes: usize,
    /// When set, the cache is released after a free that leaves fragmentation
    /// ((reserved − allocated) / reserved) above this share of at least 64 MiB reserved.
    pub compact_threshold: Option<f64>,
    /// Record call sites of allocations (`#[track_caller]`), for leak reports and snapshots.
    pub record_sites: bool,
    /// Keep freed blocks in per-size quick lists (coalesced lazily) for O(1) reuse.
    pub quick_lists: bool,
    /// VMM: a request of at least this many bytes is a *large* block: it is rounded up to the
    /// granularity and starts at a handle boundary, on handles of its own when it grows the
    /// arena, so that once freed its memory is reused whole or moved in a few remaps.
    /// `usize::MAX` by default: no request is large, and every block is placed best fit,
    /// its new memory on handles of at most [`Self::max_handle_bytes`].
    pub large_bytes: usize,
    /// Requests of at most this many bytes are placed first fit (lowest address among the
    /// fitting blocks), larger ones best fit: small blocks pack together instead of cutting
    /// into the holes larger blocks leave.
    pub small_bytes: usize,
    /// VMM: new memory for a large block is created as this many handles of equal size
    /// (rounded to the granularity) instead of one, and a large block that grows the arena
    /// starts in the free block at the region's end (at its first handle boundary) when there
    /// is one. When a smaller large block later reuses part of such a block, the rest lies on
    /// whole handles that growth can move elsewhere, so less free memory stays pinned; every
    /// handle costs driver calls (a create and a map, and a map for each move). 1 to 64.
    pub large_handle_pieces: usize,
    /// VMM: during a burst of growth the arena grows ahead of the request by up to 1/this of
    /// reserved memory, leaving at most max([`Self::burst_headroom_granules`] granules, 1/this
    /// of allocated memory) cached. Larger values map less ahead (less memory, more calls).
    pub burst_headroom_div: usize,
    /// VMM: the cached memory a burst of growth may always leave, in granules.
    pub burst_headroom_granules: usize,
}

impl Config {
    /// Settings that trade driver calls for memory: handles of at most 32 MiB
    /// ([`Self::max_handle_bytes`]) and a burst headroom of 1/64 (at least 4 granules).
    /// Peak reserved memory comes closer to peak live where blocks change size (variable
    /// batch or sequence length), because finer handles under what a smaller block leaves of
    /// a larger one can move; every such move is a driver call or two, so those workloads
    /// make more calls than with the default settings, in their steady state too
    /// (`genesis-mem replay --memory-first` compares them on recorded traces). The default
    /// settings stay the better choice when driver calls matter: each map or unmap costs
    /// microseconds, and an unmap waits for its stream.
    pub fn memory_first() -> Config {
        Config::default().with_memory_first()
    }

    /// This configuration with the placement and growth settings of [`Self::memory_first`]
    /// (its other fields kept).
    pub fn with_memory_first(self) -> Config {
        Config {
            max_handle_bytes: MEMORY_FIRST_HANDLE_BYTES,
            burst_headroom_div: 64,
            burst_headroom_granules: 4,
            ..self
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            use_vmm: true,
            memory_fraction: 1.0,
            cache_limit: None,
            max_handle_bytes: MAX_HANDLE_BYTES,
            region_bytes: 1 << 40,
            compact_threshold: None,
            record_sites: true,
            quick_lists: true,
            large_bytes: usize::MAX,
            small_bytes: 64 << 10,
            large_handle_pieces: 2,
            burst_headroom_div: HEADROOM_DIV,
            burst_headroom_granules: HEADROOM_GRANULES,
        }
    }
}

/// A live allocation. Give it back with [`CachingAllocator::free`]; it is neither `Copy` nor
/// `Clone`, so it cannot be freed twice.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an allocation that is dropped without `free` stays allocated"]
pub struct Allocation {
    ptr: u64,
    size: usize,
    requested: usize,
    block: u32,
    generation: u32,
    allocator: u64,
    stream: StreamId,
}

impl Allocation {
    /// The device address (512-byte aligned).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Usable bytes (the request rounded up to 512).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes that were asked for.
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// The stream it was allocated on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

/// The device memory under an allocation ([`CachingAllocator::backing`]): what another process
/// must map to see its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Virtual memory: the physical handles mapped over the allocation, in address order,
    /// each next to the one before. Together they cover the allocation's bytes and may reach
    /// past them on either side (a handle may also hold other allocations).
    Handles(Vec<MappedHandle>),
    /// A plain segment (`Backend::alloc`), which holds the allocation.
    Segment {
        /// The segment's address.
        base: u64,
        /// Its length in bytes.
        len: usize,
    },
}

/// A physical handle and where it is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedHandle {
    /// The address it is mapped at.
    pub va: u64,
    /// Its length in bytes (a multiple of the granularity).
    pub len: usize,
    /// The backend's handle.
    pub handle: PhysHandle,
}

/// State of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out.
    Allocated,
    /// Freed, waiting for events on other streams.
    PendingFree,
    /// Free and coalesced, in the free index.
    Free,
    /// Free, in a quick list (not yet coalesced).
    Cached,
    /// Address space with no physical memory behind it.
    Unmapped,
}

/// A block of device memory. The first cache line holds what the allocation paths read and
/// write; the second what they rarely touch (cross-stream use, call sites, idle times). With
/// the allocator's data out of the CPU caches, as it is between a program's calls, every
/// block a path looks at then costs one line instead of two or three.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct Block {
    addr: u64,
    size: usize,
    requested: usize,
    stream: StreamId,
    seq: u64,
    prev: u32,
    next: u32,
    region: u32,
    generation: u32,
    state: BlockState,
    /// `!other_streams.is_empty()`, kept in the first line for the free paths.
    shared: bool,
    other_streams: SmallVec<[StreamId; 2]>,
    /// The caller's location, when [`Config::record_sites`] is set (`None` otherwise).
    site: Option<&'static Location<'static>>,
    /// When the block last became free (set when coalesced into the free index).
    freed_at: Option<std::time::Instant>,
}

const _: () = assert!(std::mem::offset_of!(Block, other_streams) == 64);
const _: () = assert!(std::mem::size_of::<Block>() == 128);

#[derive(Debug)]
enum RegionKind {
    Vmm { reserved: usize, handles: Handles },
    Plain,
}

/// The physical handles mapped in a VMM region, ordered by address: (va, len, handle).
/// Placement reads them on every slow-path allocation; they change only when memory is mapped
/// or unmapped, so sorted vectors serve better than a tree. `big` repeats the (va, len) of the
/// handles of at least `protect` bytes, the only ones placement's pinning rule looks at: its
/// binary search reads a short, dense vector.
#[derive(Debug)]
struct Handles {
    all: Vec<(u64, usize, PhysHandle)>,
    big: Vec<(u64, usize)>,
    protect: usize,
}

impl Handles {
    fn new(protect: usize) -> Handles {
        Handles {
            all: Vec::new(),
            big: Vec::new(),
            protect,
        }
    }

    fn insert(&mut self, va: u64, len: usize, handle: PhysHandle) {
        let i = self.all.partition_point(|h| h.0 < va);
        self.all.insert(i, (va, len, handle));
        if len >= self.protect {
            let i = self.big.partition_point(|h| h.0 < va);
            self.big.insert(i, (va, len));
        }
    }

    fn remove(&mut self, va: u64) {
        let i = self.all.partition_point(|h| h.0 < va);
        if self.all.get(i).is_some_and(|h| h.0 == va) {
            let (_, len, _) = self.all.remove(i);
            if len >= self.protect {
                let i = self.big.partition_point(|h| h.0 < va);
                self.big.remove(i);
            }
        }
    }

    /// The handles that start in [start, end).
    fn starting_in(&self, start: u64, end: u64) -> &[(u64, usize, PhysHandle)] {
        let i = self.all.partition_point(|h| h.0 < start);
        let j = i + self.all[i..].partition_point(|h| h.0 < end);
        &self.all[i..j]
    }

    /// The handles lying wholly inside [start, end).
    fn within(
        &self,
        start: u64,
        end: u64,
    ) -> impl DoubleEndedIterator<Item = (u64, usize, PhysHandle)> + Clone + '_ {
        self.starting_in(start, end)
            .iter()
            .copied()
            .filter(move |h| h.0 + h.1 as u64 <= end)
    }

    /// The handles of at least `protect` bytes lying wholly inside [start, end): (va, len).
    fn big_within(
        &self,
        start: u64,
        end: u64,
    ) -> impl DoubleEndedIterator<Item = (u64, usize)> + Clone + '_ {
        let i = self.big.partition_point(|h| h.0 < start);
        let j = i + self.big[i..].partition_point(|h| h.0 < end);
        self.big[i..j]
            .iter()
            .copied()
            .filter(move |h| h.0 + h.1 as u64 <= end)
    }

    fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    fn bytes(&self) -> usize {
        self.all.iter().map(|h| h.1).sum()
    }

    /// Whether `big` lists exactly the handles of at least `protect` bytes.
    fn big_consistent(&self) -> bool {
        self.all
            .iter()
            .filter(|h| h.1 >= self.protect)
            .map(|h| (h.0, h.1))
            .eq(self.big.iter().copied())
    }
}

#[derive(Debug)]
struct Region {
    base: u64,
    len: usize,
    stream: StreamId,
    kind: RegionKind,
    first: u32,
    last: u32,
    live: bool,
    last_use: u64,
}

/// A cheap hasher for the quick lists and the stream-keyed maps (keys are streams, or a stream
/// and a multiple of 512).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type QuickMap = HashMap<(StreamId, usize), usize, BuildHasherDefault<KeyHasher>>;

/// The free blocks of one stream, ordered by (size, address). Each entry is one `u128`
/// (size / 512, address / 512 and block id packed from the top bit down, so that integer
/// order is that order): two thirds the bytes of a `(usize, u64, u32)` tuple, so that
/// placement's scans and updates read fewer cache lines.
#[derive(Debug, Default)]
struct FreeIndex(BTreeSet<u128>);

impl FreeIndex {
    const ADDR_BITS: u32 = 55;
    const ID_BITS: u32 = 32;

    #[inline]
    fn key(size: usize, addr: u64, id: u32) -> u128 {
        debug_assert!(size.is_multiple_of(ALIGNMENT) && addr.is_multiple_of(ALIGNMENT as u64));
        debug_assert!((size as u128) < 1 << (128 - Self::ADDR_BITS - Self::ID_BITS + 9));
        ((size as u128 >> 9) << (Self::ADDR_BITS + Self::ID_BITS))
            | (u128::from(addr >> 9) << Self::ID_BITS)
            | u128::from(id)
    }

    #[inline]
    fn unpack(k: u128) -> (usize, u64, u32) {
        let size = ((k >> (Self::ADDR_BITS + Self::ID_BITS)) as usize) << 9;
        let addr = ((k >> Self::ID_BITS) as u64 & ((1 << Self::ADDR_BITS) - 1)) << 9;
        (size, addr, k as u32)
    }

    fn insert(&mut self, size: usize, addr: u64, id: u32) {
        self.0.insert(Self::key(size, addr, id));
    }

    fn remove(&mut self, size: usize, addr: u64, id: u32) {
        self.0.remove(&Self::key(size, addr, id));
    }

    /// The blocks of at least `size` bytes, smallest first: (size, address, block).
    fn at_least(&self, size: usize) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.0
            .range(Self::key(size, 0, 0)..)
            .map(|&k| Self::unpack(k))
    }

    /// The block at the lowest address among the `limit` smallest blocks of at least `size`
    /// bytes. Addresses are unique, so the lowest (address, block) bits pick it without
    /// unpacking the keys.
    fn lowest_address(&self, size: usize, limit: usize) -> Option<u32> {
        const LOW: u128 = (1 << (FreeIndex::ADDR_BITS + FreeIndex::ID_BITS)) - 1;
        self.0
            .range(Self::key(size, 0, 0)..)
            .take(limit)
            .map(|&k| k & LOW)
            .min()
            .map(|k| k as u32)
    }

    fn iter(&self) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.0.iter().map(|&k| Self::unpack(k))
    }

    fn contains(&self, size: usize, addr: u64, id: u32) -> bool {
        self.0.contains(&Self::key(size, addr, id))
    }

    fn largest(&self) -> Option<usize> {
        self.0.last().map(|&k| Self::unpack(k).0)
    }
}

/// A map keyed by stream, read several times by every operation past the hot path.
type StreamMap<V> = HashMap<StreamId, V, BuildHasherDefault<KeyHasher>>;

/// The allocator's state. `repr(C)` keeps the declaration order: the fields every operation
/// reads come first, side by side, so that a call made with the allocator's data out of
/// the CPU caches (as between a program's calls) misses on few lines before its real work.
#[repr(C)]
struct State<B: Backend> {
    /// The last key looked up and its slot: repeated sizes skip the hash.
    quick_memo: ((StreamId, usize), usize),
    clock: u64,
    /// `(clock, block)` after a hot-path alloc of `block`: a hot-path free of that block with
    /// nothing else in between restores the split statistics the alloc lowered, within their
    /// peaks. Every other entry point clears it ([`CachingAllocator::lock`]), and every other
    /// operation advances the clock. (The reverse, an alloc of the block just freed, is
    /// [`Self::deferred`].)
    undo: (u64, u32),
    /// The block whose hot-path free has not lowered the five in-use statistics (allocation,
    /// active, allocated, active and requested bytes) yet, or `NONE`. If the next operation
    /// allocates that block again, the pair leaves them where they were (only their totals
    /// grow); anything else lowers them first ([`State::settle`]): every entry point but the
    /// hot paths ([`CachingAllocator::lock`], the general paths), and the hot paths themselves
    /// for any other block.
    deferred: u32,
    /// `history.is_some()`, next to the other fields the hot paths read.
    recording: bool,
    /// `config.use_vmm && backend.supports_vmm()`, read once at creation.
    vmm: bool,
    device_total: usize,
    config: Config,
    blocks: Vec<Block>,
    pending: Vec<(u32, SmallVec<[EventId; 2]>)>,
    quick_count: usize,
    quick_lists: Vec<Vec<u32>>,
    /// Whether each slot's key is in `quick_dirty`.
    quick_in_dirty: Vec<bool>,
    /// Quick-list keys that may be non-empty (each listed once).
    quick_dirty: Vec<(StreamId, usize)>,
    /// The backend's granularity, read once at creation.
    granularity: usize,
    /// Free blocks by stream, ordered by (size, address).
    free: StreamMap<FreeIndex>,
    /// (stream, size) → slot in `quick_lists`.
    quick: QuickMap,
    regions: Vec<Region>,
    spare_blocks: Vec<u32>,
    stats: Stats,
    backend: B,
    /// The growing VMM region of each stream.
    arena_of: StreamMap<u32>,
    peak_reserved_bytes: usize,
    history: Option<crate::history::History>,
    /// The clock at the last VMM growth, and how many growths in a row came close together.
    last_grow_clock: u64,
    burst: u32,
    /// VMM: mappings left in place when their handle moved elsewhere (`va` -> (len, handle,
    /// region)). Their address ranges lie under `Unmapped` blocks and are never handed out;
    /// they are unmapped only when new memory is mapped over them or their handle is released.
    stale: std::collections::BTreeMap<u64, (usize, PhysHandle, u32)>,
}

static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);

/// A caching allocator over one device's [`Backend`]. `Send + Sync`; one per device.
pub struct CachingAllocator<B: Backend> {
    id: u64,
    state: crate::lock::Lock<State<B>>,
}

impl<B: Backend> std::fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The statistics pool of a device allocation (segment or handle): small when it is one
/// granule (PyTorch's small pool allocates 2 MiB segments), large otherwise.
fn segment_pool(bytes: usize, granularity: usize) -> Pool {
    if bytes <= granularity {
        Pool::Small
    } else {
        Pool::Large
    }
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

impl<B: Backend> CachingAllocator<B> {
    /// An allocator over `backend` with `config`.
    pub fn new(mut backend: B, config: Config) -> Result<Self, Error> {
        if !(config.memory_fraction > 0.0 && config.memory_fraction <= 1.0) {
            return Err(Error::InvalidFraction(config.memory_fraction));
        }
        let g = backend.granularity();
        let bad = |field, value: String, reason| {
            Err(Error::InvalidConfig {
                field,
                value,
                reason,
            })
        };
        if config.max_handle_bytes < g {
            return bad(
                "max_handle_bytes",
                config.max_handle_bytes.to_string(),
                "at least the backend's granularity",
            );
        }
        if config.region_bytes < g {
            return bad(
                "region_bytes",
                config.region_bytes.to_string(),
                "at least the backend's granularity",
            );
        }
        if let Some(t) = config.compact_threshold
            && !(0.0..=1.0).contains(&t)
        {
            return bad("compact_threshold", t.to_string(), "a share in [0, 1]");
        }
        if !(1..=64).contains(&config.large_handle_pieces) {
            return bad(
                "large_handle_pieces",
                config.large_handle_pieces.to_string(),
                "from 1 to 64",
            );
        }
        if config.burst_headroom_div == 0 {
            return bad("burst_headroom_div", "0".to_string(), "at least 1");
        }
        let (_, total) = backend.mem_info().map_err(Error::Backend)?;
        let vmm = config.use_vmm && backend.supports_vmm();
        Ok(CachingAllocator {
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            state: crate::lock::Lock::new(State {
                backend,
                config,
                stats: Stats::default(),
                blocks: Vec::new(),
                spare_blocks: Vec::new(),
                regions: Vec::new(),
                arena_of: StreamMap::default(),
                free: StreamMap::default(),
                quick: QuickMap::default(),
                quick_lists: Vec::new(),
                quick_in_dirty: Vec::new(),
                quick_memo: ((StreamId::MAX, 0), usize::MAX),
                quick_count: 0,
                quick_dirty: Vec::new(),
                undo: (0, NONE),
                deferred: NONE,
                recording: false,
                vmm,
                granularity: g,
                pending: Vec::new(),
                device_total: total,
                clock: 0,
                peak_reserved_bytes: 0,
                history: None,
                last_grow_clock: 0,
                burst: 0,
                stale: std::collections::BTreeMap::new(),
            }),
        })
    }

    /// The state, for every entry point but the hot paths of `alloc` and `free`.
    fn lock(&self) -> crate::lock::Guard<'_, State<B>> {
        let mut st = self.state.lock();
        st.undo.1 = NONE;
        st.settle();
        st
    }

    /// Allocates `bytes` on `stream`.
    #[track_caller]
    pub fn alloc(&self, bytes: usize, stream: StreamId) -> Result<Allocation, Error> {
        let site = Location::caller();
        let mut st = self.state.lock();
        match st.alloc_cached(bytes, stream, site) {
            Some(a) => {
                drop(st);
                Ok(self.allocation(a, bytes, stream))
            }
            None => self.alloc_general(st, bytes, stream, site),
        }
    }

    /// `alloc` past its hot path (kept out of line so that the hot path saves no registers).
    #[cold]
    #[inline(never)]
    fn alloc_general(
        &self,
        mut st: crate::lock::Guard<'_, State<B>>,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
    ) -> Result<Allocation, Error> {
        st.settle();
        let a = st.alloc(bytes, stream, site)?;
        drop(st);
        Ok(self.allocation(a, bytes, stream))
    }

    #[inline(always)]
    fn allocation(
        &self,
        (ptr, size, block, generation): (u64, usize, u32, u32),
        requested: usize,
        stream: StreamId,
    ) -> Allocation {
        Allocation {
            ptr,
            size,
            requested,
            block,
            generation,
            allocator: self.id,
            stream,
        }
    }

    /// Gives an allocation back. If it was used on other streams ([`Self::record_stream`]),
    /// it is reused only after the work queued on them so far has completed.
    pub fn free(&self, allocation: Allocation) -> Result<(), Error> {
        if allocation.allocator != self.id {
            return Err(Error::ForeignAllocation {
                ptr: allocation.ptr,
            });
        }
        let mut st = self.state.lock();
        if st.free_cached(allocation.block, allocation.generation) {
            return Ok(());
        }
        Self::free_general(st, allocation.block, allocation.generation)
    }

    /// `free` past its hot path (out of line, as [`Self::alloc_general`]).
    #[cold]
    #[inline(never)]
    fn free_general(
        mut st: crate::lock::Guard<'_, State<B>>,
        block: u32,
        generation: u32,
    ) -> Result<(), Error> {
        st.settle();
        st.free(block, generation)
    }

    /// Marks `allocation` as used by work queued on `stream` (not the one it was allocated on).
    pub fn record_stream(&self, allocation: &Allocation, stream: StreamId) -> Result<(), Error> {
        if allocation.allocator != self.id {
            return Err(Error::ForeignAllocation {
                ptr: allocation.ptr,
            });
        }
        let mut st = self.lock();
        let b = &mut st.blocks[allocation.block as usize];
        if stream != b.stream && !b.other_streams.contains(&stream) {
            b.other_streams.push(stream);
            b.shared = true;
        }
        Ok(())
    }

    /// The device memory under `allocation`: the physical handles mapped over its bytes
    /// (virtual memory) or the segment that holds it. They stay where they are while the
    /// allocation lives: the allocator moves or releases a handle only when no live block
    /// lies on it, and frees a segment only when it is wholly free.
    pub fn backing(&self, allocation: &Allocation) -> Result<Backing, Error> {
        if allocation.allocator != self.id {
            return Err(Error::ForeignAllocation {
                ptr: allocation.ptr,
            });
        }
        let st = self.lock();
        let b = &st.blocks[allocation.block as usize];
        let r = &st.regions[b.region as usize];
        let handles = match &r.kind {
            RegionKind::Plain => {
                return Ok(Backing::Segment {
                    base: r.base,
                    len: r.len,
                });
            }
            RegionKind::Vmm { handles, .. } => handles,
        };
        let (start, end) = (allocation.ptr, allocation.ptr + allocation.size as u64);
        let i = handles.all.partition_point(|h| h.0 + h.1 as u64 <= start);
        let mut out = Vec::new();
        let mut reach = start;
        for &(va, len, handle) in handles.all[i..].iter().take_while(|h| h.0 < end) {
            if va > reach {
                break;
            }
            out.push(MappedHandle { va, len, handle });
            reach = va + len as u64;
        }
        if reach < end {
            return Err(Error::Backend(BackendError::Failed {
                call: "backing",
                message: format!(
                    "the allocation at {start:#x} ({} bytes) is not mapped past {reach:#x}",
                    allocation.size
                ),
            }));
        }
        Ok(Backing::Handles(out))
    }

    /// A copy of the statistics.
    pub fn stats(&self) -> Stats {
        let mut st = self.lock();
        st.refresh_largest_free();
        st.stats.clone()
    }

    /// Resets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        let mut st = self.lock();
        st.stats.reset_peak();
    }

    /// Gives every cached byte back to the device (waiting for pending events first).
    pub fn empty_cache(&self) -> Result<(), Error> {
        let mut st = self.lock();
        st.release_cached(usize::MAX, true)
    }

    /// Releases cached memory until at most `keep` bytes are cached.
    pub fn trim_cache(&self, keep: usize) -> Result<(), Error> {
        let mut st = self.lock();
        let cached = st.cached_bytes();
        if cached > keep {
            st.release_cached(cached - keep, false)?;
        }
        Ok(())
    }

    /// Gives back the physical memory under free ranges that have been free for at least
    /// `idle` (whole handles with VMM, wholly free segments otherwise). Returns the bytes
    /// released.
    pub fn garbage_collect(&self, idle: std::time::Duration) -> Result<usize, Error> {
        let mut st = self.lock();
        st.garbage_collect(idle)
    }

    /// Sets the memory fraction (0 < f ≤ 1 of device memory).
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(Error::InvalidFraction(fraction));
        }
        self.lock().config.memory_fraction = fraction;
        Ok(())
    }

    /// Sets the cache limit in bytes (`None`: unlimited) and trims the cache to it.
    pub fn set_cache_limit(&self, limit: Option<usize>) -> Result<(), Error> {
        let mut st = self.lock();
        st.config.cache_limit = limit;
        st.enforce_cache_limit()
    }

    /// Sets the cache limit from a string such as `"2GB"` or `"512MiB"`.
    pub fn set_cache_size(&self, limit: &str) -> Result<(), Error> {
        let bytes = crate::size::parse_size(limit)?;
        self.set_cache_limit(Some(usize::try_from(bytes).unwrap_or(usize::MAX)))
    }

    /// Allocates and frees blocks of the given sizes so later requests of them hit the cache.
    pub fn warm_up(&self, sizes: &[usize], stream: StreamId) -> Result<(), Error> {
        let mut held = Vec::with_capacity(sizes.len());
        for &s in sizes {
            match self.alloc(s, stream) {
                Ok(a) => held.push(a),
                Err(e) => {
                    for a in held {
                        self.free(a)?;
                    }
                    return Err(e);
                }
            }
        }
        for a in held {
            self.free(a)?;
        }
        Ok(())
    }

    /// Whether `ptr` lies in memory this allocator holds from its backend (for a pinned-host
    /// pool: whether a host pointer is pinned memory of this pool).
    pub fn owns(&self, ptr: u64) -> bool {
        let st = self.lock();
        st.regions
            .iter()
            .any(|r| r.live && ptr >= r.base && ptr < r.base + r.len as u64)
    }

    /// The backend's call counts.
    pub fn driver_calls(&self) -> CallCounts {
        self.lock().backend.counts()
    }

    /// Runs `f` on the backend (for tests and tools).
    pub fn with_backend<R>(&self, f: impl FnOnce(&mut B) -> R) -> R {
        f(&mut self.lock().backend)
    }

    /// The allocator's logical clock (one tick per alloc or free).
    pub(crate) fn clock_now(&self) -> u64 {
        self.lock().clock
    }

    /// Every region and block, for snapshots.
    pub fn snapshot(&self) -> crate::snapshot::Snapshot {
        let st = self.lock();
        st.snapshot()
    }

    /// The snapshot as a PyTorch memory-snapshot pickle, with the recorded history (if any) as
    /// its device trace: open it in PyTorch's memory viewer.
    pub fn pytorch_snapshot(&self, device: usize) -> Vec<u8> {
        let st = self.lock();
        let traces = st
            .history
            .as_ref()
            .map(|h| h.trace_entries())
            .unwrap_or_default();
        st.snapshot().to_pytorch_pickle(device, &traces)
    }

    /// Live allocations: (address, bytes requested, call site), oldest first.
    pub fn live_allocations(&self) -> Vec<crate::leaks::LiveAllocation> {
        self.lock().live_allocations()
    }

    /// Starts recording alloc / free / segment events, keeping the last `capacity`.
    pub fn record_history(&self, capacity: usize) {
        let mut st = self.lock();
        st.history = Some(crate::history::History::new(capacity));
        st.recording = true;
    }

    /// Stops recording and returns what was recorded.
    pub fn take_history(&self) -> Option<crate::history::History> {
        let mut st = self.lock();
        st.recording = false;
        st.history.take()
    }

    /// Checks every internal invariant (for tests): blocks tile their regions, free blocks are
    /// indexed, no two allocated blocks overlap, and the statistics equal a recount.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.lock().check_invariants()
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    /// Gives every cached byte and every empty address reservation back to the device. Memory
    /// under live allocations is left alone (their owners still hold the pointers): it is
    /// reported, not freed.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        st.settle();
        if let Err(e) = st.release_cached(usize::MAX, true) {
            tracing::error!(error = %e, "releasing the cache when dropping the allocator failed");
        }
        let live = st
            .blocks
            .iter()
            .filter(|b| matches!(b.state, BlockState::Allocated | BlockState::PendingFree))
            .count();
        if live > 0 {
            tracing::warn!(
                live,
                "allocator dropped with live allocations; their memory stays reserved"
            );
        }
        // Stale mappings of handles still live elsewhere: address space to give back.
        if let Err(e) = st.unmap_stale(|_| true) {
            tracing::error!(error = %e, "unmapping stale mappings when dropping the allocator failed");
        }
        for r in st.regions.iter_mut().filter(|r| r.live) {
            if let RegionKind::Vmm { reserved, handles } = &r.kind
                && handles.is_empty()
            {
                if let Err(e) = st.backend.unreserve(r.base, *reserved) {
                    tracing::error!(error = %e, "releasing address space failed");
                }
                r.live = false;
            }
        }
    }
}

impl<B: Backend> State<B> {
    /// Appends `event` to the history when recording is on.
    #[inline]
    fn log_event(&mut self, event: crate::history::Event) {
        if let Some(h) = &mut self.history {
            h.push(event, &self.stats);
        }
    }

    /// The quick-list slot of `key`, created if `create`.
    #[inline]
    fn quick_slot(&mut self, key: (StreamId, usize), create: bool) -> Option<usize> {
        if self.quick_memo.0 == key {
            return Some(self.quick_memo.1);
        }
        let slot = match self.quick.get(&key) {
            Some(&slot) => slot,
            None if create => {
                self.quick_lists.push(Vec::new());
                self.quick_in_dirty.push(false);
                let slot = self.quick_lists.len() - 1;
                self.quick.insert(key, slot);
                slot
            }
            None => return None,
        };
        self.quick_memo = (key, slot);
        Some(slot)
    }

    fn new_block(&mut self, b: Block) -> u32 {
        if let Some(id) = self.spare_blocks.pop() {
            let generation = self.blocks[id as usize].generation.wrapping_add(1);
            self.blocks[id as usize] = Block { generation, ..b };
            id
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as u32
        }
    }

    fn drop_block(&mut self, id: u32) {
        self.spare_blocks.push(id);
    }

    fn is_whole(&self, id: u32) -> bool {
        let b = &self.blocks[id as usize];
        b.prev == NONE && b.next == NONE
    }

    /// Accounts a block that becomes free (Free or Cached) with `ADD`, or stops being free.
    #[inline(always)]
    fn count_inactive<const ADD: bool>(&mut self, id: u32) {
        if !self.is_whole(id) {
            let size = self.blocks[id as usize].size;
            let pool = Pool::of(size);
            if ADD {
                self.stats.inactive_split.inc(pool, 1);
                self.stats.inactive_split_bytes.inc(pool, size as i64);
            } else {
                self.stats.inactive_split.dec(pool, 1);
                self.stats.inactive_split_bytes.dec(pool, size as i64);
            }
        }
    }

    fn index_free(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        b.state = BlockState::Free;
        let (size, addr, stream) = (b.size, b.addr, b.stream);
        self.free.entry(stream).or_default().insert(size, addr, id);
        self.count_inactive::<true>(id);
    }

    fn unindex_free(&mut self, id: u32) {
        let b = &self.blocks[id as usize];
        debug_assert_eq!(b.state, BlockState::Free);
        let (size, addr, stream) = (b.size, b.addr, b.stream);
        if let Some(set) = self.free.get_mut(&stream) {
            set.remove(size, addr, id);
        }
        self.count_inactive::<false>(id);
    }

    /// Marks block `id` allocated for `requested` bytes (at clock `self.clock`) and counts it;
    /// `again`: it is the block whose free was deferred ([`Self::deferred`]), so the in-use
    /// statistics still count it and only their totals grow. Returns its address and
    /// generation.
    #[inline(always)]
    fn hand_out(
        &mut self,
        id: u32,
        requested: usize,
        site: &'static Location<'static>,
        again: bool,
    ) -> (u64, u32) {
        let record_sites = self.config.record_sites;
        let seq = self.clock;
        let b = &mut self.blocks[id as usize];
        // Blocks leave `Allocated` with no other streams (`free` takes them), so a reused
        // block has none to clear.
        debug_assert!(!b.shared && b.other_streams.is_empty());
        let before = b.requested;
        b.state = BlockState::Allocated;
        b.requested = requested;
        // Without site recording `site` stays `None`, and its line is not touched.
        if record_sites {
            b.site = Some(site);
        }
        b.seq = seq;
        let (addr, generation, size) = (b.addr, b.generation, b.size);
        let pool = Pool::of(size);
        let s = &mut self.stats;
        if again {
            s.allocation.add_total(pool, 1);
            s.active.add_total(pool, 1);
            s.allocated_bytes.add_total(pool, size as i64);
            s.active_bytes.add_total(pool, size as i64);
            if requested == before {
                s.requested_bytes.add_total(pool, requested as i64);
            } else {
                // From `before` to `requested`: within the peak when it shrinks.
                s.requested_bytes.dec(pool, before as i64);
                s.requested_bytes
                    .inc_known(pool, requested as i64, requested < before);
            }
        } else {
            s.allocation.inc(pool, 1);
            s.active.inc(pool, 1);
            s.allocated_bytes.inc(pool, size as i64);
            s.active_bytes.inc(pool, size as i64);
            s.requested_bytes.inc(pool, requested as i64);
        }
        (addr, generation)
    }

    /// Lowers the in-use statistics for the block whose hot-path free deferred it, if any.
    #[inline(always)]
    fn settle(&mut self) {
        if self.deferred != NONE {
            self.settle_deferred();
        }
    }

    #[inline(never)]
    fn settle_deferred(&mut self) {
        let id = std::mem::replace(&mut self.deferred, NONE);
        let b = &self.blocks[id as usize];
        let (size, requested) = (b.size as i64, b.requested as i64);
        let pool = Pool::of(b.size);
        let s = &mut self.stats;
        s.allocation.dec(pool, 1);
        s.allocated_bytes.dec(pool, size);
        s.requested_bytes.dec(pool, requested);
        s.active.dec(pool, 1);
        s.active_bytes.dec(pool, size);
    }

    /// Puts block `id` on quick list `slot` (key `key`), marking the key dirty.
    #[inline(always)]
    fn push_quick(&mut self, slot: usize, key: (StreamId, usize), id: u32) {
        self.quick_lists[slot].push(id);
        if !self.quick_in_dirty[slot] {
            self.quick_in_dirty[slot] = true;
            self.quick_dirty.push(key);
        }
        self.quick_count += 1;
    }

    /// The hot path of [`Self::alloc`]: a block of exactly this stream and rounded size in the
    /// quick list looked up last, nothing pending and no history recorded. `None` sends the
    /// request down the general path, which does the same on this path (the property tests
    /// check both against a recount after every step).
    #[inline(always)]
    fn alloc_cached(
        &mut self,
        requested: usize,
        stream: StreamId,
        site: &'static Location<'static>,
    ) -> Option<(u64, usize, u32, u32)> {
        // Zero and more than the device have errors of their own (general path).
        if requested.wrapping_sub(1) >= self.device_total
            || !self.pending.is_empty()
            || self.recording
        {
            return None;
        }
        let size = requested.checked_next_multiple_of(ALIGNMENT)?;
        if self.quick_memo.0 != (stream, size) {
            return None;
        }
        let id = self.quick_lists.get_mut(self.quick_memo.1)?.pop()?;
        // Reusing the block whose free was deferred: the in-use statistics still count it.
        let again = self.deferred == id;
        if again {
            self.deferred = NONE;
        } else {
            self.settle();
        }
        self.clock += 1;
        self.undo = (self.clock, id);
        self.quick_count -= 1;
        self.stats.num_cache_hits += 1;
        let b = &self.blocks[id as usize];
        debug_assert_eq!((b.size, b.state), (size, BlockState::Cached));
        self.count_inactive::<false>(id);
        let (addr, generation) = self.hand_out(id, requested, site, again);
        Some((addr, size, id, generation))
    }

    /// The hot path of [`Self::free`]: a block used on its own stream only, whose quick list
    /// is the one looked up last, with no cache limit, compaction or history to attend to.
    /// `false` leaves everything to the general path.
    #[inline(always)]
    fn free_cached(&mut self, id: u32, generation: u32) -> bool {
        if self.recording
            || !self.config.quick_lists
            || self.config.cache_limit.is_some()
            || self.config.compact_threshold.is_some()
        {
            return false;
        }
        let Some(b) = self.blocks.get_mut(id as usize) else {
            return false;
        };
        if b.generation != generation
            || b.state != BlockState::Allocated
            || b.shared
            || self.quick_memo.0 != (b.stream, b.size)
        {
            return false;
        }
        let size = b.size;
        let whole = b.prev == NONE && b.next == NONE;
        b.state = BlockState::Cached;
        if self.config.record_sites {
            b.site = None;
        }
        // Freeing the block the operation just before allocated: the split statistics it
        // lowered come back to where they were.
        let undo = self.undo == (self.clock, id);
        self.clock += 1;
        // The in-use statistics are lowered later, or never if the block comes straight back
        // (`deferred`); another block's deferred free is settled first.
        self.settle();
        self.deferred = id;
        let pool = Pool::of(size);
        let s = &mut self.stats;
        if !whole {
            s.inactive_split.inc_known(pool, 1, undo);
            s.inactive_split_bytes.inc_known(pool, size as i64, undo);
        }
        let (key, slot) = self.quick_memo;
        self.push_quick(slot, key, id);
        true
    }

    fn alloc(
        &mut self,
        requested: usize,
        stream: StreamId,
        site: &'static Location<'static>,
    ) -> Result<(u64, usize, u32, u32), Error> {
        if requested == 0 {
            return Err(Error::ZeroSize);
        }
        if requested > self.device_total {
            return Err(Error::TooLarge {
                requested,
                total: self.device_total,
            });
        }
        let Some(size) = requested.checked_next_multiple_of(ALIGNMENT) else {
            return Err(Error::TooLarge {
                requested,
                total: self.device_total,
            });
        };
        self.clock += 1;
        if !self.pending.is_empty() {
            self.process_pending(false)?;
        }
        let cached = match self.quick_slot((stream, size), false) {
            Some(slot) => self.quick_lists[slot].pop(),
            None => None,
        };
        let id = match cached {
            Some(id) => {
                self.quick_count -= 1;
                self.count_inactive::<false>(id);
                self.stats.num_cache_hits += 1;
                id
            }
            None => match self.flush_then_best_fit(stream, size) {
                Some(id) => {
                    self.stats.num_cache_hits += 1;
                    id
                }
                None => {
                    self.stats.num_cache_misses += 1;
                    self.grow_or_recover(stream, size)?
                }
            },
        };
        // A large block may be a little longer than asked (rounded to the granularity): the
        // statistics count the block, the caller sees the rounded request.
        let rounded = size;
        let size = self.blocks[id as usize].size;
        let (addr, generation) = self.hand_out(id, requested, site, false);
        if self.recording {
            self.log_event(crate::history::Event::Alloc {
                addr,
                size,
                requested,
                stream,
                site: Some(site),
            });
        }
        Ok((addr, rounded, id, generation))
    }

    /// Best fit after coalescing the stream's quick lists: placement decisions always see
    /// coalesced free space.
    fn flush_then_best_fit(&mut self, stream: StreamId, size: usize) -> Option<u32> {
        self.flush_quick(Some(stream));
        self.take_best_fit(stream, size)
    }

    /// Takes a free block of `stream` for `size` bytes (the placement policy at the top of the
    /// file), or `None` when none fits.
    fn take_best_fit(&mut self, stream: StreamId, size: usize) -> Option<u32> {
        let found = if self.is_vmm() && size >= self.config.large_bytes {
            self.fit_large(stream, size)
        } else {
            None
        };
        let (mut id, off, bsize) = found.or_else(|| {
            self.fit_general(stream, size)
                .map(|(id, off)| (id, off, size))
        })?;
        self.unindex_free(id);
        if off > 0 {
            self.split_at(id, off);
            let second = self.blocks[id as usize].next;
            self.index_free(id);
            id = second;
        }
        self.split(id, bsize);
        Some(id)
    }

    fn is_vmm(&self) -> bool {
        self.vmm
    }

    /// Wholly free handles of at least this many bytes are kept whole by placement when it can.
    fn protect_bytes(&self) -> usize {
        PROTECT_GRANULES * self.granularity
    }

    /// A free block and the offset in it for `size` bytes: first fit for small requests; best
    /// fit otherwise, skipping (with VMM) placements that would pin wholly free big handles.
    fn fit_general(&self, stream: StreamId, size: usize) -> Option<(u32, usize)> {
        let set = self.free.get(&stream)?;
        if !self.is_vmm() {
            return set.at_least(size).next().map(|e| (e.2, 0));
        }
        if size <= self.config.small_bytes {
            return set.lowest_address(size, SCAN_LIMIT).map(|id| (id, 0));
        }
        let fitting = set.at_least(size).take(SCAN_LIMIT);
        let protect = self.protect_bytes();
        let mut best: Option<(usize, u32, usize)> = None;
        for (bsize, _, id) in fitting {
            // A block smaller than a protected handle cannot hold one (and its line stays cold).
            let (pinned, off) = if bsize < protect {
                (0, 0)
            } else {
                self.pinned_by(id, size)
            };
            if best.is_none_or(|b| pinned < b.0) {
                best = Some((pinned, id, off));
                if pinned == 0 {
                    break;
                }
            }
        }
        best.map(|b| (b.1, b.2))
    }

    /// The handles lying wholly inside free block `id`, in address order: (va, len).
    fn whole_handles(&self, id: u32) -> SmallVec<[(u64, usize); 16]> {
        let b = &self.blocks[id as usize];
        let mut out = SmallVec::new();
        if let RegionKind::Vmm { handles, .. } = &self.regions[b.region as usize].kind {
            out.extend(
                handles
                    .within(b.addr, b.addr + b.size as u64)
                    .map(|h| (h.0, h.1)),
            );
        }
        out
    }

    /// Bytes of wholly free handles of at least [`Self::protect_bytes`] that `size` bytes placed
    /// in free block `id` would pin, with the offset (its start or its end) that pins fewer. A
    /// block smaller than that holds no such handle: the caller skips it by its size.
    fn pinned_by(&self, id: u32, size: usize) -> (usize, usize) {
        let b = &self.blocks[id as usize];
        let RegionKind::Vmm { handles, .. } = &self.regions[b.region as usize].kind else {
            return (0, 0);
        };
        let (start, end, s) = (b.addr, b.addr + b.size as u64, size as u64);
        let inside = handles.big_within(start, end);
        // Room before the first protected handle, or after the last: nothing pinned.
        let Some(first) = inside.clone().next() else {
            return (0, 0);
        };
        if s <= first.0 - start {
            return (0, 0);
        }
        let last_end = inside.clone().next_back().map_or(end, |h| h.0 + h.1 as u64);
        let tail = (end - start - s) as usize;
        if s <= end - last_end {
            return (0, tail);
        }
        let (mut front, mut back) = (0, 0);
        for (va, len) in inside {
            if va < start + s {
                front += len;
            }
            if va + len as u64 > end - s {
                back += len;
            }
        }
        if back < front {
            (back, tail)
        } else {
            (front, 0)
        }
    }

    /// For a large request: the run of consecutive wholly free handles that it fills best
    /// (at most 1/`LARGE_SLACK_DIV` left over). Returns (block, offset, block size): a run
    /// within a granule of the request is taken whole.
    fn fit_large(&self, stream: StreamId, size: usize) -> Option<(u32, usize, usize)> {
        let set = self.free.get(&stream)?;
        let g = self.granularity;
        let slack = size / LARGE_SLACK_DIV;
        // (excess, va, block, offset, block size)
        let mut best: Option<(usize, u64, u32, usize, usize)> = None;
        for (_, addr, id) in set.at_least(size).take(SCAN_LIMIT) {
            let hs = self.whole_handles(id);
            // The shortest run reaching `size` from each first handle (two pointers).
            let (mut j, mut sum) = (0, 0usize);
            for i in 0..hs.len() {
                while j < hs.len() && sum < size {
                    sum += hs[j].1;
                    j += 1;
                }
                if sum < size {
                    break;
                }
                let excess = sum - size;
                if excess <= slack && best.is_none_or(|b| (excess, hs[i].0) < (b.0, b.1)) {
                    let bsize = if excess < g { sum } else { size };
                    best = Some((excess, hs[i].0, id, (hs[i].0 - addr) as usize, bsize));
                }
                sum -= hs[i].1;
            }
        }
        best.map(|b| (b.2, b.3, b.4))
    }

    /// Splits block `id` (just removed from the free index) to `size`, indexing the rest.
    fn split(&mut self, id: u32, size: usize) {
        let b = &self.blocks[id as usize];
        if b.size - size < ALIGNMENT {
            return;
        }
        let rest = Block {
            addr: b.addr + size as u64,
            size: b.size - size,
            requested: 0,
            prev: id,
            next: b.next,
            region: b.region,
            state: BlockState::Free,
            generation: 0,
            stream: b.stream,
            shared: false,
            other_streams: SmallVec::new(),
            site: None,
            seq: 0,
            // The rest has been free as long as the block it is cut from.
            freed_at: b.freed_at,
        };
        let next = b.next;
        let region = b.region;
        let rid = self.new_block(rest);
        if next != NONE {
            self.blocks[next as usize].prev = rid;
        } else {
            self.regions[region as usize].last = rid;
        }
        let b = &mut self.blocks[id as usize];
        b.next = rid;
        b.size = size;
        self.index_free(rid);
    }

    fn free(&mut self, id: u32, generation: u32) -> Result<(), Error> {
        let Some(b) = self
            .blocks
            .get(id as usize)
            .filter(|b| b.generation == generation && b.state == BlockState::Allocated)
        else {
            return Err(Error::ForeignAllocation { ptr: 0 });
        };
        let (size, requested, addr, stream) = (b.size, b.requested, b.addr, b.stream);
        let pool = Pool::of(size);
        self.stats.allocation.dec(pool, 1);
        self.stats.allocated_bytes.dec(pool, size as i64);
        self.stats.requested_bytes.dec(pool, requested as i64);
        self.clock += 1;
        if self.recording {
            self.log_event(crate::history::Event::Free { addr, size, stream });
        }
        if self.blocks[id as usize].shared {
            self.blocks[id as usize].shared = false;
            let streams = std::mem::take(&mut self.blocks[id as usize].other_streams);
            let mut events = SmallVec::new();
            for s in streams {
                match self.backend.record_event(s) {
                    Ok(e) => events.push(e),
                    Err(err) => {
                        // Without an event nobody can tell when the other stream's work ends:
                        // the block is quarantined (never reused) rather than risk corruption.
                        for e in events {
                            self.backend.destroy_event(e);
                        }
                        self.blocks[id as usize].state = BlockState::PendingFree;
                        return Err(Error::Backend(err));
                    }
                }
            }
            self.blocks[id as usize].state = BlockState::PendingFree;
            self.pending.push((id, events));
            return Ok(());
        }
        self.blocks[id as usize].state = BlockState::PendingFree;
        self.release_block(id);
        self.after_free()
    }

    /// A block whose work is done becomes cached (quick list).
    fn release_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        let (size, stream) = (b.size, b.stream);
        b.state = BlockState::Cached;
        if self.config.record_sites {
            b.site = None;
        }
        let pool = Pool::of(size);
        self.stats.active.dec(pool, 1);
        self.stats.active_bytes.dec(pool, size as i64);
        self.count_inactive::<true>(id);
        // With `create` set, `quick_slot` returns a slot for any key: an existing one, or one it
        // adds (only the `create == false` lookup can return `None`).
        let slot = self
            .quick_slot((stream, size), true)
            .expect("created on demand");
        self.push_quick(slot, (stream, size), id);
        if !self.config.quick_lists {
            self.flush_quick(Some(stream));
        }
    }

    fn after_free(&mut self) -> Result<(), Error> {
        if self.config.cache_limit.is_some() {
            self.enforce_cache_limit()?;
        }
        if let Some(t) = self.config.compact_threshold {
            let reserved = self.stats.reserved_bytes.all().current;
            if reserved >= 64 << 20 && self.stats.fragmentation() > t {
                self.release_cached(usize::MAX, false)?;
            }
        }
        Ok(())
    }

    fn cached_bytes(&self) -> usize {
        let s = &self.stats;
        (s.reserved_bytes.all().current - s.active_bytes.all().current).max(0) as usize
    }

    fn enforce_cache_limit(&mut self) -> Result<(), Error> {
        if let Some(limit) = self.config.cache_limit {
            let cached = self.cached_bytes();
            if cached > limit {
                self.release_cached(cached - limit, false)?;
            }
        }
        Ok(())
    }

    fn process_pending(&mut self, wait: bool) -> Result<(), Error> {
        let mut i = 0;
        while i < self.pending.len() {
            let mut done = true;
            for &e in &self.pending[i].1 {
                let complete = if wait {
                    self.backend.wait_event(e).map(|()| true)
                } else {
                    self.backend.event_complete(e)
                };
                match complete {
                    Ok(true) => {}
                    Ok(false) => {
                        done = false;
                        break;
                    }
                    Err(err) => return Err(Error::Backend(err)),
                }
            }
            if done {
                let (id, events) = self.pending.swap_remove(i);
                for e in events {
                    self.backend.destroy_event(e);
                }
                self.release_block(id);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Coalesces every cached block of `stream` (or of all streams) into the free index. The
    /// dirty-key list and the quick lists keep their buffers: this runs on most allocations
    /// that miss the hot path, and allocates nothing.
    fn flush_quick(&mut self, stream: Option<StreamId>) {
        if self.quick_count == 0 {
            return;
        }
        let mut keys = std::mem::take(&mut self.quick_dirty);
        let mut kept = 0;
        for i in 0..keys.len() {
            let k = keys[i];
            if stream.is_some_and(|s| k.0 != s) {
                keys[kept] = k;
                kept += 1;
                continue;
            }
            let Some(&slot) = self.quick.get(&k) else {
                continue;
            };
            self.quick_in_dirty[slot] = false;
            let mut ids = std::mem::take(&mut self.quick_lists[slot]);
            self.quick_count -= ids.len();
            for &id in &ids {
                self.count_inactive::<false>(id);
                self.coalesce_into_free(id);
            }
            ids.clear();
            self.quick_lists[slot] = ids;
        }
        keys.truncate(kept);
        self.quick_dirty = keys;
    }

    /// Makes a Cached/PendingFree block Free, merging it with free neighbours.
    fn coalesce_into_free(&mut self, mut id: u32) {
        let region = self.blocks[id as usize].region;
        self.regions[region as usize].last_use = self.clock;
        let prev = self.blocks[id as usize].prev;
        if prev != NONE && self.blocks[prev as usize].state == BlockState::Free {
            self.unindex_free(prev);
            self.merge_next_into(prev);
            id = prev;
        }
        let next = self.blocks[id as usize].next;
        if next != NONE && self.blocks[next as usize].state == BlockState::Free {
            self.unindex_free(next);
            self.merge_next_into(id);
        }
        self.blocks[id as usize].freed_at = Some(std::time::Instant::now());
        self.index_free(id);
    }

    /// Absorbs the block after `id` into `id` (neither is indexed).
    fn merge_next_into(&mut self, id: u32) {
        let next = self.blocks[id as usize].next;
        let (nsize, nnext) = {
            let n = &self.blocks[next as usize];
            (n.size, n.next)
        };
        let region = self.blocks[id as usize].region;
        let b = &mut self.blocks[id as usize];
        b.size += nsize;
        b.next = nnext;
        if nnext != NONE {
            self.blocks[nnext as usize].prev = id;
        } else {
            self.regions[region as usize].last = id;
        }
        self.drop_block(next);
    }

    fn grow_or_recover(&mut self, stream: StreamId, size: usize) -> Result<u32, Error> {
        for attempt in 0..2 {
            if attempt == 0 {
                self.flush_quick(Some(stream));
            } else {
                // The device refused: give back everything cached and try once more.
                self.stats.num_alloc_retries += 1;
                self.release_cached(usize::MAX, true)?;
            }
            if let Some(id) = self.take_best_fit(stream, size) {
                return Ok(id);
            }
            match self.grow(stream, size) {
                Ok(id) => return Ok(id),
                Err(GrowError::Backend(e)) => return Err(Error::Backend(e)),
                Err(GrowError::OutOfMemory) => {}
            }
        }
        self.stats.num_ooms += 1;
        Err(self.oom_error(size))
    }

    fn limit_bytes(&self) -> usize {
        (self.device_total as f64 * self.config.memory_fraction) as usize
    }

    fn reserved(&self) -> usize {
        self.stats.reserved_bytes.all().current as usize
    }

    fn oom_error(&mut self, requested: usize) -> Error {
        self.refresh_largest_free();
        let (device_free, device_total) = self.backend.mem_info().unwrap_or((0, self.device_total));
        let mut live: Vec<(usize, String)> = self
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Allocated)
            .map(|b| {
                (
                    b.requested,
                    b.site
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "unknown".into()),
                )
            })
            .collect();
        live.sort_by_key(|e| std::cmp::Reverse(e.0));
        live.truncate(5);
        let limit = (self.config.memory_fraction < 1.0).then(|| self.limit_bytes());
        Error::OutOfMemory {
            requested,
            allocated: self.stats.allocated_bytes.all().current as usize,
            reserved: self.reserved(),
            largest_free: self.stats.largest_free_block as usize,
            device_free,
            device_total,
            limit,
            top_allocations: live,
        }
    }

    fn grow(&mut self, stream: StreamId, size: usize) -> Result<u32, GrowError> {
        if self.config.use_vmm && self.backend.supports_vmm() {
            self.grow_vmm(stream, size)
        } else {
            self.grow_plain(stream, size)
        }
    }

    fn add_reserved(&mut self, pool: Pool, bytes: usize, sign: i64) {
        self.stats.reserved_bytes.add(pool, sign * bytes as i64);
        self.stats.segment.add(pool, sign);
        if sign > 0 {
            self.stats.num_device_alloc += 1;
        } else {
            self.stats.num_device_free += 1;
        }
        self.peak_reserved_bytes = self.peak_reserved_bytes.max(self.reserved());
    }

    fn grow_plain(&mut self, stream: StreamId, size: usize) -> Result<u32, GrowError> {
        let g = self.granularity;
        let seg = round_up(size, g).ok_or(GrowError::OutOfMemory)?;
        if self.reserved() + seg > self.limit_bytes() {
            self.release_free_segments(self.reserved() + seg - self.limit_bytes());
            if self.reserved() + seg > self.limit_bytes() {
                return Err(GrowError::OutOfMemory);
            }
        }
        if self.reserved() + seg > self.peak_reserved_bytes {
            let over = self.reserved() + seg - self.peak_reserved_bytes;
            self.release_free_segments(over);
        }
        let addr = self.backend.alloc(seg)?;
        let pool = segment_pool(seg, g);
        self.add_reserved(pool, seg, 1);
        let rid = self.regions.len() as u32;
        let id = self.new_block(Block {
            addr,
            size: seg,
            requested: 0,
            prev: NONE,
            next: NONE,
            region: rid,
            state: BlockState::Free,
            generation: 0,
            stream,
            shared: false,
            other_streams: SmallVec::new(),
            site: None,
            seq: 0,
            freed_at: None,
        });
        self.regions.push(Region {
            base: addr,
            len: seg,
            stream,
            kind: RegionKind::Plain,
            first: id,
            last: id,
            live: true,
            last_use: self.clock,
        });
        self.log_event(crate::history::Event::SegmentAlloc {
            addr,
            size: seg,
            stream,
        });
        self.split(id, size);
        Ok(id)
    }

    /// Frees wholly free plain segments, least recently used first, until `target` bytes are
    /// released or none is left.
    fn release_free_segments(&mut self, target: usize) -> usize {
        let mut cands: Vec<(u64, u32)> = self
            .regions
            .iter()
            .enumerate()
            .filter(|(_, r)| r.live && matches!(r.kind, RegionKind::Plain))
            .filter(|(_, r)| {
                r.first == r.last && self.blocks[r.first as usize].state == BlockState::Free
            })
            .map(|(i, r)| (r.last_use, i as u32))
            .collect();
        cands.sort_unstable();
        let mut released = 0;
        for (_, rid) in cands {
            if released >= target {
                break;
            }
            let len = self.regions[rid as usize].len;
            if !self.free_segment(rid) {
                continue;
            }
            released += len;
        }
        released
    }

    /// Frees wholly free plain segment `rid` to the device; false if the backend refused.
    fn free_segment(&mut self, rid: u32) -> bool {
        let r = &self.regions[rid as usize];
        let (base, len, block, stream) = (r.base, r.len, r.first, r.stream);
        if self.backend.free(base, len).is_err() {
            return false;
        }
        self.unindex_free(block);
        self.drop_block(block);
        self.regions[rid as usize].live = false;
        let pool = segment_pool(len, self.granularity);
        self.add_reserved(pool, len, -1);
        self.log_event(crate::history::Event::SegmentFree {
            addr: base,
            size: len,
            stream,
        });
        true
    }

    /// The stream's VMM region with room for `extra` more bytes, reserving one if needed.
    fn arena(&mut self, stream: StreamId, extra: usize) -> Result<u32, GrowError> {
        if let Some(&rid) = self.arena_of.get(&stream) {
            let r = &self.regions[rid as usize];
            if let RegionKind::Vmm { reserved, .. } = r.kind
                && r.len + extra <= reserved
            {
                return Ok(rid);
            }
        }
        let g = self.granularity;
        let bytes =
            round_up(self.config.region_bytes.max(extra), g).ok_or(GrowError::OutOfMemory)?;
        let base = self.backend.reserve(bytes)?;
        let rid = self.regions.len() as u32;
        self.regions.push(Region {
            base,
            len: 0,
            stream,
            kind: RegionKind::Vmm {
                reserved: bytes,
                handles: Handles::new(self.protect_bytes()),
            },
            first: NONE,
            last: NONE,
            live: true,
            last_use: self.clock,
        });
        self.arena_of.insert(stream, rid);
        Ok(rid)
    }

    /// Appends `len` bytes of mapped memory backed by `handle` at the end of region `rid`.
    fn append_mapped(
        &mut self,
        rid: u32,
        len: usize,
        handle: PhysHandle,
    ) -> Result<(), BackendError> {
        let (va, stream) = {
            let r = &self.regions[rid as usize];
            (r.base + r.len as u64, r.stream)
        };
        self.backend.map(va, len, handle)?;
        let r = &mut self.regions[rid as usize];
        r.len += len;
        if let RegionKind::Vmm { handles, .. } = &mut r.kind {
            handles.insert(va, len, handle);
        }
        let last = r.last;
        let id = self.new_block(Block {
            addr: va,
            size: len,
            requested: 0,
            prev: last,
            next: NONE,
            region: rid,
            state: BlockState::Cached,
            generation: 0,
            stream,
            shared: false,
            other_streams: SmallVec::new(),
            site: None,
            seq: 0,
            freed_at: None,
        });
        if last != NONE {
            self.blocks[last as usize].next = id;
        } else {
            self.regions[rid as usize].first = id;
        }
        self.regions[rid as usize].last = id;
        self.coalesce_into_free(id);
        self.log_event(crate::history::Event::SegmentMap {
            addr: va,
            size: len,
            stream,
        });
        Ok(())
    }

    /// Cuts the range of handle (`va`, `len`, `handle`) out of the free block containing it,
    /// leaving an `Unmapped` block.
    ///
    /// - `Carve::Release`: the handle is about to be released ([`Self::release_handle`]): its
    ///   mapping here is unmapped, after the block's stream is synchronised.
    /// - `Carve::Move(to)`: the handle is about to be mapped elsewhere for stream `to`. The
    ///   mapping here stays (stale, in `self.stale`): a move costs one driver call (the map)
    ///   instead of two. The physical memory is the same, so nothing more is reserved. Work
    ///   still queued on this block's stream may read the old addresses; work that `to` queues
    ///   on the new ones runs after it when `to` is the same stream, and otherwise the block's
    ///   stream is synchronised first.
    fn carve_out(
        &mut self,
        block: u32,
        va: u64,
        len: usize,
        handle: PhysHandle,
        how: Carve,
    ) -> Result<(), BackendError> {
        let stream = self.blocks[block as usize].stream;
        match how {
            Carve::Release => {
                self.backend.synchronize(stream)?;
                self.backend.unmap(va, len)?;
            }
            Carve::Move(to) => {
                if to != stream {
                    self.backend.synchronize(stream)?;
                }
                let region = self.blocks[block as usize].region;
                self.stale.insert(va, (len, handle, region));
            }
        }
        self.unindex_free(block);
        let (addr, size, region) = {
            let b = &self.blocks[block as usize];
            (b.addr, b.size, b.region)
        };
        // [addr, va) free | [va, va+len) unmapped | [va+len, addr+size) free
        let mut mid = block;
        if va > addr {
            self.split_at(block, (va - addr) as usize);
            mid = self.blocks[block as usize].next;
            self.index_free(block);
        }
        let end = addr + size as u64;
        if va + (len as u64) < end {
            self.split_at(mid, len);
            let right = self.blocks[mid as usize].next;
            self.index_free(right);
        }
        self.blocks[mid as usize].state = BlockState::Unmapped;
        if let RegionKind::Vmm { handles, .. } = &mut self.regions[region as usize].kind {
            handles.remove(va);
        }
        // Neighbouring unmapped ranges make one hole.
        let next = self.blocks[mid as usize].next;
        if next != NONE && self.blocks[next as usize].state == BlockState::Unmapped {
            self.merge_next_into(mid);
        }
        let prev = self.blocks[mid as usize].prev;
        if prev != NONE && self.blocks[prev as usize].state == BlockState::Unmapped {
            self.merge_next_into(prev);
        }
        if let Some(h) = &mut self.history {
            let stream = self.regions[region as usize].stream;
            h.push(
                crate::history::Event::SegmentUnmap {
                    addr: va,
                    size: len,
                    stream,
                },
                &self.stats,
            );
        }
        Ok(())
    }

    /// Gives `handle` back to the device once nothing maps it: its stale mappings are unmapped
    /// first (its current one, if any, by [`Self::carve_out`]).
    fn release_handle(&mut self, handle: PhysHandle, len: usize) -> Result<(), BackendError> {
        self.unmap_stale(|h| h == handle)?;
        self.backend.release(handle, len)
    }

    /// Unmaps the stale mappings of the handles `pick` selects, synchronising the streams of
    /// their regions first (queued work may still read them).
    fn unmap_stale(&mut self, pick: impl Fn(PhysHandle) -> bool) -> Result<(), BackendError> {
        let chosen: SmallVec<[(u64, usize, u32); 4]> = self
            .stale
            .iter()
            .filter(|&(_, &(_, h, _))| pick(h))
            .map(|(&va, &(len, _, region))| (va, len, region))
            .collect();
        self.unmap_stale_ranges(&chosen)
    }

    /// Unmaps the stale mappings overlapping [`start`, `end`) before new memory is mapped there.
    fn unmap_stale_over(&mut self, start: u64, end: u64) -> Result<(), BackendError> {
        // Stale ranges are disjoint: walking down from the last one starting before `end`, the
        // first that ends at or before `start` ends the overlap.
        let chosen: SmallVec<[(u64, usize, u32); 4]> = self
            .stale
            .range(..end)
            .rev()
            .take_while(|&(&va, &(len, _, _))| va + len as u64 > start)
            .map(|(&va, &(len, _, region))| (va, len, region))
            .collect();
        self.unmap_stale_ranges(&chosen)
    }

    fn unmap_stale_ranges(&mut self, chosen: &[(u64, usize, u32)]) -> Result<(), BackendError> {
        let mut synced: SmallVec<[StreamId; 2]> = SmallVec::new();
        for &(va, len, region) in chosen {
            let stream = self.regions[region as usize].stream;
            if !synced.contains(&stream) {
                self.backend.synchronize(stream)?;
                synced.push(stream);
            }
            self.backend.unmap(va, len)?;
            self.stale.remove(&va);
        }
        Ok(())
    }

    /// Splits block `id` (not indexed) at `at` bytes; the new second half is not indexed.
    fn split_at(&mut self, id: u32, at: usize) {
        let b = self.blocks[id as usize].clone();
        let second = self.new_block(Block {
            addr: b.addr + at as u64,
            size: b.size - at,
            requested: 0,
            prev: id,
            next: b.next,
            region: b.region,
            state: b.state,
            generation: 0,
            stream: b.stream,
            shared: false,
            other_streams: SmallVec::new(),
            site: None,
            seq: 0,
            freed_at: b.freed_at,
        });
        if b.next != NONE {
            self.blocks[b.next as usize].prev = second;
        } else {
            self.regions[b.region as usize].last = second;
        }
        let first = &mut self.blocks[id as usize];
        first.size = at;
        first.next = second;
    }

    /// Handles lying wholly inside free blocks: (block, va, len, handle, region).
    fn free_handles(&self, exclude: &[u32]) -> Vec<(u32, u64, usize, PhysHandle, u32)> {
        let mut out = Vec::new();
        for set in self.free.values() {
            for (size, addr, id) in set.iter() {
                if exclude.contains(&id) {
                    continue;
                }
                let region = self.blocks[id as usize].region;
                if let RegionKind::Vmm { handles, .. } = &self.regions[region as usize].kind {
                    for (va, len, h) in handles.within(addr, addr + size as u64) {
                        out.push((id, va, len, h, region));
                    }
                }
            }
        }
        out
    }

    /// Maps `handle` (`len` bytes) at the front, or the back, of unmapped block `u`. Returns
    /// what is left of `u` (`NONE` when nothing is).
    fn map_into_hole(
        &mut self,
        u: u32,
        at_end: bool,
        len: usize,
        handle: PhysHandle,
    ) -> Result<u32, BackendError> {
        let (addr, size, rid, stream) = {
            let b = &self.blocks[u as usize];
            (b.addr, b.size, b.region, b.stream)
        };
        debug_assert_eq!(self.blocks[u as usize].state, BlockState::Unmapped);
        debug_assert!(len <= size);
        let va = if at_end {
            addr + (size - len) as u64
        } else {
            addr
        };
        self.unmap_stale_over(va, va + len as u64)?;
        self.backend.map(va, len, handle)?;
        if let RegionKind::Vmm { handles, .. } = &mut self.regions[rid as usize].kind {
            handles.insert(va, len, handle);
        }
        let (mapped, rest) = if len == size {
            (u, NONE)
        } else if at_end {
            self.split_at(u, size - len);
            (self.blocks[u as usize].next, u)
        } else {
            self.split_at(u, len);
            (u, self.blocks[u as usize].next)
        };
        self.blocks[mapped as usize].state = BlockState::Cached;
        self.coalesce_into_free(mapped);
        self.log_event(crate::history::Event::SegmentMap {
            addr: va,
            size: len,
            stream,
        });
        Ok(rest)
    }

    /// The unmapped hole of region `rid` where a block of `bsize` bytes needs the fewest new
    /// bytes, counting the free blocks on either side: (hole, whether to map at its end, new
    /// bytes). `None` when every hole needs more than the end of the region does (`tail_need`).
    fn best_hole(&self, rid: u32, bsize: usize, tail_need: usize) -> Option<(u32, bool, usize)> {
        let g = self.granularity;
        let free_size = |id: u32| -> usize {
            if id != NONE && self.blocks[id as usize].state == BlockState::Free {
                self.blocks[id as usize].size
            } else {
                0
            }
        };
        let mut best: Option<(u32, bool, usize)> = None;
        let mut id = self.regions[rid as usize].first;
        while id != NONE {
            let b = &self.blocks[id as usize];
            if b.state == BlockState::Unmapped {
                let (before, after) = (free_size(b.prev), free_size(b.next));
                if before + b.size + after >= bsize {
                    for (at_end, near) in [(false, before), (true, after)] {
                        let short = bsize.saturating_sub(near);
                        if short == 0 {
                            continue;
                        }
                        let n = round_up(short, g).unwrap_or(b.size).min(b.size);
                        let better = match best {
                            None => n <= tail_need,
                            Some(h) => n < h.2,
                        };
                        if better {
                            best = Some((id, at_end, n));
                        }
                    }
                }
            }
            id = b.next;
        }
        best
    }

    fn grow_vmm(&mut self, stream: StreamId, size: usize) -> Result<u32, GrowError> {
        let g = self.granularity;
        let rid = self.arena(stream, round_up(size, g).ok_or(GrowError::OutOfMemory)?)?;
        let large = size >= self.config.large_bytes;
        // A large block is rounded to the granularity and starts at a handle boundary.
        let bsize = if large {
            round_up(size, g).ok_or(GrowError::OutOfMemory)?
        } else {
            size
        };
        let end = {
            let r = &self.regions[rid as usize];
            r.base + r.len as u64
        };
        // A smaller block extends the free block at the end of the region; a large one starts
        // at the end, on handles of its own (on pieces: at the first handle of that free block).
        let last = self.regions[rid as usize].last;
        let tail_free_block =
            (last != NONE && self.blocks[last as usize].state == BlockState::Free).then_some(last);
        let (tail_block, start_va) = match tail_free_block {
            Some(t) if !large => (Some(t), self.blocks[t as usize].addr),
            // A large block on pieces may start at the first handle in the free end.
            Some(t) if self.config.large_handle_pieces > 1 => {
                let first = match &self.regions[rid as usize].kind {
                    RegionKind::Vmm { handles, .. } => handles
                        .starting_in(self.blocks[t as usize].addr, end)
                        .first()
                        .map(|h| h.0),
                    RegionKind::Plain => None,
                };
                match first {
                    Some(va) => (Some(t), va),
                    None => (None, end),
                }
            }
            _ => (None, end),
        };
        let tail_free = (end - start_va) as usize;
        let mut need = round_up(bsize - tail_free.min(bsize), g).unwrap_or(usize::MAX);
        // Fill an unmapped hole instead of the end when that needs less new memory.
        let hole = if large {
            None
        } else {
            self.best_hole(rid, bsize, need)
        };
        if let Some(h) = hole {
            need = h.2;
        }
        // In a burst of growth, run ahead of the request (fewer driver calls), within a
        // headroom; a growth far from the previous one takes what it needs.
        let mut want = need;
        if hole.is_none() && !large {
            if self.clock.saturating_sub(self.last_grow_clock) <= BURST_OPS {
                self.burst = (self.burst + 1).min(30);
            } else {
                self.burst = 0;
            }
            if self.burst > 0 {
                let div = self.config.burst_headroom_div;
                let floor = self.config.burst_headroom_granules.saturating_mul(g);
                let cap = (self.reserved() / div).max(floor);
                let chunk = (g as u64)
                    .saturating_mul(1 << (self.burst + 2))
                    .min(cap as u64) as usize;
                want = want.max(round_up(chunk, g).unwrap_or(want));
                let allocated = self.stats.allocated_bytes.all().current as usize + bsize;
                let allowed = floor.max(allocated / div);
                let cached_after = (self.reserved() + want).saturating_sub(allocated);
                if cached_after > allowed {
                    want = want
                        .saturating_sub((cached_after - allowed) / g * g)
                        .max(need);
                }
            }
        }
        self.last_grow_clock = self.clock;
        // The free blocks the new memory joins must stay where they are.
        let keep: SmallVec<[u32; 2]> = match hole {
            Some((u, _, _)) => {
                let b = &self.blocks[u as usize];
                [b.prev, b.next]
                    .into_iter()
                    .filter(|&x| x != NONE)
                    .collect()
            }
            None => tail_block.into_iter().collect(),
        };
        // The first byte the new memory maps, for a hole.
        let anchor = hole.map(|(u, at_end, n)| {
            let b = &self.blocks[u as usize];
            if at_end {
                b.addr + (b.size - n) as u64
            } else {
                b.addr
            }
        });
        let mut hole_rest = hole.map_or(NONE, |h| h.0);
        let at_end = hole.is_some_and(|h| h.1);
        // 1. Move physical handles that lie under free ranges: no new memory. A hole takes
        //    only handles that fit in it.
        let mut cands = self.free_handles(&keep);
        cands.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)));
        if hole.is_none() {
            // Handles that fit in what is wanted, largest first; then, if the need is not
            // covered, the smallest of the others that covers it (a hole takes only handles
            // that fit in it).
            let mut sum = 0;
            let (mut fit, rest): (Vec<_>, Vec<_>) = cands.into_iter().partition(|c| {
                let take = sum + c.2 <= want;
                if take {
                    sum += c.2;
                }
                take
            });
            if sum < need {
                let short = need - sum;
                let cover = rest.iter().filter(|c| c.2 >= short).min_by_key(|c| c.2);
                match cover {
                    Some(&c) => fit.push(c),
                    None => fit.extend(rest),
                }
            }
            cands = fit;
        }
        let mut moved = 0usize;
        for (_, va, len, h, _) in cands {
            let fits = if hole.is_some() {
                len <= need - moved
            } else {
                moved < want
            };
            if !fits {
                continue;
            }
            // The containing free block may have been split by an earlier carve: find it again.
            let Some(block) = self.free_block_containing(va, len) else {
                continue;
            };
            if let Err(e) = self.carve_out(block, va, len, h, Carve::Move(stream)) {
                return Err(GrowError::Backend(e));
            }
            let mapped = if hole.is_some() {
                self.map_into_hole(hole_rest, at_end, len, h)
                    .map(|rest| hole_rest = rest)
            } else {
                self.append_mapped(rid, len, h)
            };
            if let Err(e) = mapped {
                // Keep the handle accounted: give it back to the device (its old mapping, now
                // stale, goes first).
                let _ = self.release_handle(h, len);
                let pool = segment_pool(len, g);
                self.add_reserved(pool, len, -1);
                return Err(GrowError::Backend(e));
            }
            moved += len;
        }
        // 2. New physical memory for the rest.
        let mut rest = want.saturating_sub(moved);
        let piece = if large && self.config.large_handle_pieces > 1 {
            // `bsize` is a multiple of the granularity, so a piece is at least one.
            round_up(bsize / self.config.large_handle_pieces, g).unwrap_or(bsize)
        } else {
            usize::MAX
        };
        let max_chunk = (self.config.max_handle_bytes.max(g) / g * g).min(piece);
        while rest > 0 {
            let chunk = rest.min(max_chunk);
            if self.reserved() + chunk > self.limit_bytes() {
                return Err(GrowError::OutOfMemory);
            }
            let h = self.backend.create(chunk)?;
            let pool = segment_pool(chunk, g);
            self.add_reserved(pool, chunk, 1);
            let mapped = if hole.is_some() {
                self.map_into_hole(hole_rest, at_end, chunk, h)
                    .map(|rest| hole_rest = rest)
            } else {
                self.append_mapped(rid, chunk, h)
            };
            if let Err(e) = mapped {
                let _ = self.backend.release(h, chunk);
                self.add_reserved(pool, chunk, -1);
                return Err(e.into());
            }
            rest -= chunk;
        }
        // 3. The block: at the start of the free block the new memory joined (a large one at
        //    the first new byte).
        let id = match anchor {
            Some(a) => {
                // `map_into_hole` turned the mapped range starting at `a` into a free block and
                // coalesced it (`coalesce_into_free`), and nothing has been allocated since, so
                // a free block contains `a`.
                let f = self
                    .free_block_containing(a, 1)
                    .expect("memory mapped into a hole is free");
                self.unindex_free(f);
                f
            }
            None => {
                let last = self.regions[rid as usize].last;
                debug_assert_eq!(self.blocks[last as usize].state, BlockState::Free);
                self.unindex_free(last);
                let addr = self.blocks[last as usize].addr;
                if addr < start_va {
                    self.split_at(last, (start_va - addr) as usize);
                    let second = self.blocks[last as usize].next;
                    self.index_free(last);
                    second
                } else {
                    last
                }
            }
        };
        debug_assert!(self.blocks[id as usize].size >= bsize);
        self.split(id, bsize);
        Ok(id)
    }

    fn free_block_containing(&self, va: u64, len: usize) -> Option<u32> {
        for set in self.free.values() {
            for (size, addr, id) in set.iter() {
                if addr <= va && va + len as u64 <= addr + size as u64 {
                    return Some(id);
                }
            }
        }
        None
    }

    /// Gives back up to `target` bytes of cached memory: wholly free plain segments, and
    /// physical handles lying under free ranges. With `wait`, pending frees are waited for.
    fn release_cached(&mut self, target: usize, wait: bool) -> Result<(), Error> {
        if wait && !self.pending.is_empty() {
            self.process_pending(true)?;
        }
        self.flush_quick(None);
        let mut released = self.release_free_segments(target);
        let g = self.granularity;
        let mut cands = self.free_handles(&[]);
        cands.sort_by_key(|c| std::cmp::Reverse(c.2));
        for (_, va, len, h, _) in cands {
            if released >= target {
                break;
            }
            let Some(block) = self.free_block_containing(va, len) else {
                continue;
            };
            self.carve_out(block, va, len, h, Carve::Release)
                .map_err(Error::Backend)?;
            self.release_handle(h, len).map_err(Error::Backend)?;
            let pool = segment_pool(len, g);
            self.add_reserved(pool, len, -1);
            released += len;
        }
        Ok(())
    }

    fn garbage_collect(&mut self, idle: std::time::Duration) -> Result<usize, Error> {
        self.flush_quick(None);
        let now = std::time::Instant::now();
        let old = |b: &Block| b.freed_at.is_some_and(|t| now.duration_since(t) >= idle);
        let before = self.reserved();
        // Plain segments: wholly free and idle.
        let idle_segments: Vec<u32> = self
            .regions
            .iter()
            .enumerate()
            .filter(|(_, r)| r.live && matches!(r.kind, RegionKind::Plain) && r.first == r.last)
            .filter(|(_, r)| {
                let b = &self.blocks[r.first as usize];
                b.state == BlockState::Free && old(b)
            })
            .map(|(i, _)| i as u32)
            .collect();
        for rid in idle_segments {
            self.free_segment(rid);
        }
        // VMM: handles under idle free blocks.
        let g = self.granularity;
        let cands: Vec<_> = self
            .free_handles(&[])
            .into_iter()
            .filter(|c| old(&self.blocks[c.0 as usize]))
            .collect();
        for (_, va, len, h, _) in cands {
            let Some(block) = self.free_block_containing(va, len) else {
                continue;
            };
            self.carve_out(block, va, len, h, Carve::Release)
                .map_err(Error::Backend)?;
            self.release_handle(h, len).map_err(Error::Backend)?;
            let pool = segment_pool(len, g);
            self.add_reserved(pool, len, -1);
        }
        Ok(before - self.reserved())
    }

    fn refresh_largest_free(&mut self) {
        let mut largest = 0;
        for set in self.free.values() {
            if let Some(s) = set.largest() {
                largest = largest.max(s);
            }
        }
        for (k, &slot) in &self.quick {
            if !self.quick_lists[slot].is_empty() {
                largest = largest.max(k.1);
            }
        }
        self.stats.largest_free_block = largest as u64;
    }

    fn live_allocations(&self) -> Vec<crate::leaks::LiveAllocation> {
        let mut v: Vec<crate::leaks::LiveAllocation> = self
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Allocated)
            .map(|b| crate::leaks::LiveAllocation {
                addr: b.addr,
                size: b.size,
                requested: b.requested,
                stream: b.stream,
                seq: b.seq,
                site: b.site,
            })
            .collect();
        v.sort_by_key(|a| a.seq);
        v
    }

    fn snapshot(&self) -> crate::snapshot::Snapshot {
        use crate::snapshot::{BlockInfo, SegmentInfo, Snapshot};
        let mut segments = Vec::new();
        for r in self.regions.iter().filter(|r| r.live) {
            let mut blocks = Vec::new();
            let mut id = r.first;
            while id != NONE {
                let b = &self.blocks[id as usize];
                blocks.push(BlockInfo {
                    addr: b.addr,
                    size: b.size,
                    requested: if b.state == BlockState::Allocated {
                        b.requested
                    } else {
                        0
                    },
                    state: b.state,
                    site: b.site.map(|s| s.to_string()),
                });
                id = b.next;
            }
            segments.push(SegmentInfo {
                addr: r.base,
                total_size: r.len,
                stream: r.stream,
                vmm: matches!(r.kind, RegionKind::Vmm { .. }),
                blocks,
            });
        }
        Snapshot {
            segments,
            device_total: self.device_total,
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        if self.recording != self.history.is_some() {
            return Err("the recording flag disagrees with the history".to_string());
        }
        let mut allocated = 0i64;
        let mut requested = 0i64;
        let mut active = 0i64;
        let mut n_alloc = 0i64;
        let mut reserved = 0i64;
        let mut mapped_free = 0usize;
        for (rid, r) in self.regions.iter().enumerate().filter(|(_, r)| r.live) {
            let mut id = r.first;
            let mut expect = r.base;
            let mut prev = NONE;
            let mut total = 0usize;
            let mut last_state = None;
            while id != NONE {
                let b = &self.blocks[id as usize];
                if b.addr != expect {
                    return Err(format!(
                        "region {rid}: block {id} at {:#x}, expected {expect:#x}",
                        b.addr
                    ));
                }
                if b.prev != prev || b.region != rid as u32 {
                    return Err(format!("region {rid}: block {id} has broken links"));
                }
                if b.size == 0
                    || !b.size.is_multiple_of(ALIGNMENT)
                    || !b.addr.is_multiple_of(ALIGNMENT as u64)
                {
                    return Err(format!(
                        "block {id}: size {} / addr {:#x} not aligned",
                        b.size, b.addr
                    ));
                }
                if b.state == BlockState::Free && last_state == Some(BlockState::Free) {
                    return Err(format!(
                        "block {id}: two adjacent free blocks were not coalesced"
                    ));
                }
                if b.shared == b.other_streams.is_empty() {
                    return Err(format!(
                        "block {id}: shared flag disagrees with other_streams"
                    ));
                }
                if !self.config.record_sites && b.site.is_some() {
                    return Err(format!(
                        "block {id}: a site recorded with site recording off"
                    ));
                }
                if b.state != BlockState::Allocated && !b.other_streams.is_empty() {
                    return Err(format!(
                        "block {id}: {:?} but still lists other streams",
                        b.state
                    ));
                }
                match b.state {
                    BlockState::Allocated => {
                        allocated += b.size as i64;
                        requested += b.requested as i64;
                        active += b.size as i64;
                        n_alloc += 1;
                    }
                    BlockState::PendingFree => active += b.size as i64,
                    BlockState::Free => {
                        let indexed = self
                            .free
                            .get(&b.stream)
                            .is_some_and(|s| s.contains(b.size, b.addr, id));
                        if !indexed {
                            return Err(format!("free block {id} is not indexed"));
                        }
                        mapped_free += b.size;
                    }
                    BlockState::Cached => {
                        let listed = self
                            .quick
                            .get(&(b.stream, b.size))
                            .is_some_and(|&slot| self.quick_lists[slot].contains(&id));
                        if !listed {
                            return Err(format!("cached block {id} is in no quick list"));
                        }
                    }
                    BlockState::Unmapped => {}
                }
                last_state = Some(b.state);
                total += b.size;
                expect += b.size as u64;
                prev = id;
                id = b.next;
            }
            if prev != r.last || total != r.len {
                return Err(format!(
                    "region {rid}: blocks cover {total} of {} bytes",
                    r.len
                ));
            }
            reserved += match &r.kind {
                RegionKind::Plain => r.len as i64,
                RegionKind::Vmm { handles, .. } => {
                    if !handles.big_consistent() {
                        return Err(format!("region {rid}: the big-handle list is out of date"));
                    }
                    // Every handle must lie under mapped (non-Unmapped) blocks.
                    handles.bytes() as i64
                }
            };
        }
        // A stale mapping lies under one unmapped block of its region.
        for (&va, &(len, _, rid)) in &self.stale {
            let r = &self.regions[rid as usize];
            let mut id = r.first;
            while id != NONE
                && self.blocks[id as usize].addr + self.blocks[id as usize].size as u64 <= va
            {
                id = self.blocks[id as usize].next;
            }
            let under = id != NONE && {
                let b = &self.blocks[id as usize];
                b.state == BlockState::Unmapped
                    && b.addr <= va
                    && va + len as u64 <= b.addr + b.size as u64
            };
            if !under {
                return Err(format!(
                    "stale mapping at {va:#x} ({len} bytes) is not under an unmapped block of region {rid}"
                ));
            }
        }
        let indexed: usize = self
            .free
            .values()
            .map(|s| s.iter().map(|k| k.0).sum::<usize>())
            .sum();
        if indexed != mapped_free {
            return Err(format!(
                "free index holds {indexed} bytes, the blocks {mapped_free}"
            ));
        }
        let s = &self.stats;
        let checks = [
            (
                "allocated_bytes",
                s.allocated_bytes.all().current,
                allocated,
            ),
            (
                "requested_bytes",
                s.requested_bytes.all().current,
                requested,
            ),
            ("active_bytes", s.active_bytes.all().current, active),
            ("allocation", s.allocation.all().current, n_alloc),
            ("reserved_bytes", s.reserved_bytes.all().current, reserved),
        ];
        for (name, stat, recount) in checks {
            if stat != recount {
                return Err(format!("{name}: stat {stat} but a recount gives {recount}"));
            }
        }
        Ok(())
    }
}

/// What [`State::carve_out`] prepares a handle for.
#[derive(Debug, Clone, Copy)]
enum Carve {
    /// Release to the device.
    Release,
    /// A map elsewhere, for this stream.
    Move(StreamId),
}

#[derive(Debug)]
enum GrowError {
    OutOfMemory,
    Backend(BackendError),
}

impl From<BackendError> for GrowError {
    fn from(e: BackendError) -> GrowError {
        match e {
            BackendError::OutOfMemory => GrowError::OutOfMemory,
            e => GrowError::Backend(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The packed free-index key orders, and unpacks, exactly as the (size, address, block)
    /// tuple it stands for, over sizes and addresses across their whole range.
    #[test]
    fn free_index_key_keeps_tuple_order() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut tuples = Vec::new();
        for _ in 0..20_000 {
            let size = match rng.random_range(0..3) {
                0 => rng.random_range(1..64usize) * ALIGNMENT,
                1 => rng.random_range(1..(1usize << 30)) * ALIGNMENT,
                _ => rng.random_range(1..(1usize << 41)) * ALIGNMENT,
            };
            let addr = match rng.random_range(0..3) {
                0 => rng.random_range(0..1024u64) * ALIGNMENT as u64,
                1 => 0x7f00_0000_0000 + rng.random_range(0..(1u64 << 30)) * ALIGNMENT as u64,
                _ => rng.random_range(0..(1u64 << 55)) * ALIGNMENT as u64,
            };
            let id = match rng.random_range(0..2) {
                0 => rng.random_range(0..64u32),
                _ => rng.random(),
            };
            tuples.push((size, addr, id));
        }
        // Equal sizes and addresses too, so that the lower fields decide.
        tuples.push((ALIGNMENT, 0, 1));
        tuples.push((ALIGNMENT, 0, 0));
        tuples.push((ALIGNMENT, ALIGNMENT as u64, 0));
        let mut index = FreeIndex::default();
        for &(s, a, i) in &tuples {
            assert_eq!(FreeIndex::unpack(FreeIndex::key(s, a, i)), (s, a, i));
            index.insert(s, a, i);
        }
        let mut sorted = tuples.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(index.iter().collect::<Vec<_>>(), sorted);
        let probe = sorted[sorted.len() / 2].0;
        let from: Vec<_> = sorted.iter().copied().filter(|t| t.0 >= probe).collect();
        assert_eq!(index.at_least(probe).collect::<Vec<_>>(), from);
        assert_eq!(index.largest(), sorted.last().map(|t| t.0));
        for &(s, a, i) in &sorted {
            assert!(index.contains(s, a, i));
            index.remove(s, a, i);
        }
        assert_eq!(index.iter().count(), 0);
    }
}
