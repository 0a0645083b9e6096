//! Reductions over one axis: sum, mean, prod, max, min, argmax, argmin, any and all of bools,
//! and the variance (`kernels/reduce.cu`), and their CPU twins.
//!
//! A contiguous array is seen as `[outer, r, inner]` and reduced over `r`, giving
//! `[outer, inner]`. A full reduction is `outer = inner = 1`; reducing the last axis is
//! `inner = 1`. Several adjacent axes reduce as one (`r` is their product).
//!
//! Semantics (PyTorch's): f16/bf16/f32 accumulate in f32 on the GPU and f64 in f64 (the CPU
//! twin accumulates sums in f64, so the two agree within rounding), integer sums wrap in i64
//! and give i64 (the sum of i32 is i64), `mean` is for floating types (the mean of nothing is
//! NaN), max/min propagate NaN, argmax/argmin give the index of the first extreme value (the
//! first NaN when there is one). max, min, argmax and argmin of an empty axis are errors.
//! Except for sums, the kernels and the twin agree whatever the launch shape, because their
//! combine step is associative and commutative (ties go to the smaller index): bit for bit, but
//! for the payload of a NaN maximum or minimum of f32/f16/bf16 (the GPU's `max.NaN` gives the
//! canonical NaN) and the sign of a zero extreme (-0.0 and +0.0 are equal values).
//!
//! `prod` follows `sum` (f32 accumulation on the GPU, f64 for f64 and in the twin; integers
//! wrap in i64 and give i64; the product of nothing is 1). `any` and `all` take bool bytes (any
//! non-zero byte is true) and give bool bytes; any of nothing is false, all of nothing true; the
//! kernels and [`reduce_bool`] agree exactly. [`var`] is the variance with PyTorch's
//! `correction`, for the floating types (see [`gpu_var`] for the arithmetic).

use crate::{Element, Error, Result};

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers: wrapping, as i64).
    Sum,
    /// Arithmetic mean (floating types only).
    Mean,
    /// Largest value; NaN if any is NaN.
    Max,
    /// Smallest value; NaN if any is NaN.
    Min,
    /// Index of the first largest value (values too, for `max(dim)`).
    ArgMax,
    /// Index of the first smallest value (values too, for `min(dim)`).
    ArgMin,
    /// Product (integers: wrapping, as i64; the product of nothing is 1).
    Prod,
    /// Whether any element is true (bool input and output; false for nothing).
    Any,
    /// Whether every element is true (bool input and output; true for nothing).
    All,
}

impl ReduceOp {
    /// The value reductions of every element type (sum, mean, max, min, argmax, argmin), for
    /// tests; [`ReduceOp::Prod`] and the bool reductions [`ReduceOp::Any`] and [`ReduceOp::All`]
    /// are not in it.
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ];

    /// The operation's name (`"sum"`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::Prod => "prod",
            ReduceOp::Any => "any",
            ReduceOp::All => "all",
        }
    }

    /// Whether the operation reads and writes bools (`any`, `all`).
    pub const fn bool_only(self) -> bool {
        matches!(self, ReduceOp::Any | ReduceOp::All)
    }

    /// Whether the operation yields indices.
    pub const fn has_indices(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }

    /// Whether only floating types support it (`mean`).
    pub const fn float_only(self) -> bool {
        matches!(self, ReduceOp::Mean)
    }

    /// Whether reducing an empty axis is an error (there is no identity).
    pub const fn needs_elements(self) -> bool {
        !matches!(
            self,
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod | ReduceOp::Any | ReduceOp::All
        )
    }

    /// The name of the type of the values produced for input type `T`: `T`'s, except sums and
    /// products of integers (`"i64"`).
    pub fn value_type<T: Element>(self) -> &'static str {
        if matches!(self, ReduceOp::Sum | ReduceOp::Prod) && !T::IS_FLOAT {
            "i64"
        } else {
            T::NAME
        }
    }
}

/// The `[outer, r, inner]` view of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReduceShape {
    /// Product of the axes before the reduced ones.
    pub outer: usize,
    /// Product of the reduced axes.
    pub r: usize,
    /// Product of the axes after the reduced ones.
    pub inner: usize,
}

impl ReduceShape {
    /// Elements read: 0 when any factor is 0 (whatever the others), `None` when the product
    /// overflows.
    pub fn input_len(&self) -> Option<usize> {
        if self.outer == 0 || self.r == 0 || self.inner == 0 {
            return Some(0);
        }
        self.outer.checked_mul(self.r)?.checked_mul(self.inner)
    }

    /// Elements produced: 0 when `outer` or `inner` is 0, saturating at `usize::MAX` when the
    /// product overflows (no storage holds that many, so every length check refuses it).
    pub fn output_len(&self) -> usize {
        self.outer.saturating_mul(self.inner)
    }
}

fn check<T: Element>(op: ReduceOp, s: ReduceShape, input_len: usize) -> Result<()> {
    if op.bool_only() {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: format!("element type {} (bool input only: reduce_bool)", T::NAME),
        });
    }
    check_shape(op, s, input_len)?;
    if op.float_only() && !T::IS_FLOAT {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: format!("element type {} (floating types only)", T::NAME),
        });
    }
    Ok(())
}

fn check_shape(op: ReduceOp, s: ReduceShape, input_len: usize) -> Result<()> {
    if s.input_len() != Some(input_len) {
        return Err(Error::LengthMismatch {
            op: op.name(),
            expected: s.input_len().unwrap_or(usize::MAX),
            got: input_len,
        });
    }
    if op.needs_elements() && s.r == 0 && s.output_len() > 0 {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: "an empty axis has no extreme value".into(),
        });
    }
    Ok(())
}

fn check_outputs<T: Element, O: Element>(
    op: ReduceOp,
    s: ReduceShape,
    values: Option<&[O]>,
    indices: Option<&[i64]>,
) -> Result<()> {
    if O::NAME != op.value_type::<T>() {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: format!(
                "values of {} are {}, not {}",
                T::NAME,
                op.value_type::<T>(),
                O::NAME
            ),
        });
    }
    if indices.is_some() && !op.has_indices() {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: "gives no indices".into(),
        });
    }
    for len in values
        .map(<[O]>::len)
        .into_iter()
        .chain(indices.map(<[i64]>::len))
    {
        if len != s.output_len() {
            return Err(Error::LengthMismatch {
                op: op.name(),
                expected: s.output_len(),
                got: len,
            });
        }
    }
    Ok(())
}

/// The better of two (value, index) states of `op` (NaN wins max/min; ties: smaller index).
fn better<V: PartialOrd + Copy>(
    op: ReduceOp,
    a: (V, i64),
    b: (V, i64),
    nan: fn(V) -> bool,
) -> (V, i64) {
    let (an, bn) = (nan(a.0), nan(b.0));
    if an || bn {
        return if an && bn {
            if a.1 <= b.1 { a } else { b }
        } else if an {
            a
        } else {
            b
        };
    }
    let a_wins = match op {
        ReduceOp::Max | ReduceOp::ArgMax => a.0 > b.0,
        _ => a.0 < b.0,
    };
    if a_wins || (a.0 == b.0 && a.1 <= b.1) {
        a
    } else {
        b
    }
}

/// CPU twin: reduces `input` (`[outer, r, inner]`, contiguous) into `values` (`[outer,
/// inner]`, of type [`ReduceOp::value_type`]) and, for argmax/argmin, `indices`. Nothing is
/// written on error.
pub fn reduce<T: Element, O: Element>(
    op: ReduceOp,
    input: &[T],
    s: ReduceShape,
    mut values: Option<&mut [O]>,
    mut indices: Option<&mut [i64]>,
) -> Result<()> {
    check::<T>(op, s, input.len())?;
    check_outputs::<T, O>(op, s, values.as_deref(), indices.as_deref())?;
    // No outputs: nothing to do (`outer` or `inner` may be huge when the other is 0).
    if s.output_len() == 0 {
        return Ok(());
    }
    for o in 0..s.outer {
        for c in 0..s.inner {
            let at = |k: usize| input[(o * s.r + k) * s.inner + c];
            let t = o * s.inner + c;
            let (value, index) = if T::IS_FLOAT {
                match op {
                    ReduceOp::Prod => {
                        let p: f64 = (0..s.r).map(|k| at(k).to_f64()).product();
                        (O::from_f64(p), 0)
                    }
                    ReduceOp::Sum | ReduceOp::Mean => {
                        // From +0.0, as PyTorch (and the kernels): a sum of nothing or of
                        // -0.0s is +0.0 (`Iterator::sum` starts at -0.0).
                        let sum = (0..s.r).fold(0.0f64, |acc, k| acc + at(k).to_f64());
                        let v = if op == ReduceOp::Mean {
                            sum / s.r as f64
                        } else {
                            sum
                        };
                        (O::from_f64(v), 0)
                    }
                    _ => {
                        let mut best = (at(0).to_f64(), 0i64);
                        for k in 1..s.r {
                            best = better(op, best, (at(k).to_f64(), k as i64), f64::is_nan);
                        }
                        (O::from_f64(best.0), best.1)
                    }
                }
            } else {
                match op {
                    ReduceOp::Sum => {
                        let sum = (0..s.r).fold(0i64, |acc, k| acc.wrapping_add(at(k).to_i64()));
                        (O::from_i64(sum), 0)
                    }
                    ReduceOp::Prod => {
                        let p = (0..s.r).fold(1i64, |acc, k| acc.wrapping_mul(at(k).to_i64()));
                        (O::from_i64(p), 0)
                    }
                    _ => {
                        let mut best = (at(0).to_i64(), 0i64);
                        for k in 1..s.r {
                            best = better(op, best, (at(k).to_i64(), k as i64), |_| false);
                        }
                        (O::from_i64(best.0), best.1)
                    }
                }
            };
            if let Some(v) = values.as_deref_mut() {
                v[t] = value;
            }
            if let Some(i) = indices.as_deref_mut() {
                i[t] = index;
            }
        }
    }
    Ok(())
}

/// CPU twin of `any` and `all` ([`ReduceOp::Any`], [`ReduceOp::All`]): reduces bool bytes
/// `input` (`[outer, r, inner]`, any non-zero byte true) into bool bytes `values` (`[outer,
/// inner]`, 0 or 1). Nothing is written on error.
pub fn reduce_bool(op: ReduceOp, input: &[u8], s: ReduceShape, values: &mut [u8]) -> Result<()> {
    if !op.bool_only() {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: "a reduction of bools is any or all".into(),
        });
    }
    check_shape(op, s, input.len())?;
    if values.len() != s.output_len() {
        return Err(Error::LengthMismatch {
            op: op.name(),
            expected: s.output_len(),
            got: values.len(),
        });
    }
    if s.output_len() == 0 {
        return Ok(());
    }
    for o in 0..s.outer {
        for c in 0..s.inner {
            let mut lane = (0..s.r).map(|k| input[(o * s.r + k) * s.inner + c] != 0);
            let v = if op == ReduceOp::Any {
                lane.any(|b| b)
            } else {
                lane.all(|b| b)
            };
            values[o * s.inner + c] = u8::from(v);
        }
    }
    Ok(())
}

/// CPU twin of the variance ([`gpu_var`]): `values[o, c]` is the variance of `input[o, .., c]`
/// with PyTorch's `correction` (`sum((x - mean)^2) / max(0, n - correction)`), or its square
/// root when `std`, for the floating types. Computed as the kernels do (each line shifted by its
/// first element, sums in f64), so the two agree within the rounding of the f64 sums. Nothing
/// is written on error.
pub fn var<T: Element>(
    input: &[T],
    s: ReduceShape,
    correction: f64,
    std: bool,
    values: &mut [T],
) -> Result<()> {
    check_var::<T>(s, input.len(), correction)?;
    if values.len() != s.output_len() {
        return Err(Error::LengthMismatch {
            op: "var",
            expected: s.output_len(),
            got: values.len(),
        });
    }
    if s.output_len() == 0 {
        return Ok(());
    }
    for o in 0..s.outer {
        for c in 0..s.inner {
            let at = |k: usize| input[(o * s.r + k) * s.inner + c].to_f64();
            let v = var_of(s.r, at, correction, std);
            // The kernels round the f64 result to f64 (f64 input) or to f32 and then to `T`.
            values[o * s.inner + c] = if size_of::<T>() == 8 {
                T::from_f64(v)
            } else {
                T::from_f64(v as f32 as f64)
            };
        }
    }
    Ok(())
}

/// The variance arithmetic of the kernels for one line of `n` values `at(k)`.
fn var_of(n: usize, at: impl Fn(usize) -> f64, correction: f64, std: bool) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    let shift = at(0);
    let (mut sum, mut squares) = (0.0f64, 0.0f64);
    for k in 0..n {
        let d = at(k) - shift;
        sum += d;
        squares = d.mul_add(d, squares);
    }
    let nf = n as f64;
    // Clamped at 0 (rounding can leave it just below), NaN kept: `f64::max` would turn a NaN
    // (from a NaN or an infinity in the line) into 0.
    let m2 = squares - sum * (sum / nf);
    let m2 = if m2 < 0.0 { 0.0 } else { m2 };
    let v = m2 / (nf - correction).max(0.0);
    if std { v.sqrt() } else { v }
}

fn check_var<T: Element>(s: ReduceShape, input_len: usize, correction: f64) -> Result<()> {
    if !T::IS_FLOAT {
        return Err(Error::Unsupported {
            op: "var",
            reason: format!("element type {} (floating types only)", T::NAME),
        });
    }
    if !correction.is_finite() {
        return Err(Error::Unsupported {
            op: "var",
            reason: format!("correction {correction} (a finite number)"),
        });
    }
    check_shape(ReduceOp::Sum, s, input_len)
}

/// How the kernels split a reduction: `splits` chunks of `chunk` elements per reduced line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReducePlan {
    /// The reduction's shape.
    pub shape: ReduceShape,
    /// Partial results per output.
    pub splits: usize,
    /// Elements of the reduced axis per split.
    pub chunk: usize,
    /// Rows kernel with a warp per row (short rows, `inner == 1`).
    pub warp_rows: bool,
}

/// Longest rows (inner == 1) reduced a thread a row rather than a warp a row: a warp on a row
/// this short leaves half its lanes or more idle and spends its time in the shuffles.
#[cfg(feature = "cuda")]
const THREAD_ROW_MAX: usize = 16;

/// Threads a block of every reduction kernel, and the warps among them (`kernels/reduce.cu`'s
/// `RD_THREADS` and `RD_WARPS`): warp mode reduces one row or output a warp.
#[cfg(feature = "cuda")]
const RD_THREADS: u64 = 256;
#[cfg(feature = "cuda")]
const RD_WARPS: u64 = RD_THREADS / 32;

/// Elements per vector-aligned unit of a chunk (a multiple of every 16-byte vector).
const CHUNK_ALIGN: usize = 64;

/// Rows of a column chunk (inner > 1) when the device stays busy with them: 64 rows a
/// thread, so the block's closing combine is a small part of its work (`gpu_elementwise`'s
/// `sum_dim0_*_rows*` rows time the alternatives).
pub const COL_MIN_ROWS: usize = 512;

/// Shortest column chunk when splitting further to fill the device.
const COL_FLOOR_ROWS: usize = 64;

/// Most rows of a column chunk: the arg kernels keep 32-bit row offsets.
const COL_MAX_ROWS: usize = 1 << 31;

impl ReducePlan {
    /// The plan for `shape` of `elem_bytes`-byte elements on a device with `sms`
    /// multiprocessors.
    pub fn new(shape: ReduceShape, sms: usize, elem_bytes: usize) -> ReducePlan {
        Self::col_rows(shape, sms, elem_bytes, COL_MIN_ROWS)
    }

    /// [`Self::new`] with column chunks of at least `min_rows` rows (when the axis has them),
    /// for the benchmark that tunes the plan: every thread of a column block reads
    /// `min_rows / 8` rows or more. Only with the `tuning` feature.
    #[cfg(feature = "tuning")]
    pub fn with_col_rows(
        shape: ReduceShape,
        sms: usize,
        elem_bytes: usize,
        min_rows: usize,
    ) -> ReducePlan {
        Self::col_rows(shape, sms, elem_bytes, min_rows)
    }

    fn col_rows(shape: ReduceShape, sms: usize, elem_bytes: usize, min_rows: usize) -> ReducePlan {
        // Column reductions: chunks of `min_rows` rows or more (long per-thread runs make the
        // block's closing combine and the partials small), but split further, down to
        // COL_FLOOR_ROWS rows, until there are blocks for half a wave of the device.
        // Row reductions split a few long lines into 4 blocks of 256 threads per
        // multiprocessor (2 for 2-byte elements): long chunks hide each block's start, and
        // the f32 row kernels (40-44 registers) fit 5 blocks a multiprocessor, so more than
        // 4 would leave a second, partial wave.
        let target = sms.max(1) * 32;
        let row_target = sms.max(1) * if elem_bytes <= 2 { 2 } else { 4 };
        let r = shape.r;
        if r == 0 || shape.output_len() == 0 {
            return ReducePlan {
                shape,
                splits: 1,
                chunk: r,
                warp_rows: shape.inner == 1,
            };
        }
        if shape.inner == 1 {
            if r <= 1024 {
                return ReducePlan {
                    shape,
                    splits: 1,
                    chunk: r,
                    warp_rows: true,
                };
            }
            let want = row_target
                .div_ceil(shape.outer)
                .min(r.div_ceil(4096))
                .max(1);
            let chunk = r.div_ceil(want).next_multiple_of(CHUNK_ALIGN);
            ReducePlan {
                shape,
                splits: r.div_ceil(chunk),
                chunk,
                warp_rows: false,
            }
        } else {
            let blocks = shape
                .inner
                .div_ceil(32 * cols_vector(shape.inner, elem_bytes))
                * shape.outer.min(65535);
            let long = (target / blocks).min((r / min_rows.max(1)).max(1));
            let fill = (sms.max(1) * 4)
                .div_ceil(blocks)
                .min((r / COL_FLOOR_ROWS).max(1));
            let want = long.max(fill).max(r.div_ceil(COL_MAX_ROWS)).clamp(1, 65535);
            let chunk = r.div_ceil(want);
            ReducePlan {
                shape,
                splits: r.div_ceil(chunk),
                chunk,
                warp_rows: false,
            }
        }
    }

    /// Partial states the first pass writes.
    pub fn partials(&self) -> usize {
        self.shape.output_len().saturating_mul(self.splits)
    }

    /// Bytes of device workspace the reduction of `T` needs (partial values, then indices).
    pub fn workspace_bytes<T: Element>(&self, op: ReduceOp) -> usize {
        self.workspace_for(op, acc_bytes::<T>())
    }

    /// Bytes of device workspace `any` or `all` needs ([`gpu_reduce_bool`]).
    pub fn workspace_bytes_bool(&self) -> usize {
        self.workspace_for(ReduceOp::Any, 8)
    }

    /// Bytes of device workspace the variance needs ([`gpu_var`]): two f64 a partial.
    pub fn workspace_bytes_var(&self) -> usize {
        self.partials().saturating_mul(16)
    }

    fn workspace_for(&self, op: ReduceOp, acc: usize) -> usize {
        // Saturating: a plan this large is refused by every allocation.
        let vals = self
            .partials()
            .saturating_mul(acc)
            .checked_next_multiple_of(256)
            .unwrap_or(usize::MAX);
        vals.saturating_add(if op.has_indices() {
            self.partials().saturating_mul(8)
        } else {
            0
        })
    }
}

/// Columns per thread of the cols kernel: a 16-byte vector when the rows allow it.
fn cols_vector(inner: usize, elem_bytes: usize) -> usize {
    let v = 16 / elem_bytes.clamp(1, 16);
    if inner.is_multiple_of(v) { v } else { 1 }
}

/// Bytes of the kernels' accumulator of `T`: f32 for the narrower floats, f64 for f64, i64 for
/// integers.
fn acc_bytes<T: Element>() -> usize {
    if T::IS_FLOAT {
        size_of::<T>().max(4)
    } else {
        8
    }
}

macro_rules! kernel_names {
    ($op:expr, $t:expr; $($o:literal),*; $($ty:literal),*) => {
        kernel_names!(@ops $op, $t; [$($ty),*]; $($o),*)
    };
    (@ops $op:expr, $t:expr; $tys:tt; $($o:literal),*) => {
        match $op {
            $( $o => kernel_names!(@tys $t; $o; $tys), )*
            _ => None,
        }
    };
    (@tys $t:expr; $o:literal; [$($ty:literal),*]) => {
        match $t {
            $( $ty => Some([
                concat!("reduce_rows_", $o, "_", $ty),
                concat!("reduce_cols_", $o, "_", $ty),
                concat!("reduce_final_", $o, "_", $ty),
            ]), )*
            _ => None,
        }
    };
}

/// The rows, cols and final kernels of `op` for `T`.
pub fn kernels<T: Element>(op: ReduceOp) -> Option<[&'static str; 3]> {
    let base = if op == ReduceOp::Mean {
        "sum"
    } else {
        op.name()
    };
    kernel_names!(base, T::NAME; "sum", "prod", "max", "min", "argmax", "argmin"; "f32", "f16", "bf16", "i32", "i64", "f64")
}

/// The rows, cols and final kernels of `any` or `all` (bool bytes).
pub fn bool_kernels(op: ReduceOp) -> Option<[&'static str; 3]> {
    kernel_names!(op.name(), "b8"; "any", "all"; "b8")
}

/// The rows, cols and final kernels of the variance of `T`.
pub fn var_kernels<T: Element>() -> Option<[&'static str; 3]> {
    Some(match T::NAME {
        "f32" => ["var_rows_f32", "var_cols_f32", "var_final_f32"],
        "f16" => ["var_rows_f16", "var_cols_f16", "var_final_f16"],
        "bf16" => ["var_rows_bf16", "var_cols_bf16", "var_final_bf16"],
        "f64" => ["var_rows_f64", "var_cols_f64", "var_final_f64"],
        _ => return None,
    })
}

/// Queues the reduction of `input` into `values` (bytes of elements of
/// [`ReduceOp::value_type`]) and `indices` (arg ops only) on `stream`, using `workspace`
/// ([`ReducePlan::workspace_bytes`] of `ReducePlan::new(shape, sms, size_of::<T>())` bytes).
/// Every span is checked against the shape and plan before anything is launched.
#[cfg(feature = "cuda")]
pub fn gpu_reduce<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ReduceOp,
    input: genesis_cuda::DeviceSpan<'_, T>,
    shape: ReduceShape,
    values: genesis_cuda::DeviceSpanMut<'_, u8>,
    indices: Option<genesis_cuda::DeviceSpanMut<'_, i64>>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let plan = ReducePlan::new(
        shape,
        stream.context().multiprocessors() as usize,
        size_of::<T>(),
    );
    reduce_planned::<T>(stream, op, input, plan, values, indices, workspace)
}

/// [`gpu_reduce`] with a given plan, for the benchmark that tunes the plans (only with the
/// `tuning` feature). A plan whose chunks do not cover the axis exactly once is an error.
#[cfg(all(feature = "cuda", feature = "tuning"))]
pub fn gpu_reduce_planned<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ReduceOp,
    input: genesis_cuda::DeviceSpan<'_, T>,
    plan: ReducePlan,
    values: genesis_cuda::DeviceSpanMut<'_, u8>,
    indices: Option<genesis_cuda::DeviceSpanMut<'_, i64>>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    reduce_planned::<T>(stream, op, input, plan, values, indices, workspace)
}

/// [`gpu_reduce`] with a given plan.
#[cfg(feature = "cuda")]
fn reduce_planned<T: Element>(
    stream: &genesis_cuda::Stream,
    op: ReduceOp,
    input: genesis_cuda::DeviceSpan<'_, T>,
    plan: ReducePlan,
    values: genesis_cuda::DeviceSpanMut<'_, u8>,
    indices: Option<genesis_cuda::DeviceSpanMut<'_, i64>>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let len = plan.shape.input_len().ok_or(Error::Unsupported {
        op: op.name(),
        reason: "shape overflows".into(),
    })?;
    check::<T>(op, plan.shape, len)?;
    let value_bytes = if op.value_type::<T>() == "i64" {
        8
    } else {
        size_of::<T>()
    };
    let names = kernels::<T>(op).ok_or_else(|| Error::Unsupported {
        op: op.name(),
        reason: format!("element type {}", T::NAME),
    })?;
    let input = RawInput {
        addr: input.addr(),
        len: input.len(),
        elem: size_of::<T>(),
    };
    let need = plan.workspace_bytes::<T>(op);
    launch_reduce(
        stream,
        op,
        names,
        input,
        value_bytes,
        (plan, need),
        values,
        indices,
        workspace,
    )
}

/// Queues `any` or `all` of bool bytes `input` (`shape`) into bool bytes `values` on `stream`,
/// using `workspace` ([`ReducePlan::workspace_bytes_bool`] of `ReducePlan::new(shape, sms, 1)`
/// bytes). Every span is checked before anything is launched.
#[cfg(feature = "cuda")]
pub fn gpu_reduce_bool(
    stream: &genesis_cuda::Stream,
    op: ReduceOp,
    input: genesis_cuda::DeviceSpan<'_, u8>,
    shape: ReduceShape,
    values: genesis_cuda::DeviceSpanMut<'_, u8>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let names = bool_kernels(op).ok_or_else(|| Error::Unsupported {
        op: op.name(),
        reason: "a reduction of bools is any or all".into(),
    })?;
    let len = shape.input_len().ok_or(Error::Unsupported {
        op: op.name(),
        reason: "shape overflows".into(),
    })?;
    check_shape(op, shape, len)?;
    let plan = ReducePlan::new(shape, stream.context().multiprocessors() as usize, 1);
    let input = RawInput {
        addr: input.addr(),
        len: input.len(),
        elem: 1,
    };
    let need = plan.workspace_bytes_bool();
    launch_reduce(
        stream,
        op,
        names,
        input,
        1,
        (plan, need),
        values,
        None,
        workspace,
    )
}

/// The input of a reduction launch: device address, length and element size.
#[cfg(feature = "cuda")]
struct RawInput {
    addr: u64,
    len: usize,
    elem: usize,
}

/// The launches of a checked reduction: `names` (rows, cols, final) over `input` with `plan`
/// (and the workspace bytes it needs), into `values` of `value_bytes`-byte elements.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn launch_reduce(
    stream: &genesis_cuda::Stream,
    op: ReduceOp,
    names: [&'static str; 3],
    input: RawInput,
    value_bytes: usize,
    (plan, need): (ReducePlan, usize),
    values: genesis_cuda::DeviceSpanMut<'_, u8>,
    indices: Option<genesis_cuda::DeviceSpanMut<'_, i64>>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let shape = plan.shape;
    let len = shape.input_len().ok_or(Error::Unsupported {
        op: op.name(),
        reason: "shape overflows".into(),
    })?;
    if indices.is_some() != op.has_indices() {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: if op.has_indices() {
                "needs a buffer for its indices".into()
            } else {
                "gives no indices".into()
            },
        });
    }
    let out_len = shape.output_len();
    let short = |what: &'static str, expected: usize, got: usize| Error::LengthMismatch {
        op: what,
        expected,
        got,
    };
    if input.len < len {
        return Err(short("reduce input", len, input.len));
    }
    if values.len() < out_len.saturating_mul(value_bytes) {
        return Err(short("reduce values", out_len * value_bytes, values.len()));
    }
    if let Some(ix) = &indices
        && ix.len() < out_len
    {
        return Err(short("reduce indices", out_len, ix.len()));
    }
    let elem_bytes = input.elem;
    let (input, values) = (input.addr, values.addr());
    let indices = indices.map_or(0, |ix| ix.addr());
    let workspace_len = workspace.len();
    let workspace = workspace.addr();
    if shape.output_len() == 0 {
        return Ok(());
    }
    let covers = plan.splits >= 1
        && plan.splits <= 65535
        && plan
            .splits
            .checked_mul(plan.chunk)
            .is_some_and(|n| n >= shape.r)
        && (shape.r == 0 || (plan.splits - 1) * plan.chunk < shape.r)
        && (!plan.warp_rows || (shape.inner == 1 && plan.splits == 1));
    if !covers {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: format!("a plan that does not cover the axis once: {plan:?}"),
        });
    }
    // The final pass's grid (32 outputs a block) must fit its x extent.
    if shape.output_len().div_ceil(32) > i32::MAX as usize {
        return Err(Error::Unsupported {
            op: op.name(),
            reason: format!("{} outputs in one launch", shape.output_len()),
        });
    }
    if workspace_len < need {
        return Err(Error::LengthMismatch {
            op: "reduce workspace",
            expected: need,
            got: workspace_len,
        });
    }
    let ctx = stream.context();
    let pv = workspace;
    let pi = if op.has_indices() {
        workspace + (need - plan.partials() * 8) as u64
    } else {
        0
    };
    let (mut in_, mut pv_, mut pi_) = (input, pv, pi);
    let (mut outer, mut r, mut inner) = (shape.outer as u64, shape.r as u64, shape.inner as u64);
    let (mut splits, mut chunk) = (plan.splits as u64, plan.chunk as u64);
    if shape.inner == 1 {
        let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[0])?;
        let elem = elem_bytes as u64;
        let mut vec_ok = i32::from(
            input.is_multiple_of(16)
                && (outer == 1 || (r * elem).is_multiple_of(16))
                && (chunk * elem).is_multiple_of(16),
        );
        // Rows of at most THREAD_ROW_MAX elements a thread each, longer short rows a warp each.
        let by_thread = plan.warp_rows && shape.r <= THREAD_ROW_MAX;
        let mut warp = if by_thread {
            2
        } else {
            i32::from(plan.warp_rows)
        };
        let blocks = if by_thread {
            outer.div_ceil(RD_THREADS)
        } else if plan.warp_rows {
            outer.div_ceil(RD_WARPS)
        } else {
            outer * splits
        };
        let mut params: [*mut c_void; 9] = [
            (&raw mut in_).cast(),
            (&raw mut pv_).cast(),
            (&raw mut pi_).cast(),
            (&raw mut outer).cast(),
            (&raw mut r).cast(),
            (&raw mut splits).cast(),
            (&raw mut chunk).cast(),
            (&raw mut vec_ok).cast(),
            (&raw mut warp).cast(),
        ];
        // SAFETY: the parameters match `reduce_rows_<op>_<T>`; the workspace holds the plan's
        // partials and the input the shape's elements (checked).
        unsafe {
            kernel.launch(
                stream,
                LaunchConfig::linear(blocks as u32, RD_THREADS as u32),
                &mut params,
            )?
        };
    } else {
        let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[1])?;
        let v = cols_vector(shape.inner, elem_bytes);
        let vec = v > 1 && input.is_multiple_of(16);
        let mut vec_ok = i32::from(vec);
        let config = LaunchConfig {
            grid: (
                shape.inner.div_ceil(if vec { 32 * v } else { 32 }) as u32,
                shape.outer.min(65535) as u32,
                plan.splits as u32,
            ),
            block: (32, 8, 1),
            shared_bytes: 0,
        };
        let mut params: [*mut c_void; 9] = [
            (&raw mut in_).cast(),
            (&raw mut pv_).cast(),
            (&raw mut pi_).cast(),
            (&raw mut outer).cast(),
            (&raw mut r).cast(),
            (&raw mut inner).cast(),
            (&raw mut splits).cast(),
            (&raw mut chunk).cast(),
            (&raw mut vec_ok).cast(),
        ];
        // SAFETY: as above, for `reduce_cols_<op>_<T>`.
        unsafe { kernel.launch(stream, config, &mut params)? };
    }
    let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[2])?;
    let warp_final = shape.inner == 1 && plan.splits > 32;
    let (mut out, mut out_idx) = (values, indices);
    let mut mean = i32::from(op == ReduceOp::Mean);
    let mut warp = i32::from(warp_final);
    let total = shape.output_len() as u64;
    // Warp mode: an output a warp; otherwise 32 outputs a block (8 threads an output).
    let blocks = if warp_final {
        total.div_ceil(RD_WARPS)
    } else {
        total.div_ceil(32)
    };

    let mut params: [*mut c_void; 10] = [
        (&raw mut pv_).cast(),
        (&raw mut pi_).cast(),
        (&raw mut out).cast(),
        (&raw mut out_idx).cast(),
        (&raw mut outer).cast(),
        (&raw mut splits).cast(),
        (&raw mut inner).cast(),
        (&raw mut r).cast(),
        (&raw mut mean).cast(),
        (&raw mut warp).cast(),
    ];
    // SAFETY: the parameters match `reduce_final_<op>_<T>`; the outputs hold the shape's
    // results (checked).
    // The final pass waits for the first (`pdl_wait` in reduce.cu) before reading its partials,
    // so it may be scheduled while the first pass runs.
    unsafe {
        kernel.launch_dependent(
            stream,
            LaunchConfig::linear(blocks as u32, RD_THREADS as u32),
            &mut params,
        )?
    };
    Ok(())
}

/// Queues the variance (or, with `std`, the standard deviation) of `input` (`shape`, f64, f32,
/// f16, bf16) over its reduced axis into `values` (`[outer, inner]` of `T`) on `stream`, using
/// `workspace` ([`ReducePlan::workspace_bytes_var`] of `ReducePlan::new(shape, sms,
/// size_of::<T>())` bytes).
///
/// One pass reads the input (the split plan of the other reductions, 16-byte loads for rows);
/// each line is shifted by its first element and summed as (sum, sum of squares) in f64, and a
/// second pass gives `(Q - S^2 / n) / max(0, n - correction)` rounded once to `T` (see
/// `kernels/reduce.cu`). A line of no elements gives NaN, as PyTorch.
#[cfg(feature = "cuda")]
pub fn gpu_var<T: Element>(
    stream: &genesis_cuda::Stream,
    input: genesis_cuda::DeviceSpan<'_, T>,
    shape: ReduceShape,
    correction: f64,
    std: bool,
    values: genesis_cuda::DeviceSpanMut<'_, T>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let len = shape.input_len().ok_or(Error::Unsupported {
        op: "var",
        reason: "shape overflows".into(),
    })?;
    check_var::<T>(shape, len, correction)?;
    let names = var_kernels::<T>().ok_or_else(|| Error::Unsupported {
        op: "var",
        reason: format!("element type {}", T::NAME),
    })?;
    let out_len = shape.output_len();
    if input.len() < len {
        return Err(Error::LengthMismatch {
            op: "var input",
            expected: len,
            got: input.len(),
        });
    }
    if values.len() < out_len {
        return Err(Error::LengthMismatch {
            op: "var values",
            expected: out_len,
            got: values.len(),
        });
    }
    let plan = ReducePlan::new(
        shape,
        stream.context().multiprocessors() as usize,
        size_of::<T>(),
    );
    let need = plan.workspace_bytes_var();
    if workspace.len() < need {
        return Err(Error::LengthMismatch {
            op: "var workspace",
            expected: need,
            got: workspace.len(),
        });
    }
    if out_len == 0 {
        return Ok(());
    }
    let ctx = stream.context();
    let (mut in_, mut part, mut out) = (input.addr(), workspace.addr(), values.addr());
    let (mut outer, mut r, mut inner) = (shape.outer as u64, shape.r as u64, shape.inner as u64);
    let (mut splits, mut chunk) = (plan.splits as u64, plan.chunk as u64);
    if shape.r > 0 {
        if shape.inner == 1 {
            let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[0])?;
            let elem = size_of::<T>() as u64;
            let mut vec_ok = i32::from(
                in_.is_multiple_of(16)
                    && (outer == 1 || (r * elem).is_multiple_of(16))
                    && (chunk * elem).is_multiple_of(16),
            );
            let mut warp = i32::from(plan.warp_rows);
            let blocks = if plan.warp_rows {
                outer.div_ceil(8)
            } else {
                outer * splits
            };
            let mut params: [*mut c_void; 8] = [
                (&raw mut in_).cast(),
                (&raw mut part).cast(),
                (&raw mut outer).cast(),
                (&raw mut r).cast(),
                (&raw mut splits).cast(),
                (&raw mut chunk).cast(),
                (&raw mut vec_ok).cast(),
                (&raw mut warp).cast(),
            ];
            // SAFETY: the parameters match `var_rows_<T>`; the workspace holds the plan's
            // partials and the input the shape's elements (checked).
            unsafe {
                kernel.launch(
                    stream,
                    LaunchConfig::linear(blocks as u32, RD_THREADS as u32),
                    &mut params,
                )?
            };
        } else {
            let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[1])?;
            // V adjacent columns a thread, one 16-byte load a row, when every row starts on 16
            // bytes.
            let v = cols_vector(shape.inner, size_of::<T>());
            let vec = v > 1 && in_.is_multiple_of(16);
            let mut vec_ok = i32::from(vec);
            let config = LaunchConfig {
                grid: (
                    shape.inner.div_ceil(if vec { 32 * v } else { 32 }) as u32,
                    shape.outer.min(65535) as u32,
                    plan.splits as u32,
                ),
                block: (32, 8, 1),
                shared_bytes: 0,
            };
            let mut params: [*mut c_void; 8] = [
                (&raw mut in_).cast(),
                (&raw mut part).cast(),
                (&raw mut outer).cast(),
                (&raw mut r).cast(),
                (&raw mut inner).cast(),
                (&raw mut splits).cast(),
                (&raw mut chunk).cast(),
                (&raw mut vec_ok).cast(),
            ];
            // SAFETY: as above, for `var_cols_<T>` (vectorised only when `inner` is a multiple
            // of the vector and the input starts on 16 bytes, so every row does).
            unsafe { kernel.launch(stream, config, &mut params)? };
        }
    } else {
        // No elements: the final pass reads no partials (splits = 0) and writes NaN.
        splits = 0;
    }
    let kernel = Kernel::get(ctx, &crate::images::REDUCE, names[2])?;
    let mut corr = correction;
    let mut root = i32::from(std);
    let mut params: [*mut c_void; 8] = [
        (&raw mut part).cast(),
        (&raw mut out).cast(),
        (&raw mut outer).cast(),
        (&raw mut splits).cast(),
        (&raw mut inner).cast(),
        (&raw mut r).cast(),
        (&raw mut corr).cast(),
        (&raw mut root).cast(),
    ];
    let blocks = (out_len as u64).div_ceil(RD_THREADS);
    // SAFETY: the parameters match `var_final_<T>`; the output holds the shape's results
    // (checked); the final pass waits for the first (`pdl_wait`) before reading its partials.
    unsafe {
        kernel.launch_dependent(
            stream,
            LaunchConfig::linear(blocks as u32, RD_THREADS as u32),
            &mut params,
        )?
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn run<T: Element, O: Element>(op: ReduceOp, x: &[T], s: ReduceShape) -> (Vec<O>, Vec<i64>) {
        let mut v = vec![O::from_i64(0); s.output_len()];
        let mut i = vec![-1i64; s.output_len()];
        let idx = if op.has_indices() {
            Some(&mut i[..])
        } else {
            None
        };
        reduce::<T, O>(op, x, s, Some(&mut v), idx).unwrap();
        (v, i)
    }

    #[test]
    fn sums_means_and_extremes_along_each_axis() {
        // [2, 3] reduced over rows (inner 3) and over columns (inner 1).
        let x = [1.0f32, 5.0, -2.0, 4.0, 5.0, 7.0];
        let cols = ReduceShape {
            outer: 1,
            r: 2,
            inner: 3,
        };
        let rows = ReduceShape {
            outer: 2,
            r: 3,
            inner: 1,
        };
        assert_eq!(
            run::<f32, f32>(ReduceOp::Sum, &x, cols).0,
            vec![5.0, 10.0, 5.0]
        );
        assert_eq!(
            run::<f32, f32>(ReduceOp::Mean, &x, rows).0,
            vec![4.0 / 3.0, 16.0 / 3.0]
        );
        let (v, i) = run::<f32, f32>(ReduceOp::ArgMax, &x, cols);
        assert_eq!(
            (v, i),
            (vec![4.0, 5.0, 7.0], vec![1, 0, 1]),
            "ties: first index"
        );
        let (v, i) = run::<f32, f32>(ReduceOp::ArgMin, &x, rows);
        assert_eq!((v, i), (vec![-2.0, 4.0], vec![2, 0]));
    }

    #[test]
    fn nan_wins_and_the_first_nan_is_the_index() {
        let x = [1.0f32, f32::NAN, 3.0, f32::NAN];
        let s = ReduceShape {
            outer: 1,
            r: 4,
            inner: 1,
        };
        assert!(run::<f32, f32>(ReduceOp::Max, &x, s).0[0].is_nan());
        assert_eq!(run::<f32, f32>(ReduceOp::ArgMin, &x, s).1, vec![1]);
    }

    #[test]
    fn integer_sums_wrap_in_i64_and_types_are_checked() {
        let x = [i32::MAX, i32::MAX, 2];
        let s = ReduceShape {
            outer: 1,
            r: 3,
            inner: 1,
        };
        assert_eq!(
            run::<i32, i64>(ReduceOp::Sum, &x, s).0,
            vec![2 * i64::from(i32::MAX) + 2]
        );
        let mut out = [0i32; 1];
        assert!(reduce::<i32, i32>(ReduceOp::Sum, &x, s, Some(&mut out), None).is_err());
        assert!(reduce::<i32, i32>(ReduceOp::Mean, &x, s, Some(&mut out), None).is_err());
        assert_eq!(
            run::<i64, i64>(
                ReduceOp::Sum,
                &[i64::MAX, 1],
                ReduceShape {
                    outer: 1,
                    r: 2,
                    inner: 1
                }
            )
            .0,
            vec![i64::MIN]
        );
    }

    #[test]
    fn empty_axes() {
        let s = ReduceShape {
            outer: 2,
            r: 0,
            inner: 1,
        };
        assert_eq!(
            run::<bf16, bf16>(ReduceOp::Sum, &[], s).0,
            vec![bf16::ZERO; 2]
        );
        assert!(run::<bf16, bf16>(ReduceOp::Mean, &[], s).0[0].is_nan());
        let mut out = [0f32; 2];
        assert!(reduce::<f32, f32>(ReduceOp::Max, &[], s, Some(&mut out), None).is_err());
    }

    #[test]
    fn plans_cover_the_axis() {
        for (outer, r, inner) in [
            (1, 1 << 26, 1),
            (4096, 4096, 1),
            (1, 8192, 8192),
            (3, 5, 7),
            (1, 0, 1),
            (100_000, 3, 1),
            (1, 5 << 31, 2),
            (2, 300, 4096),
        ] {
            let shape = ReduceShape { outer, r, inner };
            let p = ReducePlan::new(shape, 132, 4);
            assert!(p.splits >= 1 && p.splits * p.chunk >= r, "{p:?}");
            assert!(
                r == 0 || (p.splits - 1) * p.chunk < r,
                "no empty split: {p:?}"
            );
            if inner == 1 && !p.warp_rows {
                assert_eq!(p.chunk % CHUNK_ALIGN, 0);
            }
            if inner > 1 {
                assert!(p.chunk <= COL_MAX_ROWS, "32-bit row offsets: {p:?}");
                assert!(
                    p.chunk >= COL_FLOOR_ROWS.min(r),
                    "at least COL_FLOOR_ROWS rows a chunk: {p:?}"
                );
            }
        }
        // Long axes: chunks of COL_MIN_ROWS; shorter ones split further to fill the device.
        let cols = |r| {
            ReducePlan::new(
                ReduceShape {
                    outer: 1,
                    r,
                    inner: 8192,
                },
                132,
                4,
            )
        };
        assert_eq!(cols(8192).chunk, COL_MIN_ROWS, "{:?}", cols(8192));
        let short = cols(2048);
        assert!(
            short.chunk < COL_MIN_ROWS && short.splits * 64 >= 132 * 4,
            "{short:?}"
        );
        let big = ReducePlan::new(
            ReduceShape {
                outer: 1,
                r: 1 << 26,
                inner: 1,
            },
            132,
            4,
        );
        assert!(
            big.splits >= 132,
            "a full reduction spreads over the device: {big:?}"
        );
    }
}
