//! Batched matrix multiplication: `kernels/matmul.cu` and its CPU twin.
//!
//! `C[b] = A[b] @ B[b]` for `A [m, k]`, `B [k, n]` and contiguous `C [batch, m, n]`. Each
//! operand is read where it lies: row-major or transposed (column-major, the layout of a
//! transposed view), with its own leading dimension and batch stride (0 broadcasts one matrix
//! to every batch) ([`MatmulLayout`]). f32, f16 and bf16; f16 and bf16 products can also be
//! written as f32 ([`gpu_matmul_strided`] with an f32 output). Products are accumulated in f32
//! and rounded once to the output type (the CPU twin on the `gemm` crate, blocked, with fused
//! multiply-adds; the GPU fuses multiply-adds and f16/bf16 run on tensor cores in their own
//! order), so the two agree within the f32 rounding bound of the accumulation,
//! `(k + 2) 2^-24 sum |a||b|` plus the output's rounding, not bit for bit. The host also
//! multiplies f64 and i32/i64 ([`matmul_host`]), which have no kernel.
//!
//! f32 products run at [`MatmulPrecision::Highest`] (full f32, the default) or, opted into,
//! [`MatmulPrecision::High`]: inputs truncated to TF32 on tensor cores (PyTorch's
//! `allow_tf32`), with the CPU twin [`matmul_strided_precision`] truncating the same way. On
//! Hopper a TF32 product runs on the `wgmma` kernel, which reads both operands k-major: an
//! operand that is not (a column-major `A`, a row-major `B`) is first copied k-major into the
//! plan's workspace ([`MatmulPlan::workspace_bytes_for`]; without that room the `mma.sync`
//! TF32 kernel runs instead).
//!
//! A [`MatmulPlan`] also splits `k` when the output has too few `128 x 128` tiles to fill the
//! GPU, or a matrix-vector product too few blocks to keep the memory busy (split-k: slices of
//! `k` into an f32 workspace, then a sum in a fixed order, so results are the same bits on
//! every run); [`gpu_matmul_planned`] runs a plan.
//!
//! On Hopper (compute capability 9.0), f16 and bf16 products run on the `wgmma` kernels of
//! `kernels/matmul_sm90.cu` (TMA, warp-specialised, persistent; `128 x 256` tiles when they
//! fill the GPU, else `128 x 128`, and `128 x 64` for `n` below 128; a plan from
//! [`MatmulPlan::new_for_device`] picks the tile, among them the ping-pong `128 x 128`,
//! `128 x 192` and `192 x 96` kernels and the cooperative `192 x 192` one, and the split by a
//! cost model) when the operands qualify:
//! `m` at least 128, `n` at least 64, `k` at least 64, both operands starting on 16 bytes, leading dimensions multiples of 8 elements,
//! and batch strides 0 or multiples of 8 elements of at least one matrix of `ld`-long lines.
//! Everything else, every other device, and every product while [`sm80_matmul_forced`]
//! (environment variable `GENESIS_MATMUL_SM80=1`, [`set_force_sm80_matmul`],
//! [`force_sm80_matmul_on_thread`]) runs the `mma.sync` kernels of `kernels/matmul.cu`. Both
//! are held to the same accumulation bound; [`last_matmul_kernel`] names the kernel a thread
//! queued last.

use crate::{Element, Error, Result};
use half::{bf16, f16};

mod host;

/// The problem: `batch` products of `[m, k] @ [k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulShape {
    /// Number of products.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// Elements between consecutive `A` matrices (0: one `A` for every batch).
    pub a_batch_stride: usize,
    /// Elements between consecutive `B` matrices (0: one `B` for every batch).
    pub b_batch_stride: usize,
}

impl MatmulShape {
    /// Elements of `A` the problem reads (from its first element): none without products,
    /// whatever the matrices' sizes.
    pub fn a_len(&self) -> Option<usize> {
        if self.batch == 0 {
            return Some(0);
        }
        span(self.batch, self.a_batch_stride, mul0(self.m, self.k)?)
    }

    /// Elements of `B` the problem reads (none without products).
    pub fn b_len(&self) -> Option<usize> {
        if self.batch == 0 {
            return Some(0);
        }
        span(self.batch, self.b_batch_stride, mul0(self.k, self.n)?)
    }

    /// Elements of `C` (0 when a factor is 0, whatever the others).
    pub fn c_len(&self) -> Option<usize> {
        mul0(mul0(self.batch, self.m)?, self.n)
    }

    /// Multiply-adds of the problem (`batch * m * n * k`, saturating).
    pub fn macs(&self) -> u128 {
        (self.batch as u128)
            .saturating_mul(self.m as u128)
            .saturating_mul(self.n as u128)
            .saturating_mul(self.k as u128)
    }
}

/// `a * b`, 0 when either is 0 (the other may be anything), `None` when it overflows.
fn mul0(a: usize, b: usize) -> Option<usize> {
    if a == 0 || b == 0 {
        Some(0)
    } else {
        a.checked_mul(b)
    }
}

/// Where one operand's elements lie: element `(i, j)` of an `[r, c]` operand is at
/// `i * ld + j`, or at `j * ld + i` when `transposed` (a column-major matrix, as a transposed
/// view of a row-major one is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatrixLayout {
    /// Column-major (the operand is the transpose of the row-major matrix in memory).
    pub transposed: bool,
    /// Elements between consecutive rows (or columns, when `transposed`).
    pub ld: usize,
}

impl MatrixLayout {
    /// A contiguous row-major `[_, cols]` matrix.
    pub fn row_major(cols: usize) -> MatrixLayout {
        MatrixLayout {
            transposed: false,
            ld: cols,
        }
    }

    /// A contiguous column-major `[rows, _]` matrix (the transpose of a contiguous
    /// `[_, rows]` one).
    pub fn col_major(rows: usize) -> MatrixLayout {
        MatrixLayout {
            transposed: true,
            ld: rows,
        }
    }

    /// Elements one `[rows, cols]` matrix of this layout spans from its first element.
    pub fn span(&self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        let (outer, inner) = if self.transposed {
            (cols, rows)
        } else {
            (rows, cols)
        };
        (outer - 1).checked_mul(self.ld)?.checked_add(inner)
    }

    /// The offset of element `(i, j)`.
    fn at(&self, i: usize, j: usize) -> usize {
        if self.transposed {
            j * self.ld + i
        } else {
            i * self.ld + j
        }
    }
}

/// The layouts of the two operands of a [`MatmulShape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulLayout {
    /// `A [m, k]`.
    pub a: MatrixLayout,
    /// `B [k, n]`.
    pub b: MatrixLayout,
}

impl MatmulLayout {
    /// Both operands contiguous and row-major (`lda = k`, `ldb = n`).
    pub fn contiguous(shape: &MatmulShape) -> MatmulLayout {
        MatmulLayout {
            a: MatrixLayout::row_major(shape.k),
            b: MatrixLayout::row_major(shape.n),
        }
    }

    /// Elements of `A` the problem reads (from its first element).
    pub fn a_len(&self, shape: &MatmulShape) -> Option<usize> {
        if shape.batch == 0 {
            return Some(0);
        }
        span(
            shape.batch,
            shape.a_batch_stride,
            self.a.span(shape.m, shape.k)?,
        )
    }

    /// Elements of `B` the problem reads (none without products).
    pub fn b_len(&self, shape: &MatmulShape) -> Option<usize> {
        if shape.batch == 0 {
            return Some(0);
        }
        span(
            shape.batch,
            shape.b_batch_stride,
            self.b.span(shape.k, shape.n)?,
        )
    }
}

fn span(batch: usize, stride: usize, one: usize) -> Option<usize> {
    if batch == 0 || one == 0 {
        return Some(0);
    }
    (batch - 1).checked_mul(stride)?.checked_add(one)
}

/// Element types of the matmul kernels.
pub trait MatmulElement: Element {
    /// The value widened to f32.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest-even.
    fn from_f32(x: f32) -> Self;
    /// The slice as f32 when `Self` is f32 (the host path reads such operands in place).
    #[doc(hidden)]
    fn as_f32s(_s: &[Self]) -> Option<&[f32]> {
        None
    }
    /// The slice as f32 when `Self` is f32 (the host path writes such outputs in place).
    #[doc(hidden)]
    fn as_f32s_mut(_s: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

impl MatmulElement for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn as_f32s(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_f32s_mut(s: &mut [f32]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl MatmulElement for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl MatmulElement for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

fn overflow() -> Error {
    Error::Unsupported {
        op: "matmul",
        reason: "shape overflows".into(),
    }
}

fn check(shape: &MatmulShape, layout: &MatmulLayout, a: usize, b: usize, c: usize) -> Result<()> {
    for (need, got) in [
        (layout.a_len(shape).ok_or_else(overflow)?, a),
        (layout.b_len(shape).ok_or_else(overflow)?, b),
        (shape.c_len().ok_or_else(overflow)?, c),
    ] {
        if got < need {
            return Err(Error::LengthMismatch {
                op: "matmul",
                expected: need,
                got,
            });
        }
    }
    Ok(())
}

/// The CPU twin: `c = a @ b` per batch for contiguous row-major operands, accumulated in f32.
pub fn matmul<T: MatmulOutput<T>>(shape: MatmulShape, a: &[T], b: &[T], c: &mut [T]) -> Result<()> {
    matmul_strided(shape, MatmulLayout::contiguous(&shape), a, b, c)
}

/// The CPU twin of [`gpu_matmul_strided`]: `c = a @ b` per batch with the operands where
/// `layout` says, accumulated in f32 and rounded once to `O` (f32 operands read in place by
/// the `gemm` crate, f16 and bf16 widened to f32 first; threads from rayon's pool for large
/// products).
pub fn matmul_strided<T: MatmulElement, O: MatmulOutput<T>>(
    shape: MatmulShape,
    layout: MatmulLayout,
    a: &[T],
    b: &[T],
    c: &mut [O],
) -> Result<()> {
    matmul_strided_precision(shape, layout, MatmulPrecision::Highest, a, b, c)
}

/// `x` as the TF32 kernels use it: truncated to 10 mantissa bits (the low 13 bits cleared,
/// toward zero), which is how Hopper's tensor cores read an f32 operand in TF32 mode (the
/// `sm_80` TF32 kernel clears the same bits itself). NaN is returned as it is (the Hopper
/// kernel would read a NaN whose payload lies only in the low 13 bits as an infinity; no
/// arithmetic produces such a NaN). Finite values stay finite.
pub fn to_tf32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    f32::from_bits(x.to_bits() & !0x1fff)
}

/// The CPU twin of [`gpu_matmul_planned`]: [`matmul_strided`], with every input truncated by
/// [`to_tf32`] first at [`MatmulPrecision::High`] (the TF32 kernels' products; f16 and bf16
/// values are exact in TF32, so only f32 inputs change).
pub fn matmul_strided_precision<T: MatmulElement, O: MatmulOutput<T>>(
    shape: MatmulShape,
    layout: MatmulLayout,
    precision: MatmulPrecision,
    a: &[T],
    b: &[T],
    c: &mut [O],
) -> Result<()> {
    // f32 inputs are read as they are at full precision; every other input is widened (and,
    // at `High`, truncated to TF32) into an f32 copy first.
    let widen: Option<fn(T) -> f32> = match precision {
        MatmulPrecision::Highest => None,
        MatmulPrecision::High => Some(|x: T| to_tf32(x.to_f32())),
    };
    if settled(&shape, &layout, a.len(), b.len(), c, O::from_f32(0.0))? {
        return Ok(());
    }
    host::f32_accumulated(shape, layout, widen, a, b, c);
    Ok(())
}

/// Checks a host product and settles the ones with no multiply-adds: an empty output (nothing
/// to do, and nothing sized by `k`, which may be huge), or `k == 0` (zeros). `true` when it
/// settled the product.
fn settled<O: Copy>(
    shape: &MatmulShape,
    layout: &MatmulLayout,
    a_len: usize,
    b_len: usize,
    c: &mut [O],
    zero: O,
) -> Result<bool> {
    check(shape, layout, a_len, b_len, c.len())?;
    let c_len = shape.c_len().ok_or_else(overflow)?;
    if c_len == 0 {
        return Ok(true);
    }
    if shape.k == 0 {
        c[..c_len].fill(zero);
        return Ok(true);
    }
    Ok(false)
}

/// Element types of the host matmul [`matmul_host`]: f32, f16 and bf16 (the CPU twin, f32
/// accumulation), f64 (accumulated in f64) and the integers u8, i8, i16, i32 and i64 (exact,
/// wrapping). The integers have no GPU kernels.
pub trait HostMatmul: Copy + Default + Send + Sync + 'static {
    /// `c = a @ b` for checked, non-empty problems (`m`, `n`, `k`, `batch` positive).
    #[doc(hidden)]
    fn host_product(
        shape: MatmulShape,
        layout: MatmulLayout,
        a: &[Self],
        b: &[Self],
        c: &mut [Self],
    );
}

/// `HostMatmul` for the types whose product is `$product(shape, layout, a, b, c)`.
macro_rules! host_matmul {
    ($product:expr; $($t:ty),*) => {$(
        impl HostMatmul for $t {
            fn host_product(
                shape: MatmulShape,
                layout: MatmulLayout,
                a: &[Self],
                b: &[Self],
                c: &mut [Self],
            ) {
                $product(shape, layout, a, b, c);
            }
        }
    )*};
}
host_matmul!(|s, l, a, b, c| host::f32_accumulated::<Self, Self>(s, l, None, a, b, c); f32, f16, bf16);
host_matmul!(host::f64_product; f64);
host_matmul!(host::int_product; u8, i8, i16, i32, i64);

/// The host matmul of every dtype the CPU path takes: `c = a @ b` per batch with the operands
/// where `layout` says, into the contiguous `c [batch, m, n]`. f32, f16 and bf16 as
/// [`matmul_strided`] (accumulated in f32, rounded once); f64 accumulated in f64; integers
/// exact modulo 2^bits (wrapping, as PyTorch's CPU matmul). The checks are
/// [`matmul_strided`]'s.
pub fn matmul_host<T: HostMatmul>(
    shape: MatmulShape,
    layout: MatmulLayout,
    a: &[T],
    b: &[T],
    c: &mut [T],
) -> Result<()> {
    // Every element type's default is its zero.
    if settled(&shape, &layout, a.len(), b.len(), c, T::default())? {
        return Ok(());
    }
    T::host_product(shape, layout, a, b, c);
    Ok(())
}

/// Output types of a matmul of `T` operands: `T` itself, and f32 for f16 and bf16.
pub trait MatmulOutput<T: MatmulElement>: MatmulElement {
    /// The kernels, indexed by `[a transposed][b transposed][any]` (`any`: the kernel that
    /// reads operands of any alignment, element by element).
    const KERNELS: [[[&'static str; 2]; 2]; 2];
    /// The elements of a 16-byte vector of `T` (the fast kernels' alignment).
    const VECTOR: usize = 16 / std::mem::size_of::<T>();
    /// The matrix-vector kernels (m == 1 or n == 1): `[dot, axpy, axpy2, wide]`.
    const GEMV: [&'static str; 4];
    /// The kernels of `T` operands with an f32 output (the split-k partial products), indexed
    /// as [`MatmulOutput::KERNELS`].
    const PARTIAL: [[[&'static str; 2]; 2]; 2];
    /// The kernel that sums split-k partials into `Self`.
    const SPLITK_SUM: &'static str;
    /// The TF32 kernels when `T` and `Self` are f32 (indexed as [`MatmulOutput::KERNELS`]).
    const TF32: Option<[[[&'static str; 2]; 2]; 2]> = None;
    /// The full-precision kernels of `256 x 64` tiles, for `n <= 64`, when `T` and `Self` are
    /// f32 (indexed as [`MatmulOutput::KERNELS`]; f32 output, so also the split partials).
    const N64: Option<[[[&'static str; 2]; 2]; 2]> = None;
    /// The same kernels storing C transposed, for products of `m <= 64 < n` run as
    /// `C^T = B^T A^T` (operands swapped, each read in place in the opposite major order).
    const N64_CT: Option<[[[&'static str; 2]; 2]; 2]> = None;
    /// The full-precision kernels of `64 x 64` tiles (two blocks a multiprocessor), for
    /// small products, when `T` and `Self` are f32 (indexed as [`MatmulOutput::KERNELS`]).
    const SMALL: Option<[[[&'static str; 2]; 2]; 2]> = None;
    /// The full-precision kernels of `128 x 256` tiles (`kernels/matmul_f32w.cu`), for large
    /// products of aligned operands, when `T` and `Self` are f32 (indexed by `[a transposed][b
    /// transposed]`; there is no kernel for unaligned operands).
    const WIDE: Option<[[&'static str; 2]; 2]> = None;
    /// The Hopper kernels of `kernels/matmul_sm90.cu` when `T` is f16 or bf16.
    const SM90: Option<Sm90Kernels> = None;
}

/// The Hopper (`sm_90a`) kernels of one operand and output type (`kernels/matmul_sm90.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sm90Kernels {
    /// bf16 operands (else f16): the element type of the tensor maps.
    bf16: bool,
    /// Indexed by `[a transposed][b transposed][kernel]`, kernel 0: `128 x 256` outputs, 1:
    /// `128 x 128`, 2: `128 x 64`, 3: `192 x 192` (tile 6).
    kernels: [[[&'static str; 4]; 2]; 2],
    /// The f32-output kernels (split-k partial products), indexed as `kernels`.
    partial: [[[&'static str; 4]; 2]; 2],
    /// The ping-pong `128 x 128` kernels (tile 3) by `[a transposed][b transposed]`, for 16-bit
    /// outputs of unsplit products.
    pingpong: Option<[[&'static str; 2]; 2]>,
    /// The ping-pong `128 x 192` kernels (tile 4), indexed as `pingpong`.
    pingpong_wide: Option<[[&'static str; 2]; 2]>,
    /// The ping-pong `192 x 96` kernels (tile 5), indexed as `pingpong`.
    pingpong_tall: Option<[[&'static str; 2]; 2]>,
}

/// The kernel table `<prefix>_<ab>[_any]`.
macro_rules! table {
    ($p:literal) => {
        [
            [
                [concat!($p, "_nn"), concat!($p, "_nn_any")],
                [concat!($p, "_nt"), concat!($p, "_nt_any")],
            ],
            [
                [concat!($p, "_tn"), concat!($p, "_tn_any")],
                [concat!($p, "_tt"), concat!($p, "_tt_any")],
            ],
        ]
    };
}

/// The Hopper kernel table `<prefix>_<ab>_<256|128|64>`.
macro_rules! sm90_table {
    ($p:literal) => {
        [
            [
                [
                    concat!($p, "_nn_256"),
                    concat!($p, "_nn_128"),
                    concat!($p, "_nn_64"),
                    concat!($p, "_nn_192x192"),
                ],
                [
                    concat!($p, "_nt_256"),
                    concat!($p, "_nt_128"),
                    concat!($p, "_nt_64"),
                    concat!($p, "_nt_192x192"),
                ],
            ],
            [
                [
                    concat!($p, "_tn_256"),
                    concat!($p, "_tn_128"),
                    concat!($p, "_tn_64"),
                    concat!($p, "_tn_192x192"),
                ],
                [
                    concat!($p, "_tt_256"),
                    concat!($p, "_tt_128"),
                    concat!($p, "_tt_64"),
                    concat!($p, "_tt_192x192"),
                ],
            ],
        ]
    };
}

macro_rules! kernels {
    ($t:ty => $o:ty, $p:literal, $g:literal, $partial:literal, $sum:literal
     $(, tf32: $tf32:literal, n64: $n64:literal, n64ct: $n64ct:literal, small: $small:literal)? $(, sm90: $bf16:literal, $sm90:literal, $sm90_partial:literal, $pp:expr, $ppw:expr, $ppt:expr)?) => {
        impl MatmulOutput<$t> for $o {
            const GEMV: [&'static str; 4] = [
                concat!("gemv_dot_", $g),
                concat!("gemv_axpy_", $g),
                concat!("gemv_axpy2_", $g),
                concat!("gemv_wide_", $g),
            ];
            const KERNELS: [[[&'static str; 2]; 2]; 2] = table!($p);
            const PARTIAL: [[[&'static str; 2]; 2]; 2] = table!($partial);
            const SPLITK_SUM: &'static str = $sum;
            $(const TF32: Option<[[[&'static str; 2]; 2]; 2]> = Some(table!($tf32));
              const N64: Option<[[[&'static str; 2]; 2]; 2]> = Some(table!($n64));
              const N64_CT: Option<[[[&'static str; 2]; 2]; 2]> = Some(table!($n64ct));
              const SMALL: Option<[[[&'static str; 2]; 2]; 2]> = Some(table!($small));
              const WIDE: Option<[[&'static str; 2]; 2]> = Some([
                  ["matmul_f32w_nn", "matmul_f32w_nt"],
                  ["matmul_f32w_tn", "matmul_f32w_tt"],
              ]);)?
            $(const SM90: Option<Sm90Kernels> = Some(Sm90Kernels {
                bf16: $bf16,
                kernels: sm90_table!($sm90),
                partial: sm90_table!($sm90_partial),
                pingpong: $pp,
                pingpong_wide: $ppw,
                pingpong_tall: $ppt,
            });)?
        }
    };
}
kernels!(f32 => f32, "matmul_f32", "f32", "matmul_f32", "splitk_sum_f32", tf32: "matmul_tf32",
    n64: "matmul_f32n64", n64ct: "matmul_f32n64ct", small: "matmul_f32s");
/// The ping-pong kernel tables `<prefix>_pp_<ab>_128`, `<prefix>_pp_<ab>_192` and
/// `<prefix>_pp_<ab>_192x96`.
macro_rules! pp_table {
    ($p:literal) => {
        Some([
            [concat!($p, "_pp_nn_128"), concat!($p, "_pp_nt_128")],
            [concat!($p, "_pp_tn_128"), concat!($p, "_pp_tt_128")],
        ])
    };
}
macro_rules! pp_wide_table {
    ($p:literal) => {
        Some([
            [concat!($p, "_pp_nn_192"), concat!($p, "_pp_nt_192")],
            [concat!($p, "_pp_tn_192"), concat!($p, "_pp_tt_192")],
        ])
    };
}
macro_rules! pp_tall_table {
    ($p:literal) => {
        Some([
            [concat!($p, "_pp_nn_192x96"), concat!($p, "_pp_nt_192x96")],
            [concat!($p, "_pp_tn_192x96"), concat!($p, "_pp_tt_192x96")],
        ])
    };
}
kernels!(f16 => f16, "matmul_f16", "f16", "matmul_f16_f32out", "splitk_sum_f16",
    sm90: false, "matmul_sm90_f16", "matmul_sm90_f16_f32out", pp_table!("matmul_sm90_f16"),
    pp_wide_table!("matmul_sm90_f16"), pp_tall_table!("matmul_sm90_f16"));
kernels!(f16 => f32, "matmul_f16_f32out", "f16_f32out", "matmul_f16_f32out", "splitk_sum_f32",
    sm90: false, "matmul_sm90_f16_f32out", "matmul_sm90_f16_f32out", None, None, None);
kernels!(bf16 => bf16, "matmul_bf16", "bf16", "matmul_bf16_f32out", "splitk_sum_bf16",
    sm90: true, "matmul_sm90_bf16", "matmul_sm90_bf16_f32out", pp_table!("matmul_sm90_bf16"),
    pp_wide_table!("matmul_sm90_bf16"), pp_tall_table!("matmul_sm90_bf16"));
kernels!(bf16 => f32, "matmul_bf16_f32out", "bf16_f32out", "matmul_bf16_f32out", "splitk_sum_f32",
    sm90: true, "matmul_sm90_bf16_f32out", "matmul_sm90_bf16_f32out", None, None, None);

/// The precision of f32 products, PyTorch's `torch.set_float32_matmul_precision`. f16 and bf16
/// products are the same at every precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum MatmulPrecision {
    /// Full f32 inputs and accumulation (CUDA cores): PyTorch's default, `"highest"`.
    #[default]
    Highest,
    /// Inputs truncated to TF32 (10 mantissa bits, [`to_tf32`]), products accumulated in f32
    /// on tensor cores: PyTorch's `"high"` (`allow_tf32 = True`). A relative error below
    /// `2^-10` per input instead of `2^-24`. Matrix-vector products (`m` or `n` 1), which are
    /// bound by memory, stay in full f32.
    High,
}

/// Block tile of every matmul kernel (`128 x 128` outputs).
const TILE: usize = 128;

/// The process-wide switch of [`set_force_sm80_matmul`]: 0 unset (the environment decides),
/// 1 forced, 2 not forced.
static FORCE_SM80: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

thread_local! {
    /// The calling thread's override of [`force_sm80_matmul_on_thread`].
    static FORCE_SM80_THREAD: std::cell::Cell<Option<bool>> =
        const { std::cell::Cell::new(None) };
    /// The matmul kernel the thread queued last ([`last_matmul_kernel`]).
    static LAST_KERNEL: std::cell::Cell<Option<&'static str>> =
        const { std::cell::Cell::new(None) };
}

/// Whether the environment asks for the `sm_80` kernels: `GENESIS_MATMUL_SM80` set to anything
/// but empty or `0`, read once per process.
fn sm80_from_env() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| {
        std::env::var_os("GENESIS_MATMUL_SM80").is_some_and(|v| !v.is_empty() && v != "0")
    })
}

/// Forces (`true`) every f16 and bf16 matrix product of the process onto the `mma.sync` kernels
/// of `kernels/matmul.cu` even where the Hopper kernels would run, or lets the launcher choose
/// again (`false`). Overrides the environment variable `GENESIS_MATMUL_SM80` (which, set to
/// anything but empty or `0`, forces them from the start); a thread's
/// [`force_sm80_matmul_on_thread`] overrides both. Results agree within the same bound either
/// way; the switch exists to test and compare the two paths on a Hopper GPU.
pub fn set_force_sm80_matmul(force: bool) {
    FORCE_SM80.store(
        if force { 1 } else { 2 },
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Overrides [`set_force_sm80_matmul`] for the products the calling thread queues:
/// `Some(true)` forces the `sm_80` kernels, `Some(false)` lets the launcher choose, `None`
/// follows the process-wide setting again.
pub fn force_sm80_matmul_on_thread(force: Option<bool>) {
    FORCE_SM80_THREAD.with(|f| f.set(force));
}

/// Whether the calling thread's f16 and bf16 products are forced onto the `sm_80` kernels
/// (see [`set_force_sm80_matmul`]).
pub fn sm80_matmul_forced() -> bool {
    if let Some(force) = FORCE_SM80_THREAD.with(|f| f.get()) {
        return force;
    }
    match FORCE_SM80.load(std::sync::atomic::Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => sm80_from_env(),
    }
}

/// The name of the matmul kernel the calling thread queued last (`matmul_bf16_nt`,
/// `matmul_sm90_bf16_nt_256`, `gemv_dot_f32`, ...; for a split product the partial-product
/// kernel, not the sum), or `None` when it queued none. For tests and benchmarks that must
/// know which path ran.
pub fn last_matmul_kernel() -> Option<&'static str> {
    LAST_KERNEL.with(|k| k.get())
}

#[cfg(feature = "cuda")]
fn record_kernel(name: &'static str) {
    LAST_KERNEL.with(|k| k.set(Some(name)));
}

/// Rows of a Hopper kernel's tile by tile index (the kernels' `BM`): 0 `128 x 256`, 1
/// `128 x 128`, 2 `128 x 64`, 3 `128 x 128` ping-pong, 4 `128 x 192` ping-pong, 5 `192 x 96`
/// ping-pong, 6 `192 x 192` (three consumer warpgroups).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SM90_TILE_M: [usize; 7] = [128, 128, 128, 128, 128, 192, 192];

/// Threads of a Hopper kernel's block by tile: a producer warpgroup and two consumers, three
/// for tile 6.
#[cfg(feature = "cuda")]
const SM90_THREADS: [u32; 7] = [384, 384, 384, 384, 384, 384, 512];

/// k depth of a Hopper kernel's shared-memory stage, the least `k` it is used for.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SM90_BK: usize = 64;

/// Columns of a Hopper kernel's tile by tile index (the kernels' `BN`).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SM90_TILE_N: [usize; 7] = [256, 128, 64, 128, 192, 96, 192];

/// Dynamic shared memory of the Hopper kernels by tile (`Config<BN>::SMEM` in
/// `kernels/matmul_sm90.cu`): 1 KiB of alignment slack, the stages (4 of 48 KiB, 6 of 32 KiB
/// or 8 of 24 KiB), two mbarriers per stage and the ping-pong kernels' two turn mbarriers;
/// tile 3 (`128 x 128` ping-pong) as tile 1; tile 4 (`128 x 192` ping-pong): 5 stages of 40
/// KiB and two f32 bias buffers of 192 columns for each consumer; tile 5 (`192 x 96`
/// ping-pong): 6 stages of 36 KiB; tile 6 (`192 x 192`): 4 stages of 48 KiB.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SM90_SMEM: [u32; 7] = [
    1024 + 4 * 49152 + 4 * 16 + 16,
    1024 + 6 * 32768 + 6 * 16 + 16,
    1024 + 8 * 24576 + 8 * 16 + 16,
    1024 + 6 * 32768 + 6 * 16 + 16,
    1024 + 5 * 40960 + 5 * 16 + 16 + 4 * 192 * 4,
    1024 + 6 * 36864 + 6 * 16 + 16,
    1024 + 4 * 49152 + 4 * 16 + 16,
];

/// The Hopper tile for a product, or `None` when it must run on the `sm_80` kernels (see the
/// module docs): tile 2 (`128 x 64`) when `n < 128`, else tile 0 (`128 x 256`) when its work
/// units fill the multiprocessors, else tile 1 (`128 x 128`).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn sm90_tile(
    cc: (u32, u32),
    sms: usize,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a_addr: u64,
    b_addr: u64,
) -> Option<usize> {
    let s = plan.shape;
    let ok = sm90_shape_ok(plan, cc, SM90_BK)
        && tma_in_place(
            a_addr,
            layout.a,
            s.a_batch_stride,
            lines_of(layout.a, s.m, s.k).0,
            s.batch,
            8,
        )
        && tma_in_place(
            b_addr,
            layout.b,
            s.b_batch_stride,
            lines_of(layout.b, s.k, s.n).0,
            s.batch,
            8,
        );
    if !ok {
        return None;
    }
    Some(sm90_width(plan, sms))
}

/// Whether the shape of `plan` suits the Hopper kernels on a device of compute capability
/// `cc` (stages `min_k` deep): compute capability 9.0, the `sm_80` kernels not forced, at least
/// one `128 x 64` tile and one stage, extents the kernels' 32-bit coordinates hold (a tile may
/// start up to 255 past an extent), split slices a multiple of 32.
fn sm90_shape_ok(plan: &MatmulPlan, cc: (u32, u32), min_k: usize) -> bool {
    let s = plan.shape;
    let fits = |x: usize| x < (1 << 31) - 512;
    cc == (9, 0)
        && !sm80_matmul_forced()
        && s.m >= 128
        && s.n >= 64
        && s.k >= min_k
        && fits(s.m)
        && fits(s.n)
        && fits(s.k)
        && fits(s.batch)
        && (plan.splits <= 1 || plan.kslice.is_multiple_of(SLICE_ALIGN))
}

/// Whether TMA reads an operand in place: it starts on 16 bytes, its leading dimension is a
/// multiple of `v` elements (16 bytes), and, over `batch` products, its batch stride is 0 or a
/// multiple of `v` of at least a whole matrix of `lines` lines (the tensor map's batch
/// dimension, strides growing with the dimension).
fn tma_in_place(
    addr: u64,
    l: MatrixLayout,
    stride: usize,
    lines: usize,
    batch: usize,
    v: usize,
) -> bool {
    addr.is_multiple_of(16)
        && l.ld.is_multiple_of(v)
        && (batch == 1
            || stride == 0
            || (stride.is_multiple_of(v) && l.ld.checked_mul(lines).is_some_and(|w| stride >= w)))
}

/// The Hopper tile of a qualifying product: 2 (`128 x 64`) when `n < 128`, else 0 (`128 x
/// 256`) when its work units fill the `sms` multiprocessors, else 1 (`128 x 128`).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn sm90_width(plan: &MatmulPlan, sms: usize) -> usize {
    let (s, splits) = (plan.shape, plan.splits);
    if s.n < 128 {
        return 2;
    }
    if let Some(tile) = plan.sm90 {
        return tile;
    }
    if sm90_units(s, 0, splits.max(1)) >= sms {
        0
    } else {
        1
    }
}

/// Work units of a Hopper product on tile `tile`: its tiles of every batch, times the k
/// slices.
fn sm90_units(s: MatmulShape, tile: usize, splits: usize) -> usize {
    s.m.div_ceil(SM90_TILE_M[tile])
        .saturating_mul(s.n.div_ceil(SM90_TILE_N[tile]))
        .saturating_mul(s.batch)
        .saturating_mul(splits)
}

/// Launches `kernel` with `args` as its parameters, each a `u64` (device addresses and
/// extents).
///
/// # Safety
///
/// The kernel takes exactly these `N` 64-bit parameters, in this order, and the launch is
/// valid for them: every address it reads or writes lies in memory the caller owns for the
/// duration of the launch, as the caller's own SAFETY argument says.
#[cfg(feature = "cuda")]
unsafe fn launch_u64<const N: usize>(
    stream: &genesis_cuda::Stream,
    kernel: &genesis_cuda::Kernel,
    config: genesis_cuda::LaunchConfig,
    mut args: [u64; N],
) -> Result<()> {
    let base = args.as_mut_ptr();
    let mut params: [*mut std::ffi::c_void; N] =
        std::array::from_fn(|i| base.wrapping_add(i).cast());
    // SAFETY: `params` points at the `N` values of `args`, alive until the launch returns;
    // the rest is the caller's guarantee.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Launches an operand copy of the launcher (`matmul_pad_copy_*`, `matmul_sm90_stage_t`):
/// parameters (source, destination, six u64 `dims`).
///
/// # Safety
///
/// `kernel` takes exactly those parameters, and with them and `config` reads only the
/// source operand and writes only a region of the destination nothing else uses until the
/// launch completes.
#[cfg(feature = "cuda")]
unsafe fn launch_copy(
    stream: &genesis_cuda::Stream,
    kernel: &genesis_cuda::Kernel,
    src: u64,
    dst: u64,
    dims: [u64; 6],
    config: genesis_cuda::LaunchConfig,
) -> Result<()> {
    let [d0, d1, d2, d3, d4, d5] = dims;
    // SAFETY: as the caller guarantees.
    unsafe { launch_u64(stream, kernel, config, [src, dst, d0, d1, d2, d3, d4, d5]) }
}

/// How many copies staging makes of an operand whose batches are `stride` apart: one for a
/// single batch or a broadcast operand (stride 0), else one a batch.
#[cfg(feature = "cuda")]
fn staged_copies(batch: usize, stride: usize) -> usize {
    if batch == 1 || stride == 0 { 1 } else { batch }
}

/// What a product reads once some operands were staged into the workspace: the shape (batch
/// strides), layout and addresses of `A` and `B`.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy)]
struct Operands {
    shape: MatmulShape,
    layout: MatmulLayout,
    a: u64,
    b: u64,
}

#[cfg(feature = "cuda")]
impl Operands {
    /// Reads `A` (`is_a`) or `B` from its copy at `addr`, laid out as `layout`, with copies
    /// `copy_len` elements apart (one copy: batch stride 0).
    fn use_copy(
        &mut self,
        is_a: bool,
        layout: MatrixLayout,
        copies: usize,
        copy_len: usize,
        addr: u64,
    ) {
        let stride = if copies == 1 { 0 } else { copy_len };
        if is_a {
            self.layout.a = layout;
            self.shape.a_batch_stride = stride;
            self.a = addr;
        } else {
            self.layout.b = layout;
            self.shape.b_batch_stride = stride;
            self.b = addr;
        }
    }
}

/// Copies the operands that [`pad_staging`] names into the workspace (after the split
/// partials), lines padded to 16 bytes, by `matmul_pad_copy_b16` / `_b32`. Returns the operands
/// to multiply instead, or `None` when nothing was copied (nothing to copy, a workspace without
/// room for the copies, or more than 65535 batches).
///
/// # Safety
///
/// `a` and `b` hold `T` values wherever `layout` reads them (checked by the caller);
/// `workspace` is borrowed exclusively.
#[cfg(feature = "cuda")]
unsafe fn pad_stage<T: MatmulElement>(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: u64,
    b: u64,
    workspace: &mut genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<Option<Operands>> {
    use genesis_cuda::{Kernel, LaunchConfig};

    let ctx = stream.context();
    let elem = size_of::<T>();
    let Some((a_elems, b_elems)) =
        pad_staging(plan, &layout, elem, ctx.compute_capability(), (a, b))
    else {
        return Ok(None);
    };
    let s = plan.shape;
    let copies = |stride: usize| staged_copies(s.batch, stride);
    let a_at = ws_align(plan.workspace_bytes());
    let b_at = a_at.saturating_add(ws_align(a_elems.saturating_mul(elem)));
    if a_elems + b_elems == 0
        || workspace.len() < b_at.saturating_add(b_elems.saturating_mul(elem))
        || !workspace.is_aligned_to(16)
        || copies(s.a_batch_stride).max(copies(s.b_batch_stride)) > 65535
    {
        return Ok(None);
    }
    let kernel = Kernel::get(
        ctx,
        &crate::images::MATMUL,
        if elem == 2 {
            "matmul_pad_copy_b16"
        } else {
            "matmul_pad_copy_b32"
        },
    )?;
    let v = 16 / elem;
    let ws = workspace.addr();
    let mut ops = Operands {
        shape: s,
        layout,
        a,
        b,
    };
    for (is_a, elems) in [(true, a_elems), (false, b_elems)] {
        if elems == 0 {
            continue;
        }
        let (src, l, stride, rows, cols, at) = if is_a {
            (a, layout.a, s.a_batch_stride, s.m, s.k, a_at)
        } else {
            (b, layout.b, s.b_batch_stride, s.k, s.n, b_at)
        };
        let (lines, inner) = lines_of(l, rows, cols);
        let n_copies = copies(stride);
        let dld = inner.div_ceil(v) * v;
        let pdst = ws + at as u64;
        let dims = [
            lines as u64,
            inner as u64,
            l.ld as u64,
            if n_copies == 1 { 0 } else { stride as u64 },
            dld as u64,
            (lines * dld) as u64,
        ];
        let config = LaunchConfig {
            grid: (
                inner.div_ceil(256).min(1 << 16) as u32,
                lines.min(65535) as u32,
                n_copies as u32,
            ),
            block: (256, 1, 1),
            shared_bytes: 0,
        };
        // SAFETY: the parameters match `matmul_pad_copy_<b16|b32>(const E*, E*, u64 lines, u64
        // inner, u64 ld, u64 sstride, u64 dld, u64 dstride)` with `E` of `T`'s size; the
        // source holds `lines` lines of `inner` elements at `ld` apart for every batch (the
        // caller checked the span against the layout); the destination is `copies * lines *
        // dld` elements of the workspace region reserved for it (checked above).
        unsafe { launch_copy(stream, &kernel, src, pdst, dims, config)? };
        let aligned = MatrixLayout {
            transposed: l.transposed,
            ld: dld,
        };
        ops.use_copy(is_a, aligned, n_copies, lines * dld, pdst);
    }
    Ok(Some(ops))
}

/// The Hopper TF32 kernels by tile (as [`SM90_TILE_N`]): k-major `A` and `B`.
#[cfg(feature = "cuda")]
const SM90_TF32: [&str; 3] = [
    "matmul_sm90_tf32_nt_256",
    "matmul_sm90_tf32_nt_128",
    "matmul_sm90_tf32_nt_64",
];

/// Queues a TF32 product of f32 operands at `a` and `b` on the Hopper kernel when it qualifies
/// ([`tf32_staging`], operands read in place starting on 16 bytes with leading dimensions and
/// batch strides multiples of 4 elements, `workspace` as large as
/// [`MatmulPlan::workspace_bytes_for`]): operands that are not k-major are first copied
/// k-major into the workspace (after the split partials) by `matmul_sm90_stage_t`; the
/// product goes to `c`, or for a split plan to the partials at the workspace's start (the
/// caller then sums them). Returns whether it queued anything.
///
/// # Safety
///
/// As [`gemm`] for `c` (`batch * m * n` f32 values); `a` and `b` hold f32 values where
/// `layout` reads them (checked by the caller); `workspace` is borrowed exclusively.
#[cfg(feature = "cuda")]
unsafe fn tf32_sm90(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: u64,
    b: u64,
    c: u64,
    workspace: &mut genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<bool> {
    use genesis_cuda::{Kernel, LaunchConfig};

    let ctx = stream.context();
    let Some((a_elems, b_elems)) = tf32_staging(plan, &layout, ctx.compute_capability()) else {
        return Ok(false);
    };
    let s = plan.shape;
    let split = plan.workspace_bytes();
    let a_at = ws_align(split);
    let b_at = a_at.saturating_add(ws_align(a_elems.saturating_mul(4)));
    if workspace.len() < b_at.saturating_add(b_elems.saturating_mul(4))
        || !workspace.is_aligned_to(16)
    {
        return Ok(false);
    }
    // An operand read in place (k-major: m lines of A, n lines of B) in units of 4 f32.
    if (a_elems == 0 && !tma_in_place(a, layout.a, s.a_batch_stride, s.m, s.batch, 4))
        || (b_elems == 0 && !tma_in_place(b, layout.b, s.b_batch_stride, s.n, s.batch, 4))
    {
        return Ok(false);
    }
    let ld = (s.k + 3) & !3;
    let copies = |stride: usize| staged_copies(s.batch, stride);
    // The staging grid: (ceil(mn / 32), ceil(k / 32), copies).
    let grid_ok = |mn: usize, stride: usize| {
        mn.div_ceil(32) <= i32::MAX as usize && s.k.div_ceil(32) <= 65535 && copies(stride) <= 65535
    };
    if (a_elems > 0 && !grid_ok(s.m, s.a_batch_stride))
        || (b_elems > 0 && !grid_ok(s.n, s.b_batch_stride))
    {
        return Ok(false);
    }
    let stage = Kernel::get(ctx, &crate::images::MATMUL_SM90, "matmul_sm90_stage_t")?;
    let ws = workspace.addr();
    let mut ops = Operands {
        shape: s,
        layout,
        a,
        b,
    };
    for (is_a, elems) in [(true, a_elems), (false, b_elems)] {
        if elems == 0 {
            continue;
        }
        // (source, its layout, its batch stride, rows m or n, destination offset)
        let (src, l, stride, mn, at) = if is_a {
            (a, layout.a, s.a_batch_stride, s.m, a_at)
        } else {
            (b, layout.b, s.b_batch_stride, s.n, b_at)
        };
        let n_copies = copies(stride);
        let pdst = ws + at as u64;
        // The operand in memory is `k` lines of `mn` values at `ld` apart; its copy is `mn`
        // lines of `k` values at `ld` (k rounded up to 4) apart.
        let dims = [
            s.k as u64,
            mn as u64,
            l.ld as u64,
            if n_copies == 1 { 0 } else { stride as u64 },
            ld as u64,
            (mn * ld) as u64,
        ];
        let config = LaunchConfig {
            grid: (
                mn.div_ceil(32) as u32,
                s.k.div_ceil(32) as u32,
                n_copies as u32,
            ),
            block: (32, 8, 1),
            shared_bytes: 0,
        };
        // SAFETY: the parameters match `matmul_sm90_stage_t(const float*, float*, u64 rows,
        // u64 cols, u64 ld, u64 sstride, u64 dld, u64 dstride)`; the source is the operand's
        // `k x mn` lines (mn-major: column-major A or row-major B), which the caller checked
        // the span holds for every batch; the destination is `copies * mn * ld` f32 values of
        // the workspace region reserved for it (checked above), borrowed exclusively.
        unsafe { launch_copy(stream, &stage, src, pdst, dims, config)? };
        let k_major = MatrixLayout {
            transposed: !is_a,
            ld,
        };
        ops.use_copy(is_a, k_major, n_copies, mn * ld, pdst);
    }
    let tile = sm90_width(plan, ctx.multiprocessors() as usize);
    let out = if plan.splits > 1 { ws } else { c };
    // SAFETY: `matmul_sm90_tf32_nt_<bn>` reads k-major f32 operands: the operands in place
    // (checked above) or their staged copies; it writes `splits` slices of `batch * m * n` f32
    // values to `out`: `c` as the caller guarantees, or the partials at the workspace's start
    // (`plan.workspace_bytes()` bytes, before the staging regions).
    unsafe {
        gemm_sm90::<f32>(
            stream,
            SM90_TF32[tile],
            false,
            tile,
            ops.shape,
            ops.layout,
            ops.a,
            ops.b,
            out,
            0,
            plan.splits,
            plan.kslice,
        )?;
    }
    Ok(true)
}

/// Granularity of a split-k slice: a multiple of every kernel's k step (32), which also keeps
/// each slice's first element as aligned as the operand's first for the 16-byte loads.
const SLICE_ALIGN: usize = 32;

/// The Hopper cost model ([`MatmulPlan::new_for_device`]), in nanoseconds, fitted (least
/// squares of relative error) to device times of bf16 products on an H200 (`gpu_matmul
/// --sweep-sm90`: every tile and split of GPT-2's linear layers at 32768 rows, uniform operands;
/// checked on ten other shapes, where the model's choices take 0.05 % more time in all than
/// the fastest, 1.2 % at worst, on `4095 x 4097 x 1023`): a 64-deep k step of a `128 x 256`, a
/// `128 x 128`, a ping-pong `128 x 128`, a ping-pong `128 x 192`, a ping-pong `192 x 96` and
/// a `192 x 192` tile (the last two each fitted alone, the others' constants held, to the same
/// shapes' times of that tile in a later call); a unit's fixed time
/// (its epilogue and pipeline fill, mostly hidden by the ping-pong kernels) with 16-bit and
/// with f32 (split) outputs; a byte of f32 partials written and summed; a split product's
/// summing launch.
const SM90_K_NS: [f64; 6] = [659.2, 374.6, 336.5, 470.5, 424.6, 716.0];
const SM90_UNIT_NS: [[f64; 2]; 6] = [
    [3177.5, 6700.6],
    [1627.9, 3460.7],
    [1629.1, 0.0],
    [1747.2, 0.0],
    [1414.8, 0.0],
    [3142.8, 7371.5],
];
const SM90_PARTIAL_NS: f64 = 0.0001926;
const SM90_SPLIT_NS: f64 = 16674.2;

/// The shortest slice of `k` the split rule makes (shorter slices spend more on the partials'
/// traffic and the prologue than they gain in parallelism).
const MIN_SLICE: usize = 256;

/// The SIMT cost model ([`MatmulPlan::new_for`]), in nanoseconds, fitted to device times of
/// f32 products on an H200 (`gpu_matmul --sweep`: squares from 100 to 1000, rectangles, thin
/// and batched products, every tile and split; fitted on half the shapes, checked on the
/// other half). A `128 x 128` (or `256 x 64`) tile's k step, one block per multiprocessor at a
/// time, and its prologue in k steps; one f32 partial written and summed; the summing launch.
const SIMT_TILE_K_NS: f64 = 95.2;
const SIMT_PROLOGUE_K: f64 = 37.7;
const PARTIAL_NS: f64 = 0.00122;
const REDUCE_LAUNCH_NS: f64 = 2100.0;

/// The model's `64 x 64` SIMT tiles (`matmul_f32s_*`): a k step of a block alone on a
/// multiprocessor (latency-bound: it goes no faster however few blocks share it), the
/// multiprocessor's throughput share of one block when several run on it (a k step of `c`
/// resident blocks takes `max(alone, c * shared)`), and the prologue in k steps.
const SMALL_K_NS_ALONE: f64 = 41.0;
const SMALL_K_NS_SHARED: f64 = 32.9;
const SMALL_PROLOGUE_K: f64 = 27.7;

/// The model's `128 x 256` SIMT tiles (`matmul_f32w_*`, one block a multiprocessor): a k step
/// of a tile (measured on an H200 at 2000^3, 2048^3 and 4096^3). Its prologue is taken as the
/// `128 x 128` tiles'.
const WIDE_TILE_K_NS: f64 = 175.0;

/// A full-precision f32 product with at least as many tiles as multiprocessors splits `k` only
/// when the split's modelled time is below this share of the unsplit one.
const FULL_SPLIT_GAIN: f64 = 0.85;

/// A full-precision f32 product that fills the multiprocessors and must split (a `k` past
/// [`SIMT_CHAIN`]) takes more slices than it needs only when their modelled time is below this
/// share of the fewest slices' time.
const CHAIN_SPLIT_GAIN: f64 = 0.95;

/// The longest run of `k` a full-precision f32 product accumulates in one register: a
/// longer `k` is split into slices of at most this length (up to [`MAX_SPLITS`]), summed in a
/// fixed order after ([`MatmulPlan::new_for`]). The rounding error of a sum in one accumulator
/// grows with the running sum, so long sums lose accuracy faster than their length: GPT-2's
/// head gradient `dlogits @ wte` (`k` = 50,304) unsplit has 1.6 times cuBLAS's error against
/// float64, and it reaches every gradient below the head. The slices' partials cost
/// `splits * m * n * 4` bytes of workspace and their traffic, small beside the products of a
/// `k` this long.
const SIMT_CHAIN: usize = 8192;

/// The wide SIMT tile (rows, columns).
const WIDE_TILE: (usize, usize) = (128, 256);

/// The k step of the wide SIMT kernel: `k` (and each split slice) must be a multiple of it.
const WIDE_K_STEP: usize = 16;

/// Bytes of dynamic shared memory of the wide SIMT kernel: two buffers of 16 k rows of
/// `128 + 4` and `256 + 4` floats.
#[cfg(feature = "cuda")]
const WIDE_SMEM: u32 = 2 * 16 * (132 + 260) * 4;

/// The side of the small SIMT tile.
const SMALL_TILE: usize = 64;

/// Most slices a split makes.
const MAX_SPLITS: usize = 32;

/// Output bytes a block of `gemv_wide_*` covers (8 lanes of 16-byte loads).
const GEMV_WIDE_BYTES: usize = 128;

/// Blocks a multiprocessor below which a matrix-vector product on `gemv_wide_*` splits `k`.
const GEMV_BLOCKS_PER_SM: usize = 4;

/// Whether a full-precision f32 product runs as `C^T = B^T A^T` ([`transposed_problem`]):
/// `m <= 64 < n`, where the `128 x 128` tiles would compute as many rows again and drop them
/// while the `256 x 64` tiles of the transposed problem compute none they drop.
fn transposes(shape: &MatmulShape) -> bool {
    shape.m > 1 && shape.m <= 64 && shape.n > 64
}

/// The problem `C^T = B^T A^T` of `C = A B`: `[n, k] @ [k, m]` with `B^T` read in place as the
/// first operand (the opposite major order at the same leading dimension) and `A^T` as the
/// second. Its output `C^T [n, m]`, stored transposed, is `C` row-major.
#[cfg(feature = "cuda")]
fn transposed_problem(shape: MatmulShape, layout: MatmulLayout) -> (MatmulShape, MatmulLayout) {
    let flip = |l: MatrixLayout| MatrixLayout {
        transposed: !l.transposed,
        ld: l.ld,
    };
    (
        MatmulShape {
            m: shape.n,
            n: shape.m,
            a_batch_stride: shape.b_batch_stride,
            b_batch_stride: shape.a_batch_stride,
            ..shape
        },
        MatmulLayout {
            a: flip(layout.b),
            b: flip(layout.a),
        },
    )
}

/// The SIMT kernel's output tiles of a full-precision f32 product, over the batch (saturating):
/// `256 x 64` tiles when `n <= 64` (of the transposed problem when `m <= 64 < n`), else
/// `128 x 128`. Every tile is 16384 outputs, eight warps of `32 x 64`.
fn simt_tiles(shape: &MatmulShape) -> usize {
    let (rows, cols) = if transposes(shape) {
        (shape.n, shape.m)
    } else {
        (shape.m, shape.n)
    };
    tiles_of(
        &MatmulShape {
            m: rows,
            n: cols,
            ..*shape
        },
        simt_tile(cols),
    )
}

/// Whether the wide SIMT kernel (`matmul_f32w_*`) can run `shape`, split or not, as far as
/// the shape tells: `m` and `n` above 64 (not the `256 x 64` tiles' products), `k` a multiple of its k
/// step, a batch within the grid's y extent, and extents its 32-bit offsets hold.
fn wide_shape(shape: &MatmulShape) -> bool {
    let small = |x: usize| x < 1 << 27;
    shape.m > 64
        && shape.n > 64
        && shape.k.is_multiple_of(WIDE_K_STEP)
        && shape.batch <= 65535
        && small(shape.m)
        && small(shape.n)
        && small(shape.k)
        && shape.m.checked_mul(shape.n).is_some_and(|mn| mn < 1 << 31)
}

/// The SIMT kernel's tile (rows, columns) for a product of `n` columns.
fn simt_tile(n: usize) -> (usize, usize) {
    if n <= 64 { (256, 64) } else { (TILE, TILE) }
}

/// The output tiles of `tile` (rows, columns) of `shape`, over the batch (saturating).
fn tiles_of(shape: &MatmulShape, (tm, tn): (usize, usize)) -> usize {
    shape
        .m
        .div_ceil(tm)
        .saturating_mul(shape.n.div_ceil(tn))
        .saturating_mul(shape.batch)
}

/// How [`gpu_matmul_planned`] runs one problem: the precision of f32 products and the split of
/// `k` (made by [`MatmulPlan::new`] from the shape and the device's multiprocessor count).
///
/// Split rule: a problem of `tiles = batch * ceil(m / 128) * ceil(n / 128)` output tiles is
/// split only when `tiles < sms` (one block per tile would leave multiprocessors idle) and it
/// is not a matrix-vector product (`m` or `n` 1). It is then split into
/// `S = min(ceil(2 sms / tiles), floor(k / 256), 32)` slices, when that is at least 2: enough
/// blocks for about two waves of one block per multiprocessor, each slice at least 256 long.
/// Full-precision f32 products (the SIMT kernel) choose their split by a cost model instead,
/// and matrix-vector products by the blocks of their kernel ([`MatmulPlan::new_for`]).
/// Slices are `kslice = ceil(k / S)` rounded up to a multiple of 32, so the last may be shorter
/// and there are `ceil(k / kslice)` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulPlan {
    shape: MatmulShape,
    precision: MatmulPrecision,
    splits: usize,
    kslice: usize,
    /// Full-precision f32 on the `64 x 64` SIMT tiles (`matmul_f32s_*`).
    small: bool,
    /// Full-precision f32 on the `128 x 256` SIMT tiles (`matmul_f32w_*`) when the operands
    /// allow them (see [`MatmulPlan::wide_tiles`]).
    wide: bool,
    /// The Hopper tile (0: `128 x 256`, 1: `128 x 128`, 3: `128 x 128` ping-pong, 4: `128 x 192`
    /// ping-pong) chosen with the split by [`MatmulPlan::new_for_device`]; `None`: by the rule
    /// of [`sm90_width`].
    sm90: Option<usize>,
}

impl MatmulPlan {
    /// The plan of a product of `T` operands: as [`MatmulPlan::new`], but a full-precision f32
    /// product whose SIMT tiles (`256 x 64` when `n <= 64` or, run as
    /// `C^T = B^T A^T`, when `m <= 64`; else `128 x 128`) leave multiprocessors idle takes the
    /// split (slices of at least 32), and where the `128 x 128` tiles apply the choice of them
    /// or the `64 x 64` tiles (two blocks a multiprocessor), of least modelled time: the
    /// slice's k steps times the time of a k step with the blocks each multiprocessor gets
    /// (one block at a time of the large tiles; a latency floor, or the multiprocessor's
    /// throughput shared, for the small ones), plus the partials' traffic and the summing
    /// launch. A product with at least as many SIMT tiles as multiprocessors runs unsplit (on
    /// the `128 x 256` tiles where their waves take less time) unless a split of its own tiles
    /// takes less than 0.85 of that modelled time: where the last wave of tiles is nearly
    /// empty (144 tiles on 132 multiprocessors, GPT-2's `3072 x 768` weight gradients).
    ///
    /// Whatever the shape, a `k` longer than 8192 is split so that no slice is longer
    /// (at most 32 slices): each output then sums at most 8192 products in one accumulator,
    /// whose rounding error grows with the running sum. Such a product that fills the
    /// multiprocessors takes the fewest slices
    /// that do, on the `128 x 128` or the `128 x 256` tiles, unless more take less than 0.95
    /// of their modelled time (each slice's partials cost `m * n * 4` bytes of workspace).
    ///
    /// A matrix-vector product (`m` or `n` 1, `k` at least 512) whose outputs lie contiguous in
    /// the matrix (`[1, k] @ [k, n]` with a row-major `B`, `[m, k] @ [k, 1]` with a
    /// column-major `A`) runs on a kernel whose blocks cover `128 / size_of::<T>()` outputs;
    /// with `blocks = batch * ceil(outputs / (128 / size_of::<T>()))` below `4 sms` the plan
    /// splits `k` into `min(ceil(4 sms / blocks), floor(k / 256), 32)` slices, so that the
    /// memory has enough reads in flight. The other matrix-vector kernels do not split: they
    /// run such a plan whole and leave its workspace unused.
    pub fn new_for<T: MatmulElement>(
        shape: MatmulShape,
        sms: usize,
        precision: MatmulPrecision,
    ) -> MatmulPlan {
        let simt = T::NAME == f32::NAME && precision == MatmulPrecision::Highest;
        let mut plan = Self::new(shape, sms, precision);
        if (shape.m == 1 || shape.n == 1) && shape.batch > 0 {
            let outs = if shape.m == 1 { shape.n } else { shape.m };
            let per_block = GEMV_WIDE_BYTES / size_of::<T>();
            let blocks = outs
                .div_ceil(per_block)
                .saturating_mul(shape.batch.min(65535));
            let want = (GEMV_BLOCKS_PER_SM * sms.max(1)).div_ceil(blocks.max(1));
            let splits = want.min(shape.k / MIN_SLICE).min(MAX_SPLITS);
            if splits >= 2 {
                plan.set_splits(splits);
            }
            return plan;
        }
        if !simt || shape.m <= 1 || shape.n <= 1 || shape.batch == 0 {
            return plan;
        }
        let tiles = simt_tiles(&shape);
        let sms = sms.max(1);
        // Unsplit on as many tiles as multiprocessors or more (`new` counts 128 x 128 tiles,
        // at least as many: unsplit too), the 128 x 256 tiles taking it when their waves (one
        // block a multiprocessor) take less time; a split below competes with that.
        let mut unsplit_ns = None;
        if tiles >= sms {
            let k = shape.k as f64 + SIMT_PROLOGUE_K;
            let narrow_ns = tiles.div_ceil(sms) as f64 * SIMT_TILE_K_NS * k;
            let mut ns = narrow_ns;
            if wide_shape(&shape) {
                let wide = tiles_of(&shape, WIDE_TILE);
                let wide_ns = wide.div_ceil(sms) as f64 * WIDE_TILE_K_NS * k;
                plan.wide = wide_ns < narrow_ns;
                ns = ns.min(wide_ns);
            }
            unsplit_ns = Some(ns);
        }
        // The 64 x 64 tiles serve the products the 128 x 128 tiles do (not those of
        // n <= 64, nor those run transposed).
        let small_ok = !transposes(&shape) && shape.n > 64;
        let small = tiles_of(&shape, (SMALL_TILE, SMALL_TILE));
        let values = shape.c_len().unwrap_or(usize::MAX) as f64;
        let cost = |p: &MatmulPlan| {
            let (units, alone, shared, prologue) = if p.small {
                (small, SMALL_K_NS_ALONE, SMALL_K_NS_SHARED, SMALL_PROLOGUE_K)
            } else if p.wide {
                (
                    tiles_of(&shape, WIDE_TILE),
                    WIDE_TILE_K_NS,
                    WIDE_TILE_K_NS,
                    SIMT_PROLOGUE_K,
                )
            } else {
                (tiles, SIMT_TILE_K_NS, SIMT_TILE_K_NS, SIMT_PROLOGUE_K)
            };
            let per_sm = units.saturating_mul(p.splits).div_ceil(sms) as f64;
            let partials = if p.splits > 1 {
                p.splits as f64 * values * PARTIAL_NS + REDUCE_LAUNCH_NS
            } else {
                0.0
            };
            (p.kslice as f64 + prologue) * alone.max(per_sm * shared) + partials
        };
        let unsplit = MatmulPlan {
            splits: 1,
            kslice: shape.k,
            ..plan
        };
        // Each output sums at most SIMT_CHAIN products in one accumulator: a longer `k` is
        // split however full the GPU is (see `SIMT_CHAIN`), into `fewest` slices or more.
        let fewest = shape.k.div_ceil(SIMT_CHAIN).clamp(1, MAX_SPLITS);
        let fills = unsplit_ns.is_some();
        let (mut best, mut best_cost) = match (fewest, unsplit_ns) {
            (1, Some(ns)) => (unsplit, ns),
            (1, None) => (unsplit, cost(&unsplit)),
            _ => (unsplit, f64::INFINITY),
        };
        // The wide tiles compete for products that fill the multiprocessors and must split.
        let wide_ok = fills && fewest > 1 && wide_shape(&shape);
        for (small, wide) in [(false, false), (false, true), (true, false)] {
            // A product that fills the multiprocessors stays on the large tiles.
            if (small && (!small_ok || fills)) || (wide && !wide_ok) {
                continue;
            }
            let first = fewest.max(if wide { 2 } else { 1 });
            for s in first..=shape.k.div_ceil(SLICE_ALIGN).min(MAX_SPLITS) {
                let mut p = MatmulPlan {
                    small,
                    wide,
                    ..unsplit
                };
                p.set_splits(s);
                if p.kslice > SIMT_CHAIN && s < MAX_SPLITS {
                    continue;
                }
                // A product that fills the multiprocessors splits (beyond the slices it needs)
                // only for a gain: the partials cost memory. A clear one when it need not
                // split at all (its last wave nearly empty, as 144 tiles on 132
                // multiprocessors), a smaller one to add slices to a split it needs.
                let mut c = cost(&p);
                if fills && p.splits > fewest {
                    c /= if fewest == 1 {
                        FULL_SPLIT_GAIN
                    } else {
                        CHAIN_SPLIT_GAIN
                    };
                }
                if c < best_cost {
                    (best, best_cost) = (p, c);
                }
            }
        }
        best
    }

    /// The plan of a product of `T` operands on a device of compute capability `cc` with `sms`
    /// multiprocessors: [`MatmulPlan::new_for`], but on Hopper (9.0) a 16-bit product that the
    /// `wgmma` kernels take by its shape (`m` at least 128, `n` at least 128, `k` at least 64)
    /// takes the tile (`128 x 256`, `128 x 128`, `192 x 192`, or the ping-pong `128 x 128`,
    /// `128 x 192` or `192 x 96`) and the split of least modelled time: the
    /// waves of work units (`ceil(units / sms)`) times a unit's time (its 64-deep k steps and
    /// a fixed time, longer for the f32 partials of a split), plus the partials' sum. Splitting
    /// then also serves products that fill the GPU with a poor last wave (`3072 x 768` outputs
    /// of a long `k`: 144 tiles of `128 x 128` on 132 multiprocessors). Every tile has kernels
    /// for every operand layout, so the shape alone decides.
    pub fn new_for_device<T: MatmulElement>(
        shape: MatmulShape,
        sms: usize,
        cc: (u32, u32),
        precision: MatmulPrecision,
    ) -> MatmulPlan {
        let plan = Self::new_for::<T>(shape, sms, precision);
        let s = shape;
        if cc != (9, 0) || size_of::<T>() != 2 || s.m < 128 || s.n < 128 || s.k < 64 {
            return plan;
        }
        if s.batch == 0 || s.m.checked_mul(s.n).is_none() {
            return plan;
        }
        let sms = sms.max(1);
        let values = (s.m * s.n).saturating_mul(s.batch) as f64;
        // Model index of a tile: 0 (`128 x 256`), 1 (`128 x 128`), 2 (ping-pong `128 x 128`),
        // 3 (ping-pong `128 x 192`), 4 (ping-pong `192 x 96`), 5 (`192 x 192`); the Hopper
        // tile of each.
        const TILES: [usize; 6] = [0, 1, 3, 4, 5, 6];
        let cost = |tile: usize, p: &MatmulPlan| {
            let units = sm90_units(s, TILES[tile], p.splits);
            let split = usize::from(p.splits > 1);
            let unit = p.kslice.div_ceil(64) as f64 * SM90_K_NS[tile] + SM90_UNIT_NS[tile][split];
            let partials = if p.splits > 1 {
                p.splits as f64 * values * 4.0 * SM90_PARTIAL_NS + SM90_SPLIT_NS
            } else {
                0.0
            };
            units.div_ceil(sms) as f64 * unit + partials
        };
        let unsplit = MatmulPlan {
            splits: 1,
            kslice: s.k,
            ..plan
        };
        let mut best: Option<(f64, MatmulPlan)> = None;
        for (tile, &hopper_tile) in TILES.iter().enumerate() {
            // The ping-pong kernels (model indices 2 to 4) run unsplit products.
            let pingpong = (2..=4).contains(&tile);
            let most = if pingpong {
                1
            } else {
                s.k.div_ceil(MIN_SLICE).clamp(1, MAX_SPLITS)
            };
            for n in 1..=most {
                let mut p = MatmulPlan {
                    sm90: Some(hopper_tile),
                    ..unsplit
                };
                p.set_splits(n);
                if pingpong && p.splits > 1 {
                    continue;
                }
                let c = cost(tile, &p);
                if best.as_ref().is_none_or(|(b, _)| c < *b) {
                    best = Some((c, p));
                }
            }
        }
        best.map_or(plan, |(_, p)| p)
    }

    /// The plan of `shape` at `precision` on a device of `sms` multiprocessors, by the split
    /// rule above whatever the element type; see [`MatmulPlan::new_for`].
    pub fn new(shape: MatmulShape, sms: usize, precision: MatmulPrecision) -> MatmulPlan {
        let mut plan = MatmulPlan {
            shape,
            precision,
            splits: 1,
            kslice: shape.k,
            small: false,
            wide: false,
            sm90: None,
        };
        if shape.m <= 1 || shape.n <= 1 || shape.batch == 0 {
            return plan;
        }
        let tiles = tiles_of(&shape, (TILE, TILE));
        if tiles >= sms.max(1) {
            return plan;
        }
        let want = (2 * sms.max(1)).div_ceil(tiles);
        let splits = want.min(shape.k / MIN_SLICE).min(MAX_SPLITS);
        if splits >= 2 {
            plan.set_splits(splits);
        }
        plan
    }

    /// The plan with `k` split into (about) `splits` slices whatever the shape, for tests and
    /// tuning (`splits` clamped to `1..=65535`, the grid's z extent): `kslice = ceil(k /
    /// splits)` rounded up to a multiple of 32, and [`MatmulPlan::splits`] then
    /// `ceil(k / kslice)` (1 when `k <= 32`).
    #[cfg(feature = "tuning")]
    pub fn with_splits(mut self, splits: usize) -> MatmulPlan {
        self.splits = 1;
        self.kslice = self.shape.k;
        self.set_splits(splits.clamp(1, 65535));
        self
    }

    /// The plan on the `64 x 64` SIMT tiles (`small`) or not, for tests and tuning; used only
    /// by full-precision f32 products the `128 x 128` tiles would run (not those of
    /// `n <= 64`, nor those of `m <= 64 < n`).
    #[cfg(feature = "tuning")]
    pub fn with_small_tiles(mut self, small: bool) -> MatmulPlan {
        self.small = small;
        self
    }

    /// The plan on Hopper tile `tile` (0: `128 x 256`, 1: `128 x 128`, 3: `128 x 128`
    /// ping-pong, 4: `128 x 192` ping-pong, 5: `192 x 96` ping-pong, all three for unsplit
    /// 16-bit outputs; 6: `192 x 192`; 2 is taken as 1) where the `wgmma` kernels run it with
    /// `n` of at least 128, for tests and tuning.
    #[cfg(feature = "tuning")]
    pub fn with_sm90_tile(mut self, tile: usize) -> MatmulPlan {
        self.sm90 = Some(if tile >= 3 { tile.min(6) } else { tile.min(1) });
        self
    }

    /// The Hopper tile [`MatmulPlan::new_for_device`] chose (0: `128 x 256`, 1: `128 x 128`, 3:
    /// ping-pong `128 x 128`, 4: ping-pong `128 x 192`, 5: ping-pong `192 x 96`, 6: `192 x
    /// 192`), or `None` for the default rule.
    pub fn sm90_tile(&self) -> Option<usize> {
        self.sm90
    }

    /// Whether a full-precision f32 product runs on the `64 x 64` SIMT tiles.
    pub fn small_tiles(&self) -> bool {
        self.small
    }

    /// The plan on the `128 x 256` SIMT tiles (`wide`) or not, for tests and tuning; used only
    /// by full-precision f32 products whose shape and operands the wide kernel takes (see
    /// [`Self::wide_tiles`]).
    #[cfg(feature = "tuning")]
    pub fn with_wide_tiles(mut self, wide: bool) -> MatmulPlan {
        self.wide = wide;
        self
    }

    /// Whether a full-precision f32 product runs on the `128 x 256` SIMT tiles
    /// (`matmul_f32w_*`): products of at least one wave of `128 x 128` tiles whose waves of
    /// wide tiles (with the plan's split) take less time, with `m` and `n` above 64, `k` a
    /// multiple of 16 and a batch of at most 65535. At launch the operands must also suit 16-byte loads (leading
    /// dimensions and batch strides multiples of 4 elements, 16-byte aligned, and a multiple
    /// of 4 elements along the dimension an operand is contiguous in besides `k`); otherwise
    /// the `128 x 128` tiles run it.
    pub fn wide_tiles(&self) -> bool {
        self.wide
    }

    fn set_splits(&mut self, splits: usize) {
        let k = self.shape.k;
        let kslice = k.div_ceil(splits).div_ceil(SLICE_ALIGN) * SLICE_ALIGN;
        if kslice == 0 || kslice >= k {
            self.splits = 1;
            self.kslice = k;
        } else {
            self.splits = k.div_ceil(kslice);
            self.kslice = kslice;
        }
    }

    /// The problem.
    pub fn shape(&self) -> MatmulShape {
        self.shape
    }

    /// The precision of f32 products.
    pub fn precision(&self) -> MatmulPrecision {
        self.precision
    }

    /// Slices of `k` (1: not split).
    pub fn splits(&self) -> usize {
        self.splits
    }

    /// Length of every slice of `k` but the last (`k` when not split).
    pub fn kslice(&self) -> usize {
        self.kslice
    }

    /// Bytes of device workspace the plan needs (16-byte aligned): the f32 partial products
    /// of every slice, `splits * batch * m * n * 4`, or 0 when not split. Saturates at
    /// `usize::MAX` (no workspace is that large, so the launch then fails with a length error).
    pub fn workspace_bytes(&self) -> usize {
        if self.splits <= 1 {
            return 0;
        }
        self.shape
            .c_len()
            .unwrap_or(usize::MAX)
            .saturating_mul(self.splits)
            .saturating_mul(4)
    }

    /// Bytes of device workspace the plan needs for operands of `elem`-byte elements laid out
    /// as `layout` on a device of compute capability `cc`: [`MatmulPlan::workspace_bytes`],
    /// then room for copies of operands that a fast kernel reads only once copied:
    ///
    /// - on Hopper, for a TF32 product, the k-major copies of the operands that are not k-major
    ///   (the Hopper TF32 kernel reads both operands k-major: `A` row-major, `B` column-major),
    ///   `copies x rows x round_up(k, 4)` f32 values each;
    /// - for f32 at full precision (any GPU), and f16 or bf16 on Hopper, aligned copies of the
    ///   operands whose leading dimension or batch stride is not a multiple of 16 bytes (lines
    ///   padded to 16 bytes, the operand's major order kept), so that the 16-byte kernels run.
    ///
    /// `addrs` are the operands' start addresses (an operand that does not start on 16 bytes
    /// is copied too; `(0, 0)` counts both as aligned). A smaller workspace (as
    /// [`MatmulPlan::workspace_bytes`]) still runs the product, on the kernels that need no
    /// copy.
    pub fn workspace_bytes_for(
        &self,
        layout: &MatmulLayout,
        elem: usize,
        cc: (u32, u32),
        addrs: (u64, u64),
    ) -> usize {
        let split = self.workspace_bytes();
        let staged = if elem == 4 && self.precision == MatmulPrecision::High {
            tf32_staging(self, layout, cc)
        } else {
            pad_staging(self, layout, elem, cc, addrs)
        };
        match staged {
            Some((a, b)) if a + b > 0 => ws_align(split)
                .saturating_add(ws_align(a.saturating_mul(elem)))
                .saturating_add(b.saturating_mul(elem)),
            _ => split,
        }
    }
}

/// An operand's lines and the elements of each line as it lies in memory: `rows x cols`
/// row-major is `rows` lines of `cols`, column-major `cols` lines of `rows`.
fn lines_of(l: MatrixLayout, rows: usize, cols: usize) -> (usize, usize) {
    if l.transposed {
        (cols, rows)
    } else {
        (rows, cols)
    }
}

/// The aligned copies a product of `elem`-byte elements needs (see
/// [`MatmulPlan::workspace_bytes_for`]): the elements of the copies of `A` and of `B` (0 for an
/// operand read in place), given the operands' start addresses `addrs` (`(0, 0)` when not yet
/// known: then only the layout decides). `None` when no 16-byte kernel would run the product
/// (matrix-vector products, TF32, f16 and bf16 off Hopper, shapes below the Hopper tile).
fn pad_staging(
    plan: &MatmulPlan,
    layout: &MatmulLayout,
    elem: usize,
    cc: (u32, u32),
    addrs: (u64, u64),
) -> Option<(usize, usize)> {
    let s = plan.shape;
    if s.m <= 1 || s.n <= 1 || s.batch == 0 || s.k == 0 {
        return None;
    }
    let hopper = elem == 2;
    if (elem == 4 && plan.precision != MatmulPrecision::Highest)
        || (hopper && !sm90_shape_ok(plan, cc, SM90_BK))
    {
        return None;
    }
    let v = 16 / elem;
    let copies = |stride: usize| {
        if s.batch == 1 || stride == 0 {
            1
        } else {
            s.batch
        }
    };
    let need = |addr: u64, l: MatrixLayout, stride: usize, rows: usize, cols: usize| {
        let (lines, inner) = lines_of(l, rows, cols);
        // The Hopper kernel reads through TMA; the f32 kernel needs 16-byte rows and batches.
        let in_place = if hopper {
            tma_in_place(addr, l, stride, lines, s.batch, v)
        } else {
            addr.is_multiple_of(16)
                && l.ld.is_multiple_of(v)
                && (s.batch == 1 || stride == 0 || stride.is_multiple_of(v))
        };
        if in_place {
            return Some(0);
        }
        copies(stride)
            .checked_mul(lines)?
            .checked_mul(inner.checked_add(v - 1)? / v * v)
    };
    Some((
        need(addrs.0, layout.a, s.a_batch_stride, s.m, s.k)?,
        need(addrs.1, layout.b, s.b_batch_stride, s.k, s.n)?,
    ))
}

/// `x` rounded up to a multiple of 256 bytes (the start of the next workspace region).
fn ws_align(x: usize) -> usize {
    x.saturating_add(255) & !255
}

/// k depth of a Hopper TF32 stage (32 f32 values, one 128-byte row), the least `k` it runs.
const SM90_TF32_BK: usize = 32;

/// When a TF32 product of `plan` would run on the Hopper kernel: the f32 elements of the
/// k-major staging copies of `A` and of `B` (0 for an operand read in place). `None` when it
/// would not (not TF32, not compute capability 9.0, the `sm_80` kernels forced, a
/// matrix-vector product, or a shape below the kernel's tile).
fn tf32_staging(
    plan: &MatmulPlan,
    layout: &MatmulLayout,
    cc: (u32, u32),
) -> Option<(usize, usize)> {
    let s = plan.shape;
    if plan.precision != MatmulPrecision::High || !sm90_shape_ok(plan, cc, SM90_TF32_BK) {
        return None;
    }
    let ld = s.k.checked_add(3)? & !3;
    let copies = |stride: usize| {
        if s.batch == 1 || stride == 0 {
            1
        } else {
            s.batch
        }
    };
    // A is k-major when row-major, B when column-major.
    let a = if layout.a.transposed {
        copies(s.a_batch_stride).checked_mul(s.m)?.checked_mul(ld)?
    } else {
        0
    };
    let b = if layout.b.transposed {
        0
    } else {
        copies(s.b_batch_stride).checked_mul(s.n)?.checked_mul(ld)?
    };
    Some((a, b))
}

/// Queues `c = a @ b` for contiguous row-major operands (see the module docs) on `stream`.
/// Fails before launching unless `a`, `b` and `c` hold at least [`MatmulShape::a_len`],
/// [`MatmulShape::b_len`] and [`MatmulShape::c_len`] elements.
#[cfg(feature = "cuda")]
pub fn gpu_matmul<T: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, T>,
) -> Result<()> {
    gpu_matmul_strided(stream, shape, MatmulLayout::contiguous(&shape), a, b, c)
}

/// Queues `c = a @ b` with the operands read where `layout` says (transposed views without a
/// copy) on `stream`, written as `O` (`T`, or f32 for f16 and bf16 operands), in full f32
/// precision and without splitting `k` (no workspace; [`gpu_matmul_planned`] runs the
/// split-k and TF32 paths). Fails before launching unless `a`, `b` and `c` hold at least
/// [`MatmulLayout::a_len`], [`MatmulLayout::b_len`] and [`MatmulShape::c_len`] elements.
#[cfg(feature = "cuda")]
pub fn gpu_matmul_strided<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
) -> Result<()> {
    let plan = MatmulPlan {
        shape,
        precision: MatmulPrecision::Highest,
        splits: 1,
        kslice: shape.k,
        small: false,
        wide: false,
        sm90: None,
    };
    run(stream, &plan, layout, a, b, c, None, 0).map(|_| ())
}

/// Queues `c = a @ b` as `plan` says (its shape, the precision of f32 products, the split of
/// `k`), with the operands read where `layout` says, on `stream`. `workspace` must hold
/// [`MatmulPlan::workspace_bytes`] bytes from a 16-byte aligned start (nothing when the plan
/// does not split; it is overwritten). A split product writes each slice's f32 partial
/// product to the workspace and then sums the slices in a fixed order into `c`: the result
/// is deterministic, and within the same f32 accumulation bound of the CPU twin
/// ([`matmul_strided_precision`]) as an unsplit one. Fails before launching on short spans
/// (as [`gpu_matmul_strided`]) or a short or misaligned workspace.
#[cfg(feature = "cuda")]
pub fn gpu_matmul_planned<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    run(stream, plan, layout, a, b, c, Some(workspace), 0).map(|_| ())
}

/// [`gpu_matmul_planned`] with a `bias` of `n` values added to every row of each product
/// (`c[b][i][j] = (a[b] @ b[b])[i][j] + bias[j]`, PyTorch's `addmm` with a broadcast bias) where
/// the kernel adds it before rounding: an unsplit product on the Hopper kernels. Returns
/// whether it did; when not, `c` holds the product alone and the caller adds the bias. Fails
/// before launching on a bias of fewer than `n` values (or as [`gpu_matmul_planned`]).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_matmul_planned_bias<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    bias: genesis_cuda::DeviceSpan<'_, O>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<bool> {
    if bias.len() < plan.shape.n {
        return Err(Error::LengthMismatch {
            op: "matmul",
            expected: plan.shape.n,
            got: bias.len(),
        });
    }
    // A bias of no values (n = 0) is never read: pass none.
    let addr = if plan.shape.n == 0 { 0 } else { bias.addr() };
    run(stream, plan, layout, a, b, c, Some(workspace), addr)
}

/// Queues `c = a @ b` of f64 operands on `stream`, read where `layout` says (any major
/// order, leading dimension, batch stride or alignment), accumulated in f64
/// (`kernels/matmul_f64.cu`: the f64 tensor cores, `128 x 128` tiles where they fill the
/// device twice over, else `64 x 64`, a 3-stage `cp.async` ring of 16-byte copies where the
/// operands are aligned for them, else of 8-byte ones; no split). The CPU twin is [`matmul_host`] for f64; the two agree within the f64
/// accumulation bound (`k * 2^-53 * sum |a||b|`). Fails before launching on short spans (as
/// [`gpu_matmul_strided`]).
#[cfg(feature = "cuda")]
pub fn gpu_matmul_f64(
    stream: &genesis_cuda::Stream,
    shape: MatmulShape,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, f64>,
    b: genesis_cuda::DeviceSpan<'_, f64>,
    c: genesis_cuda::DeviceSpanMut<'_, f64>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    // (kernels by copies (element by element, 16-byte pairs) and layout, tile side, threads,
    // dynamic shared memory: a ring of 3 stages of two `side x 20` f64 slices), the `64 x 64`
    // tile and the `128 x 128` one.
    type F64Tile = ([[[&'static str; 2]; 2]; 2], usize, u32, u32);
    const F64_TILES: [F64Tile; 2] = [
        (
            [
                [
                    ["matmul_f64_nn", "matmul_f64_nt"],
                    ["matmul_f64_tn", "matmul_f64_tt"],
                ],
                [
                    ["matmul_f64_v_nn", "matmul_f64_v_nt"],
                    ["matmul_f64_v_tn", "matmul_f64_v_tt"],
                ],
            ],
            64,
            128,
            3 * 2 * 64 * 20 * 8,
        ),
        (
            [
                [
                    ["matmul_f64_big_nn", "matmul_f64_big_nt"],
                    ["matmul_f64_big_tn", "matmul_f64_big_tt"],
                ],
                [
                    ["matmul_f64_big_v_nn", "matmul_f64_big_v_nt"],
                    ["matmul_f64_big_v_tn", "matmul_f64_big_v_tt"],
                ],
            ],
            128,
            256,
            3 * 2 * 128 * 20 * 8,
        ),
    ];
    let need = shape.c_len().ok_or_else(overflow)?;
    if need == 0 {
        return Ok(());
    }
    check(&shape, &layout, a.len(), b.len(), c.len())?;
    // The large tile where its tiles (over the batch) fill every multiprocessor at least
    // twice; the small one otherwise, for parallelism.
    let sms = u64::from(stream.context().multiprocessors().max(1));
    let big =
        u64::from(tile_count(&shape, (128, 128))?).saturating_mul(shape.batch as u64) >= 2 * sms;
    let (kernels, side, threads, smem) = F64_TILES[usize::from(big)];
    let tiles = tile_count(&shape, (side, side))?;
    // 16-byte copies of element pairs where both operands start on 16 bytes and their leading
    // dimensions and batch strides are even (every pair then is aligned).
    let pairs = a.addr().is_multiple_of(16)
        && b.addr().is_multiple_of(16)
        && [
            layout.a.ld,
            layout.b.ld,
            shape.a_batch_stride,
            shape.b_batch_stride,
        ]
        .iter()
        .all(|x| x.is_multiple_of(2));
    let name = kernels[usize::from(pairs)][usize::from(layout.a.transposed)]
        [usize::from(layout.b.transposed)];
    let kernel = Kernel::get(stream.context(), &crate::images::MATMUL_F64, name)?;
    kernel.set_max_dynamic_shared_bytes(smem)?;
    let config = LaunchConfig {
        grid: (tiles, shape.batch.min(65535) as u32, 1),
        block: (threads, 1, 1),
        shared_bytes: smem,
    };
    let args = simt_args(a.addr(), b.addr(), c.addr(), &shape, &layout, shape.k);
    record_kernel(name);
    // SAFETY: the parameters match `matmul_f64_<ab>` (const double*, const double*, double*,
    // u64 batch, m, n, k, lda, ldb, sa, sb, kslice); the spans hold every element the layout
    // reads and `c` the `need` outputs (checked above), `c` borrowed exclusively, so it
    // overlaps neither input; the kernel reads element by element with bounds checks.
    unsafe { launch_u64(stream, &kernel, config, args) }
}

/// The launches of [`gpu_matmul_planned`] (`workspace` is `None` only for unsplit plans), with
/// the address of a bias of `n` output values (0: none), which only the unsplit Hopper
/// kernels add (returning `true`).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn run<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
    mut workspace: Option<genesis_cuda::DeviceSpanMut<'_, u8>>,
    bias: u64,
) -> Result<bool> {
    let shape = plan.shape;
    let need = shape.c_len().ok_or_else(overflow)?;
    if need == 0 {
        return Ok(false);
    }
    check(&shape, &layout, a.len(), b.len(), c.len())?;
    if shape.m == 1 || shape.n == 1 {
        return gemv(stream, plan, layout, a, b, c, workspace).map(|()| false);
    }
    let tf32 = match plan.precision {
        MatmulPrecision::High => O::TF32,
        MatmulPrecision::Highest => None,
    };
    if tf32.is_some()
        && let Some(ws) = workspace.as_mut()
    {
        // SAFETY: `O` is f32 (only f32 has TF32 kernels) and `T` too; `c` holds `need`
        // elements (checked) and is borrowed exclusively; the spans were checked against the
        // layout.
        if unsafe { tf32_sm90(stream, plan, layout, a.addr(), b.addr(), c.addr(), ws)? } {
            if plan.splits > 1 {
                splitk_sum(stream, O::SPLITK_SUM, ws.addr(), c, need, plan.splits)?;
            }
            return Ok(false);
        }
    }
    // Operands that a 16-byte kernel reads only once copied aligned into the workspace (see
    // `MatmulPlan::workspace_bytes_for`), when it has room for the copies.
    let (mut staged_plan, mut layout) = (*plan, layout);
    let (mut pa, mut pb) = (a.addr(), b.addr());
    if let Some(ws) = workspace.as_mut() {
        // SAFETY: the spans were checked against the layout; the copies go to the workspace,
        // borrowed exclusively, after the split partials.
        if let Some(ops) = unsafe { pad_stage::<T>(stream, plan, layout, pa, pb, ws)? } {
            staged_plan.shape = ops.shape;
            layout = ops.layout;
            (pa, pb) = (ops.a, ops.b);
        }
    }
    // Full-precision f32 products of m <= 64 < n as C^T = B^T A^T on the 256 x 64 tiles,
    // storing C transposed (`matmul_f32n64ct_*`).
    let ct = match O::N64_CT {
        Some(table) if tf32.is_none() && transposes(&staged_plan.shape) => {
            (staged_plan.shape, layout) = transposed_problem(staged_plan.shape, layout);
            (pa, pb) = (pb, pa);
            Some(table)
        }
        _ => None,
    };
    let plan = &staged_plan;
    let shape = plan.shape;
    // The 16-byte kernels need every row and batch of both operands to start on 16 bytes.
    let v = O::VECTOR;
    let aligned = layout.a.ld.is_multiple_of(v)
        && layout.b.ld.is_multiple_of(v)
        && shape.a_batch_stride.is_multiple_of(v)
        && shape.b_batch_stride.is_multiple_of(v)
        && pa.is_multiple_of(16)
        && pb.is_multiple_of(16);
    let at = |table: [[[&'static str; 2]; 2]; 2]| {
        table[usize::from(layout.a.transposed)][usize::from(layout.b.transposed)]
            [usize::from(!aligned)]
    };
    // Full-precision f32 products of n <= 64 on `256 x 64` tiles.
    let n64 = if tf32.is_none() && shape.n <= 64 {
        ct.or(O::N64)
    } else {
        None
    };
    // Full-precision f32 products the plan puts on the `64 x 64` tiles.
    let small = match O::SMALL {
        Some(table) if tf32.is_none() && n64.is_none() && plan.small => Some(table),
        _ => None,
    };
    // Full-precision f32 products the plan puts on the `128 x 256` tiles, when the operands
    // suit the kernel's float4 loads (see `MatmulPlan::wide_tiles`).
    let wide = match O::WIDE {
        Some(table)
            if tf32.is_none()
                && n64.is_none()
                && small.is_none()
                && plan.wide
                && aligned
                && wide_shape(&shape)
                && layout.a.ld < 1 << 27
                && layout.b.ld < 1 << 27
                && (!layout.a.transposed || shape.m.is_multiple_of(4))
                && (layout.b.transposed || shape.n.is_multiple_of(4)) =>
        {
            Some(table[usize::from(layout.a.transposed)][usize::from(layout.b.transposed)])
        }
        _ => None,
    };
    let tile = if n64.is_some() {
        simt_tile(shape.n)
    } else if small.is_some() {
        (SMALL_TILE, SMALL_TILE)
    } else if wide.is_some() {
        WIDE_TILE
    } else {
        (TILE, TILE)
    };
    let ctx = stream.context();
    let sm90 = O::SM90.and_then(|k| {
        let tile = sm90_tile(
            ctx.compute_capability(),
            ctx.multiprocessors() as usize,
            plan,
            layout,
            pa,
            pb,
        )?;
        let (ta, tb) = (
            usize::from(layout.a.transposed),
            usize::from(layout.b.transposed),
        );
        // Tiles 3 to 5, the ping-pong kernels, run 16-bit outputs of unsplit products; the
        // cooperative 128 x 128 kernels run the rest they are chosen for. `coop`: the index in
        // `kernels` and `partial` of the cooperative kernel that runs the tile.
        let pingpong = match tile {
            3 => k.pingpong,
            4 => k.pingpong_wide,
            5 => k.pingpong_tall,
            _ => None,
        };
        let (coop_tile, coop) = match tile {
            3..=5 => (1, 1),
            6 => (6, 3),
            t => (t, t),
        };
        let (tile, name) = match pingpong {
            Some(pp) if plan.splits <= 1 => (tile, pp[ta][tb]),
            _ => (coop_tile, k.kernels[ta][tb][coop]),
        };
        let partial = k.partial[ta][tb][coop];
        Some((k.bf16, tile, name, partial))
    });
    if plan.splits <= 1 {
        if let Some((bf16, tile, name, _)) = sm90 {
            // SAFETY: `c` holds `need` elements of `O` (checked) and is borrowed exclusively;
            // `name` is a Hopper kernel of `tile` for `T -> O`, chosen by `sm90_tile`.
            return unsafe {
                gemm_sm90::<T>(
                    stream,
                    name,
                    bf16,
                    tile,
                    shape,
                    layout,
                    pa,
                    pb,
                    c.addr(),
                    bias,
                    1,
                    shape.k,
                )
                .map(|()| bias != 0)
            };
        }
        let name = wide.unwrap_or_else(|| at(tf32.or(n64).or(small).unwrap_or(O::KERNELS)));
        // SAFETY: `c` holds `need` elements of `O` (checked) and is borrowed exclusively; a
        // wide kernel is chosen only for operands and a shape that keep its contract.
        return unsafe {
            gemm(
                stream,
                name,
                plan,
                layout,
                pa,
                pb,
                c.addr(),
                1,
                shape.k,
                tile,
            )
        }
        .map(|()| false);
    }
    let workspace = split_workspace(workspace, plan)?;
    if let Some((bf16, tile, _, name)) = sm90 {
        // SAFETY: the Hopper `partial` kernels write f32 values, `splits` slices of `need`
        // elements each: `workspace_bytes()`, which the workspace holds (checked), borrowed
        // exclusively.
        unsafe {
            gemm_sm90::<T>(
                stream,
                name,
                bf16,
                tile,
                shape,
                layout,
                pa,
                pb,
                workspace.addr(),
                0,
                plan.splits,
                plan.kslice,
            )?;
        }
    } else {
        // The wide kernels are f32-output kernels, as `PARTIAL` and `TF32` are.
        let name = wide.unwrap_or_else(|| at(tf32.or(n64).or(small).unwrap_or(O::PARTIAL)));
        // SAFETY: the partial kernels write f32 values (`PARTIAL` and `TF32` are f32-output
        // kernels, and `wide` is chosen only for f32 outputs), `splits` slices of `need` elements each: `workspace_bytes()`, which the
        // workspace holds (checked), borrowed exclusively.
        unsafe {
            gemm(
                stream,
                name,
                plan,
                layout,
                pa,
                pb,
                workspace.addr(),
                plan.splits,
                plan.kslice,
                tile,
            )?;
        }
    }
    splitk_sum(
        stream,
        O::SPLITK_SUM,
        workspace.addr(),
        c,
        need,
        plan.splits,
    )
    .map(|()| false)
}

/// The tiles of one matrix of `shape` on `tile`-sized tiles, as a grid dimension (a typed
/// error past `i32::MAX`).
#[cfg(feature = "cuda")]
fn tile_count(shape: &MatmulShape, tile: (usize, usize)) -> Result<u32> {
    match shape
        .m
        .div_ceil(tile.0)
        .checked_mul(shape.n.div_ceil(tile.1))
    {
        Some(t) if t <= i32::MAX as usize => Ok(t as u32),
        _ => Err(Error::Unsupported {
            op: "matmul",
            reason: format!("{} x {} outputs per matrix", shape.m, shape.n),
        }),
    }
}

/// The parameters of the `matmul.cu` family's launch contract: (A, B, C, batch, m, n, k, lda,
/// ldb, batch stride of A, batch stride of B, kslice).
#[cfg(feature = "cuda")]
fn simt_args(
    a: u64,
    b: u64,
    out: u64,
    shape: &MatmulShape,
    layout: &MatmulLayout,
    kslice: usize,
) -> [u64; 12] {
    [
        a,
        b,
        out,
        shape.batch as u64,
        shape.m as u64,
        shape.n as u64,
        shape.k as u64,
        layout.a.ld as u64,
        layout.b.ld as u64,
        shape.a_batch_stride as u64,
        shape.b_batch_stride as u64,
        kslice as u64,
    ]
}

/// Launches the matmul kernel `name` (see the launch contract in `kernels/matmul.cu`) on the
/// operands at `a` and `b` with grid z `splits` and slices of `kslice`, writing to `out`;
/// `tile` is the kernel's tile (rows, columns): `128 x 128`, `256 x 64` for `matmul_f32n64*`,
/// `64 x 64` for `matmul_f32s_*`, `128 x 256` ([`WIDE_TILE`]) for `matmul_f32w_*`, the kernels
/// of `kernels/matmul_f32w.cu`, which take dynamic shared memory.
///
/// # Safety
///
/// `out` must be device memory that nothing else uses until the launch completes, holding
/// `splits * batch * m * n` elements of the kernel's output type, and `name` a kernel of the
/// operands' type. The operands hold every element the layout reads (checked by the caller).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm(
    stream: &genesis_cuda::Stream,
    name: &'static str,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: u64,
    b: u64,
    out: u64,
    splits: usize,
    kslice: usize,
    tile: (usize, usize),
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};

    let shape = plan.shape;
    let wide = tile == WIDE_TILE;
    let kernel = if wide {
        let k = Kernel::get(stream.context(), &crate::images::MATMUL_F32W, name)?;
        k.set_max_dynamic_shared_bytes(WIDE_SMEM)?;
        k
    } else {
        Kernel::get(stream.context(), &crate::images::MATMUL, name)?
    };
    let tiles = tile_count(&shape, tile)?;
    let config = LaunchConfig {
        // `splits <= 65535`: at most 32 from the rule, 65535 from `with_splits`.
        grid: (tiles, shape.batch.min(65535) as u32, splits as u32),
        block: (256, 1, 1),
        shared_bytes: if wide { WIDE_SMEM } else { 0 },
    };
    let args = simt_args(a, b, out, &shape, &layout, kslice);
    record_kernel(name);
    // SAFETY: the parameters match `matmul_<in>[_f32out]_<ab>[_any]`, `matmul_f32w_<ab>` and
    // `matmul_tf32_<ab>[_any]` (const T*, const T*, O*, u64 batch, u64 m, u64 n, u64 k, u64
    // lda, u64 ldb, u64 sa, u64 sb, u64 kslice); the spans hold every element the layout
    // reads (checked by the caller), and a slice reads only k values below k; the `aligned`
    // kernels are chosen only for operands whose rows and batches start on 16 bytes, and a
    // slice starts at a multiple of 32 k values, which keeps that; `out` is as the caller
    // guarantees, so it overlaps neither input.
    unsafe { launch_u64(stream, &kernel, config, args) }
}

/// One operand's tensor map for the Hopper kernels: dimensions (inner, outer, batch) as the
/// operand lies in memory, boxes of 128 bytes (64 16-bit or 32 f32 elements) x 64 rows with
/// the 128-byte swizzle. `rows x cols` is the operand's logical shape (`m x k` for A, `k x n`
/// for B); `elem` the element's bytes (4: f32, else bf16 when `bf16`, else f16). `narrow`
/// (B of the `192 x 96` tile): boxes 32 columns of `n` wide, 128 bytes x 32 rows where `n`
/// is the outer dimension, 64 bytes x 64 rows with the 64-byte swizzle where it is the inner.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn sm90_map(
    ctx: &std::sync::Arc<genesis_cuda::Context>,
    bf16: bool,
    elem: usize,
    addr: u64,
    l: MatrixLayout,
    rows: usize,
    cols: usize,
    batch: usize,
    stride: usize,
    narrow: bool,
) -> Result<genesis_cuda::TensorMap> {
    use genesis_cuda::{TensorMap, TensorMapDataType, TensorMapSwizzle, TiledTensor};

    // Row-major: `cols` contiguous, `rows` at `ld`; column-major the other way round.
    let (inner, outer) = if l.transposed {
        (rows, cols)
    } else {
        (cols, rows)
    };
    let (box_inner, box_outer) = match (narrow, l.transposed) {
        (false, _) => (128 / elem, 64),
        (true, true) => (128 / elem, 32),
        (true, false) => (64 / elem, 64),
    };
    let ld_bytes = (l.ld * elem) as u64;
    let (depth, batch_bytes) = if batch == 1 || stride == 0 {
        // One matrix: the batch stride is never applied; that of packed matrices.
        (1, ld_bytes * outer as u64)
    } else {
        (batch as u64, (stride * elem) as u64)
    };
    Ok(TensorMap::tiled(
        ctx,
        &TiledTensor {
            data_type: if elem == 4 {
                TensorMapDataType::F32
            } else if bf16 {
                TensorMapDataType::BF16
            } else {
                TensorMapDataType::F16
            },
            address: addr,
            dims: &[inner as u64, outer as u64, depth],
            strides: &[ld_bytes, batch_bytes],
            box_dims: &[box_inner as u32, box_outer, 1],
            swizzle: if box_inner * elem == 128 {
                TensorMapSwizzle::B128
            } else {
                TensorMapSwizzle::B64
            },
        },
    )?)
}

/// Launches the Hopper kernel `name` (the launch contract in `kernels/matmul_sm90.cu`) of
/// `tile` with `splits` slices of `kslice`, writing to `out`.
///
/// # Safety
///
/// As [`gemm`]; `name` a kernel of `tile` and of `T` operands (bf16 when `bf16`), and the
/// operands qualified by [`sm90_tile`].
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_sm90<T: MatmulElement>(
    stream: &genesis_cuda::Stream,
    name: &'static str,
    bf16: bool,
    tile: usize,
    shape: MatmulShape,
    layout: MatmulLayout,
    a: u64,
    b: u64,
    out: u64,
    bias: u64,
    splits: usize,
    kslice: usize,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let ctx = stream.context();
    let elem = size_of::<T>();
    let mut map_a = sm90_map(
        ctx,
        bf16,
        elem,
        a,
        layout.a,
        shape.m,
        shape.k,
        shape.batch,
        shape.a_batch_stride,
        false,
    )?;
    let mut map_b = sm90_map(
        ctx,
        bf16,
        elem,
        b,
        layout.b,
        shape.k,
        shape.n,
        shape.batch,
        shape.b_batch_stride,
        tile == 5,
    )?;
    let kernel = Kernel::get(ctx, &crate::images::MATMUL_SM90, name)?;
    let smem = SM90_SMEM[tile];
    kernel.set_max_dynamic_shared_bytes(smem)?;
    let units = sm90_units(shape, tile, splits);
    let config = LaunchConfig {
        grid: (
            units.clamp(1, (ctx.multiprocessors() as usize).max(1)) as u32,
            1,
            1,
        ),
        block: (SM90_THREADS[tile], 1, 1),
        shared_bytes: smem,
    };
    let (mut pc, mut pbias) = (out, bias);
    let mut dims = [
        shape.batch as u64,
        shape.m as u64,
        shape.n as u64,
        shape.k as u64,
        shape.a_batch_stride as u64,
        shape.b_batch_stride as u64,
        kslice as u64,
        splits as u64,
    ];
    let [d0, d1, d2, d3, d4, d5, d6, d7] = &mut dims;
    let mut params: [*mut c_void; 12] = [
        (&raw mut map_a).cast(),
        (&raw mut map_b).cast(),
        (&raw mut pc).cast(),
        (&raw mut pbias).cast(),
        std::ptr::from_mut(d0).cast(),
        std::ptr::from_mut(d1).cast(),
        std::ptr::from_mut(d2).cast(),
        std::ptr::from_mut(d3).cast(),
        std::ptr::from_mut(d4).cast(),
        std::ptr::from_mut(d5).cast(),
        std::ptr::from_mut(d6).cast(),
        std::ptr::from_mut(d7).cast(),
    ];
    record_kernel(name);
    // SAFETY: the parameters match `matmul_sm90_<in>[_f32out]_<ab>_<bn>(CUtensorMap a,
    // CUtensorMap b, O* c, const O* bias, u64 batch, u64 m, u64 n, u64 k, u64 sa, u64 sb, u64
    // kslice, u64 slices)`; the tensor maps cover exactly the elements the layout reads (the
    // spans were checked by the caller), out-of-range box elements read as zeros; a slice
    // reads k values below k only; `out` is as the caller guarantees, so it overlaps neither
    // input; `bias` is 0 or, as the caller guarantees, `n` output-type values.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// Launches `name`, the `splitk_sum_<O>` kernel: `c[i] = sum over z < splits of ws[z * total + i]` (f32, in
/// increasing z), rounded once to `O`.
#[cfg(feature = "cuda")]
fn splitk_sum<O: MatmulElement>(
    stream: &genesis_cuda::Stream,
    name: &'static str,
    ws: u64,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
    total: usize,
    splits: usize,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};

    let kernel = Kernel::get(stream.context(), &crate::images::MATMUL, name)?;
    let units = if total.is_multiple_of(4) {
        total / 4
    } else {
        total
    };
    let config = LaunchConfig {
        grid: (units.div_ceil(256).clamp(1, 65535) as u32, 1, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    let args = [ws, c.addr(), total as u64, splits as u64];
    // SAFETY: the parameters match `splitk_sum_<O>(const float* ws, O* out, u64 total, u64
    // slices)`; the workspace holds `splits * total` f32 values written by the partial
    // launch queued before on the same stream, `c` holds at least `total` elements of `O`
    // (checked by the caller) and is borrowed exclusively.
    unsafe { launch_u64(stream, &kernel, config, args) }
}

/// The workspace of a split plan, checked: present, at least
/// [`MatmulPlan::workspace_bytes`] long, starting on 16 bytes.
#[cfg(feature = "cuda")]
fn split_workspace<'a>(
    workspace: Option<genesis_cuda::DeviceSpanMut<'a, u8>>,
    plan: &MatmulPlan,
) -> Result<genesis_cuda::DeviceSpanMut<'a, u8>> {
    let Some(workspace) = workspace else {
        return Err(Error::Unsupported {
            op: "matmul",
            reason: "a split-k plan needs a workspace".into(),
        });
    };
    let need = plan.workspace_bytes();
    if workspace.len() < need {
        return Err(Error::LengthMismatch {
            op: "matmul workspace",
            expected: need,
            got: workspace.len(),
        });
    }
    if !workspace.is_aligned_to(16) {
        return Err(Error::Unsupported {
            op: "matmul",
            reason: "the split-k workspace must start on 16 bytes".into(),
        });
    }
    Ok(workspace)
}

/// A product with `m == 1` or `n == 1` as a matrix-vector product (`gemv_*` in
/// `kernels/matmul.cu`): `out[b][o] = sum_p X[b][o][p] * v[b][p]`, where X is `B` read by
/// columns and v `A`'s row when `m == 1`, X is `A` and v `B`'s column otherwise. The plan's
/// split of `k` applies on `gemv_wide_*` (the workspace checked as for any split plan); the
/// other kernels run the product whole. The caller checked the spans against the layout.
#[cfg(feature = "cuda")]
fn gemv<T: MatmulElement, O: MatmulOutput<T>>(
    stream: &genesis_cuda::Stream,
    plan: &MatmulPlan,
    layout: MatmulLayout,
    a: genesis_cuda::DeviceSpan<'_, T>,
    b: genesis_cuda::DeviceSpan<'_, T>,
    c: genesis_cuda::DeviceSpanMut<'_, O>,
    workspace: Option<genesis_cuda::DeviceSpanMut<'_, u8>>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};

    let shape = plan.shape;
    // Strides of an operand's element (i, p) of a `[rows, k]` view: (per row, per p).
    let (la, lb) = (layout.a, layout.b);
    let a_strides = if la.transposed {
        (1, la.ld)
    } else {
        (la.ld, 1)
    };
    // B[p][j]: per column j and per p.
    let b_strides = if lb.transposed {
        (lb.ld, 1)
    } else {
        (1, lb.ld)
    };
    let (x, v, outs, (so, sk), sv, xb, vb) = if shape.m == 1 {
        (
            b,
            a,
            shape.n,
            b_strides,
            a_strides.1,
            shape.b_batch_stride,
            shape.a_batch_stride,
        )
    } else {
        (
            a,
            b,
            shape.m,
            a_strides,
            b_strides.1,
            shape.a_batch_stride,
            shape.b_batch_stride,
        )
    };
    let axpy = sk != 1 && so == 1;
    // The kernel `GEMV[which]` and its launch of `per_block` outputs a block and `slices`
    // slices of k.
    let kernel_for = |which: usize, per_block: usize, slices: usize| {
        let blocks = outs.div_ceil(per_block);
        if blocks > i32::MAX as usize {
            return Err(Error::Unsupported {
                op: "matmul",
                reason: format!("{outs} outputs of a matrix-vector product"),
            });
        }
        let name = O::GEMV[which];
        let kernel = Kernel::get(stream.context(), &crate::images::MATMUL, name)?;
        record_kernel(name);
        let config = LaunchConfig {
            grid: (blocks as u32, shape.batch.min(65535) as u32, slices as u32),
            block: (256, 1, 1),
            shared_bytes: 0,
        };
        Ok((kernel, config))
    };
    // 16-byte loads when every row of X and its batches start on 16 bytes and the outputs
    // fill whole loads.
    let vec = 16 / size_of::<T>();
    if axpy
        && outs.is_multiple_of(vec)
        && sk.is_multiple_of(vec)
        && (shape.batch == 1 || xb.is_multiple_of(vec))
        && x.is_aligned_to(16)
    {
        let split = plan.splits > 1;
        let part = if split {
            split_workspace(workspace, plan)?.addr()
        } else {
            0
        };
        // `plan.splits` is at most 65535 (the grid's z extent).
        let (kernel, config) = kernel_for(
            3,
            GEMV_WIDE_BYTES / size_of::<T>(),
            if split { plan.splits } else { 1 },
        )?;
        let args = [
            x.addr(),
            v.addr(),
            c.addr(),
            part,
            shape.batch as u64,
            outs as u64,
            shape.k as u64,
            if split { plan.kslice } else { shape.k } as u64,
            sk as u64,
            sv as u64,
            xb as u64,
            vb as u64,
        ];
        // SAFETY: the parameters match `gemv_wide_<in>[_f32out](const T*, const T*, O*, float*
        // part, u64 batch, u64 outs, u64 k, u64 kslice, u64 sk, u64 sv, u64 xb, u64 vb)`;
        // every element read, X[b][o..o + vec][p] and v[b][p] for b < batch, o < outs (a
        // multiple of vec), p < k, is an element of A or B that the layout reads (checked by
        // the caller), 16-byte aligned (checked above); `c` holds batch * outs elements and is
        // borrowed exclusively; a split launch (grid z = splits, slices of kslice) writes
        // splits * batch * outs f32 partials, `workspace_bytes()`, to the workspace (checked
        // to hold them), borrowed exclusively.
        unsafe { launch_u64(stream, &kernel, config, args)? };
        if split {
            let need = shape.c_len().ok_or_else(overflow)?;
            splitk_sum(stream, O::SPLITK_SUM, part, c, need, plan.splits)?;
        }
        return Ok(());
    }
    // Two outputs a lane for 16-bit types (a warp then reads whole 128-byte lines) when every
    // row of X and its batches start on two elements.
    let pairs = axpy
        && size_of::<T>() == 2
        && outs.is_multiple_of(2)
        && sk.is_multiple_of(2)
        && (shape.batch == 1 || xb.is_multiple_of(2))
        && x.is_aligned_to(2 * size_of::<T>() as u64);
    let (kernel, config) = if pairs {
        kernel_for(2, 64, 1)?
    } else if axpy {
        kernel_for(1, 32, 1)?
    } else {
        kernel_for(0, 8, 1)?
    };
    let args = [
        x.addr(),
        v.addr(),
        c.addr(),
        shape.batch as u64,
        outs as u64,
        shape.k as u64,
        so as u64,
        sk as u64,
        sv as u64,
        xb as u64,
        vb as u64,
    ];
    // SAFETY: the parameters match `gemv_<dot|axpy|axpy2>_<in>[_f32out](const T*, const T*, O*, u64
    // batch, u64 outs, u64 k, u64 so, u64 sk, u64 sv, u64 xb, u64 vb)`; every element read,
    // X[b][o][p] and v[b][p] for b < batch, o < outs, p < k, is an element of A or B that the
    // layout reads (checked by the caller), and `c` holds batch * outs elements (its length
    // was checked against the shape) and is borrowed exclusively.
    unsafe { launch_u64(stream, &kernel, config, args) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Hopper plan: products that fill the GPU stay unsplit (short `k` on the ping-pong
    /// tile, a long `k` of full waves on the wide tile); long-`k` products of few output
    /// tiles, or of a poor last wave, split so that their units come close to whole waves;
    /// other devices, f32 and shapes the `wgmma` kernels do not take keep
    /// [`MatmulPlan::new_for`]'s plan.
    #[test]
    fn hopper_plans_fill_the_waves() {
        let dev = |s: MatmulShape| {
            MatmulPlan::new_for_device::<bf16>(s, 132, (9, 0), MatmulPrecision::Highest)
        };
        let units = |p: &MatmulPlan| sm90_units(p.shape, p.sm90.expect("a Hopper tile"), p.splits);
        for s in [
            shape(1, 4096, 4096, 4096),
            shape(1, 8192, 8192, 8192),
            shape(1, 32768, 3072, 768),
        ] {
            assert_eq!(dev(s).splits, 1, "{s:?}");
        }
        // A short k: a ping-pong tile, which hides a tile's epilogue (the 128 x 192 one where
        // n is a whole number of its columns).
        for s in [
            shape(1, 32768, 3072, 768),
            shape(1, 32768, 2304, 768),
            shape(1, 32768, 50304, 768),
        ] {
            assert_eq!(dev(s).sm90, Some(4), "{s:?}");
        }
        // Weight gradients (an A read transposed; the plan depends on the shape alone) of a
        // long k: GPT-2's 3072 x 768 (either way round) are 64 tiles of 192 x 192, k split in
        // two: one wave of 128 units on 128 of the 132 multiprocessors, reading a third less
        // from L2 than 128 tiles of 192 x 96 unsplit (96 tiles of 128 x 192 leave 36 idle;
        // 128 x 256 tiles need k split in five: three waves); its 2304 x 768 is 108 tiles of
        // 128 x 128 (72 of 128 x 192 leave 60 multiprocessors idle).
        for s in [shape(1, 3072, 768, 32768), shape(1, 768, 3072, 32768)] {
            let p = dev(s);
            assert_eq!((p.sm90, p.splits), (Some(6), 2), "{s:?}");
        }
        let p = dev(shape(1, 2304, 768, 32768));
        assert_eq!((p.sm90, p.splits), (Some(3), 1));
        // 4096 columns are 21 1/3 tiles of 192, 16 of 256: at k = 4096 the epilogue is a small
        // share of a unit, so the wide tile (512 units, 3.9 waves; measured 0.184 ms against
        // 0.192 on the 128 x 128 ping-pong tile).
        assert_eq!(dev(shape(1, 4096, 4096, 4096)).sm90, Some(0));
        // A long k whose 256-wide tiles fill the waves better than 192-wide ones (4 against
        // 5 1/3 tile columns): the wide tile; the head's 768 columns are 4 tiles of 192.
        assert_eq!(dev(shape(1, 32768, 1024, 8192)).sm90, Some(0));
        assert_eq!(dev(shape(1, 32768, 768, 50304)).sm90, Some(4));
        for s in [
            shape(1, 768, 768, 32768),
            shape(1, 2304, 768, 32768),
            shape(1, 3072, 768, 32768),
            shape(1, 768, 3072, 32768),
        ] {
            let p = dev(s);
            let u = units(&p);
            let waves = u.div_ceil(132);
            assert!(
                u * 10 >= waves * 132 * 7,
                "{s:?}: {u} units in {waves} waves ({p:?})"
            );
            assert!(p.splits > 1 || s.m * s.n >= 2304 * 768, "{s:?}: {p:?}");
        }
        for (s, cc) in [
            (shape(1, 768, 768, 32768), (8, 0)),
            (shape(1, 64, 4096, 1024), (9, 0)),
            (shape(1, 8192, 64, 8192), (9, 0)),
        ] {
            let p = MatmulPlan::new_for_device::<bf16>(s, 132, cc, MatmulPrecision::Highest);
            assert_eq!(
                p,
                MatmulPlan::new_for::<bf16>(s, 132, MatmulPrecision::Highest)
            );
        }
        let s = shape(1, 768, 768, 32768);
        let f = MatmulPlan::new_for_device::<f32>(s, 132, (9, 0), MatmulPrecision::High);
        assert_eq!(f, MatmulPlan::new_for::<f32>(s, 132, MatmulPrecision::High));
    }

    fn shape(batch: usize, m: usize, n: usize, k: usize) -> MatmulShape {
        MatmulShape {
            batch,
            m,
            n,
            k,
            a_batch_stride: m * k,
            b_batch_stride: k * n,
        }
    }

    #[test]
    fn matrix_vector_plans_split_k_when_their_blocks_leave_the_memory_idle() {
        let full = MatmulPrecision::Highest;
        // [1, 4096] @ [4096, 11008] on 132 SMs: 172 blocks of 64 bf16 outputs, ceil(528 /
        // 172) = 4 slices of 1024; 344 blocks of 32 f32 outputs, 2 slices.
        let s = shape(1, 1, 11008, 4096);
        let p = MatmulPlan::new_for::<bf16>(s, 132, full);
        assert_eq!((p.splits(), p.kslice()), (4, 1024));
        assert_eq!(p.workspace_bytes(), 4 * 11008 * 4);
        assert_eq!(MatmulPlan::new_for::<f32>(s, 132, full).splits(), 2);
        // n == 1 the same way, and a batch counts its blocks.
        let p = MatmulPlan::new_for::<f16>(shape(1, 4096, 1, 11008), 132, full);
        assert_eq!((p.splits(), p.kslice()), (9, 1248));
        assert_eq!(
            MatmulPlan::new_for::<f16>(shape(3, 4096, 1, 11008), 132, full).splits(),
            3
        );
        // Enough blocks, a k below two slices of 256, or nothing to do: whole.
        for (s, sms) in [
            (shape(1, 1, 32000, 4096), 60),
            (shape(8, 1, 11008, 4096), 132),
            (shape(1, 1, 64, 511), 132),
            (shape(0, 1, 64, 4096), 132),
        ] {
            let p = MatmulPlan::new_for::<bf16>(s, sms, full);
            assert_eq!((p.splits(), p.workspace_bytes()), (1, 0), "{s:?}");
        }
        // At most 32 slices.
        let p = MatmulPlan::new_for::<f32>(shape(1, 1, 64, 1 << 20), 132, full);
        assert_eq!(p.splits(), 32);
    }

    #[test]
    fn plans_split_k_only_when_the_tiles_leave_the_gpu_idle() {
        let full = MatmulPrecision::Highest;
        // [64, 1024] @ [1024, 4096] on 132 SMs: 32 tiles, slices of 256 (k / 256 caps it).
        let p = MatmulPlan::new(shape(1, 64, 4096, 1024), 132, full);
        assert_eq!((p.splits(), p.kslice()), (4, 256));
        assert_eq!(p.workspace_bytes(), 4 * 64 * 4096 * 4);
        // [8192, 8192] @ [8192, 64]: 64 tiles, ceil(264 / 64) = 5 slices of 1664 (the last
        // 1536).
        let p = MatmulPlan::new(shape(1, 8192, 64, 8192), 132, MatmulPrecision::High);
        assert_eq!((p.splits(), p.kslice()), (5, 1664));
        assert_eq!(p.precision(), MatmulPrecision::High);
        // Enough tiles, a short k, matrix-vector products, empty problems: no split.
        for s in [
            shape(1, 4096, 4096, 4096),
            shape(1, 2048, 2048, 8192),
            shape(64, 512, 512, 64),
            shape(200, 128, 128, 100_000),
            shape(1, 64, 64, 511),
            shape(1, 1, 4096, 11008),
            shape(1, 4096, 1, 11008),
            shape(0, 64, 64, 4096),
            shape(1, 64, 64, 0),
        ] {
            let p = MatmulPlan::new(s, 132, full);
            assert_eq!(
                (p.splits(), p.kslice(), p.workspace_bytes()),
                (1, s.k, 0),
                "{s:?}"
            );
        }
        // At most 32 slices; on a one-SM device nothing splits.
        let p = MatmulPlan::new(shape(1, 64, 64, 1 << 20), 132, full);
        assert_eq!(p.splits(), 32);
        assert_eq!(p.kslice(), (1 << 20) / 32);
        assert_eq!(
            MatmulPlan::new(shape(1, 64, 64, 1 << 20), 1, full).splits(),
            1
        );
        // Every slice is a multiple of 32 but the last, and the slices cover k exactly.
        for k in [512, 513, 1000, 1021, 4099, 8192, 65_537] {
            for sms in [8, 46, 108, 132] {
                let p = MatmulPlan::new(shape(1, 100, 100, k), sms, full);
                if p.splits() > 1 {
                    assert_eq!(p.kslice() % 32, 0);
                    assert!(p.kslice() >= 256, "{p:?}");
                    assert!((p.splits() - 1) * p.kslice() < k && p.splits() * p.kslice() >= k);
                }
            }
        }
    }

    #[test]
    fn full_precision_f32_plans_take_the_wide_tiles_when_their_waves_are_shorter() {
        let full = MatmulPrecision::Highest;
        let wide = |s: MatmulShape, sms: usize| MatmulPlan::new_for::<f32>(s, sms, full);
        // 2000^3 on 132 SMs: 256 tiles of 128 x 128 take two waves, 128 of 128 x 256 one.
        assert!(wide(shape(1, 2000, 2000, 2000), 132).wide_tiles());
        // 3000^3: 576 tiles in five waves against 288 in three (each twice as long): narrow.
        assert!(!wide(shape(1, 3000, 3000, 3000), 132).wide_tiles());
        // 4096^3: eight waves against four.
        assert!(wide(shape(1, 4096, 4096, 4096), 132).wide_tiles());
        // Batched: 64 matrices of [512, 64] @ [64, 512] is 1024 tiles against 512.
        assert!(wide(shape(64, 512, 512, 64), 132).wide_tiles());
        // k not a multiple of 16, m or n of at most 64, a batch beyond the grid, or fewer
        // tiles than SMs (split instead): never.
        assert!(!wide(shape(1, 2000, 2000, 2008 - 4), 132).wide_tiles());
        assert!(!wide(shape(1, 8192, 64, 8192), 132).wide_tiles());
        assert!(!wide(shape(70000, 128, 128, 64), 132).wide_tiles());
        assert!(!wide(shape(1, 1000, 1000, 1000), 132).wide_tiles());
        // Only full-precision f32.
        let s = shape(1, 2000, 2000, 2000);
        assert!(!MatmulPlan::new_for::<bf16>(s, 132, full).wide_tiles());
        assert!(!MatmulPlan::new_for::<f32>(s, 132, MatmulPrecision::High).wide_tiles());
        assert!(!MatmulPlan::new(s, 132, full).wide_tiles());
    }

    #[test]
    fn full_precision_f32_plans_split_by_the_cost_model() {
        let full = MatmulPrecision::Highest;
        // 100^3 on 132 SMs: four 64 x 64 tiles, in four slices of 32 (16 blocks).
        let p = MatmulPlan::new_for::<f32>(shape(1, 100, 100, 100), 132, full);
        assert_eq!((p.small_tiles(), p.splits(), p.kslice()), (true, 4, 32));
        // 500^3, 16 large or 64 small tiles: the small ones, four slices of 128 (256 blocks,
        // two a multiprocessor).
        let s = shape(1, 500, 500, 500);
        let p = MatmulPlan::new_for::<f32>(s, 132, full);
        assert_eq!((p.small_tiles(), p.splits(), p.kslice()), (true, 4, 128));
        // 1000^3, 64 large tiles: two slices of 512 fill one wave; three would need two.
        let p = MatmulPlan::new_for::<f32>(shape(1, 1000, 1000, 1000), 132, full);
        assert_eq!((p.small_tiles(), p.splits(), p.kslice()), (false, 2, 512));
        // n <= 64 runs on 256 x 64 tiles, m <= 64 < n as C^T = B^T A^T on them, by the same
        // model: [8192, 8192] @ [8192, 64], 32 tiles: four slices of 2048 (one wave);
        // [64, 1024] @ [1024, 4096], 16 tiles: eight slices of 128; [64, 4096] @ [4096, 1024],
        // 4 tiles: thirty-two slices of 128.
        let p = MatmulPlan::new_for::<f32>(shape(1, 8192, 64, 8192), 132, full);
        assert_eq!((p.splits(), p.kslice()), (4, 2048));
        let p = MatmulPlan::new_for::<f32>(shape(1, 64, 4096, 1024), 132, full);
        assert_eq!((p.splits(), p.kslice()), (8, 128));
        assert_eq!(p.shape(), shape(1, 64, 4096, 1024));
        let p = MatmulPlan::new_for::<f32>(shape(1, 64, 1024, 4096), 132, full);
        assert_eq!((p.splits(), p.kslice()), (32, 128));
        // Neither runs on the 64 x 64 tiles.
        assert!(!p.small_tiles());
        assert!(!MatmulPlan::new_for::<f32>(shape(1, 8192, 64, 8192), 132, full).small_tiles());
        // The transposed problem is planned as its own.
        let p = MatmulPlan::new_for::<f32>(shape(3, 40, 300, 2000), 132, full);
        let t = MatmulPlan::new_for::<f32>(shape(3, 300, 40, 2000), 132, full);
        assert_eq!((p.splits(), p.kslice()), (t.splits(), t.kslice()));
        // Enough tiles in even waves: unsplit, as `new` (4096^3 on the 128 x 256 tiles;
        // 8192 x 768 x 8192, 384 tiles in three waves, gains too little from a split).
        for s in [shape(1, 4096, 4096, 4096), shape(1, 8192, 768, 8192)] {
            let p = MatmulPlan::new_for::<f32>(s, 132, full);
            assert_eq!(
                MatmulPlan { wide: false, ..p },
                MatmulPlan::new(s, 132, full)
            );
            assert_eq!(p.wide_tiles(), s.m == 4096);
            assert_eq!(MatmulPlan::new(s, 132, full).splits(), 1);
        }
        // A k past 8192 is split into slices of at most 8192 however many tiles there are:
        // GPT-2's head gradient [rows, 50304] @ [50304, 768] in the fewest, 7, or in 11
        // where those waves are even (16 of 132 wide tiles at 8192 rows against 10.2).
        for (m, splits) in [(4096, 11), (8192, 11), (32768, 7)] {
            let p = MatmulPlan::new_for::<f32>(shape(1, m, 768, 50304), 132, full);
            assert_eq!((p.splits(), p.wide_tiles()), (splits, true), "{m}: {p:?}");
        }
        // Every chain within the bound, on random shapes (up to 32 slices).
        let mut x = 0x9e3779b97f4a7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = shape(
                1 + (x % 8) as usize,
                2 + (x >> 3) as usize % 5000,
                2 + (x >> 17) as usize % 5000,
                1 + (x >> 31) as usize % 300_000,
            );
            let p = MatmulPlan::new_for::<f32>(s, 132, full);
            assert!(p.kslice() <= 8192 || p.splits() == 32, "{s:?}: {p:?}");
            assert!(
                p.splits() <= 32 && (p.splits() - 1) * p.kslice() < s.k,
                "{s:?}: {p:?}"
            );
        }
        // A last wave nearly empty splits: GPT-2's weight gradient [3072, 8192] @ [8192, 768]
        // (144 tiles on 132 multiprocessors: 0.86 ms in 8 slices against 1.42 unsplit on the
        // H200), and 40000 x 64 (157 tiles of 256 x 64).
        let p = MatmulPlan::new_for::<f32>(shape(1, 3072, 768, 8192), 132, full);
        assert_eq!(
            (p.small_tiles(), p.wide_tiles(), p.splits()),
            (false, false, 8)
        );
        let p = MatmulPlan::new_for::<f32>(shape(1, 40000, 64, 8192), 132, full);
        assert!(p.splits() > 1 && !p.wide_tiles());
        // The tensor-core kernels keep slices of at least 256: 500 is not split.
        assert_eq!(MatmulPlan::new_for::<bf16>(s, 132, full).splits(), 1);
        // Only full-precision f32 runs on the 64 x 64 SIMT tiles.
        assert!(!MatmulPlan::new_for::<bf16>(s, 132, full).small_tiles());
        assert!(!MatmulPlan::new_for::<f32>(s, 132, MatmulPrecision::High).small_tiles());
        assert_eq!(MatmulPlan::new_for::<f16>(s, 132, full).splits(), 1);
        assert_eq!(
            MatmulPlan::new_for::<f32>(s, 132, MatmulPrecision::High).splits(),
            1
        );
        assert_eq!(MatmulPlan::new(s, 132, full).splits(), 1);
        // Every f32 slice is a multiple of 32 but the last.
        for k in [64, 127, 128, 500, 1000, 1021, 4099] {
            for sms in [8, 46, 108, 132] {
                let p = MatmulPlan::new_for::<f32>(shape(1, 100, 100, k), sms, full);
                if p.splits() > 1 {
                    assert_eq!(p.kslice() % 32, 0);
                    assert!((p.splits() - 1) * p.kslice() < k && p.splits() * p.kslice() >= k);
                }
            }
        }
    }

    #[cfg(feature = "tuning")]
    #[test]
    fn forced_splits_cover_k_in_slices_of_32() {
        let full = MatmulPrecision::Highest;
        let s = shape(2, 37, 41, 97);
        let p = MatmulPlan::new(s, 132, full).with_splits(4);
        assert_eq!((p.splits(), p.kslice()), (4, 32));
        assert_eq!(p.workspace_bytes(), 4 * 2 * 37 * 41 * 4);
        // 3 slices would be 33 long: rounded up to 64, so 2.
        for n in [2, 3] {
            let p = MatmulPlan::new(s, 132, full).with_splits(n);
            assert_eq!((p.splits(), p.kslice()), (2, 64));
        }
        // k of one slice stays whole; matrix-vector products split too.
        assert_eq!(
            MatmulPlan::new(shape(1, 8, 8, 32), 132, full)
                .with_splits(4)
                .splits(),
            1
        );
        let p = MatmulPlan::new(shape(1, 1, 8, 999), 132, full).with_splits(4);
        assert_eq!((p.splits(), p.kslice()), (4, 256));
        assert_eq!(MatmulPlan::new(s, 132, full).with_splits(0).splits(), 1);
    }

    #[test]
    fn tf32_workspace_holds_the_k_major_copies_on_hopper_only() {
        let high = MatmulPrecision::High;
        let s = shape(1, 256, 128, 101);
        let nn = MatmulLayout::contiguous(&s);
        let plan = MatmulPlan::new(s, 1, high);
        // B row-major is copied as 128 rows of k rounded up to 104.
        assert_eq!(
            plan.workspace_bytes_for(&nn, 4, (9, 0), (0, 0)),
            128 * 104 * 4
        );
        assert_eq!(plan.workspace_bytes_for(&nn, 4, (8, 0), (0, 0)), 0);
        // Column-major A and B: A staged, B read in place.
        let tt = MatmulLayout {
            a: MatrixLayout::col_major(256),
            b: MatrixLayout::col_major(101),
        };
        assert_eq!(
            plan.workspace_bytes_for(&tt, 4, (9, 0), (0, 0)),
            256 * 104 * 4
        );
        // Batches: one copy for a broadcast operand, one a batch otherwise; after the split
        // partials (256-byte aligned).
        let mut b = shape(3, 256, 128, 96);
        b.b_batch_stride = 0;
        let p = MatmulPlan::new(b, 1, high).with_splits(3);
        assert_eq!(p.splits(), 3);
        let split = 3 * 3 * 256 * 128 * 4;
        let ta = MatmulLayout {
            a: MatrixLayout::col_major(256),
            b: MatrixLayout::row_major(128),
        };
        assert_eq!(
            p.workspace_bytes_for(&ta, 4, (9, 0), (0, 0)),
            split + 3 * 256 * 96 * 4 + 128 * 96 * 4
        );
        // Below the tile: nothing staged.
        let small = MatmulPlan::new(shape(1, 64, 128, 100), 1, high);
        assert_eq!(small.workspace_bytes_for(&nn, 4, (9, 0), (0, 0)), 0);
    }

    #[test]
    fn misaligned_operands_get_aligned_copies_where_a_16_byte_kernel_then_runs() {
        let full = MatmulPrecision::Highest;
        // f32 at full precision, any GPU: A [256, 101] row-major (ld 101) is copied with lines
        // of 104; B [101, 128] row-major (ld 128) is read in place.
        let s = shape(1, 256, 128, 101);
        let nn = MatmulLayout::contiguous(&s);
        let plan = MatmulPlan::new(s, 1, full);
        for cc in [(8, 0), (9, 0)] {
            assert_eq!(plan.workspace_bytes_for(&nn, 4, cc, (0, 0)), 256 * 104 * 4);
        }
        // f16 / bf16: only on Hopper (lines of 8), where the wgmma kernel then runs.
        assert_eq!(
            plan.workspace_bytes_for(&nn, 2, (9, 0), (0, 0)),
            256 * 104 * 2
        );
        assert_eq!(plan.workspace_bytes_for(&nn, 2, (8, 6), (0, 0)), 0);
        // Both misaligned, batched (B's batch stride not a multiple of 8): A copied per batch.
        let mut b = shape(2, 200, 300, 99);
        b.a_batch_stride = 200 * 99;
        b.b_batch_stride = 99 * 300 + 2;
        let l = MatmulLayout {
            a: MatrixLayout::row_major(99),
            b: MatrixLayout::row_major(300),
        };
        let want = ws_align(2 * 200 * 104 * 2) + 2 * 99 * 304 * 2;
        assert_eq!(
            MatmulPlan::new(b, 1, full).workspace_bytes_for(&l, 2, (9, 0), (0, 0)),
            want
        );
        // Aligned operands, matrix-vector products and TF32 on other GPUs copy nothing.
        let aligned = shape(1, 256, 128, 104);
        let plan = MatmulPlan::new(aligned, 1, full);
        assert_eq!(
            plan.workspace_bytes_for(&MatmulLayout::contiguous(&aligned), 4, (9, 0), (0, 0)),
            0
        );
        let gemv = shape(1, 1, 128, 101);
        let plan = MatmulPlan::new(gemv, 1, full);
        assert_eq!(
            plan.workspace_bytes_for(&MatmulLayout::contiguous(&gemv), 4, (9, 0), (0, 0)),
            0
        );
        assert_eq!(
            MatmulPlan::new(s, 1, MatmulPrecision::High).workspace_bytes_for(
                &nn,
                4,
                (8, 0),
                (0, 0)
            ),
            0
        );
    }

    #[test]
    fn hopper_kernels_only_for_qualifying_products_on_cc_9_0() {
        let full = MatmulPrecision::Highest;
        let plan = |s: MatmulShape| MatmulPlan::new(s, 132, full);
        let big = shape(1, 4096, 4096, 4096);
        let rows = MatmulLayout::contiguous(&big);
        let tile = |cc, p: &MatmulPlan, l, a, b| sm90_tile(cc, 132, p, l, a, b);
        force_sm80_matmul_on_thread(Some(false));
        // 32 x 16 tiles of 128 x 256 fill 132 multiprocessors; 1000^2 (8 x 4, split in 3
        // slices of 352) does not.
        assert_eq!(tile((9, 0), &plan(big), rows, 0, 0), Some(0));
        let mid = shape(1, 1000, 1000, 1000);
        assert_eq!(
            tile((9, 0), &plan(mid), MatmulLayout::contiguous(&mid), 256, 512),
            Some(1)
        );
        // Every other device, forced sm_80, misaligned starts or leading dimensions, thin or
        // shallow products: the sm_80 kernels.
        for cc in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            assert_eq!(tile(cc, &plan(big), rows, 0, 0), None);
        }
        assert_eq!(tile((9, 0), &plan(big), rows, 8, 0), None);
        assert_eq!(tile((9, 0), &plan(big), rows, 0, 2), None);
        let odd = shape(1, 4095, 4097, 1023);
        assert_eq!(
            tile((9, 0), &plan(odd), MatmulLayout::contiguous(&odd), 0, 0),
            None,
            "ld 1023 and 4097 are not multiples of 8"
        );
        let padded = MatmulLayout {
            a: MatrixLayout::row_major(1024),
            b: MatrixLayout::col_major(1024),
        };
        assert_eq!(tile((9, 0), &plan(odd), padded, 0, 0), Some(0));
        for s in [
            shape(1, 64, 4096, 4096),
            shape(1, 4096, 100, 4096),
            shape(1, 4096, 4096, 32),
        ] {
            assert_eq!(
                tile((9, 0), &plan(s), MatmulLayout::contiguous(&s), 0, 0),
                None
            );
        }
        // Batch strides: multiples of 8 of at least a matrix of ld-long lines, or 0
        // (broadcast).
        let bs = |sa, sb| MatmulShape {
            a_batch_stride: sa,
            b_batch_stride: sb,
            ..shape(4, 256, 256, 256)
        };
        let l = MatmulLayout::contiguous(&bs(0, 0));
        assert_eq!(tile((9, 0), &plan(bs(65536, 0)), l, 0, 0), Some(1));
        assert_eq!(tile((9, 0), &plan(bs(0, 65536 + 8)), l, 0, 0), Some(1));
        assert_eq!(tile((9, 0), &plan(bs(65536 + 4, 0)), l, 0, 0), None);
        assert_eq!(tile((9, 0), &plan(bs(256, 65536)), l, 0, 0), None);
        // Split plans: slices of a multiple of 32, as the split rule makes them.
        let thin = shape(1, 256, 256, 8192);
        let p = plan(thin);
        assert!(p.splits() > 1, "{p:?}");
        assert_eq!(
            tile((9, 0), &p, MatmulLayout::contiguous(&thin), 0, 0),
            Some(1)
        );
        let p = MatmulPlan {
            kslice: 48,
            splits: 2,
            ..plan(shape(1, 256, 256, 96))
        };
        assert_eq!(
            tile((9, 0), &p, MatmulLayout::contiguous(&thin), 0, 0),
            None
        );
        force_sm80_matmul_on_thread(Some(true));
        assert!(sm80_matmul_forced());
        assert_eq!(tile((9, 0), &plan(big), rows, 0, 0), None);
        force_sm80_matmul_on_thread(None);
    }

    #[test]
    fn small_products_and_broadcast_batches() {
        // [2, 3] @ [3, 2]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [0f32; 4];
        let s = MatmulShape {
            batch: 1,
            m: 2,
            n: 2,
            k: 3,
            a_batch_stride: 6,
            b_batch_stride: 6,
        };
        matmul(s, &a, &b, &mut c).unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        // Two batches of A against one B.
        let a2: Vec<f32> = a.iter().chain(a.iter()).map(|x| x * 2.0).collect();
        let mut c2 = [0f32; 8];
        let s2 = MatmulShape {
            batch: 2,
            b_batch_stride: 0,
            ..s
        };
        matmul(s2, &a2, &b, &mut c2).unwrap();
        assert_eq!(c2, [116.0, 128.0, 278.0, 308.0, 116.0, 128.0, 278.0, 308.0]);
        // k = 0 gives zeros; short buffers are errors.
        let mut z = [1f32; 4];
        let s0 = MatmulShape { k: 0, ..s };
        matmul::<f32>(s0, &[], &[], &mut z).unwrap();
        assert_eq!(z, [0.0; 4]);
        assert!(matmul(s, &a[..5], &b, &mut c).is_err());
        let h: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
        let hb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
        let mut hc = [bf16::ZERO; 4];
        matmul(s, &h, &hb, &mut hc).unwrap();
        assert_eq!(hc.map(|x| x.to_f32()), [58.0, 64.0, 139.0, 154.0]);
    }
}
