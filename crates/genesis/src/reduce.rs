//! Reductions: sum, mean, max, min, argmax, argmin over all elements or given dimensions.

use std::sync::Arc;

use genesis_storage::{DType, ReduceOp, ReduceShape, Storage};

use crate::args::{Dim, Dims, shape_spec, wrap_dim};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Sum of all elements, as a 0-dimensional tensor. Floating types accumulate in f32 on the
    /// GPU (float64 in f64; every float in f64 on the CPU) and keep their dtype; integer and
    /// bool sums wrap and are i64 (PyTorch's rule: `mask.sum()` counts the true elements). Every
    /// dtype reduces on every device.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.sum()?.to_vec::<f32>()?, [21.0]);
    /// assert_eq!(x.sum_dim(&[0], false)?.to_vec::<f32>()?, [5.0, 7.0, 9.0]);
    /// assert_eq!(x.mean_dim(&[-1], true)?.shape(), &[2, 1]);
    /// let (values, indices) = x.max_dim(1, false)?;
    /// assert_eq!((values.to_vec::<f32>()?, indices.to_vec::<i64>()?), (vec![3.0, 6.0], vec![2, 2]));
    /// assert_eq!(x.argmin()?.to_vec::<i64>()?, [0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn sum(&self) -> Result<Tensor> {
        self.reduce_grad(ReduceOp::Sum, None, false)
    }

    /// Sum over `dims` (negative counts from the end; an empty list means every dimension);
    /// `keepdim` keeps them as size 1.
    #[track_caller]
    pub fn sum_dim(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.reduce_grad(ReduceOp::Sum, Some(&dims), keepdim)
    }

    /// Mean of all elements (floating dtypes, as PyTorch; the mean of no elements is NaN).
    #[track_caller]
    pub fn mean(&self) -> Result<Tensor> {
        self.reduce_grad(ReduceOp::Mean, None, false)
    }

    /// Mean over `dims` (as [`Tensor::sum_dim`]).
    #[track_caller]
    pub fn mean_dim(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.reduce_grad(ReduceOp::Mean, Some(&dims), keepdim)
    }

    /// A sum or a mean, recorded: the gradient spreads the output's back over the reduced
    /// dimensions (divided by their element count for a mean).
    fn reduce_grad(&self, op: ReduceOp, dims: Option<&[isize]>, keepdim: bool) -> Result<Tensor> {
        let name = if op == ReduceOp::Sum { "sum" } else { "mean" };
        crate::autograd::op(
            name,
            &[self],
            || Ok(self.reduce(op, dims, keepdim)?.0),
            |_| {
                let (shape, dtype) = (self.shape().to_vec(), self.dtype());
                // The forward accepted the dimensions.
                let reduced = crate::autograd::reduced_dims(self, dims).unwrap_or_default();
                Box::new(move |g, _| {
                    let g = crate::autograd::spread(g, &shape, &reduced, keepdim)?;
                    let g = if op == ReduceOp::Mean {
                        let count = reduced
                            .iter()
                            .fold(1usize, |n, &d| n.saturating_mul(shape[d]));
                        g.div(count as f64)?
                    } else {
                        g
                    };
                    Ok(vec![Some(crate::autograd::cast_grad(g, dtype)?)])
                })
            },
        )
    }

    /// Largest element (NaN if any is NaN); an error for an empty tensor.
    #[track_caller]
    pub fn max(&self) -> Result<Tensor> {
        self.extreme_recorded(ReduceOp::Max, None, false)
    }

    /// Smallest element (NaN if any is NaN); an error for an empty tensor.
    #[track_caller]
    pub fn min(&self) -> Result<Tensor> {
        self.extreme_recorded(ReduceOp::Min, None, false)
    }

    /// Largest values over `dims` (PyTorch's `amax`).
    #[track_caller]
    pub fn amax(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.extreme_recorded(ReduceOp::Max, Some(&dims), keepdim)
    }

    /// Smallest values over `dims` (PyTorch's `amin`).
    #[track_caller]
    pub fn amin(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.extreme_recorded(ReduceOp::Min, Some(&dims), keepdim)
    }

    /// `max`, `min`, `amax` or `amin`, recorded: the gradient is shared evenly by the elements
    /// equal to the extreme (PyTorch's rule for these reductions).
    fn extreme_recorded(
        &self,
        op: ReduceOp,
        dims: Option<&[isize]>,
        keepdim: bool,
    ) -> Result<Tensor> {
        let name = if op == ReduceOp::Max { "amax" } else { "amin" };
        crate::autograd::op(
            name,
            &[self],
            || Ok(self.reduce(op, dims, keepdim)?.0),
            |out| {
                let x = crate::autograd::Saved::new(name, self);
                let y = crate::autograd::Saved::new(name, out);
                let reduced = crate::autograd::reduced_dims(self, dims).unwrap_or_default();
                let shape = self.shape().to_vec();
                Box::new(move |g, _| {
                    use crate::autograd::spread;
                    let (x, y) = (x.get()?, y.get()?);
                    let at = x
                        .eq(&spread(&y, &shape, &reduced, keepdim)?)?
                        .to_dtype(g.dtype())?;
                    let keep: Vec<isize> = reduced.iter().map(|&d| d as isize).collect();
                    let count = at.sum_dim(&keep[..], true)?;
                    let g = spread(g, &shape, &reduced, keepdim)?;
                    Ok(vec![Some(g.mul(&at)?.div(&count)?)])
                })
            },
        )
    }

    /// `(values, indices)` of the largest elements along `dim` (PyTorch's `max(dim)`): the
    /// index of the first maximum, or of the first NaN.
    #[track_caller]
    pub fn max_dim(&self, dim: impl Dim, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.with_indices_recorded("max_dim", ReduceOp::ArgMax, dim.to_dim(), keepdim)
    }

    /// `(values, indices)` of the smallest elements along `dim` (PyTorch's `min(dim)`).
    #[track_caller]
    pub fn min_dim(&self, dim: impl Dim, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.with_indices_recorded("min_dim", ReduceOp::ArgMin, dim.to_dim(), keepdim)
    }

    /// [`Tensor::with_indices`], the values recorded (the gradient goes to the index picked).
    fn with_indices_recorded(
        &self,
        name: &'static str,
        op: ReduceOp,
        dim: isize,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        if !crate::autograd::wants(&[self]) {
            return self.with_indices(op, dim, keepdim);
        }
        let (v, i) = crate::no_grad(|| self.with_indices(op, dim, keepdim))?;
        let d = crate::args::wrap_dim(name, dim as i64, self.dim())?;
        Ok((crate::autograd::picked(name, self, d, v, &i, keepdim), i))
    }

    /// Index (i64, into the flattened tensor) of the first largest element.
    #[track_caller]
    pub fn argmax(&self) -> Result<Tensor> {
        self.arg_indices(ReduceOp::ArgMax, None, false)
    }

    /// Index (i64, into the flattened tensor) of the first smallest element.
    #[track_caller]
    pub fn argmin(&self) -> Result<Tensor> {
        self.arg_indices(ReduceOp::ArgMin, None, false)
    }

    /// Indices of the first largest elements along `dim`.
    #[track_caller]
    pub fn argmax_dim(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.refuse_bool_arg(ReduceOp::ArgMax)?;
        let dim = dim.to_dim();
        Ok(self.with_indices(ReduceOp::ArgMax, dim, keepdim)?.1)
    }

    /// Indices of the first smallest elements along `dim`.
    #[track_caller]
    pub fn argmin_dim(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.refuse_bool_arg(ReduceOp::ArgMin)?;
        let dim = dim.to_dim();
        Ok(self.with_indices(ReduceOp::ArgMin, dim, keepdim)?.1)
    }

    fn with_indices(&self, op: ReduceOp, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let (values, indices) = self.reduce(op, Some(&[dim]), keepdim)?;
        Ok((values, Self::indices_of(op, indices)?))
    }

    /// The indices of an arg reduction (`reduce` gives them for `ArgMax` and `ArgMin`).
    fn arg_indices(&self, op: ReduceOp, dims: Option<&[isize]>, keepdim: bool) -> Result<Tensor> {
        self.refuse_bool_arg(op)?;
        Self::indices_of(op, self.reduce(op, dims, keepdim)?.1)
    }

    /// `argmax` and `argmin` of a bool tensor are errors, as PyTorch's ("argmax_cpu" not
    /// implemented for 'Bool'); `max(dim)` and `min(dim)` of bools, which give indices too, are
    /// not.
    fn refuse_bool_arg(&self, op: ReduceOp) -> Result<()> {
        if self.dtype() == DType::Bool {
            return Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
            }));
        }
        Ok(())
    }

    /// `indices`, or a typed error were `reduce` ever to give none for an arg op.
    fn indices_of(op: ReduceOp, indices: Option<Tensor>) -> Result<Tensor> {
        indices.ok_or_else(|| Error::InvalidArgument {
            op: "reduce",
            reason: format!("{} gave no indices", op.name()),
        })
    }

    /// The general reduction: `op` over `dims` (`None`: every element; `Some(&[])`: every
    /// dimension too), keeping reduced dimensions as size 1 when `keepdim`. Returns the values
    /// and, for argmax/argmin, the indices (i64). argmax/argmin take one dimension or all.
    ///
    /// Reduced dimensions that are adjacent in a contiguous tensor are read in place (one
    /// kernel pass and a small combine); otherwise the tensor is first copied with the reduced
    /// dimensions moved last.
    #[track_caller]
    pub fn reduce(
        &self,
        op: ReduceOp,
        dims: Option<&[isize]>,
        keepdim: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let name = op.name();
        if matches!(
            op,
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod
        ) {
            crate::autograd::unsupported(name, &[self])?;
        }
        // The dtypes without reduction kernels reduce exactly in a wider one: integer and bool
        // sums and products in int64 (their result dtype), max/min (and their indices) in
        // int32, converted back; any/all of bools have kernels, as do the other dtypes.
        match (self.dtype(), op) {
            (DType::U8 | DType::I8 | DType::I16 | DType::Bool, ReduceOp::Sum | ReduceOp::Prod) => {
                return self.to_dtype(DType::I64)?.reduce(op, dims, keepdim);
            }
            // (A mean of them is refused by the storage layer, after the arguments' checks.)
            (d @ (DType::U8 | DType::I8 | DType::I16 | DType::Bool), op)
                if !matches!(op, ReduceOp::Mean | ReduceOp::Any | ReduceOp::All) =>
            {
                let (values, indices) = self.to_dtype(DType::I32)?.reduce(op, dims, keepdim)?;
                return Ok((values.to_dtype(d)?, indices));
            }
            _ => {}
        }
        let rank = self.dim();
        let mut reduced = vec![false; rank];
        // A 0-d tensor takes dimension 0 or -1 (PyTorch's rule): reducing it over them reduces
        // its one element.
        let dims = match dims {
            Some(list) if rank == 0 => {
                for &d in list {
                    wrap_dim(name, d as i64, 0)?;
                }
                None
            }
            d => d,
        };
        match dims {
            Some(list) if !list.is_empty() => {
                for &d in list {
                    let i = self.layout().dim(d)?;
                    if std::mem::replace(&mut reduced[i], true) {
                        return Err(Error::InvalidArgument {
                            op: name,
                            reason: format!("dimension {d} appears twice in {list:?}"),
                        });
                    }
                }
            }
            _ => reduced.fill(true),
        }
        let all = reduced.iter().all(|&r| r);
        if op.has_indices() && !all && reduced.iter().filter(|&&r| r).count() != 1 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: "takes one dimension (or none, for the flattened tensor)".into(),
            });
        }
        let shape = self.shape();
        let out_shape: Vec<usize> = shape
            .iter()
            .zip(&reduced)
            .filter_map(|(&s, &r)| match (r, keepdim) {
                (false, _) => Some(s),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        if op.needs_elements() && shape.iter().zip(&reduced).any(|(&s, &r)| r && s == 0) {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "cannot reduce an empty dimension of a tensor of shape {shape:?} (the operation has no identity)"
                ),
            });
        }
        // The reduced dimensions as one run [first, last] of a contiguous tensor, read in
        // place; anything else is first made so (reduced dimensions moved last).
        let first = reduced.iter().position(|&r| r).unwrap_or(rank);
        let last = reduced.iter().rposition(|&r| r).map_or(rank, |l| l + 1);
        let adjacent = reduced[first..last].iter().all(|&r| r);
        let (storage, start, rshape): (Arc<Storage>, usize, ReduceShape) =
            if self.is_contiguous() && adjacent {
                (
                    Arc::clone(self.view.storage()),
                    self.first_element(),
                    line_shape(&shape[..first], &shape[first..last], &shape[last..])?,
                )
            } else {
                let kept: Vec<usize> = (0..rank).filter(|&i| !reduced[i]).collect();
                let perm: Vec<usize> = kept
                    .iter()
                    .copied()
                    .chain((0..rank).filter(|&i| reduced[i]))
                    .collect();
                let moved = self.permute(&perm)?.view.contiguous()?;
                let outer: Vec<usize> = kept.iter().map(|&i| shape[i]).collect();
                let r: Vec<usize> = (0..rank)
                    .filter(|&i| reduced[i])
                    .map(|i| shape[i])
                    .collect();
                (Arc::new(moved), 0, line_shape(&outer, &r, &[])?)
            };
        let out = storage.reduce(op, start, rshape)?;
        let values = Tensor::from_storage(out.values, &out_shape)?;
        let indices = out
            .indices
            .map(|i| Tensor::from_storage(i, &out_shape))
            .transpose()?;
        Ok((values, indices))
    }
}

/// The `[outer, r, inner]` lines of a scan of a contiguous tensor whose sizes are `outer`, then
/// `r` (scanned), then `inner`: no lines when the tensor has no elements (its other sizes may
/// be huge, `[0, 2^32, 2^32]`, and are not multiplied), else [`line_shape`].
pub(crate) fn scan_shape(outer: &[usize], r: &[usize], inner: &[usize]) -> Result<ReduceShape> {
    if r.contains(&0) {
        return Ok(NO_LINES);
    }
    line_shape(outer, r, inner)
}

/// No lines to reduce or scan.
const NO_LINES: ReduceShape = ReduceShape {
    outer: 0,
    r: 0,
    inner: 0,
};

/// The `[outer, r, inner]` lines of a reduction of a contiguous tensor whose sizes are
/// `outer`, then `r` (reduced), then `inner`: the products of each group. Each is a factor of
/// the element count when the tensor has elements; when it has none, the sizes of the other
/// groups may be huge and are not multiplied: no lines when the output is empty too, else
/// lines of length 0 (the output filled with the identity, of a size bounded by the output's
/// checked count).
pub(crate) fn line_shape(outer: &[usize], r: &[usize], inner: &[usize]) -> Result<ReduceShape> {
    if outer.contains(&0) || inner.contains(&0) {
        return Ok(NO_LINES);
    }
    let count = |s: &[usize]| genesis_storage::checked_numel(s);
    Ok(ReduceShape {
        outer: count(outer)?,
        r: count(r)?,
        inner: count(inner)?,
    })
}

impl Tensor {
    /// The vector norm of order `ord` over `dims` (every dimension when empty; PyTorch's
    /// `torch.linalg.vector_norm(x, ord, dim, keepdim)`): `sum(|x|^ord)^(1/ord)`, with
    /// `ord = inf` the largest `|x|`, `-inf` the smallest, `0` the count of nonzero elements.
    /// Float tensors only; float16 and bfloat16 compute in float32 and round once. Its
    /// gradient at a zero vector is zero for `ord = 2` (as PyTorch's), where the square root's
    /// would be NaN.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[3.0f32, -4.0, 0.0, 12.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.vector_norm(2.0, (), false)?.item::<f32>()?, 13.0);
    /// assert_eq!(x.vector_norm(1.0, 1, false)?.to_vec::<f32>()?, [7.0, 12.0]);
    /// assert_eq!(x.vector_norm(f64::INFINITY, 0, true)?.to_vec::<f32>()?, [3.0, 12.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn vector_norm(&self, ord: f64, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let op = "linalg.vector_norm";
        if !self.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{op}: Expected a floating point or complex tensor as input. Got {}",
                    self.dtype()
                ),
            });
        }
        if ord.is_nan() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{op}: the order must be a number, got NaN"),
            });
        }
        let dims = shape_spec(&dims);
        let half = matches!(self.dtype(), DType::F16 | DType::BF16);
        let x = if half {
            self.to_dtype(DType::F32)?
        } else {
            self.clone()
        };
        let a = x.abs()?;
        let norm = if ord == 2.0 {
            // sqrt of the sum of squares, through sqrt(1) where the sum is 0 and then masked,
            // so that a zero vector's gradient is 0 rather than 0 * inf.
            let s = x.mul(&x)?.sum_dim(&dims, keepdim)?;
            let zero = s.eq(0)?;
            Tensor::where_cond(&zero, 1.0, &s)?.sqrt()?.mul(&s.ne(0)?)?
        } else if ord == f64::INFINITY {
            a.amax(&dims, keepdim)?
        } else if ord == f64::NEG_INFINITY {
            a.amin(&dims, keepdim)?
        } else if ord == 0.0 {
            a.ne(0)?.to_dtype(x.dtype())?.sum_dim(&dims, keepdim)?
        } else if ord == 1.0 {
            a.sum_dim(&dims, keepdim)?
        } else if ord < 0.0 {
            a.pow_scalar(ord)?
                .sum_dim(&dims, keepdim)?
                .pow_scalar(1.0 / ord)?
        } else {
            // (sum |x|^p)^(1/p), each power taken of 1 where its base is 0 and then masked
            // (0^p is 0 for p > 0): the gradient is 0 for a zero element (|x|^p for p < 1)
            // and for a zero vector, as PyTorch's, rather than 0 * inf.
            let masked_pow = |t: &Tensor, e: f64| -> Result<Tensor> {
                let zero = t.eq(0)?;
                Tensor::where_cond(&zero, 1.0, t)?
                    .pow_scalar(e)?
                    .mul(&t.ne(0)?)
            };
            let s = masked_pow(&a, ord)?.sum_dim(&dims, keepdim)?;
            masked_pow(&s, 1.0 / ord)?
        };
        if half {
            norm.to_dtype(self.dtype())
        } else {
            Ok(norm)
        }
    }
}
