//! Launchers for the CUDA kernels, on raw device addresses.
//!
//! Every launcher is `unsafe`: the caller vouches that the addresses are live device memory of
//! the stream's device, large enough for `n` elements, and kept alive until the work completes.

use std::ffi::c_void;

use genesis_cuda::{DeviceSpan, DeviceSpanMut, Kernel, LaunchConfig, Stream};

use crate::{BinaryNd, BinaryOp, CompareOp, Element, Result, Rhs, UnaryOp, images};

/// Threads per block of the elementwise kernels (`GX_THREADS` in `elementwise.cu`).
pub const ELEMENTWISE_THREADS: u32 = 256;
/// 16-byte vectors per thread per tile (`GX_UNROLL` in `elementwise.cu`).
pub const ELEMENTWISE_UNROLL: u64 = 4;
/// 16-byte vectors per thread per tile of the unary kernels (`GX_UNARY_UNROLL`).
pub const UNARY_UNROLL: u64 = 1;

fn elementwise_config(stream: &Stream, n: usize, elem_bytes: usize, vec_ok: bool) -> LaunchConfig {
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

fn aligned16(ptrs: &[u64]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

/// Queues `out[i] = a[i] + b[i]` for `i < n` on `stream`. `out` may be `a` or `b` (in place).
///
/// # Safety
///
/// As for [`binary`].
pub unsafe fn add<T: Element>(stream: &Stream, a: u64, b: u64, out: u64, n: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { binary::<T>(stream, BinaryOp::Add, a, b, out, n) }
}

/// Queues `out[i] = op(a[i], b[i])` for `i < n` on `stream`. `out` may be `a` or `b` (in
/// place). Fails before launching when `T` does not support `op` (integer division).
///
/// # Safety
///
/// `a`, `b` and `out` must be device addresses on the stream's device, each valid for `n`
/// elements of `T` (and suitably aligned for `T`) until the launch completes.
pub unsafe fn binary<T: Element>(
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
    // SAFETY: forwarded contract.
    if unsafe { tape_push(stream, TAPE_BINARY, op as u32, T::TYPE_CODE, n, a, b, out)? } {
        return Ok(());
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

/// Queues `out[i] = op(a[i])` for `i < n` on `stream`. `out` may be `a` (in place). Fails
/// before launching when `T` does not support `op` (transcendental ops on integers).
///
/// # Safety
///
/// `a` and `out` must be device addresses on the stream's device, each valid for `n` elements
/// of `T` (and suitably aligned for `T`) until the launch completes.
pub unsafe fn unary<T: Element>(
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

/// The bits of a value of at most 8 bytes, zero-extended, as a tape record carries them.
fn value_bits<T: Element>(value: T) -> u64 {
    let mut bits = [0u8; 8];
    // SAFETY: `T` is a plain value of at most 8 bytes (f32, f16, bf16, i32, i64), read as bytes.
    let raw =
        unsafe { std::slice::from_raw_parts((&raw const value).cast::<u8>(), size_of::<T>()) };
    bits[..raw.len()].copy_from_slice(raw);
    u64::from_ne_bytes(bits)
}

/// The kernel `<op>_nd_<T>`.
fn nd_kernel_name<T: Element>(op: BinaryOp) -> &'static str {
    use std::sync::OnceLock;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let types = ["f32", "f16", "bf16", "i32", "i64"];
        BinaryOp::ALL
            .iter()
            .flat_map(|op| {
                types
                    .iter()
                    .map(move |t| &*Box::leak(format!("{}_nd_{t}", op.name()).into_boxed_str()))
            })
            .collect()
    });
    let pos = BinaryOp::ALL.iter().position(|&o| o == op).expect("listed");
    names[pos * 5 + T::TYPE_CODE as usize]
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
    if let Some((a_off, b_off)) = desc.contiguous() {
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

/// A value of `T` whose bits are zero (the scalar argument when the right operand is a span).
fn a_zero<T: Element>() -> T {
    T::from_i64(0)
}

fn grid_stride_config(stream: &Stream, n: usize) -> LaunchConfig {
    elementwise_config(stream, n, 1, false)
}

/// Queues `out[i] = (a[i] op b[i]) as u8` for `i < n` on `stream`.
///
/// # Safety
///
/// `a` and `b` must be device addresses on the stream's device valid for `n` elements of `T`,
/// `out` for `n` bytes, until the launch completes.
pub unsafe fn compare<T: Element>(
    stream: &Stream,
    op: CompareOp,
    a: u64,
    b: u64,
    out: u64,
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(
        stream.context(),
        &images::ELEMENTWISE,
        T::compare_kernel(op),
    )?;
    let (mut a, mut b, mut out, mut n64) = (a, b, out, n as u64);
    let mut params: [*mut c_void; 4] = [
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
    ];
    // SAFETY: the parameters match `<op>_<T>(const T*, const T*, uint8_t*, uint64_t)`; the
    // caller guarantees the addresses.
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `out[i] = cond[i] ? a[i] : b[i]` for `i < n` elements of `elem_bytes` bytes (1, 2,
/// 4 or 8) on `stream`.
///
/// # Safety
///
/// `cond` must be valid for `n` bytes, `a`, `b` and `out` for `n` elements, all device memory
/// of the stream's device (aligned for the element size) until the launch completes.
pub unsafe fn select(
    stream: &Stream,
    elem_bytes: usize,
    cond: u64,
    a: u64,
    b: u64,
    out: u64,
    n: usize,
) -> Result<()> {
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
    let (mut c, mut a, mut b, mut out, mut n64) = (cond, a, b, out, n as u64);
    let mut params: [*mut c_void; 5] = [
        (&raw mut c).cast(),
        (&raw mut a).cast(),
        (&raw mut b).cast(),
        (&raw mut out).cast(),
        (&raw mut n64).cast(),
    ];
    // SAFETY: the parameters match `where_eN(const uint8_t*, const T*, const T*, T*,
    // uint64_t)`; the caller guarantees the addresses.
    unsafe { kernel.launch(stream, grid_stride_config(stream, n), &mut params)? };
    Ok(())
}

/// Queues `out[i] = value` for `i < n` on `stream`.
///
/// # Safety
///
/// `out` must be a device address on the stream's device valid for `n` elements of `T` until
/// the launch completes.
pub unsafe fn fill<T: Element>(stream: &Stream, out: u64, value: T, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let b = value_bits(value);
    // SAFETY: forwarded contract.
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
    // layout as the kernel's element type); the caller guarantees the address.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

fn elem_suffix(op: &'static str, elem_bytes: usize) -> Result<&'static str> {
    Ok(match (op, elem_bytes) {
        ("strided_copy", 1) => "strided_copy_e1",
        ("strided_copy", 2) => "strided_copy_e2",
        ("strided_copy", 4) => "strided_copy_e4",
        ("strided_copy", 8) => "strided_copy_e8",
        ("strided_copy32", 1) => "strided_copy32_e1",
        ("strided_copy32", 2) => "strided_copy32_e2",
        ("strided_copy32", 4) => "strided_copy32_e4",
        ("strided_copy32", 8) => "strided_copy32_e8",
        ("transpose", 1) => "transpose_e1",
        ("transpose", 2) => "transpose_e2",
        ("transpose", 4) => "transpose_e4",
        ("transpose", 8) => "transpose_e8",
        _ => {
            return Err(crate::Error::Unsupported {
                op,
                reason: format!("element size {elem_bytes}"),
            });
        }
    })
}

/// Queues a strided copy of `desc.numel()` elements of `elem_bytes` bytes from `src` to `dst`.
///
/// # Safety
///
/// `src` and `dst` must be device memory of the stream's device covering every index the
/// descriptor reaches (see [`crate::StridedCopy::extents`]), valid until the copy completes, and
/// the destination indices must not repeat (no two elements written to the same place).
pub unsafe fn strided_copy(
    stream: &Stream,
    elem_bytes: usize,
    src: u64,
    dst: u64,
    desc: &crate::StridedCopy,
) -> Result<()> {
    let n = desc.numel();
    if n == 0 {
        return Ok(());
    }
    let threads = 256u64;
    let cap = u64::from(stream.context().multiprocessors().max(1)) * 16;
    let blocks = (n as u64).div_ceil(threads).clamp(1, cap);
    let config = LaunchConfig::linear(blocks as u32, threads as u32);
    let (mut src, mut dst) = (src, dst);
    if let Some(mut d32) = desc.to_32() {
        let kernel = Kernel::get(
            stream.context(),
            &images::COPY,
            elem_suffix("strided_copy32", elem_bytes)?,
        )?;
        let mut n32 = n as u32;
        let mut params: [*mut c_void; 4] = [
            (&raw mut src).cast(),
            (&raw mut dst).cast(),
            (&raw mut n32).cast(),
            (&raw mut d32).cast(),
        ];
        // SAFETY: the parameters match `strided_copy32_eN(const T*, T*, uint32_t, GxStrided32)`
        // (`StridedCopy32` is `#[repr(C)]` with the kernel struct's layout); the caller vouches
        // for the memory.
        unsafe { kernel.launch(stream, config, &mut params)? };
        return Ok(());
    }
    let kernel = Kernel::get(
        stream.context(),
        &images::COPY,
        elem_suffix("strided_copy", elem_bytes)?,
    )?;
    let (mut n64, mut d) = (n as u64, *desc);
    let mut params: [*mut c_void; 4] = [
        (&raw mut src).cast(),
        (&raw mut dst).cast(),
        (&raw mut n64).cast(),
        (&raw mut d).cast(),
    ];
    // SAFETY: the parameters match `strided_copy_eN(const T*, T*, uint64_t, GxStrided)` (the
    // descriptor is `#[repr(C)]` with the kernel struct's layout); the caller vouches for the
    // memory.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues `out[b][c][r] = in[b][r][c]` for `batch` matrices of `rows` x `cols` elements of
/// `elem_bytes` bytes; input rows are `ld_in` elements apart and matrices `batch_in` apart; the
/// output is dense (`batch_out` apart).
///
/// # Safety
///
/// Both ranges must be device memory of the stream's device large enough for the shapes given,
/// valid until the kernel completes, and must not overlap.
#[allow(clippy::too_many_arguments)]
pub unsafe fn transpose(
    stream: &Stream,
    elem_bytes: usize,
    input: u64,
    out: u64,
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
    // SAFETY: the parameters match `transpose_eN(const T*, T*, int64 x5)`; the caller vouches
    // for the memory.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Queues a conversion of `n` contiguous elements from `src_kind` at `src` to `dst_kind` at
/// `dst` (semantics: [`crate::copy::cast`], the CPU twin).
///
/// # Safety
///
/// `src` must hold `n` elements of `src_kind` (bools as 0 or 1) and `dst` room for `n` of
/// `dst_kind`, both device memory of the stream's device, valid until the kernel completes.
pub unsafe fn cast(
    stream: &Stream,
    src_kind: crate::DType,
    src: u64,
    dst_kind: crate::DType,
    dst: u64,
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
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
    // SAFETY: the parameters match `cast_S_D(const S*, D*, uint64_t, int)`; the caller vouches for
    // the memory.
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
    let pos = |k: crate::DType| {
        crate::DType::ALL
            .iter()
            .position(|&x| x == k)
            .expect("listed")
    };
    names[pos(s) * 10 + pos(d)]
}
