//! Launchers for the elementwise and copy kernels, on typed device spans.
//!
//! Every launcher checks the extent it reads and writes against its spans before launching, so
//! it is safe to call: the promise that a span is live device memory until the work completes
//! was made when the span was created (`DeviceSpan::from_raw`).

use std::ffi::c_void;

use genesis_cuda::{DeviceSpan, DeviceSpanMut, Kernel, LaunchConfig, Stream};

use crate::{BinaryNd, BinaryOp, CompareOp, Element, Error, Result, Rhs, UnaryOp, WhereNd, images};

/// `Err(LengthMismatch)` unless `got == expected`.
fn same_len(op: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch { op, expected, got })
    }
}

/// Threads per block of the elementwise kernels (`GX_THREADS` in `elementwise.cu`).
pub const ELEMENTWISE_THREADS: u32 = 256;
/// 16-byte vectors per thread per tile (`GX_UNROLL` in `elementwise.cu`).
pub const ELEMENTWISE_UNROLL: u64 = 4;
/// 16-byte vectors per thread per tile of the unary kernels (`GX_UNARY_UNROLL`).
pub const UNARY_UNROLL: u64 = 1;

pub(crate) fn elementwise_config(
    stream: &Stream,
    n: usize,
    elem_bytes: usize,
    vec_ok: bool,
) -> LaunchConfig {
    tiled_config(stream, n, elem_bytes, vec_ok, ELEMENTWISE_UNROLL)
}

/// One tile of `unroll` vectors a thread per block when vectorised; otherwise a grid-stride
/// loop over enough blocks to fill the device a few times over.
fn tiled_config(
    stream: &Stream,
    n: usize,
    elem_bytes: usize,
    vec_ok: bool,
    unroll: u64,
) -> LaunchConfig {
    let threads = u64::from(ELEMENTWISE_THREADS);
    let blocks = if vec_ok {
        let nvec = (n / (16 / elem_bytes)) as u64;
        nvec.div_ceil(threads * unroll)
    } else {
        // Grid-stride loop: enough blocks to fill the device a few times over.
        let cap = u64::from(stream.context().multiprocessors().max(1)) * 32;
        (n as u64).div_ceil(threads).min(cap)
    };
    LaunchConfig::linear(blocks.clamp(1, (1 << 31) - 1) as u32, ELEMENTWISE_THREADS)
}

/// Largest elementwise operation, in elements, that is queued on the context's batch of small
/// operations (one launch runs many; see `genesis_cuda::batch`) instead of launched alone.
pub const BATCH_MAX_ELEMS: usize = 2048;

/// Kinds of the `tape` kernel's records (`elementwise.cu`).
const TAPE_BINARY: u32 = 0;
const TAPE_UNARY: u32 = 1;
const TAPE_FILL: u32 = 2;
const TAPE_BINARY_SCALAR: u32 = 3;

/// Queues one record of the `tape` kernel on the context's batch when the operation is small
/// and batching is on; `false` when the caller must launch the operation itself.
///
/// # Safety
///
/// As for the launcher that calls it: the addresses are valid for `n` elements until the work
/// completes.
#[allow(clippy::too_many_arguments)]
unsafe fn tape_push(
    stream: &Stream,
    kind: u32,
    op: u32,
    ty: u32,
    n: usize,
    a: u64,
    b: u64,
    out: u64,
) -> Result<bool> {
    let ctx = stream.context();
    if n > BATCH_MAX_ELEMS || !ctx.batching() {
        return Ok(false);
    }
    let kernel = Kernel::get(ctx, &images::ELEMENTWISE, "tape")?;
    let mut rec = [0u8; 32];
    rec[0..4].copy_from_slice(&(kind | op << 8 | ty << 16).to_le_bytes());
    rec[4..8].copy_from_slice(&(n as u32).to_le_bytes());
    rec[8..16].copy_from_slice(&a.to_le_bytes());
    rec[16..24].copy_from_slice(&b.to_le_bytes());
    rec[24..32].copy_from_slice(&out.to_le_bytes());
    // SAFETY: `tape` takes a 4096-byte parameter block of 32-byte records in this layout
    // (`TapeRecord` in elementwise.cu), run by one block of ELEMENTWISE_THREADS threads; the
    // caller guarantees the addresses.
    unsafe { ctx.batch_push(stream, &kernel, ELEMENTWISE_THREADS, &rec)? };
    Ok(true)
}

/// Whether the `tape` kernel runs `op`: the ops up to `pow` (its switch; the later ones would
/// push it past its registers and launch alone).
fn on_tape(op: BinaryOp) -> bool {
    (op as u32) <= BinaryOp::Pow as u32
}

fn aligned16(ptrs: &[u64]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

/// Queues `out[i] = a[i] + b[i]` on `stream` (see [`binary`]).
pub fn add<T: Element>(
    stream: &Stream,
    a: DeviceSpan<'_, T>,
    b: DeviceSpan<'_, T>,
    out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    binary::<T>(stream, BinaryOp::Add, a, b, out)
}

/// Queues `out[i] = op(a[i], b[i])` for every element of `out` on `stream`. Fails before
/// launching when the lengths differ or `T` does not support `op` (integer division).
pub fn binary<T: Element>(
    stream: &Stream,
    op: BinaryOp,
    a: DeviceSpan<'_, T>,
    b: DeviceSpan<'_, T>,
    out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    same_len(op.name(), out.len(), a.len())?;
    same_len(op.name(), out.len(), b.len())?;
    // SAFETY: all three spans hold `out.len()` elements (checked above).
    unsafe { binary_raw::<T>(stream, op, a.addr(), b.addr(), out.addr(), out.len()) }
}

/// Queues `out[i] = op(a[i], f32(b[i]))` (or `op(f32(b[i]), a[i])` when `swap`) on `stream`:
/// an f32 operand and an f16 or bf16 one in one pass (see [`crate::cpu::binary_mixed`]).
/// Fails before launching when the lengths differ or `op` is not add, sub or mul.
pub fn binary_mixed<H: Element>(
    stream: &Stream,
    op: BinaryOp,
    a: DeviceSpan<'_, f32>,
    b: DeviceSpan<'_, H>,
    out: DeviceSpanMut<'_, f32>,
    swap: bool,
) -> Result<()> {
    let name = crate::cpu::mixed_kernel::<H>(op)?;
    same_len(op.name(), out.len(), a.len())?;
    same_len(op.name(), out.len(), b.len())?;
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let vec_ok = aligned16(&[a.addr(), out.addr()]) && b.addr() % 8 == 0;
    let config = elementwise_config(stream, n, 4, vec_ok);
    let (mut pa, mut pb, mut po, mut n64) = (a.addr(), b.addr(), out.addr(), n as u64);
    let (mut sw, mut v) = (i32::from(swap), i32::from(vec_ok));
    let mut params: [*mut c_void; 6] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut po).cast(),
        (&raw mut n64).cast(),
        (&raw mut sw).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `mixed_<op>_f32_<h>(const float*, const H*, float*,
    // uint64_t, int, int)`; the three spans hold `n` elements (checked), `out` written by the
    // thread that reads the same element of `a` and `b`.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// In place: `a_out[i] = op(a_out[i], b[i])` for every element on `stream`.
pub fn binary_assign<T: Element>(
    stream: &Stream,
    op: BinaryOp,
    a_out: DeviceSpanMut<'_, T>,
    b: DeviceSpan<'_, T>,
) -> Result<()> {
    same_len(op.name(), a_out.len(), b.len())?;
    let p = a_out.addr();
    // SAFETY: both spans hold `a_out.len()` elements; every element is read and written by the
    // same thread, so the output may be the first operand.
    unsafe { binary_raw::<T>(stream, op, p, b.addr(), p, a_out.len()) }
}

/// # Safety
///
/// `a`, `b` and `out` are device addresses valid for `n` elements of `T` (aligned for `T`)
/// until the launch completes; `out` may equal `a` or `b`.
unsafe fn binary_raw<T: Element>(
    stream: &Stream,
    op: BinaryOp,
    a: u64,
    b: u64,
    out: u64,
    n: usize,
) -> Result<()> {
    let name = crate::cpu::supports::<T>(op)?;
    if n == 0 {
        return Ok(());
    }
    if on_tape(op) {
        // SAFETY: forwarded contract.
        if unsafe { tape_push(stream, TAPE_BINARY, op as u32, T::TYPE_CODE, n, a, b, out)? } {
            return Ok(());
        }
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let vec_ok = aligned16(&[a, b, out]);
    let config = elementwise_config(stream, n, size_of::<T>(), vec_ok);
    let (mut a, mut b, mut out, mut n64, mut v) = (a, b, out, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 5] = [
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `<op>_<T>(const T*, const T*, T*, uint64_t, int)`; the
    // caller guarantees the addresses.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `out[i] = op(a[i])` for every element of `out` on `stream`. Fails before launching
/// when the lengths differ or `T` does not support `op` (transcendental ops on integers).
pub fn unary<T: Element>(
    stream: &Stream,
    op: UnaryOp,
    a: DeviceSpan<'_, T>,
    out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    same_len(op.name(), out.len(), a.len())?;
    // SAFETY: both spans hold `out.len()` elements.
    unsafe { unary_raw::<T>(stream, op, a.addr(), out.addr(), out.len()) }
}

/// In place: `a_out[i] = op(a_out[i])` on `stream`.
pub fn unary_assign<T: Element>(
    stream: &Stream,
    op: UnaryOp,
    a_out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    let p = a_out.addr();
    // SAFETY: the span holds `a_out.len()` elements, each read and written by one thread.
    unsafe { unary_raw::<T>(stream, op, p, p, a_out.len()) }
}

/// # Safety
///
/// `a` and `out` are device addresses valid for `n` elements of `T` until the launch
/// completes; `out` may equal `a`.
unsafe fn unary_raw<T: Element>(
    stream: &Stream,
    op: UnaryOp,
    a: u64,
    out: u64,
    n: usize,
) -> Result<()> {
    let name = crate::cpu::supports_unary::<T>(op)?;
    if n == 0 {
        return Ok(());
    }
    // SAFETY: forwarded contract.
    if unsafe { tape_push(stream, TAPE_UNARY, op as u32, T::TYPE_CODE, n, a, 0, out)? } {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let vec_ok = aligned16(&[a, out]);
    let config = tiled_config(stream, n, size_of::<T>(), vec_ok, UNARY_UNROLL);
    let (mut a, mut out, mut n64, mut v) = (a, out, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 4] = [
        (&raw mut a).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `<op>_<T>(const T*, T*, uint64_t, int)`; the caller
    // guarantees the addresses.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `out[i] = min(max(a[i], lo), hi)` on `stream` (see [`crate::cpu::clamp`]; a bound
/// that is `None` is not applied). Memory-bound: 16-byte loads and stores, four in flight a
/// thread. Fails before launching when the lengths differ.
pub fn clamp<T: Element>(
    stream: &Stream,
    a: DeviceSpan<'_, T>,
    lo: Option<T>,
    hi: Option<T>,
    out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    same_len("clamp", out.len(), a.len())?;
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let name = match T::NAME {
        "f32" => "clamp_f32",
        "f16" => "clamp_f16",
        "bf16" => "clamp_bf16",
        "i32" => "clamp_i32",
        "i64" => "clamp_i64",
        "f64" => "clamp_f64",
        other => {
            return Err(Error::Unsupported {
                op: "clamp",
                reason: format!("element type {other}"),
            });
        }
    };
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let (mut pa, mut po) = (a.addr(), out.addr());
    let vec_ok = aligned16(&[pa, po]);
    let config = elementwise_config(stream, n, size_of::<T>(), vec_ok);
    let (mut n64, mut v) = (n as u64, i32::from(vec_ok));
    let mut flags = i32::from(lo.is_some()) | i32::from(hi.is_some()) << 1;
    // An absent bound is never read by the kernel (its flag is clear); any value fills it.
    let (mut lo, mut hi) = (
        lo.or(hi).unwrap_or(a_zero::<T>()),
        hi.or(lo).unwrap_or(a_zero::<T>()),
    );
    let mut params: [*mut c_void; 7] = [
        (&raw mut pa).cast(),
        (&raw mut po).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
        (&raw mut lo).cast(),
        (&raw mut hi).cast(),
        (&raw mut flags).cast(),
    ];
    // SAFETY: the parameters match `clamp_<T>(const T*, T*, uint64_t, int, T, T, int)`; both
    // spans hold `n` elements (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// The bits of a value of at most 8 bytes, zero-extended, as a tape record carries them.
fn value_bits<T: Element>(value: T) -> u64 {
    let mut bits = [0u8; 8];
    // SAFETY: `T` is a plain value of at most 8 bytes (f64, f32, f16, bf16, i32, i64), read as
    // bytes.
    let raw =
        unsafe { std::slice::from_raw_parts((&raw const value).cast::<u8>(), size_of::<T>()) };
    bits[..raw.len()].copy_from_slice(raw);
    u64::from_ne_bytes(bits)
}

/// The elementwise types by [`Element::TYPE_CODE`].
const ND_TYPES: [&str; 6] = ["f32", "f16", "bf16", "i32", "i64", "f64"];

/// The names `<op>_nd_<type>` for every op name of `ops` and every elementwise type, in that
/// order (op-major), made once.
fn nd_names(ops: &[&'static str]) -> Vec<&'static str> {
    ops.iter()
        .flat_map(|op| {
            ND_TYPES
                .iter()
                .map(move |t| &*Box::leak(format!("{op}_nd_{t}").into_boxed_str()))
        })
        .collect()
}

/// The kernel `<op>_nd_<T>`.
fn nd_kernel_name<T: Element>(op: BinaryOp) -> &'static str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| nd_names(&BinaryOp::ALL.map(BinaryOp::name)));
    // `BinaryOp::ALL` lists every variant, so every `op` has a position.
    let pos = BinaryOp::ALL.iter().position(|&o| o == op).expect("listed");
    names[pos * ND_TYPES.len() + T::TYPE_CODE as usize]
}

/// Queues `out[i] = op(a[offset_a(i)], b[offset_b(i)])` (or `op(a[..], scalar)`) for every
/// output position `i` of `desc` on `stream`: operands read in place through their strides
/// (broadcast dimensions have stride 0), the output contiguous. Fails before launching when
/// `T` does not support `op` or `desc` reaches outside a span or does not match `out`.
///
/// Small operations on contiguous operands go on the context's batch (see [`BATCH_MAX_ELEMS`]).
pub fn binary_nd<T: Element>(
    stream: &Stream,
    op: BinaryOp,
    desc: &BinaryNd,
    a: DeviceSpan<'_, T>,
    b: Rhs<DeviceSpan<'_, T>, T>,
    out: DeviceSpanMut<'_, T>,
) -> Result<()> {
    crate::cpu::supports::<T>(op)?;
    let b_len = match b {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(a.len(), b_len, out.len())?;
    let n = desc.numel();
    if n == 0 {
        return Ok(());
    }
    let at = |s: DeviceSpan<'_, T>, off: usize| s.addr() + (off * size_of::<T>()) as u64;
    if let Some((a_off, b_off)) = desc.contiguous().filter(|_| on_tape(op)) {
        let record = match b {
            Rhs::Scalar(v) => Some((TAPE_BINARY_SCALAR, value_bits(v))),
            Rhs::Tensor(s) => b_off.map(|o| (TAPE_BINARY, at(s, o))),
        };
        if let Some((kind, b_word)) = record {
            // SAFETY: `desc.check` put `n` elements of `a` from `a_off` (and of `b` from `b_off`)
            // inside their spans, and `out` holds `n`; spans are valid until the work completes.
            let queued = unsafe {
                tape_push(
                    stream,
                    kind,
                    op as u32,
                    T::TYPE_CODE,
                    n,
                    at(a, a_off),
                    b_word,
                    out.addr(),
                )?
            };
            if queued {
                return Ok(());
            }
        }
    }
    let mut d = *desc;
    let b_aligned = match b {
        Rhs::Tensor(s) => Some(s.is_aligned_to(16)),
        Rhs::Scalar(_) => None,
    };
    let vec = d.vector_ok(
        size_of::<T>(),
        a.is_aligned_to(16),
        b_aligned,
        out.is_aligned_to(16),
    );
    d.set_vector(vec);
    let kernel = Kernel::get(
        stream.context(),
        &images::ELEMENTWISE,
        nd_kernel_name::<T>(op),
    )?;
    let work = if vec { n / (16 / size_of::<T>()) } else { n } as u64;
    let blocks = work.div_ceil(u64::from(ELEMENTWISE_THREADS) * ELEMENTWISE_UNROLL);
    let config = LaunchConfig::linear(blocks.clamp(1, (1 << 31) - 1) as u32, ELEMENTWISE_THREADS);
    let (mut pa, mut pb, mut scalar) = match b {
        Rhs::Tensor(s) => (a.addr(), s.addr(), a_zero::<T>()),
        Rhs::Scalar(v) => (a.addr(), 0u64, v),
    };
    let (mut po, mut n32) = (out.addr(), n as u32);
    let mut params: [*mut c_void; 6] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut scalar).cast(),
        (&raw mut po).cast(),
        (&raw mut n32).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `<op>_nd_<T>(const T*, const T*, T, T*, uint32_t,
    // GxBinaryNd)` (`BinaryNd` is `#[repr(C)]` with the kernel struct's layout; `T` has the
    // kernel element type's size and layout); `desc.check` put every element read inside the
    // spans and the `n` written inside `out`, which are valid until the launch completes.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// In place: `a_out[i] = op(a_out[i], b[b(i)] or the scalar)` over `desc`, whose `a` must be
/// read at the output's positions ([`BinaryNd::a_is_output`]); the same kernels as
/// [`binary_nd`], each element read and written by one thread.
pub fn binary_nd_assign<T: Element>(
    stream: &Stream,
    op: BinaryOp,
    desc: &BinaryNd,
    a_out: DeviceSpanMut<'_, T>,
    b: Rhs<DeviceSpan<'_, T>, T>,
) -> Result<()> {
    if !desc.a_is_output() {
        return Err(Error::Unsupported {
            op: "binary_nd_assign",
            reason: "the left operand is not read at the output's positions".into(),
        });
    }
    // SAFETY: `a` and the output are the same elements, read at the same positions: each is
    // read and then written by one thread (a 16-byte group by one thread in the vector path),
    // which the kernels allow; the span stays borrowed through `a_out` meanwhile.
    let a = unsafe { DeviceSpan::<T>::from_raw(a_out.addr(), a_out.len()) };
    binary_nd::<T>(stream, op, desc, a, b, a_out)
}

/// A value of `T` whose bits are zero (the scalar argument when the right operand is a span).
fn a_zero<T: Element>() -> T {
    T::from_i64(0)
}

fn grid_stride_config(stream: &Stream, n: usize) -> LaunchConfig {
    elementwise_config(stream, n, 1, false)
}

/// Queues `out[i] = (a[i] op b[i]) as u8` for every element of `out` on `stream`.
pub fn compare<T: Element>(
    stream: &Stream,
    op: CompareOp,
    a: DeviceSpan<'_, T>,
    b: DeviceSpan<'_, T>,
    out: DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let n = out.len();
    same_len(op.name(), n, a.len())?;
    same_len(op.name(), n, b.len())?;
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(
        stream.context(),
        &images::ELEMENTWISE,
        T::compare_kernel(op),
    )?;
    let (mut a, mut b, mut out, mut n64) = (a.addr(), b.addr(), out.addr(), n as u64);
    let mut params: [*mut c_void; 4] = [
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
    ];
    // SAFETY: the parameters match `<op>_<T>(const T*, const T*, uint8_t*, uint64_t)`; the
    // spans hold `n` elements each (checked).
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `out[i] = cond[i] ? a[i] : b[i]` for the `cond.len()` elements of `elem_bytes` bytes
/// (1, 2, 4 or 8) that `a`, `b` and `out` hold as bytes, on `stream`.
pub fn select(
    stream: &Stream,
    elem_bytes: usize,
    cond: DeviceSpan<'_, u8>,
    a: DeviceSpan<'_, u8>,
    b: DeviceSpan<'_, u8>,
    out: DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let n = cond.len();
    let bytes = n.saturating_mul(elem_bytes);
    same_len("where", bytes, a.len())?;
    same_len("where", bytes, b.len())?;
    same_len("where", bytes, out.len())?;
    if [a.addr(), b.addr(), out.addr()]
        .iter()
        .any(|p| !p.is_multiple_of(elem_bytes.max(1) as u64))
    {
        return Err(Error::Unsupported {
            op: "where",
            reason: format!("operands not aligned to {elem_bytes} bytes"),
        });
    }
    let name = match elem_bytes {
        1 => "where_e1",
        2 => "where_e2",
        4 => "where_e4",
        8 => "where_e8",
        _ => {
            return Err(crate::Error::Unsupported {
                op: "where",
                reason: format!("element size {elem_bytes}"),
            });
        }
    };
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let (mut c, mut a, mut b, mut out, mut n64) =
        (cond.addr(), a.addr(), b.addr(), out.addr(), n as u64);
    let mut params: [*mut c_void; 5] = [
        (&raw mut c).cast(),
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
    ];
    // SAFETY: the parameters match `where_eN(const uint8_t*, const T*, const T*, T*,
    // uint64_t)`; the spans hold `n` elements each, aligned (checked).
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// The kernel `<cmp>_nd_<T>`.
fn compare_nd_kernel_name<T: Element>(op: CompareOp) -> &'static str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| nd_names(&CompareOp::ALL.map(CompareOp::name)));
    // `CompareOp::ALL` lists every variant, so every `op` has a position.
    let pos = CompareOp::ALL
        .iter()
        .position(|&o| o == op)
        .expect("listed");
    names[pos * ND_TYPES.len() + T::TYPE_CODE as usize]
}

/// Queues `out[i] = a[offset_a(i)] op (b[offset_b(i)] or the scalar)` as bools (0 or 1) for
/// every output position `i` of `desc` on `stream`: operands read in place through their
/// strides (0 where broadcast), the output contiguous. Fails before launching when `desc`
/// reaches outside a span or does not match `out`.
pub fn compare_nd<T: Element>(
    stream: &Stream,
    op: CompareOp,
    desc: &BinaryNd,
    a: DeviceSpan<'_, T>,
    b: Rhs<DeviceSpan<'_, T>, T>,
    out: DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let b_len = match b {
        Rhs::Tensor(s) => Some(s.len()),
        Rhs::Scalar(_) => None,
    };
    desc.check(a.len(), b_len, out.len())?;
    let n = desc.numel();
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(
        stream.context(),
        &images::ELEMENTWISE,
        compare_nd_kernel_name::<T>(op),
    )?;
    let (mut pa, mut pb, mut scalar) = match b {
        Rhs::Tensor(s) => (a.addr(), s.addr(), a_zero::<T>()),
        Rhs::Scalar(v) => (a.addr(), 0u64, v),
    };
    let (mut po, mut n32, mut d) = (out.addr(), n as u32, *desc);
    let mut params: [*mut c_void; 6] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut scalar).cast(),
        (&raw mut po).cast(),
        (&raw mut n32).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `<cmp>_nd_<T>(const T*, const T*, T, uint8_t*, uint32_t,
    // GxBinaryNd)` (`BinaryNd` is `#[repr(C)]` with the kernel struct's layout); `desc.check`
    // put every element read inside the spans and the `n` written inside `out`, which are
    // valid until the launch completes.
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `out[i] = cond[c(i)] ? a[a(i)] : b[b(i)]` for every output position `i` of `desc`,
/// for elements of `elem_bytes` bytes (1, 2, 4 or 8) held as bytes: the condition and the
/// values read in place through their strides; a value given as [`Rhs::Scalar`] (its bits,
/// little-endian in the low bytes) stands for every position. Fails before launching when
/// `desc` reaches outside a span or does not match `out`, or the spans are not aligned to the
/// element size.
pub fn where_nd(
    stream: &Stream,
    elem_bytes: usize,
    desc: &WhereNd,
    cond: DeviceSpan<'_, u8>,
    a: Rhs<DeviceSpan<'_, u8>, u64>,
    b: Rhs<DeviceSpan<'_, u8>, u64>,
    out: DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let name = match elem_bytes {
        1 => "where_nd_e1",
        2 => "where_nd_e2",
        4 => "where_nd_e4",
        8 => "where_nd_e8",
        _ => {
            return Err(Error::Unsupported {
                op: "where",
                reason: format!("element size {elem_bytes}"),
            });
        }
    };
    let elems = |r: &Rhs<DeviceSpan<'_, u8>, u64>| match r {
        Rhs::Tensor(s) => Some(s.len() / elem_bytes),
        Rhs::Scalar(_) => None,
    };
    desc.check(cond.len(), elems(&a), elems(&b), out.len() / elem_bytes)?;
    let aligned = |addr: u64| addr.is_multiple_of(elem_bytes as u64);
    let value_aligned = |r: &Rhs<DeviceSpan<'_, u8>, u64>| match r {
        Rhs::Tensor(s) => aligned(s.addr()),
        Rhs::Scalar(_) => true,
    };
    if !aligned(out.addr()) || !value_aligned(&a) || !value_aligned(&b) {
        return Err(Error::Unsupported {
            op: "where",
            reason: format!("operands not aligned to {elem_bytes} bytes"),
        });
    }
    let n = desc.numel();
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, name)?;
    let split = |r: Rhs<DeviceSpan<'_, u8>, u64>| match r {
        Rhs::Tensor(s) => (s.addr(), 0u64),
        Rhs::Scalar(bits) => (0u64, bits),
    };
    let ((mut pa, mut a_bits), (mut pb, mut b_bits)) = (split(a), split(b));
    let (mut pc, mut po, mut n32, mut d) = (cond.addr(), out.addr(), n as u32, *desc);
    let mut params: [*mut c_void; 8] = [
        (&raw mut pc).cast(),
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut a_bits).cast(),
        (&raw mut b_bits).cast(),
        (&raw mut po).cast(),
        (&raw mut n32).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `where_nd_eN(const uint8_t*, const T*, const T*, uint64_t,
    // uint64_t, T*, uint32_t, GxWhereNd)` (`WhereNd` is `#[repr(C)]` with the kernel struct's
    // layout); `desc.check` put every element read inside the spans (a null pointer stands for
    // a scalar, never read) and the `n` written inside `out`, all aligned to the element size.
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `out[i] = value` for every element of `out` on `stream`.
pub fn fill<T: Element>(stream: &Stream, out: DeviceSpanMut<'_, T>, value: T) -> Result<()> {
    let (n, out) = (out.len(), out.addr());
    if n == 0 {
        return Ok(());
    }
    let b = value_bits(value);
    // SAFETY: the span holds `n` elements.
    if unsafe { tape_push(stream, TAPE_FILL, 0, T::TYPE_CODE, n, 0, b, out)? } {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::ELEMENTWISE, T::FILL_KERNEL)?;
    let vec_ok = aligned16(&[out]);
    let config = elementwise_config(stream, n, size_of::<T>(), vec_ok);
    let (mut out, mut value, mut n64, mut v) = (out, value, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 4] = [
        (&raw mut out).cast(),
        (&raw mut value).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `fill_<T>(T*, T, uint64_t, int)` (`T` has the same size and
    // layout as the kernel's element type); the span holds `n` elements.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

fn elem_suffix(op: &'static str, elem_bytes: usize) -> Result<&'static str> {
    Ok(match (op, elem_bytes) {
        ("strided_copy", 1) => "strided_copy_e1",
        ("strided_copy", 2) => "strided_copy_e2",
        ("strided_copy", 4) => "strided_copy_e4",
        ("strided_copy", 8) => "strided_copy_e8",
        ("strided_copy", 16) => "strided_copy_e16",
        ("strided_copy32", 1) => "strided_copy32_e1",
        ("strided_copy32", 2) => "strided_copy32_e2",
        ("strided_copy32", 4) => "strided_copy32_e4",
        ("strided_copy32", 8) => "strided_copy32_e8",
        ("strided_copy32", 16) => "strided_copy32_e16",
        ("strided_copy_rev", 1) => "strided_copy_rev_e1",
        ("strided_copy_rev", 2) => "strided_copy_rev_e2",
        ("strided_copy_rev", 4) => "strided_copy_rev_e4",
        ("strided_copy_rev", 8) => "strided_copy_rev_e8",
        ("strided_copy32_rev", 1) => "strided_copy32_rev_e1",
        ("strided_copy32_rev", 2) => "strided_copy32_rev_e2",
        ("strided_copy32_rev", 4) => "strided_copy32_rev_e4",
        ("strided_copy32_rev", 8) => "strided_copy32_rev_e8",
        ("transpose", 1) => "transpose_e1",
        ("transpose", 2) => "transpose_e2",
        ("transpose", 4) => "transpose_e4",
        ("transpose", 8) => "transpose_e8",
        ("transpose", 16) => "transpose_e16",
        _ => {
            return Err(crate::Error::Unsupported {
                op,
                reason: format!("element size {elem_bytes}"),
            });
        }
    })
}

/// Queues a strided copy of `desc.numel()` elements of `elem_bytes` bytes from `src` to `dst`
/// (both as bytes). Fails before launching when the descriptor reaches outside a span. The
/// destination indices should not repeat (otherwise which write lands is unspecified).
pub fn strided_copy(
    stream: &Stream,
    elem_bytes: usize,
    src: DeviceSpan<'_, u8>,
    dst: DeviceSpanMut<'_, u8>,
    desc: &crate::StridedCopy,
) -> Result<()> {
    let n = desc.numel();
    if n == 0 {
        return Ok(());
    }
    let (se, de) = desc.extents();
    if se.saturating_mul(elem_bytes) > src.len() || de.saturating_mul(elem_bytes) > dst.len() {
        return Err(Error::LengthMismatch {
            op: "strided_copy",
            expected: se.max(de).saturating_mul(elem_bytes),
            got: src.len().min(dst.len()),
        });
    }
    if !src.is_aligned_to(elem_bytes as u64) || !dst.is_aligned_to(elem_bytes as u64) {
        return Err(Error::Unsupported {
            op: "strided_copy",
            reason: format!("operands not aligned to {elem_bytes} bytes"),
        });
    }
    let (src, dst) = (src.addr(), dst.addr());
    // The same bytes in the widest elements the layout allows (bounds were checked above on
    // the original descriptor, which covers the same bytes): rows read backwards in 16-byte
    // vectors reversed by the kernel, or widened elements.
    if let Some(rev) = desc.reversed_rows(elem_bytes, src, dst) {
        let names = (
            elem_suffix("strided_copy32_rev", elem_bytes)?,
            elem_suffix("strided_copy_rev", elem_bytes)?,
        );
        return launch_strided_copy(stream, &rev, names, src, dst);
    }
    let (desc, elem_bytes) = desc.widened(elem_bytes, src, dst);
    // Runs first: most copies widen to 16-byte elements, which have none, and the 32-bit form
    // is built once, here or in `launch_strided_copy`.
    if let Some(runs) = desc.row_runs(elem_bytes, dst)
        && let Some(d32) = desc.to_32()
    {
        return launch_row_runs(stream, elem_bytes, d32, runs, src, dst);
    }
    let names = (
        elem_suffix("strided_copy32", elem_bytes)?,
        elem_suffix("strided_copy", elem_bytes)?,
    );
    launch_strided_copy(stream, &desc, names, src, dst)
}

/// Launches `strided_copy32_rows_e<elem_bytes>` (see [`crate::copy::RowRuns`]) between device
/// addresses `src` and `dst` (checked by the caller to hold every element `d` reaches).
fn launch_row_runs(
    stream: &Stream,
    elem_bytes: usize,
    mut d: crate::copy::StridedCopy32,
    runs: crate::copy::RowRuns,
    src: u64,
    dst: u64,
) -> Result<()> {
    let name = match elem_bytes {
        1 => "strided_copy32_rows_e1",
        2 => "strided_copy32_rows_e2",
        4 => "strided_copy32_rows_e4",
        _ => "strided_copy32_rows_e8",
    };
    let kernel = Kernel::get(stream.context(), &images::COPY, name)?;
    let threads = 256u64;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 16;
    let blocks = u64::from(runs.items).div_ceil(threads).clamp(1, cap);
    let config = LaunchConfig::linear(blocks as u32, threads as u32);
    let (mut src, mut dst) = (src, dst);
    let (mut items, mut chunks, mut magic, mut shift, mut vec) = (
        runs.items,
        runs.chunks,
        runs.magic,
        runs.shift,
        i32::from(runs.vec),
    );
    let mut params: [*mut c_void; 8] = [
        (&raw mut src).cast(),
        (&raw mut dst).cast(),
        (&raw mut items).cast(),
        (&raw mut d).cast(),
        (&raw mut chunks).cast(),
        (&raw mut magic).cast(),
        (&raw mut shift).cast(),
        (&raw mut vec).cast(),
    ];
    // SAFETY: the parameters match `strided_copy32_rows_eN(const T*, T*, uint32_t,
    // GxStrided32, uint32_t, uint32_t, uint32_t, int)`; the runs cover exactly the
    // descriptor's elements, every one of which lies in the spans (checked by the caller), and
    // `vec` is set only where every whole run's destination is 16-byte aligned.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Launches the strided copy `desc` between device addresses `src` and `dst` (checked by the
/// caller to hold every element it reaches): kernel `names.0` (32-bit indices) when the
/// descriptor allows, else `names.1`.
fn launch_strided_copy(
    stream: &Stream,
    desc: &crate::StridedCopy,
    names: (&'static str, &'static str),
    src: u64,
    dst: u64,
) -> Result<()> {
    let n = desc.numel();
    let threads = 256u64;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 16;
    let blocks = (n as u64).div_ceil(threads).clamp(1, cap);
    let config = LaunchConfig::linear(blocks as u32, threads as u32);
    let (mut src, mut dst) = (src, dst);
    if let Some(mut d32) = desc.to_32() {
        let kernel = Kernel::get(stream.context(), &images::COPY, names.0)?;
        let mut n32 = n as u32;
        let mut params: [*mut c_void; 4] = [
            (&raw mut src).cast(),
            (&raw mut dst).cast(),
            (&raw mut n32).cast(),
            (&raw mut d32).cast(),
        ];
        // SAFETY: the parameters match `strided_copy32_*(const T*, T*, uint32_t,
        // GxStrided32)` (`StridedCopy32` is `#[repr(C)]` with the kernel struct's layout);
        // every index the descriptor reaches lies in the spans (checked by the caller).
        unsafe { kernel.launch(stream, config, &mut params)? };
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &images::COPY, names.1)?;
    let (mut n64, mut d) = (n as u64, *desc);
    let mut params: [*mut c_void; 4] = [
        (&raw mut src).cast(),
        (&raw mut dst).cast(),
        (&raw mut n64).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `strided_copy_*(const T*, T*, uint64_t, GxStrided)` (the
    // descriptor is `#[repr(C)]` with the kernel struct's layout); every index the descriptor
    // reaches lies in the spans (checked by the caller).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `out[b][c][r] = in[b][r][c]` for `batch` matrices of `rows` x `cols` elements of
/// `elem_bytes` bytes; input rows are `ld_in` elements apart and matrices `batch_in` apart; the
/// output is dense (`batch_out` apart).
///
/// Both are spans of bytes; fails before launching when the shapes reach outside them.
#[allow(clippy::too_many_arguments)]
pub fn transpose(
    stream: &Stream,
    elem_bytes: usize,
    input: DeviceSpan<'_, u8>,
    out: DeviceSpanMut<'_, u8>,
    batch: usize,
    rows: usize,
    cols: usize,
    ld_in: usize,
    batch_in: usize,
    batch_out: usize,
) -> Result<()> {
    if batch == 0 || rows == 0 || cols == 0 {
        return Ok(());
    }
    // The last element each side touches, +1, in elements (saturating: too large is refused).
    let reach = |batch_stride: usize, row_stride: usize, last_row: usize, last_col: usize| {
        (batch - 1)
            .saturating_mul(batch_stride)
            .saturating_add(last_row.saturating_mul(row_stride))
            .saturating_add(last_col)
            .saturating_add(1)
            .saturating_mul(elem_bytes)
    };
    let (need_in, need_out) = (
        reach(batch_in, ld_in, rows - 1, cols - 1),
        reach(batch_out, rows, cols - 1, rows - 1),
    );
    if need_in > input.len() || need_out > out.len() {
        return Err(Error::LengthMismatch {
            op: "transpose",
            expected: need_in.max(need_out),
            got: input.len().min(out.len()),
        });
    }
    if !input.is_aligned_to(elem_bytes as u64) || !out.is_aligned_to(elem_bytes as u64) {
        return Err(Error::Unsupported {
            op: "transpose",
            reason: format!("operands not aligned to {elem_bytes} bytes"),
        });
    }
    let (input, out) = (input.addr(), out.addr());
    if batch > 65_535 {
        return Err(crate::Error::Unsupported {
            op: "transpose",
            reason: format!("batch {batch} > 65535"),
        });
    }
    let kernel = Kernel::get(
        stream.context(),
        &images::COPY,
        elem_suffix("transpose", elem_bytes)?,
    )?;
    let gx = cols.div_ceil(32);
    let gy = rows.div_ceil(32);
    if gy > 65_535 || gx > (1 << 31) - 1 {
        return Err(crate::Error::Unsupported {
            op: "transpose",
            reason: format!("{rows} x {cols} is too large"),
        });
    }
    let config = LaunchConfig {
        grid: (gx as u32, gy as u32, batch as u32),
        block: (32, 8, 1),
        shared_bytes: 0,
    };
    let (mut i, mut o) = (input, out);
    let (mut r, mut c, mut ld, mut bi, mut bo) = (
        rows as i64,
        cols as i64,
        ld_in as i64,
        batch_in as i64,
        batch_out as i64,
    );
    let mut params: [*mut c_void; 7] = [
        (&raw mut i).cast(),
        (&raw mut o).cast(),
        (&raw mut r).cast(),
        (&raw mut c).cast(),
        (&raw mut ld).cast(),
        (&raw mut bi).cast(),
        (&raw mut bo).cast(),
    ];
    // SAFETY: the parameters match `transpose_eN(const T*, T*, int64 x5)`; every element the
    // shapes reach lies in the spans (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues a conversion of `n` contiguous elements from `src_kind` in `src` to `dst_kind` in
/// `dst` (both as bytes; semantics: [`crate::copy::cast`], the CPU twin). Bools are read as
/// any non-zero byte being true.
pub fn cast(
    stream: &Stream,
    src_kind: crate::DType,
    src: DeviceSpan<'_, u8>,
    dst_kind: crate::DType,
    dst: DeviceSpanMut<'_, u8>,
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let fits = |kind: crate::DType, len: usize, addr_ok: bool| {
        n.checked_mul(kind.size()).is_some_and(|b| b <= len) && addr_ok
    };
    if !fits(
        src_kind,
        src.len(),
        src.is_aligned_to(src_kind.size() as u64),
    ) || !fits(
        dst_kind,
        dst.len(),
        dst.is_aligned_to(dst_kind.size() as u64),
    ) {
        return Err(Error::LengthMismatch {
            op: "cast",
            expected: n,
            got: (src.len() / src_kind.size()).min(dst.len() / dst_kind.size()),
        });
    }
    let (src, dst) = (src.addr(), dst.addr());
    let name = cast_kernel_name(src_kind, dst_kind);
    let kernel = Kernel::get(stream.context(), &images::COPY, name)?;
    let threads = 256u64;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 32;
    let blocks = (n as u64).div_ceil(threads).clamp(1, cap);
    let vec_ok = src.is_multiple_of(4 * src_kind.size() as u64)
        && dst.is_multiple_of(4 * dst_kind.size() as u64);
    let (mut s, mut d, mut n64, mut v) = (src, dst, n as u64, i32::from(vec_ok));
    let mut params: [*mut c_void; 4] = [
        (&raw mut s).cast(),
        (&raw mut d).cast(),
        (&raw mut n64).cast(),
        (&raw mut v).cast(),
    ];
    // SAFETY: the parameters match `cast_S_D(const S*, D*, uint64_t, int)`; the spans hold `n`
    // elements of their kinds, aligned (checked).
    unsafe {
        kernel.launch(
            stream,
            LaunchConfig::linear(blocks as u32, threads as u32),
            &mut params,
        )?
    };
    Ok(())
}

/// The kernel name `cast_<src>_<dst>` as a static string.
fn cast_kernel_name(s: crate::DType, d: crate::DType) -> &'static str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut v = Vec::with_capacity(100);
        for s in crate::DType::ALL {
            for d in crate::DType::ALL {
                v.push(&*Box::leak(
                    format!("cast_{}_{}", s.kernel_name(), d.kernel_name()).into_boxed_str(),
                ));
            }
        }
        v
    });
    // `DType::ALL` lists every variant, so every dtype has a position.
    let pos = |k: crate::DType| {
        crate::DType::ALL
            .iter()
            .position(|&x| x == k)
            .expect("listed")
    };
    names[pos(s) * 10 + pos(d)]
}
