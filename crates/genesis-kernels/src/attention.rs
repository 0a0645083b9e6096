//! Flash attention (`kernels/attention.cu`, FlashAttention-2; on Hopper in bf16 and f16
//! `kernels/attention_sm90.cu`, the same algorithm on `wgmma`): the forward
//! ([`gpu_attention_forward`]) writes `o` and the row log-sum-exps `lse`, the backward
//! ([`gpu_attention_backward`]) `dq`, `dk`, `dv` from `do`; with CPU twins
//! [`attention_forward`] and [`attention_backward`].
//!
//! **Semantics.** Per batch `b` and head `h`, with `q` `[tq, d]`, `k` and `v` `[tk, d]` and
//! `x = scale * q k^T`: key `j` is visible to query `i` unless `causal` and `j > i` (PyTorch's
//! `is_causal`, top-left aligned); `lse_i = ln sum_{j visible} exp(x_ij)` and
//! `o_i = sum_j exp(x_ij - lse_i) v_j`. A row that sees no key (only when `tk == 0`) has
//! `lse = -inf` and `o = 0`. The backward takes the forward's `o` and `lse` and `do`:
//! `p_ij = exp(x_ij - lse_i)` (0 for invisible keys and rows of `lse = -inf`),
//! `d_i = sum_c do_ic o_ic`, `ds_ij = p_ij (do_i . v_j - d_i)`, `dv_j = sum_i p_ij do_i`,
//! `dk_j = scale sum_i ds_ij q_i`, `dq_i = scale sum_j ds_ij k_j` (only `o`'s gradient flows;
//! `lse` is an output without a gradient).
//!
//! **Layouts.** Every tensor is a slice (a span) and [`Strides`] in elements for batch, head
//! and sequence; the head dim is contiguous. Element `(b, h, t, c)` is at
//! `b * batch + h * head + t * seq + c`. GPT-2's `q`, `k`, `v` inside the `[B, T, 3C]`
//! projection are `Strides { batch: T * 3C, head: D, seq: 3C }` on the slice starting at `0`,
//! `C`, `2C`; `o` in `[B, T, H, D]` is [`Strides::bthd`]. `lse` is f32 `[B, H, tq]` contiguous.
//! Outputs must not overlap themselves (checked: the strides, sorted, each reach past the
//! extent of the dims inside them); inputs may (a stride of 0 broadcasts).
//!
//! **GPU.** bf16 and f16 with head dims 64 and 128, f32 with head dim 64 (`kernels/
//! attention_f32.cu`: the same algorithm with f32 inputs, outputs and accumulators, every
//! product as three TF32 tensor-core products, "3xTF32", PyTorch's f32 arithmetic: within a
//! few units of 2^-22 a product of f32's), `tq, tk < 2^30`, every span 16-byte aligned and
//! every stride of a dim longer than 1 a multiple of 8 elements (whole 16-byte rows for
//! `cp.async`). The backward needs a workspace of [`backward_workspace_bytes`] (the f32 row
//! sums `d`). Results are deterministic: no atomics, every output element summed by one
//! thread in a fixed order (`attn_bwd_dq` recomputes the scores instead of accumulating `dq`
//! across the dK/dV blocks).
//!
//! **Twin bound.** The twins compute in f32 (f64 for f64): dot products in order of `c`, the
//! row max, `exp` and sums in order of `j`, `o = (sum p v) / l`, one rounding to `T` at the end.
//! The kernels accumulate in f32 in the tensor cores' order, take `2^(x log2(e))` from
//! `ex2.approx.ftz` in bf16 and f16 (exp2f's value, 0 below 2^-126; their forward's running
//! maximum moves only past a margin of 2^8, which changes nothing but rounding), and round
//! `p` (forward, and `dv`'s product) and `ds` to `T` before their products, as
//! FlashAttention-2 does. With `u` the unit roundoff of `T` (2^-8 bf16, 2^-11 f16), a result
//! `r = sum_n a_n b_n` whose factors `a` the kernel rounds differs from the twin's by at most
//! about `u sum_n |a_n b_n|` (plus f32 accumulation, `~ sqrt(n) 2^-24` of the same sum) and
//! one rounding of `r` to `T` (`u |r|`): for `o` the sum is at most `max |v|` (the weights sum
//! to 1), for `dv`, `dk`, `dq` it is `sum |p do|`, `scale sum |ds q|`, `scale sum |ds k|`; for
//! f32 `lse` a few f32 ulps of `|x| + ln l`. `tests/gpu_attention.rs` checks
//! `|gpu - twin| <= 2 u (|twin| + S)` elementwise with `S` those sums (computed by the test),
//! plus a small absolute floor. `tests/emu/run.sh` runs the kernels' source on the CPU (a host
//! emulation of cp.async, ldmatrix and mma) against an f64 reference within the same bound.
//!
//! Speed: FlashAttention-2's tiling: forward blocks of 128 queries (32 a warp) against 32-key
//! tiles for head dim 64, 64 queries (16 a warp) against 64-key tiles for 128, double-buffered
//! by `cp.async`, fragments by `ldmatrix`, `mma.sync.m16n8k16` with f32
//! accumulators; the backward's dK/dV blocks own 64 keys and walk the query tiles, the dQ
//! blocks own 64 queries and walk the key tiles. See `kernels/attention.cu`. On compute
//! capability 9.0 in bf16 and f16 the forward, dK/dV and dQ kernels are `attention_sm90.cu`'s:
//! one warpgroup a block of 64 queries or keys, `wgmma.m64n64k16` products (P and dS from
//! registers; head dim 128 as two 64-column panels), several blocks a multiprocessor (four or
//! three for head dim 64, two for 128); the same results within the same bound, also
//! deterministic. [`force_sm80_attention_on_thread`] keeps the `mma.sync` kernels there.

#[cfg(feature = "cuda")]
use crate::Element;
use crate::{Error, Result};

const OP: &str = "attention";

fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported {
        op: OP,
        reason: reason.into(),
    }
}

/// Element strides of one attention operand: element `(b, h, t, c)` at
/// `b * batch + h * head + t * seq + c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Strides {
    /// Between batches.
    pub batch: usize,
    /// Between heads.
    pub head: usize,
    /// Between positions of the sequence.
    pub seq: usize,
}

impl Strides {
    /// Contiguous `[B, H, T, D]`.
    pub const fn bhtd(heads: usize, t: usize, d: usize) -> Strides {
        Strides {
            batch: heads * t * d,
            head: t * d,
            seq: d,
        }
    }

    /// Contiguous `[B, T, H, D]` (the `[B, T, C]` layout of a transformer).
    pub const fn bthd(heads: usize, t: usize, d: usize) -> Strides {
        Strides {
            batch: t * heads * d,
            head: d,
            seq: heads * d,
        }
    }
}

/// The strides of the forward's operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ForwardStrides {
    /// Queries.
    pub q: Strides,
    /// Keys.
    pub k: Strides,
    /// Values.
    pub v: Strides,
    /// The output.
    pub o: Strides,
}

/// The strides of the backward's operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BackwardStrides {
    /// Queries.
    pub q: Strides,
    /// Keys.
    pub k: Strides,
    /// Values.
    pub v: Strides,
    /// The forward's output.
    pub o: Strides,
    /// The output's gradient.
    pub dout: Strides,
    /// The queries' gradient (written).
    pub dq: Strides,
    /// The keys' gradient (written).
    pub dk: Strides,
    /// The values' gradient (written).
    pub dv: Strides,
}

impl BackwardStrides {
    /// The same strides for the inputs and their gradients (`dq` like `q`, ...), and `dout`
    /// like `o`.
    pub const fn of(f: ForwardStrides) -> BackwardStrides {
        BackwardStrides {
            q: f.q,
            k: f.k,
            v: f.v,
            o: f.o,
            dout: f.o,
            dq: f.q,
            dk: f.k,
            dv: f.v,
        }
    }
}

/// The problem: `batch * heads` attentions of `tq` queries over `tk` keys of `head_dim`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    /// Batches.
    pub batch: usize,
    /// Heads a batch.
    pub heads: usize,
    /// Queries (rows of `q`, `o`).
    pub tq: usize,
    /// Keys (rows of `k`, `v`).
    pub tk: usize,
    /// Elements of a row of every operand (64 or 128 on the GPU).
    pub head_dim: usize,
    /// Whether query `i` sees only keys `j <= i`.
    pub causal: bool,
    /// The factor of `q . k` (finite).
    pub scale: f32,
}

/// The GPU kernels' limit on `tq` and `tk`.
pub const GPU_MAX_SEQ: usize = 1 << 30;

/// The rows of an operand and whether the kernels write it.
#[derive(Clone, Copy)]
struct Operand {
    name: &'static str,
    rows: usize,
    strides: Strides,
    output: bool,
}

impl AttentionShape {
    /// A shape with the default scale `1 / sqrt(head_dim)`.
    pub fn new(
        batch: usize,
        heads: usize,
        tq: usize,
        tk: usize,
        head_dim: usize,
        causal: bool,
    ) -> AttentionShape {
        AttentionShape {
            batch,
            heads,
            tq,
            tk,
            head_dim,
            causal,
            scale: (1.0 / (head_dim.max(1) as f64).sqrt()) as f32,
        }
    }

    /// Elements of `lse` (and of the backward's row sums): `batch * heads * tq`.
    pub fn lse_len(&self) -> Result<usize> {
        self.batch
            .checked_mul(self.heads)
            .and_then(|n| n.checked_mul(self.tq))
            .ok_or_else(|| unsupported("batch * heads * tq overflows"))
    }

    /// Checks the shape for the CPU twins: a head dim of at least 1, a finite scale, and
    /// `batch * heads * max(tq, tk) * head_dim` representable.
    pub fn check(&self) -> Result<()> {
        if self.head_dim == 0 {
            return Err(unsupported("head_dim 0"));
        }
        if !self.scale.is_finite() {
            return Err(unsupported(format!("scale {}", self.scale)));
        }
        self.batch
            .checked_mul(self.heads)
            .and_then(|n| n.checked_mul(self.tq.max(self.tk)))
            .and_then(|n| n.checked_mul(self.head_dim))
            .ok_or_else(|| unsupported("shape overflows"))?;
        Ok(())
    }

    /// [`AttentionShape::check`], and the kernels' limits: head dim 64 or 128, `tq` and `tk`
    /// below [`GPU_MAX_SEQ`].
    pub fn check_gpu(&self) -> Result<()> {
        self.check()?;
        if self.head_dim != 64 && self.head_dim != 128 {
            return Err(unsupported(format!(
                "head_dim {} on the GPU (64 or 128)",
                self.head_dim
            )));
        }
        if self.tq >= GPU_MAX_SEQ || self.tk >= GPU_MAX_SEQ {
            return Err(unsupported(format!(
                "sequence lengths {} and {} on the GPU (below 2^30)",
                self.tq, self.tk
            )));
        }
        Ok(())
    }

    /// The dims `(extent, stride)` of an operand of `rows` rows (dims of extent 1 get stride 0,
    /// as they never move).
    fn dims(&self, rows: usize, s: Strides) -> [(usize, usize); 4] {
        let eff = |n: usize, st: usize| if n > 1 { st } else { 0 };
        [
            (self.batch, eff(self.batch, s.batch)),
            (self.heads, eff(self.heads, s.head)),
            (rows, eff(rows, s.seq)),
            (self.head_dim, 1),
        ]
    }

    /// Elements an operand of `rows` rows reaches from its first: 0 when it is empty, else one
    /// past its last element (`None` on overflow).
    pub fn reach(&self, rows: usize, s: Strides) -> Option<usize> {
        let dims = self.dims(rows, s);
        if dims.iter().any(|&(n, _)| n == 0) {
            return Some(0);
        }
        dims.iter().try_fold(1usize, |acc, &(n, st)| {
            (n - 1).checked_mul(st).and_then(|x| acc.checked_add(x))
        })
    }

    /// Checks one operand: its reach fits in `len`, and an output does not overlap itself.
    fn check_operand(&self, op: Operand, len: usize) -> Result<()> {
        let reach = self
            .reach(op.rows, op.strides)
            .ok_or_else(|| unsupported(format!("{}: strides overflow", op.name)))?;
        if len < reach {
            return Err(Error::LengthMismatch {
                op: OP,
                expected: reach,
                got: len,
            });
        }
        if op.output && reach > 0 {
            let mut dims: Vec<(usize, usize)> = self
                .dims(op.rows, op.strides)
                .into_iter()
                .filter(|&(n, _)| n > 1)
                .collect();
            dims.sort_by_key(|&(_, s)| s);
            // The extent of the dims inside each (sorted by stride); each stride must reach
            // past it (reach <= len, so no overflow).
            let mut extent = 1usize;
            for (n, s) in dims {
                if s < extent {
                    return Err(unsupported(format!(
                        "{}: the strides {:?} make elements overlap",
                        op.name, op.strides
                    )));
                }
                extent += (n - 1) * s;
            }
        }
        Ok(())
    }

    /// The GPU's conditions on an operand: strides of dims longer than 1 a multiple of 8, the
    /// base 16-byte aligned (unless the operand is empty).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn check_gpu_operand(&self, op: Operand, addr: u64) -> Result<()> {
        let dims = self.dims(op.rows, op.strides);
        if dims[..3].iter().any(|&(_, s)| s % 8 != 0) {
            return Err(unsupported(format!(
                "{}: strides {:?} on the GPU (multiples of 8 elements)",
                op.name, op.strides
            )));
        }
        if self.reach(op.rows, op.strides).unwrap_or(0) > 0 && !addr.is_multiple_of(16) {
            return Err(unsupported(format!(
                "{}: address {addr:#x} on the GPU (16-byte aligned)",
                op.name
            )));
        }
        Ok(())
    }

    fn forward_operands(&self, s: &ForwardStrides) -> [Operand; 4] {
        let op = |name, rows, strides, output| Operand {
            name,
            rows,
            strides,
            output,
        };
        [
            op("q", self.tq, s.q, false),
            op("k", self.tk, s.k, false),
            op("v", self.tk, s.v, false),
            op("o", self.tq, s.o, true),
        ]
    }

    fn backward_operands(&self, s: &BackwardStrides) -> [Operand; 8] {
        let op = |name, rows, strides, output| Operand {
            name,
            rows,
            strides,
            output,
        };
        [
            op("q", self.tq, s.q, false),
            op("k", self.tk, s.k, false),
            op("v", self.tk, s.v, false),
            op("o", self.tq, s.o, false),
            op("dout", self.tq, s.dout, false),
            op("dq", self.tq, s.dq, true),
            op("dk", self.tk, s.dk, true),
            op("dv", self.tk, s.dv, true),
        ]
    }

    /// Checks the forward's operands: the shape ([`AttentionShape::check`]), each operand's
    /// reach against its length (`lens`: q, k, v, o) and `lse_len` against
    /// [`AttentionShape::lse_len`].
    pub fn check_forward(
        &self,
        s: &ForwardStrides,
        lens: [usize; 4],
        lse_len: usize,
    ) -> Result<()> {
        self.check()?;
        for (op, len) in self.forward_operands(s).into_iter().zip(lens) {
            self.check_operand(op, len)?;
        }
        check_lse(self.lse_len()?, lse_len)
    }

    /// Checks the backward's operands (`lens`: q, k, v, o, dout, dq, dk, dv), as
    /// [`AttentionShape::check_forward`] does.
    pub fn check_backward(
        &self,
        s: &BackwardStrides,
        lens: [usize; 8],
        lse_len: usize,
    ) -> Result<()> {
        self.check()?;
        for (op, len) in self.backward_operands(s).into_iter().zip(lens) {
            self.check_operand(op, len)?;
        }
        check_lse(self.lse_len()?, lse_len)
    }
}

fn check_lse(expected: usize, got: usize) -> Result<()> {
    if got < expected {
        return Err(Error::LengthMismatch {
            op: OP,
            expected,
            got,
        });
    }
    Ok(())
}

/// f32 values of the tile column sums [`gpu_attention_backward_packed`] writes when asked:
/// for each tile of 64 rows (of `tq` rows, which must equal `tk`), `head_dim` per head for
/// each of dQ, dK and dV.
pub fn backward_sums_len(shape: &AttentionShape) -> usize {
    shape
        .batch
        .saturating_mul(shape.tq.div_ceil(64))
        .saturating_mul(3 * shape.heads)
        .saturating_mul(shape.head_dim)
}

/// Bytes of device workspace [`gpu_attention_backward`] needs: the f32 row sums `d`,
/// `4 * batch * heads * tq` (saturating; the launcher checks the shape).
pub fn backward_workspace_bytes(shape: &AttentionShape) -> usize {
    shape
        .batch
        .saturating_mul(shape.heads)
        .saturating_mul(shape.tq)
        .saturating_mul(4)
}

// ---------------------------------------------------------------------------------------------
// CPU twins.

use crate::real::{FusedElement, Real};

/// Elements of host scratch the CPU twins take (in the accumulator type), beyond their
/// operands: [`attention_forward`]'s (`backward` false) or [`attention_backward`]'s, saturating.
/// Broadcast operands (a sequence stride of 0) are read whole into scratch, so this can exceed
/// the operands' own size by far.
pub fn host_scratch_len(shape: &AttentionShape, backward: bool) -> usize {
    let (d, tq, tk) = (shape.head_dim, shape.tq, shape.tk);
    let rows_q = tq.saturating_mul(d);
    let rows_k = tk.saturating_mul(d);
    let (q_like, k_like, k_vecs) = if backward { (3, 4, 2) } else { (1, 2, 1) };
    rows_q
        .saturating_mul(q_like)
        .saturating_add(rows_k.saturating_mul(k_like))
        .saturating_add(tk.saturating_mul(k_vecs))
        .saturating_add(d)
}

/// `n` copies of `x`, or [`Error::Unsupported`] when the host cannot allocate them (never an
/// allocation abort).
fn scratch<A: Copy>(n: usize, x: A) -> Result<Vec<A>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::Unsupported {
        op: "attention",
        reason: format!("{n} elements of scratch do not fit in host memory"),
    })?;
    v.resize(n, x);
    Ok(v)
}

/// The rows `0..rows` of operand `(b, h)` widened to the accumulator, `[rows][d]`.
fn rows_of<T: FusedElement>(
    x: &[T],
    s: Strides,
    b: usize,
    h: usize,
    rows: usize,
    d: usize,
) -> Result<Vec<T::Acc>> {
    let mut v = Vec::new();
    if rows == 0 || d == 0 {
        // Nothing to read: the operand's strides, which no element walks, may be anything.
        v.resize(rows.saturating_mul(d), T::Acc::default());
        return Ok(v);
    }
    let base = b * s.batch + h * s.head;
    v.try_reserve_exact(rows.saturating_mul(d))
        .map_err(|_| Error::Unsupported {
            op: "attention",
            reason: format!("{rows} rows of {d} elements do not fit in host memory"),
        })?;
    for t in 0..rows {
        let at = base + t * s.seq;
        v.extend(x[at..at + d].iter().map(|&e| e.acc()));
    }
    Ok(v)
}

fn dot<A: Real>(a: &[A], b: &[A]) -> A {
    a.iter().zip(b).fold(A::default(), |s, (&x, &y)| s + x * y)
}

/// How many keys query `i` sees.
fn visible(shape: &AttentionShape, i: usize) -> usize {
    if shape.causal {
        shape.tk.min(i + 1)
    } else {
        shape.tk
    }
}

/// CPU twin of the forward: `o` (strides `s.o`) and `lse` (`[batch, heads, tq]`) from `q`, `k`,
/// `v` (see the module documentation), any head dim. Everything is checked before anything is
/// written.
pub fn attention_forward<T: FusedElement>(
    shape: &AttentionShape,
    s: &ForwardStrides,
    q: &[T],
    k: &[T],
    v: &[T],
    o: &mut [T],
    lse: &mut [T::Acc],
) -> Result<()> {
    shape.check_forward(s, [q.len(), k.len(), v.len(), o.len()], lse.len())?;
    let (d, tq, tk) = (shape.head_dim, shape.tq, shape.tk);
    if shape.batch == 0 || shape.heads == 0 || tq == 0 {
        // No query row: nothing to write (and no scratch sized by the other sizes).
        return Ok(());
    }
    let scale = T::Acc::of_f64(f64::from(shape.scale));
    let neg_inf = T::Acc::of_f64(f64::NEG_INFINITY);
    let mut x = scratch(tk, T::Acc::default())?;
    let mut acc_o = scratch(d, T::Acc::default())?;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let qs = rows_of(q, s.q, b, h, tq, d)?;
            let ks = rows_of(k, s.k, b, h, tk, d)?;
            let vs = rows_of(v, s.v, b, h, tk, d)?;
            let lse_row = (b * shape.heads + h) * tq;
            for i in 0..tq {
                let n = visible(shape, i);
                let qi = &qs[i * d..][..d];
                let mut m = neg_inf;
                for (j, xj) in x[..n].iter_mut().enumerate() {
                    *xj = scale * dot(qi, &ks[j * d..][..d]);
                    if *xj > m {
                        m = *xj;
                    }
                }
                acc_o.fill(T::Acc::default());
                let mut l = T::Acc::default();
                for (j, &xj) in x[..n].iter().enumerate() {
                    let p = (xj - m).exp();
                    l = l + p;
                    for (a, &vv) in acc_o.iter_mut().zip(&vs[j * d..][..d]) {
                        *a = *a + p * vv;
                    }
                }
                let at = b * s.o.batch + h * s.o.head + i * s.o.seq;
                let zero = T::Acc::default();
                for (dst, &a) in o[at..at + d].iter_mut().zip(&acc_o) {
                    *dst = T::of_acc(if l > zero { a / l } else { zero });
                }
                lse[lse_row + i] = if l > zero { m + l.ln() } else { neg_inf };
            }
        }
    }
    Ok(())
}

/// CPU twin of the backward: `dq`, `dk`, `dv` from `q`, `k`, `v`, the forward's `o` and `lse`,
/// and `dout` (see the module documentation), any head dim. Everything is checked before
/// anything is written.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<T: FusedElement>(
    shape: &AttentionShape,
    s: &BackwardStrides,
    q: &[T],
    k: &[T],
    v: &[T],
    o: &[T],
    dout: &[T],
    lse: &[T::Acc],
    dq: &mut [T],
    dk: &mut [T],
    dv: &mut [T],
) -> Result<()> {
    let lens = [
        q.len(),
        k.len(),
        v.len(),
        o.len(),
        dout.len(),
        dq.len(),
        dk.len(),
        dv.len(),
    ];
    shape.check_backward(s, lens, lse.len())?;
    let (d, tq, tk) = (shape.head_dim, shape.tq, shape.tk);
    if shape.batch == 0 || shape.heads == 0 || d == 0 || (tq == 0 && tk == 0) {
        // No gradient element to write (and no scratch, nor a walk over the heads, sized by
        // the other sizes).
        return Ok(());
    }
    let scale = T::Acc::of_f64(f64::from(shape.scale));
    let zero = T::Acc::default();
    let neg_inf = T::Acc::of_f64(f64::NEG_INFINITY);
    let mut dqi = scratch(d, zero)?;
    let mut ds = scratch(tk, zero)?;
    let mut ps = scratch(tk, zero)?;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let qs = rows_of(q, s.q, b, h, tq, d)?;
            let ks = rows_of(k, s.k, b, h, tk, d)?;
            let vs = rows_of(v, s.v, b, h, tk, d)?;
            let os = rows_of(o, s.o, b, h, tq, d)?;
            let dos = rows_of(dout, s.dout, b, h, tq, d)?;
            let mut dks = scratch(tk.saturating_mul(d), zero)?;
            let mut dvs = scratch(tk.saturating_mul(d), zero)?;
            let lse_row = (b * shape.heads + h) * tq;
            for i in 0..tq {
                let li = lse[lse_row + i];
                // A row that saw no key contributes nothing.
                let n = if li == neg_inf { 0 } else { visible(shape, i) };
                let (qi, doi) = (&qs[i * d..][..d], &dos[i * d..][..d]);
                let di = dot(doi, &os[i * d..][..d]);
                for j in 0..n {
                    let p = (scale * dot(qi, &ks[j * d..][..d]) - li).exp();
                    ps[j] = p;
                    ds[j] = p * (dot(doi, &vs[j * d..][..d]) - di);
                }
                dqi.fill(zero);
                for j in 0..n {
                    let (kj, dsj, pj) = (&ks[j * d..][..d], ds[j], ps[j]);
                    for (a, &kk) in dqi.iter_mut().zip(kj) {
                        *a = *a + dsj * kk;
                    }
                    for (a, &qq) in dks[j * d..][..d].iter_mut().zip(qi) {
                        *a = *a + dsj * qq;
                    }
                    for (a, &g) in dvs[j * d..][..d].iter_mut().zip(doi) {
                        *a = *a + pj * g;
                    }
                }
                let at = b * s.dq.batch + h * s.dq.head + i * s.dq.seq;
                for (dst, &a) in dq[at..at + d].iter_mut().zip(&dqi) {
                    *dst = T::of_acc(scale * a);
                }
            }
            for j in 0..tk {
                let at = b * s.dk.batch + h * s.dk.head + j * s.dk.seq;
                for (dst, &a) in dk[at..at + d].iter_mut().zip(&dks[j * d..][..d]) {
                    *dst = T::of_acc(scale * a);
                }
                let at = b * s.dv.batch + h * s.dv.head + j * s.dv.seq;
                for (dst, &a) in dv[at..at + d].iter_mut().zip(&dvs[j * d..][..d]) {
                    *dst = T::of_acc(a);
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Launchers.

/// The kernels' argument block (`AttnArgs` in `kernels/attention.cu`, field by field).
#[cfg(feature = "cuda")]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Args {
    /// q, k, v, o, dout, dq, dk, dv, lse, dsum.
    ptr: [u64; 10],
    /// (batch, head, seq) of q, k, v, o, dout, dq, dk, dv.
    st: [[u64; 3]; 8],
    batch: u64,
    heads: u64,
    tq: u64,
    tk: u64,
    scale: f32,
    scale_log2: f32,
    causal: i32,
    pad: i32,
    /// The Hopper backward's tile column sums (f32), or 0 (`attention_sm90.cu`; the
    /// `attention.cu` kernels' argument block ends before it).
    csum: u64,
}

/// Threads a block of the tiled kernels.
#[cfg(feature = "cuda")]
const THREADS: u32 = 128;
/// Query rows a dQ block, key rows a dK/dV block.
#[cfg(feature = "cuda")]
const BLOCK_ROWS: usize = 64;

/// Query rows a forward block and keys a forward key tile, for head dim `d` (`Fwd<D, MT, BK>`
/// of the source: 128 and 32 for 64, 64 and 64 for 128).
#[cfg(feature = "cuda")]
const fn forward_tile(d: usize) -> (usize, usize) {
    if d == 64 { (128, 32) } else { (64, 64) }
}
/// The largest grid.y (blocks stride over the rest of `batch * heads`).
#[cfg(feature = "cuda")]
const MAX_GRID_Y: usize = 65_535;

#[cfg(feature = "cuda")]
impl Args {
    fn new(shape: &AttentionShape) -> Args {
        Args {
            batch: shape.batch as u64,
            heads: shape.heads as u64,
            tq: shape.tq as u64,
            tk: shape.tk as u64,
            scale: shape.scale,
            scale_log2: (f64::from(shape.scale) * std::f64::consts::LOG2_E) as f32,
            causal: i32::from(shape.causal),
            ..Args::default()
        }
    }

    fn set(&mut self, slot: usize, addr: u64, s: Strides) {
        self.ptr[slot] = addr;
        self.st[slot] = [s.batch as u64, s.head as u64, s.seq as u64];
    }

    /// Launches the Hopper kernel `which` of `T` ([`sm90_kernel`]) over `shape` (a block per 64
    /// queries, or keys for dK/dV; `grid_y` blocks over `(b, h)`) when the device and head dim
    /// take one; `false` when not (nothing launched).
    fn launch_sm90<T: Element>(
        &mut self,
        stream: &genesis_cuda::Stream,
        which: Sm90,
        shape: &AttentionShape,
        grid_y: u32,
    ) -> Result<bool> {
        let cc = stream.context().compute_capability();
        let Some((name, smem)) = sm90_kernel::<T>(which, cc, shape.head_dim) else {
            return Ok(false);
        };
        let (rows, threads) = SM90_BLOCK;
        let extent = match which {
            Sm90::Dkdv => shape.tk,
            Sm90::Forward | Sm90::Dq => shape.tq,
        };
        let grid = (extent.div_ceil(rows) as u32, grid_y);
        let image = &crate::images::ATTENTION_SM90;
        self.launch_from(image, stream, name, grid, threads, smem)?;
        Ok(true)
    }

    /// Launches kernel `name` of `image` (`attn_<kind>_<T>_d<D>`) on `grid` with `smem` bytes
    /// of dynamic shared memory.
    fn launch_from(
        &mut self,
        image: &'static genesis_cuda::KernelImage,
        stream: &genesis_cuda::Stream,
        name: &'static str,
        grid: (u32, u32),
        block: u32,
        smem: u32,
    ) -> Result<()> {
        use genesis_cuda::{Kernel, LaunchConfig};
        record_kernel(name);
        let kernel = Kernel::get(stream.context(), image, name)?;
        if smem > 48 << 10 {
            kernel.set_max_dynamic_shared_bytes(smem)?;
        }
        let mut params: [*mut std::ffi::c_void; 1] = [(&raw mut *self).cast()];
        let config = LaunchConfig {
            grid: (grid.0, grid.1, 1),
            block: (block, 1, 1),
            shared_bytes: smem,
        };
        // SAFETY: every `attn_*` kernel takes one `AttnArgs`, which `Args` mirrors; the
        // launchers check every span against the shape and strides before calling this.
        unsafe { kernel.launch(stream, config, &mut params)? };
        Ok(())
    }
}

/// The kernel names of `T` and the head dim: `[fwd, dot, dkdv, dq]`.
#[cfg(feature = "cuda")]
fn names<T: Element>(d: usize) -> Result<[&'static str; 4]> {
    Ok(match (T::DTYPE, d) {
        (crate::DType::BF16, 64) => [
            "attn_fwd_bf16_d64",
            "attn_bwd_dot_bf16_d64",
            "attn_bwd_dkdv_bf16_d64",
            "attn_bwd_dq_bf16_d64",
        ],
        (crate::DType::BF16, 128) => [
            "attn_fwd_bf16_d128",
            "attn_bwd_dot_bf16_d128",
            "attn_bwd_dkdv_bf16_d128",
            "attn_bwd_dq_bf16_d128",
        ],
        (crate::DType::F16, 64) => [
            "attn_fwd_f16_d64",
            "attn_bwd_dot_f16_d64",
            "attn_bwd_dkdv_f16_d64",
            "attn_bwd_dq_f16_d64",
        ],
        (crate::DType::F16, 128) => [
            "attn_fwd_f16_d128",
            "attn_bwd_dot_f16_d128",
            "attn_bwd_dkdv_f16_d128",
            "attn_bwd_dq_f16_d128",
        ],
        (crate::DType::F32, 64) => [
            "attn_fwd_f32_d64",
            "attn_bwd_dot_f32_d64",
            "attn_bwd_dkdv_f32_d64",
            "attn_bwd_dq_f32_d64",
        ],
        _ => {
            return Err(unsupported(format!(
                "element type {} with head_dim {d} on the GPU (bf16, f16: 64, 128; f32: 64)",
                T::NAME
            )));
        }
    })
}

/// The kernels a launch of `T` runs outside the Hopper path: `attention.cu`'s (`mma.sync`; 128
/// threads, the shared memory of [`shared_bytes`], forward rows of [`forward_tile`]) or, for
/// f32, `attention_f32.cu`'s (3xTF32 on `mma.sync`; 128 threads, 64 forward rows).
#[cfg(feature = "cuda")]
struct Family {
    image: &'static genesis_cuda::KernelImage,
    threads: u32,
    /// `[fwd, dkdv, dq]` dynamic shared memory.
    smem: [u32; 3],
    forward_rows: usize,
}

#[cfg(feature = "cuda")]
fn family<T: Element>(d: usize) -> Family {
    if T::DTYPE == crate::DType::F32 {
        // `FWD_SMEM`, `DKDV_SMEM`, `DQ_SMEM` of attention_f32.cu.
        Family {
            image: &crate::images::ATTENTION_F32,
            threads: 128,
            smem: [87_040, 70_144, 69_632],
            forward_rows: 64,
        }
    } else {
        Family {
            image: &crate::images::ATTENTION,
            threads: THREADS,
            smem: shared_bytes(d),
            forward_rows: forward_tile(d).0,
        }
    }
}

/// A kernel's name and its dynamic shared memory.
#[cfg(feature = "cuda")]
type Launch = (&'static str, u32);

/// The f32 dK/dV and dQ kernels that stage the B operands' tf32 parts once a block
/// (`attention_f32.cu`'s `_planes` entry points) with their dynamic shared memory
/// (`dkdv_smem<true>`, `dq_smem<true>`): on compute capability 8.0, 9.x and 10.x, whose blocks
/// take over 99 KiB, unless the thread forces the kernels of Ampere's and Ada's other chips
/// ([`force_sm80_attention_on_thread`]). `None`: the raw-staging kernels of [`names`].
#[cfg(feature = "cuda")]
fn f32_planes<T: Element>(cc: (u32, u32)) -> Option<(Launch, Launch)> {
    let big = cc == (8, 0) || cc.0 == 9 || cc.0 == 10;
    (T::DTYPE == crate::DType::F32 && big && !FORCE_SM80.with(|f| f.get())).then_some((
        ("attn_bwd_dkdv_planes_f32_d64", 104_960),
        ("attn_bwd_dq_planes_f32_d64", 104_448),
    ))
}

/// Dynamic shared memory of the kernels (the traits `Fwd`, `Bkv`, `Bq` of the source):
/// `[fwd, dkdv, dq]` for head dim `d` (64 or 128).
#[cfg(feature = "cuda")]
const fn shared_bytes(d: usize) -> [u32; 3] {
    let row = 2 * d; // bytes of a row of T
    let tile = 64 * row; // a 64-row tile
    let bq_kv = if d == 64 { 64 } else { 32 }; // query rows a dK/dV step
    let (fq, fk) = forward_tile(d);
    let fwd = fq * row + 4 * fk * row; // Q, 2 x (K, V)
    let dkdv = 2 * tile + 2 * (2 * bq_kv * row + 2 * bq_kv * 4); // K, V; 2 x (Q, dO, lse, d)
    let dq = 6 * tile; // Q, dO, 2 x (K, V)
    [fwd as u32, dkdv as u32, dq as u32]
}

thread_local! {
    /// The calling thread's override of [`force_sm80_attention_on_thread`].
    static FORCE_SM80: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The attention kernel the thread queued last ([`last_attention_kernel`]).
    static LAST_KERNEL: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Makes the calling thread's attention run on the `mma.sync` kernels of `attention.cu` (what
/// Ampere and Ada run) also on Hopper, and f32's backward on the kernels of the chips with 99
/// KiB blocks (compute capability 8.6, 8.9) (`true`), or lets the launcher choose again
/// (`false`): for tests and benchmarks that compare the two.
pub fn force_sm80_attention_on_thread(force: bool) {
    FORCE_SM80.with(|f| f.set(force));
}

/// The name of the attention kernel the calling thread queued last (`attn_fwd_bf16_d64`,
/// `attn_fwd_sm90_bf16_d64`, `attn_bwd_dq_f16_d128`, ...), or `None` when it queued none.
pub fn last_attention_kernel() -> Option<&'static str> {
    LAST_KERNEL.with(|k| k.get())
}

#[cfg(feature = "cuda")]
fn record_kernel(name: &'static str) {
    LAST_KERNEL.with(|k| k.set(Some(name)));
}

/// A kernel of `attention_sm90.cu`.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy)]
enum Sm90 {
    Forward,
    Dq,
    Dkdv,
}

/// The Hopper (`wgmma`) kernel `which` of `T` for head dim `d` (64 or 128) on a device of
/// compute capability `cc`, unless the thread forces the `mma.sync` kernels: its name and
/// dynamic shared memory (`Cfg<D>` of the source: alignment slack, then the forward's Q tile
/// and two stages of 64-key K and V tiles; dQ's Q and dO tiles and two such stages; dK/dV's K
/// and V and 1 KiB-aligned stages (three for 64, two for 128) of the Q and dO tiles of 64
/// queries with their lse and d; a tile is 64 rows of `d` elements).
#[cfg(feature = "cuda")]
fn sm90_kernel<T: Element>(which: Sm90, cc: (u32, u32), d: usize) -> Option<(&'static str, u32)> {
    if cc != (9, 0) || !(d == 64 || d == 128) || FORCE_SM80.with(|f| f.get()) {
        return None;
    }
    let tile = 64 * 2 * d as u32;
    let (kv_stages, kv_stage) = (
        if d == 64 { 3 } else { 2 },
        (2 * tile + 512).div_ceil(1024) * 1024,
    );
    let (bf16, f16, smem) = match (which, d) {
        (Sm90::Forward, 64) => (
            "attn_fwd_sm90_bf16_d64",
            "attn_fwd_sm90_f16_d64",
            1024 + 5 * tile,
        ),
        (Sm90::Forward, _) => (
            "attn_fwd_sm90_bf16_d128",
            "attn_fwd_sm90_f16_d128",
            1024 + 5 * tile,
        ),
        (Sm90::Dq, 64) => (
            "attn_bwd_dq_sm90_bf16_d64",
            "attn_bwd_dq_sm90_f16_d64",
            1024 + 6 * tile,
        ),
        (Sm90::Dq, _) => (
            "attn_bwd_dq_sm90_bf16_d128",
            "attn_bwd_dq_sm90_f16_d128",
            1024 + 6 * tile,
        ),
        (Sm90::Dkdv, 64) => (
            "attn_bwd_dkdv_sm90_bf16_d64",
            "attn_bwd_dkdv_sm90_f16_d64",
            1024 + 2 * tile + kv_stages * kv_stage,
        ),
        (Sm90::Dkdv, _) => (
            "attn_bwd_dkdv_sm90_bf16_d128",
            "attn_bwd_dkdv_sm90_f16_d128",
            1024 + 2 * tile + kv_stages * kv_stage,
        ),
    };
    match T::DTYPE {
        crate::DType::BF16 => Some((bf16, smem)),
        crate::DType::F16 => Some((f16, smem)),
        _ => None,
    }
}

/// Query rows (forward, dQ) or keys (dK/dV) a block of the Hopper kernels, and its threads
/// (one warpgroup).
#[cfg(feature = "cuda")]
const SM90_BLOCK: (usize, u32) = (64, 128);

/// Queues the forward on `stream`: `o` (strides `s.o`) and `lse` (f32 `[batch, heads, tq]`)
/// from `q`, `k`, `v` (see the module documentation). bf16 and f16, head dims 64 and 128; every
/// span is checked before anything is launched.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_attention_forward<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &AttentionShape,
    s: &ForwardStrides,
    q: genesis_cuda::DeviceSpan<'_, T>,
    k: genesis_cuda::DeviceSpan<'_, T>,
    v: genesis_cuda::DeviceSpan<'_, T>,
    o: genesis_cuda::DeviceSpanMut<'_, T>,
    lse: genesis_cuda::DeviceSpanMut<'_, f32>,
) -> Result<()> {
    shape.check_gpu()?;
    let kernels = names::<T>(shape.head_dim)?;
    shape.check_forward(s, [q.len(), k.len(), v.len(), o.len()], lse.len())?;
    let addrs = [q.addr(), k.addr(), v.addr(), o.addr()];
    for (op, addr) in shape.forward_operands(s).into_iter().zip(addrs) {
        shape.check_gpu_operand(op, addr)?;
    }
    let bh = shape.batch * shape.heads;
    if bh == 0 || shape.tq == 0 {
        return Ok(());
    }
    let mut a = Args::new(shape);
    a.set(0, q.addr(), s.q);
    a.set(1, k.addr(), s.k);
    a.set(2, v.addr(), s.v);
    a.set(3, o.addr(), s.o);
    a.ptr[8] = lse.addr();
    if a.launch_sm90::<T>(stream, Sm90::Forward, shape, bh.min(MAX_GRID_Y) as u32)? {
        return Ok(());
    }
    let f = family::<T>(shape.head_dim);
    let grid = (
        shape.tq.div_ceil(f.forward_rows) as u32,
        bh.min(MAX_GRID_Y) as u32,
    );
    a.launch_from(f.image, stream, kernels[0], grid, f.threads, f.smem[0])
}

/// Queues the backward on `stream`: `dq`, `dk`, `dv` from `q`, `k`, `v`, the forward's `o` and
/// `lse`, and `dout` (see the module documentation), using `workspace`
/// ([`backward_workspace_bytes`], 4-byte aligned). bf16 and f16, head dims 64 and 128; every
/// span is checked before anything is launched. Three launches: the row sums `d`, then the
/// dK/dV and the dQ kernels; the results are deterministic.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_attention_backward<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &AttentionShape,
    s: &BackwardStrides,
    q: genesis_cuda::DeviceSpan<'_, T>,
    k: genesis_cuda::DeviceSpan<'_, T>,
    v: genesis_cuda::DeviceSpan<'_, T>,
    o: genesis_cuda::DeviceSpan<'_, T>,
    dout: genesis_cuda::DeviceSpan<'_, T>,
    lse: genesis_cuda::DeviceSpan<'_, f32>,
    dq: genesis_cuda::DeviceSpanMut<'_, T>,
    dk: genesis_cuda::DeviceSpanMut<'_, T>,
    dv: genesis_cuda::DeviceSpanMut<'_, T>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    let outs = [
        (dq.addr(), dq.len()),
        (dk.addr(), dk.len()),
        (dv.addr(), dv.len()),
    ];
    backward::<T>(
        stream,
        shape,
        s,
        [q, k, v, o, dout],
        lse,
        outs,
        workspace,
        None,
    )?;
    Ok(())
}

/// [`gpu_attention_backward`] writing `dq`, `dk` and `dv` into one span, from its elements
/// `at[0]`, `at[1]` and `at[2]` (each with its strides in `s`): the gradients of q, k and v
/// that are views of one tensor, laid out as that tensor (the thirds of GPT-2's packed
/// projection), so that their input's gradient needs no copy. Each piece is checked to lie
/// within the span; the caller makes sure no two pieces share an element (were they to, the
/// elements they share would hold one of the values).
///
/// With `sums` ([`backward_sums_len`] values), the Hopper kernels (compute capability 9.0,
/// bf16 and f16) also write the column sums of each 64-row tile of dQ, dK and dV as stored:
/// a row of `3 heads D` values a tile (`D` the head dim; tile `t` of batch element `b` at row
/// `b tiles + t`; in it output `w`'s head `h` at `(w heads + h) D`, the packed projection's
/// order); returns whether they did (not on other devices, nor unless `tq == tk > 0`). Added
/// over the rows they are the column sums of the gradients: the packed projection's bias
/// gradient.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_attention_backward_packed<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &AttentionShape,
    s: &BackwardStrides,
    q: genesis_cuda::DeviceSpan<'_, T>,
    k: genesis_cuda::DeviceSpan<'_, T>,
    v: genesis_cuda::DeviceSpan<'_, T>,
    o: genesis_cuda::DeviceSpan<'_, T>,
    dout: genesis_cuda::DeviceSpan<'_, T>,
    lse: genesis_cuda::DeviceSpan<'_, f32>,
    dqkv: genesis_cuda::DeviceSpanMut<'_, T>,
    at: [usize; 3],
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
    sums: Option<genesis_cuda::DeviceSpanMut<'_, f32>>,
) -> Result<bool> {
    let (base, len) = (dqkv.addr(), dqkv.len());
    let mut outs = [(0u64, 0usize); 3];
    for (o, &a) in outs.iter_mut().zip(&at) {
        if a > len {
            return Err(Error::LengthMismatch {
                op: OP,
                expected: a,
                got: len,
            });
        }
        *o = (base + (a * size_of::<T>()) as u64, len - a);
    }
    backward::<T>(
        stream,
        shape,
        s,
        [q, k, v, o, dout],
        lse,
        outs,
        workspace,
        sums,
    )
}

/// The backward's checks and launches, the outputs as (address, elements available); with
/// `sums`, the tile column sums where the Hopper kernels run (returns whether they were
/// written).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn backward<T: Element>(
    stream: &genesis_cuda::Stream,
    shape: &AttentionShape,
    s: &BackwardStrides,
    ins: [genesis_cuda::DeviceSpan<'_, T>; 5],
    lse: genesis_cuda::DeviceSpan<'_, f32>,
    outs: [(u64, usize); 3],
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
    sums: Option<genesis_cuda::DeviceSpanMut<'_, f32>>,
) -> Result<bool> {
    shape.check_gpu()?;
    let kernels = names::<T>(shape.head_dim)?;
    let [q, k, v, o, dout] = ins;
    let lens = [
        q.len(),
        k.len(),
        v.len(),
        o.len(),
        dout.len(),
        outs[0].1,
        outs[1].1,
        outs[2].1,
    ];
    shape.check_backward(s, lens, lse.len())?;
    let addrs = [
        q.addr(),
        k.addr(),
        v.addr(),
        o.addr(),
        dout.addr(),
        outs[0].0,
        outs[1].0,
        outs[2].0,
    ];
    for (op, addr) in shape.backward_operands(s).into_iter().zip(addrs) {
        shape.check_gpu_operand(op, addr)?;
    }
    let need = backward_workspace_bytes(shape);
    if workspace.len() < need {
        return Err(Error::LengthMismatch {
            op: OP,
            expected: need,
            got: workspace.len(),
        });
    }
    if !workspace.addr().is_multiple_of(4) {
        return Err(unsupported("workspace not 4-byte aligned"));
    }
    if let Some(sp) = &sums
        && sp.len() < backward_sums_len(shape)
    {
        return Err(Error::LengthMismatch {
            op: OP,
            expected: backward_sums_len(shape),
            got: sp.len(),
        });
    }
    let bh = shape.batch * shape.heads;
    if bh == 0 {
        return Ok(false);
    }
    let mut a = Args::new(shape);
    for (slot, addr) in addrs.into_iter().enumerate() {
        let st = [s.q, s.k, s.v, s.o, s.dout, s.dq, s.dk, s.dv][slot];
        a.set(slot, addr, st);
    }
    a.ptr[8] = lse.addr();
    a.ptr[9] = workspace.addr();
    // The column sums: only the Hopper kernels form them, and only with both passes running.
    let cc = stream.context().compute_capability();
    let hopper = [Sm90::Dq, Sm90::Dkdv]
        .into_iter()
        .all(|w| sm90_kernel::<T>(w, cc, shape.head_dim).is_some());
    if let Some(sp) = &sums
        && hopper
        && shape.tq > 0
        && shape.tq == shape.tk
    {
        a.csum = sp.addr();
    }
    let f = family::<T>(shape.head_dim);
    let grid_y = bh.min(MAX_GRID_Y) as u32;
    if shape.tq > 0 {
        let rows = bh * shape.tq;
        let sms = stream.context().multiprocessors() as usize;
        let blocks = rows.div_ceil(8).clamp(1, sms.max(1) * 32);
        a.launch_from(f.image, stream, kernels[1], (blocks as u32, 1), 256, 0)?;
    }
    let (dkdv, dq) = match f32_planes::<T>(stream.context().compute_capability()) {
        Some(planes) => planes,
        None => ((kernels[2], f.smem[1]), (kernels[3], f.smem[2])),
    };
    if shape.tk > 0 {
        // With tq == 0 it writes zeros.
        if !a.launch_sm90::<T>(stream, Sm90::Dkdv, shape, grid_y)? {
            let grid = (shape.tk.div_ceil(BLOCK_ROWS) as u32, grid_y);
            a.launch_from(f.image, stream, dkdv.0, grid, f.threads, dkdv.1)?;
        }
    }
    if shape.tq > 0 && !a.launch_sm90::<T>(stream, Sm90::Dq, shape, grid_y)? {
        let grid = (shape.tq.div_ceil(BLOCK_ROWS) as u32, grid_y);
        a.launch_from(f.image, stream, dq.0, grid, f.threads, dq.1)?;
    }
    Ok(a.csum != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A strided operand of `rows` rows: contiguous `[B, H, T, D]`, `[B, T, H, D]`, or padded
    /// (rows of `d + 3`, heads and batches apart by more than they need).
    fn strides(kind: usize, sh: &AttentionShape, rows: usize) -> Strides {
        let (h, d) = (sh.heads, sh.head_dim);
        match kind % 3 {
            0 => Strides::bhtd(h, rows, d),
            1 => Strides::bthd(h, rows, d),
            _ => Strides {
                batch: h * (rows * (d + 3) + 5) + 7,
                head: rows * (d + 3) + 5,
                seq: d + 3,
            },
        }
    }

    fn random<T: FusedElement>(rng: &mut SmallRng, n: usize) -> Vec<T> {
        (0..n)
            .map(|_| T::from_f64(rng.random_range(-2.0..2.0)))
            .collect()
    }

    fn at(s: Strides, b: usize, h: usize, t: usize) -> usize {
        b * s.batch + h * s.head + t * s.seq
    }

    /// The naive reference in f64: explicit scores, masked softmax, product.
    fn naive(
        sh: &AttentionShape,
        s: &ForwardStrides,
        q: &[f64],
        k: &[f64],
        v: &[f64],
    ) -> (Vec<Vec<f64>>, Vec<f64>) {
        let d = sh.head_dim;
        let (mut o, mut lse) = (Vec::new(), Vec::new());
        for b in 0..sh.batch {
            for h in 0..sh.heads {
                for i in 0..sh.tq {
                    let scores: Vec<f64> = (0..sh.tk)
                        .map(|j| {
                            if sh.causal && j > i {
                                f64::NEG_INFINITY
                            } else {
                                let (qa, ka) = (at(s.q, b, h, i), at(s.k, b, h, j));
                                f64::from(sh.scale)
                                    * (0..d).map(|c| q[qa + c] * k[ka + c]).sum::<f64>()
                            }
                        })
                        .collect();
                    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    if m == f64::NEG_INFINITY {
                        o.push(vec![0.0; d]);
                        lse.push(f64::NEG_INFINITY);
                        continue;
                    }
                    let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                    let l: f64 = e.iter().sum();
                    o.push(
                        (0..d)
                            .map(|c| (0..sh.tk).map(|j| e[j] / l * v[at(s.v, b, h, j) + c]).sum())
                            .collect(),
                    );
                    lse.push(m + l.ln());
                }
            }
        }
        (o, lse)
    }

    fn fwd_strides(kind: usize, sh: &AttentionShape) -> ForwardStrides {
        ForwardStrides {
            q: strides(kind, sh, sh.tq),
            k: strides(kind + 1, sh, sh.tk),
            v: strides(kind + 2, sh, sh.tk),
            o: strides(kind, sh, sh.tq),
        }
    }

    fn len_of(sh: &AttentionShape, rows: usize, s: Strides) -> usize {
        sh.reach(rows, s).unwrap()
    }

    #[test]
    fn attention_forward_matches_naive() {
        let mut rng = SmallRng::seed_from_u64(1);
        for case in 0..40 {
            let sh = AttentionShape::new(
                rng.random_range(1..3),
                rng.random_range(1..4),
                rng.random_range(0..20),
                rng.random_range(if case % 7 == 0 { 0 } else { 1 }..20),
                rng.random_range(1..20),
                case % 2 == 0,
            );
            let s = fwd_strides(case, &sh);
            let q = random::<f32>(&mut rng, len_of(&sh, sh.tq, s.q));
            let k = random::<f32>(&mut rng, len_of(&sh, sh.tk, s.k));
            let v = random::<f32>(&mut rng, len_of(&sh, sh.tk, s.v));
            let mut o = vec![f32::NAN; len_of(&sh, sh.tq, s.o)];
            let mut lse = vec![f32::NAN; sh.lse_len().unwrap()];
            attention_forward(&sh, &s, &q, &k, &v, &mut o, &mut lse).unwrap();
            let wide = |x: &[f32]| x.iter().map(|&e| f64::from(e)).collect::<Vec<_>>();
            let (want_o, want_lse) = naive(&sh, &s, &wide(&q), &wide(&k), &wide(&v));
            let mut row = 0;
            for b in 0..sh.batch {
                for h in 0..sh.heads {
                    for i in 0..sh.tq {
                        let got = f64::from(lse[row]);
                        let want = want_lse[row];
                        assert!(
                            got == want || (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "case {case} {sh:?}: lse {got} vs {want}"
                        );
                        for c in 0..sh.head_dim {
                            let got = f64::from(o[at(s.o, b, h, i) + c]);
                            let want = want_o[row][c];
                            assert!(
                                (got - want).abs() <= 1e-5,
                                "case {case} {sh:?}: o {got} vs {want}"
                            );
                        }
                        row += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn attention_forward_all_masked_rows() {
        // tk == 0: every row sees no key.
        let sh = AttentionShape::new(1, 2, 3, 0, 4, false);
        let s = fwd_strides(0, &sh);
        let q = vec![bf16::ONE; 24];
        let mut o = vec![bf16::NAN; 24];
        let mut lse = vec![0f32; 6];
        attention_forward(&sh, &s, &q, &[], &[], &mut o, &mut lse).unwrap();
        assert!(o.iter().all(|x| x.to_f32() == 0.0));
        assert!(lse.iter().all(|&x| x == f32::NEG_INFINITY));
        let bs = BackwardStrides::of(s);
        let (mut dq, mut dk, mut dv) = (vec![bf16::NAN; 24], vec![], vec![]);
        attention_backward(
            &sh,
            &bs,
            &q,
            &[],
            &[],
            &o,
            &q,
            &lse,
            &mut dq,
            &mut dk,
            &mut dv,
        )
        .unwrap();
        assert!(dq.iter().all(|x| x.to_f32() == 0.0));
    }

    /// The backward twin in f64 against central differences of the forward twin of
    /// `L = sum o * w` (so `dout = w`).
    #[test]
    fn attention_backward_gradient_check() {
        let mut rng = SmallRng::seed_from_u64(2);
        for case in 0..12 {
            let mut sh = AttentionShape::new(
                rng.random_range(1..3),
                rng.random_range(1..3),
                rng.random_range(1..7),
                rng.random_range(1..7),
                rng.random_range(1..5),
                case % 2 == 1,
            );
            sh.scale = rng.random_range(0.2..1.5);
            let fs = fwd_strides(case, &sh);
            let s = BackwardStrides {
                dout: strides(case + 1, &sh, sh.tq),
                dq: strides(case + 2, &sh, sh.tq),
                ..BackwardStrides::of(fs)
            };
            let q = random::<f64>(&mut rng, len_of(&sh, sh.tq, s.q));
            let k = random::<f64>(&mut rng, len_of(&sh, sh.tk, s.k));
            let v = random::<f64>(&mut rng, len_of(&sh, sh.tk, s.v));
            let w = random::<f64>(&mut rng, len_of(&sh, sh.tq, s.dout));
            let n_o = len_of(&sh, sh.tq, s.o);
            let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
                let mut o = vec![0.0; n_o];
                let mut lse = vec![0.0; sh.lse_len().unwrap()];
                attention_forward(&sh, &fs, q, k, v, &mut o, &mut lse).unwrap();
                let mut l = 0.0;
                for b in 0..sh.batch {
                    for h in 0..sh.heads {
                        for i in 0..sh.tq {
                            for c in 0..sh.head_dim {
                                l += o[at(s.o, b, h, i) + c] * w[at(s.dout, b, h, i) + c];
                            }
                        }
                    }
                }
                l
            };
            let mut o = vec![0.0; n_o];
            let mut lse = vec![0.0; sh.lse_len().unwrap()];
            attention_forward(&sh, &fs, &q, &k, &v, &mut o, &mut lse).unwrap();
            let mut dq = vec![f64::NAN; len_of(&sh, sh.tq, s.dq)];
            let mut dk = vec![f64::NAN; len_of(&sh, sh.tk, s.dk)];
            let mut dv = vec![f64::NAN; len_of(&sh, sh.tk, s.dv)];
            attention_backward(&sh, &s, &q, &k, &v, &o, &w, &lse, &mut dq, &mut dk, &mut dv)
                .unwrap();
            let eps = 1e-5;
            for (which, rows, st, grad) in [
                (0, sh.tq, s.q, &dq),
                (1, sh.tk, s.k, &dk),
                (2, sh.tk, s.v, &dv),
            ] {
                let gst = [s.dq, s.dk, s.dv][which];
                for b in 0..sh.batch {
                    for h in 0..sh.heads {
                        for t in 0..rows {
                            for c in 0..sh.head_dim {
                                let idx = at(st, b, h, t) + c;
                                let mut ins = [q.clone(), k.clone(), v.clone()];
                                ins[which][idx] += eps;
                                let up = loss(&ins[0], &ins[1], &ins[2]);
                                ins[which][idx] -= 2.0 * eps;
                                let down = loss(&ins[0], &ins[1], &ins[2]);
                                let fd = (up - down) / (2.0 * eps);
                                let got = grad[at(gst, b, h, t) + c];
                                assert!(
                                    (got - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
                                    "case {case} {sh:?} operand {which} ({b},{h},{t},{c}): \
                                     {got} vs {fd}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn attention_bad_input() {
        let sh = AttentionShape::new(2, 3, 5, 7, 8, true);
        let s = fwd_strides(0, &sh);
        let (nq, nk, nv) = (
            len_of(&sh, 5, s.q),
            len_of(&sh, 7, s.k),
            len_of(&sh, 7, s.v),
        );
        let (q, k, v) = (vec![0f32; nq], vec![0f32; nk], vec![0f32; nv]);
        let mut o = vec![0f32; nq];
        let mut lse = vec![0f32; 30];
        attention_forward(&sh, &s, &q, &k, &v, &mut o, &mut lse).unwrap();
        // Short operands.
        let err = attention_forward(&sh, &s, &q[1..], &k, &v, &mut o, &mut lse);
        assert!(matches!(err, Err(Error::LengthMismatch { .. })), "{err:?}");
        let err = attention_forward(&sh, &s, &q, &k, &v[1..], &mut o, &mut lse);
        assert!(matches!(err, Err(Error::LengthMismatch { .. })), "{err:?}");
        let err = attention_forward(&sh, &s, &q, &k, &v, &mut o, &mut lse[1..]);
        assert!(matches!(err, Err(Error::LengthMismatch { .. })), "{err:?}");
        // An output whose rows overlap.
        let mut bad = s;
        bad.o.seq = 4;
        let err = attention_forward(&sh, &bad, &q, &k, &v, &mut o, &mut lse);
        assert!(matches!(err, Err(Error::Unsupported { .. })), "{err:?}");
        // Overflowing shapes and strides, a bad scale, head dim 0.
        for bad_shape in [
            AttentionShape {
                batch: usize::MAX,
                ..sh
            },
            AttentionShape {
                scale: f32::NAN,
                ..sh
            },
            AttentionShape { head_dim: 0, ..sh },
        ] {
            let err = attention_forward(&bad_shape, &s, &q, &k, &v, &mut o, &mut lse);
            assert!(matches!(err, Err(Error::Unsupported { .. })), "{err:?}");
        }
        let mut huge = s;
        huge.k.seq = usize::MAX / 4;
        let err = attention_forward(&sh, &huge, &q, &k, &v, &mut o, &mut lse);
        assert!(matches!(err, Err(Error::Unsupported { .. })), "{err:?}");
        // The GPU's limits.
        assert!(sh.check_gpu().is_err());
        assert!(
            AttentionShape::new(2, 3, 5, 7, 64, true)
                .check_gpu()
                .is_ok()
        );
        assert!(
            AttentionShape::new(2, 3, 5, 7, 128, true)
                .check_gpu()
                .is_ok()
        );
        assert!(
            AttentionShape::new(2, 3, 1 << 30, 7, 64, true)
                .check_gpu()
                .is_err()
        );
        let g = AttentionShape::new(1, 2, 3, 4, 64, false);
        let bad_stride = Strides {
            batch: 0,
            head: 3 * 64,
            seq: 68,
        };
        let op = Operand {
            name: "q",
            rows: 3,
            strides: bad_stride,
            output: false,
        };
        assert!(g.check_gpu_operand(op, 0).is_err());
        let op = Operand {
            strides: Strides::bhtd(2, 3, 64),
            ..op
        };
        assert!(g.check_gpu_operand(op, 0).is_ok());
        assert!(g.check_gpu_operand(op, 8).is_err());
        // Backward: a short gradient, and gradients that overlap.
        let bs = BackwardStrides::of(s);
        let (mut dq, mut dk, mut dv) = (vec![0f32; nq], vec![0f32; nk], vec![0f32; nv - 1]);
        let err = attention_backward(
            &sh, &bs, &q, &k, &v, &o, &o, &lse, &mut dq, &mut dk, &mut dv,
        );
        assert!(matches!(err, Err(Error::LengthMismatch { .. })), "{err:?}");
        let mut dv = vec![0f32; nv];
        attention_backward(
            &sh, &bs, &q, &k, &v, &o, &o, &lse, &mut dq, &mut dk, &mut dv,
        )
        .unwrap();
        let mut bad = bs;
        bad.dk.head = 0;
        let err = attention_backward(
            &sh, &bad, &q, &k, &v, &o, &o, &lse, &mut dq, &mut dk, &mut dv,
        );
        assert!(matches!(err, Err(Error::Unsupported { .. })), "{err:?}");
    }

    #[test]
    fn attention_reach() {
        let sh = AttentionShape::new(2, 3, 5, 7, 8, false);
        assert_eq!(sh.reach(5, Strides::bhtd(3, 5, 8)), Some(2 * 3 * 5 * 8));
        assert_eq!(sh.reach(0, Strides::bhtd(3, 5, 8)), Some(0));
        // GPT-2's q inside [B, T, 3C] (C = H D), starting at 0.
        let c = 3 * 8;
        let s = Strides {
            batch: 5 * 3 * c,
            head: 8,
            seq: 3 * c,
        };
        assert_eq!(sh.reach(5, s), Some(5 * 3 * c + 4 * 3 * c + 2 * 8 + 8));
        assert_eq!(backward_workspace_bytes(&sh), 4 * 2 * 3 * 5);
    }
}
