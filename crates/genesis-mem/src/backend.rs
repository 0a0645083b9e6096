//! The raw-memory backends the caching allocator sits on.
//!
//! A [`Backend`] hands out device memory in one of two ways:
//! - **virtual memory** ([`Backend::supports_vmm`]): reserve address space once, create physical
//!   handles, map them into the reservation and unmap them again, so the allocator can grow a
//!   region in place and give physical pages back without moving any address;
//! - **plain segments**: `alloc` / `free` of contiguous memory (`cuMemAlloc`).
//!
//! Streams and events are part of the trait because a block freed while queued work still uses
//! it must not be reused until that work is done.
//!
//! [`SimBackend`] simulates a device in host bookkeeping only (addresses, capacity, call counts,
//! injectable failures, controllable events): the allocator's tests and the trace replay run on
//! it with no GPU.

use std::collections::HashMap;

/// A stream, as the backend names it (for CUDA: the `CUstream` handle as an integer; 0 is the
/// legacy default stream).
pub type StreamId = u64;

/// An event recorded on a stream.
pub type EventId = u64;

/// A physical memory handle (for CUDA: `CUmemGenericAllocationHandle`).
pub type PhysHandle = u64;

/// Why a backend call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The device has no memory left for this request.
    #[error("out of device memory")]
    OutOfMemory,
    /// Any other failure, with the call and a static description.
    #[error("{call} failed: {message}")]
    Failed {
        /// The backend operation.
        call: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// How many calls of each kind a backend has made: the allocator's cost in driver calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Address-space reservations (`cuMemAddressReserve`).
    pub reserve: u64,
    /// Address-space releases (`cuMemAddressFree`).
    pub unreserve: u64,
    /// Physical allocations (`cuMemCreate`, or `cuMemAlloc` for plain segments).
    pub alloc: u64,
    /// Physical frees (`cuMemRelease`, or `cuMemFree`).
    pub free: u64,
    /// Maps (`cuMemMap`).
    pub map: u64,
    /// Access grants after a map (`cuMemSetAccess`).
    pub set_access: u64,
    /// Unmaps (`cuMemUnmap`).
    pub unmap: u64,
    /// Time spent in the calls above, in nanoseconds: measured by the CUDA device backend,
    /// priced by [`SimBackend`] from the H200's measured costs ([`SimBackend::PRICES`]).
    pub nanos: u64,
}

impl CallCounts {
    /// The calls that create, map, unmap or release memory (`alloc` + `free` + `map` +
    /// `unmap`: `cuMemCreate`/`cuMemAlloc`, `cuMemRelease`/`cuMemFree`, `cuMemMap`,
    /// `cuMemUnmap`): what the trace replay's budget counts. Access grants after a map and
    /// address-space reservations come on top ([`Self::total`]).
    pub fn memory(&self) -> u64 {
        self.alloc + self.free + self.map + self.unmap
    }

    /// Every driver call that allocates, maps, unmaps or frees memory (events not included).
    pub fn total(&self) -> u64 {
        self.reserve
            + self.unreserve
            + self.alloc
            + self.free
            + self.map
            + self.set_access
            + self.unmap
    }
}

/// Raw device memory for the caching allocator.
///
/// Implementations make the real driver calls; the allocator decides when. Every method is
/// fallible and must leave the backend consistent when it fails.
pub trait Backend: Send + 'static {
    /// Physical allocation granularity in bytes (2 MiB for CUDA). Fixed for the backend's life:
    /// the allocator reads it once, when it is created.
    fn granularity(&self) -> usize;
    /// Whether the virtual-memory calls are available. Fixed for the backend's life, as
    /// [`Self::granularity`].
    fn supports_vmm(&self) -> bool;
    /// `(free, total)` device memory in bytes.
    fn mem_info(&mut self) -> Result<(usize, usize), BackendError>;

    /// Allocates a plain segment of `bytes` (a multiple of the granularity).
    fn alloc(&mut self, bytes: usize) -> Result<u64, BackendError>;
    /// Frees a plain segment.
    fn free(&mut self, addr: u64, bytes: usize) -> Result<(), BackendError>;

    /// Reserves `bytes` of address space (VMM).
    fn reserve(&mut self, bytes: usize) -> Result<u64, BackendError>;
    /// Releases an address-space reservation (VMM). Nothing may be mapped in it.
    fn unreserve(&mut self, va: u64, bytes: usize) -> Result<(), BackendError>;
    /// Creates a physical handle of `bytes` (VMM).
    fn create(&mut self, bytes: usize) -> Result<PhysHandle, BackendError>;
    /// Releases a physical handle (VMM). It must not be mapped.
    fn release(&mut self, handle: PhysHandle, bytes: usize) -> Result<(), BackendError>;
    /// Maps `handle` (`bytes` long) at `va` and makes it readable and writable (VMM). A handle
    /// may be mapped at several addresses at once (the allocator leaves an old mapping of a
    /// handle it moved in place until it needs those addresses). A mapping covers a whole
    /// handle: the CUDA driver refuses to map part of one (`CUDA_ERROR_NOT_SUPPORTED`), so
    /// memory moves between addresses a whole handle at a time.
    fn map(&mut self, va: u64, bytes: usize, handle: PhysHandle) -> Result<(), BackendError>;
    /// Unmaps the `bytes` mapped at `va` (VMM).
    fn unmap(&mut self, va: u64, bytes: usize) -> Result<(), BackendError>;

    /// Blocks until all work queued on `stream` has finished (before memory freed on it is
    /// unmapped, or used by another stream: unlike `cuMemFree`, `cuMemUnmap` does not wait for
    /// the device).
    fn synchronize(&mut self, stream: StreamId) -> Result<(), BackendError>;
    /// Records an event at the current end of `stream`.
    fn record_event(&mut self, stream: StreamId) -> Result<EventId, BackendError>;
    /// Whether the work before `event` has completed.
    fn event_complete(&mut self, event: EventId) -> Result<bool, BackendError>;
    /// Blocks until `event` has completed.
    fn wait_event(&mut self, event: EventId) -> Result<(), BackendError>;
    /// Returns an event to the backend (it may pool it).
    fn destroy_event(&mut self, event: EventId);

    /// The calls made so far.
    fn counts(&self) -> CallCounts;
}

/// Which simulated call should fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// `alloc` and `create`.
    Alloc,
    /// `map`.
    Map,
    /// `reserve`.
    Reserve,
}

/// A device simulated in host bookkeeping: capacity, addresses, calls, events, injected faults.
///
/// No memory is allocated: addresses are numbers. Used by the allocator's tests and by the
/// trace replay (`genesis-mem replay`).
#[derive(Debug)]
pub struct SimBackend {
    total: usize,
    used: usize,
    vmm: bool,
    granularity: usize,
    next_va: u64,
    next_handle: u64,
    handles: HashMap<PhysHandle, usize>,
    mapped: HashMap<u64, (usize, PhysHandle)>,
    segments: HashMap<u64, usize>,
    reservations: HashMap<u64, usize>,
    counts: CallCounts,
    events: HashMap<EventId, bool>,
    next_event: EventId,
    auto_complete_events: bool,
    fault_rate: f64,
    fault_points: Vec<FaultPoint>,
    rng: u64,
    fail_next: u32,
    probe: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    synchronizations: u64,
}

/// What a 2 MiB handle's driver calls cost, in nanoseconds (see [`SimBackend::PRICES`]); a
/// larger handle's price is this times its factor in [`CallPrices::SIZE_SCALE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPrices {
    /// `cuMemCreate`.
    pub create: u64,
    /// `cuMemMap`.
    pub map: u64,
    /// `cuMemSetAccess` after a map.
    pub set_access: u64,
    /// `cuMemUnmap`.
    pub unmap: u64,
    /// `cuMemRelease`.
    pub release: u64,
}

/// Which call a price is for, as a column of [`CallPrices::SIZE_SCALE`].
#[derive(Debug, Clone, Copy)]
enum Call {
    Create = 0,
    MapAccess = 1,
    Unmap = 2,
    Release = 3,
}

impl CallPrices {
    /// How a call's time grows with its handle's size: for handles of 2 MiB to 1 GiB, each
    /// call's measured time over its time for 2 MiB (create, map with set-access, unmap,
    /// release), from `benches/gpu_driver_costs.rs` on the H200 (driver 580; medians of 15
    /// rounds). The costs are nearly flat to 16 MiB, step up at 32 MiB, and then grow slowly,
    /// except the release's, which grows about linearly (0.39 µs a MiB at 1 GiB).
    pub const SIZE_SCALE: [(usize, [f64; 4]); 10] = [
        (2, [1.0, 1.0, 1.0, 1.0]),
        (4, [1.01, 0.98, 1.0, 1.10]),
        (8, [1.02, 0.98, 0.99, 1.32]),
        (16, [1.01, 0.99, 1.0, 1.73]),
        (32, [1.78, 2.21, 1.88, 4.06]),
        (64, [1.59, 2.09, 1.80, 6.75]),
        (128, [1.86, 2.26, 1.92, 8.15]),
        (256, [2.37, 2.39, 1.93, 18.25]),
        (512, [2.91, 2.91, 2.22, 26.36]),
        (1024, [3.42, 3.27, 2.42, 41.12]),
    ];

    /// The factor for `call` over `bytes`: [`Self::SIZE_SCALE`] interpolated linearly in the
    /// size between measured sizes, 1 at 2 MiB and below, and past 1 GiB extended along its
    /// last segment's slope.
    fn scale(call: Call, bytes: usize) -> f64 {
        let mib = bytes as f64 / (1 << 20) as f64;
        let t = &Self::SIZE_SCALE;
        let c = call as usize;
        if mib <= t[0].0 as f64 {
            return t[0].1[c];
        }
        let i = t
            .windows(2)
            .position(|w| mib <= w[1].0 as f64)
            .unwrap_or(t.len() - 2);
        let ((x0, y0), (x1, y1)) = (
            (t[i].0 as f64, t[i].1[c]),
            (t[i + 1].0 as f64, t[i + 1].1[c]),
        );
        y0 + (y1 - y0) * (mib - x0) / (x1 - x0)
    }

    /// The price of `call` over a handle of `bytes`: its 2 MiB price `per_2mib` scaled.
    fn of(per_2mib: u64, call: Call, bytes: usize) -> u64 {
        (per_2mib as f64 * Self::scale(call, bytes)).round() as u64
    }
}

impl SimBackend {
    /// The simulated driver's prices for 2 MiB handles on the H200 (driver 580): create 17 µs,
    /// map 3, set-access 57, unmap 34, release 20, larger handles scaled by
    /// [`CallPrices::SIZE_SCALE`]. These 2 MiB prices are the higher of two measurements of the
    /// same driver (`gpu_driver_costs` read 7.5, 21 for map with set-access, 13.9 and 9.6 µs),
    /// so replay's driver time errs high. A plain segment (`cuMemAlloc`) is priced as create,
    /// map and set-access, its free as unmap and release; address reservations are not priced.
    pub const PRICES: CallPrices = CallPrices {
        create: 17_000,
        map: 3_000,
        set_access: 57_000,
        unmap: 34_000,
        release: 20_000,
    };

    /// The largest simulated device, 1 PiB (2^50 bytes): its byte counts fit the allocator's
    /// `i64` statistics and its addresses `u64` with room to spare. A larger `total` is refused
    /// by `mem_info` (so [`CachingAllocator::new`](crate::CachingAllocator::new) returns
    /// [`Error::Backend`](crate::Error::Backend)).
    pub const MAX_TOTAL: usize = 1 << 50;

    /// A simulated device of `total` bytes (at most [`SimBackend::MAX_TOTAL`]); `vmm` selects
    /// the virtual-memory calls.
    pub fn new(total: usize, vmm: bool) -> SimBackend {
        SimBackend {
            total,
            used: 0,
            vmm,
            granularity: 2 << 20,
            next_va: 0x7f00_0000_0000,
            next_handle: 1,
            handles: HashMap::new(),
            mapped: HashMap::new(),
            segments: HashMap::new(),
            reservations: HashMap::new(),
            counts: CallCounts::default(),
            events: HashMap::new(),
            next_event: 1,
            auto_complete_events: true,
            fault_rate: 0.0,
            fault_points: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
            fail_next: 0,
            probe: Default::default(),
            synchronizations: 0,
        }
    }

    /// Makes `alloc`/`create` (and the other chosen points) fail at random with probability
    /// `rate`, from a seeded generator.
    pub fn inject_faults(&mut self, rate: f64, points: &[FaultPoint], seed: u64) {
        self.fault_rate = rate;
        self.fault_points = points.to_vec();
        self.rng = seed | 1;
    }

    /// Makes the next `n` physical allocations fail with `OutOfMemory`.
    pub fn fail_next_allocs(&mut self, n: u32) {
        self.fail_next = n;
    }

    /// When `false`, recorded events stay incomplete until [`SimBackend::complete_events`].
    pub fn set_auto_complete_events(&mut self, on: bool) {
        self.auto_complete_events = on;
    }

    /// Completes every recorded event (the queued work has finished).
    pub fn complete_events(&mut self) {
        for done in self.events.values_mut() {
            *done = true;
        }
    }

    /// A counter that follows the physical bytes held plus one byte per live reservation, and
    /// stays readable after the backend is dropped with its allocator.
    pub fn probe(&self) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        std::sync::Arc::clone(&self.probe)
    }

    fn update_probe(&self) {
        self.probe.store(
            self.used + self.reservations.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Physical bytes currently held (created handles plus plain segments).
    pub fn used(&self) -> usize {
        self.used
    }

    /// How many times a stream was synchronised.
    pub fn synchronizations(&self) -> u64 {
        self.synchronizations
    }

    /// Live handles, mappings, plain segments and reservations (for leak checks in tests).
    pub fn live_objects(&self) -> (usize, usize, usize, usize) {
        (
            self.handles.len(),
            self.mapped.len(),
            self.segments.len(),
            self.reservations.len(),
        )
    }

    fn roll(&mut self, point: FaultPoint) -> bool {
        if self.fault_rate <= 0.0 || !self.fault_points.contains(&point) {
            return false;
        }
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 / (1u64 << 53) as f64) < self.fault_rate
    }

    fn take_physical(&mut self, bytes: usize) -> Result<(), BackendError> {
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Err(BackendError::OutOfMemory);
        }
        if self.roll(FaultPoint::Alloc)
            || self.used.checked_add(bytes).is_none_or(|u| u > self.total)
        {
            return Err(BackendError::OutOfMemory);
        }
        self.used += bytes;
        self.update_probe();
        Ok(())
    }

    fn fresh_va(&mut self, call: &'static str, bytes: usize) -> Result<u64, BackendError> {
        let va = self.next_va;
        // Leave a gap so that separate regions are never adjacent by accident.
        let gran = self.granularity as u64;
        self.next_va = (bytes as u64)
            .checked_next_multiple_of(gran)
            .and_then(|b| b.checked_add(gran))
            .and_then(|b| b.checked_add(va))
            .ok_or_else(|| failed(call, "out of simulated address space"))?;
        Ok(va)
    }
}

fn failed(call: &'static str, message: &str) -> BackendError {
    BackendError::Failed {
        call,
        message: message.to_string(),
    }
}

impl Backend for SimBackend {
    fn granularity(&self) -> usize {
        self.granularity
    }

    fn supports_vmm(&self) -> bool {
        self.vmm
    }

    fn mem_info(&mut self) -> Result<(usize, usize), BackendError> {
        if self.total > SimBackend::MAX_TOTAL {
            return Err(failed(
                "mem_info",
                "a simulated device holds at most SimBackend::MAX_TOTAL (2^50) bytes",
            ));
        }
        Ok((self.total - self.used, self.total))
    }

    fn alloc(&mut self, bytes: usize) -> Result<u64, BackendError> {
        self.counts.alloc += 1;
        let p = Self::PRICES;
        self.counts.nanos += CallPrices::of(p.create, Call::Create, bytes)
            + CallPrices::of(p.map + p.set_access, Call::MapAccess, bytes);
        self.take_physical(bytes)?;
        let va = match self.fresh_va("alloc", bytes) {
            Ok(va) => va,
            Err(e) => {
                self.used -= bytes;
                self.update_probe();
                return Err(e);
            }
        };
        self.segments.insert(va, bytes);
        Ok(va)
    }

    fn free(&mut self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.counts.free += 1;
        let p = Self::PRICES;
        self.counts.nanos += CallPrices::of(p.unmap, Call::Unmap, bytes)
            + CallPrices::of(p.release, Call::Release, bytes);
        match self.segments.remove(&addr) {
            Some(b) if b == bytes => {
                self.used -= bytes;
                self.update_probe();
                Ok(())
            }
            Some(b) => {
                self.segments.insert(addr, b);
                Err(failed("free", "size differs from the allocation"))
            }
            None => Err(failed("free", "not an allocated segment")),
        }
    }

    fn reserve(&mut self, bytes: usize) -> Result<u64, BackendError> {
        self.counts.reserve += 1;
        if self.roll(FaultPoint::Reserve) {
            return Err(failed("reserve", "injected fault"));
        }
        let va = self.fresh_va("reserve", bytes)?;
        self.reservations.insert(va, bytes);
        self.update_probe();
        Ok(va)
    }

    fn unreserve(&mut self, va: u64, bytes: usize) -> Result<(), BackendError> {
        self.counts.unreserve += 1;
        if self
            .mapped
            .keys()
            .any(|&m| m >= va && m < va.saturating_add(bytes as u64))
        {
            return Err(failed("unreserve", "memory is still mapped in the range"));
        }
        match self.reservations.remove(&va) {
            Some(b) if b == bytes => {
                self.update_probe();
                Ok(())
            }
            _ => Err(failed("unreserve", "not a reservation")),
        }
    }

    fn create(&mut self, bytes: usize) -> Result<PhysHandle, BackendError> {
        self.counts.alloc += 1;
        self.counts.nanos += CallPrices::of(Self::PRICES.create, Call::Create, bytes);
        if bytes == 0 || !bytes.is_multiple_of(self.granularity) {
            return Err(failed(
                "create",
                "size is not a multiple of the granularity",
            ));
        }
        self.take_physical(bytes)?;
        let h = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(h, bytes);
        Ok(h)
    }

    fn release(&mut self, handle: PhysHandle, bytes: usize) -> Result<(), BackendError> {
        self.counts.free += 1;
        self.counts.nanos += CallPrices::of(Self::PRICES.release, Call::Release, bytes);
        if self.mapped.values().any(|&(_, h)| h == handle) {
            return Err(failed("release", "the handle is still mapped"));
        }
        match self.handles.remove(&handle) {
            Some(b) if b == bytes => {
                self.used -= bytes;
                self.update_probe();
                Ok(())
            }
            _ => Err(failed("release", "not a live handle of that size")),
        }
    }

    fn map(&mut self, va: u64, bytes: usize, handle: PhysHandle) -> Result<(), BackendError> {
        self.counts.map += 1;
        self.counts.set_access += 1;
        let p = Self::PRICES;
        self.counts.nanos += CallPrices::of(p.map + p.set_access, Call::MapAccess, bytes);
        if self.roll(FaultPoint::Map) {
            return Err(failed("map", "injected fault"));
        }
        if self.handles.get(&handle) != Some(&bytes) {
            return Err(failed("map", "not a live handle of that size"));
        }
        let inside = self.reservations.iter().any(|(&r, &len)| {
            va >= r && va.saturating_add(bytes as u64) <= r.saturating_add(len as u64)
        });
        if !inside {
            return Err(failed("map", "outside every reservation"));
        }
        let overlaps = self.mapped.iter().any(|(&m, &(len, _))| {
            va < m.saturating_add(len as u64) && m < va.saturating_add(bytes as u64)
        });
        if overlaps {
            return Err(failed("map", "overlaps an existing mapping"));
        }
        self.mapped.insert(va, (bytes, handle));
        Ok(())
    }

    fn unmap(&mut self, va: u64, bytes: usize) -> Result<(), BackendError> {
        self.counts.unmap += 1;
        self.counts.nanos += CallPrices::of(Self::PRICES.unmap, Call::Unmap, bytes);
        match self.mapped.remove(&va) {
            Some((len, h)) if len == bytes => {
                let _ = h;
                Ok(())
            }
            Some(m) => {
                self.mapped.insert(va, m);
                Err(failed("unmap", "the range is not one whole mapping"))
            }
            None => Err(failed("unmap", "nothing is mapped there")),
        }
    }

    fn synchronize(&mut self, _stream: StreamId) -> Result<(), BackendError> {
        self.synchronizations += 1;
        Ok(())
    }

    fn record_event(&mut self, _stream: StreamId) -> Result<EventId, BackendError> {
        let e = self.next_event;
        self.next_event += 1;
        self.events.insert(e, self.auto_complete_events);
        Ok(e)
    }

    fn event_complete(&mut self, event: EventId) -> Result<bool, BackendError> {
        self.events
            .get(&event)
            .copied()
            .ok_or_else(|| failed("event_complete", "unknown event"))
    }

    fn wait_event(&mut self, event: EventId) -> Result<(), BackendError> {
        // A simulated wait: the work completes.
        match self.events.get_mut(&event) {
            Some(done) => {
                *done = true;
                Ok(())
            }
            None => Err(failed("wait_event", "unknown event")),
        }
    }

    fn destroy_event(&mut self, event: EventId) {
        self.events.remove(&event);
    }

    fn counts(&self) -> CallCounts {
        self.counts
    }
}
