//! The pointer-keyed allocator behind the C entry points, generic over the backend so that it
//! runs and is tested on [`genesis_mem::SimBackend`] without a GPU.
//!
//! genesis-mem frees by [`Allocation`] handle; a C caller frees by address. A [`Registry`] keeps
//! the live handles in a map from address to handle, split in [`SHARDS`] independently locked
//! shards so that threads freeing different blocks rarely meet. The map is locked apart from
//! the allocator (never one inside the other in the opposite order), so an alloc holds the
//! allocator's lock, then a shard's, and a free a shard's, then the allocator's.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use genesis_mem::{Allocation, Backend, CachingAllocator, StreamId};

/// Number of independently locked shards of the address → allocation map.
pub const SHARDS: usize = 16;

/// A hasher for block addresses (multiples of 512): the address bits that vary, mixed.
#[derive(Debug, Default, Clone, Copy)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        let x = (v >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

type AddrMap = HashMap<u64, Allocation, BuildHasherDefault<AddrHasher>>;

/// What went wrong in a [`Registry`] call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RegistryError {
    /// The allocator failed (out of memory, a driver error, a bad fraction, ...).
    Allocator(genesis_mem::Error),
    /// A free or record-stream of an address this registry did not hand out (or already took
    /// back).
    UnknownPointer {
        /// The address.
        ptr: u64,
    },
}

impl RegistryError {
    /// Whether this is the device running out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            RegistryError::Allocator(
                genesis_mem::Error::OutOfMemory { .. } | genesis_mem::Error::TooLarge { .. }
            )
        )
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Allocator(e) => write!(f, "{e}"),
            RegistryError::UnknownPointer { ptr } => write!(
                f,
                "{ptr:#x} is not a live allocation of the Genesis allocator (freed twice, or \
                 allocated elsewhere)"
            ),
        }
    }
}

impl std::error::Error for RegistryError {}

impl From<genesis_mem::Error> for RegistryError {
    fn from(e: genesis_mem::Error) -> Self {
        RegistryError::Allocator(e)
    }
}

/// One device's caching allocator with the address → [`Allocation`] map a C caller needs.
///
/// Streams are [`StreamId`]s: for CUDA the `CUstream` handle as an integer (0, the legacy
/// stream; a `cudaStream_t` is the same handle). A block is reused on the stream it was
/// allocated on; a free on another stream, [`Registry::record_stream`], and (when enabled)
/// [`Registry::set_guard_all_streams`] make its reuse wait for events on the other streams.
pub struct Registry<B: Backend> {
    allocator: CachingAllocator<B>,
    shards: [Mutex<AddrMap>; SHARDS],
    /// Every stream allocations were made on (or registered), for the all-streams guard.
    streams: Mutex<Vec<StreamId>>,
    /// The stream of the last allocation whose stream was noted: most programs allocate on
    /// one stream at a time, so noting streams costs one relaxed load per allocation.
    last_stream: AtomicU64,
    guard_all_streams: AtomicBool,
    unknown_frees: AtomicU64,
}

impl<B: Backend> fmt::Debug for Registry<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("allocator", &self.allocator)
            .field("live", &self.live_count())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a shard was held (caught at the C boundary) leaves a consistent map: every
    // update is one insert or remove.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B: Backend> Registry<B> {
    /// A registry over `allocator`.
    pub fn new(allocator: CachingAllocator<B>) -> Self {
        Registry {
            allocator,
            shards: std::array::from_fn(|_| Mutex::new(AddrMap::default())),
            streams: Mutex::new(Vec::new()),
            last_stream: AtomicU64::new(u64::MAX),
            guard_all_streams: AtomicBool::new(false),
            unknown_frees: AtomicU64::new(0),
        }
    }

    /// The allocator.
    pub fn allocator(&self) -> &CachingAllocator<B> {
        &self.allocator
    }

    fn shard(&self, ptr: u64) -> &Mutex<AddrMap> {
        &self.shards[((ptr >> 9) ^ (ptr >> 21)) as usize % SHARDS]
    }

    /// Allocates `size` bytes on `stream` and returns the address; 0 for `size == 0` (no
    /// memory, and freeing 0 is a no-op, as `cudaMalloc` and PyTorch's allocator do).
    pub fn malloc(&self, size: usize, stream: StreamId) -> Result<u64, RegistryError> {
        if size == 0 {
            return Ok(0);
        }
        if self.last_stream.load(Ordering::Relaxed) != stream {
            self.register_stream(stream);
            self.last_stream.store(stream, Ordering::Relaxed);
        }
        let a = self.allocator.alloc(size, stream)?;
        let ptr = a.ptr();
        if let Some(old) = lock(self.shard(ptr)).insert(ptr, a) {
            // The allocator never hands out a live block twice; keep the map honest anyway.
            debug_assert!(false, "address {ptr:#x} handed out twice");
            let _ = self.allocator.free(old);
        }
        Ok(ptr)
    }

    /// Frees the block at `ptr`, queued on `stream` (normally the stream it was allocated on).
    ///
    /// A free on another stream than the allocation's first marks the block as used there
    /// (an event is recorded on `stream` now, and the block is reused only once it completes),
    /// as if [`Registry::record_stream`] had been called. With the all-streams guard on, every
    /// stream this registry has seen allocations on is treated so.
    pub fn free(&self, ptr: u64, stream: StreamId) -> Result<(), RegistryError> {
        if ptr == 0 {
            return Ok(());
        }
        let Some(a) = lock(self.shard(ptr)).remove(&ptr) else {
            self.unknown_frees.fetch_add(1, Ordering::Relaxed);
            return Err(RegistryError::UnknownPointer { ptr });
        };
        let mut first_err = None;
        if stream != a.stream()
            && let Err(e) = self.allocator.record_stream(&a, stream)
        {
            first_err = Some(e);
        }
        if self.guard_all_streams.load(Ordering::Relaxed) {
            let streams = lock(&self.streams).clone();
            for s in streams {
                if s != a.stream()
                    && s != stream
                    && let Err(e) = self.allocator.record_stream(&a, s)
                {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.allocator.free(a)?;
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Marks the block at `ptr` as used by work queued on `stream`: when it is freed, an event
    /// is recorded on `stream` and the block is reused only after it completes (PyTorch's
    /// `Tensor.record_stream`, which does not reach a pluggable allocator).
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<(), RegistryError> {
        let shard = lock(self.shard(ptr));
        let a = shard
            .get(&ptr)
            .ok_or(RegistryError::UnknownPointer { ptr })?;
        Ok(self.allocator.record_stream(a, stream)?)
    }

    /// Makes every free wait for all streams this registry has seen allocations on (or that
    /// were registered), not only for the block's own stream: the safe choice when tensors
    /// cross streams without `record_stream`, at the cost of one event per other stream per
    /// free.
    pub fn set_guard_all_streams(&self, on: bool) {
        self.guard_all_streams.store(on, Ordering::Relaxed);
    }

    /// Whether the all-streams guard is on.
    pub fn guard_all_streams(&self) -> bool {
        self.guard_all_streams.load(Ordering::Relaxed)
    }

    /// Makes `stream` one of the streams the all-streams guard waits for (a stream that reads
    /// or writes tensors but allocates none).
    pub fn register_stream(&self, stream: StreamId) {
        let mut streams = lock(&self.streams);
        if !streams.contains(&stream) {
            streams.push(stream);
        }
    }

    /// Live allocations handed out and not yet freed.
    pub fn live_count(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Frees of addresses this registry did not know.
    pub fn unknown_frees(&self) -> u64 {
        self.unknown_frees.load(Ordering::Relaxed)
    }

    /// The statistics as a JSON object with PyTorch's `memory_stats()` key names
    /// (`"allocated_bytes.all.current"`, `"num_ooms"`, ...), plus Genesis's own under
    /// `"genesis."` (live pointers, unknown frees, largest free block, cache hits, driver
    /// calls).
    pub fn stats_json(&self) -> String {
        let stats = self.allocator.stats();
        let mut map: Vec<(String, i64)> = stats.to_map().into_iter().collect();
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        map.extend([
            (
                "genesis.live_pointers".to_string(),
                as_i64(self.live_count() as u64),
            ),
            (
                "genesis.unknown_frees".to_string(),
                as_i64(self.unknown_frees()),
            ),
            (
                "genesis.largest_free_block".to_string(),
                as_i64(stats.largest_free_block),
            ),
            (
                "genesis.num_cache_hits".to_string(),
                as_i64(stats.num_cache_hits),
            ),
            (
                "genesis.num_cache_misses".to_string(),
                as_i64(stats.num_cache_misses),
            ),
            (
                "genesis.driver_calls".to_string(),
                as_i64(self.allocator.driver_calls().total()),
            ),
            (
                "genesis.driver_call_ns".to_string(),
                as_i64(self.allocator.driver_calls().nanos),
            ),
        ]);
        json_object(&map)
    }

    /// The allocator's state as a PyTorch memory-snapshot pickle (`torch.cuda.memory._snapshot()`
    /// format) for device `device`.
    pub fn snapshot_pickle(&self, device: usize) -> Vec<u8> {
        self.allocator.pytorch_snapshot(device)
    }

    /// Gives every cached byte back to the device.
    pub fn empty_cache(&self) -> Result<(), RegistryError> {
        Ok(self.allocator.empty_cache()?)
    }

    /// Limits reserved memory to `fraction` of the device, in (0, 1].
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), RegistryError> {
        Ok(self.allocator.set_memory_fraction(fraction)?)
    }

    /// Resets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        self.allocator.reset_peak_stats();
    }
}

/// `{"key": value, ...}` for keys that need JSON string escaping at most for `"` and `\`.
fn json_object(entries: &[(String, i64)]) -> String {
    let mut s = String::with_capacity(entries.len() * 40);
    s.push('{');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('"');
        for c in k.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04x}", c as u32)),
                c => s.push(c),
            }
        }
        s.push_str("\": ");
        s.push_str(&v.to_string());
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_keys() {
        let s = json_object(&[("a\"b\\c\n".into(), -3), ("x".into(), 7)]);
        assert_eq!(s, r#"{"a\"b\\c\u000a": -3, "x": 7}"#);
        assert_eq!(json_object(&[]), "{}");
    }

    #[test]
    fn hasher_spreads_aligned_addresses() {
        let h = |v: u64| {
            let mut s = AddrHasher::default();
            s.write_u64(v);
            s.finish()
        };
        let base = 0x7f00_0000_0000u64;
        let low: std::collections::HashSet<u64> =
            (0..1024).map(|i| h(base + i * 512) & 1023).collect();
        assert!(low.len() > 500, "{} distinct low bits", low.len());
    }
}
