//! Normalisations over the last dimensions: [`Tensor::layer_norm`] and [`Tensor::rms_norm`]
//! (PyTorch's `F.layer_norm` and `F.rms_norm`), each one recorded op whose backward keeps
//! only the input, the per-row statistics and the weight (PyTorch's saved set), not the
//! intermediate tensors of the forward; and [`Tensor::batch_norm`] and
//! [`Tensor::group_norm`] over channels, composed of the facade's ops.

use crate::autograd::{Saved, cast_grad, sum_to};
use crate::{Error, Result, Tensor};

/// The last `shape.len()` dimensions of `x`, which must equal `shape`, as dimension indices.
fn normalized_dims(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<Vec<isize>> {
    let k = shape.len();
    if k == 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "normalized_shape must have at least one dimension (got [])".into(),
        });
    }
    if k > x.dim() || x.shape()[x.dim() - k..] != *shape {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "normalized_shape {shape:?} must be the trailing dimensions of the input of \
                 shape {:?}",
                x.shape()
            ),
        });
    }
    Ok((x.dim() - k..x.dim()).map(|d| d as isize).collect())
}

/// The checks of a per-channel tensor (`[C]`, on `x`'s device) of batch and group norm.
fn check_channel_tensor(op: &'static str, x: &Tensor, t: &Tensor, c: usize) -> Result<()> {
    check_affine(op, Some(t), &[c])?;
    if t.device() != x.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: x.device(),
            rhs: t.device(),
        });
    }
    Ok(())
}

/// `y` (`[N, C, ...]`, in the computing precision) `· weight + bias` per channel (each
/// optional), in `dtype`: the end of batch and group norm.
fn channel_affine(
    y: Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    dtype: crate::DType,
) -> Result<Tensor> {
    let mut shape = vec![1usize; y.dim()];
    shape[1] = y.shape()[1];
    let mut y = y;
    if let Some(w) = weight {
        y = y.mul(&w.reshape(shape.as_slice())?)?;
    }
    if let Some(b) = bias {
        y = y.add(&b.reshape(shape.as_slice())?)?;
    }
    if y.dtype() == dtype {
        Ok(y)
    } else {
        y.to_dtype(dtype)
    }
}

/// The mean and biased variance of `x` (`[N, C, ...]`) per channel, shaped `bshape`. A
/// contiguous input of more than two dimensions is reduced as `[N, C, S]` rows in place (no
/// copy that moves the channel dimension), the rows' means and variances combined exactly:
/// `var = mean_n(var_row + (mean_row − mean)²)`, every row holding `S` values.
fn batch_stats(x: &Tensor, dims: &[isize], bshape: &[usize]) -> Result<(Tensor, Tensor)> {
    let shape = x.shape();
    if shape.len() > 2 && x.is_contiguous() {
        let inner = shape[2..].iter().product::<usize>();
        let rows = x.reshape([shape[0], shape[1], inner])?;
        let (row_var, row_mean) = rows.var_mean([-1isize], 0.0, true)?;
        let mean = row_mean.mean_dim([0isize], true)?;
        let var = row_var
            .add(&row_mean.sub(&mean)?.square()?)?
            .mean_dim([0isize], true)?;
        return Ok((mean.reshape(bshape)?, var.reshape(bshape)?));
    }
    Ok((x.mean_dim(dims, true)?, x.var_dim(dims, 0.0, true)?))
}

fn check_affine(op: &'static str, t: Option<&Tensor>, shape: &[usize]) -> Result<()> {
    match t {
        Some(t) if t.shape() != shape => Err(Error::ShapeMismatch {
            op,
            lhs: t.shape().to_vec(),
            rhs: shape.to_vec(),
        }),
        _ => Ok(()),
    }
}

/// `t` in float32 when it is float16 or bfloat16 (the dtype the norms compute those in, as
/// PyTorch's kernels do), else `t`.
fn widened(t: &Tensor) -> Result<Tensor> {
    if matches!(t.dtype(), crate::DType::F16 | crate::DType::BF16) {
        t.to_dtype(crate::DType::F32)
    } else {
        Ok(t.clone())
    }
}

/// The dtype of a norm of `x` with the affine parameters: that of `x * weight + bias`
/// (PyTorch's `result_type`, a dimensioned `x` against each parameter in turn), probed with
/// one-element broadcast views.
fn affine_result_type(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<crate::DType> {
    let probe = |d: crate::DType| Tensor::zeros((), d, crate::Device::Cpu)?.expand(x.shape());
    let mut dtype = x.dtype();
    for p in [weight, bias].into_iter().flatten() {
        dtype = crate::result_type(&probe(dtype)?, p);
    }
    Ok(dtype)
}

/// `t` in `dtype` (itself when it is of it).
fn in_dtype(t: Tensor, dtype: crate::DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t)
    } else {
        t.to_dtype(dtype)
    }
}

/// A tensor's storage and first element, as the storage-level kernels take them.
fn at(t: &Tensor) -> (&genesis_storage::Storage, usize) {
    (t.view.storage().as_ref(), t.layout().offset())
}

/// The residual stream's gradient rounded to a narrow branch's dtype by the layer norm's
/// backward that completed it ([`Tensor::add_layer_norm`]'s two nodes share one): the gradient
/// buffer it was written from (its storage and version then) and the copy. The add's backward
/// takes the copy when its gradient is still that buffer unchanged, else converts.
#[derive(Default)]
struct NarrowGrad(std::sync::Mutex<Option<crate::autograd::BufferNote>>);

impl NarrowGrad {
    fn put(&self, from: &Tensor, copy: Tensor) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(crate::autograd::BufferNote::new(from, copy));
    }

    /// The copy made from `g` (the whole of its storage, unchanged since), if any; `None`
    /// otherwise. Empties the slot either way.
    fn take(&self, g: &Tensor) -> Option<Tensor> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?
            .value_for(g)
            .filter(|copy| copy.shape() == g.shape())
    }
}

/// The backward of the fused layer norm of `x` (its rows `ln`, the output in `out`, the
/// forward's `stats`): the input's gradient added into the one gathered so far (the residual
/// stream's) when the engine alone holds it, else a new one; the weight's and the bias's.
/// With `narrow`, the sum in the input's gradient is also rounded to `out` by the same pass
/// and left there for the add that formed the input. With `branch_sums`, the same pass also
/// forms the column sums of the gradient the add's other operand (a branch, in the branch's
/// dtype) receives, noted for it ([`crate::autograd::note_column_sums`]): a linear branch
/// takes them as its bias's gradient without reading the gradient again.
#[allow(clippy::too_many_arguments)]
fn layer_norm_grad_fn(
    ln: genesis_kernels::layernorm::LayerNormShape,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    has_bias: bool,
    out: crate::DType,
    stats: (genesis_storage::Storage, genesis_storage::Storage),
    narrow: Option<std::sync::Arc<NarrowGrad>>,
    branch_sums: bool,
) -> Box<crate::autograd::BackwardFn> {
    use genesis_storage::Storage;
    let op = "layer_norm";
    let (mean, rstd) = stats;
    let x = Saved::new(op, x);
    let w = weight.map(|w| Saved::new(op, w));
    let pshape = normalized_shape.to_vec();
    Box::new(move |g, needs| {
        let x = x.get()?;
        let w = w.as_ref().map(Saved::get).transpose()?;
        // The kernels read the gradient in the output's dtype.
        let g = match g.dtype() == out {
            true => g.contiguous()?,
            false => g.to_dtype(out)?.contiguous()?,
        };
        let want_w = w.is_some() && needs[1];
        let want_b = has_bias && needs[needs.len() - 1];
        let into = crate::autograd::pending_gradient(0).filter(|p| {
            needs[0] && p.dtype() == x.dtype() && p.shape() == x.shape() && p.device() == x.device()
        });
        // The branch's gradient is the narrow copy, or the input's gradient itself when the
        // branch has the input's dtype (which the kernels then read `g` in).
        let sums = branch_sums
            && needs[0]
            && ln.cols <= genesis_kernels::layernorm::MAX_SUM_COLS
            && (narrow.is_some() || out == x.dtype());
        let copy = needs[0] && narrow.is_some();
        let (dx, grads) = match into {
            Some(p) => {
                let grads = Storage::layer_norm_backward_add(
                    &ln,
                    at(&g),
                    at(&x),
                    w.as_ref().map(at),
                    &mean,
                    &rstd,
                    (want_w, want_b),
                    at(&p),
                    copy,
                    sums,
                )?;
                (p, grads)
            }
            None => {
                let (dh, grads) = Storage::layer_norm_backward(
                    &ln,
                    at(&g),
                    at(&x),
                    w.as_ref().map(at),
                    &mean,
                    &rstd,
                    (want_w, want_b),
                    copy,
                    sums,
                )?;
                (Tensor::from_storage(dh, x.shape())?, grads)
            }
        };
        let genesis_storage::LayerNormGrads { copy, sums, dw, db } = grads;
        let copy = copy
            .map(|c| Tensor::from_storage(c, x.shape()))
            .transpose()?;
        if let Some(s) = sums {
            let s = Tensor::from_storage(s, &[ln.cols])?;
            crate::autograd::note_column_sums(copy.as_ref().unwrap_or(&dx), s);
        }
        if let (Some(slot), Some(copy)) = (&narrow, copy) {
            slot.put(&dx, copy);
        }
        let dx = needs[0].then_some(dx);
        let mut grads = vec![dx];
        if w.is_some() {
            grads.push(dw.map(|d| Tensor::from_storage(d, &pshape)).transpose()?);
        }
        if has_bias {
            grads.push(db.map(|d| Tensor::from_storage(d, &pshape)).transpose()?);
        }
        Ok(grads)
    })
}

impl Tensor {
    /// Group normalisation (PyTorch's `F.group_norm`) of `self` (`[N, C, ...]`, floating
    /// point): the channels split into `num_groups` groups, each group of each sample
    /// normalised by its mean and biased variance (over its channels and every position),
    /// then `· weight + bias` per channel (`[C]` each, when given). Float16 and bfloat16
    /// compute in float32 and round once. Differentiable (composed ops).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 3.0, 10.0, 30.0], [1, 4], Device::Cpu)?;
    /// let y = x.group_norm(2, None, None, 0.0)?;
    /// assert_eq!(y.to_vec::<f32>()?, [-1.0, 1.0, -1.0, 1.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn group_norm(
        &self,
        num_groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let op = "group_norm";
        if self.dim() < 2 || !self.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "expected a floating-point input of at least 2 dimensions [N, C, ...], got \
                     {} of shape {:?}",
                    self.dtype(),
                    self.shape()
                ),
            });
        }
        let (n, c) = (self.shape()[0], self.shape()[1]);
        if num_groups == 0 || !c.is_multiple_of(num_groups) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "Expected number of channels in input to be divisible by num_groups, but got \
                     input of shape {:?} and num_groups={num_groups}",
                    self.shape()
                ),
            });
        }
        for t in [weight, bias].into_iter().flatten() {
            check_channel_tensor(op, self, t, c)?;
        }
        let x = self.in_opmath()?;
        // [N, G, rest]: each group of each sample a row.
        let rest = self.shape()[2..]
            .iter()
            .try_fold(c / num_groups, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::InvalidArgument {
                op,
                reason: format!("the shape {:?} overflows", self.shape()),
            })?;
        let rows = x.reshape([n, num_groups, rest])?;
        let (var, mean) = rows.var_mean([-1isize], 0.0, true)?;
        let y = rows
            .sub(&mean)?
            .mul(&var.add(eps)?.rsqrt()?)?
            .reshape(self.shape())?;
        channel_affine(y, weight, bias, self.dtype())
    }

    /// Batch normalisation (PyTorch's `F.batch_norm`) of `self` (`[N, C, ...]`, floating
    /// point) per channel (dimension 1). With `training`, each channel is normalised by its
    /// mean and biased variance over the batch and the other dimensions, and the running
    /// statistics (`[C]`, when given) move toward them in place:
    /// `running = (1 − momentum)·running + momentum·statistic`, the variance unbiased (PyTorch's);
    /// a channel of one value is refused. Without `training`, the running statistics normalise
    /// (they must be given). Then `· weight + bias` (`[C]` each, when given). Float16 and bfloat16
    /// inputs compute in float32 and round once. Differentiable in the input, weight and bias
    /// (composed ops); the running statistics are updated without recording.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 3.0, 10.0, 30.0], [2, 2], Device::Cpu)?;
    /// let (rm, rv) = (Tensor::zeros([2], DType::F32, Device::Cpu)?, Tensor::ones([2], DType::F32, Device::Cpu)?);
    /// let y = x.batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, 0.0)?;
    /// assert_eq!(y.to_vec::<f32>()?, [-1.0, -1.0, 1.0, 1.0]);
    /// let rm = rm.to_vec::<f32>()?; // 0.1 · the batch means 5.5 and 16.5
    /// assert!((rm[0] - 0.55).abs() < 1e-6 && (rm[1] - 1.65).abs() < 1e-6);
    /// # Ok(())
    /// # }
    /// ```
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn batch_norm(
        &self,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        let op = "batch_norm";
        if self.dim() < 2 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "expected an input of at least 2 dimensions [N, C, ...], got shape {:?}",
                    self.shape()
                ),
            });
        }
        if !self.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("takes floating-point input, got {}", self.dtype()),
            });
        }
        let c = self.shape()[1];
        for t in [running_mean, running_var, weight, bias]
            .into_iter()
            .flatten()
        {
            check_channel_tensor(op, self, t, c)?;
            if !t.dtype().is_float() {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("takes floating-point parameters, got {}", t.dtype()),
                });
            }
        }
        let running = match (running_mean, running_var) {
            (Some(m), Some(v)) => Some((m, v)),
            (None, None) => None,
            _ => {
                return Err(Error::InvalidArgument {
                    op,
                    reason: "running_mean and running_var must be given together".into(),
                });
            }
        };
        let per_channel = self.numel().checked_div(c).unwrap_or(0);
        if (training || running.is_none()) && per_channel <= 1 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "expected more than 1 value per channel when training, got input size {:?}",
                    self.shape()
                ),
            });
        }
        let mut bshape = vec![1usize; self.dim()];
        bshape[1] = c;
        let dims: Vec<isize> = (0..self.dim() as isize).filter(|&d| d != 1).collect();
        let x = self.in_opmath()?;
        let (mean, var) = match running {
            Some((m, v)) if !training => (
                m.detach().to_dtype(x.dtype())?.reshape(bshape.as_slice())?,
                v.detach().to_dtype(x.dtype())?.reshape(bshape.as_slice())?,
            ),
            _ => {
                let (mean, var) = batch_stats(&x, &dims, bshape.as_slice())?;
                if let Some((m, v)) = running {
                    let n = per_channel as f64;
                    crate::autograd::no_grad(|| -> Result<()> {
                        let step = |r: &Tensor, stat: &Tensor| -> Result<()> {
                            let stat = stat.detach().reshape([c])?.mul(momentum)?;
                            r.mul_(1.0 - momentum)?;
                            r.add_(&stat.to_dtype(r.dtype())?)
                        };
                        step(m, &mean)?;
                        step(v, &var.mul(n / (n - 1.0))?)
                    })?;
                }
                (mean, var)
            }
        };
        // The weight joins the per-channel scale: one pass over the input fewer.
        let mut scale = var.add(eps)?.rsqrt()?;
        if let Some(w) = weight {
            scale = scale.mul(&w.reshape(bshape.as_slice())?)?;
        }
        let y = x.sub(&mean)?.mul(&scale)?;
        channel_affine(y, None, bias, self.dtype())
    }

    /// Layer normalisation over the trailing dimensions `normalized_shape` (PyTorch's
    /// `F.layer_norm`): `(x - mean) / sqrt(var + eps) * weight + bias`, the biased variance,
    /// `weight` and `bias` of shape `normalized_shape` (either may be absent). Computed in the
    /// input's dtype (the result promotes with `weight` and `bias`). Its gradient keeps only
    /// the input, each row's mean and `1 / sqrt(var + eps)`, and the weight:
    /// `dx = r (dx̂ - mean(dx̂) - x̂ mean(dx̂ x̂))` with `x̂ = (x - mean) r`, `dx̂ = g weight`.
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let op = "layer_norm";
        let dims = normalized_dims(op, self, normalized_shape)?;
        check_affine(op, weight, normalized_shape)?;
        check_affine(op, bias, normalized_shape)?;
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        if let Some(y) = self.layer_norm_fused(normalized_shape, weight, bias, eps, self.dtype())? {
            return Ok(y);
        }
        let kept = std::cell::RefCell::new(None);
        crate::autograd::op(
            op,
            &inputs,
            || {
                // float16 and bfloat16 in float32 (PyTorch's accumulate type), rounded once at
                // the end: a square of a half value beyond 256 would overflow its dtype.
                let x = widened(self)?;
                let mean = x.mean_dim(&dims[..], true)?;
                let centred = x.sub(&mean)?;
                let var = centred.square()?.mean_dim(&dims[..], true)?;
                let rstd = var.add(eps)?.rsqrt()?;
                let mut y = centred.mul(&rstd)?;
                if let Some(w) = weight {
                    y = y.mul(w)?;
                }
                if let Some(b) = bias {
                    y = y.add(b)?;
                }
                let y = if x.dtype() == self.dtype() {
                    y
                } else {
                    in_dtype(y, affine_result_type(self, weight, bias)?)?
                };
                *kept.borrow_mut() = Some((mean, rstd));
                Ok(y)
            },
            |_| {
                let (mean, rstd) = kept.borrow_mut().take().expect("set by the forward");
                let x = Saved::new(op, self);
                let w = weight.map(|w| Saved::new(op, w));
                let (xs, xd) = (self.shape().to_vec(), self.dtype());
                let ws = weight.map(|w| (w.shape().to_vec(), w.dtype()));
                let bs = bias.map(|b| (b.shape().to_vec(), b.dtype()));
                let dims = dims.clone();
                Box::new(move |g, needs| {
                    let x = x.get()?;
                    let xhat = x.sub(&mean)?.mul(&rstd)?;
                    let mut out = Vec::with_capacity(needs.len());
                    let w = w.as_ref().map(Saved::get).transpose()?;
                    let dxhat = match &w {
                        Some(w) => g.mul(w)?,
                        None => g.clone(),
                    };
                    out.push(if needs[0] {
                        let a = dxhat.mean_dim(&dims[..], true)?;
                        let b = dxhat.mul(&xhat)?.mean_dim(&dims[..], true)?;
                        let dx = dxhat.sub(&a)?.sub(&xhat.mul(&b)?)?.mul(&rstd)?;
                        Some(cast_grad(sum_to(&dx, &xs)?, xd)?)
                    } else {
                        None
                    });
                    let mut k = 1;
                    if let Some((shape, dtype)) = &ws {
                        out.push(if needs[k] {
                            Some(cast_grad(sum_to(&g.mul(&xhat)?, shape)?, *dtype)?)
                        } else {
                            None
                        });
                        k += 1;
                    }
                    if let Some((shape, dtype)) = &bs {
                        out.push(if needs[k] {
                            Some(cast_grad(sum_to(g, shape)?, *dtype)?)
                        } else {
                            None
                        });
                    }
                    Ok(out)
                })
            },
        )
    }

    /// [`Tensor::layer_norm`] with the result in `dtype`: the values of
    /// `self.layer_norm(..)?.to_dtype(dtype)`, each rounded once from the normalisation's
    /// float32 result. Where the fused kernels apply (contiguous float32 rows, a float16 or
    /// bfloat16 `dtype`, affine parameters of the input's dtype) it is one pass that writes
    /// only the narrow result, and its gradient is read in `dtype` without a conversion:
    /// what a layer norm feeding a half-precision product under
    /// [`autocast`](crate::autograd::autocast) needs (the product would convert its input).
    /// Otherwise it is the two ops.
    pub fn layer_norm_to(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        dtype: crate::DType,
    ) -> Result<Tensor> {
        let op = "layer_norm";
        normalized_dims(op, self, normalized_shape)?;
        check_affine(op, weight, normalized_shape)?;
        check_affine(op, bias, normalized_shape)?;
        if dtype != self.dtype()
            && let Some(y) = self.layer_norm_fused(normalized_shape, weight, bias, eps, dtype)?
        {
            return Ok(y);
        }
        self.layer_norm(normalized_shape, weight, bias, eps)?
            .to_dtype(dtype)
    }

    /// `self + other` and the layer norm of the sum over the trailing dimensions
    /// `normalized_shape`: `(h, h.layer_norm(normalized_shape, weight, bias, eps))` with `h =
    /// self.add(other)` (broadcasting and promoting as [`Tensor::add`]), the values and
    /// gradients of those two ops. A transformer's residual stream and the norm that reads it
    /// (llm.c's fused residual forward): where the fused kernels apply (contiguous rows of the
    /// same shape, `other` of the rows' dtype, affine parameters of it) one pass reads `self`
    /// and `other` and writes `h` and the normalised rows. See
    /// [`Tensor::add_layer_norm_to`] for a narrower result.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// let r = Tensor::from_slice(&[0.0f32, 1.0, 0.0, 2.0], &[2, 2], Device::Cpu)?;
    /// let (h, y) = x.add_layer_norm(&r, &[2], None, None, 0.0)?;
    /// assert_eq!(h.to_vec::<f32>()?, [1.0, 3.0, 3.0, 6.0]);
    /// assert_eq!(y.to_vec::<f32>()?, [-1.0, 1.0, -1.0, 1.0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_layer_norm(
        &self,
        other: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor)> {
        self.add_layer_norm_impl(other, normalized_shape, weight, bias, eps, None)
    }

    /// [`Tensor::add_layer_norm`] with the normalised rows in `dtype`: `(h,
    /// h.layer_norm_to(normalized_shape, weight, bias, eps, dtype))`. Under
    /// [`autocast`](crate::autograd::autocast) the float32 residual stream plus a float16 or
    /// bfloat16 branch (`other`: widened exactly, added in float32, as PyTorch adds them) is
    /// one pass that writes the float32 sum and the narrow rows the next product reads.
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm_to(
        &self,
        other: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        dtype: crate::DType,
    ) -> Result<(Tensor, Tensor)> {
        self.add_layer_norm_impl(other, normalized_shape, weight, bias, eps, Some(dtype))
    }

    fn add_layer_norm_impl(
        &self,
        other: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        out: Option<crate::DType>,
    ) -> Result<(Tensor, Tensor)> {
        let op = "add_layer_norm";
        check_affine(op, weight, normalized_shape)?;
        check_affine(op, bias, normalized_shape)?;
        // The fused pass: `other` of `self`'s shape and dtype, or (float32 rows) of the narrow
        // output's; then `h` is of `self`'s dtype, as the add promotes.
        let y_dtype = out.unwrap_or(self.dtype());
        let fused = other.shape() == self.shape()
            && other.device() == self.device()
            && other.layout().is_contiguous()
            && (other.dtype() == self.dtype() || other.dtype() == y_dtype)
            && crate::result_type(self, other) == self.dtype();
        if fused {
            normalized_dims(op, self, normalized_shape)?;
            if let Some(pair) =
                self.add_layer_norm_fused(other, normalized_shape, weight, bias, eps, y_dtype)?
            {
                return Ok(pair);
            }
        }
        let h = self.add(other)?;
        let y = match out {
            Some(d) => h.layer_norm_to(normalized_shape, weight, bias, eps, d)?,
            None => h.layer_norm(normalized_shape, weight, bias, eps)?,
        };
        Ok((h, y))
    }

    /// The rows' shape for the fused kernels (`genesis_kernels::layernorm`) of `self` over
    /// the trailing `normalized_shape` (contiguous, so its elements are one row), with
    /// contiguous affine parameters of its dtype and device, an output of its dtype or (float32
    /// rows) float16 or bfloat16; `None` when the operands do not suit them.
    fn layer_norm_rows(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        out: crate::DType,
    ) -> Option<genesis_kernels::layernorm::LayerNormShape> {
        use genesis_kernels::layernorm::{LayerNormShape, MAX_COLS};
        let dtype = self.dtype();
        // Saturating: a huge `normalized_shape` of an empty input is beyond `MAX_COLS` anyway.
        let cols = normalized_shape
            .iter()
            .fold(1usize, |n, &d| n.saturating_mul(d));
        let suits = matches!(
            dtype,
            crate::DType::F32 | crate::DType::F16 | crate::DType::BF16
        ) && (1..=MAX_COLS).contains(&cols)
            && self.layout().is_contiguous()
            && [weight, bias].into_iter().flatten().all(|p| {
                p.dtype() == dtype && p.device() == self.device() && p.layout().is_contiguous()
            })
            && eps.is_finite()
            && eps >= 0.0
            && (out == dtype
                || (dtype == crate::DType::F32
                    && matches!(out, crate::DType::F16 | crate::DType::BF16)));
        suits.then(|| LayerNormShape {
            rows: self.numel() / cols,
            cols,
            eps,
        })
    }

    /// [`Tensor::layer_norm`] over the trailing `normalized_shape` as one kernel forward and
    /// one backward (`genesis_kernels::layernorm`: each row read once, the statistics in f32;
    /// on the CPU its twin, rows on all cores), for contiguous f32, f16 or bf16 inputs with
    /// contiguous affine parameters of their dtype, the result in the input's dtype or
    /// (`out`, float32 input) float16 or bfloat16; `None` when the operands do not suit it.
    fn layer_norm_fused(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        out: crate::DType,
    ) -> Result<Option<Tensor>> {
        use genesis_storage::Storage;
        let op = "layer_norm";
        let Some(ln) = self.layer_norm_rows(normalized_shape, weight, bias, eps, out) else {
            return Ok(None);
        };
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        let stats = std::cell::RefCell::new(None);
        let y = crate::autograd::op(
            op,
            &inputs,
            || {
                let (y, mean, rstd) =
                    Storage::layer_norm_to(&ln, at(self), weight.map(at), bias.map(at), out)?;
                *stats.borrow_mut() = Some((mean, rstd));
                Tensor::from_storage(y, self.shape())
            },
            |_| {
                let stats = stats.borrow_mut().take().expect("set by the forward");
                layer_norm_grad_fn(
                    ln,
                    self,
                    normalized_shape,
                    weight,
                    bias.is_some(),
                    out,
                    stats,
                    None,
                    false,
                )
            },
        )?;
        Ok(Some(y))
    }

    /// [`Tensor::add_layer_norm`] on the fused kernels: `h = self + other` and `y` in `out`
    /// from one pass, recorded as the two ops they stand for (an add, whose gradient reaches
    /// `other` in its dtype, and a layer norm of `h`); `None` when the operands do not suit
    /// them (the caller checked the shapes, the dtypes and the layout of `other`).
    fn add_layer_norm_fused(
        &self,
        other: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        out: crate::DType,
    ) -> Result<Option<(Tensor, Tensor)>> {
        use genesis_storage::Storage;
        let Some(ln) = self.layer_norm_rows(normalized_shape, weight, bias, eps, out) else {
            return Ok(None);
        };
        let (h, y, mean, rstd) = crate::autograd::profile::timed(
            "add_layer_norm",
            "forward",
            Some(self.device()),
            || {
                Ok(Storage::add_layer_norm_to(
                    &ln,
                    at(self),
                    at(other),
                    weight.map(at),
                    bias.map(at),
                    out,
                )?)
            },
        )?;
        let h = Tensor::from_storage(h, self.shape())?;
        let y = Tensor::from_storage(y, self.shape())?;
        let r_dtype = other.dtype();
        // A residual narrower than the stream (autocast's) takes its gradient rounded by the
        // norm's backward, which completes the stream's gradient, when it can.
        let narrow = (r_dtype != self.dtype() && r_dtype == out && other.requires_grad())
            .then(|| std::sync::Arc::new(NarrowGrad::default()));
        // The branch's gradient's column sums, formed by the norm's backward, serve a linear
        // branch as its bias's gradient (a transformer's output projections).
        let branch_sums = other.requires_grad() && (narrow.is_some() || r_dtype == self.dtype());
        let slot = narrow.clone();
        let h = crate::autograd::record(
            "add",
            &[self, other],
            h,
            Box::new(move |g, needs| {
                let gr = match needs[1] {
                    true => match slot.as_ref().and_then(|s| s.take(g)) {
                        Some(copy) => Some(copy),
                        None => Some(cast_grad(g.clone(), r_dtype)?),
                    },
                    false => None,
                };
                Ok(vec![needs[0].then(|| g.clone()), gr])
            }),
        );
        let mut inputs = vec![&h];
        inputs.extend(weight);
        inputs.extend(bias);
        let backward = layer_norm_grad_fn(
            ln,
            &h,
            normalized_shape,
            weight,
            bias.is_some(),
            out,
            (mean, rstd),
            narrow,
            branch_sums,
        );
        let y = crate::autograd::record("layer_norm", &inputs, y, backward);
        Ok(Some((h, y)))
    }

    /// Root-mean-square normalisation over the trailing dimensions `normalized_shape`
    /// (PyTorch's `F.rms_norm`): `x / sqrt(mean(x²) + eps) * weight` (`weight` optional).
    /// Its gradient keeps only the input, each row's `r = 1 / sqrt(mean(x²) + eps)` and the
    /// weight: `dx = r (dx̂ - x̂ mean(dx̂ x̂))` with `x̂ = x r`, `dx̂ = g weight`.
    pub fn rms_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let op = "rms_norm";
        let dims = normalized_dims(op, self, normalized_shape)?;
        check_affine(op, weight, normalized_shape)?;
        let mut inputs = vec![self];
        inputs.extend(weight);
        let kept = std::cell::RefCell::new(None);
        crate::autograd::op(
            op,
            &inputs,
            || {
                // As PyTorch: float16 and bfloat16 normalised in float32 and rounded to their
                // dtype (`type_as`) before the weight multiplies.
                let x = widened(self)?;
                let rstd = x.square()?.mean_dim(&dims[..], true)?.add(eps)?.rsqrt()?;
                let mut y = in_dtype(x.mul(&rstd)?, self.dtype())?;
                if let Some(w) = weight {
                    y = y.mul(w)?;
                }
                *kept.borrow_mut() = Some(rstd);
                Ok(y)
            },
            |_| {
                let rstd = kept.borrow_mut().take().expect("set by the forward");
                let x = Saved::new(op, self);
                let w = weight.map(|w| Saved::new(op, w));
                let (xs, xd) = (self.shape().to_vec(), self.dtype());
                let ws = weight.map(|w| (w.shape().to_vec(), w.dtype()));
                let dims = dims.clone();
                Box::new(move |g, needs| {
                    let x = x.get()?;
                    let xhat = x.mul(&rstd)?;
                    let w = w.as_ref().map(Saved::get).transpose()?;
                    let dxhat = match &w {
                        Some(w) => g.mul(w)?,
                        None => g.clone(),
                    };
                    let mut out = Vec::with_capacity(needs.len());
                    out.push(if needs[0] {
                        let b = dxhat.mul(&xhat)?.mean_dim(&dims[..], true)?;
                        let dx = dxhat.sub(&xhat.mul(&b)?)?.mul(&rstd)?;
                        Some(cast_grad(sum_to(&dx, &xs)?, xd)?)
                    } else {
                        None
                    });
                    if let Some((shape, dtype)) = &ws {
                        out.push(if needs[1] {
                            Some(cast_grad(sum_to(&g.mul(&xhat)?, shape)?, *dtype)?)
                        } else {
                            None
                        });
                    }
                    Ok(out)
                })
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Generator, Tensor};

    /// The add-and-norm's backward notes the column sums of the gradient its branch receives,
    /// and the branch's linear layer takes its bias's gradient from that note: a hook on the
    /// branch finds the note (the exact column sums) and replaces it by the sums plus one,
    /// which then arrive as the bias's gradient. With an autocast-style narrow branch too.
    #[test]
    fn the_norms_backward_notes_the_branch_sums_and_the_linear_takes_them() {
        let g = Generator::new(3);
        for (branch, out) in [(DType::F32, None), (DType::BF16, Some(DType::BF16))] {
            let (rows, k, cols) = (7, 5, 12);
            let leaf = |shape: &[usize], dtype: DType| {
                g.randn(shape, DType::F32, Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap()
            };
            let x = leaf(&[rows, cols], DType::F32);
            let (z, w, b) = (
                leaf(&[rows, k], branch),
                leaf(&[cols, k], branch),
                leaf(&[cols], branch),
            );
            let y_branch = z.linear(&w, Some(&b)).unwrap();
            let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<Vec<f64>>));
            let seen_in = seen.clone();
            y_branch
                .register_hook(move |gr| {
                    let s = crate::autograd::noted_column_sums(gr, &[cols]).expect("noted sums");
                    let v = s.to_dtype(DType::F64)?.to_vec::<f64>()?;
                    *seen_in.lock().unwrap() = Some(v);
                    crate::autograd::note_column_sums(gr, s.add(1.0)?);
                    Ok(None)
                })
                .unwrap();
            // The residual's own gradient (`gh`, a whole buffer), gathered before the norm's
            // backward adds into it.
            let gh = g.randn([rows, cols], DType::F32, Device::Cpu).unwrap();
            let x1 = x.mul(1.0).unwrap();
            let (h, y) = match out {
                Some(d) => x1.add_layer_norm_to(&y_branch, &[cols], None, None, 1e-5, d),
                None => x1.add_layer_norm(&y_branch, &[cols], None, None, 1e-5),
            }
            .unwrap();
            let loss = y
                .to_dtype(DType::F32)
                .unwrap()
                .square()
                .unwrap()
                .sum()
                .unwrap()
                .add(&h.mul(&gh).unwrap().sum().unwrap())
                .unwrap();
            loss.backward().unwrap();
            let seen = seen.lock().unwrap().clone().expect("the hook ran");
            let got = b.grad().unwrap().to_dtype(DType::F64).unwrap();
            let want = Tensor::from_slice(&seen, [cols], Device::Cpu)
                .unwrap()
                .to_dtype(branch)
                .unwrap()
                .add(1.0)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap();
            assert_eq!(
                got.to_vec::<f64>().unwrap(),
                want.to_vec::<f64>().unwrap(),
                "{branch}"
            );
        }
    }
}
