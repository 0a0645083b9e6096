//! `matmul`, `bmm` and `matmul_out`.

use std::sync::Arc;

use genesis_storage::{MatmulLayout, MatmulShape, MatrixLayout, Storage};

use crate::ops::check_out;
use crate::tensor::broadcast_shape;
use crate::{DType, Error, Result, Tensor};

/// An operand's storage, first element and layout.
type Operand = (Arc<Storage>, usize, MatrixLayout);

/// How a `matmul` maps onto the batched kernel.
struct Plan {
    out_shape: Vec<usize>,
    batch_shape: Vec<usize>,
    m: usize,
    n: usize,
    k: usize,
}

fn mismatch(a: &Tensor, b: &Tensor) -> Error {
    Error::ShapeMismatch {
        op: "matmul",
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    }
}

fn plan(a: &Tensor, b: &Tensor) -> Result<Plan> {
    let (sa, sb) = (a.shape(), b.shape());
    if sa.is_empty() || sb.is_empty() {
        return Err(Error::InvalidArgument {
            op: "matmul",
            reason: format!("both operands need at least one dimension, got {sa:?} and {sb:?}"),
        });
    }
    // A 1-D left operand is a row [1, k], a 1-D right operand a column [k, 1]; the added
    // dimension is dropped from the result (NumPy/PyTorch rules).
    let (m, k) = if sa.len() == 1 {
        (1, sa[0])
    } else {
        (sa[sa.len() - 2], sa[sa.len() - 1])
    };
    let (kb, n) = if sb.len() == 1 {
        (sb[0], 1)
    } else {
        (sb[sb.len() - 2], sb[sb.len() - 1])
    };
    if k != kb {
        return Err(Error::InnerDimMismatch {
            op: "matmul",
            lhs: sa.to_vec(),
            rhs: sb.to_vec(),
            lhs_inner: k,
            rhs_inner: kb,
        });
    }
    let ba = &sa[..sa.len().saturating_sub(2)];
    let bb = &sb[..sb.len().saturating_sub(2)];
    let batch_shape = broadcast_shape("matmul", ba, bb).map_err(|_| mismatch(a, b))?;
    let mut out_shape = batch_shape.clone();
    if sa.len() > 1 {
        out_shape.push(m);
    }
    if sb.len() > 1 {
        out_shape.push(n);
    }
    // Element counts through the one checked count (a broadcast batch may not be
    // representable even when each operand is); an empty result needs no batch count (its
    // sizes may be huge, `[0, 2^32, 2^32]`).
    if crate::tensor::numel_of("matmul", &out_shape)? > 0 {
        crate::tensor::numel_of("matmul", &batch_shape)?;
    }
    Ok(Plan {
        out_shape,
        batch_shape,
        m,
        n,
        k,
    })
}

/// The operand as `(storage, first element, batch stride, layout)`: one matrix for every
/// batch (stride 0) when its batch dimensions are all 1, its own contiguous batches when they
/// are the full batch shape, otherwise a broadcast copy. A view is read in place
/// where its matrices are row- or column-major with positive leading dimensions and its
/// batches one stride apart ([`in_place`]), on every device (the CUDA launcher copies an
/// operand whose lines the tensor-core kernels cannot read in place into its workspace).
fn operand(
    t: &Tensor,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Result<(Arc<Storage>, usize, usize, MatrixLayout)> {
    if let Some((stride, layout)) = in_place(t, batch, rows, cols) {
        let s = Arc::clone(t.view.storage());
        return Ok((s, t.first_element(), stride, layout));
    }
    let row_major = MatrixLayout::row_major(cols);
    // The batch stride: `rows * cols` fits when the operand has elements (it is a factor of
    // their count); without elements no matrix is read (its sizes may be huge, `[0, 2^32,
    // 2^32]`), and the stride is 0.
    let mat = if t.numel() == 0 { 0 } else { rows * cols };
    if t.shape()[..t.dim().saturating_sub(2)]
        .iter()
        .all(|&d| d == 1)
    {
        let m = t.reshape([rows as isize, cols as isize])?;
        let (s, start) = m.dense_operand(&[rows, cols])?;
        return Ok((s, start, 0, row_major));
    }
    let mut full = batch.to_vec();
    full.extend([rows, cols]);
    let (s, start) = t.dense_operand(&full)?;
    Ok((s, start, mat, row_major))
}

/// `(batch stride, layout)` of a non-empty operand of 2 or more dimensions read where it lies:
/// its last two dimensions (`[rows, cols]`) row-major (column stride 1, row stride at least
/// `cols`) or column-major (row stride 1, column stride at least `rows`), a dimension of one
/// element taking either stride; its batch dimensions all 1 (stride 0) or the full `batch`
/// with the batches of more than one element one stride `s` apart (`bi * s` from the first
/// element for batch `bi`). `None` otherwise (a copy is read).
fn in_place(
    t: &Tensor,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Option<(usize, MatrixLayout)> {
    let (shape, strides) = (t.shape(), t.strides());
    let d = shape.len();
    if d < 2 || t.numel() == 0 || strides.iter().any(|&s| s < 0) {
        return None;
    }
    let (sr, sc) = (strides[d - 2] as usize, strides[d - 1] as usize);
    let layout = if (cols == 1 || sc == 1) && (rows == 1 || sr >= cols) {
        MatrixLayout {
            transposed: false,
            ld: if rows == 1 { cols } else { sr },
        }
    } else if (rows == 1 || sr == 1) && (cols == 1 || sc >= rows) {
        MatrixLayout {
            transposed: true,
            ld: if cols == 1 { rows } else { sc },
        }
    } else {
        return None;
    };
    let (bshape, bstrides) = (&shape[..d - 2], &strides[..d - 2]);
    if bshape.iter().all(|&n| n == 1) {
        return Some((0, layout));
    }
    if bshape != batch {
        return None;
    }
    // Batch `bi` (row-major over `batch`) lies at `sum idx[i] * stride[i]`, which is `bi * s`
    // when each dimension of more than one element has `s` times the batches after it.
    let mut after = 1usize;
    let mut unit: Option<usize> = None;
    for (&n, &st) in bshape.iter().zip(bstrides).rev() {
        if n > 1 {
            let st = st as usize;
            match unit {
                None if st.is_multiple_of(after) => unit = Some(st / after),
                Some(u) if u.checked_mul(after) == Some(st) => {}
                _ => return None,
            }
        }
        after = after.checked_mul(n)?;
    }
    Some((unit.unwrap_or(0), layout))
}

impl Tensor {
    fn matmul_parts(&self, other: &Tensor) -> Result<(Plan, MatmulShape, [Operand; 2])> {
        self.check_operands("matmul", other)?;
        let p = plan(self, other)?;
        // No products when the result is empty (the batch count may not be representable).
        let batch = if crate::tensor::numel_of("matmul", &p.out_shape)? == 0 {
            0
        } else {
            crate::tensor::numel_of("matmul", &p.batch_shape)?
        };
        // A batch of left operands against one right matrix (`x @ W` with `x` `[..., m, k]`)
        // is one product of `batch * m` rows when the left rows lie one line apart: the
        // result `[batch * m, n]` is the batched one's memory, and the kernel's tiles then
        // run over all rows at once.
        let folded = if batch > 1
            && self.dim() > 2
            && other.shape()[..other.dim().saturating_sub(2)]
                .iter()
                .all(|&d| d == 1)
        {
            self.layout()
                .view(&[batch * p.m, p.k])
                .ok()
                .map(|l| self.with_layout(l))
                .transpose()?
        } else {
            None
        };
        let (lhs, batch, m, a_batch) = match &folded {
            Some(f) => (f, 1, batch * p.m, &[][..]),
            None => (self, batch, p.m, &p.batch_shape[..]),
        };
        let (a, a_start, sa, la) = operand(lhs, a_batch, m, p.k)?;
        let (b, b_start, sb, lb) = operand(other, a_batch, p.k, p.n)?;
        let shape = MatmulShape {
            batch,
            m,
            n: p.n,
            k: p.k,
            a_batch_stride: sa,
            b_batch_stride: sb,
        };
        Ok((p, shape, [(a, a_start, la), (b, b_start, lb)]))
    }

    /// Matrix product with NumPy/PyTorch rules: 2-D @ 2-D is the matrix product; a 1-D left
    /// operand is a row and a 1-D right operand a column (that dimension is dropped from the
    /// result, so 1-D @ 1-D is a dot product of shape `[]`); leading dimensions are batch
    /// dimensions and broadcast. f32, f16 and bf16 (accumulated in f32) and f64 (accumulated
    /// in f64) on the CPU and CUDA; uint8, int8, int16, int32 and int64 (exact, wrapping, as PyTorch's CPU) on
    /// the CPU only (CUDA: [`genesis_storage::Error::UnsupportedDType`], as PyTorch's). On the
    /// CPU, transposed and sliced operands are read in place by their strides.
    /// f32 products on CUDA run at the precision of
    /// [`backends::set_float32_matmul_precision`](crate::backends::set_float32_matmul_precision)
    /// (full f32 unless TF32 is allowed).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0], &[3, 2], Device::Cpu)?;
    /// assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, [58.0, 64.0, 139.0, 154.0]);
    /// let err = Tensor::zeros(&[1000, 1000], a.dtype(), Device::Cpu)?
    ///     .matmul(&Tensor::zeros(&[500, 500], a.dtype(), Device::Cpu)?)
    ///     .unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "matmul: mat1 and mat2 shapes cannot be multiplied (1000x1000 and 500x500)"
    /// );
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        use crate::autograd::Saved;
        if let Some((a, b)) = crate::autograd::autocast_operands(self, other)? {
            return a.matmul(&b);
        }
        crate::autograd::op(
            "matmul",
            &[self, other],
            || self.matmul_raw(other),
            |_| {
                let (a, b) = (Saved::new("matmul", self), Saved::new("matmul", other));
                Box::new(move |g, needs| {
                    let (ga, gb) = crate::autograd::matmul_grad(&a.get()?, &b.get()?, g, needs)?;
                    Ok(vec![ga, gb])
                })
            },
        )
    }

    /// `self @ weightᵀ + bias` (PyTorch's `F.linear`): `weight` `[out, in]`, `bias` `[out]`
    /// (optional), `self` `[..., in]`. One recorded op: the bias is added into the product in
    /// place (no second output-sized tensor), and the backward keeps the input and the weight.
    /// Under [`autocast`](crate::autograd::autocast) float32 operands are cast to the
    /// low-precision dtype, the bias to the product's dtype (PyTorch's `linear` policy).
    #[track_caller]
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        use crate::autograd::{Saved, cast_grad, sum_to};
        if weight.dim() != 2 {
            return Err(Error::InvalidArgument {
                op: "linear",
                reason: format!(
                    "weight must be 2-D [out, in], got shape {:?}",
                    weight.shape()
                ),
            });
        }
        if let Some((x, w)) = crate::autograd::autocast_operands(self, weight)? {
            let b = match bias {
                Some(b) if b.dtype() != w.dtype() => Some(b.to_dtype(w.dtype())?),
                b => b.cloned(),
            };
            return crate::autograd::without_autocast(|| x.linear(&w, b.as_ref()));
        }
        if let Some(b) = bias
            && b.shape() != [weight.shape()[0]]
        {
            return Err(Error::ShapeMismatch {
                op: "linear",
                lhs: b.shape().to_vec(),
                rhs: vec![weight.shape()[0]],
            });
        }
        let mut inputs = vec![self, weight];
        inputs.extend(bias);
        crate::autograd::op(
            "linear",
            &inputs,
            || {
                let wt = weight.t()?;
                match bias {
                    // The bias added by the product (in its kernel where it can; the narrow
                    // integers, which the add kernels lack, through the facade's add).
                    Some(b)
                        if b.dtype() == self.dtype()
                            && b.dtype() == weight.dtype()
                            && crate::promote::has_kernels(b.dtype())
                            && b.device() == self.device()
                            && (b.numel() <= 1 || b.strides()[0] == 1) =>
                    {
                        self.matmul_bias_raw(&wt, Some(b))
                    }
                    Some(b) => {
                        let y = self.matmul_raw(&wt)?;
                        if b.dtype() == y.dtype() {
                            y.add_(b)?;
                            Ok(y)
                        } else {
                            y.add(b)
                        }
                    }
                    None => self.matmul_raw(&wt),
                }
            },
            |_| {
                let (x, w) = (Saved::new("linear", self), Saved::new("linear", weight));
                let b = bias.map(|b| (b.shape().to_vec(), b.dtype()));
                Box::new(move |g, needs| {
                    let (x, w) = (x.get()?, w.get()?);
                    let (gx, gw) = linear_grads(&x, &w, g, needs)?;
                    let mut out = vec![gx, gw];
                    if let Some((shape, dtype)) = &b {
                        out.push(if needs[2] {
                            // Formed by the backward that wrote `g` where it could.
                            let sums = match crate::autograd::noted_column_sums(g, shape) {
                                Some(s) => s,
                                None => sum_to(g, shape)?,
                            };
                            Some(cast_grad(sums, *dtype)?)
                        } else {
                            None
                        });
                    }
                    Ok(out)
                })
            },
        )
    }

    /// `gelu(self @ weightᵀ + bias)` (PyTorch's `F.gelu(F.linear(x, weight, bias))`, the
    /// exact form): [`Tensor::linear`] then [`Tensor::gelu`], the values of those two ops, as
    /// one recorded op. Its backward computes the activation's gradient and, with a bias that
    /// needs one, the bias's gradient (the column sums of the former) in one pass over the
    /// output (`genesis_kernels::grad::gpu_act_grad_cols`), where the two ops would read the
    /// activation's gradient again to sum it. Autocast as [`Tensor::linear`].
    #[track_caller]
    pub fn linear_gelu(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        self.linear_act(weight, bias, genesis_storage::ActGrad::Gelu)
    }

    /// [`Tensor::linear_gelu`] with the tanh approximation (`F.gelu(.., approximate="tanh")`,
    /// [`Tensor::gelu_tanh`]): GPT-2's MLP.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::ones(&[4, 3], DType::F32, Device::Cpu)?;
    /// let w = Tensor::ones(&[2, 3], DType::F32, Device::Cpu)?;
    /// let b = Tensor::zeros(&[2], DType::F32, Device::Cpu)?;
    /// let y = x.linear_gelu_tanh(&w, Some(&b))?;
    /// let want = x.linear(&w, Some(&b))?.gelu_tanh()?;
    /// assert_eq!(y.to_vec::<f32>()?, want.to_vec::<f32>()?);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn linear_gelu_tanh(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        self.linear_act(weight, bias, genesis_storage::ActGrad::GeluTanh)
    }

    /// `act(self.linear(weight, bias))` as one recorded op (see [`Tensor::linear_gelu`]).
    fn linear_act(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        act: genesis_storage::ActGrad,
    ) -> Result<Tensor> {
        use crate::autograd::{Saved, cast_grad};
        use genesis_storage::ActGrad;
        let apply = |t: &Tensor| match act {
            ActGrad::Gelu => t.gelu(),
            ActGrad::GeluTanh => t.gelu_tanh(),
            ActGrad::Silu => t.silu(),
        };
        if let Some((x, w)) = crate::autograd::autocast_operands(self, weight)? {
            let b = match bias {
                Some(b) if b.dtype() != w.dtype() => Some(b.to_dtype(w.dtype())?),
                b => b.cloned(),
            };
            return crate::autograd::without_autocast(|| x.linear_act(&w, b.as_ref(), act));
        }
        let mut inputs = vec![self, weight];
        inputs.extend(bias);
        // The fused backward reads the product's output and its gradient as rows of `out`
        // features, in one floating dtype that the bias shares.
        let fusable = bias.is_some_and(|b| b.dtype() == self.dtype())
            && self.dtype().is_float()
            && weight.dtype() == self.dtype();
        if !crate::autograd::wants(&inputs) || !fusable {
            return apply(&self.linear(weight, bias)?);
        }
        let kept = std::cell::RefCell::new(None);
        crate::autograd::op(
            "linear_act",
            &inputs,
            || {
                let pre = self.linear(weight, bias)?;
                let y = apply(&pre)?;
                *kept.borrow_mut() = Some(pre);
                Ok(y)
            },
            |_| {
                let pre = kept.borrow_mut().take().expect("set by the forward");
                let pre = Saved::new("linear_act", &pre);
                let (x, w) = (
                    Saved::new("linear_act", self),
                    Saved::new("linear_act", weight),
                );
                let b = bias.map(|b| b.dtype());
                Box::new(move |g, needs| {
                    let (x, w, pre) = (x.get()?, w.get()?, pre.get()?);
                    let g = g.contiguous()?;
                    let out_f = w.shape()[0];
                    let want_b = b.is_some() && needs[2];
                    // dpre = g act'(pre), and the bias's gradient from the same pass.
                    use genesis_storage::Storage;
                    let (gs, ga) = (g.view.storage(), g.first_element());
                    let (ps, pa) = (pre.view.storage(), pre.first_element());
                    let n = g.numel();
                    let (dpre, db) = if want_b {
                        let (d, s) = Storage::act_grad_cols(act, gs, ga, ps, pa, n, out_f)?;
                        let db = Tensor::from_storage(s, &[out_f])?;
                        (Tensor::from_storage(d, pre.shape())?, Some(db))
                    } else {
                        let d = Storage::act_grad(act, gs, ga, ps, pa, n)?;
                        (Tensor::from_storage(d, pre.shape())?, None)
                    };
                    let (gx, gw) = linear_grads(&x, &w, &dpre, needs)?;
                    let mut out = vec![gx, gw];
                    if let Some(dtype) = b {
                        out.push(db.map(|d| cast_grad(d, dtype)).transpose()?);
                    }
                    Ok(out)
                })
            },
        )
    }

    /// [`Tensor::matmul`] without recording.
    fn matmul_raw(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_bias_raw(other, None)
    }

    /// [`Tensor::matmul_raw`] plus `bias` (`[n]` of the operands' dtype and device, its
    /// elements one apart) added to every row, by the product's kernel where it can.
    fn matmul_bias_raw(&self, other: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (p, shape, [(a, a0, la), (b, b0, lb)]) = self.matmul_parts(other)?;
        let precision = crate::backends::matmul_precision();
        let layout = MatmulLayout { a: la, b: lb };
        let c = match bias {
            Some(bias) => a.matmul_bias_layout_with(
                a0,
                &b,
                b0,
                shape,
                layout,
                precision,
                bias.view.storage(),
                bias.first_element(),
            )?,
            None => a.matmul_layout_with(a0, &b, b0, shape, layout, precision)?,
        };
        Tensor::from_storage(c, &p.out_shape)
    }

    /// Batched matrix product of two 3-D tensors `[b, m, k] @ [b, k, n] -> [b, m, n]` (no
    /// broadcasting: PyTorch's `bmm`).
    #[track_caller]
    pub fn bmm(&self, other: &Tensor) -> Result<Tensor> {
        if self.dim() != 3 || other.dim() != 3 || self.shape()[0] != other.shape()[0] {
            return Err(Error::ShapeMismatch {
                op: "bmm",
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        self.matmul(other)
    }

    /// Matrix product of two 2-D tensors (PyTorch's `mm`: no broadcasting, no 1-D operands;
    /// [`Tensor::matmul`] otherwise).
    #[track_caller]
    pub fn mm(&self, other: &Tensor) -> Result<Tensor> {
        self.ranked_product("mm", other, 2, 2)
    }

    /// Matrix-vector product `[n, m] @ [m] -> [n]` (PyTorch's `mv`).
    #[track_caller]
    pub fn mv(&self, vec: &Tensor) -> Result<Tensor> {
        self.ranked_product("mv", vec, 2, 1)
    }

    /// Dot product of two 1-D tensors of the same length and dtype, a 0-d tensor (PyTorch's
    /// `dot`, which takes no mixed dtypes either).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
    /// assert_eq!(a.dot(&a)?.item::<f32>()?, 14.0);
    /// let m = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(m.trace()?.item::<f32>()?, 5.0);
    /// assert_eq!(m.mv(&a.narrow(0, 0, 2)?)?.to_vec::<f32>()?, [5.0, 11.0]);
    /// assert!(m.mm(&a).is_err()); // mm takes two matrices
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        if self.dtype() != other.dtype() {
            return Err(Error::InvalidArgument {
                op: "dot",
                reason: format!(
                    "expected both vectors to have the same dtype, but found {} and {}",
                    self.dtype(),
                    other.dtype()
                ),
            });
        }
        self.ranked_product("dot", other, 1, 1)
    }

    /// The sum of the main diagonal of a 2-D tensor (PyTorch's `trace`), in the dtype
    /// [`Tensor::sum`] gives (int64 for integers); bools are refused, as PyTorch refuses them.
    #[track_caller]
    pub fn trace(&self) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            return Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op: "trace",
                dtype: self.dtype(),
            }));
        }
        if self.dim() != 2 {
            return Err(Error::InvalidArgument {
                op: "trace",
                reason: format!(
                    "expected a matrix, got a tensor of shape {:?}",
                    self.shape()
                ),
            });
        }
        self.diagonal(0, 0, 1)?.sum()
    }

    /// `beta * self + alpha * (mat1 @ mat2)` (PyTorch's `addmm`): `mat1` and `mat2` 2-D,
    /// `self` of their dtype and broadcasting to the product's shape. A zero `beta` or `alpha`
    /// drops its term unread (NaNs and infinities there do not reach the result). For integer
    /// tensors `beta` and `alpha` are truncated to integers and the result wraps, as PyTorch's
    /// CPU computes it.
    #[track_caller]
    pub fn addmm(&self, mat1: &Tensor, mat2: &Tensor, beta: f64, alpha: f64) -> Result<Tensor> {
        self.add_scaled_product("addmm", &mat1.mm(mat2)?, beta, alpha, true)
    }

    /// `beta * self + alpha * (batch1 @ batch2)` for 3-D `batch1` and `batch2` (PyTorch's
    /// `baddbmm`), as [`Tensor::addmm`] but for a zero `alpha`, which multiplies the product as
    /// any other (its NaNs and infinities give NaN), as PyTorch's `baddbmm` does.
    #[track_caller]
    pub fn baddbmm(
        &self,
        batch1: &Tensor,
        batch2: &Tensor,
        beta: f64,
        alpha: f64,
    ) -> Result<Tensor> {
        self.add_scaled_product("baddbmm", &batch1.bmm(batch2)?, beta, alpha, false)
    }

    /// `beta * self + alpha * prod` with `addmm`'s rules (`drop_zero_alpha`: a zero `alpha`
    /// drops the product unread).
    fn add_scaled_product(
        &self,
        op: &'static str,
        prod: &Tensor,
        beta: f64,
        alpha: f64,
        drop_zero_alpha: bool,
    ) -> Result<Tensor> {
        if self.dtype() != prod.dtype() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "self and the matrices must have the same dtype, but got {} and {}",
                    self.dtype(),
                    prod.dtype()
                ),
            });
        }
        if broadcast_shape(op, self.shape(), prod.shape())
            .ok()
            .as_deref()
            != Some(prod.shape())
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: prod.shape().to_vec(),
            });
        }
        let float = self.dtype().is_float();
        let scaled = |t: &Tensor, s: f64| -> Result<Tensor> {
            if float {
                if s == 1.0 { Ok(t.clone()) } else { t.mul(s) }
            } else {
                t.mul(s.trunc() as i64)
            }
        };
        // A zero scale drops its term unread (as BLAS does: 0 times an infinity is no NaN).
        let p = if alpha == 0.0 && drop_zero_alpha {
            Tensor::zeros(prod.shape(), prod.dtype(), prod.device())?
        } else {
            scaled(prod, alpha)?
        };
        if beta == 0.0 {
            return Ok(p);
        }
        p.add(&scaled(self, beta)?)
    }

    /// [`Tensor::matmul`] of operands of exactly ranks `ra` and `rb` (the ranked products).
    #[track_caller]
    fn ranked_product(
        &self,
        op: &'static str,
        other: &Tensor,
        ra: usize,
        rb: usize,
    ) -> Result<Tensor> {
        let inner_ok = self.shape().last() == other.shape().first();
        if self.dim() != ra || other.dim() != rb || !inner_ok {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        self.matmul(other)
    }

    /// [`Tensor::matmul`] written into `out`, which must have the result's shape, dtype and
    /// device (any tensor: a view's write is seen by every tensor sharing its storage).
    /// Allocates no tensor when the operands are contiguous (on the CPU, also views whose
    /// matrices are row- or column-major, which it reads in place) and `out` is contiguous and
    /// shares no storage with them (but, on CUDA, the split-k workspace of a product with too
    /// few output tiles to fill the GPU and a long `k`, from the device's pool); otherwise the
    /// product is computed first and copied in.
    #[track_caller]
    pub fn matmul_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        crate::autograd::refuse_out("matmul_out", &[self, other, out])?;
        let (p, shape, [(a, a0, la), (b, b0, lb)]) = self.matmul_parts(other)?;
        if !out.is_contiguous() || out.shares_storage(self) || out.shares_storage(other) {
            crate::ops::check_out_shape("matmul", self, &p.out_shape, out)?;
            return out.copy_(&self.matmul(other)?);
        }
        let out_start = check_out("matmul", self, &p.out_shape, out)?;
        let precision = crate::backends::matmul_precision();
        out.write_storage("matmul", &[&a, &b], |dst| {
            let layout = MatmulLayout { a: la, b: lb };
            Ok(a.matmul_layout_into_with(a0, &b, b0, shape, layout, dst, out_start, precision)?)
        })
    }
}

/// The input's and the weight's gradients of `x.linear(w, ..)` for the output's gradient `g`
/// (each where `needs` says): `dx = g W`, `dW = gᵀ x` over every leading position (`[out, in]`
/// contiguous), in the operands' dtypes.
fn linear_grads(
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
    needs: &[bool],
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    use crate::autograd::cast_grad;
    let gx = if needs[0] {
        Some(cast_grad(g.matmul(w)?, x.dtype())?)
    } else {
        None
    };
    let gw = if needs[1] {
        let (o, i) = (w.shape()[0] as isize, w.shape()[1] as isize);
        let g2 = g.reshape([-1, o])?;
        let x2 = x.reshape([-1, i])?;
        Some(cast_grad(g2.t()?.matmul(&x2)?, w.dtype())?)
    } else {
        None
    };
    Ok((gx, gw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use genesis_storage::{DType, Device};

    #[test]
    fn views_read_in_place_where_their_matrices_are_row_or_column_major() {
        let t = Tensor::zeros([4, 9, 11], DType::F32, Device::Cpu).unwrap();
        let row = |ld| MatrixLayout {
            transposed: false,
            ld,
        };
        let col = |ld| MatrixLayout {
            transposed: true,
            ld,
        };
        let mat = t.narrow(0, 0, 1).unwrap().reshape([9, 11]).unwrap();
        assert_eq!(in_place(&mat, &[], 9, 11), Some((0, row(11))));
        assert_eq!(in_place(&mat.t().unwrap(), &[], 11, 9), Some((0, col(11))));
        let cols = mat.narrow(1, 2, 5).unwrap();
        assert_eq!(in_place(&cols, &[], 9, 5), Some((0, row(11))));
        // Batches one stride apart (also permuted), or broadcast (stride 0).
        assert_eq!(in_place(&t, &[4], 9, 11), Some((99, row(11))));
        let tt = t.transpose(1, 2).unwrap();
        assert_eq!(in_place(&tt, &[4], 11, 9), Some((99, col(11))));
        let p = t.permute([1, 0, 2]).unwrap();
        assert_eq!(in_place(&p, &[9], 4, 11), Some((11, row(99))));
        let e = mat.unsqueeze(0).unwrap().expand([3, 9, 11]).unwrap();
        assert_eq!(in_place(&e, &[3], 9, 11), Some((0, row(11))));
        let b = t.reshape([2, 2, 9, 11]).unwrap();
        assert_eq!(in_place(&b, &[2, 2], 9, 11), Some((99, row(11))));
        // A single row or column takes either stride (a column of unit row stride is
        // row-major with `ld` 1).
        let r = mat.narrow(0, 3, 1).unwrap();
        assert_eq!(in_place(&r, &[], 1, 11), Some((0, row(11))));
        let c = mat.t().unwrap().narrow(1, 4, 1).unwrap();
        assert_eq!(in_place(&c, &[], 11, 1), Some((0, row(1))));
        // Copied: no unit stride in the matrix, batches not one stride apart, a batch that
        // broadcasts against a larger one.
        let s = t.permute([2, 0, 1]).unwrap().narrow(0, 0, 9).unwrap();
        assert_eq!(in_place(&s, &[9], 4, 9), None);
        let nb = b.narrow(1, 0, 1).unwrap().expand([2, 2, 9, 11]).unwrap();
        assert_eq!(in_place(&nb, &[2, 2], 9, 11), None);
        assert_eq!(in_place(&t, &[2, 4], 9, 11), None);
    }
}
