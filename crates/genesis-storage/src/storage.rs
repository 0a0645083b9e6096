//! The `Storage` type: a flat run of elements of one dtype on one device.
//!
//! Kinds: CPU (64-byte aligned host memory), pinned host memory (from the pinned pool), and
//! CUDA memory on any device (from that device's `genesis-mem` pool). Storages are shared by
//! `Arc` in the layers above, and written through any of their handles: the memory is behind
//! a reader–writer lock (the aliasing model is in `share.rs`; the writes through `&Storage`
//! in `storage/shared.rs`). Each gives its memory back to its pool when dropped.
//!
//! Every operation here is synchronous with respect to the host unless its name says `async`:
//! device work is queued on the legacy stream, which orders it with the synchronous copies.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::compute::Compute;
use crate::cpu::{CpuStorage, byte_len};
use crate::layout::{Layout, StridedBlocks};
use crate::share::{ReadGuard, ShareCell, WriteGuard};
use crate::{DType, Device, Error, Result, WithDType};

#[derive(Debug)]
pub(crate) enum Inner {
    Cpu(CpuStorage),
    Mapped(crate::mapped::Mapped),
    Pinned(crate::cuda::PinnedMem),
    Cuda(crate::cuda::CudaMem),
}

/// A storage's memory as its backend sees it (see `crate::backend`): host bytes or CUDA
/// memory.
pub(crate) enum Mem<'a> {
    Host(&'a [u8]),
    Cuda(&'a crate::cuda::CudaMem),
}

/// [`Mem`], writable.
pub(crate) enum MemMut<'a> {
    Host(&'a mut [u8]),
    Cuda(&'a mut crate::cuda::CudaMem),
}

/// `len` elements of `dtype` on a [`Device`].
///
/// A storage is shared by the tensors that view it (`Arc<Storage>`), and any of them may
/// write it: reads through `&Storage` hold a read lock of its memory, writes through
/// `&Storage` ([`Storage::with_exclusive`], [`Storage::copy_strided_from_shared`],
/// [`Storage::fill_shared`], ...) the write lock, and `&mut Storage` needs none (the aliasing
/// model is documented in `share.rs` and in ARCHITECTURE.md). Every write through `&Storage`
/// adds one to [`Storage::version`].
#[derive(Debug)]
pub struct Storage {
    pub(crate) inner: ShareCell<Inner>,
    dtype: DType,
    len: usize,
    /// The tracker's id (0 when tracking was off at creation).
    track: u64,
    /// What the memory is: fixed at creation (the lock is not needed to read them).
    kind: &'static str,
    device: Device,
    ptr: u64,
    /// Writes through shared handles (see [`Storage::version`]).
    version: AtomicU64,
    /// The least and greatest value of an int64 device storage filled from host values (see
    /// [`Storage::known_bounds`]); cleared by every write through `&mut Storage`.
    bounds: Option<(i64, i64)>,
    /// Set once the storage's address has been handed out ([`Storage::data_ptr`],
    /// [`Storage::device_ptr`], [`Storage::cuda_span`], an IPC export): code that keeps no
    /// version may write the memory from then on, so `bounds` no longer holds.
    addressed: AtomicBool,
}

/// The most int64 or int32 values whose bounds a copy from CPU memory to a device records
/// ([`Storage::known_bounds`]): finding them is one pass over the host values, about the time
/// of a second copy, which index arrays repay by the synchronisation they spare; larger
/// copies are left as they are.
pub const BOUNDS_MAX_LEN: usize = 1 << 20;

/// The least and greatest of the little-endian int64 values in `bytes` (a whole number of
/// them, at least one), in four independent lanes.
fn i64_bounds(bytes: &[u8]) -> Option<(i64, i64)> {
    lane_bounds::<8>(bytes, |c| i64::from_le_bytes(*c))
}

/// The bounds of host values of `dtype` (int64 or int32, at most [`BOUNDS_MAX_LEN`] of them;
/// `None` for the others, more values, or none).
fn host_bounds(dtype: DType, bytes: &[u8]) -> Option<(i64, i64)> {
    if bytes.len() / dtype.size() > BOUNDS_MAX_LEN {
        return None;
    }
    match dtype {
        DType::I64 => i64_bounds(bytes),
        DType::I32 => i32_bounds(bytes),
        _ => None,
    }
}

/// [`i64_bounds`] of int32 values.
fn i32_bounds(bytes: &[u8]) -> Option<(i64, i64)> {
    lane_bounds::<4>(bytes, |c| i64::from(i32::from_le_bytes(*c)))
}

/// The least and greatest of the values of `N` bytes each in `bytes`, read by `value`.
fn lane_bounds<const N: usize>(bytes: &[u8], value: fn(&[u8; N]) -> i64) -> Option<(i64, i64)> {
    let read = |c: &[u8]| value(c.try_into().expect("N bytes"));
    let first = read(bytes.get(..N)?);
    let (mut lo, mut hi) = ([first; 4], [first; 4]);
    let mut quads = bytes.chunks_exact(4 * N);
    for q in &mut quads {
        for (j, c) in q.chunks_exact(N).enumerate() {
            let v = read(c);
            lo[j] = lo[j].min(v);
            hi[j] = hi[j].max(v);
        }
    }
    for c in quads.remainder().chunks_exact(N) {
        let v = read(c);
        lo[0] = lo[0].min(v);
        hi[0] = hi[0].max(v);
    }
    Some((lo.into_iter().min()?, hi.into_iter().max()?))
}

/// The bytes of a host storage, read-locked for as long as this guard lives (see
/// [`Storage::host_bytes`]): no write of the storage can happen meanwhile.
pub struct HostBytes<'a> {
    guard: ReadGuard<'a, Inner>,
}

impl std::ops::Deref for HostBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.guard.host().unwrap_or(&[])
    }
}

impl std::fmt::Debug for HostBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBytes({} bytes)", self.len())
    }
}

/// The elements of a host storage as `T`, read-locked for as long as this guard lives (see
/// [`Storage::as_slice`]).
pub struct HostSlice<'a, T> {
    bytes: HostBytes<'a>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: WithDType> std::ops::Deref for HostSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: host storages are at least 64 (CPU) or 512 (pinned) byte aligned (mapped
        // storages are checked for `T`'s alignment when mapped), hold `len * size_of::<T>()`
        // initialised bytes, `T` is the storage's dtype (checked by `Storage::as_slice`), and
        // every bit pattern is a valid `T` (WithDType is sealed to plain-old-data types). The
        // read lock held by `bytes` keeps writers out while the slice is borrowed.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<T>(), self.len) }
    }
}

/// Compares the elements, as a slice does.
impl<T: WithDType, U: ?Sized + AsRef<[T]>> PartialEq<U> for HostSlice<'_, T> {
    fn eq(&self, other: &U) -> bool {
        **self == *other.as_ref()
    }
}

impl<T: WithDType + std::fmt::Debug> std::fmt::Debug for HostSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Inner {
    /// The memory, for its backend.
    pub(crate) fn mem(&self) -> Mem<'_> {
        match self {
            Inner::Cuda(m) => Mem::Cuda(m),
            Inner::Cpu(c) => Mem::Host(c.as_bytes()),
            Inner::Mapped(m) => Mem::Host(m.bytes()),
            Inner::Pinned(p) => Mem::Host(p.as_bytes()),
        }
    }

    /// The host bytes; `None` for device memory.
    pub(crate) fn host(&self) -> Option<&[u8]> {
        match self {
            Inner::Cpu(c) => Some(c.as_bytes()),
            Inner::Mapped(m) => Some(m.bytes()),
            Inner::Pinned(p) => Some(p.as_bytes()),
            Inner::Cuda(_) => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Inner::Cpu(_) => "cpu",
            Inner::Mapped(m) if m.shared_name.is_some() => "shared",
            Inner::Mapped(_) => "mapped",
            Inner::Pinned(_) => "pinned",
            Inner::Cuda(_) => "cuda",
        }
    }

    fn device(&self) -> Device {
        match self {
            Inner::Cpu(_) | Inner::Mapped(_) | Inner::Pinned(_) => Device::Cpu,
            Inner::Cuda(m) => Device::Cuda(m.ordinal()),
        }
    }

    fn ptr(&self) -> u64 {
        match self {
            Inner::Cpu(c) => c.as_ptr() as usize as u64,
            Inner::Mapped(m) => m.bytes().as_ptr() as usize as u64,
            Inner::Pinned(p) => p.as_bytes().as_ptr() as usize as u64,
            Inner::Cuda(m) => m.ptr(),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        crate::tracker::unregister(self.track);
    }
}

/// Pool statistics of a CUDA storage's device.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    /// Bytes allocated from the pool.
    pub allocated_bytes: u64,
    /// Bytes the pool holds from the driver.
    pub reserved_bytes: u64,
    /// (reserved − allocated) / reserved.
    pub fragmentation: f64,
}

/// A view's layout, as [`Storage::inspect_view`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewInfo {
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Offset in elements.
    pub offset: usize,
    /// Whether the view is contiguous.
    pub contiguous: bool,
    /// How a copy would move it.
    pub blocks: StridedBlocks,
    /// Whether the view lies inside the storage.
    pub in_bounds: bool,
}

/// What [`Storage::inspect`] reports.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageInfo {
    /// `"cpu"`, `"pinned"`, `"cuda"`, `"mapped"` or `"shared"`.
    pub kind: &'static str,
    /// The device.
    pub device: Device,
    /// The dtype.
    pub dtype: DType,
    /// Elements.
    pub len: usize,
    /// Bytes.
    pub nbytes: usize,
    /// Address of the first byte (device or host).
    pub ptr: u64,
    /// The device pool's figures, for CUDA storages.
    pub pool: Option<PoolInfo>,
    /// The view, for [`Storage::inspect_view`].
    pub view: Option<ViewInfo>,
}

impl std::fmt::Display for StorageInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} storage: {} x {} ({} bytes) on {} at {:#x}",
            self.kind, self.len, self.dtype, self.nbytes, self.device, self.ptr
        )?;
        if let Some(v) = &self.view {
            write!(
                f,
                "; view shape {:?} strides {:?} offset {} ({}{})",
                v.shape,
                v.strides,
                v.offset,
                if v.contiguous {
                    "contiguous"
                } else {
                    "strided"
                },
                if v.in_bounds { "" } else { ", OUT OF BOUNDS" }
            )?;
        }
        if let Some(p) = &self.pool {
            write!(
                f,
                "; pool {} allocated / {} reserved ({:.1}% free)",
                p.allocated_bytes,
                p.reserved_bytes,
                100.0 * p.fragmentation
            )?;
        }
        Ok(())
    }
}

impl Storage {
    #[track_caller]
    fn cpu(cpu: CpuStorage, dtype: DType, len: usize) -> Storage {
        Storage::make(Inner::Cpu(cpu), dtype, len)
    }

    /// `"cpu"`, `"pinned"`, `"cuda"`, `"mapped"` or `"shared"`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Shape, dtype, device, bytes, pointer and pool information of this storage.
    pub fn inspect(&self) -> StorageInfo {
        let pool = match self.read("inspect").as_deref() {
            Ok(Inner::Cuda(m)) => m.pool_info(),
            _ => None,
        };
        StorageInfo {
            kind: self.kind(),
            device: self.device(),
            dtype: self.dtype,
            len: self.len,
            nbytes: self.nbytes(),
            ptr: self.data_ptr(),
            pool,
            view: None,
        }
    }

    /// [`Storage::inspect`] plus the view `layout` of this storage: shape, strides, offset,
    /// contiguity and how a copy would move it.
    pub fn inspect_view(&self, layout: &Layout) -> StorageInfo {
        let mut info = self.inspect();
        info.view = Some(ViewInfo {
            shape: layout.shape().to_vec(),
            strides: layout.strides().to_vec(),
            offset: layout.offset(),
            contiguous: layout.is_contiguous(),
            blocks: layout.strided_blocks(),
            in_bounds: layout.check_bounds(self.len).is_ok(),
        });
        info
    }

    /// Every storage is made here (and registered with the tracker when it is on).
    #[track_caller]
    pub(crate) fn make(inner: Inner, dtype: DType, len: usize) -> Storage {
        let (kind, device, ptr) = (inner.kind(), inner.device(), inner.ptr());
        let mut s = Storage {
            inner: ShareCell::new(inner),
            dtype,
            len,
            track: 0,
            kind,
            device,
            ptr,
            version: AtomicU64::new(0),
            bounds: None,
            addressed: AtomicBool::new(false),
        };
        s.track =
            crate::tracker::register(kind, device, dtype, len, std::panic::Location::caller());
        s
    }

    /// `len` zeroed elements of `dtype` on `device`.
    #[track_caller]
    pub fn zeros(len: usize, dtype: DType, device: Device) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        match device {
            Device::Cpu => Ok(Storage::cpu(CpuStorage::zeroed(nbytes)?, dtype, len)),
            Device::Cuda(i) => {
                let mut mem = crate::cuda::CudaMem::new(i, nbytes)?;
                mem.zero(nbytes)?;
                Ok(Storage::make(Inner::Cuda(mem), dtype, len))
            }
        }
    }

    /// `len` zeroed elements of `dtype` in host memory aligned to `align` bytes (a power of
    /// two; CPU storages are 64-byte aligned by default).
    #[track_caller]
    pub fn zeros_aligned(len: usize, dtype: DType, align: usize) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        if !align.is_power_of_two() {
            return Err(Error::BadAlignment { align });
        }
        let align = align.max(dtype.size());
        Ok(Storage::cpu(
            CpuStorage::zeroed_aligned(nbytes, align)?,
            dtype,
            len,
        ))
    }

    /// `len` zeroed elements of `dtype` in pinned (page-locked) host memory, for fast and
    /// asynchronous transfers.
    #[track_caller]
    pub fn zeros_pinned(len: usize, dtype: DType) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        let mut mem = crate::cuda::PinnedMem::new(nbytes)?;
        mem.as_bytes_mut().fill(0);
        Ok(Storage::make(Inner::Pinned(mem), dtype, len))
    }

    /// `len` elements of `dtype` mapped from byte `offset` of the file at `path` (zero-copy;
    /// `ReadWrite` writes go to the file, made durable by [`Storage::flush`]).
    #[track_caller]
    pub fn map_file(
        path: impl AsRef<std::path::Path>,
        dtype: DType,
        offset: usize,
        len: usize,
        mode: crate::MapMode,
    ) -> Result<Storage> {
        let m = crate::mapped::map_file(path.as_ref(), dtype, offset, len, mode)?;
        Ok(Storage::make(Inner::Mapped(m), dtype, len))
    }

    /// Creates named shared memory of `len` zeroed elements, usable as this storage by any
    /// process that attaches to the name. Fails if the name exists.
    #[track_caller]
    pub fn create_shared(name: &str, dtype: DType, len: usize) -> Result<Storage> {
        let m = crate::mapped::create_shared(name, dtype, len)?;
        Ok(Storage::make(Inner::Mapped(m), dtype, len))
    }

    /// Attaches to existing named shared memory.
    #[track_caller]
    pub fn attach_shared(name: &str, dtype: DType) -> Result<Storage> {
        let (m, len) = crate::mapped::attach_shared(name, dtype)?;
        Ok(Storage::make(Inner::Mapped(m), dtype, len))
    }

    /// Removes the name of shared memory `name` (attached storages stay valid).
    pub fn unlink_shared(name: &str) -> Result<()> {
        crate::mapped::unlink_shared(name)
    }

    /// Writes a read-write mapped or shared storage back to its file (no-op otherwise).
    pub fn flush(&self) -> Result<()> {
        match &*self.read("flush")? {
            Inner::Mapped(m) => m.flush(),
            _ => Ok(()),
        }
    }

    /// The shared-memory name, for a shared storage.
    pub fn shared_name(&self) -> Option<String> {
        match self.read("shared_name").as_deref() {
            Ok(Inner::Mapped(m)) => m.shared_name.clone(),
            _ => None,
        }
    }

    /// A storage holding a copy of `data` on `device`.
    #[track_caller]
    pub fn from_slice<T: WithDType>(data: &[T], device: Device) -> Result<Storage> {
        let cpu = Storage::cpu(CpuStorage::from_slice(data)?, T::DTYPE, data.len());
        if device == Device::Cpu {
            Ok(cpu)
        } else {
            cpu.to_device(device)
        }
    }

    /// Like [`Storage::from_slice`], but on a CUDA device the copy is only queued on the legacy
    /// stream (the driver stages the host data before returning) instead of waited for: for
    /// small uploads (index arrays) that device work queued after it consumes.
    #[track_caller]
    pub fn upload<T: WithDType>(data: &[T], device: Device) -> Result<Storage> {
        match device {
            Device::Cuda(i) => {
                let nbytes = std::mem::size_of_val(data);
                let mut mem = crate::cuda::CudaMem::new(i, nbytes)?;
                let host = CpuStorage::from_slice(data)?;
                mem.upload_pageable(&host)?;
                let mut out = Storage::make(Inner::Cuda(mem), T::DTYPE, data.len());
                out.note_bounds(host.as_bytes());
                Ok(out)
            }
            _ => Storage::from_slice(data, device),
        }
    }

    /// A storage of `dtype` holding a copy of raw little-endian `bytes` on `device`
    /// (`create_storage`). Bool bytes must be 0 or 1.
    #[track_caller]
    pub fn from_bytes(bytes: &[u8], dtype: DType, device: Device) -> Result<Storage> {
        if !bytes.len().is_multiple_of(dtype.size()) {
            return Err(Error::LengthMismatch {
                op: "from_bytes",
                lhs: bytes.len(),
                rhs: dtype.size(),
            });
        }
        // OR-folded 64 bytes at a time, which compiles to vector code (a byte-wise `any` does not).
        if dtype == DType::Bool
            && bytes
                .chunks(64)
                .any(|c| c.iter().fold(0u8, |a, &b| a | b) > 1)
        {
            return Err(Error::InvalidBool);
        }
        let len = bytes.len() / dtype.size();
        if device == Device::Cpu {
            return Ok(Storage::cpu(CpuStorage::from_bytes(bytes)?, dtype, len));
        }
        // Straight from the caller's bytes to the device: no host copy in between.
        let mut out = Storage::uninit(len, dtype, device)?;
        if let (Inner::Cuda(d), false) = (out.inner_mut(), bytes.is_empty()) {
            d.write_from_host(0, bytes)?;
        }
        out.note_bounds(bytes);
        Ok(out)
    }

    /// `len` elements, every one `value`, on `device` (the `fill` kernel on CUDA).
    #[track_caller]
    pub fn full<T: WithDType>(len: usize, value: T, device: Device) -> Result<Storage> {
        let one = CpuStorage::from_slice(std::slice::from_ref(&value))?;
        Storage::filled(len, T::DTYPE, one.as_bytes(), device)
    }

    /// `len` elements of `dtype`, every one `value` converted exactly as [`Storage::scalar`]
    /// converts it (an error when `dtype` cannot represent it), on `device`: the `fill` kernel
    /// on CUDA for the dtypes it takes (no copy from the host, nothing waited for), the host
    /// otherwise.
    #[track_caller]
    pub fn full_scalar(len: usize, value: f64, dtype: DType, device: Device) -> Result<Storage> {
        let one = Storage::scalar(value, dtype)?;
        let elem = host_of(&*one.read("full")?, "full")?.to_vec();
        Storage::filled(len, dtype, &elem, device)
    }

    /// `len` copies of the element `elem` (its bytes) of `dtype` on `device`: the `fill` kernel
    /// on CUDA for the elementwise dtypes; others are filled on the host and copied over.
    fn filled(len: usize, dtype: DType, elem: &[u8], device: Device) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        if let Device::Cuda(i) = device
            && crate::dtype::dispatch_kernel_dtype!(dtype, _K => true, _ => false)
        {
            let mut mem = crate::cuda::CudaMem::new(i, nbytes)?;
            mem.fill(dtype, elem, len)?;
            return Ok(Storage::make(Inner::Cuda(mem), dtype, len));
        }
        let mut cpu = CpuStorage::zeroed(nbytes)?;
        for chunk in cpu.as_bytes_mut().chunks_exact_mut(elem.len()) {
            chunk.copy_from_slice(elem);
        }
        let host = Storage::cpu(cpu, dtype, len);
        match device {
            Device::Cpu => Ok(host),
            _ => host.to_device(device),
        }
    }

    /// The device (`Cpu` for pinned host memory too).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether this is pinned (page-locked) host memory.
    pub fn is_pinned(&self) -> bool {
        self.kind == "pinned"
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the storage holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// The address of the first byte: a device address for CUDA storages, a host address
    /// otherwise (0 for an empty device storage).
    /// Handing the address out drops [`Storage::known_bounds`] for good: code that keeps no
    /// version may write through it.
    pub fn data_ptr(&self) -> u64 {
        self.mark_addressed();
        self.ptr
    }

    /// Marks a CUDA storage's memory as used by work queued on `stream` (PyTorch's
    /// `record_stream`), a raw `CUstream` of the storage's device as an integer (0 for the
    /// legacy stream): when the storage is dropped, the pool reuses its memory only after the
    /// work queued on that stream so far is done, as it does for the stream the memory was
    /// allocated on. Needed when another stream than the allocation's reads or writes the
    /// memory (a library such as NCCL queueing work on a stream of its caller's choice).
    ///
    /// The stream must stay alive while the pool holds the memory (the pool records events on
    /// it when the memory is freed): a stream of the pool (`pooled_stream`), which lives as
    /// long as the process, or the legacy stream. An error for storages not on a device.
    pub fn record_stream(&self, stream: u64) -> Result<()> {
        match &*self.read("record_stream")? {
            Inner::Cuda(m) => m.record_stream(stream),
            _ => Err(Error::NotOnDevice {
                op: "record_stream",
                device: self.device(),
            }),
        }
    }

    /// The device address, if this is on a CUDA device (which drops
    /// [`Storage::known_bounds`], as [`Storage::data_ptr`] does).
    pub fn device_ptr(&self) -> Option<u64> {
        self.mark_addressed();
        matches!(self.device, Device::Cuda(_)).then_some(self.ptr)
    }

    /// The bytes of a host storage (CPU, pinned, mapped or shared); `None` on a device, or
    /// when this thread is writing the storage. The guard holds a read lock: writes to the
    /// storage (through any tensor that shares it) wait until it is dropped, and a write from
    /// this thread meanwhile fails with [`Error::Aliased`].
    pub fn host_bytes(&self) -> Option<HostBytes<'_>> {
        self.host_bytes_for("host_bytes").ok()
    }

    /// The bytes of a host storage (an error on a device), for `op`.
    pub(crate) fn host_bytes_for(&self, op: &'static str) -> Result<HostBytes<'_>> {
        let guard = self.read(op)?;
        if guard.host().is_none() {
            return Err(Error::NotOnHost {
                op,
                device: self.device(),
            });
        }
        Ok(HostBytes { guard })
    }

    /// A read lock of the memory (see the aliasing model of [`Storage`]).
    pub(crate) fn read(&self, op: &'static str) -> Result<ReadGuard<'_, Inner>> {
        self.inner.read(op)
    }

    /// How many times the storage has been written through a shared handle (PyTorch's
    /// `_version`): every write through `&Storage` adds one, whichever tensor made it. A
    /// storage starts at 0; writes through `&mut Storage`, which only a storage's sole owner
    /// can make (building a new storage), are not counted.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// The least and greatest value of this integer device storage when they are known without
    /// reading the device: recorded when it was filled from CPU memory (int64 or int32, a copy
    /// of at most [`BOUNDS_MAX_LEN`] values: `from_slice`, `from_bytes`, `to_device`) or drawn by
    /// [`Storage::random`] in a range (`randint`), passed on by copies and integer
    /// conversions of such a storage (`to_device`, `to_dtype`, `try_clone`), and
    /// kept only while nothing has written it since ([`Storage::version`] still 0, no write
    /// through `&mut Storage`) and its address has not been handed out
    /// ([`Storage::data_ptr`], [`Storage::device_ptr`], [`Storage::cuda_span`], an IPC
    /// export). Index ops on CUDA whose index values all lie in range by these bounds skip
    /// the read-back of their device-side check, a synchronisation (`cross_entropy`'s
    /// targets, `gather`, `scatter`): a loss's targets uploaded each step make the host wait
    /// for nothing. The facade's integer division skips its check for zero divisors alike.
    pub fn known_bounds(&self) -> Option<(i64, i64)> {
        let unwritten = self.version() == 0 && !self.addressed.load(Ordering::SeqCst);
        self.bounds.filter(|_| unwritten)
    }

    /// Whether every value of this storage is known, by [`Storage::known_bounds`], to lie in
    /// `lo..hi`. Asked after the work that reads the values is queued: bounds still known then
    /// were known all along (they are only ever dropped), and later writes queue after it.
    pub(crate) fn known_within(&self, lo: i128, hi: i128) -> bool {
        self.known_bounds()
            .is_some_and(|(l, h)| lo <= i128::from(l) && i128::from(h) < hi)
    }

    /// Drops [`Storage::known_bounds`] for good (the address is handed out).
    pub(crate) fn mark_addressed(&self) {
        self.addressed.store(true, Ordering::SeqCst);
    }

    /// The memory, for a write through `&mut Storage` (which drops the known bounds).
    pub(crate) fn inner_mut(&mut self) -> &mut Inner {
        self.bounds = None;
        self.inner.get_mut()
    }

    /// Records that every value of this freshly written integer device storage lies in
    /// `lo..=hi` (integers drawn in that range, or copied from a storage known so) for
    /// [`Storage::known_bounds`]; nothing when its dtype cannot hold them.
    pub(crate) fn note_known_bounds(&mut self, lo: i64, hi: i64) {
        let holds = match self.dtype {
            DType::U8 => (0, i64::from(u8::MAX)),
            DType::I8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
            DType::I16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
            DType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
            DType::I64 => (i64::MIN, i64::MAX),
            _ => return,
        };
        if self.device != Device::Cpu && lo <= hi && holds.0 <= lo && hi <= holds.1 {
            self.bounds = Some((lo, hi));
        }
    }

    /// Gives `out`, just written with values of this storage (copied or converted), this
    /// storage's known bounds, asked after the copy (see [`Storage::known_within`]).
    fn pass_bounds(&self, out: &mut Storage) {
        if let Some((lo, hi)) = self.known_bounds() {
            out.note_known_bounds(lo, hi);
        }
    }

    /// Records the bounds of `bytes`, host values just copied whole into this device storage
    /// ([`host_bounds`]).
    fn note_bounds(&mut self, bytes: &[u8]) {
        if bytes.len() == self.nbytes()
            && let Some((lo, hi)) = host_bounds(self.dtype, bytes)
        {
            self.note_known_bounds(lo, hi);
        }
    }

    /// Runs `f` with exclusive access to this shared storage: the write lock is held while `f`
    /// runs (other readers and writers, in any thread, wait), and [`Storage::version`] goes up
    /// by one. The way to apply any `&mut Storage` operation to a storage that tensors share.
    /// `f`'s error type is any that a storage error converts into.
    ///
    /// Fails with [`Error::Aliased`] when this thread is reading or writing the storage (a
    /// [`HostBytes`] guard of it is alive, or `f` itself reads it): `f` must not touch `self`
    /// other than through its argument. `f` may replace the storage it is given only by one
    /// of the same kind, device, dtype, length and memory (anything else aborts the process,
    /// the one way to keep the tensors that share it sound).
    pub fn with_exclusive<R, E: From<Error>>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Storage) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let guard = self.inner.write(op)?;
        self.version.fetch_add(1, Ordering::SeqCst);
        /// Puts the memory back into the cell when `f` returns or panics.
        struct Restore<'g, 'a> {
            guard: &'g WriteGuard<'a, Inner>,
            tmp: std::mem::ManuallyDrop<Storage>,
            header: (&'static str, Device, u64, DType, usize),
        }
        impl Drop for Restore<'_, '_> {
            fn drop(&mut self) {
                let t = &self.tmp;
                if (t.kind, t.device, t.ptr, t.dtype, t.len) != self.header {
                    // The storage's memory was moved elsewhere: the shared handles would
                    // point at memory another owner frees.
                    std::process::abort();
                }
                // SAFETY: `tmp` is never dropped (ManuallyDrop) and its cell is not used after
                // this: its memory moves back into the locked cell, which holds a bitwise copy
                // that was moved out (and so is overwritten without being dropped).
                unsafe {
                    let inner = std::ptr::read(self.tmp.inner.value_ptr());
                    std::ptr::write(self.guard.as_ptr(), inner);
                }
            }
        }
        // SAFETY: the write lock is held, so no reference to the cell's value exists; it is
        // moved out bitwise into a storage that `f` borrows, and `Restore` moves it back
        // (whatever `f` does, panics included) before the lock is released.
        let inner = unsafe { std::ptr::read(guard.as_ptr()) };
        let mut restore = Restore {
            guard: &guard,
            tmp: std::mem::ManuallyDrop::new(Storage {
                inner: ShareCell::new(inner),
                dtype: self.dtype,
                len: self.len,
                track: 0,
                kind: self.kind,
                device: self.device,
                ptr: self.ptr,
                version: AtomicU64::new(0),
                bounds: None,
                addressed: AtomicBool::new(false),
            }),
            header: (self.kind, self.device, self.ptr, self.dtype, self.len),
        };
        f(&mut restore.tmp)
    }

    /// The bytes of a host storage, mutably (an error on a device or for a read-only mapping).
    pub fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.host_bytes_mut_for("host_bytes_mut")
    }

    fn host_bytes_mut_for(&mut self, op: &'static str) -> Result<&mut [u8]> {
        host_of_mut(self.inner_mut(), op)
    }

    /// The elements of a host storage as `T` (which must be the dtype), read-locked while the
    /// guard lives (as [`Storage::host_bytes`]).
    pub fn as_slice<T: WithDType>(&self) -> Result<HostSlice<'_, T>> {
        self.check_type::<T>("as_slice")?;
        let bytes = self.host_bytes_for("as_slice")?;
        Ok(HostSlice {
            bytes,
            len: self.len,
            _t: std::marker::PhantomData,
        })
    }

    /// The elements of a host storage as `T`, mutably.
    pub fn as_mut_slice<T: WithDType>(&mut self) -> Result<&mut [T]> {
        self.check_type::<T>("as_mut_slice")?;
        let len = self.len;
        let bytes = self.host_bytes_mut_for("as_mut_slice")?;
        // SAFETY: as in `as_slice`, with a unique borrow.
        Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), len) })
    }

    fn check_type<T: WithDType>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype,
                rhs: T::DTYPE,
            })
        }
    }

    /// The bytes, copied to the host.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        match &*self.read("to_bytes")? {
            Inner::Cuda(m) => {
                let mut v = vec![0u8; self.nbytes()];
                m.read_to_host(0, &mut v)?;
                Ok(v)
            }
            inner => Ok(inner.host().unwrap_or(&[]).to_vec()),
        }
    }

    /// The elements copied into a `Vec<T>`; `T` must be the storage's dtype.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        self.to_vec_at(0, self.len)
    }

    /// Elements `start..start + len` copied into a `Vec<T>` (one copy, from the host or the
    /// device); `T` must be the storage's dtype.
    pub fn to_vec_at<T: WithDType>(&self, start: usize, len: usize) -> Result<Vec<T>> {
        self.check_type::<T>("to_vec")?;
        self.check_range("to_vec", start, len)?;
        let size = size_of::<T>();
        crate::cpu::check_host_bytes(len.saturating_mul(size))?;
        let mut out: Vec<T> = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| Error::HostOutOfMemory { bytes: len * size })?;
        {
            let spare = out.spare_capacity_mut();
            // SAFETY: `spare` is the vector's uninitialised capacity of at least `len`
            // elements of `T`; viewing its first `len * size_of::<T>()` bytes as `u8` to write
            // them is sound (any byte may be written to uninitialised memory).
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<u8>(), len * size)
            };
            match &*self.read("to_vec")? {
                Inner::Cuda(m) => m.read_to_host(start * size, bytes)?,
                inner => bytes.copy_from_slice(
                    &inner.host().unwrap_or(&[])[start * size..(start + len) * size],
                ),
            }
        }
        // SAFETY: the first `len` elements were written above (every byte of them), and every
        // bit pattern is a valid `T` (the sealed `WithDType` types are plain numbers).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// The elements converted to `f64`, for display and reference checks.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        genesis_kernels::dispatch_dtype!(self.dtype, [U8, I8, I16, I32, I64, F16, BF16, F32, F64],
            T => Ok(self.to_vec::<T>()?.into_iter().map(WithDType::to_f64).collect()),
            _ => Ok(self.to_bytes()?.into_iter().map(|b| f64::from(u8::from(b != 0))).collect()))
    }

    /// A copy on `device` (plain CPU memory for `Device::Cpu`).
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Result<Storage> {
        self.to_device_at(0, self.len, device)
    }

    /// Elements `start..start + len` copied to a new storage on `device` (plain CPU memory for
    /// `Device::Cpu`) in one copy: between pinned host memory and a device, one DMA.
    #[track_caller]
    pub fn to_device_at(&self, start: usize, len: usize, device: Device) -> Result<Storage> {
        self.check_range("to_device", start, len)?;
        let size = self.dtype.size();
        let mut out = Storage::uninit(len, self.dtype, device)?;
        // Integers to a device: the bounds of values in private host memory, found before the
        // copy and kept if no write came in between (the version unchanged; pinned copies may
        // still be in flight after the call, and shared or mapped memory can change behind
        // the lock), else a device source's own. Other copies take neither lock nor bounds.
        let ints = !self.dtype.is_float() && self.dtype != DType::Bool && device != Device::Cpu;
        let version = self.version();
        let host = if ints {
            match &*self.read("to_device")? {
                Inner::Cpu(c) => host_bounds(
                    self.dtype,
                    &c.as_bytes()[start * size..(start + len) * size],
                ),
                _ => None,
            }
        } else {
            None
        };
        out.copy_bytes_from(0, self, start * size, len * size)?;
        if let Some((lo, hi)) = host
            && self.version() == version
        {
            out.note_known_bounds(lo, hi);
        } else if ints {
            self.pass_bounds(&mut out);
        }
        Ok(out)
    }

    /// A copy in pinned host memory.
    #[track_caller]
    pub fn to_pinned(&self) -> Result<Storage> {
        let mut out = Storage::zeros_pinned(self.len, self.dtype)?;
        out.copy_from(self)?;
        Ok(out)
    }

    /// A copy of the same kind on the same device.
    #[track_caller]
    pub fn try_clone(&self) -> Result<Storage> {
        if self.is_pinned() {
            self.to_pinned()
        } else {
            self.to_device(self.device())
        }
    }

    /// `len` elements of `dtype` on `device` whose contents are unspecified (zero on the host;
    /// whatever the pool's memory held on a device): for outputs that are written whole.
    #[track_caller]
    pub fn empty(len: usize, dtype: DType, device: Device) -> Result<Storage> {
        Storage::uninit(len, dtype, device)
    }

    /// Memory for `len` elements whose contents will be overwritten.
    #[track_caller]
    fn uninit(len: usize, dtype: DType, device: Device) -> Result<Storage> {
        let nbytes = byte_len(len, dtype)?;
        match device {
            Device::Cpu => Ok(Storage::cpu(CpuStorage::zeroed(nbytes)?, dtype, len)),
            Device::Cuda(i) => Ok(Storage::make(
                Inner::Cuda(crate::cuda::CudaMem::new(i, nbytes)?),
                dtype,
                len,
            )),
        }
    }

    /// Copies all of `src` (same dtype and length, any device) into this storage.
    pub fn copy_from(&mut self, src: &Storage) -> Result<()> {
        if self.dtype != src.dtype {
            return Err(Error::DTypeMismatch {
                op: "copy_from",
                lhs: self.dtype,
                rhs: src.dtype,
            });
        }
        if self.len != src.len {
            return Err(Error::LengthMismatch {
                op: "copy_from",
                lhs: self.len,
                rhs: src.len,
            });
        }
        self.copy_bytes_from(0, src, 0, self.nbytes())
    }

    /// Copies `bytes` bytes from `src` at byte `src_at` to this storage at byte `dst_at`.
    fn copy_bytes_from(
        &mut self,
        dst_at: usize,
        src: &Storage,
        src_at: usize,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let src_inner = src.read("copy_from")?;
        match (self.inner_mut(), &*src_inner) {
            (Inner::Cuda(d), Inner::Cuda(s)) => d.copy_from_device(dst_at, s, src_at, bytes),
            (Inner::Cuda(d), s) => {
                let host = &host_of(s, "copy_from")?[src_at..src_at + bytes];
                d.write_from_host(dst_at, host)?;
                Ok(())
            }
            (d, Inner::Cuda(s)) => {
                let host = &mut host_of_mut(d, "copy_from")?[dst_at..dst_at + bytes];
                // The synchronous copy waits for the work queued before it on the legacy stream.
                s.read_to_host(src_at, host)?;
                Ok(())
            }
            (d, s) => {
                let s = &host_of(s, "copy_from")?[src_at..src_at + bytes];
                host_of_mut(d, "copy_from")?[dst_at..dst_at + bytes].copy_from_slice(s);
                Ok(())
            }
        }
    }

    /// The elements of `layout` (a view of this storage) gathered row-major into a new storage
    /// on the same device: a memcpy for one block, a strided kernel (or the tiled transpose for
    /// a 2-D transpose) otherwise.
    #[track_caller]
    pub fn contiguous(&self, layout: &Layout) -> Result<Storage> {
        layout.check_bounds(self.len)?;
        let n = layout.numel();
        let device = self.device();
        let mut out = Storage::uninit(
            n,
            self.dtype,
            if self.is_pinned() {
                Device::Cpu
            } else {
                device
            },
        )?;
        let dst_layout = Layout::contiguous(layout.shape());
        out.copy_strided_from(&dst_layout, self, layout)?;
        Ok(out)
    }

    /// Copies the elements of `src` under `src_layout` into this storage under `dst_layout`
    /// (same shape, same dtype; the destination must not overlap itself). Both storages must
    /// be on the same device, or both on the host.
    pub fn copy_strided_from(
        &mut self,
        dst_layout: &Layout,
        src: &Storage,
        src_layout: &Layout,
    ) -> Result<()> {
        if self.dtype != src.dtype {
            return Err(Error::DTypeMismatch {
                op: "copy_strided_from",
                lhs: self.dtype,
                rhs: src.dtype,
            });
        }
        if dst_layout.shape() != src_layout.shape() {
            return Err(Error::ShapeMismatch {
                op: "copy_strided_from",
                lhs: dst_layout.shape().to_vec(),
                rhs: src_layout.shape().to_vec(),
            });
        }
        dst_layout.check_bounds(self.len)?;
        src_layout.check_bounds(src.len)?;
        if dst_layout.strides().contains(&0) && dst_layout.numel() > 1 {
            return Err(Error::OverlappingDestination);
        }
        // Nothing to copy; an empty view's offset need not lie inside its storage (which may be
        // an allocation of 0 bytes), so no memory is named.
        if dst_layout.numel() == 0 {
            return Ok(());
        }
        let size = self.dtype.size();
        // One block on both sides: a plain byte copy (any device pair); stream-ordered, as the
        // kernels below, within one device.
        if let (StridedBlocks::Single { start: ds, len }, StridedBlocks::Single { start: ss, .. }) =
            (dst_layout.strided_blocks(), src_layout.strided_blocks())
            && dst_layout.is_contiguous()
            && src_layout.is_contiguous()
        {
            let (dst_at, src_at, bytes) = (ds * size, ss * size, len * size);
            if let (Inner::Cuda(d), Inner::Cuda(s)) =
                (self.inner_mut(), &*src.read("copy_strided_from")?)
                && d.ordinal() == s.ordinal()
            {
                return d.copy_within_device(dst_at, s, src_at, bytes);
            }
            return self.copy_bytes_from(dst_at, src, src_at, bytes);
        }
        // More dimensions than the strided kernel (and its twin) take: the pair reduced, or a
        // loop of copies of the innermost dimensions (any rank up to `MAX_RANK`, as PyTorch).
        if src_layout.rank() > genesis_kernels::copy::MAX_DIMS {
            return self.copy_strided_high_rank(dst_layout, src, src_layout);
        }
        // Rows of contiguous elements on both sides (uniform blocks): a 2-D copy.
        if let (Some(d2), Some(s2)) = (rows_of(dst_layout), rows_of(src_layout))
            && d2.1 == s2.1
            && d2.2 == s2.2
            && self.copy_2d_from(d2, src, s2, size)?
        {
            return Ok(());
        }
        let desc = genesis_kernels::StridedCopy::new(
            src_layout.shape(),
            src_layout.strides(),
            src_layout.offset(),
            dst_layout.strides(),
            dst_layout.offset(),
        )?;
        let src_inner = src.read("copy_strided_from")?;
        let dst_bytes = self.len * size;
        match (self.inner_mut(), &*src_inner) {
            (Inner::Cuda(d), Inner::Cuda(s)) if d.ordinal() == s.ordinal() => {
                // A 2-D transpose into a dense destination takes the tiled kernel.
                let transpose = transpose_shape(src_layout, dst_layout)
                    .map(|(r, c, ld)| (r, c, ld, src_layout.offset(), dst_layout.offset()));
                let sizes = (src.nbytes(), dst_bytes, size);
                d.strided_copy_from(s, sizes, &desc, transpose)
            }
            (Inner::Cuda(_), _) | (_, Inner::Cuda(_)) => {
                drop(src_inner);
                // Different devices: gather on the source's device, then copy the dense block.
                let dense = src.contiguous(src_layout)?;
                if dst_layout.is_contiguous() {
                    let at = dst_layout.offset() * size;
                    return self.copy_bytes_from(at, &dense, 0, dense.nbytes());
                }
                let staged = dense.to_device(self.device())?;
                self.copy_strided_from(dst_layout, &staged, &Layout::contiguous(src_layout.shape()))
            }
            (d, s) => {
                let s = host_of(s, "copy_strided_from")?;
                let d = host_of_mut(d, "copy_strided_from")?;
                host_strided_copy(size, s, d, &desc)
            }
        }
    }

    /// [`Storage::copy_strided_from`] for layouts (checked, of one shape, non-empty) of more
    /// dimensions than the strided kernel takes: the two reduced together (dimensions of size 1
    /// dropped, neighbours contiguous with each other on both sides merged: the same element
    /// pairs in the same order), then one copy, or one copy of the innermost dimensions per
    /// index of the outer ones.
    fn copy_strided_high_rank(
        &mut self,
        dst_layout: &Layout,
        src: &Storage,
        src_layout: &Layout,
    ) -> Result<()> {
        const MAX: usize = genesis_kernels::copy::MAX_DIMS;
        let (dl, sl) = coalesce_pair(dst_layout, src_layout);
        let rank = dl.rank();
        if rank <= MAX {
            return self.copy_strided_from(&dl, src, &sl);
        }
        let outer = rank - MAX;
        let mut idx = vec![0usize; outer];
        let count: usize = dl.shape()[..outer].iter().product();
        for _ in 0..count {
            // In range: both layouts passed `check_bounds`, so every element offset fits.
            let at = |l: &Layout| {
                let off = idx
                    .iter()
                    .zip(l.strides())
                    .fold(l.offset() as isize, |o, (&i, &s)| o + i as isize * s);
                Layout::new(&l.shape()[outer..], &l.strides()[outer..], off as usize)
            };
            self.copy_strided_from(&at(&dl), src, &at(&sl))?;
            for d in (0..outer).rev() {
                idx[d] += 1;
                if idx[d] < dl.shape()[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }

    /// Copies `count` rows of `len` elements (row starts `pitch` elements apart) with a 2-D
    /// copy when the pair of memories suits one; `Ok(false)` when a kernel would do better.
    fn copy_2d_from(
        &mut self,
        d: (usize, usize, usize, usize),
        src: &Storage,
        s: (usize, usize, usize, usize),
        size: usize,
    ) -> Result<bool> {
        let (ds, len, count, dp) = d;
        let (ss, _, _, sp) = s;
        let width = len * size;
        let src_inner = src.read("copy_strided_from")?;
        match (self.inner_mut(), &*src_inner) {
            (Inner::Cuda(dm), Inner::Cuda(sm)) => {
                // Narrow rows, and rows the strided kernel moves 16 bytes an access (row
                // width, pitches and starts multiples of 16 bytes), are faster through the
                // kernel than through the 2-D copy (the copy engines).
                let aligned = [width, ds * size, ss * size, dp * size, sp * size]
                    .iter()
                    .all(|b| b % 16 == 0);
                if width < 1024 || aligned || dm.ordinal() != sm.ordinal() {
                    return Ok(false);
                }
                let (dst, src_rows) = ((ds * size, dp * size), (ss * size, sp * size));
                dm.copy_2d_from_device(dst, sm, src_rows, width, count)?;
                Ok(true)
            }
            (Inner::Cuda(dm), s) => {
                let host = host_of(s, "copy_strided_from")?;
                let (dst, src_rows) = ((ds * size, dp * size), (ss * size, sp * size));
                dm.copy_2d_from_host(dst, host, src_rows, width, count)?;
                Ok(true)
            }
            (d, Inner::Cuda(sm)) => {
                let host = host_of_mut(d, "copy_strided_from")?;
                let (dst, src_rows) = ((ds * size, dp * size), (ss * size, sp * size));
                sm.copy_2d_to_host(host, dst, src_rows, width, count)?;
                Ok(true)
            }
            (d, s) => {
                let s = host_of(s, "copy_strided_from")?;
                let d = host_of_mut(d, "copy_strided_from")?;
                for r in 0..count {
                    let (so, doff) = ((ss + r * sp) * size, (ds + r * dp) * size);
                    d[doff..doff + width].copy_from_slice(&s[so..so + width]);
                }
                Ok(true)
            }
        }
    }

    /// A copy converted to `dtype` (same device; the conversion kernel on CUDA, its twin on
    /// the CPU). Rounding to f16/bf16 is to nearest-even; floats to integers truncate and
    /// saturate, NaN becoming 0; integers wrap; bool is `x != 0`.
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Result<Storage> {
        if dtype == self.dtype {
            return self.try_clone();
        }
        self.to_dtype_at(0, self.len, dtype)
    }

    /// Elements `start..start + len` converted to `dtype` into a new storage on the same
    /// device (plain device or host memory), read in place: one pass, as [`Storage::to_dtype`].
    #[track_caller]
    pub fn to_dtype_at(&self, start: usize, len: usize, dtype: DType) -> Result<Storage> {
        self.check_range("to_dtype", start, len)?;
        let device = self.device();
        let mut out = Storage::uninit(len, dtype, device)?;
        // Integers converted to integers keep their values, so their known bounds.
        if dtype == self.dtype {
            let (at, bytes) = (start * dtype.size(), len * dtype.size());
            // Within one device, stream-ordered as the cast kernels are: the host does not
            // wait for the copy.
            if let (Inner::Cuda(d), Inner::Cuda(s)) = (out.inner_mut(), &*self.read("to_dtype")?)
                && d.ordinal() == s.ordinal()
            {
                if bytes > 0 {
                    d.copy_within_device(0, s, at, bytes)?;
                }
            } else {
                out.copy_bytes_from(0, self, at, bytes)?;
            }
            self.pass_bounds(&mut out);
            return Ok(out);
        }
        match (self.read("to_dtype")?.mem(), out.mem_mut("to_dtype")?) {
            (Mem::Host(a), MemMut::Host(o)) => a.cast(self.dtype, start, dtype, o, len)?,
            (Mem::Cuda(a), MemMut::Cuda(o)) => a.cast(self.dtype, start, dtype, o, len)?,
            _ => return Err(mixed("to_dtype")),
        }
        self.pass_bounds(&mut out);
        Ok(out)
    }

    fn check_binary(&self, op: &'static str, other: &Storage) -> Result<()> {
        self.check_binary_types(op, other)?;
        if self.len != other.len {
            return Err(Error::LengthMismatch {
                op,
                lhs: self.len,
                rhs: other.len,
            });
        }
        Ok(())
    }

    /// The dtype the fused kernels' statistics and losses take for elements of `dtype`
    /// (attention's `lse`, layer norm's mean and `rstd`, the classifier's losses): f64 for
    /// f64, else f32, their twins' accumulator (`genesis_kernels::real::FusedElement::Acc`).
    pub fn fused_acc_dtype(dtype: DType) -> DType {
        if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        }
    }

    fn check_binary_types(&self, op: &'static str, other: &Storage) -> Result<()> {
        if self.dtype != other.dtype {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype,
                rhs: other.dtype,
            });
        }
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }

    /// The memory, writable, for its backend (an error for a read-only mapping).
    pub(crate) fn mem_mut(&mut self, op: &'static str) -> Result<MemMut<'_>> {
        match self.inner_mut() {
            Inner::Cuda(m) => Ok(MemMut::Cuda(m)),
            Inner::Cpu(c) => Ok(MemMut::Host(c.as_bytes_mut())),
            Inner::Mapped(m) => m
                .bytes_mut()
                .map(MemMut::Host)
                .ok_or(Error::ReadOnly { op }),
            Inner::Pinned(p) => Ok(MemMut::Host(p.as_bytes_mut())),
        }
    }

    fn check_range(&self, op: &'static str, start: usize, len: usize) -> Result<()> {
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                op,
                start,
                len,
                storage_len: self.len,
            }),
        }
    }
}

/// The bytes of host memory (an error for device memory), for `op`.
fn host_of<'a>(inner: &'a Inner, op: &'static str) -> Result<&'a [u8]> {
    inner.host().ok_or(Error::NotOnHost {
        op,
        device: inner.device(),
    })
}

/// The bytes of host memory, writable (an error for device memory or a read-only mapping).
fn host_of_mut<'a>(inner: &'a mut Inner, op: &'static str) -> Result<&'a mut [u8]> {
    match inner {
        Inner::Cpu(c) => Ok(c.as_bytes_mut()),
        Inner::Mapped(m) => m.bytes_mut().ok_or(Error::ReadOnly { op }),
        Inner::Pinned(p) => Ok(p.as_bytes_mut()),
        Inner::Cuda(m) => Err(Error::NotOnHost {
            op,
            device: Device::Cuda(m.ordinal()),
        }),
    }
}

/// The error of operands in different kinds of memory (the callers check devices first, so
/// this is a defect rather than a user error, but not a panic).
pub(crate) fn mixed(op: &'static str) -> Error {
    Error::Kernel(genesis_kernels::Error::Unsupported {
        op,
        reason: "operands in host and device memory".into(),
    })
}

/// An `UnsupportedDType` error for a dtype the elementwise kernels do not have (checked
/// before an output is allocated).
fn check_kernel_dtype(op: &'static str, dtype: DType) -> Result<()> {
    crate::dtype::dispatch_kernel_dtype!(dtype, _T => Ok(()), _ => Err(Error::UnsupportedDType { op, dtype }))
}

/// An `UnsupportedDType` error for an operation only the floating types support.
fn check_float_only(op: &'static str, float_only: bool, dtype: DType) -> Result<()> {
    if float_only && !dtype.is_float() {
        Err(Error::UnsupportedDType { op, dtype })
    } else {
        Ok(())
    }
}

/// `dst` and `src` (one shape, with elements) reduced together to the fewest dimensions that
/// visit the same element pairs in the same order.
fn coalesce_pair(dst: &Layout, src: &Layout) -> (Layout, Layout) {
    let mut shape: Vec<usize> = Vec::new();
    let (mut ds, mut ss): (Vec<isize>, Vec<isize>) = (Vec::new(), Vec::new());
    for ((&d, &a), &b) in dst.shape().iter().zip(dst.strides()).zip(src.strides()) {
        if d == 1 {
            continue;
        }
        if let (Some(last), Some(la), Some(lb)) = (shape.last_mut(), ds.last_mut(), ss.last_mut())
            && Some(*la) == a.checked_mul(d as isize)
            && Some(*lb) == b.checked_mul(d as isize)
        {
            *last *= d;
            *la = a;
            *lb = b;
            continue;
        }
        shape.push(d);
        ds.push(a);
        ss.push(b);
    }
    (
        Layout::new(&shape, &ds, dst.offset()),
        Layout::new(&shape, &ss, src.offset()),
    )
}

/// `(start, len, count, pitch)` when the layout's elements are `count` rows of `len`
/// contiguous elements, `pitch` apart (one row for a contiguous layout).
fn rows_of(l: &Layout) -> Option<(usize, usize, usize, usize)> {
    match l.strided_blocks() {
        StridedBlocks::Uniform {
            start,
            len,
            count,
            pitch,
        } => Some((start, len, count, pitch)),
        StridedBlocks::Single { start, len } => Some((start, len, 1, len)),
        StridedBlocks::General => None,
    }
}

/// `(rows, cols, ld)` when `src` is a 2-D transpose of a row-major matrix (strides `[1, ld]`)
/// and `dst` is dense row-major: the tiled transpose kernel's case.
fn transpose_shape(src: &Layout, dst: &Layout) -> Option<(usize, usize, usize)> {
    if src.rank() != 2 || !dst.is_contiguous() {
        return None;
    }
    let (sh, st) = (src.shape(), src.strides());
    // Output is [sh0, sh1]; input matrix has rows = sh1 (stride st1 = ld) and cols = sh0.
    (st[0] == 1 && st[1] >= sh[0] as isize && sh[0] > 1 && sh[1] > 1)
        .then(|| (sh[1], sh[0], st[1] as usize))
}

fn host_strided_copy(
    size: usize,
    src: &[u8],
    dst: &mut [u8],
    desc: &genesis_kernels::StridedCopy,
) -> Result<()> {
    macro_rules! as_words {
        ($t:ty) => {{
            let s =
                // SAFETY: host storages are 64-byte aligned and `$t` is a plain integer whose
                // size divides the buffers' lengths (they hold whole elements of `size` bytes).
                unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<$t>(), src.len() / size) };
            // SAFETY: as above, with the unique borrow of `dst`.
            let d = unsafe {
                std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<$t>(), dst.len() / size)
            };
            genesis_kernels::copy::strided_copy(s, d, desc)?;
        }};
    }
    match size {
        1 => as_words!(u8),
        2 => as_words!(u16),
        4 => as_words!(u32),
        8 => as_words!(u64),
        _ => {
            return Err(Error::UnsupportedDType {
                op: "strided copy",
                dtype: DType::U8,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// The bounds of int64 bytes over every length up to a few lanes and random values, the
    /// extremes included, against a plain fold; no value, no bounds.
    #[test]
    fn i64_bounds_are_the_least_and_greatest() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        assert_eq!(i64_bounds(&[]), None);
        assert_eq!(i32_bounds(&[]), None);
        for n in (1..40).chain([1000, 4097]) {
            for _ in 0..20 {
                let v: Vec<i64> = (0..n)
                    .map(|_| match rng.random_range(0..8) {
                        0 => i64::MIN,
                        1 => i64::MAX,
                        _ => rng.random_range(-1000..1000),
                    })
                    .collect();
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let want = (*v.iter().min().unwrap(), *v.iter().max().unwrap());
                assert_eq!(i64_bounds(&bytes), Some(want), "{v:?}");
                let narrow: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                let bytes: Vec<u8> = narrow.iter().flat_map(|x| x.to_le_bytes()).collect();
                let want = (
                    i64::from(*narrow.iter().min().unwrap()),
                    i64::from(*narrow.iter().max().unwrap()),
                );
                assert_eq!(i32_bounds(&bytes), Some(want), "{narrow:?}");
            }
        }
    }

    /// Host storages keep no bounds: their values are read where they are.
    #[test]
    fn host_storages_keep_no_bounds() {
        let s = Storage::from_slice(&[3i64, 1, 2], Device::Cpu).unwrap();
        assert_eq!(s.known_bounds(), None);
        assert!(!s.known_within(0, 4));
    }

    /// Copies of more than the strided kernel's dimensions, coalescible or not.
    #[test]
    fn copies_of_any_rank() {
        let n = 1 << 12;
        let data: Vec<i32> = (0..n).collect();
        let src = Storage::from_slice(&data, Device::Cpu).unwrap();
        // Twelve dimensions of 2, transposed: nothing merges.
        let base = Layout::contiguous(&[2; 12]);
        let perm: Vec<usize> = (0..12).rev().collect();
        let t = base.permute(&perm).unwrap();
        let out = src.contiguous(&t).unwrap();
        let want: Vec<i32> = t.indices().map(|i| data[i]).collect();
        assert_eq!(out.to_vec::<i32>().unwrap(), want);
        // Sixty-four dimensions, all but two of size 1: one plain copy.
        let mut shape = vec![1usize; 64];
        shape[10] = 64;
        shape[40] = 64;
        let l = Layout::contiguous(&shape);
        let (a, b) = coalesce_pair(&l, &l);
        assert_eq!(a.shape(), &[4096]);
        assert_eq!(b.strides(), &[1]);
        assert_eq!(src.contiguous(&l).unwrap().to_vec::<i32>().unwrap(), data);
        // Writing through a rank-12 destination.
        let mut dst = Storage::zeros(n as usize, DType::I32, Device::Cpu).unwrap();
        dst.copy_strided_from(&t, &src, &Layout::contiguous(t.shape()))
            .unwrap();
        let back = dst.contiguous(&t).unwrap();
        assert_eq!(back.to_vec::<i32>().unwrap(), data);
    }

    /// `full_scalar` repeats the element `Storage::scalar` makes of the value, and refuses
    /// what it refuses, for every dtype.
    #[test]
    fn full_scalar_repeats_the_exact_scalar() {
        for dtype in DType::ALL {
            for value in [0.0, 1.0, -2.5, 300.0, 1e39, f64::NAN] {
                let one = Storage::scalar(value, dtype);
                let full = Storage::full_scalar(5, value, dtype, Device::Cpu);
                match (one, full) {
                    (Ok(o), Ok(f)) => {
                        assert_eq!((f.len(), f.dtype()), (5, dtype));
                        assert_eq!(f.to_bytes().unwrap(), o.to_bytes().unwrap().repeat(5));
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("{value} as {dtype}: {a:?} against {b:?}"),
                }
            }
        }
    }

    #[test]
    fn cpu_add_and_errors() {
        let a = Storage::from_slice(&[1i32, 2, 3], Device::Cpu).unwrap();
        let b = Storage::from_slice(&[10i32, 20, 30], Device::Cpu).unwrap();
        assert_eq!(
            a.add(&b).unwrap().to_vec::<i32>().unwrap(),
            vec![11, 22, 33]
        );
        let c = Storage::from_slice(&[1.0f32, 2.0, 3.0], Device::Cpu).unwrap();
        assert!(matches!(
            a.add(&c),
            Err(Error::DTypeMismatch { op: "add", .. })
        ));
        let d = Storage::from_slice(&[1i32], Device::Cpu).unwrap();
        assert!(matches!(
            a.add(&d),
            Err(Error::LengthMismatch { lhs: 3, rhs: 1, .. })
        ));
        assert!(matches!(
            a.to_vec::<i64>(),
            Err(Error::DTypeMismatch { .. })
        ));
        let u = Storage::from_slice(&[1u8], Device::Cpu).unwrap();
        assert!(matches!(u.add(&u), Err(Error::UnsupportedDType { .. })));
    }

    #[test]
    fn ranged_and_in_place_ops() {
        use genesis_kernels::{BinaryOp, UnaryOp};
        let a = Storage::from_slice(&[1.0f32, 2.0, 3.0, 4.0], Device::Cpu).unwrap();
        let b = Storage::from_slice(&[10.0f32, 20.0, 30.0], Device::Cpu).unwrap();
        let r = a.binary_at(BinaryOp::Mul, 1, &b, 0, 3).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![20.0, 60.0, 120.0]);
        assert!(matches!(
            a.binary_at(BinaryOp::Mul, 2, &b, 0, 3),
            Err(Error::OutOfBounds {
                start: 2,
                len: 3,
                storage_len: 4,
                ..
            })
        ));
        assert!(a.binary_at(BinaryOp::Mul, 0, &b, usize::MAX, 2).is_err());
        let mut m = Storage::from_slice(&[1.0f32, 2.0, 3.0, 4.0], Device::Cpu).unwrap();
        m.binary_assign(BinaryOp::Sub, 2, &b, 1, 2).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), vec![1.0, 2.0, -17.0, -26.0]);
        assert!(m.binary_assign(BinaryOp::Sub, 3, &b, 0, 2).is_err());
        m.unary_assign(UnaryOp::Abs, 2, 2).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 17.0, 26.0]);
        assert_eq!(
            m.unary_at(UnaryOp::Sqrt, 0, 1)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0]
        );
        let mut i = Storage::from_slice(&[4i64], Device::Cpu).unwrap();
        assert!(matches!(
            i.unary_assign(UnaryOp::Exp, 0, 1),
            Err(Error::UnsupportedDType { op: "exp", .. })
        ));
        let j = Storage::from_slice(&[2i64], Device::Cpu).unwrap();
        assert!(i.binary_assign(BinaryOp::Div, 0, &j, 0, 1).is_err());
        assert_eq!(
            i.to_vec::<i64>().unwrap(),
            vec![4],
            "failed ops write nothing"
        );
    }

    #[test]
    fn full_fills() {
        let s = Storage::full(5, bf16::from_f32(2.5), Device::Cpu).unwrap();
        assert_eq!(s.to_f64_vec().unwrap(), vec![2.5; 5]);
        assert_eq!(s.nbytes(), 10);
    }

    #[test]
    fn contiguous_of_views_on_cpu() {
        let s = Storage::from_slice(&(0..24).collect::<Vec<i32>>(), Device::Cpu).unwrap();
        let l = Layout::contiguous(&[2, 3, 4]).permute(&[2, 0, 1]).unwrap();
        let c = s.contiguous(&l).unwrap();
        let want: Vec<i32> = l.indices().map(|i| i as i32).collect();
        assert_eq!(c.to_vec::<i32>().unwrap(), want);
        let t = Layout::contiguous(&[4, 6])
            .transpose(0, 1)
            .unwrap()
            .slice(0, 1, 6, 2)
            .unwrap();
        let want: Vec<i32> = t.indices().map(|i| i as i32).collect();
        assert_eq!(s.contiguous(&t).unwrap().to_vec::<i32>().unwrap(), want);
        let bad = Layout::new(&[5, 5], &[5, 1], 0);
        assert!(matches!(s.contiguous(&bad), Err(Error::Layout(_))));
    }

    #[test]
    fn empty_views_past_an_empty_storage_copy_nothing() {
        // An empty view's offset need not lie in its storage: `x[3:, ...]` of a [5, 0] tensor.
        let s = Storage::zeros(0, DType::I16, Device::Cpu).unwrap();
        let l = Layout::new(&[2, 0], &[1, 1], 3);
        let c = s.contiguous(&l).unwrap();
        assert_eq!(c.len(), 0);
        let mut d = Storage::zeros(0, DType::I16, Device::Cpu).unwrap();
        d.copy_strided_from(&Layout::new(&[2, 0], &[1, 1], 4), &s, &l)
            .unwrap();
    }

    #[test]
    fn copy_checks_and_casts() {
        let mut dst = Storage::zeros(3, DType::F32, Device::Cpu).unwrap();
        let src = Storage::from_slice(&[1.0f32, 2.0, 3.0], Device::Cpu).unwrap();
        dst.copy_from(&src).unwrap();
        assert_eq!(dst.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
        let short = Storage::from_slice(&[1.0f32], Device::Cpu).unwrap();
        assert!(matches!(
            dst.copy_from(&short),
            Err(Error::LengthMismatch { .. })
        ));
        assert_eq!(
            dst.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0],
            "unchanged after an error"
        );
        let i = src.to_dtype(DType::I64).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
        let b = Storage::from_bytes(&[0, 1, 1], DType::Bool, Device::Cpu).unwrap();
        assert_eq!(
            b.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, 1.0, 1.0]
        );
        assert!(matches!(
            Storage::from_bytes(&[2], DType::Bool, Device::Cpu),
            Err(Error::InvalidBool)
        ));
        assert!(matches!(
            Storage::from_bytes(&[1, 2, 3], DType::F16, Device::Cpu),
            Err(Error::LengthMismatch { .. })
        ));
        let mut overlap = Storage::zeros(4, DType::F32, Device::Cpu).unwrap();
        let e = overlap.copy_strided_from(
            &Layout::new(&[4], &[0], 0),
            &src.try_clone().unwrap(),
            &Layout::new(&[4], &[0], 0),
        );
        assert!(matches!(e, Err(Error::OverlappingDestination)));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_a_typed_error() {
        let e = Storage::from_slice(&[1f32], Device::Cuda(0)).unwrap_err();
        assert!(matches!(e, Error::CudaNotCompiled { .. }));
        assert!(e.to_string().contains("--features cuda"));
    }
}

mod attention;
mod classifier;
mod classify;
mod elementwise;
mod everyday;
mod index;
mod index_values;
mod mask;
mod matmul;
mod multi;
mod nd;
mod norm;
mod random;
mod reduce;
mod select;
mod shared;
mod softmax;
mod triangle;

pub use attention::AttentionOperand;
pub use index_values::{AddGroups, DeadMask, IndexSource, IndexValues};
pub use multi::StorageRange;
pub use nd::BinaryRhs;
pub use norm::LayerNormGrads;
pub use reduce::{Reduced, reduce_dtype};
