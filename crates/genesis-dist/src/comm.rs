//! Process groups and collectives on Genesis tensors, over NCCL.
//!
//! A [`ProcessGroup`] is one NCCL communicator: one rank of a group, on one GPU. It is made
//!
//! - one process per GPU ([`init_process_group`], [`ProcessGroup::new`]): the environment
//!   ([`GroupEnv`]) names the rank, the group's size, the GPU and the store; rank 0 makes
//!   NCCL's unique id and puts it in the store, the others read it from there;
//! - one process driving several GPUs ([`ProcessGroup::new_local`]): one communicator per GPU,
//!   created together in one NCCL group.
//!
//! Each rank holds two communicators. The first is non-blocking (`ncclCommInitRankConfig`
//! with `blocking = 0`): every call that NCCL leaves running is polled
//! (`ncclCommGetAsyncError`) until it ends or the group's timeout passes; an error or a
//! timeout aborts the communicator (`ncclCommAbort`) and is returned as a typed error
//! ([`Error::Nccl`], [`Error::NcclTimeout`]), and later calls on it return [`Error::Aborted`].
//! Point-to-point calls run on it: NCCL connects two peers at their first exchange, which
//! waits on the host for the other side. The second, created once the first is ready (on a
//! thread of its own that the creation waits for at most the timeout), is blocking: the
//! collectives run on it, launched on the calling thread, whereas a non-blocking
//! communicator launches every call from a thread NCCL starts for it, which costs a small
//! collective 50 µs or more. It never waits on the host for a peer, since
//! `NCCL_RUNTIME_CONNECT=0` makes NCCL connect the collectives' peers while it is created; a
//! collective that never ends on the device is caught by [`Work::wait`]'s timeout, as on the
//! first. `NCCL_NVLS_ENABLE=0` and `NCCL_RUNTIME_CONNECT=0` are set before the first
//! communicator unless the environment sets them.
//!
//! Collectives take CUDA tensors, contiguous, of a dtype NCCL has (every Genesis dtype but
//! int16; bool travels as uint8, its sum being a logical or and its product a logical and),
//! on the communicator's GPU. Each is queued on the current stream of that GPU (after the
//! small ops Genesis batched before it), the tensors' memory is recorded as used by that
//! stream ([`Tensor::record_stream`]), and it returns a [`Work`] that keeps the tensors alive
//! and tells when the collective is done. Several collectives inside [`group`] are one NCCL
//! group (`ncclGroupStart` / `ncclGroupEnd`): point-to-point exchanges that must be posted
//! together, or one collective on each GPU of a process.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use genesis::cuda::{Event, Stream};
use genesis::{DType, Device, Tensor};

use crate::nccl::{self, Config, CudaStream, DataType, Functions, IN_PROGRESS, NcclComm, RedOp};
use crate::{Error, GroupEnv, Nccl, Result, StoreClient};

/// How long a communicator's creation, a collective or [`Work::wait`] may take by default
/// (PyTorch's NCCL default, 10 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The NCCL of this process: loaded by [`Nccl::load`] on first use (`GENESIS_NCCL_LIBRARY`,
/// a copy already loaded, the Python wheel, the system) and kept.
pub fn shared_nccl() -> Result<&'static Nccl> {
    static NCCL: OnceLock<Nccl> = OnceLock::new();
    if let Some(n) = NCCL.get() {
        return Ok(n);
    }
    let n = Nccl::load(None)?;
    Ok(NCCL.get_or_init(|| n))
}

/// A reduction of [`ProcessGroup::all_reduce`], [`ProcessGroup::reduce`] and
/// [`ProcessGroup::reduce_scatter_tensor`] (PyTorch's `ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (a logical or on bool).
    Sum,
    /// The mean over ranks (`ncclAvg`; integers: the sum divided by the group's size, rounded
    /// toward zero; not for bool).
    Avg,
    /// The product (a logical and on bool).
    Product,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Product,
        ReduceOp::Max,
        ReduceOp::Min,
    ];
}

/// NCCL's data type for `dtype`, and its reduction for `op` when there is one: int16 has no
/// NCCL type; bool travels as uint8, `Sum` becoming `Max` (or) and `Product` becoming `Min`
/// (and), with no `Avg`.
pub fn nccl_types(
    op_name: &'static str,
    dtype: DType,
    op: Option<ReduceOp>,
) -> Result<(DataType, Option<RedOp>)> {
    let unsupported = |reason: String| Error::UnsupportedDType {
        op: op_name,
        dtype,
        reason,
    };
    let ty = match dtype {
        DType::Bool | DType::U8 => DataType::U8,
        DType::I8 => DataType::I8,
        DType::I32 => DataType::I32,
        DType::I64 => DataType::I64,
        DType::F16 => DataType::F16,
        DType::BF16 => DataType::BF16,
        DType::F32 => DataType::F32,
        DType::F64 => DataType::F64,
        DType::I16 => {
            return Err(unsupported(
                "NCCL has no int16 type; convert the tensor (to int32 or float16) first".into(),
            ));
        }
    };
    let red = match (op, dtype) {
        (None, _) => None,
        (Some(ReduceOp::Avg), DType::Bool) => {
            return Err(unsupported(
                "the average of bool tensors is not defined".into(),
            ));
        }
        (Some(ReduceOp::Sum), DType::Bool) => Some(RedOp::Max),
        (Some(ReduceOp::Product), DType::Bool) => Some(RedOp::Min),
        (Some(ReduceOp::Sum), _) => Some(RedOp::Sum),
        (Some(ReduceOp::Avg), _) => Some(RedOp::Avg),
        (Some(ReduceOp::Product), _) => Some(RedOp::Prod),
        (Some(ReduceOp::Max), _) => Some(RedOp::Max),
        (Some(ReduceOp::Min), _) => Some(RedOp::Min),
    };
    Ok((ty, red))
}

/// A tensor's memory as NCCL takes it: address, element count, NCCL type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Buf {
    pub(crate) ptr: u64,
    pub(crate) count: usize,
    pub(crate) dtype: DType,
    pub(crate) ty: DataType,
}

impl Buf {
    fn send(&self) -> *const c_void {
        self.ptr as usize as *const c_void
    }
    fn recv(&self) -> *mut c_void {
        self.ptr as usize as *mut c_void
    }
}

/// Checks one tensor of collective `op` (`what` names it): contiguous, of a dtype NCCL has
/// (for `red`, when it reduces). Its device is checked by [`check_device`], last, so that
/// everything else is checked without a GPU.
pub(crate) fn buffer(
    op: &'static str,
    what: &'static str,
    t: &Tensor,
    red: Option<ReduceOp>,
) -> Result<(Buf, Option<RedOp>)> {
    if !t.is_contiguous() {
        return Err(Error::NotContiguous {
            op,
            what,
            shape: t.shape().to_vec(),
            strides: t.strides().to_vec(),
        });
    }
    let (ty, r) = nccl_types(op, t.dtype(), red)?;
    Ok((
        Buf {
            ptr: t.data_ptr(),
            count: t.numel(),
            dtype: t.dtype(),
            ty,
        },
        r,
    ))
}

/// `found` must have `expected` elements.
pub(crate) fn check_count(
    op: &'static str,
    what: impl Into<String>,
    expected: usize,
    found: usize,
) -> Result<()> {
    if expected != found {
        return Err(Error::SizeMismatch {
            op,
            what: what.into(),
            expected,
            found,
        });
    }
    Ok(())
}

/// `b` must have `a`'s dtype.
pub(crate) fn check_dtype(op: &'static str, what: &'static str, a: &Buf, b: &Buf) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch {
            op,
            what,
            expected: a.dtype,
            found: b.dtype,
        });
    }
    Ok(())
}

/// `t` must be on CUDA device `device`.
pub(crate) fn check_device(
    op: &'static str,
    what: &'static str,
    t: &Tensor,
    device: usize,
) -> Result<()> {
    match t.device() {
        Device::Cuda(d) if d == device => Ok(()),
        Device::Cuda(_) => Err(Error::WrongDevice {
            op,
            what,
            expected: Device::Cuda(device),
            found: t.device(),
        }),
        other => Err(Error::NotOnCuda {
            op,
            what,
            device: other,
        }),
    }
}

/// `rank` must be a rank of a group of `size`.
pub(crate) fn check_rank(op: &'static str, what: &str, rank: usize, size: usize) -> Result<()> {
    if rank >= size {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("{what} {rank} is not a rank of a group of {size}"),
        });
    }
    Ok(())
}

/// Waits a little between two polls: the thread yields for the first 2 ms (a launch that NCCL
/// completes on its own thread takes microseconds, and a sleep of 10 µs lasts 50 µs or more
/// under Linux's timer slack, which a small collective's caller would wait for), then sleeps
/// a little longer each round (10 µs up to 1 ms).
fn backoff(since: Instant, round: &mut u32) {
    if since.elapsed() < Duration::from_millis(2) {
        std::thread::yield_now();
        return;
    }
    let us = 10u64 << (*round).min(7);
    *round += 1;
    std::thread::sleep(Duration::from_micros(us.min(1000)));
}

/// One rank's NCCL communicators, destroyed (or, after an error, aborted) when the last handle
/// goes.
struct Comm {
    nccl: &'static Nccl,
    /// The non-blocking communicator: created first (polled, so that its creation can time
    /// out), and the one of the point-to-point calls (whose connections NCCL makes at their
    /// first use, waiting on the host for the peer).
    raw: NcclComm,
    /// The blocking communicator split from `raw` (null until it is): the collectives. A call
    /// on it launches on the calling thread (about 15 µs); one on a non-blocking communicator
    /// launches from a thread that NCCL starts for it, and a small collective's time grows
    /// by 50 µs or more.
    fast: NcclComm,
    device: usize,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// Serialises calls on the communicator (NCCL's are not thread-safe on one communicator).
    calls: Mutex<()>,
    /// Why the communicator was aborted, once it was.
    aborted: Mutex<Option<String>>,
}

// SAFETY: an NCCL communicator is a handle that any thread may use; calls on it are serialised
// by `calls`, its abort by `aborted`.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Comm {
    /// An error when the communicator was aborted.
    fn check_live(&self, op: &'static str) -> Result<()> {
        match &*self.aborted.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(reason) => Err(Error::Aborted {
                op,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Aborts the communicator (once): its work is stopped, its resources released.
    fn abort(&self, reason: String) {
        let mut a = self.aborted.lock().unwrap_or_else(|p| p.into_inner());
        self.abort_locked(&mut a, reason);
    }

    /// [`Comm::abort`] with `aborted` locked.
    fn abort_locked(&self, aborted: &mut Option<String>, reason: String) {
        if aborted.is_some() {
            return;
        }
        *aborted = Some(reason);
        bind(self.device);
        for c in [self.fast, self.raw] {
            if !c.is_null() {
                // SAFETY: `c` is a live communicator (not yet aborted or destroyed: `aborted`
                // was empty under its lock); it is never used again.
                let _ = unsafe { (self.nccl.fns.comm_abort)(c) };
            }
        }
    }

    /// The communicator's asynchronous state: `Ok(true)` when its last call finished,
    /// `Ok(false)` while it runs; an error (the communicator then aborted) when it failed.
    fn poll(&self, op: &'static str) -> Result<bool> {
        let mut a = self.aborted.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = &*a {
            return Err(Error::Aborted {
                op,
                reason: reason.clone(),
            });
        }
        let mut done = true;
        for c in [self.fast, self.raw] {
            if c.is_null() {
                continue;
            }
            let mut state: nccl::NcclResult = 0;
            // SAFETY: `c` is live: not aborted, and no abort can run while `aborted` is
            // locked; NCCL writes one result.
            let r = unsafe { (self.nccl.fns.comm_get_async_error)(c, &mut state) };
            self.nccl.check("ncclCommGetAsyncError", r)?;
            match state {
                0 => {}
                IN_PROGRESS => done = false,
                code => {
                    let e = self.nccl.check(op, code).unwrap_err();
                    self.abort_locked(&mut a, e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Polls until the communicator's last call finished, at most until `deadline` (then it
    /// is aborted: [`Error::NcclTimeout`]).
    fn wait_ready(&self, op: &'static str, deadline: Instant) -> Result<()> {
        let since = Instant::now();
        let mut round = 0;
        loop {
            if self.poll(op)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.abort(format!("{op} did not finish within {:?}", self.timeout));
                return Err(Error::NcclTimeout {
                    op,
                    after: self.timeout,
                });
            }
            backoff(since, &mut round);
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let aborted = self.aborted.get_mut().map_or(true, |a| a.is_some());
        if aborted {
            return;
        }
        bind(self.device);
        for c in [self.fast, self.raw] {
            if c.is_null() {
                continue;
            }
            // SAFETY: `c` is live (not aborted) and this is its last use.
            let r = unsafe { (self.nccl.fns.comm_destroy)(c) };
            if r != 0 && r != IN_PROGRESS {
                // SAFETY: destroying failed, so the communicator still exists; abort frees it.
                let _ = unsafe { (self.nccl.fns.comm_abort)(c) };
            }
        }
    }
}

/// Makes device `ordinal`'s primary context current on this thread (NCCL's CUDA runtime takes
/// its device from it), launching Genesis's pending batch of small ops first.
fn bind(ordinal: usize) {
    let _ = Stream::current(ordinal).and_then(|s| s.external_handle());
}

/// The current stream of `device`, ready for NCCL: its raw handle.
fn stream_for(device: usize) -> Result<(Stream, CudaStream)> {
    let s = Stream::current(device)?;
    let h = s.external_handle()?;
    Ok((s, h as usize as CudaStream))
}

/// Checks that `devices` exist and are distinct.
fn check_devices(op: &'static str, devices: &[usize]) -> Result<()> {
    let count = genesis::cuda::device_count();
    for (i, &d) in devices.iter().enumerate() {
        if d >= count {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("device {d} does not exist ({count} CUDA devices)"),
            });
        }
        if devices[..i].contains(&d) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("device {d} is named twice (NCCL takes one rank a GPU)"),
            });
        }
    }
    if devices.is_empty() {
        return Err(Error::InvalidArgument {
            op,
            reason: "no device".into(),
        });
    }
    Ok(())
}

/// Starts creating a communicator of rank `rank` of `size` on `device` (non-blocking unless
/// `blocking`, which the environment's `NCCL_COMM_BLOCKING` overrides); the handle, once
/// NCCL made one ([`Comm::wait_ready`] tells when it is ready).
fn start_init(
    n: &'static Nccl,
    id: nccl::UniqueId,
    rank: usize,
    size: usize,
    device: usize,
    blocking: bool,
    options: &GroupOptions,
) -> Result<NcclComm> {
    let (_, _) = stream_for(device)?;
    let mut raw: NcclComm = std::ptr::null_mut();
    let mut config = Config::new(blocking).with_max_ctas(options.max_ctas);
    let (Ok(nranks), Ok(r)) = (c_int::try_from(size), c_int::try_from(rank)) else {
        return Err(Error::InvalidArgument {
            op: "init_process_group",
            reason: format!("a group of {size} is too large for NCCL"),
        });
    };
    // SAFETY: `raw` and `config` are valid for writes and reads for the call; the config is
    // NCCL 2.18's layout with its `size`, which every later NCCL reads (see `Config`).
    let code = unsafe { (n.fns.comm_init_rank_config)(&mut raw, nranks, id, r, &mut config) };
    if code != 0 && code != IN_PROGRESS {
        if !raw.is_null() {
            // SAFETY: NCCL returned a communicator it failed to set up: abort frees it.
            let _ = unsafe { (n.fns.comm_abort)(raw) };
        }
        n.check("ncclCommInitRankConfig", code)?;
    }
    if raw.is_null() {
        return Err(Error::Nccl {
            call: "ncclCommInitRankConfig",
            code,
            message: "no communicator returned".into(),
        });
    }
    Ok(raw)
}

/// Starts creating the blocking communicator of rank `rank` of `size` on `device` (unique id
/// `id`) on a thread of its own, waiting at most until `deadline`: a blocking creation waits
/// on the host for every rank, and a rank that never comes would hold it forever. After a
/// timeout ([`Error::NcclTimeout`]) that thread stays inside NCCL; the communicator it may
/// still make is never used.
fn init_blocking(
    n: &'static Nccl,
    id: nccl::UniqueId,
    rank: usize,
    size: usize,
    device: usize,
    deadline: Instant,
    options: &GroupOptions,
) -> Result<NcclComm> {
    let (tx, rx) = std::sync::mpsc::channel();
    let options = options.clone();
    std::thread::Builder::new()
        .name("genesis-nccl-init".into())
        .spawn(move || {
            let made =
                start_init(n, id, rank, size, device, true, &options).map(|raw| raw as usize);
            let _ = tx.send(made);
        })
        .map_err(|e| Error::Protocol(format!("starting NCCL's creation thread: {e}")))?;
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(made) => made.map(|raw| raw as NcclComm),
        Err(_) => Err(Error::NcclTimeout {
            op: "ncclCommInitRankConfig",
            after: left,
        }),
    }
}

/// Collectives of one process, in a group or not.
#[derive(Default)]
struct GroupState {
    depth: usize,
    /// Work queued inside the group, with the stream to record its completion on.
    pending: Vec<(Arc<WorkInner>, Stream)>,
    /// The communicators used inside the group.
    comms: Vec<Arc<Comm>>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Runs `f` as one NCCL group (`ncclGroupStart` ... `ncclGroupEnd`): the collectives it queues
/// on this thread are launched together when it returns, as NCCL needs for point-to-point
/// exchanges posted by both sides (a send and a receive between two ranks) and for one
/// collective on each of several GPUs of this process. Groups nest; the outermost one
/// launches. The [`Work`]s made inside tell completion once the group has ended; waiting on
/// one before that is an error. The group is ended even when `f` fails.
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let n = shared_nccl()?;
    // SAFETY: `ncclGroupStart` only marks this thread's state.
    n.check("ncclGroupStart", unsafe { (n.fns.group_start)() })?;
    GROUP.with(|g| g.borrow_mut().depth += 1);
    /// Ends the group when `f` returns or panics.
    struct End {
        nccl: &'static Nccl,
        done: bool,
    }
    impl End {
        fn end(&mut self) -> (nccl::NcclResult, GroupState) {
            self.done = true;
            let state = GROUP.with(|g| {
                let mut g = g.borrow_mut();
                g.depth -= 1;
                if g.depth == 0 {
                    std::mem::take(&mut *g)
                } else {
                    GroupState {
                        depth: g.depth,
                        ..GroupState::default()
                    }
                }
            });
            // SAFETY: pairs the `ncclGroupStart` above, on the same thread.
            (unsafe { (self.nccl.fns.group_end)() }, state)
        }
    }
    impl Drop for End {
        fn drop(&mut self) {
            if !self.done {
                let _ = self.end();
            }
        }
    }
    let mut end = End {
        nccl: n,
        done: false,
    };
    let result = f();
    let (code, state) = end.end();
    let outer = state.depth == 0;
    let mut status = if code == 0 || code == IN_PROGRESS {
        Ok(())
    } else {
        n.check("ncclGroupEnd", code)
    };
    if outer {
        for c in &state.comms {
            let deadline = Instant::now() + c.timeout;
            let r = if status.is_ok() {
                c.wait_ready("ncclGroupEnd", deadline)
            } else {
                c.poll("ncclGroupEnd").map(|_| ())
            };
            if status.is_ok() {
                status = r;
            }
        }
        if status.is_ok() {
            for (w, s) in &state.pending {
                if let Err(e) = w.record(std::slice::from_ref(s)) {
                    status = Err(e);
                    break;
                }
            }
        }
    }
    let r = result?;
    status?;
    Ok(r)
}

/// The state of one queued collective.
struct WorkInner {
    op: &'static str,
    comms: Vec<Arc<Comm>>,
    /// Recorded after the collective on each stream it was queued on (at the end of its group
    /// when it was queued in one).
    events: OnceLock<Vec<Event>>,
    /// The tensors, kept alive until the handle is dropped.
    _keep: Vec<Tensor>,
    timeout: Duration,
}

impl WorkInner {
    fn record(&self, streams: &[Stream]) -> Result<()> {
        let mut events = Vec::with_capacity(streams.len());
        for s in streams {
            events.push(s.record_event()?);
        }
        let _ = self.events.set(events);
        Ok(())
    }
}

/// A queued collective (PyTorch's `Work`): it holds the tensors, and tells when the device has
/// run the collective. The collective is ordered on the stream it was queued on, so later work
/// on that stream sees its result without waiting here; [`Work::wait`] blocks the host.
pub struct Work {
    inner: Arc<WorkInner>,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("op", &self.inner.op)
            .field("queued", &self.inner.events.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Work {
    /// A collective that ran to completion on the host before returning (a [`HostGroup`]'s):
    /// done from the start.
    ///
    /// [`HostGroup`]: crate::HostGroup
    pub(crate) fn completed(op: &'static str) -> Work {
        Work {
            inner: Arc::new(WorkInner {
                op,
                comms: Vec::new(),
                events: OnceLock::from(Vec::new()),
                _keep: Vec::new(),
                timeout: DEFAULT_TIMEOUT,
            }),
        }
    }

    /// The collective's name.
    pub fn op(&self) -> &'static str {
        self.inner.op
    }

    /// Whether the device has finished the collective (`false` inside a group that has not
    /// ended); an error when NCCL reported one (the communicator is then aborted).
    pub fn is_completed(&self) -> Result<bool> {
        let Some(events) = self.inner.events.get() else {
            return Ok(false);
        };
        for e in events {
            if !e.query()? {
                for c in &self.inner.comms {
                    c.poll(self.inner.op)?;
                }
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits until the collective is done, at most the group's timeout (see
    /// [`Work::wait_timeout`]).
    pub fn wait(&self) -> Result<()> {
        self.wait_timeout(self.inner.timeout)
    }

    /// Waits until the collective is done, polling NCCL's asynchronous errors meanwhile. An
    /// error when NCCL reports one or after `timeout` ([`Error::NcclTimeout`]): the
    /// communicator is then aborted, which stops its work on the device.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        if self.inner.events.get().is_none() {
            return Err(Error::InvalidArgument {
                op: "Work::wait",
                reason: format!(
                    "{} was queued in a group that has not ended (or failed to launch)",
                    self.inner.op
                ),
            });
        }
        let since = Instant::now();
        let deadline = since + timeout;
        let mut round = 0;
        loop {
            if self.is_completed()? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                for c in &self.inner.comms {
                    c.abort(format!(
                        "{} did not finish within {timeout:?}",
                        self.inner.op
                    ));
                }
                return Err(Error::NcclTimeout {
                    op: self.inner.op,
                    after: timeout,
                });
            }
            backoff(since, &mut round);
        }
    }
}

/// How many groups this process has created from a store (the key of each one's unique id).
static GROUPS: AtomicUsize = AtomicUsize::new(0);

/// Creates this process's group from its environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
/// `MASTER_ADDR`, `MASTER_PORT`, as [`mod@crate::launch`] and `torchrun` set them), with
/// [`DEFAULT_TIMEOUT`] (PyTorch's `init_process_group("nccl")`).
pub fn init_process_group() -> Result<ProcessGroup> {
    ProcessGroup::new(&GroupEnv::from_env()?, DEFAULT_TIMEOUT)
}

/// NCCL's settings for the communicators of a [`ProcessGroup`] (PyTorch's
/// `ProcessGroupNCCL.Options().config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOptions {
    /// The most thread blocks (CTAs) a collective runs with (NCCL's `maxCTAs`; `None`: NCCL's
    /// choice for the topology). A collective that runs beside other kernels holds that many
    /// multiprocessors for its whole length: fewer make it slower and leave more to the
    /// kernels beside it.
    pub max_ctas: Option<u32>,
}

impl GroupOptions {
    /// Refuses settings no communicator can have (NCCL checks the rest when it makes one).
    fn check(&self, op: &'static str) -> Result<()> {
        if self.max_ctas == Some(0) {
            return Err(Error::InvalidArgument {
                op,
                reason: "max_ctas must be at least 1 (None leaves NCCL's choice)".into(),
            });
        }
        Ok(())
    }
}

/// One rank of a group of processes or GPUs: an NCCL communicator on one GPU, and the
/// collectives on its tensors (see the module documentation).
#[derive(Debug)]
pub struct ProcessGroup {
    comm: Arc<Comm>,
    store: Option<Mutex<StoreClient>>,
}

impl ProcessGroup {
    /// Rank `env.rank` of a group of `env.world_size` processes, on GPU `env.local_rank`:
    /// rank 0 makes NCCL's unique id and puts it in the store at `env.store_addr()`, the
    /// others read it there (every wait at most `timeout`); then the communicator is created
    /// (at most `timeout` too). Processes create their groups in the same order (the id's key
    /// counts them).
    pub fn new(env: &GroupEnv, timeout: Duration) -> Result<ProcessGroup> {
        ProcessGroup::new_with(env, timeout, &GroupOptions::default())
    }

    /// [`ProcessGroup::new`] with NCCL's settings of `options` for this group's
    /// communicators (a second group over the same ranks, made after it, may have others).
    pub fn new_with(
        env: &GroupEnv,
        timeout: Duration,
        options: &GroupOptions,
    ) -> Result<ProcessGroup> {
        let op = "init_process_group";
        options.check(op)?;
        check_devices(op, &[env.local_rank])?;
        let deadline = Instant::now() + timeout;
        let mut store = StoreClient::connect(&env.store_addr(), timeout)?;
        let key = format!(
            "genesis_dist/nccl_id/{}",
            GROUPS.fetch_add(1, Ordering::SeqCst)
        );
        let n = shared_nccl()?;
        // Two unique ids: the non-blocking communicator's and the blocking one's.
        let mut ids = Vec::with_capacity(2);
        for key in [key.clone(), format!("{key}/blocking")] {
            ids.push(if env.rank == 0 {
                let id = n.unique_id()?;
                store.set(&key, &id.internal)?;
                id
            } else {
                let left = deadline.saturating_duration_since(Instant::now());
                let bytes = store.get(&key, left)?;
                let internal: [u8; 128] = bytes.as_slice().try_into().map_err(|_| {
                    Error::Protocol(format!(
                        "{key}: {} bytes where NCCL's unique id has 128",
                        bytes.len()
                    ))
                })?;
                nccl::UniqueId { internal }
            });
        }
        let (id, id_blocking) = (ids[0], ids[1]);
        nccl::set_env_defaults();
        let raw = start_init(
            n,
            id,
            env.rank,
            env.world_size,
            env.local_rank,
            false,
            options,
        )?;
        let mut comm = Comm {
            nccl: n,
            raw,
            fast: std::ptr::null_mut(),
            device: env.local_rank,
            rank: env.rank,
            size: env.world_size,
            timeout,
            calls: Mutex::new(()),
            aborted: Mutex::new(None),
        };
        comm.wait_ready("ncclCommInitRankConfig", deadline)?;
        comm.fast = init_blocking(
            n,
            id_blocking,
            env.rank,
            env.world_size,
            env.local_rank,
            deadline,
            options,
        )?;
        // Ready at once, unless `NCCL_COMM_BLOCKING=0` made the creation run on.
        comm.wait_ready("ncclCommInitRankConfig", deadline)?;
        Ok(ProcessGroup {
            comm: Arc::new(comm),
            store: Some(Mutex::new(store)),
        })
    }

    /// One group of `devices.len()` ranks in this process, rank `i` on GPU `devices[i]`
    /// (distinct GPUs): the communicators are created together in one NCCL group, at most
    /// `timeout`. Collectives on them must be queued together, in [`group`].
    pub fn new_local(devices: &[usize], timeout: Duration) -> Result<Vec<ProcessGroup>> {
        ProcessGroup::new_local_with(devices, timeout, &GroupOptions::default())
    }

    /// [`ProcessGroup::new_local`] with NCCL's settings of `options`.
    pub fn new_local_with(
        devices: &[usize],
        timeout: Duration,
        options: &GroupOptions,
    ) -> Result<Vec<ProcessGroup>> {
        let op = "ProcessGroup::new_local";
        options.check(op)?;
        check_devices(op, devices)?;
        let n = shared_nccl()?;
        nccl::set_env_defaults();
        let id = n.unique_id()?;
        let deadline = Instant::now() + timeout;
        let size = devices.len();
        // SAFETY: `ncclGroupStart` only marks this thread's state.
        n.check("ncclGroupStart", unsafe { (n.fns.group_start)() })?;
        let mut raws = Vec::with_capacity(size);
        let mut first_error = None;
        for (rank, &d) in devices.iter().enumerate() {
            match start_init(n, id, rank, size, d, false, options) {
                Ok(raw) => raws.push((raw, d, rank)),
                Err(e) => {
                    first_error = Some(e);
                    break;
                }
            }
        }
        // SAFETY: pairs the `ncclGroupStart` above, on this thread.
        let end = unsafe { (n.fns.group_end)() };
        let mut groups: Vec<ProcessGroup> = raws
            .into_iter()
            .map(|(raw, device, rank)| ProcessGroup {
                comm: Arc::new(Comm {
                    nccl: n,
                    raw,
                    fast: std::ptr::null_mut(),
                    device,
                    rank,
                    size,
                    timeout,
                    calls: Mutex::new(()),
                    aborted: Mutex::new(None),
                }),
                store: None,
            })
            .collect();
        let fail = |e: Error, groups: &[ProcessGroup]| {
            for g in groups {
                g.comm.abort(e.to_string());
            }
            Err(e)
        };
        if let Some(e) = first_error {
            return fail(e, &groups);
        }
        if end != 0 && end != IN_PROGRESS {
            let e = n.check("ncclGroupEnd", end).unwrap_err();
            return fail(e, &groups);
        }
        for g in &groups {
            if let Err(e) = g.comm.wait_ready("ncclCommInitRankConfig", deadline) {
                return fail(e, &groups);
            }
        }
        // The blocking communicators, created together in one group on this thread: every
        // rank is here, so none can keep the others waiting.
        let id = n.unique_id()?;
        let mut fasts = vec![std::ptr::null_mut(); size];
        let mut configs = vec![Config::new(true).with_max_ctas(options.max_ctas); size];
        // SAFETY: `ncclGroupStart` only marks this thread's state.
        n.check("ncclGroupStart", unsafe { (n.fns.group_start)() })?;
        let mut first_error = None;
        for (((g, fast), config), rank) in groups.iter().zip(&mut fasts).zip(&mut configs).zip(0..)
        {
            bind(g.comm.device);
            // SAFETY: `fast` and `config` are valid until the group ends; the config as in
            // `start_init`.
            let code =
                unsafe { (n.fns.comm_init_rank_config)(fast, size as c_int, id, rank, config) };
            if let Err(e) = n.check("ncclCommInitRankConfig", code) {
                first_error = Some(e);
                break;
            }
        }
        // SAFETY: pairs the `ncclGroupStart` above, on this thread.
        let end = unsafe { (n.fns.group_end)() };
        // `NCCL_COMM_BLOCKING=0` in the environment makes the creation run on (polled below).
        let ok = first_error.is_none()
            && (end == 0 || end == IN_PROGRESS)
            && fasts.iter().all(|c| !c.is_null());
        for (g, fast) in groups.iter_mut().zip(&fasts) {
            if fast.is_null() {
                continue;
            }
            if ok && let Some(c) = Arc::get_mut(&mut g.comm) {
                c.fast = *fast;
            } else {
                // SAFETY: a communicator of the failed group: abort frees it.
                let _ = unsafe { (n.fns.comm_abort)(*fast) };
            }
        }
        if !ok {
            let e = first_error.unwrap_or_else(|| {
                n.check("ncclGroupEnd", end).err().unwrap_or(Error::Nccl {
                    call: "ncclCommInitRankConfig",
                    code: end,
                    message: "no communicator returned".into(),
                })
            });
            return fail(e, &groups);
        }
        for g in &groups {
            if let Err(e) = g.comm.wait_ready("ncclCommInitRankConfig", deadline) {
                return fail(e, &groups);
            }
        }
        Ok(groups)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size
    }

    /// The GPU of this rank.
    pub fn device(&self) -> Device {
        Device::Cuda(self.comm.device)
    }

    /// How long communicator calls and [`Work::wait`] may take.
    pub fn timeout(&self) -> Duration {
        self.comm.timeout
    }

    /// The store the group met in (none for [`ProcessGroup::new_local`]'s groups), for the
    /// caller's own rendezvous.
    pub fn store(&self) -> Option<&Mutex<StoreClient>> {
        self.store.as_ref()
    }

    /// Aborts the communicator: NCCL stops its work; later calls return [`Error::Aborted`].
    pub fn abort(&self) {
        self.comm.abort("aborted by the caller".into());
    }

    /// Whether the communicator was aborted.
    pub fn is_aborted(&self) -> bool {
        self.comm.check_live("is_aborted").is_err()
    }

    /// Queues `call` (NCCL calls on this communicator and the current stream of its GPU) for
    /// collective `op` on `tensors` (checked, on this GPU), recording the tensors as used on
    /// that stream.
    fn enqueue(
        &self,
        op: &'static str,
        tensors: &[&Tensor],
        call: impl FnOnce(&Functions, NcclComm, CudaStream) -> nccl::NcclResult,
    ) -> Result<Work> {
        self.enqueue_on(op, tensors, false, call)
    }

    /// [`ProcessGroup::enqueue`] on the blocking communicator (collectives), or, with
    /// `p2p`, on the non-blocking one (point-to-point calls).
    fn enqueue_on(
        &self,
        op: &'static str,
        tensors: &[&Tensor],
        p2p: bool,
        call: impl FnOnce(&Functions, NcclComm, CudaStream) -> nccl::NcclResult,
    ) -> Result<Work> {
        let c = &self.comm;
        let raw = if p2p || c.fast.is_null() {
            c.raw
        } else {
            c.fast
        };
        c.check_live(op)?;
        let (stream, handle) = stream_for(c.device)?;
        for t in tensors {
            t.record_stream(&stream)?;
        }
        {
            let _calls = c.calls.lock().unwrap_or_else(|p| p.into_inner());
            c.check_live(op)?;
            let code = call(&c.nccl.fns, raw, handle);
            if code == IN_PROGRESS {
                if !in_group() {
                    c.wait_ready(op, Instant::now() + c.timeout)?;
                }
            } else if code != 0 {
                let e = c.nccl.check(op, code).unwrap_err();
                // A failed call may leave the communicator broken: its state says.
                c.poll(op)?;
                return Err(e);
            }
        }
        let work = Arc::new(WorkInner {
            op,
            comms: vec![Arc::clone(c)],
            events: OnceLock::new(),
            _keep: tensors.iter().map(|t| (*t).clone()).collect(),
            timeout: c.timeout,
        });
        if in_group() {
            GROUP.with(|g| {
                let mut g = g.borrow_mut();
                if !g.comms.iter().any(|x| Arc::ptr_eq(x, c)) {
                    g.comms.push(Arc::clone(c));
                }
                g.pending.push((Arc::clone(&work), stream));
            });
        } else {
            work.record(std::slice::from_ref(&stream))?;
        }
        Ok(Work { inner: work })
    }

    /// Reduces `tensor` over every rank with `op`, in place (PyTorch's `all_reduce`).
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        let name = "all_reduce";
        let (b, red) = buffer(name, "tensor", tensor, Some(op))?;
        check_device(name, "tensor", tensor, self.comm.device)?;
        let red = red.unwrap_or(RedOp::Sum) as c_int;
        written(&[tensor])?;
        self.enqueue(name, &[tensor], |f, comm, s| {
            // SAFETY: `b` is the contiguous memory of `tensor`, on this communicator's GPU,
            // kept alive by the returned `Work` and ordered on `s` with its other users.
            unsafe { (f.all_reduce)(b.send(), b.recv(), b.count, b.ty as c_int, red, comm, s) }
        })
    }

    /// Copies `tensor` of rank `root` into `tensor` of every rank (PyTorch's `broadcast`).
    pub fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<Work> {
        let name = "broadcast";
        let (b, _) = buffer(name, "tensor", tensor, None)?;
        check_rank(name, "root", root, self.size())?;
        check_device(name, "tensor", tensor, self.comm.device)?;
        let root = root as c_int;
        written(&[tensor])?;
        self.enqueue(name, &[tensor], |f, comm, s| {
            // SAFETY: as in `all_reduce`.
            unsafe { (f.broadcast)(b.send(), b.recv(), b.count, b.ty as c_int, root, comm, s) }
        })
    }

    /// Reduces `tensor` over every rank with `op` into `tensor` of rank `root` (the others'
    /// are left as they are; PyTorch's `reduce`).
    pub fn reduce(&self, tensor: &Tensor, root: usize, op: ReduceOp) -> Result<Work> {
        let name = "reduce";
        let (b, red) = buffer(name, "tensor", tensor, Some(op))?;
        check_rank(name, "root", root, self.size())?;
        check_device(name, "tensor", tensor, self.comm.device)?;
        let red = red.unwrap_or(RedOp::Sum) as c_int;
        let root = root as c_int;
        written(&[tensor])?;
        self.enqueue(name, &[tensor], |f, comm, s| {
            // SAFETY: as in `all_reduce`.
            unsafe {
                (f.reduce)(
                    b.send(),
                    b.recv(),
                    b.count,
                    b.ty as c_int,
                    red,
                    root,
                    comm,
                    s,
                )
            }
        })
    }

    /// Gathers `input` of every rank into `output`, rank `r`'s at elements
    /// `r * input.numel()..` (PyTorch's `all_gather_into_tensor`): `output` holds
    /// `size() * input.numel()` elements of `input`'s dtype.
    pub fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        let name = "all_gather_into_tensor";
        let (i, _) = buffer(name, "input", input, None)?;
        let (o, _) = buffer(name, "output", output, None)?;
        check_dtype(name, "output", &i, &o)?;
        check_count(name, "output", i.count * self.size(), o.count)?;
        check_device(name, "input", input, self.comm.device)?;
        check_device(name, "output", output, self.comm.device)?;
        written(&[output])?;
        self.enqueue(name, &[input, output], |f, comm, s| {
            // SAFETY: as in `all_reduce`; `output` holds `size()` times `input`'s elements.
            unsafe { (f.all_gather)(i.send(), o.recv(), i.count, i.ty as c_int, comm, s) }
        })
    }

    /// Gathers `input` of every rank into `outputs[r]` for rank `r` (PyTorch's `all_gather`):
    /// one tensor a rank, each of `input`'s size and dtype. Queued as one broadcast from each
    /// rank in one group, so the outputs need not be parts of one tensor.
    pub fn all_gather(&self, outputs: &[Tensor], input: &Tensor) -> Result<Work> {
        let name = "all_gather";
        let (i, _) = buffer(name, "input", input, None)?;
        check_count(name, "the list of outputs", self.size(), outputs.len())?;
        let mut outs = Vec::with_capacity(outputs.len());
        for (r, t) in outputs.iter().enumerate() {
            let (o, _) = buffer(name, "an output", t, None)?;
            check_dtype(name, "an output", &i, &o)?;
            check_count(name, format!("output {r}"), i.count, o.count)?;
            outs.push(o);
        }
        check_device(name, "input", input, self.comm.device)?;
        for t in outputs {
            check_device(name, "an output", t, self.comm.device)?;
        }
        let mut keep: Vec<&Tensor> = outputs.iter().collect();
        written(&keep)?;
        keep.push(input);
        self.enqueue(name, &keep, |f, comm, s| {
            // SAFETY: `group_start` only marks this thread's state.
            let start = unsafe { (f.group_start)() };
            if start != 0 {
                return start;
            }
            let mut code = 0;
            for (root, o) in outs.iter().enumerate() {
                // SAFETY: as in `all_reduce`; each output holds `input`'s element count.
                code = unsafe {
                    (f.broadcast)(
                        i.send(),
                        o.recv(),
                        i.count,
                        i.ty as c_int,
                        root as c_int,
                        comm,
                        s,
                    )
                };
                if code != 0 && code != IN_PROGRESS {
                    break;
                }
            }
            // SAFETY: pairs the `group_start` above.
            let end = unsafe { (f.group_end)() };
            if code != 0 && code != IN_PROGRESS {
                code
            } else {
                end
            }
        })
    }

    /// Reduces `input` over every rank with `op` and leaves rank `r` the `r`-th part of the
    /// result in `output` (PyTorch's `reduce_scatter_tensor`): `input` holds `size()` times
    /// `output`'s elements, of one dtype.
    pub fn reduce_scatter_tensor(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        let name = "reduce_scatter_tensor";
        let (i, red) = buffer(name, "input", input, Some(op))?;
        let (o, _) = buffer(name, "output", output, None)?;
        check_dtype(name, "output", &i, &o)?;
        check_count(name, "input", o.count * self.size(), i.count)?;
        check_device(name, "input", input, self.comm.device)?;
        check_device(name, "output", output, self.comm.device)?;
        let red = red.unwrap_or(RedOp::Sum) as c_int;
        written(&[output])?;
        self.enqueue(name, &[input, output], |f, comm, s| {
            // SAFETY: as in `all_reduce`; `input` holds `size()` times `output`'s elements.
            unsafe { (f.reduce_scatter)(i.send(), o.recv(), o.count, o.ty as c_int, red, comm, s) }
        })
    }

    /// Sends `tensor` to rank `dst`, which receives it with [`ProcessGroup::recv`] (PyTorch's
    /// `send`). Exchanges where both sides send must be posted in one [`group`].
    pub fn send(&self, tensor: &Tensor, dst: usize) -> Result<Work> {
        let name = "send";
        let (b, _) = buffer(name, "tensor", tensor, None)?;
        check_rank(name, "dst", dst, self.size())?;
        check_device(name, "tensor", tensor, self.comm.device)?;
        let peer = dst as c_int;
        self.enqueue_on(name, &[tensor], true, |f, comm, s| {
            // SAFETY: as in `all_reduce`.
            unsafe { (f.send)(b.send(), b.count, b.ty as c_int, peer, comm, s) }
        })
    }

    /// Receives into `tensor` what rank `src` sends with [`ProcessGroup::send`] (the same
    /// element count and dtype; PyTorch's `recv`).
    pub fn recv(&self, tensor: &Tensor, src: usize) -> Result<Work> {
        let name = "recv";
        let (b, _) = buffer(name, "tensor", tensor, None)?;
        check_rank(name, "src", src, self.size())?;
        check_device(name, "tensor", tensor, self.comm.device)?;
        let peer = src as c_int;
        written(&[tensor])?;
        self.enqueue_on(name, &[tensor], true, |f, comm, s| {
            // SAFETY: as in `all_reduce`; NCCL's `recv` takes the buffer it writes.
            unsafe { (f.recv)(b.recv(), b.count, b.ty as c_int, peer, comm, s) }
        })
    }

    /// Waits until every rank has reached this call: an all-reduce of one element, waited for
    /// (PyTorch's NCCL `barrier`). Not for [`ProcessGroup::new_local`]'s groups, whose
    /// collectives must be queued together in [`group`].
    pub fn barrier(&self) -> Result<()> {
        let t = Tensor::zeros([1usize], DType::F32, self.device())?;
        self.all_reduce(&t, ReduceOp::Sum)?.wait()
    }
}

/// Marks the tensors a collective writes as written in place (their version goes up, as
/// PyTorch's in-place collectives do), so that a backward that saved one of them refuses to
/// run on the values NCCL will write. Before the launch: a tensor this thread is reading
/// (`Error::Aliased`) fails the call with nothing queued.
fn written(tensors: &[&Tensor]) -> Result<()> {
    for t in tensors {
        genesis::autograd::increment_version(t)?;
    }
    Ok(())
}

/// The collectives that data parallelism uses ([`crate::DistributedDataParallel`],
/// [`crate::ZeroAdamW`]), over NCCL ([`ProcessGroup`]) or between threads on the host
/// ([`crate::HostGroup`]). Each has [`ProcessGroup`]'s semantics of the same name.
pub trait Collectives: Send + Sync + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// [`ProcessGroup::all_reduce`].
    fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work>;
    /// [`ProcessGroup::broadcast`].
    fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<Work>;
    /// [`ProcessGroup::reduce_scatter_tensor`] (`output` may be `input`'s part of this rank).
    fn reduce_scatter_tensor(&self, output: &Tensor, input: &Tensor, op: ReduceOp) -> Result<Work>;
    /// [`ProcessGroup::all_gather_into_tensor`] (`input` may be `output`'s part of this rank).
    fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<Work>;
}

impl Collectives for ProcessGroup {
    fn rank(&self) -> usize {
        ProcessGroup::rank(self)
    }
    fn size(&self) -> usize {
        ProcessGroup::size(self)
    }
    fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        ProcessGroup::all_reduce(self, tensor, op)
    }
    fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<Work> {
        ProcessGroup::broadcast(self, tensor, root)
    }
    fn reduce_scatter_tensor(&self, output: &Tensor, input: &Tensor, op: ReduceOp) -> Result<Work> {
        ProcessGroup::reduce_scatter_tensor(self, output, input, op)
    }
    fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        ProcessGroup::all_gather_into_tensor(self, output, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(dtype: DType, n: usize) -> Tensor {
        Tensor::zeros([n], dtype, Device::Cpu).unwrap()
    }

    #[test]
    fn every_dtype_but_int16_maps_to_an_nccl_type() {
        let want = [
            (DType::Bool, DataType::U8),
            (DType::U8, DataType::U8),
            (DType::I8, DataType::I8),
            (DType::I32, DataType::I32),
            (DType::I64, DataType::I64),
            (DType::F16, DataType::F16),
            (DType::BF16, DataType::BF16),
            (DType::F32, DataType::F32),
            (DType::F64, DataType::F64),
        ];
        for (d, t) in want {
            assert_eq!(nccl_types("x", d, None).unwrap(), (t, None), "{d}");
        }
        for op in ReduceOp::ALL {
            match nccl_types("all_reduce", DType::I16, Some(op)) {
                Err(Error::UnsupportedDType { dtype, reason, .. }) => {
                    assert_eq!(dtype, DType::I16);
                    assert!(reason.contains("int16"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(nccl_types("broadcast", DType::I16, None).is_err());
    }

    #[test]
    fn reductions_map_to_nccls_and_bool_is_logical() {
        let ops = [
            (ReduceOp::Sum, RedOp::Sum),
            (ReduceOp::Avg, RedOp::Avg),
            (ReduceOp::Product, RedOp::Prod),
            (ReduceOp::Max, RedOp::Max),
            (ReduceOp::Min, RedOp::Min),
        ];
        for (op, red) in ops {
            for d in [DType::F32, DType::BF16, DType::I64, DType::U8] {
                assert_eq!(nccl_types("r", d, Some(op)).unwrap().1, Some(red));
            }
        }
        let b = |op| nccl_types("r", DType::Bool, Some(op)).map(|x| x.1);
        assert_eq!(b(ReduceOp::Sum).unwrap(), Some(RedOp::Max));
        assert_eq!(b(ReduceOp::Product).unwrap(), Some(RedOp::Min));
        assert_eq!(b(ReduceOp::Max).unwrap(), Some(RedOp::Max));
        assert_eq!(b(ReduceOp::Min).unwrap(), Some(RedOp::Min));
        assert!(matches!(
            b(ReduceOp::Avg),
            Err(Error::UnsupportedDType { .. })
        ));
        // The enums carry NCCL's numbers.
        assert_eq!((DataType::BF16 as i32, RedOp::Avg as i32), (9, 4));
    }

    #[test]
    fn tensors_are_checked_before_any_device_call() {
        let t = cpu(DType::F32, 6);
        let (b, red) = buffer("all_reduce", "tensor", &t, Some(ReduceOp::Avg)).unwrap();
        assert_eq!((b.count, b.ty, red), (6, DataType::F32, Some(RedOp::Avg)));
        assert_eq!(b.ptr, t.data_ptr());
        // A view starting past the storage's start: its own first element.
        let v = t.narrow(0, 2, 3).unwrap();
        let (bv, _) = buffer("x", "tensor", &v, None).unwrap();
        assert_eq!((bv.ptr, bv.count), (t.data_ptr() + 8, 3));
        // Not contiguous.
        let m = Tensor::zeros([3usize, 4], DType::F32, Device::Cpu).unwrap();
        let mt = m.t().unwrap();
        match buffer("all_reduce", "tensor", &mt, Some(ReduceOp::Sum)) {
            Err(e @ Error::NotContiguous { .. }) => {
                assert!(e.to_string().contains("contiguous"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // A CPU tensor, a tensor of another GPU.
        match check_device("all_reduce", "tensor", &t, 0) {
            Err(e @ Error::NotOnCuda { .. }) => assert!(e.to_string().contains("cpu"), "{e}"),
            other => panic!("{other:?}"),
        }
        // Counts, dtypes, ranks.
        let (i, _) = buffer("g", "input", &cpu(DType::F32, 4), None).unwrap();
        let (o, _) = buffer("g", "output", &cpu(DType::F64, 8), None).unwrap();
        assert!(matches!(
            check_dtype("g", "output", &i, &o),
            Err(Error::DTypeMismatch {
                expected: DType::F32,
                found: DType::F64,
                ..
            })
        ));
        match check_count("all_gather_into_tensor", "output", 4 * 3, 8) {
            Err(e @ Error::SizeMismatch { .. }) => {
                assert!(e.to_string().contains("8 elements, expected 12"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        check_count("x", "y", 5, 5).unwrap();
        assert!(check_rank("broadcast", "root", 2, 2).is_err());
        check_rank("broadcast", "root", 1, 2).unwrap();
    }

    #[test]
    fn device_lists_are_checked() {
        let e = check_devices("new_local", &[]).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }));
        let n = genesis::cuda::device_count();
        let e = check_devices("new_local", &[n]).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        if n >= 1 {
            let e = check_devices("new_local", &[0, 0]).unwrap_err();
            assert!(e.to_string().contains("twice"), "{e}");
        }
    }

    /// Without a GPU, a group cannot be created, and says why (before touching NCCL).
    #[test]
    fn a_group_without_a_gpu_is_a_typed_error() {
        if genesis::cuda::device_count() > 0 {
            eprintln!("skipped: a GPU is present");
            return;
        }
        let env = GroupEnv {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: 1,
        };
        match ProcessGroup::new(&env, Duration::from_millis(100)) {
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(reason.contains("does not exist"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(ProcessGroup::new_local(&[0], Duration::from_millis(100)).is_err());
    }
}
