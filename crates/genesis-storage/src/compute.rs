//! The operations of each kind of memory behind one crate-private trait, [`Compute`]:
//!
//! - host memory (`[u8]`: the bytes of a CPU, pinned, memory-mapped or shared storage), where
//!   the kernels' CPU twins run;
//! - CUDA memory of a device pool (`cuda::CudaMem`), where the kernels run;
//! - without the `cuda` feature, a stub CUDA memory that cannot exist (`cuda_stub.rs`), so
//!   that the storage code names CUDA memory without feature gates.
//!
//! `Storage` checks dtypes, devices and ranges, allocates outputs and picks the backend of its
//! operands' memory; a backend only computes. Positions and lengths are in elements of the
//! dtype given; every operand of one call lives in the same backend.

use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides};
use genesis_kernels::classifier::{ClassifierShape, Reduction};
use genesis_kernels::classify::FloatClass;
use genesis_kernels::gather::Along;
use genesis_kernels::grad::ActGrad;
use genesis_kernels::index::{IndexDesc, Keys, Rows16, Strided};
use genesis_kernels::layernorm::LayerNormShape;
use genesis_kernels::matmul::MatmulLayout;
use genesis_kernels::optim::AdamStep;
use genesis_kernels::scan::ScanOp;
use genesis_kernels::softmax::SoftmaxOp;
use genesis_kernels::triangle::Triangle;
use genesis_kernels::{BinaryNd, BinaryOp, CompareOp, MatmulPrecision, MatmulShape};
use genesis_kernels::{ReduceOp, ReduceShape};
use genesis_kernels::{Rhs, Sampler, UnaryOp, WhereNd};

use crate::storage::Inner;
use crate::{CpuStorage, DType, Error, Result, WithDType};

/// One tensor of a multi-tensor Adam step: the parameter, its gradient and its two moments.
pub(crate) struct AdamParts<W, R> {
    pub(crate) p: W,
    pub(crate) g: R,
    pub(crate) m: W,
    pub(crate) v: W,
}

/// The logits of the classifier's backward and where their gradient goes.
pub(crate) enum CeLogits<'a, M: ?Sized> {
    /// Logits from element `.1` (rows `shape.stride` apart), the gradient into the contiguous
    /// `rows * classes` elements of `.2`.
    Separate(&'a M, usize, &'a mut M),
    /// The gradient written over the logits (from element `.1`): llm.c's trick.
    InPlace(&'a mut M, usize),
}

/// Where flash attention's backward writes `dq`, `dk` and `dv`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum AttentionGrads<'a, M: ?Sized> {
    /// Each in its own buffer, from element 0, `[dq, dk, dv]` elements available.
    Separate([&'a mut M; 3], [usize; 3]),
    /// All three in one buffer of that many elements, from the elements given (their
    /// layouts share no element: the caller checks); with the last, also the tile column
    /// sums where the kernels form them (`genesis_kernels::attention::backward_sums_len`
    /// f32 values).
    Packed(&'a mut M, usize, [usize; 3], Option<&'a mut M>),
}

/// The residual of a fused layer norm ([`Compute::layer_norm`]): `r` (`rows * cols` values of
/// `dtype` from element `at`: the rows' dtype, or for f32 rows the output's f16 or bf16) and
/// `h`, which receives `x + r` (the rows' dtype, from element 0).
pub(crate) struct LnResidual<'a, M: ?Sized> {
    pub(crate) r: &'a M,
    pub(crate) at: usize,
    pub(crate) dtype: DType,
    pub(crate) h: &'a mut M,
}

/// The operations of one kind of memory (see the module documentation).
#[allow(clippy::too_many_arguments)]
pub(crate) trait Compute {
    /// `out[out_at + i] = op(self[a_at + i], b[b_at + i])` for `i < len`.
    fn binary(
        &self,
        op: BinaryOp,
        dtype: DType,
        a_at: usize,
        b: &Self,
        b_at: usize,
        out: &mut Self,
        out_at: usize,
        len: usize,
    ) -> Result<()>;

    /// `out[out_at + i] = op(self[a_at + i], b[b_at + i])` (operands swapped when `swap`) for
    /// `i < len`, `self` and `out` f32 and `b` of `b_dtype` (f16 or bf16) widened: add, sub,
    /// mul (`genesis_kernels::cpu::binary_mixed`).
    fn binary_mixed(
        &self,
        op: BinaryOp,
        b_dtype: DType,
        a_at: usize,
        b: &Self,
        b_at: usize,
        out: &mut Self,
        out_at: usize,
        len: usize,
        swap: bool,
    ) -> Result<()>;

    /// In place: `self[at + i] = op(self[at + i], b[b_at + i])` for `i < len`.
    fn binary_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        b: &Self,
        b_at: usize,
        len: usize,
    ) -> Result<()>;

    /// `out[i] = op(self[a(i)], b[b(i)] or the scalar)` over `desc`'s positions (the scalar as
    /// one element's bytes).
    fn binary_nd(
        &self,
        op: BinaryOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&Self, &[u8]>,
        out: &mut Self,
    ) -> Result<()>;

    /// In place over `desc`'s positions from element `at`: `self[at + i] = op(self[at + i],
    /// b[b(i)] or the scalar)` (the descriptor's `a` is the output).
    fn binary_nd_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        desc: &BinaryNd,
        b: Rhs<&Self, &[u8]>,
    ) -> Result<()>;

    /// `out[out_at + i] = op(self[at + i])` for `i < len`.
    fn unary(
        &self,
        op: UnaryOp,
        dtype: DType,
        at: usize,
        out: &mut Self,
        out_at: usize,
        len: usize,
    ) -> Result<()>;

    /// In place: `self[at + i] = op(self[at + i])` for `i < len`.
    fn unary_assign(&mut self, op: UnaryOp, dtype: DType, at: usize, len: usize) -> Result<()>;

    /// `out[..]` = the `len` bytes of `self` from byte `at` with the elements (`elem` bytes)
    /// outside triangle `t` zeroed (`tril` / `triu`).
    fn triangle(
        &self,
        t: &Triangle,
        elem: usize,
        at: usize,
        len: usize,
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = op(self[at + i])` as bool bytes, for `i < len` (float dtypes).
    fn classify(
        &self,
        op: FloatClass,
        dtype: DType,
        at: usize,
        len: usize,
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = self[at + i]` with NaN, +inf and -inf replaced by `values` (each rounded to
    /// `dtype`, beyond its range to an infinity), for `i < len` (float dtypes).
    fn nan_to_num(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        values: [f64; 3],
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = self[a_at + i] op b[b_at + i]` as bool bytes, for `i < len`.
    fn compare(
        &self,
        op: CompareOp,
        dtype: DType,
        a_at: usize,
        b: &Self,
        b_at: usize,
        out: &mut Self,
        len: usize,
    ) -> Result<()>;

    /// `out[i] = self[c_at + i] ? a[a_at + i] : b[b_at + i]` (`self` the bool condition) for
    /// `i < len` elements of `elem` bytes.
    fn select(
        &self,
        elem: usize,
        c_at: usize,
        a: &Self,
        a_at: usize,
        b: &Self,
        b_at: usize,
        out: &mut Self,
        len: usize,
    ) -> Result<()>;

    /// `out[i] = self[a(i)] op (b[b(i)] or the scalar)` as bool bytes over `desc`'s positions
    /// (the scalar as one element's bytes).
    fn compare_nd(
        &self,
        op: CompareOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&Self, &[u8]>,
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = self[c(i)] ? (a[a(i)] or a's value) : (b[b(i)] or b's value)` over `desc`'s
    /// positions (`self` the bool condition), elements of `elem` bytes; a value is one
    /// element's bytes.
    fn where_nd(
        &self,
        elem: usize,
        desc: &WhereNd,
        a: Rhs<&Self, &[u8]>,
        b: Rhs<&Self, &[u8]>,
        out: &mut Self,
    ) -> Result<()>;

    /// `self[i] = value` (one element's bytes) for `i < len`.
    fn fill(&mut self, dtype: DType, value: &[u8], len: usize) -> Result<()>;

    /// `out[i] = self[at + i] as to` for `i < len`.
    fn cast(&self, from: DType, at: usize, to: DType, out: &mut Self, len: usize) -> Result<()>;

    /// The reduction of `shape.input_len()` elements from `self[at]` into `values` (of
    /// `crate::reduce_dtype`) and, for the arg ops, `indices` (i64).
    fn reduce(
        &self,
        op: ReduceOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        values: &mut Self,
        indices: Option<&mut Self>,
    ) -> Result<()>;

    /// `out[i] = min(max(self[at + i], lo), hi)` for `i < len`, each bound (one element's
    /// bytes) optional.
    fn clamp(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        out: &mut Self,
    ) -> Result<()>;

    /// The variance with `correction` (its root when `std`) of `shape.input_len()` elements
    /// from `self[at]` over the reduced axis, into `values` (`dtype`, a floating type).
    fn var(
        &self,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        correction: f64,
        std: bool,
        values: &mut Self,
    ) -> Result<()>;

    /// The inclusive prefix sums or products (`op`) of `shape.input_len()` elements from
    /// `self[at]` along the reduced axis, into `out` (`dtype` for floats, i64 for integers).
    fn scan(
        &self,
        op: ScanOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = self[g_at + i] * f'(x[x_at + i])` for `i < len` (`dtype` floating); with
    /// `sums` `(cols, s)`, also `s[c]` the sum of `out`'s column `c` over rows of `cols`.
    #[allow(clippy::too_many_arguments)]
    fn act_grad(
        &self,
        op: ActGrad,
        dtype: DType,
        g_at: usize,
        x: &Self,
        x_at: usize,
        out: &mut Self,
        len: usize,
        sums: Option<(usize, &mut Self)>,
    ) -> Result<()>;

    /// The softmax (`log`: log_softmax) gradient of `len` elements in rows of `n`: `self`
    /// the forward's output from `y_at`, `g` its gradient from `g_at`, into `out`.
    #[allow(clippy::too_many_arguments)]
    fn softmax_grad(
        &self,
        log: bool,
        dtype: DType,
        y_at: usize,
        g: &Self,
        g_at: usize,
        out: &mut Self,
        len: usize,
        n: usize,
    ) -> Result<()>;

    /// Flash attention's forward (`genesis_kernels::attention`): `q` (`self`), `k`, `v` of
    /// `dtype`, each read through `s` from element `at[i]`, the `len[i]` elements from there
    /// its span; `o` (from 0, through `s.o`) and `lse` (`[batch, heads, tq]`, f32; f64 for
    /// f64) written.
    #[allow(clippy::too_many_arguments)]
    fn attention_forward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &ForwardStrides,
        at: [usize; 3],
        len: [usize; 3],
        k: &Self,
        v: &Self,
        o: &mut Self,
        o_len: usize,
        lse: &mut Self,
    ) -> Result<()>;

    /// Flash attention's backward: `q` (`self`), `k`, `v`, the forward's `o`, `dout` (each
    /// from element `at[i]`, `len[i]` elements) and `lse` (from 0); `dq`, `dk`, `dv` written
    /// through `s` (see [`AttentionGrads`]). Returns whether the tile column sums were
    /// written.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &BackwardStrides,
        at: [usize; 5],
        len: [usize; 5],
        ins: [&Self; 4],
        lse: &Self,
        outs: AttentionGrads<'_, Self>,
    ) -> Result<bool>;

    /// Layer norm's forward (`genesis_kernels::layernorm`): `[rows, cols]` of `dtype` from
    /// element `x_at` of `self`, `w` and `b` (`cols` values from their element) optional,
    /// into `y` (of `dtype`, or f16 or bf16 for f32 rows: `types.1`) and the rows' `mean` and
    /// `rstd` (f32; f64 for f64). With a `residual`, of `h = x + r` (`h` written).
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        x_at: usize,
        residual: Option<LnResidual<'_, Self>>,
        w: Option<(&Self, usize)>,
        b: Option<(&Self, usize)>,
        y: &mut Self,
        mean: &mut Self,
        rstd: &mut Self,
    ) -> Result<()>;

    /// Layer norm's backward: `dh` (from its element `dh.1`; written, or added to what it
    /// holds when `dh.2`) from `dy` (`self` from `dy_at`), the forward's input `h`, `w`,
    /// `mean` and `rstd`; `dw` and `db` when given. `types`: the rows' dtype and `dy`'s (the
    /// same, or f16 or bf16 for f32 rows). `copy`: `dh`'s final value rounded to `dy`'s dtype
    /// (from element 0). `sums`: the column sums of that copy (of `dh` without one), `cols`
    /// values of `dy`'s dtype.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        dy_at: usize,
        h: (&Self, usize),
        w: Option<(&Self, usize)>,
        stats: [&Self; 2],
        dh: (&mut Self, usize, bool),
        copy: Option<&mut Self>,
        sums: Option<&mut Self>,
        dw: Option<&mut Self>,
        db: Option<&mut Self>,
    ) -> Result<()>;

    /// The fused classifier's forward (`genesis_kernels::classifier`): logits of `dtype` from
    /// element `at` of `self` (rows `shape.stride` apart), int64 targets from their element;
    /// each row's loss and `lse` (f32; f64 for f64) and, unless `reduction` is `None`, their
    /// sum or mean in `out[0]`. A bad target: an error (host), or its row in `status[0]`
    /// (device; the caller set it to -1).
    #[allow(clippy::too_many_arguments)]
    fn cross_entropy(
        &self,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        at: usize,
        targets: (&Self, usize),
        rows: [&mut Self; 2],
        out: &mut Self,
        status: &mut Self,
    ) -> Result<()>;

    /// The fused classifier's backward: the logits' gradient from the logits (see
    /// [`CeLogits`]), targets, the forward's `lse` and `dloss` (f32; f64 for f64:
    /// `reduction.dloss_len(rows)` values).
    #[allow(clippy::too_many_arguments)]
    fn cross_entropy_backward(
        logits: CeLogits<'_, Self>,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        targets: (&Self, usize),
        lse: &Self,
        dloss: &Self,
        status: &mut Self,
    ) -> Result<()>;

    /// One-hot rows of the int64 classes `self[at..at + n]` into `out` (`n * classes` int64):
    /// an index error naming the first class outside `0..classes`.
    fn one_hot(&self, at: usize, n: usize, classes: usize, out: &mut Self) -> Result<()>;

    /// A part of this memory that a multi-tensor op reads (host bytes or a device span).
    type Part<'a>;
    /// A part that it writes.
    type PartMut<'a>;

    /// One Adam step of each tensor `(param, grad, exp_avg, exp_avg_sq)` (parts of `dtype`
    /// elements, of one length per tensor; see `genesis_kernels::optim`), queued where `on`'s
    /// work is (one of the operands' memories).
    fn adam<'a>(
        on: &Self,
        h: &AdamStep,
        dtype: DType,
        tensors: Vec<AdamParts<Self::PartMut<'a>, Self::Part<'a>>>,
    ) -> Result<()>;

    /// The global 2-norm of `grads` (in runs of one dtype, in the order given) and PyTorch's
    /// clipping factor for `max_norm` into `out` (2 f64: `[norm, coef]`), then every gradient
    /// scaled by the factor.
    fn clip_grad_norm<'a>(
        grads: Vec<(DType, Self::PartMut<'a>)>,
        max_norm: f64,
        out: &mut Self,
    ) -> Result<()>;

    /// `op` (softmax, log_softmax or logsumexp) of `shape.input_len()` elements from
    /// `self[at]` along the reduced axis into `out` (`dtype`, a floating type; the input's
    /// length, or `shape.output_len()` for logsumexp).
    fn softmax(
        &self,
        op: SoftmaxOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut Self,
    ) -> Result<()>;

    /// `out[i] = self[at + target(i, idx[idx_at + ..])]` over `d` for `dtype` elements (the
    /// gather of `genesis_kernels::gather`); a bad index value is an error. `in_range`, asked
    /// once the work is queued: whether every index value is known to lie in `0..d.size()`
    /// (a device need not read its check back).
    #[allow(clippy::too_many_arguments)]
    fn gather_along(
        &self,
        dtype: DType,
        at: usize,
        idx: &Self,
        idx_at: usize,
        d: &Along,
        out: &mut Self,
        in_range: &dyn Fn() -> bool,
    ) -> Result<()>;

    /// In place into `self` (targets counted from element `out_at`): the scatter (`add`:
    /// scatter-add) of the values from `vals[vals_at]` over `d`. A bad index value is an
    /// error, and `self` is then incomplete: callers check the index first or scatter into a
    /// new copy.
    #[allow(clippy::too_many_arguments)]
    fn scatter_along(
        &mut self,
        dtype: DType,
        add: bool,
        out_at: usize,
        idx: &Self,
        idx_at: usize,
        vals: &Self,
        vals_at: usize,
        d: &Along,
        in_range: &dyn Fn() -> bool,
    ) -> Result<()>;

    /// The rows from `self[at]` summed by sorted key into `out` (`out_rows` rows, zeroed by the
    /// caller): see `genesis_kernels::gather::rows_by_key`; `keys` and `perm` i64 from their
    /// elements.
    fn rows_by_key(
        &self,
        dtype: DType,
        at: usize,
        shape: &genesis_kernels::gather::RowsByKey,
        keys: (&Self, usize),
        perm: (&Self, usize),
        out: &mut Self,
    ) -> Result<()>;

    /// The stable sort of each of `rows` rows of `r` elements from `self[at]` (ascending, or
    /// descending): the first `k` (at most `r`) of each sorted row into `values` (`dtype`)
    /// and `indices` (i64 positions in the row), `rows * k` of each.
    #[allow(clippy::too_many_arguments)]
    fn sort_rows(
        &self,
        dtype: DType,
        at: usize,
        rows: usize,
        r: usize,
        k: usize,
        descending: bool,
        values: &mut Self,
        indices: &mut Self,
    ) -> Result<()>;

    /// `out[out_at..] = self[a_at..] @ b[b_at..]` (see [`MatmulShape`]), the operands where
    /// `layout` says; `precision` applies to f32 products on CUDA (the host computes in full
    /// f32). With `bias` (`n` values from its start), the kernel may add it to every row
    /// before rounding: returns whether it did (the caller adds it otherwise).
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        dtype: DType,
        shape: MatmulShape,
        layout: MatmulLayout,
        precision: MatmulPrecision,
        a_at: usize,
        b: &Self,
        b_at: usize,
        bias: Option<(&Self, usize)>,
        out: &mut Self,
        out_at: usize,
    ) -> Result<bool>;

    /// `len` samples of `sampler` for `(seed, offset)` into `self`.
    fn random(
        &mut self,
        dtype: DType,
        sampler: Sampler,
        seed: u64,
        offset: u64,
        len: usize,
    ) -> Result<()>;

    /// `self[at + i] = value` where `mask[m_at + i]` is set, for `i < len` elements of
    /// `value.len()` bytes.
    fn masked_fill(
        &mut self,
        at: usize,
        mask: &Self,
        m_at: usize,
        len: usize,
        value: &[u8],
    ) -> Result<()>;

    /// The elements of `elem` bytes `self[at + i]` whose `mask[m_at + i]` is set, in order, as
    /// new memory of this backend, and their count.
    fn masked_select(
        &self,
        elem: usize,
        at: usize,
        mask: &Self,
        m_at: usize,
        len: usize,
    ) -> Result<(Inner, usize)>;

    /// The positions `i < len` whose byte `self[at + i]` is set, as new i64 memory of this
    /// backend, and their count.
    fn nonzero(&self, at: usize, len: usize) -> Result<(Inner, usize)>;

    /// Advanced indexing (`kernels/index.cu`): `out[i] = self[offset(i)]` for the `n` result
    /// elements of `elem` bytes that `desc` and the `desc.index_len()` i64 values of `idx` map
    /// from the `len` elements of `self`; row by row in 16-byte units when `rows` is given
    /// (and the memory allows it).
    ///
    /// # Safety
    ///
    /// Every offset the index values reach lies in `self[..len]`: the CUDA backend reads
    /// where they point (the host backend checks them, an offset outside being an error).
    unsafe fn index_gather(
        &self,
        elem: usize,
        len: usize,
        desc: &IndexDesc,
        idx: &Self,
        rows: Option<&Rows16>,
        out: &mut Self,
        n: usize,
    ) -> Result<()>;

    /// Advanced indexing: `self[offset(i)] = values[i]` for the `n` result elements of `elem`
    /// bytes of `desc` into the `len` elements of `self`, skipping the positions marked in
    /// `dead` (`desc.nb` bytes); row by row when `rows` is given.
    ///
    /// # Safety
    ///
    /// As [`Compute::index_gather`] for the offsets written; the live positions write
    /// distinct offsets.
    unsafe fn index_scatter(
        &mut self,
        elem: usize,
        len: usize,
        values: &Self,
        desc: &IndexDesc,
        idx: &Self,
        dead: &Self,
        rows: Option<&Rows16>,
        n: usize,
    ) -> Result<()>;

    /// Advanced indexing: `self[offset] += values[..]` for the `n` result elements of `desc`
    /// (`dtype`) into the `len` elements of `self`, each group of equal index tuples summed
    /// in order by its representative; `groups` are `[dead, start, len, members]` (`nb`
    /// bytes, `nb`, `nb` and `members` i64).
    ///
    /// # Safety
    ///
    /// As [`Compute::index_scatter`], with groups that partition the `nb` positions.
    unsafe fn index_scatter_add(
        &mut self,
        dtype: DType,
        len: usize,
        values: &Self,
        desc: &IndexDesc,
        idx: &Self,
        groups: [&Self; 4],
        members: usize,
        n: usize,
    ) -> Result<()>;

    /// Normalises the index array `src` (int32 when `i32`, else int64, read through `layout`)
    /// into the `nb` i64 `self[at..at + nb]`: negative values wrap, a value outside `0..size`
    /// is written as 0 and the smallest such position lands in word `bad_at` of `bad` when
    /// smaller than the word.
    fn index_normalise(
        &mut self,
        at: usize,
        nb: usize,
        src: &Self,
        i32: bool,
        layout: &Strided,
        size: usize,
        bad: &mut Self,
        bad_at: usize,
    ) -> Result<()>;

    /// Marks in `dead` (`nb` bytes) the positions whose index tuple (`keys` of the
    /// `keys.n_adv * nb` normalised i64 values in `self`) repeats at a later position, through
    /// `winner` (`nwinner` zeroed words, one per key); every position is dead when one of the
    /// `nbad` words of `bad` is set (not all ones).
    ///
    /// # Safety
    ///
    /// Every key lies in `winner` (the CUDA backend writes where they point; the host checks).
    unsafe fn index_dead_positions(
        &self,
        nb: usize,
        keys: &Keys,
        winner: &mut Self,
        nwinner: usize,
        bad: &Self,
        nbad: usize,
        dead: &mut Self,
    ) -> Result<()>;

    /// `out[d * n + i]` = coordinate `d` of the row-major position `self[i]` (i64) over the
    /// `shape.rank` sizes of `shape`, for `i < n`.
    fn index_unravel(&self, n: usize, shape: &Strided, rows: bool, out: &mut Self) -> Result<()>;

    /// Row `r < rows.nrows` of `out` is the row of `self` at the raw index value `r` of
    /// `values` (int32 when `i32`, else int64; from element `offset`, `stride` apart; wrapped
    /// when negative and `wrap`, else a negative value is out of range) for every value in
    /// `0..size`; `Ok(false)` when a value is not (its row is then not copied). `self` holds
    /// `size` rows of the layout `rows` describes.
    #[allow(clippy::too_many_arguments)]
    fn index_gather_rows_checked(
        &self,
        rows: &Rows16,
        values: &Self,
        i32: bool,
        offset: usize,
        stride: usize,
        size: usize,
        wrap: bool,
        out: &mut Self,
    ) -> Result<bool>;
}

/// [`Error::HostOutOfMemory`] when the attention CPU twin's scratch (operand rows read whole,
/// also those of broadcast operands: a key sequence of stride 0 costs nothing as an operand)
/// exceeds the host's memory: refused before the twin asks for it.
fn check_attention_scratch(shape: &AttentionShape, dtype: DType, backward: bool) -> Result<()> {
    let acc = crate::Storage::fused_acc_dtype(dtype).size();
    let n = genesis_kernels::attention::host_scratch_len(shape, backward);
    crate::cpu::check_host_bytes(n.saturating_mul(acc))
}

/// `len` elements of `T` from element `at` of host bytes.
fn host<T: WithDType>(b: &[u8], at: usize, len: usize) -> Result<&[T]> {
    let bytes = host_range::<T>(b.len(), at, len)?;
    let b = &b[bytes];
    // SAFETY: host storages are at least 64-byte aligned (CPU), 512 (pinned) or checked at
    // mapping (files), so `b`, starting at a whole element, is aligned for `T`; it holds
    // `len * size_of::<T>()` initialised bytes and every bit pattern is a valid `T`
    // (WithDType is sealed to plain-old-data types).
    Ok(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), len) })
}

/// [`host`], mutably.
fn host_mut<T: WithDType>(b: &mut [u8], at: usize, len: usize) -> Result<&mut [T]> {
    let bytes = host_range::<T>(b.len(), at, len)?;
    let b = &mut b[bytes];
    // SAFETY: as in `host`, with the unique borrow of `b`.
    Ok(unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<T>(), len) })
}

fn host_range<T>(have: usize, at: usize, len: usize) -> Result<std::ops::Range<usize>> {
    let size = size_of::<T>();
    let end = at.checked_add(len).and_then(|e| e.checked_mul(size));
    match end {
        Some(end) if end <= have => Ok(at * size..end),
        _ => Err(Error::OutOfBounds {
            op: "host memory",
            start: at,
            len,
            storage_len: have / size.max(1),
        }),
    }
}

/// The error of an element size no kernel moves.
fn element_size(op: &'static str, elem: usize) -> Error {
    Error::Kernel(genesis_kernels::Error::Unsupported {
        op,
        reason: format!("element size {elem}"),
    })
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType { op, dtype }
}

/// The value of `T` in the first `size_of::<T>()` bytes of `b` (one element's bytes).
pub(crate) fn element_from_bytes<T: WithDType>(op: &'static str, b: &[u8]) -> Result<T> {
    if b.len() < size_of::<T>() {
        return Err(Error::OutOfBounds {
            op,
            start: 0,
            len: 1,
            storage_len: 0,
        });
    }
    // SAFETY: `b` holds at least `size_of::<T>()` initialised bytes (checked), read without
    // alignment, and every bit pattern is a valid `T` (WithDType is sealed to plain-old-data
    // types).
    Ok(unsafe { b.as_ptr().cast::<T>().read_unaligned() })
}

impl Compute for [u8] {
    type Part<'a> = &'a [u8];
    type PartMut<'a> = &'a mut [u8];

    fn one_hot(&self, at: usize, n: usize, classes: usize, out: &mut [u8]) -> Result<()> {
        let len = n.checked_mul(classes).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype: DType::I64,
        })?;
        genesis_kernels::triangle::one_hot(
            host::<i64>(self, at, n)?,
            classes,
            host_mut::<i64>(out, 0, len)?,
        )?;
        Ok(())
    }

    fn act_grad(
        &self,
        op: ActGrad,
        dtype: DType,
        g_at: usize,
        x: &[u8],
        x_at: usize,
        out: &mut [u8],
        len: usize,
        sums: Option<(usize, &mut [u8])>,
    ) -> Result<()> {
        use genesis_kernels::grad;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let (g, x) = (host::<T>(self, g_at, len)?, host::<T>(x, x_at, len)?);
            let out = host_mut::<T>(out, 0, len)?;
            match sums {
                None => grad::act_grad::<T>(op, g, x, out)?,
                Some((cols, s)) => {
                    grad::act_grad_cols::<T>(op, g, x, out, cols, host_mut::<T>(s, 0, cols)?)?
                }
            }
            Ok(())
        }, _ => Err(unsupported("act_grad", dtype)))
    }

    fn attention_forward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &ForwardStrides,
        at: [usize; 3],
        len: [usize; 3],
        k: &[u8],
        v: &[u8],
        o: &mut [u8],
        o_len: usize,
        lse: &mut [u8],
    ) -> Result<()> {
        let n = shape.lse_len()?;
        check_attention_scratch(shape, dtype, false)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::attention::attention_forward::<T>(
                shape,
                s,
                host::<T>(self, at[0], len[0])?,
                host::<T>(k, at[1], len[1])?,
                host::<T>(v, at[2], len[2])?,
                host_mut::<T>(o, 0, o_len)?,
                host_mut::<<T as genesis_kernels::real::FusedElement>::Acc>(lse, 0, n)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("attention", dtype)))
    }

    fn cross_entropy(
        &self,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        at: usize,
        targets: (&[u8], usize),
        rows: [&mut [u8]; 2],
        out: &mut [u8],
        _status: &mut [u8],
    ) -> Result<()> {
        let n = shape.rows;
        let span = shape.span_len(shape.stride)?;
        let [loss, lse] = rows;
        let t = host::<i64>(targets.0, targets.1, n)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            type A = <T as genesis_kernels::real::FusedElement>::Acc;
            let loss = host_mut::<A>(loss, 0, n)?;
            genesis_kernels::classifier::cross_entropy_forward::<T>(
                shape,
                host::<T>(self, at, span)?,
                t,
                loss,
                host_mut::<A>(lse, 0, n)?,
            )?;
            if reduction != Reduction::None {
                let v = genesis_kernels::classifier::cross_entropy_reduce(shape, reduction, loss, t)?;
                host_mut::<A>(out, 0, 1)?[0] = v;
            }
            Ok(())
        }, _ => Err(unsupported("cross_entropy", dtype)))
    }

    fn cross_entropy_backward(
        logits: CeLogits<'_, [u8]>,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        targets: (&[u8], usize),
        lse: &[u8],
        dloss: &[u8],
        _status: &mut [u8],
    ) -> Result<()> {
        use genesis_kernels::classifier as ce;
        let n = shape.rows;
        let span = shape.span_len(shape.stride)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            type A = <T as genesis_kernels::real::FusedElement>::Acc;
            let (t, e) = (host::<i64>(targets.0, targets.1, n)?, host::<A>(lse, 0, n)?);
            let d = host::<A>(dloss, 0, reduction.dloss_len(n))?;
            match logits {
                CeLogits::Separate(l, at, out) => ce::cross_entropy_backward::<T>(
                    shape,
                    reduction,
                    host::<T>(l, at, span)?,
                    t,
                    e,
                    d,
                    host_mut::<T>(out, 0, n * shape.classes)?,
                    shape.classes,
                )?,
                CeLogits::InPlace(l, at) => ce::cross_entropy_backward_in_place::<T>(
                    shape,
                    reduction,
                    host_mut::<T>(l, at, span)?,
                    t,
                    e,
                    d,
                )?,
            }
            Ok(())
        }, _ => Err(unsupported("cross_entropy", dtype)))
    }

    fn layer_norm(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        x_at: usize,
        residual: Option<LnResidual<'_, [u8]>>,
        w: Option<(&[u8], usize)>,
        b: Option<(&[u8], usize)>,
        y: &mut [u8],
        mean: &mut [u8],
        rstd: &mut [u8],
    ) -> Result<()> {
        use genesis_kernels::real::FusedElement;
        #[allow(clippy::too_many_arguments)]
        fn run<T, O, R>(
            x: &[u8],
            shape: &LayerNormShape,
            x_at: usize,
            residual: Option<LnResidual<'_, [u8]>>,
            w: Option<(&[u8], usize)>,
            b: Option<(&[u8], usize)>,
            y: &mut [u8],
            mean: &mut [u8],
            rstd: &mut [u8],
        ) -> Result<()>
        where
            T: FusedElement + WithDType,
            O: FusedElement<Acc = T::Acc> + WithDType,
            R: FusedElement<Acc = T::Acc> + WithDType,
            T::Acc: WithDType,
        {
            use genesis_kernels::layernorm as ln;
            let (len, rows, c) = (shape.numel()?, shape.rows, shape.cols);
            let x = host::<T>(x, x_at, len)?;
            let w = w.map(|(m, at)| host::<T>(m, at, c)).transpose()?;
            let b = b.map(|(m, at)| host::<T>(m, at, c)).transpose()?;
            let y = host_mut::<O>(y, 0, len)?;
            let mean = host_mut::<T::Acc>(mean, 0, rows)?;
            let rstd = host_mut::<T::Acc>(rstd, 0, rows)?;
            match residual {
                None => ln::layer_norm_forward::<T, O>(shape, x, None, w, b, y, mean, rstd)?,
                Some(res) => ln::add_layer_norm_forward::<T, O, R>(
                    shape,
                    x,
                    host::<R>(res.r, res.at, len)?,
                    host_mut::<T>(res.h, 0, len)?,
                    w,
                    b,
                    y,
                    mean,
                    rstd,
                )?,
            }
            Ok(())
        }
        let r_type = residual.as_ref().map_or(types.0, |r| r.dtype);
        crate::dtype::dispatch_narrowing!(types, [F32, F16, BF16, F64], (T, O) => {
            if r_type == types.0 {
                run::<T, O, T>(self, shape, x_at, residual, w, b, y, mean, rstd)
            } else if r_type == types.1 {
                run::<T, O, O>(self, shape, x_at, residual, w, b, y, mean, rstd)
            } else {
                Err(unsupported("layer_norm", r_type))
            }
        }, _ => Err(unsupported("layer_norm", types.1)))
    }

    fn layer_norm_backward(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        dy_at: usize,
        h: (&[u8], usize),
        w: Option<(&[u8], usize)>,
        stats: [&[u8]; 2],
        dh: (&mut [u8], usize, bool),
        copy: Option<&mut [u8]>,
        sums: Option<&mut [u8]>,
        dw: Option<&mut [u8]>,
        db: Option<&mut [u8]>,
    ) -> Result<()> {
        use genesis_kernels::real::FusedElement;
        #[allow(clippy::too_many_arguments)]
        fn run<T: FusedElement + WithDType, G: FusedElement<Acc = T::Acc> + WithDType>(
            dy: &[u8],
            shape: &LayerNormShape,
            dy_at: usize,
            h: (&[u8], usize),
            w: Option<(&[u8], usize)>,
            stats: [&[u8]; 2],
            dh: (&mut [u8], usize, bool),
            copy: Option<&mut [u8]>,
            sums: Option<&mut [u8]>,
            dw: Option<&mut [u8]>,
            db: Option<&mut [u8]>,
        ) -> Result<()>
        where
            T::Acc: WithDType,
        {
            let (len, rows, c) = (shape.numel()?, shape.rows, shape.cols);
            let acc = genesis_kernels::layernorm::Accumulate {
                dh: dh.2,
                params: false,
            };
            genesis_kernels::layernorm::layer_norm_backward::<T, G>(
                shape,
                host::<G>(dy, dy_at, len)?,
                host::<T>(h.0, h.1, len)?,
                w.map(|(m, at)| host::<T>(m, at, c)).transpose()?,
                host::<T::Acc>(stats[0], 0, rows)?,
                host::<T::Acc>(stats[1], 0, rows)?,
                host_mut::<T>(dh.0, dh.1, len)?,
                dw.map(|m| host_mut::<T>(m, 0, c)).transpose()?,
                db.map(|m| host_mut::<T>(m, 0, c)).transpose()?,
                acc,
            )?;
            let copied = match copy {
                Some(m) => {
                    genesis_kernels::layernorm::narrow_copy::<T, G>(
                        host::<T>(dh.0, dh.1, len)?,
                        host_mut::<G>(m, 0, len)?,
                    )?;
                    Some(m)
                }
                None => None,
            };
            if let Some(out) = sums {
                let out = host_mut::<G>(out, 0, c)?;
                match copied {
                    Some(m) => genesis_kernels::layernorm::column_sums(host::<G>(m, 0, len)?, out)?,
                    None => {
                        genesis_kernels::layernorm::column_sums(host::<T>(dh.0, dh.1, len)?, out)?
                    }
                }
            }
            Ok(())
        }
        crate::dtype::dispatch_narrowing!(types, [F32, F16, BF16, F64], (T, O) => {
            run::<T, O>(self, shape, dy_at, h, w, stats, dh, copy, sums, dw, db)
        }, _ => Err(unsupported("layer_norm", types.1)))
    }

    fn attention_backward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &BackwardStrides,
        at: [usize; 5],
        len: [usize; 5],
        ins: [&[u8]; 4],
        lse: &[u8],
        outs: AttentionGrads<'_, [u8]>,
    ) -> Result<bool> {
        let n = shape.lse_len()?;
        let [k, v, o, dout] = ins;
        let AttentionGrads::Separate([dq, dk, dv], out_len) = outs else {
            return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                op: "scaled_dot_product_attention_backward",
                reason: "the gradients in one buffer are a CUDA path".into(),
            }));
        };
        check_attention_scratch(shape, dtype, true)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::attention::attention_backward::<T>(
                shape,
                s,
                host::<T>(self, at[0], len[0])?,
                host::<T>(k, at[1], len[1])?,
                host::<T>(v, at[2], len[2])?,
                host::<T>(o, at[3], len[3])?,
                host::<T>(dout, at[4], len[4])?,
                host::<<T as genesis_kernels::real::FusedElement>::Acc>(lse, 0, n)?,
                host_mut::<T>(dq, 0, out_len[0])?,
                host_mut::<T>(dk, 0, out_len[1])?,
                host_mut::<T>(dv, 0, out_len[2])?,
            )?;
            Ok(false)
        }, _ => Err(unsupported("attention", dtype)))
    }

    fn softmax_grad(
        &self,
        log: bool,
        dtype: DType,
        y_at: usize,
        g: &[u8],
        g_at: usize,
        out: &mut [u8],
        len: usize,
        n: usize,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::grad::softmax_grad::<T>(
                log,
                host::<T>(self, y_at, len)?,
                host::<T>(g, g_at, len)?,
                n,
                host_mut::<T>(out, 0, len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("softmax_grad", dtype)))
    }

    fn adam<'a>(
        _: &[u8],
        h: &AdamStep,
        dtype: DType,
        tensors: Vec<AdamParts<&'a mut [u8], &'a [u8]>>,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            for AdamParts { p, g, m, v } in tensors {
                let n = p.len() / size_of::<T>();
                genesis_kernels::optim::adam::<T>(
                    h,
                    host_mut::<T>(p, 0, n)?,
                    host::<T>(g, 0, n)?,
                    host_mut::<T>(m, 0, n)?,
                    host_mut::<T>(v, 0, n)?,
                )?;
            }
            Ok(())
        }, _ => Err(unsupported("adam", dtype)))
    }

    fn clip_grad_norm(
        mut grads: Vec<(DType, &mut [u8])>,
        max_norm: f64,
        out: &mut [u8],
    ) -> Result<()> {
        use genesis_kernels::optim;
        let mut partials = Vec::new();
        for (dtype, g) in &grads {
            genesis_kernels::dispatch_dtype!(*dtype, [F32, F16, BF16, F64], T => {
                optim::sum_squares::<T>(host::<T>(g, 0, g.len() / size_of::<T>())?, &mut partials)?;
                Ok(())
            }, _ => Err(unsupported("clip_grad_norm", *dtype)))?;
        }
        let result = optim::clip_coef(&partials, max_norm);
        host_mut::<f64>(out, 0, 2)?.copy_from_slice(&result);
        for (dtype, g) in &mut grads {
            genesis_kernels::dispatch_dtype!(*dtype, [F32, F16, BF16, F64], T => {
                let n = g.len() / size_of::<T>();
                optim::scale::<T>(host_mut::<T>(g, 0, n)?, result[1])?;
                Ok(())
            }, _ => Err(unsupported("clip_grad_norm", *dtype)))?;
        }
        Ok(())
    }

    fn binary_mixed(
        &self,
        op: BinaryOp,
        b_dtype: DType,
        a_at: usize,
        b: &[u8],
        b_at: usize,
        out: &mut [u8],
        out_at: usize,
        len: usize,
        swap: bool,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(b_dtype, [F16, BF16], H => {
            let (a, b) = (host::<f32>(self, a_at, len)?, host::<H>(b, b_at, len)?);
            let o = host_mut::<f32>(out, out_at, len)?;
            genesis_kernels::cpu::binary_mixed::<H>(op, a, b, o, swap)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), b_dtype)))
    }

    fn binary(
        &self,
        op: BinaryOp,
        dtype: DType,
        a_at: usize,
        b: &[u8],
        b_at: usize,
        out: &mut [u8],
        out_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let (a, b) = (host::<T>(self, a_at, len)?, host::<T>(b, b_at, len)?);
            genesis_kernels::cpu::binary::<T>(op, a, b, host_mut::<T>(out, out_at, len)?)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        b: &[u8],
        b_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let rhs = host::<T>(b, b_at, len)?;
            genesis_kernels::cpu::binary_assign::<T>(op, host_mut::<T>(self, at, len)?, rhs)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_nd(
        &self,
        op: BinaryOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&[u8], &[u8]>,
        out: &mut [u8],
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let a = host::<T>(self, 0, self.len() / size_of::<T>())?;
            let b = match b {
                Rhs::Tensor(b) => Rhs::Tensor(host::<T>(b, 0, b.len() / size_of::<T>())?),
                Rhs::Scalar(s) => Rhs::Scalar(host::<T>(s, 0, 1)?[0]),
            };
            let out = host_mut::<T>(out, 0, desc.numel())?;
            genesis_kernels::nd::binary_nd::<T>(op, desc, a, b, out)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_nd_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        desc: &BinaryNd,
        b: Rhs<&[u8], &[u8]>,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let b = match b {
                Rhs::Tensor(b) => Rhs::Tensor(host::<T>(b, 0, b.len() / size_of::<T>())?),
                Rhs::Scalar(s) => Rhs::Scalar(host::<T>(s, 0, 1)?[0]),
            };
            let a_out = host_mut::<T>(self, at, desc.numel())?;
            genesis_kernels::nd::binary_nd_assign::<T>(op, desc, a_out, b)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn unary(
        &self,
        op: UnaryOp,
        dtype: DType,
        at: usize,
        out: &mut [u8],
        out_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let a = host::<T>(self, at, len)?;
            genesis_kernels::cpu::unary::<T>(op, a, host_mut::<T>(out, out_at, len)?)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn unary_assign(&mut self, op: UnaryOp, dtype: DType, at: usize, len: usize) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            for x in host_mut::<T>(self, at, len)?.iter_mut() {
                *x = <T as genesis_kernels::Element>::unary(op, *x);
            }
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn triangle(
        &self,
        t: &Triangle,
        elem: usize,
        at: usize,
        len: usize,
        out: &mut [u8],
    ) -> Result<()> {
        let src = self
            .get(at..at.saturating_add(len))
            .ok_or(Error::OutOfBounds {
                op: "triangle",
                start: at,
                len,
                storage_len: self.len(),
            })?;
        let dst = out.get_mut(..len).ok_or(Error::OutOfBounds {
            op: "triangle",
            start: 0,
            len,
            storage_len: 0,
        })?;
        genesis_kernels::triangle::triangle(t, elem, src, dst)?;
        Ok(())
    }

    fn classify(
        &self,
        op: FloatClass,
        dtype: DType,
        at: usize,
        len: usize,
        out: &mut [u8],
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let a = host::<T>(self, at, len)?;
            genesis_kernels::classify::classify::<T>(op, a, &mut out[..len])?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn nan_to_num(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        values: [f64; 3],
        out: &mut [u8],
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let values = values.map(<T as genesis_kernels::Element>::from_f64);
            let a = host::<T>(self, at, len)?;
            genesis_kernels::classify::nan_to_num::<T>(a, values, host_mut::<T>(out, 0, len)?)?;
            Ok(())
        }, _ => Err(unsupported("nan_to_num", dtype)))
    }

    fn compare(
        &self,
        op: CompareOp,
        dtype: DType,
        a_at: usize,
        b: &[u8],
        b_at: usize,
        out: &mut [u8],
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let (a, b) = (host::<T>(self, a_at, len)?, host::<T>(b, b_at, len)?);
            genesis_kernels::cpu::compare::<T>(op, a, b, host_mut::<u8>(out, 0, len)?)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn compare_nd(
        &self,
        op: CompareOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&[u8], &[u8]>,
        out: &mut [u8],
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let a = host::<T>(self, 0, self.len() / size_of::<T>())?;
            let b = match b {
                Rhs::Tensor(b) => Rhs::Tensor(host::<T>(b, 0, b.len() / size_of::<T>())?),
                Rhs::Scalar(s) => Rhs::Scalar(host::<T>(s, 0, 1)?[0]),
            };
            let out = host_mut::<u8>(out, 0, desc.numel())?;
            genesis_kernels::nd::compare_nd::<T>(op, desc, a, b, out)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn where_nd(
        &self,
        elem: usize,
        desc: &WhereNd,
        a: Rhs<&[u8], &[u8]>,
        b: Rhs<&[u8], &[u8]>,
        out: &mut [u8],
    ) -> Result<()> {
        fn run<T: WithDType>(
            cond: &[u8],
            desc: &WhereNd,
            a: Rhs<&[u8], &[u8]>,
            b: Rhs<&[u8], &[u8]>,
            out: &mut [u8],
        ) -> Result<()> {
            fn side<'m, T: WithDType>(r: Rhs<&'m [u8], &[u8]>) -> Result<Rhs<&'m [T], T>> {
                Ok(match r {
                    Rhs::Tensor(m) => Rhs::Tensor(host::<T>(m, 0, m.len() / size_of::<T>())?),
                    Rhs::Scalar(s) => Rhs::Scalar(host::<T>(s, 0, 1)?[0]),
                })
            }
            let out = host_mut::<T>(out, 0, desc.numel())?;
            genesis_kernels::nd::where_nd::<T>(desc, cond, side::<T>(a)?, side::<T>(b)?, out)?;
            Ok(())
        }
        // A pure selection of bits: integer carriers of each size (no invalid bit patterns).
        match elem {
            1 => run::<u8>(self, desc, a, b, out),
            2 => run::<i16>(self, desc, a, b, out),
            4 => run::<i32>(self, desc, a, b, out),
            8 => run::<i64>(self, desc, a, b, out),
            _ => Err(element_size("where", elem)),
        }
    }

    fn select(
        &self,
        elem: usize,
        c_at: usize,
        a: &[u8],
        a_at: usize,
        b: &[u8],
        b_at: usize,
        out: &mut [u8],
        len: usize,
    ) -> Result<()> {
        let cond = host::<u8>(self, c_at, len)?;
        let (ab, bb) = (&a[a_at * elem..], &b[b_at * elem..]);
        for i in 0..len {
            let src = if cond[i] != 0 { ab } else { bb };
            out[i * elem..(i + 1) * elem].copy_from_slice(&src[i * elem..(i + 1) * elem]);
        }
        Ok(())
    }

    fn fill(&mut self, _dtype: DType, value: &[u8], len: usize) -> Result<()> {
        for chunk in self[..len * value.len()].chunks_exact_mut(value.len()) {
            chunk.copy_from_slice(value);
        }
        Ok(())
    }

    fn cast(&self, from: DType, at: usize, to: DType, out: &mut [u8], len: usize) -> Result<()> {
        let src = self.get(at.saturating_mul(from.size())..).unwrap_or(&[]);
        genesis_kernels::copy::cast(from, src, to, out, len)?;
        Ok(())
    }

    fn reduce(
        &self,
        op: ReduceOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        values: &mut [u8],
        indices: Option<&mut [u8]>,
    ) -> Result<()> {
        use genesis_kernels::reduce;
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        let out_len = shape.output_len();
        if op.bool_only() {
            if dtype != DType::Bool {
                return Err(unsupported(op.name(), dtype));
            }
            let input = host::<u8>(self, at, n)?;
            reduce::reduce_bool(op, input, shape, host_mut::<u8>(values, 0, out_len)?)?;
            return Ok(());
        }
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let input = host::<T>(self, at, n)?;
            let islice = match indices {
                Some(ix) => Some(host_mut::<i64>(ix, 0, out_len)?),
                None => None,
            };
            if crate::reduce_dtype(op, dtype) == dtype {
                reduce::reduce::<T, T>(op, input, shape, Some(host_mut::<T>(values, 0, out_len)?), islice)?;
            } else {
                reduce::reduce::<T, i64>(op, input, shape, Some(host_mut::<i64>(values, 0, out_len)?), islice)?;
            }
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn clamp(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let lo = lo.map(|b| element_from_bytes::<T>("clamp", b)).transpose()?;
            let hi = hi.map(|b| element_from_bytes::<T>("clamp", b)).transpose()?;
            let a = host::<T>(self, at, len)?;
            genesis_kernels::cpu::clamp::<T>(a, lo, hi, host_mut::<T>(out, 0, len)?)?;
            Ok(())
        }, _ => Err(unsupported("clamp", dtype)))
    }

    fn var(
        &self,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        correction: f64,
        std: bool,
        values: &mut [u8],
    ) -> Result<()> {
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let input = host::<T>(self, at, n)?;
            let out = host_mut::<T>(values, 0, shape.output_len())?;
            genesis_kernels::reduce::var::<T>(input, shape, correction, std, out)?;
            Ok(())
        }, _ => Err(unsupported("var", dtype)))
    }

    fn scan(
        &self,
        op: ScanOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut [u8],
    ) -> Result<()> {
        use genesis_kernels::scan::scan;
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let input = host::<T>(self, at, n)?;
            if dtype.is_float() {
                scan::<T, T>(op, input, shape, host_mut::<T>(out, 0, n)?)?;
            } else {
                scan::<T, i64>(op, input, shape, host_mut::<i64>(out, 0, n)?)?;
            }
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn softmax(
        &self,
        op: SoftmaxOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut [u8],
    ) -> Result<()> {
        let overflow = || Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        };
        let n = shape.input_len().ok_or_else(overflow)?;
        let out_len = op.output_len(shape).ok_or_else(overflow)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let input = host::<T>(self, at, n)?;
            let out = host_mut::<T>(out, 0, out_len)?;
            genesis_kernels::softmax::softmax::<T>(op, input, shape, out)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn rows_by_key(
        &self,
        dtype: DType,
        at: usize,
        shape: &genesis_kernels::gather::RowsByKey,
        keys: (&[u8], usize),
        perm: (&[u8], usize),
        out: &mut [u8],
    ) -> Result<()> {
        let (n, c) = (shape.n, shape.cols);
        let k = host::<i64>(keys.0, keys.1, n)?;
        let p = host::<i64>(perm.0, perm.1, n)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::gather::rows_by_key::<T>(
                shape,
                k,
                p,
                host::<T>(self, at, shape.in_rows * c)?,
                host_mut::<T>(out, 0, shape.out_rows * c)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("rows_by_key", dtype)))
    }

    fn gather_along(
        &self,
        dtype: DType,
        at: usize,
        idx: &[u8],
        idx_at: usize,
        d: &Along,
        out: &mut [u8],
        _in_range: &dyn Fn() -> bool,
    ) -> Result<()> {
        let (ni, _, nt) = d.reach()?;
        let ix = host::<i64>(idx, idx_at, ni)?;
        genesis_kernels::dispatch_dtype!(dtype, [Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64], T => {
            let src = host::<T>(self, at, nt)?;
            genesis_kernels::gather::gather::<T>(src, ix, d, host_mut::<T>(out, 0, d.numel())?)?;
            Ok(())
        }, _ => Err(unsupported("gather", dtype)))
    }

    fn scatter_along(
        &mut self,
        dtype: DType,
        add: bool,
        out_at: usize,
        idx: &[u8],
        idx_at: usize,
        vals: &[u8],
        vals_at: usize,
        d: &Along,
        _in_range: &dyn Fn() -> bool,
    ) -> Result<()> {
        let (ni, nv, nt) = d.reach()?;
        let ix = host::<i64>(idx, idx_at, ni)?;
        if add {
            crate::dtype::dispatch_kernel_dtype!(dtype, T => {
                let v = host::<T>(vals, vals_at, nv)?;
                genesis_kernels::gather::scatter_add::<T>(host_mut::<T>(self, out_at, nt)?, ix, v, d)?;
                Ok(())
            }, _ => Err(unsupported("scatter_add", dtype)))
        } else {
            genesis_kernels::dispatch_dtype!(dtype, [Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64], T => {
                let v = host::<T>(vals, vals_at, nv)?;
                genesis_kernels::gather::scatter::<T>(host_mut::<T>(self, out_at, nt)?, ix, v, d)?;
                Ok(())
            }, _ => Err(unsupported("scatter", dtype)))
        }
    }

    fn sort_rows(
        &self,
        dtype: DType,
        at: usize,
        rows: usize,
        r: usize,
        k: usize,
        descending: bool,
        values: &mut [u8],
        indices: &mut [u8],
    ) -> Result<()> {
        let n = rows.checked_mul(r).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let input = host::<T>(self, at, n)?;
            genesis_kernels::sort::sort::<T>(
                input,
                rows,
                r,
                k,
                descending,
                host_mut::<T>(values, 0, rows * k)?,
                host_mut::<i64>(indices, 0, rows * k)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("sort", dtype)))
    }

    fn matmul(
        &self,
        dtype: DType,
        shape: MatmulShape,
        layout: MatmulLayout,
        _precision: MatmulPrecision,
        a_at: usize,
        b: &[u8],
        b_at: usize,
        _bias: Option<(&[u8], usize)>,
        out: &mut [u8],
        out_at: usize,
    ) -> Result<bool> {
        use genesis_kernels::matmul::matmul_host;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, U8, I8, I16, I32, I64], T => {
            let a = host::<T>(self, a_at, self.len() / size_of::<T>() - a_at)?;
            let b = host::<T>(b, b_at, b.len() / size_of::<T>() - b_at)?;
            let c = host_mut::<T>(out, out_at, out.len() / size_of::<T>() - out_at)?;
            matmul_host::<T>(shape, layout, a, b, c)?;
            Ok(false)
        }, _ => Err(unsupported("matmul", dtype)))
    }

    fn random(
        &mut self,
        dtype: DType,
        sampler: Sampler,
        seed: u64,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => {
            let out = host_mut::<T>(self, 0, len)?;
            genesis_kernels::random::sample::<T>(sampler, seed, offset, out)?;
            Ok(())
        }, _ => Err(unsupported("random", dtype)))
    }

    fn masked_fill(
        &mut self,
        at: usize,
        mask: &[u8],
        m_at: usize,
        len: usize,
        value: &[u8],
    ) -> Result<()> {
        let es = value.len();
        genesis_kernels::mask::masked_fill(
            &mut self[at * es..(at + len) * es],
            &mask[m_at..m_at + len],
            value,
        )?;
        Ok(())
    }

    fn masked_select(
        &self,
        elem: usize,
        at: usize,
        mask: &[u8],
        m_at: usize,
        len: usize,
    ) -> Result<(Inner, usize)> {
        let bytes = genesis_kernels::mask::masked_select(
            &self[at * elem..(at + len) * elem],
            &mask[m_at..m_at + len],
            elem,
        )?;
        let count = bytes.len() / elem;
        Ok((Inner::Cpu(CpuStorage::from_bytes(&bytes)?), count))
    }

    fn nonzero(&self, at: usize, len: usize) -> Result<(Inner, usize)> {
        let pos: Vec<i64> = self[at..at + len]
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != 0)
            .map(|(i, _)| i as i64)
            .collect();
        Ok((Inner::Cpu(CpuStorage::from_slice(&pos)?), pos.len()))
    }

    unsafe fn index_gather(
        &self,
        elem: usize,
        len: usize,
        desc: &IndexDesc,
        idx: &[u8],
        rows: Option<&Rows16>,
        out: &mut [u8],
        n: usize,
    ) -> Result<()> {
        use genesis_kernels::index::cpu;
        let ix = host::<i64>(idx, 0, desc.index_len())?;
        if let Some(r) = rows {
            let src = host::<u8>(self, 0, len.saturating_mul(elem))?;
            cpu::gather_rows16(src, host_mut::<u8>(out, 0, n.saturating_mul(elem))?, ix, r)?;
            return Ok(());
        }
        // Elements moved as integers of their size, as the kernels move them.
        fn run<T: WithDType>(
            s: &[u8],
            len: usize,
            d: &IndexDesc,
            ix: &[i64],
            o: &mut [u8],
            n: usize,
        ) -> Result<()> {
            genesis_kernels::index::cpu::gather(
                host::<T>(s, 0, len)?,
                host_mut::<T>(o, 0, n)?,
                d,
                ix,
            )?;
            Ok(())
        }
        match elem {
            1 => run::<u8>(self, len, desc, ix, out, n),
            2 => run::<i16>(self, len, desc, ix, out, n),
            4 => run::<i32>(self, len, desc, ix, out, n),
            8 => run::<i64>(self, len, desc, ix, out, n),
            _ => Err(element_size("index gather", elem)),
        }
    }

    unsafe fn index_scatter(
        &mut self,
        elem: usize,
        len: usize,
        values: &[u8],
        desc: &IndexDesc,
        idx: &[u8],
        dead: &[u8],
        rows: Option<&Rows16>,
        n: usize,
    ) -> Result<()> {
        use genesis_kernels::index::cpu;
        let ix = host::<i64>(idx, 0, desc.index_len())?;
        let dead = host::<u8>(dead, 0, desc.nb.max(0) as usize)?;
        if let Some(r) = rows {
            let vals = host::<u8>(values, 0, n.saturating_mul(elem))?;
            let dst = host_mut::<u8>(self, 0, len.saturating_mul(elem))?;
            cpu::scatter_rows16(dst, vals, ix, dead, r)?;
            return Ok(());
        }
        // Elements moved as integers of their size, as the kernels move them.
        #[allow(clippy::too_many_arguments)]
        fn run<T: WithDType>(
            t: &mut [u8],
            len: usize,
            v: &[u8],
            n: usize,
            d: &IndexDesc,
            ix: &[i64],
            dead: &[u8],
        ) -> Result<()> {
            let vals = host::<T>(v, 0, n)?;
            genesis_kernels::index::cpu::scatter(host_mut::<T>(t, 0, len)?, vals, d, ix, dead)?;
            Ok(())
        }
        match elem {
            1 => run::<u8>(self, len, values, n, desc, ix, dead),
            2 => run::<i16>(self, len, values, n, desc, ix, dead),
            4 => run::<i32>(self, len, values, n, desc, ix, dead),
            8 => run::<i64>(self, len, values, n, desc, ix, dead),
            _ => Err(element_size("index scatter", elem)),
        }
    }

    unsafe fn index_scatter_add(
        &mut self,
        dtype: DType,
        len: usize,
        values: &[u8],
        desc: &IndexDesc,
        idx: &[u8],
        groups: [&[u8]; 4],
        members: usize,
        n: usize,
    ) -> Result<()> {
        use genesis_kernels::index::cpu;
        let nb = desc.nb.max(0) as usize;
        let ix = host::<i64>(idx, 0, desc.index_len())?;
        let g = cpu::HostGroups {
            dead: host::<u8>(groups[0], 0, nb)?,
            start: host::<i64>(groups[1], 0, nb)?,
            len: host::<i64>(groups[2], 0, nb)?,
            members: host::<i64>(groups[3], 0, members)?,
        };
        if dtype == DType::Bool {
            let v = host::<u8>(values, 0, n)?;
            cpu::scatter_add_bool(host_mut::<u8>(self, 0, len)?, v, desc, ix, g)?;
            return Ok(());
        }
        genesis_kernels::dispatch_dtype!(dtype, [U8, I8, I16, I32, I64, F16, BF16, F32, F64], T => {
            let v = host::<T>(values, 0, n)?;
            cpu::scatter_add::<T>(host_mut::<T>(self, 0, len)?, v, desc, ix, g)?;
            Ok(())
        }, _ => Err(unsupported("index scatter_add", dtype)))
    }

    fn index_normalise(
        &mut self,
        at: usize,
        nb: usize,
        src: &[u8],
        i32: bool,
        layout: &Strided,
        size: usize,
        bad: &mut [u8],
        bad_at: usize,
    ) -> Result<()> {
        let word = &mut host_mut::<i64>(bad, bad_at, 1)?[0];
        let out = host_mut::<i64>(self, at, nb)?;
        genesis_kernels::index::cpu::normalise(i32, src, layout, size, out, word)?;
        Ok(())
    }

    unsafe fn index_dead_positions(
        &self,
        nb: usize,
        keys: &Keys,
        winner: &mut [u8],
        nwinner: usize,
        bad: &[u8],
        nbad: usize,
        dead: &mut [u8],
    ) -> Result<()> {
        let n_adv = keys.n_adv.max(0) as usize;
        let idx = host::<i64>(self, 0, n_adv.saturating_mul(nb))?;
        let bad = host::<i64>(bad, 0, nbad)?;
        let winner = host_mut::<i64>(winner, 0, nwinner)?;
        let dead = host_mut::<u8>(dead, 0, nb)?;
        genesis_kernels::index::cpu::dead_positions(idx, keys, winner, bad, dead)?;
        Ok(())
    }

    fn index_unravel(&self, n: usize, shape: &Strided, rows: bool, out: &mut [u8]) -> Result<()> {
        let rank = shape.rank.max(0) as usize;
        let lin = host::<i64>(self, 0, n)?;
        let out = host_mut::<i64>(out, 0, rank.saturating_mul(n))?;
        genesis_kernels::index::cpu::unravel(lin, shape, rows, out)?;
        Ok(())
    }

    fn index_gather_rows_checked(
        &self,
        rows: &Rows16,
        values: &[u8],
        i32: bool,
        offset: usize,
        stride: usize,
        size: usize,
        wrap: bool,
        out: &mut [u8],
    ) -> Result<bool> {
        let es = if i32 { 4 } else { 8 };
        let raw = genesis_kernels::index::cpu::HostRawIndex {
            values: values.get(offset.saturating_mul(es)..).unwrap_or(&[]),
            i32,
            stride: stride as i64,
            size,
            wrap,
        };
        Ok(genesis_kernels::index::cpu::gather_rows16_checked(
            self, out, &raw, rows,
        )?)
    }
}
