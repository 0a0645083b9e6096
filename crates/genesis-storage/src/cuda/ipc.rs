//! CUDA storages shared between processes: [`Storage::export_cuda`] hands a storage of a device
//! pool to the process at the other end of a Unix socket, [`Storage::import_cuda`] maps it
//! there as a storage of that process (the protocol is in `crate::ipc`).
//!
//! # What is shared
//!
//! - **Virtual memory** (the pool's default): the physical handles under the storage are
//!   created exportable (`CudaBackend::exportable`), exported as POSIX file descriptors and
//!   sent with `SCM_RIGHTS`; the importer reserves an address range, maps the handles next to
//!   each other and grants its device access. A storage may lie inside a larger handle, or
//!   across several: what is mapped is the handles that cover it.
//! - **Plain segments** (`GENESIS_NO_VMM`, or a device without virtual memory): the
//!   `cuMemAlloc` segment that holds the storage is named by its IPC handle
//!   (`cuIpcGetMemHandle`) and opened by the importer (`cuIpcOpenMemHandle`, once per segment
//!   and process: imports of storages of one segment share the opening).
//!
//! Either way the importer can reach the whole handle or segment, which may hold other
//! storages of the exporter: share memory only with processes trusted with all of it.
//!
//! # Lifetimes
//!
//! - The exporter keeps the storage (an `Arc`) and the two events until the importer reports
//!   that it let go (`Release`) or its end of the socket closes (its process exited). That
//!   hold lives in a thread of the exporting process, not in [`CudaExport`]: dropping the
//!   export handle and every tensor of the storage does not free its memory while an importer
//!   maps it. [`CudaExport::wait_released`] waits for that moment.
//! - The importer's storage unmaps the memory when it drops, after the device has finished
//!   the work queued on it (it synchronises the device). Once both the storage and its
//!   [`CudaImport`] are dropped, the importer closes its openings of the events and sends
//!   `Release`.
//! - If the exporting process exits first: with virtual memory, the importer's mapping keeps
//!   the physical memory alive (the driver counts the imported handles), so the imported
//!   storage stays valid until it drops. With IPC handles of plain segments it does not: the
//!   segment is freed with the exporter's context, and the importer's storage then refers to
//!   memory that is gone; its work fails with a driver error. Keep an exporter of plain
//!   segments alive until [`CudaExport::wait_released`] returns.
//!
//! # Ordering
//!
//! The exporter creates two interprocess events (`CU_EVENT_INTERPROCESS`) and the importer
//! opens them: one that the exporter records, one that the importer records (both owned by
//! the exporter, so that no event is destroyed while the other process still holds it). The
//! export records the exporter's event on its current stream of the device after the work
//! queued so far (the storage's writes, when they were queued on that stream), and the import
//! makes the importer's current stream wait on it. Afterwards, `signal` records the sender's
//! event and tells the other side, whose `wait` makes its current stream wait on it: work
//! queued after `wait` runs after the other process's work queued before its `signal`.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, Weak, mpsc};
use std::time::Duration;

use genesis_cuda::{Context, Event, raw};
use genesis_mem::Backing;

use super::{CudaMem, device_pool, queue_on};
use crate::ipc::{self, Message, Offer, OfferMemory};
use crate::storage::Inner;
use crate::{Error, Result, Storage};

/// How long the export waits for the importer's answer, and the import for the offer.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// Receives one message within `timeout`.
fn recv_within(
    sock: &UnixStream,
    timeout: Duration,
    op: &'static str,
) -> Result<(Message, Vec<OwnedFd>)> {
    let io = |e: std::io::Error| Error::Io {
        path: "CUDA storage socket".into(),
        message: e.to_string(),
    };
    sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .map_err(io)?;
    let got = ipc::recv(sock);
    sock.set_read_timeout(None).map_err(io)?;
    got.map_err(|e| match e {
        Error::IpcTimeout { .. } => Error::IpcTimeout {
            op,
            millis: timeout.as_millis() as u64,
        },
        e => e,
    })
}

/// What the exporter's thread heard from the importer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    /// `Accept`.
    Accepted,
    /// `Refuse`, with its reason.
    Refused(String),
    /// `Recorded`.
    Recorded,
}

/// Whether the exporter's hold on a storage is gone.
#[derive(Debug, Default)]
struct Released {
    done: Mutex<bool>,
    cv: Condvar,
}

/// The exporting side of a storage shared with one other process ([`Storage::export_cuda`]).
#[derive(Debug)]
pub struct CudaExport {
    conn: UnixStream,
    ctx: Arc<Context>,
    /// The event this process records (also held by the thread that holds the storage).
    event: Arc<Event>,
    /// The event the importer records (held likewise).
    reply: Arc<Event>,
    /// What the importer said, from the thread that holds the storage.
    recorded: Mutex<mpsc::Receiver<Heard>>,
    released: Arc<Released>,
}

impl CudaExport {
    /// Records this process's event after the work queued so far on its current stream of the
    /// device and tells the importer, whose [`CudaImport::wait`] orders its later work after it.
    pub fn signal(&self) -> Result<()> {
        self.event.record(&queue_on(&self.ctx))?;
        ipc::send(&self.conn, &Message::Recorded, &[])
    }

    /// Waits (up to `timeout`) for the importer's next [`CudaImport::signal`], then makes this
    /// thread's current stream of the device wait for the importer's work queued before it.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let rx = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        match rx.recv_timeout(timeout) {
            Ok(Heard::Recorded) => Ok(queue_on(&self.ctx).wait_event(&self.reply)?),
            Ok(other) => Err(Error::IpcProtocol {
                reason: format!("expected Recorded, got {other:?}"),
            }),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::IpcTimeout {
                op: "CudaExport::wait",
                millis: timeout.as_millis() as u64,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::IpcPeerGone),
        }
    }

    /// Whether the importer has let go of the storage (and this process's hold on it is
    /// dropped).
    pub fn is_released(&self) -> bool {
        *self.released.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (up to `timeout`) until the importer has let go of the storage and this
    /// process's hold on it is dropped.
    pub fn wait_released(&self, timeout: Duration) -> Result<()> {
        let done = self.released.done.lock().unwrap_or_else(|p| p.into_inner());
        let (done, _) = self
            .released
            .cv
            .wait_timeout_while(done, timeout, |d| !*d)
            .unwrap_or_else(|p| p.into_inner());
        if *done {
            Ok(())
        } else {
            Err(Error::IpcTimeout {
                op: "CudaExport::wait_released",
                millis: timeout.as_millis() as u64,
            })
        }
    }
}

/// The importing side of a storage shared by another process ([`Storage::import_cuda`]).
#[derive(Debug)]
pub struct CudaImport {
    ctx: Arc<Context>,
    link: Arc<ImportLink>,
}

impl CudaImport {
    /// Records this process's event after the work queued so far on its current stream of the
    /// device and tells the exporter, whose [`CudaExport::wait`] orders its later work after it.
    pub fn signal(&self) -> Result<()> {
        self.link.events()?.1.record(&queue_on(&self.ctx))?;
        ipc::send(&self.link.conn, &Message::Recorded, &[])
    }

    /// Waits (up to `timeout`) for the exporter's next [`CudaExport::signal`], then makes this
    /// thread's current stream of the device wait for the exporter's work queued before it.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        match recv_within(&self.link.conn, timeout, "CudaImport::wait")?.0 {
            Message::Recorded => Ok(queue_on(&self.ctx).wait_event(&self.link.events()?.0)?),
            other => Err(Error::IpcProtocol {
                reason: format!("expected Recorded, got {other:?}"),
            }),
        }
    }
}

/// The importer's connection and its openings of the exporter's events, shared by the
/// imported storage and the [`CudaImport`]: when both are gone, the openings are closed and
/// the exporter is told (`Release`), which then frees the memory and the events.
#[derive(Debug)]
struct ImportLink {
    conn: UnixStream,
    /// The event the exporter records, and the one this process records.
    events: Option<(Event, Event)>,
}

impl ImportLink {
    fn events(&self) -> Result<&(Event, Event)> {
        self.events.as_ref().ok_or(Error::IpcPeerGone)
    }
}

impl Drop for ImportLink {
    fn drop(&mut self) {
        // The openings go before the exporter may destroy the events.
        drop(self.events.take());
        // The exporter may be gone already: nothing to tell then.
        let _ = ipc::send(&self.conn, &Message::Release, &[]);
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

/// Imported memory: where this process mapped it, and the link to the exporter.
#[derive(Debug)]
pub(crate) struct Imported {
    ptr: u64,
    nbytes: usize,
    mapping: Mapping,
    ctx: Arc<Context>,
    /// Dropped after the mapping (a field drops after `Drop::drop`'s body).
    _link: Arc<ImportLink>,
}

#[derive(Debug)]
#[allow(dead_code, reason = "the fields are held for their `Drop`")]
enum Mapping {
    /// Imported handles mapped next to each other in a reservation of `len` bytes at `va`.
    Vmm(VmmMapping),
    /// An opened IPC segment.
    Segment(Arc<OpenSegment>),
}

impl Imported {
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }

    pub(crate) fn nbytes(&self) -> usize {
        self.nbytes
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        // Work queued on any stream may still use the memory: it finishes before the
        // mapping goes.
        if let Err(e) = self.ctx.synchronize() {
            self.ctx.record_error(e);
        }
        // Unmap now, before the link (a field) drops and may tell the exporter.
        let mapping = std::mem::replace(&mut self.mapping, Mapping::Vmm(VmmMapping::empty()));
        drop(mapping);
    }
}

/// A reservation with imported handles mapped at its start; unmapped and freed on drop.
#[derive(Debug)]
struct VmmMapping {
    ctx: Option<Arc<Context>>,
    va: u64,
    reserved: usize,
    mapped: usize,
}

impl VmmMapping {
    fn empty() -> VmmMapping {
        VmmMapping {
            ctx: None,
            va: 0,
            reserved: 0,
            mapped: 0,
        }
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        let Some(ctx) = self.ctx.take() else {
            return;
        };
        if self.mapped > 0 {
            // SAFETY: `[va, va + mapped)` is whole mappings of imported handles made by
            // `map_handles`; the owner synchronised the device (or never used the range).
            if let Err(e) = unsafe { raw::unmap(&ctx, self.va, self.mapped) } {
                ctx.record_error(e);
                // Address space under a mapping cannot be freed.
                return;
            }
        }
        // SAFETY: the reservation came from `reserve_address_space` and nothing is mapped in
        // it any more.
        if let Err(e) = unsafe { raw::free_address_space(&ctx, self.va, self.reserved) } {
            ctx.record_error(e);
        }
    }
}

/// Imports each descriptor's handle and maps them next to each other; the storage starts
/// `offset` bytes into the first.
fn map_handles(ctx: &Arc<Context>, fds: &[OwnedFd], lens: &[u64]) -> Result<VmmMapping> {
    let granularity = raw::vmm_granularity(ctx)?;
    let mut total = 0usize;
    for &l in lens {
        let l = usize::try_from(l).ok().filter(|l| l % granularity == 0);
        let Some(l) = l else {
            return Err(Error::IpcProtocol {
                reason: format!("a handle length not a multiple of the granularity {granularity}"),
            });
        };
        total = total.checked_add(l).ok_or(Error::IpcProtocol {
            reason: "handle lengths overflow".into(),
        })?;
    }
    let va = raw::reserve_address_space(ctx, total, granularity)?;
    let mut m = VmmMapping {
        ctx: Some(Arc::clone(ctx)),
        va,
        reserved: total,
        mapped: 0,
    };
    for (fd, &len) in fds.iter().zip(lens) {
        let len = len as usize;
        let handle = raw::import_physical_fd(ctx, fd.as_fd())?;
        // SAFETY: `[va + mapped, + len)` lies in the reservation, after everything mapped so
        // far; the driver refuses a handle that is not `len` bytes long.
        let mapped = unsafe { raw::map(ctx, m.va + m.mapped as u64, len, handle) };
        // The mapping keeps the memory; the handle itself is not needed any more.
        // SAFETY: the handle was imported above and is released once, here.
        let released = unsafe { raw::release_physical(ctx, handle) };
        mapped?;
        m.mapped += len;
        released?;
    }
    // SAFETY: the whole reservation is mapped.
    unsafe { raw::set_access(ctx, m.va, m.mapped, &[]) }?;
    Ok(m)
}

/// IPC segments this process has opened, by device and handle: the driver opens a handle once
/// per context, so imports of storages of one segment share it.
type OpenMap = std::collections::HashMap<(usize, [u8; 64]), Weak<OpenSegment>>;

fn open_segments() -> &'static Mutex<OpenMap> {
    static OPEN: std::sync::OnceLock<Mutex<OpenMap>> = std::sync::OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// An opened IPC segment, closed when the last storage on it drops.
#[derive(Debug)]
struct OpenSegment {
    ctx: Arc<Context>,
    key: [u8; 64],
    base: u64,
}

impl OpenSegment {
    fn open(ctx: &Arc<Context>, handle: [u8; 64]) -> Result<Arc<OpenSegment>> {
        let mut open = open_segments().lock().unwrap_or_else(|p| p.into_inner());
        let key = (ctx.ordinal(), handle);
        if let Some(s) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(s);
        }
        let base = raw::ipc_open(ctx, handle)?;
        let s = Arc::new(OpenSegment {
            ctx: Arc::clone(ctx),
            key: handle,
            base,
        });
        open.insert(key, Arc::downgrade(&s));
        Ok(s)
    }
}

impl Drop for OpenSegment {
    fn drop(&mut self) {
        // Under the lock, so that an import of the same segment waits for the close.
        let mut open = open_segments().lock().unwrap_or_else(|p| p.into_inner());
        let key = (self.ctx.ordinal(), self.key);
        if open.get(&key).is_some_and(|w| w.strong_count() == 0) {
            open.remove(&key);
        }
        // SAFETY: `base` came from `ipc_open` and is closed once (the last holder drops);
        // every storage on it synchronised the device before letting go.
        if let Err(e) = unsafe { raw::ipc_close(&self.ctx, self.base) } {
            self.ctx.record_error(e);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The context of the device whose UUID is `uuid`.
fn device_with_uuid(offer: &Offer) -> Result<Arc<Context>> {
    for ordinal in 0..genesis_cuda::device_count()? {
        if genesis_cuda::device_uuid(ordinal)? == offer.uuid {
            return Ok(Context::get(ordinal)?);
        }
    }
    Err(Error::IpcDeviceNotFound {
        uuid: hex(&offer.uuid),
        ordinal: offer.ordinal,
    })
}

fn not_shareable(reason: impl Into<String>) -> Error {
    Error::NotShareable {
        op: "export_cuda",
        reason: reason.into(),
    }
}

impl Storage {
    /// Shares this CUDA storage with the process at the other end of `conn` (a connected Unix
    /// stream socket), which calls [`Storage::import_cuda`] on its end. Returns once the
    /// importer has mapped the memory (or with its reason for refusing).
    ///
    /// The storage's memory stays allocated until the importer lets go of it (drops its
    /// storage, or exits), whatever this process drops meanwhile; the exporter's event is
    /// recorded on this thread's current stream of the device, after the work queued there so
    /// far. See the `cuda::ipc` module for what is shared, the lifetimes, and the ordering of
    /// the two processes' work ([`CudaExport::signal`], [`CudaExport::wait`]).
    ///
    /// Errors: [`Error::NotShareable`] for storages that are not CUDA memory of a device pool
    /// (host memory, an empty storage, a storage imported from another process) or on memory
    /// the driver cannot export; the importer's [`Error::IpcRefused`]; socket errors.
    pub fn export_cuda(self: &Arc<Self>, conn: UnixStream) -> Result<CudaExport> {
        // The importer writes the memory without our version.
        self.mark_addressed();
        let guard = self.read("export_cuda")?;
        let Inner::Cuda(m) = &*guard else {
            return Err(Error::NotOnDevice {
                op: "export_cuda",
                device: self.device(),
            });
        };
        if m.imported.is_some() {
            return Err(not_shareable(
                "it was imported from another process (export it from there)",
            ));
        }
        let Some(alloc) = &m.alloc else {
            return Err(not_shareable("it is empty"));
        };
        let ctx = Arc::clone(m.ctx());
        let event = Arc::new(Event::new_interprocess(&ctx)?);
        let reply = Arc::new(Event::new_interprocess(&ctx)?);
        event.record(&queue_on(&ctx))?;
        let (memory, fds) = match m.pool.allocator().backing(alloc)? {
            Backing::Handles(hs) => {
                let fds = hs
                    .iter()
                    .map(|h| raw::export_physical_fd(&ctx, h.handle))
                    .collect::<genesis_cuda::Result<Vec<_>>>()
                    .map_err(|e| {
                        not_shareable(format!(
                            "the driver does not export its memory ({e}); the device may not \
                             support exportable virtual memory, or refused it (the pool then \
                             creates plain handles)"
                        ))
                    })?;
                let memory = OfferMemory::Handles {
                    offset: alloc.ptr() - hs[0].va,
                    lens: hs.iter().map(|h| h.len as u64).collect(),
                };
                (memory, fds)
            }
            Backing::Segment { base, len } => {
                let handle = raw::ipc_mem_handle(&ctx, base).map_err(|e| {
                    not_shareable(format!("the driver gives no IPC handle for it ({e})"))
                })?;
                let memory = OfferMemory::Segment {
                    handle,
                    len: len as u64,
                    offset: alloc.ptr() - base,
                };
                (memory, Vec::new())
            }
        };
        drop(guard);
        let offer = Offer {
            uuid: ctx.uuid(),
            ordinal: ctx.ordinal() as u32,
            dtype: self.dtype(),
            len: self.len() as u64,
            pid: std::process::id(),
            event: event.ipc_handle()?,
            reply_event: reply.ipc_handle()?,
            memory,
        };
        ipc::send(
            &conn,
            &Message::Offer(Box::new(offer)),
            &ipc::borrow_all(&fds),
        )?;
        drop(fds);
        // From here the importer may map the memory: the hold starts now, and ends only when
        // the importer refuses, releases or disconnects (also when this call fails).
        let released = Arc::new(Released::default());
        let (tx, rx) = mpsc::channel();
        let hold = (Arc::clone(self), Arc::clone(&event), Arc::clone(&reply));
        let flag = Arc::clone(&released);
        let spawned = conn.try_clone().and_then(|reader| {
            std::thread::Builder::new()
                .name("genesis-cuda-export".into())
                .spawn(move || hold_until_released(&reader, hold, &tx, &flag))
        });
        if let Err(e) = spawned {
            // No thread to hold the storage: make sure the importer cannot keep it.
            let _ = conn.shutdown(std::net::Shutdown::Both);
            return Err(Error::Io {
                path: "CUDA storage export thread".into(),
                message: e.to_string(),
            });
        }
        match rx.recv_timeout(HANDSHAKE_TIMEOUT) {
            Ok(Heard::Accepted) => {}
            Ok(Heard::Refused(reason)) => return Err(Error::IpcRefused { reason }),
            Ok(Heard::Recorded) => {
                return Err(Error::IpcProtocol {
                    reason: "Recorded before Accept".into(),
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(Error::IpcTimeout {
                    op: "export_cuda",
                    millis: HANDSHAKE_TIMEOUT.as_millis() as u64,
                });
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(Error::IpcPeerGone),
        }
        Ok(CudaExport {
            conn,
            ctx,
            event,
            reply,
            recorded: Mutex::new(rx),
            released,
        })
    }

    /// Maps the CUDA storage that the process at the other end of `conn` exports
    /// ([`Storage::export_cuda`]) into this process, on the device with the same UUID.
    /// Work this thread queues on its current stream of that device afterwards runs after the
    /// work the exporter had queued before exporting.
    ///
    /// The storage is an ordinary CUDA storage of this process (its reads and writes are the
    /// exporter's memory); dropping it unmaps the memory, once the device has finished its
    /// work, and tells the exporter. [`CudaImport`] orders later work of the two processes.
    ///
    /// Errors (each also sent to the exporter as the reason of its [`Error::IpcRefused`]):
    /// [`Error::IpcDeviceNotFound`], [`Error::IpcProtocol`] for a malformed offer, driver
    /// errors of the mapping (a stale or foreign handle), [`Error::IpcTimeout`] when no offer
    /// comes within two minutes.
    #[track_caller]
    pub fn import_cuda(conn: UnixStream) -> Result<(Storage, CudaImport)> {
        let refuse = |e: Error| {
            let _ = ipc::send(
                &conn,
                &Message::Refuse {
                    reason: e.to_string(),
                },
                &[],
            );
            e
        };
        let (msg, fds) = match recv_within(&conn, HANDSHAKE_TIMEOUT, "import_cuda") {
            Ok(m) => m,
            Err(e @ Error::IpcProtocol { .. }) => return Err(refuse(e)),
            Err(e) => return Err(e),
        };
        let Message::Offer(offer) = msg else {
            return Err(refuse(Error::IpcProtocol {
                reason: format!("expected an offer, got {msg:?}"),
            }));
        };
        let mapped = Self::map_offer(&offer, fds);
        let (ctx, ptr, mapping, events) = mapped.map_err(refuse)?;
        let pool = device_pool(ctx.ordinal()).map_err(refuse)?;
        let nbytes = offer.nbytes()?;
        // Accepted, the exporter holds the memory until this link lets go.
        ipc::send(&conn, &Message::Accept, &[])?;
        let link = Arc::new(ImportLink {
            conn,
            events: Some(events),
        });
        queue_on(&ctx).wait_event(&link.events()?.0)?;
        let mem = CudaMem {
            alloc: None,
            pool,
            imported: Some(Box::new(Imported {
                ptr,
                nbytes,
                mapping,
                ctx: Arc::clone(&ctx),
                _link: Arc::clone(&link),
            })),
        };
        let storage = Storage::make(Inner::Cuda(mem), offer.dtype, nbytes / offer.dtype.size());
        Ok((storage, CudaImport { ctx, link }))
    }

    /// Maps the memory of `offer` and opens its two events.
    #[allow(clippy::type_complexity)]
    fn map_offer(
        offer: &Offer,
        fds: Vec<OwnedFd>,
    ) -> Result<(Arc<Context>, u64, Mapping, (Event, Event))> {
        let ctx = device_with_uuid(offer)?;
        let (ptr, mapping) = match &offer.memory {
            OfferMemory::Handles { offset, lens } => {
                let m = map_handles(&ctx, &fds, lens)?;
                (m.va + offset, Mapping::Vmm(m))
            }
            OfferMemory::Segment {
                handle,
                len,
                offset,
            } => {
                if offer.pid == std::process::id() {
                    return Err(Error::IpcProtocol {
                        reason: "an IPC handle of this very process (the driver opens those \
                                 only in other processes)"
                            .into(),
                    });
                }
                let s = OpenSegment::open(&ctx, *handle)?;
                // The driver knows the opened segment's length: an offer that claims more is
                // refused (where the driver does not say, the offer's length stands).
                match raw::address_range(&ctx, s.base) {
                    Ok((_, have)) if (have as u64) < *len => {
                        return Err(Error::IpcProtocol {
                            reason: format!("the segment holds {have} bytes, the offer says {len}"),
                        });
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "no address range for an IPC segment"),
                }
                (s.base + offset, Mapping::Segment(s))
            }
        };
        let written = Event::open_ipc(&ctx, offer.event)?;
        let reply = Event::open_ipc(&ctx, offer.reply_event)?;
        Ok((ctx, ptr, mapping, (written, reply)))
    }
}

/// The exporter's thread for one import: forwards what the importer says (`Accept`, `Refuse`,
/// `Recorded`) and keeps the storage and the two events until the importer refuses the
/// offer, sends `Release`, or its end of the socket closes.
fn hold_until_released(
    reader: &UnixStream,
    hold: (Arc<Storage>, Arc<Event>, Arc<Event>),
    heard: &mpsc::Sender<Heard>,
    released: &Released,
) {
    hold_until_released_with(reader, hold, heard, released);
}

/// [`hold_until_released`] of any value.
fn hold_until_released_with<T>(
    reader: &UnixStream,
    hold: T,
    heard: &mpsc::Sender<Heard>,
    released: &Released,
) {
    loop {
        // The export handle may be gone (a send then fails): the storage is still held.
        match ipc::recv(reader) {
            Ok((Message::Accept, _)) => {
                let _ = heard.send(Heard::Accepted);
            }
            Ok((Message::Recorded, _)) => {
                let _ = heard.send(Heard::Recorded);
            }
            // The importer mapped nothing.
            Ok((Message::Refuse { reason }, _)) => {
                let _ = heard.send(Heard::Refused(reason));
                break;
            }
            Ok((Message::Release, _)) | Err(Error::IpcPeerGone) => break,
            // A message out of place: the importer may still map the memory, keep holding.
            Ok((other, _)) => {
                tracing::warn!(message = ?other, "unexpected message from a CUDA storage importer");
            }
            Err(e @ Error::IpcProtocol { .. }) => {
                tracing::warn!(error = %e, "bad message from a CUDA storage importer");
            }
            // Any other socket error leaves no way to hear from the importer again: its
            // connection is broken, as when its process exits.
            Err(e) => {
                tracing::warn!(error = %e, "lost the connection to a CUDA storage importer");
                break;
            }
        }
    }
    drop(hold);
    *released.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
    released.cv.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn offer(uuid: [u8; 16]) -> Box<Offer> {
        Box::new(Offer {
            uuid,
            ordinal: 3,
            dtype: crate::DType::F32,
            len: 1024,
            pid: 1,
            event: [0; 64],
            reply_event: [0; 64],
            memory: OfferMemory::Segment {
                handle: [0; 64],
                len: 2 << 20,
                offset: 0,
            },
        })
    }

    /// The importer's answer, as the exporter receives it.
    fn answer(exporter: &UnixStream) -> Message {
        ipc::recv(exporter).unwrap().0
    }

    #[test]
    fn an_offer_for_a_device_this_process_lacks_is_refused_with_its_uuid() {
        // No device has this UUID: on a machine without a GPU none has any, and on one with
        // GPUs the driver's UUIDs are not all 0xEE.
        let (exporter, importer) = UnixStream::pair().unwrap();
        ipc::send(&exporter, &Message::Offer(offer([0xEE; 16])), &[]).unwrap();
        match Storage::import_cuda(importer) {
            Err(Error::IpcDeviceNotFound { uuid, ordinal }) => {
                assert_eq!(uuid, "ee".repeat(16));
                assert_eq!(ordinal, 3);
            }
            Err(Error::Cuda(e)) if genesis_cuda::device_count().is_err() => {
                eprintln!("no driver to enumerate devices: {e}");
            }
            other => panic!("{other:?}"),
        }
        match answer(&exporter) {
            Message::Refuse { reason } => assert!(reason.contains(&"ee".repeat(16)), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_offer_is_refused() {
        let (exporter, importer) = UnixStream::pair().unwrap();
        let mut body = ipc::encode(&Message::Offer(offer([1; 16])));
        body[4] = 99; // the version
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&0u32.to_le_bytes());
        frame.extend_from_slice(&body);
        (&exporter).write_all(&frame).unwrap();
        let e = Storage::import_cuda(importer).unwrap_err();
        assert!(
            matches!(&e, Error::IpcProtocol { reason } if reason.contains("version 99")),
            "{e}"
        );
        assert!(
            matches!(answer(&exporter), Message::Refuse { reason } if reason.contains("version 99"))
        );
    }

    #[test]
    fn a_message_other_than_an_offer_is_refused() {
        let (exporter, importer) = UnixStream::pair().unwrap();
        ipc::send(&exporter, &Message::Recorded, &[]).unwrap();
        let e = Storage::import_cuda(importer).unwrap_err();
        assert!(
            matches!(&e, Error::IpcProtocol { reason } if reason.contains("expected an offer")),
            "{e}"
        );
        assert!(matches!(answer(&exporter), Message::Refuse { .. }));
    }

    #[test]
    fn an_exporter_that_hangs_up_is_peer_gone() {
        let (exporter, importer) = UnixStream::pair().unwrap();
        drop(exporter);
        assert_eq!(
            Storage::import_cuda(importer).unwrap_err(),
            Error::IpcPeerGone
        );
    }

    #[test]
    fn the_exporters_hold_ends_with_release_or_a_closed_socket() {
        // The hold of a host storage stands for the storage of an export.
        for end in ["release", "close", "refuse"] {
            let (importer, exporter) = UnixStream::pair().unwrap();
            let storage =
                Arc::new(Storage::zeros(4, crate::DType::F32, crate::Device::Cpu).unwrap());
            let weak = Arc::downgrade(&storage);
            let event_free = Arc::new(Released::default());
            let (tx, rx) = mpsc::channel();
            let flag = Arc::clone(&event_free);
            // The thread needs an event to hold; without a device the storage alone shows it.
            let t = std::thread::spawn(move || {
                hold_until_released_with(&exporter, storage, &tx, &flag)
            });
            ipc::send(&importer, &Message::Accept, &[]).unwrap();
            ipc::send(&importer, &Message::Recorded, &[]).unwrap();
            let d = Duration::from_secs(10);
            assert_eq!(rx.recv_timeout(d).unwrap(), Heard::Accepted);
            assert_eq!(rx.recv_timeout(d).unwrap(), Heard::Recorded);
            // A message out of place does not end the hold.
            ipc::send(&importer, &Message::More, &[]).unwrap();
            ipc::send(&importer, &Message::Offer(offer([0; 16])), &[]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert!(weak.upgrade().is_some(), "the storage was let go too early");
            assert!(!*event_free.done.lock().unwrap());
            match end {
                "release" => ipc::send(&importer, &Message::Release, &[]).unwrap(),
                "close" => drop(importer),
                _ => {
                    let reason = "no such device".to_string();
                    let refuse = Message::Refuse {
                        reason: reason.clone(),
                    };
                    ipc::send(&importer, &refuse, &[]).unwrap();
                    assert_eq!(rx.recv_timeout(d).unwrap(), Heard::Refused(reason));
                }
            }
            t.join().unwrap();
            assert!(weak.upgrade().is_none(), "the storage is still held");
            assert!(*event_free.done.lock().unwrap());
        }
    }
}
