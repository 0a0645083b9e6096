//! The inclusive prefix sum and product along one axis, `cumsum` and `cumprod`
//! (`kernels/scan.cu`), and their CPU twins.
//!
//! A contiguous array is seen as `[outer, r, inner]` (as the reductions see it) and scanned
//! along `r`; the output has the input's shape. Floating types accumulate in f32 on the GPU
//! (f64 in f64) and are written in their own type; integers accumulate in i64 with wrapping and
//! are written as i64 (PyTorch's rule: the cumsum and cumprod of i32 are i64). The twins compute
//! integers exactly as the kernels do; `cumsum`'s sums floats in f64 and `cumprod`'s multiplies
//! them in the kernels' accumulator type in order, so float results agree within the rounding of
//! each running sum or product in the accumulator type (the kernels combine in another order).
//!
//! Speed: along the last axis (`inner == 1`) with a row for every multiprocessor, one block a
//! row reads the input once and writes the output once; a few long rows are cut into chunks
//! whose sums are computed first (the input is read twice). Along another axis, a thread a
//! column scans in order: fast when the columns fill the device, slow for a few long ones.

use crate::{Element, Error, ReduceShape, Result};

/// Threads per block of the scan kernels (`SC_THREADS`).
#[cfg(feature = "cuda")]
const THREADS: usize = 256;
/// Elements of one tile of the rows kernel (`SC_TILE`).
const TILE: usize = 256 * 8;

/// A scan of the `scan` kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanOp {
    /// Inclusive prefix sums (`cumsum`).
    Sum,
    /// Inclusive prefix products (`cumprod`).
    Prod,
}

impl ScanOp {
    /// The operation's name (`"cumsum"`, `"cumprod"`).
    pub const fn name(self) -> &'static str {
        match self {
            ScanOp::Sum => "cumsum",
            ScanOp::Prod => "cumprod",
        }
    }
}

/// The name of the output type of `cumsum` (and `cumprod`) of `T`: `T`'s for floats, `"i64"`
/// for integers.
pub fn cumsum_type<T: Element>() -> &'static str {
    if T::IS_FLOAT { T::NAME } else { "i64" }
}

/// CPU twin of `op`: [`cumsum`] or [`cumprod`].
pub fn scan<T: Element, O: Element>(
    op: ScanOp,
    input: &[T],
    s: ReduceShape,
    out: &mut [O],
) -> Result<()> {
    match op {
        ScanOp::Sum => cumsum(input, s, out),
        ScanOp::Prod => cumprod(input, s, out),
    }
}

/// CPU twin: the inclusive prefix products of `input` (`[outer, r, inner]`, contiguous) along
/// `r` into `out` (same length, of type [`cumsum_type`]): integers in i64, wrapping; floats
/// multiplied in order in the kernels' accumulator (f64 for f64, f32 for the others) and each
/// running product written in `O`. Nothing is written on error.
pub fn cumprod<T: Element, O: Element>(input: &[T], s: ReduceShape, out: &mut [O]) -> Result<()> {
    // No elements: nothing to do (`outer` or `inner` may be huge when another factor is 0).
    if check::<T, O>(ScanOp::Prod, s, input.len(), out.len())? == 0 {
        return Ok(());
    }
    let wide = size_of::<T>() == 8;
    for o in 0..s.outer {
        for c in 0..s.inner {
            let (mut f64p, mut f32p, mut ip) = (1.0f64, 1.0f32, 1i64);
            for k in 0..s.r {
                let at = (o * s.r + k) * s.inner + c;
                out[at] = if !T::IS_FLOAT {
                    ip = ip.wrapping_mul(input[at].to_i64());
                    O::from_i64(ip)
                } else if wide {
                    f64p *= input[at].to_f64();
                    O::from_f64(f64p)
                } else {
                    // f32, f16 and bf16 are exact in f32.
                    f32p *= input[at].to_f64() as f32;
                    O::from_f64(f64::from(f32p))
                };
            }
        }
    }
    Ok(())
}

/// CPU twin: the inclusive prefix sums of `input` (`[outer, r, inner]`, contiguous) along `r`
/// into `out` (same length, of type [`cumsum_type`]). Nothing is written on error.
pub fn cumsum<T: Element, O: Element>(input: &[T], s: ReduceShape, out: &mut [O]) -> Result<()> {
    if check::<T, O>(ScanOp::Sum, s, input.len(), out.len())? == 0 {
        return Ok(());
    }
    for o in 0..s.outer {
        for c in 0..s.inner {
            let mut fsum = 0.0f64;
            let mut isum = 0i64;
            for k in 0..s.r {
                let at = (o * s.r + k) * s.inner + c;
                out[at] = if T::IS_FLOAT {
                    fsum += input[at].to_f64();
                    O::from_f64(fsum)
                } else {
                    isum = isum.wrapping_add(input[at].to_i64());
                    O::from_i64(isum)
                };
            }
        }
    }
    Ok(())
}

/// Checks the types and lengths of a scan; gives its element count.
fn check<T: Element, O: Element>(
    op: ScanOp,
    s: ReduceShape,
    input_len: usize,
    out_len: usize,
) -> Result<usize> {
    let name = op.name();
    if O::NAME != cumsum_type::<T>() {
        return Err(Error::Unsupported {
            op: name,
            reason: format!(
                "the {name} of {} is {}, not {}",
                T::NAME,
                cumsum_type::<T>(),
                O::NAME
            ),
        });
    }
    let n = s.input_len().ok_or(Error::Unsupported {
        op: name,
        reason: "shape overflows".into(),
    })?;
    for len in [input_len, out_len] {
        if len != n {
            return Err(Error::LengthMismatch {
                op: name,
                expected: n,
                got: len,
            });
        }
    }
    Ok(n)
}

/// How the rows kernel splits each row: `chunks` chunks of `chunk` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanPlan {
    /// The scan's shape.
    pub shape: ReduceShape,
    /// Chunks a row (1: one block a row, one pass).
    pub chunks: usize,
    /// Elements a chunk.
    pub chunk: usize,
}

impl ScanPlan {
    /// The plan for `shape` on a device with `sms` multiprocessors: one chunk a row when there
    /// are at least 4 rows a multiprocessor (or the rows are short), otherwise chunks of at
    /// least four tiles until there are 8 blocks a multiprocessor.
    pub fn new(shape: ReduceShape, sms: usize) -> ScanPlan {
        let r = shape.r;
        let one = ScanPlan {
            shape,
            chunks: 1,
            chunk: r,
        };
        if shape.inner != 1 || r <= 4 * TILE || shape.outer >= sms.max(1) * 4 {
            return one;
        }
        let want = (sms.max(1) * 8)
            .div_ceil(shape.outer.max(1))
            .min(r.div_ceil(4 * TILE))
            .max(1);
        let chunk = r.div_ceil(want);
        ScanPlan {
            shape,
            chunks: r.div_ceil(chunk),
            chunk,
        }
    }

    /// Bytes of device workspace the scan of `T` needs (the chunk sums; none for one chunk a
    /// row).
    pub fn workspace_bytes<T: Element>(&self) -> usize {
        if self.chunks > 1 {
            // The accumulator: f32 for the narrower floats, f64 for f64, i64 for integers.
            // Saturating: a plan this large is refused by every allocation.
            self.shape
                .outer
                .saturating_mul(self.chunks)
                .saturating_mul(if T::IS_FLOAT {
                    size_of::<T>().max(4)
                } else {
                    8
                })
        } else {
            0
        }
    }
}

/// The rows, sums, carry and cols kernels of `op` for `T` (`scan_rows_f32`, `cumprod_rows_f32`,
/// ...), made once.
#[cfg(feature = "cuda")]
fn kernels<T: Element>(op: ScanOp) -> Option<[&'static str; 4]> {
    use std::sync::OnceLock;
    const TYPES: [&str; 6] = ["f32", "f16", "bf16", "i32", "i64", "f64"];
    static NAMES: OnceLock<Vec<[&'static str; 4]>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        ["scan", "cumprod"]
            .iter()
            .flat_map(|p| {
                TYPES.iter().map(move |t| {
                    ["rows", "sums", "carry", "cols"].map(|k| leak(format!("{p}_{k}_{t}")))
                })
            })
            .collect()
    });
    let t = TYPES.iter().position(|&t| t == T::NAME)?;
    let p = match op {
        ScanOp::Sum => 0,
        ScanOp::Prod => 1,
    };
    Some(names[p * TYPES.len() + t])
}

/// Queues the inclusive prefix sums of `input` (`shape`) along its axis into `out` (bytes of
/// [`cumsum_type`] elements, the input's length) on `stream`, using `workspace`
/// ([`ScanPlan::workspace_bytes`] of `ScanPlan::new(shape, sms)` bytes). Every span is checked
/// before anything is launched.
#[cfg(feature = "cuda")]
pub fn gpu_cumsum<T: Element>(
    stream: &genesis_cuda::Stream,
    input: genesis_cuda::DeviceSpan<'_, T>,
    shape: ReduceShape,
    out: genesis_cuda::DeviceSpanMut<'_, u8>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    gpu_scan(stream, ScanOp::Sum, input, shape, out, workspace)
}

/// Queues the scan `op` of `input` (`shape`) along its axis into `out` (bytes of
/// [`cumsum_type`] elements, the input's length) on `stream`, using `workspace`
/// ([`ScanPlan::workspace_bytes`] of `ScanPlan::new(shape, sms)` bytes): prefix sums as
/// [`gpu_cumsum`], or prefix products (`cumprod`: floats multiplied in f32, f64 in f64; integers
/// in i64, wrapping). Every span is checked before anything is launched.
#[cfg(feature = "cuda")]
pub fn gpu_scan<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ScanOp,
    input: genesis_cuda::DeviceSpan<'_, T>,
    shape: ReduceShape,
    out: genesis_cuda::DeviceSpanMut<'_, u8>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let name = op.name();
    let names = kernels::<T>(op).ok_or_else(|| Error::Unsupported {
        op: name,
        reason: format!("element type {}", T::NAME),
    })?;
    let n = shape.input_len().ok_or(Error::Unsupported {
        op: name,
        reason: "shape overflows".into(),
    })?;
    let out_elem = if T::IS_FLOAT { size_of::<T>() } else { 8 };
    let short =
        |op: &'static str, expected: usize, got: usize| Error::LengthMismatch { op, expected, got };
    if input.len() < n {
        return Err(short(name, n, input.len()));
    }
    if out.len() < n.saturating_mul(out_elem) {
        return Err(short(name, n.saturating_mul(out_elem), out.len()));
    }
    let plan = ScanPlan::new(shape, stream.context().multiprocessors() as usize);
    let need = plan.workspace_bytes::<T>();
    if workspace.len() < need {
        return Err(short(name, need, workspace.len()));
    }
    if n == 0 {
        return Ok(());
    }
    let ctx = stream.context();
    let (mut pin, mut pout, mut pws) = (input.addr(), out.addr(), workspace.addr());
    let (mut outer, mut r, mut inner) = (shape.outer as u64, shape.r as u64, shape.inner as u64);
    if shape.inner > 1 {
        let kernel = Kernel::get(ctx, &crate::images::SCAN, names[3])?;
        let blocks = (shape.outer * shape.inner).div_ceil(THREADS);
        let mut params: [*mut c_void; 5] = [
            (&raw mut pin).cast(),
            (&raw mut pout).cast(),
            (&raw mut outer).cast(),
            (&raw mut r).cast(),
            (&raw mut inner).cast(),
        ];
        // SAFETY: the parameters match `<op>_cols_<T>`; input and output hold the shape's
        // elements (checked).
        unsafe {
            kernel.launch(
                stream,
                LaunchConfig::linear(blocks as u32, THREADS as u32),
                &mut params,
            )?
        };
        return Ok(());
    }
    let (mut chunks, mut chunk) = (plan.chunks as u64, plan.chunk as u64);
    let blocks = (shape.outer * plan.chunks) as u32;
    let mut carry = 0u64;
    if plan.chunks > 1 {
        let sums = Kernel::get(ctx, &crate::images::SCAN, names[1])?;
        let mut params: [*mut c_void; 5] = [
            (&raw mut pin).cast(),
            (&raw mut pws).cast(),
            (&raw mut r).cast(),
            (&raw mut chunks).cast(),
            (&raw mut chunk).cast(),
        ];
        // SAFETY: the parameters match `<op>_sums_<T>`; the workspace holds a sum (or
        // product) a chunk.
        unsafe {
            sums.launch(
                stream,
                LaunchConfig::linear(blocks, THREADS as u32),
                &mut params,
            )?
        };
        let carries = Kernel::get(ctx, &crate::images::SCAN, names[2])?;
        let mut params: [*mut c_void; 3] = [
            (&raw mut pws).cast(),
            (&raw mut outer).cast(),
            (&raw mut chunks).cast(),
        ];
        // SAFETY: the parameters match `<op>_carry_<T>` (a block a row) over the sums written
        // above.
        unsafe {
            carries.launch(
                stream,
                LaunchConfig::linear(shape.outer as u32, THREADS as u32),
                &mut params,
            )?
        };
        carry = pws;
    }
    let rows = Kernel::get(ctx, &crate::images::SCAN, names[0])?;
    let mut params: [*mut c_void; 6] = [
        (&raw mut pin).cast(),
        (&raw mut pout).cast(),
        (&raw mut carry).cast(),
        (&raw mut r).cast(),
        (&raw mut chunks).cast(),
        (&raw mut chunk).cast(),
    ];
    // SAFETY: the parameters match `<op>_rows_<T>`; input and output hold the shape's elements
    // and the carries (when given) a value a chunk (checked).
    unsafe {
        rows.launch(
            stream,
            LaunchConfig::linear(blocks, THREADS as u32),
            &mut params,
        )?
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sums_along_each_axis() {
        // [2, 3]: along rows (inner 1) and along columns (inner 3).
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [0f32; 6];
        let rows = ReduceShape {
            outer: 2,
            r: 3,
            inner: 1,
        };
        cumsum::<f32, f32>(&x, rows, &mut out).unwrap();
        assert_eq!(out, [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        let cols = ReduceShape {
            outer: 1,
            r: 2,
            inner: 3,
        };
        cumsum::<f32, f32>(&x, cols, &mut out).unwrap();
        assert_eq!(out, [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
        // Integers are i64 and wrap.
        let mut wide = [0i64; 2];
        let one = ReduceShape {
            outer: 1,
            r: 2,
            inner: 1,
        };
        cumsum::<i32, i64>(&[i32::MAX, i32::MAX], one, &mut wide).unwrap();
        assert_eq!(wide, [i64::from(i32::MAX), 2 * i64::from(i32::MAX)]);
        cumsum::<i64, i64>(&[i64::MAX, 1], one, &mut wide).unwrap();
        assert_eq!(wide, [i64::MAX, i64::MIN]);
        assert!(cumsum::<i32, i32>(&[1, 2], one, &mut [0i32; 2]).is_err());
        assert!(cumsum::<f32, f32>(&[1.0], one, &mut [0f32; 2]).is_err());
    }

    #[test]
    fn prefix_products_along_each_axis() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [0f32; 6];
        let rows = ReduceShape {
            outer: 2,
            r: 3,
            inner: 1,
        };
        scan::<f32, f32>(ScanOp::Prod, &x, rows, &mut out).unwrap();
        assert_eq!(out, [1.0, 2.0, 6.0, 4.0, 20.0, 120.0]);
        let cols = ReduceShape {
            outer: 1,
            r: 2,
            inner: 3,
        };
        cumprod::<f32, f32>(&x, cols, &mut out).unwrap();
        assert_eq!(out, [1.0, 2.0, 3.0, 4.0, 10.0, 18.0]);
        // f16 multiplies in f32 and rounds each running product once.
        let h = [half::f16::from_f32(3.0); 3];
        let mut ho = [half::f16::ZERO; 3];
        cumprod::<half::f16, half::f16>(&h, cols_of(3), &mut ho).unwrap();
        assert_eq!(ho.map(half::f16::to_f32), [3.0, 9.0, 27.0]);
        // Integers are i64 and wrap; a zero stays.
        let one = cols_of(3);
        let mut wide = [0i64; 3];
        cumprod::<i32, i64>(&[i32::MAX, 4, 0], one, &mut wide).unwrap();
        assert_eq!(wide, [i64::from(i32::MAX), 4 * i64::from(i32::MAX), 0]);
        cumprod::<i64, i64>(&[1 << 40, 1 << 30, -3], one, &mut wide).unwrap();
        let w = (1i64 << 40).wrapping_mul(1 << 30);
        assert_eq!(wide, [1 << 40, w, w.wrapping_mul(-3)]);
        assert!(cumprod::<i32, i32>(&[1, 2], cols_of(2), &mut [0i32; 2]).is_err());
        assert!(cumprod::<f32, f32>(&[1.0], cols_of(1), &mut [0f32; 2]).is_err());
        assert_eq!(ScanOp::Prod.name(), "cumprod");
    }

    /// One row of `r` elements.
    fn cols_of(r: usize) -> ReduceShape {
        ReduceShape {
            outer: 1,
            r,
            inner: 1,
        }
    }

    #[test]
    fn plans_cover_each_row_once() {
        for (outer, r) in [
            (1, 1 << 26),
            (8192, 8192),
            (3, 100_000),
            (1, 5),
            (0, 9),
            (2, 0),
        ] {
            let shape = ReduceShape { outer, r, inner: 1 };
            let p = ScanPlan::new(shape, 132);
            assert!(p.chunks >= 1 && p.chunks * p.chunk >= r, "{p:?}");
            assert!(
                r == 0 || (p.chunks - 1) * p.chunk < r,
                "no empty chunk: {p:?}"
            );
        }
        let many = ScanPlan::new(
            ReduceShape {
                outer: 8192,
                r: 8192,
                inner: 1,
            },
            132,
        );
        assert_eq!(many.chunks, 1, "one pass for many rows");
        let long = ScanPlan::new(
            ReduceShape {
                outer: 1,
                r: 1 << 26,
                inner: 1,
            },
            132,
        );
        assert!(
            long.chunks >= 132,
            "a long row spreads over the device: {long:?}"
        );
    }
}
