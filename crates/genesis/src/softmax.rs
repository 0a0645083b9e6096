//! The softmax family: `softmax` and `log_softmax` along one dimension, `logsumexp` over
//! several (PyTorch's semantics; fused, numerically stable kernels in
//! `genesis_kernels::softmax`).

use genesis_kernels::softmax::SoftmaxOp;
use genesis_storage::{DType, ReduceShape};

use crate::args::{Dim, Dims, shape_spec, wrap_dim};
use crate::reduce::scan_shape;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// `exp(x) / sum(exp(x))` along dimension `dim` (negative counts from the end; a 0-d tensor
    /// takes 0 or -1), PyTorch's `softmax`: a new contiguous tensor of the same shape and dtype.
    /// Floating dtypes only (f64, f32, f16, bf16; computed in f32, float64 in f64, and rounded
    /// once); integers and bools are [`genesis_storage::Error::UnsupportedDType`], as in
    /// PyTorch. Numerically stable: each line's max is subtracted first, so `1e4` does not
    /// overflow. A line holding a NaN or +inf, or only -inf, gives NaN (PyTorch's results); an
    /// empty tensor gives an empty one. On the GPU one pass reads the input once for lines of
    /// up to 96 KiB along the last dimension (see `genesis_kernels::softmax`); a strided
    /// tensor is copied first.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0.0f32, 0.0, 1e4, 1e4], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.softmax(-1)?.to_vec::<f32>()?, [0.5, 0.5, 0.5, 0.5]);
    /// assert_eq!(x.softmax(0)?.to_vec::<f32>()?, [0.0, 0.0, 1.0, 1.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn softmax(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(up) = crate::autograd::autocast_up(self)? {
            return up.softmax(dim);
        }
        self.softmax_recorded(SoftmaxOp::Softmax, dim.to_dim())
    }

    /// `x - log(sum(exp(x)))` along dimension `dim`, PyTorch's `log_softmax`: as
    /// [`Tensor::softmax`] (dtypes, dimensions, special values), computed as
    /// `(x - max) - log(sum(exp(x - max)))`, so large magnitudes keep their precision and a
    /// -inf element gives -inf.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1e4f64, 1e4, f64::NEG_INFINITY], &[3], Device::Cpu)?;
    /// let y = x.log_softmax(0)?.to_vec::<f64>()?;
    /// assert_eq!(y, [-(2f64.ln()), -(2f64.ln()), f64::NEG_INFINITY]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(up) = crate::autograd::autocast_up(self)? {
            return up.log_softmax(dim);
        }
        self.softmax_recorded(SoftmaxOp::LogSoftmax, dim.to_dim())
    }

    /// `log(sum(exp(x)))` over `dims` (negative counts from the end; an empty list means every
    /// dimension, as PyTorch's `logsumexp(x, dim=())`), `keepdim` keeping them as size 1:
    /// PyTorch's `logsumexp`. Floating dtypes keep their dtype (computed in f32, float64 in
    /// f64); integers and bools give float32 (PyTorch's default float). Numerically stable (the
    /// max is subtracted); as in PyTorch an infinite max is not subtracted: a line of -inf (or
    /// of no elements: an empty dimension) gives -inf, a +inf gives +inf, a NaN gives NaN.
    /// Reduced dimensions adjacent in a contiguous tensor are read in place; otherwise the
    /// tensor is first copied with them moved last.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1e4f32, 1e4, 0.0, f32::NEG_INFINITY], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.logsumexp(-1, false)?.to_vec::<f32>()?, [1e4 + 2f32.ln(), 0.0]);
    /// assert_eq!(x.logsumexp([0, 1], true)?.shape(), &[1, 1]);
    /// let i = Tensor::from_slice(&[0i64, 0], &[2], Device::Cpu)?;
    /// assert_eq!(i.logsumexp((), false)?.to_vec::<f32>()?, [2f32.ln()]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn logsumexp(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        if let Some(up) = crate::autograd::autocast_up(self)? {
            return up.logsumexp(&dims[..], keepdim);
        }
        crate::autograd::op(
            "logsumexp",
            &[self],
            || self.logsumexp_raw(&dims, keepdim),
            |out| {
                let shape = self.shape().to_vec();
                // The forward accepted the dimensions.
                let reduced = crate::autograd::reduced_dims(self, Some(&dims)).unwrap_or_default();
                let x = crate::autograd::Saved::new("logsumexp", self);
                let y = crate::autograd::Saved::new("logsumexp", out);
                Box::new(move |g, _| {
                    // g * exp(x - logsumexp(x)), the output spread over the reduced dimensions.
                    let (x, y) = (x.get()?, y.get()?);
                    let y = crate::autograd::spread(&y, &shape, &reduced, keepdim)?;
                    let g = crate::autograd::spread(g, &shape, &reduced, keepdim)?;
                    Ok(vec![Some(g.mul(&x.sub(&y)?.exp()?)?)])
                })
            },
        )
    }

    fn logsumexp_raw(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let dims = dims.to_vec();
        if !self.dtype().is_float() {
            return self.to_dtype(DType::F32)?.logsumexp(&dims[..], keepdim);
        }
        let r = self.reduction(SoftmaxOp::LogSumExp.name(), Some(&dims), keepdim)?;
        let values = r.storage.softmax(SoftmaxOp::LogSumExp, r.start, r.shape)?;
        Tensor::from_storage(values, &r.out_shape)
    }

    /// `softmax` or `log_softmax` along `dim`, recorded: with `y` the output, the input's
    /// gradient is `y * (g - sum(g * y))` for softmax and `g - exp(y) * sum(g)` for
    /// log_softmax, the sums along `dim`.
    fn softmax_recorded(&self, op: SoftmaxOp, dim: isize) -> Result<Tensor> {
        let name = op.name();
        crate::autograd::op(
            name,
            &[self],
            || self.softmax_along(op, dim),
            |out| {
                let y = crate::autograd::Saved::new(name, out);
                Box::new(move |g, _| {
                    let y = y.get()?;
                    if y.dim() == 0 {
                        // One element: the output is constant (1, or 0 for log_softmax).
                        return Ok(vec![Some(g.mul(0.0)?)]);
                    }
                    let last = dim == -1 || dim == y.dim() as isize - 1;
                    if last
                        && y.dtype() == g.dtype()
                        && y.is_contiguous()
                        && g.is_contiguous()
                        && y.shape() == g.shape()
                    {
                        // One kernel: the row sums and the gradient (genesis_kernels::grad).
                        let n = y.shape()[y.dim() - 1];
                        let d = genesis_storage::Storage::softmax_grad(
                            op != SoftmaxOp::Softmax,
                            y.view.storage(),
                            y.first_element(),
                            g.view.storage(),
                            g.first_element(),
                            y.numel(),
                            n,
                        )?;
                        return Ok(vec![Some(Tensor::from_storage(d, y.shape())?)]);
                    }
                    let d = match op {
                        SoftmaxOp::Softmax => {
                            let s = g.mul(&y)?.sum_dim([dim], true)?;
                            y.mul(&g.sub(&s)?)?
                        }
                        _ => g.sub(&y.exp()?.mul(&g.sum_dim([dim], true)?)?)?,
                    };
                    Ok(vec![Some(d)])
                })
            },
        )
    }

    /// `softmax` or `log_softmax` (`op`) along `dim`.
    #[track_caller]
    fn softmax_along(&self, op: SoftmaxOp, dim: isize) -> Result<Tensor> {
        let name = op.name();
        let d = wrap_dim(name, dim as i64, self.dim())?;
        let dtype = self.dtype();
        if !dtype.is_float() {
            return Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op: name,
                dtype,
            }));
        }
        let shape = self.shape().to_vec();
        let lines = match d {
            None => ReduceShape {
                outer: 1,
                r: 1,
                inner: 1,
            },
            Some(d) => scan_shape(&shape[..d], &shape[d..=d], &shape[d + 1..])?,
        };
        let (a, start) = self.dense_operand(&shape)?;
        Tensor::from_storage(a.softmax(op, start, lines)?, &shape)
    }
}
