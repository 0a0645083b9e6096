//! Everyday ops PyTorch users reach for: `clamp`, `prod`, `any`, `all`, `var`,
//! `std`, `cumsum`, `cumprod`, `sort`, `argsort`, `topk`, `gather`, `index_select`, `scatter`,
//! `scatter_add`, `eye`, `linspace`, `logspace`; built from those and the elementwise ops:
//! `isclose`, `allclose`, `lerp`, `outer`, `diff`, the logical ops, `count_nonzero`, `nansum`,
//! `nanmean`, `median`, `bincount`, `meshgrid`, `cross`, `addcmul`, `addcdiv`.

use std::sync::Arc;

use genesis_kernels::gather::{ALONG_MAX_DIMS, Along};
use genesis_storage::{DType, Device, ReduceOp, ReduceShape, Storage};

use crate::args::{Dim, Dims, ScalarValue, checked_scalar, shape_spec, wrap_dim};
use crate::promote::{Participant, result_type_of};
use crate::reduce::{line_shape, scan_shape};
use crate::tensor::{host_scalar, numel_of};
use crate::{Error, Result, Tensor};

/// The reduced view of a tensor: the storage and first element to read, the `[outer, r,
/// inner]` shape and the output shape.
pub(crate) struct Reduction {
    pub(crate) storage: Arc<Storage>,
    pub(crate) start: usize,
    pub(crate) shape: ReduceShape,
    pub(crate) out_shape: Vec<usize>,
}

impl Tensor {
    /// Each element limited to `[min, max]` (PyTorch's `clamp`): `min(max(x, min), max)`, so
    /// `min > max` gives `max` everywhere; either bound may be `None`, not both. The bounds
    /// take part in type promotion as PyTorch's numbers do ([`result_type`](crate::result_type)):
    /// an integer tensor with float bounds gives float32, with integer bounds keeps its dtype.
    /// Each bound is converted exactly to the result dtype (an integer bound stays exact in
    /// int64); a bound that dtype cannot hold is [`Error::ScalarOutOfRange`], as PyTorch's
    /// checked conversion (`uint8` also takes -255..=-1, wrapping). A NaN element stays NaN;
    /// a NaN bound makes every element NaN. `-0.0` is not below `0.0`: `clamp_min(-0.0, 0.0)`
    /// is `-0.0`, as in PyTorch. Bool tensors with bool bounds are refused (PyTorch has no
    /// such kernel). One pass over the elements; the result is a new contiguous tensor.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[-2i32, 0, 5, 9], &[4], Device::Cpu)?;
    /// assert_eq!(x.clamp(Some(0), Some(6))?.to_vec::<i32>()?, [0, 0, 5, 6]);
    /// assert_eq!(x.clamp_min(1)?.to_vec::<i32>()?, [1, 1, 5, 9]);
    /// let f = x.clamp(Some(0.5), None)?; // a float bound: float32, as in PyTorch
    /// assert_eq!(f.dtype(), DType::F32);
    /// assert_eq!(f.to_vec::<f32>()?, [0.5, 0.5, 5.0, 9.0]);
    /// assert!(x.clamp::<i64>(None, None).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn clamp<S: crate::Scalar>(&self, min: Option<S>, max: Option<S>) -> Result<Tensor> {
        self.clamp_recorded("clamp", min.map(|v| v.value()), max.map(|v| v.value()))
    }

    /// [`Tensor::clamp_scalars`], recorded: the gradient passes where `min <= x <= max`.
    fn clamp_recorded(
        &self,
        op: &'static str,
        min: Option<crate::ScalarValue>,
        max: Option<crate::ScalarValue>,
    ) -> Result<Tensor> {
        crate::autograd::op(
            op,
            &[self],
            || self.clamp_scalars(op, min, max),
            |_| {
                let x = crate::autograd::Saved::new(op, self);
                let (lo, hi) = (min.map(|v| v.to_f64()), max.map(|v| v.to_f64()));
                Box::new(move |g, _| {
                    let x = x.get()?;
                    let mut pass = Tensor::ones(x.shape(), g.dtype(), g.device())?;
                    if let Some(lo) = lo {
                        pass = pass.mul(&x.ge_scalar(lo)?.to_dtype(g.dtype())?)?;
                    }
                    if let Some(hi) = hi {
                        pass = pass.mul(&x.le_scalar(hi)?.to_dtype(g.dtype())?)?;
                    }
                    Ok(vec![Some(g.mul(&pass)?)])
                })
            },
        )
    }

    /// `max(x, min)` for each element (PyTorch's `clamp_min`; see [`Tensor::clamp`]).
    #[track_caller]
    pub fn clamp_min(&self, min: impl crate::Scalar) -> Result<Tensor> {
        self.clamp_recorded("clamp_min", Some(min.value()), None)
    }

    /// `min(x, max)` for each element (PyTorch's `clamp_max`; see [`Tensor::clamp`]).
    #[track_caller]
    pub fn clamp_max(&self, max: impl crate::Scalar) -> Result<Tensor> {
        self.clamp_recorded("clamp_max", None, Some(max.value()))
    }

    /// [`Tensor::clamp`] with bounds as numbers.
    pub(crate) fn clamp_scalars(
        &self,
        op: &'static str,
        lo: Option<ScalarValue>,
        hi: Option<ScalarValue>,
    ) -> Result<Tensor> {
        if lo.is_none() && hi.is_none() {
            return Err(Error::InvalidArgument {
                op,
                reason: "at least one of min and max must be given".into(),
            });
        }
        let bounds = [lo, hi];
        let mut parts = vec![Participant::Tensor(self.dtype(), self.dim())];
        parts.extend(bounds.iter().flatten().map(|&v| Participant::Scalar(v)));
        let r = result_type_of(&parts);
        if r == DType::Bool {
            return Err(genesis_storage::Error::UnsupportedDType { op, dtype: r }.into());
        }
        let convert = |v: Option<ScalarValue>| v.map(|v| checked_scalar(op, r, v)).transpose();
        let (lo_s, hi_s) = (convert(lo)?, convert(hi)?);
        if bounds
            .iter()
            .flatten()
            .any(|v| matches!(v, ScalarValue::Float(f) if f.is_nan()))
        {
            return Tensor::full(self.shape(), f64::NAN, self.device())?.cast_to(r);
        }
        // uint8, int8 and int16 have no clamp kernel: int32 holds them and their bounds
        // exactly, so clamping there and converting back is exact.
        let c = if matches!(r, DType::U8 | DType::I8 | DType::I16) {
            DType::I32
        } else {
            r
        };
        let in_c = |s: Option<Storage>| {
            s.map(|s| if c == r { Ok(s) } else { s.to_dtype(c) })
                .transpose()
        };
        let (lo_s, hi_s) = (in_c(lo_s)?, in_c(hi_s)?);
        let x = self.cast_to(c)?;
        let (a, start) = x.dense_operand(x.shape())?;
        let out = a.clamp_with_at(start, x.numel(), lo_s.as_ref(), hi_s.as_ref())?;
        Tensor::from_storage(out, x.shape())?.cast_to(r)
    }

    /// Product of all elements, as a 0-dimensional tensor (the product of nothing is 1).
    /// Floating types accumulate in f32 on the GPU (float64 in f64; every float in f64 on the
    /// CPU) and keep their dtype; integer products wrap and are i64 (PyTorch's rule).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.prod()?.to_vec::<i64>()?, [720]);
    /// assert_eq!(x.prod_dim(1, false)?.to_vec::<i64>()?, [6, 120]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn prod(&self) -> Result<Tensor> {
        crate::autograd::op1(
            "prod",
            self,
            || Ok(self.reduce(ReduceOp::Prod, None, false)?.0),
            || {
                let x = crate::autograd::Saved::new("prod", self);
                move |g: &Tensor| {
                    let x = x.get()?;
                    let flat = x.reshape([-1])?;
                    let others = crate::autograd::product_of_others(&flat, 0)?;
                    others.mul(g)?.reshape(x.shape())
                }
            },
        )
    }

    /// Product over dimension `dim` (negative counts from the end); `keepdim` keeps it as
    /// size 1.
    #[track_caller]
    pub fn prod_dim(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op1(
            "prod",
            self,
            || Ok(self.reduce(ReduceOp::Prod, Some(&[dim]), keepdim)?.0),
            || {
                let x = crate::autograd::Saved::new("prod", self);
                move |g: &Tensor| {
                    let x = x.get()?;
                    if x.dim() == 0 {
                        return Ok(g.clone());
                    }
                    let d = crate::args::wrap_dim("prod", dim as i64, x.dim())?.unwrap_or(0);
                    let g = if keepdim {
                        g.clone()
                    } else {
                        g.unsqueeze(d as isize)?
                    };
                    crate::autograd::product_of_others(&x, d)?.mul(&g)
                }
            },
        )
    }

    /// Whether any element is true (non-zero; NaN counts as true), as a 0-dimensional `Bool`
    /// tensor (`U8` for a `U8` tensor, as PyTorch); false for no elements. A tensor that is not
    /// `Bool` is first compared with 0 (one pass more).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0.0f32, 0.0, 2.0, 0.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.any()?.to_bool_vec()?, [true]);
    /// assert_eq!(x.all()?.to_bool_vec()?, [false]);
    /// assert_eq!(x.any_dim(1, false)?.to_bool_vec()?, [false, true]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn any(&self) -> Result<Tensor> {
        self.as_truth_dtype(self.truth()?.reduce(ReduceOp::Any, None, false)?.0)
    }

    /// Whether every element is true (non-zero), as a 0-dimensional `Bool` tensor (`U8` for a
    /// `U8` tensor); true for no elements (see [`Tensor::any`]).
    #[track_caller]
    pub fn all(&self) -> Result<Tensor> {
        self.as_truth_dtype(self.truth()?.reduce(ReduceOp::All, None, false)?.0)
    }

    /// [`Tensor::any`] over `dims` (negative counts from the end; an empty list means every
    /// dimension); `keepdim` keeps them as size 1.
    #[track_caller]
    pub fn any_dim(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.as_truth_dtype(self.truth()?.reduce(ReduceOp::Any, Some(&dims), keepdim)?.0)
    }

    /// [`Tensor::all`] over `dims` (as [`Tensor::any_dim`]).
    #[track_caller]
    pub fn all_dim(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.as_truth_dtype(self.truth()?.reduce(ReduceOp::All, Some(&dims), keepdim)?.0)
    }

    /// The result of `all` or `any` of this tensor: `Bool`, but `U8` for a `U8` tensor
    /// (PyTorch keeps uint8 there, for its masks of old).
    fn as_truth_dtype(&self, b: Tensor) -> Result<Tensor> {
        if self.dtype() == DType::U8 {
            b.to_dtype(DType::U8)
        } else {
            Ok(b)
        }
    }

    /// This tensor as bools: itself when it is `Bool`, else `self != 0` (NaN is true).
    fn truth(&self) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            Ok(self.clone())
        } else {
            self.ne_scalar(0)
        }
    }

    /// The variance of all elements with PyTorch's `correction` (1: Bessel's, the sample
    /// variance; 0: the population variance), as a 0-dimensional tensor of the same dtype (f64,
    /// f32, f16, bf16): `sum((x - mean)^2) / max(0, n - correction)`. No elements give NaN, as do
    /// `n <= correction` with equal elements (a division by zero otherwise gives infinity).
    /// Computed in one pass with f64 sums of each line shifted by its first element, then
    /// rounded once.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.var(1.0)?.to_vec::<f32>()?, [5.0 / 3.0]);
    /// assert_eq!(x.var_dim(1, 0.0, false)?.to_vec::<f32>()?, [0.25, 0.25]);
    /// assert_eq!(x.std_dim(0, 1.0, true)?.to_vec::<f32>()?, [2f32.sqrt(); 2]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn var(&self, correction: f64) -> Result<Tensor> {
        self.variance(None, correction, false, false)
    }

    /// The variance over `dims` (negative counts from the end; an empty list means every
    /// dimension), `keepdim` keeping them as size 1 (see [`Tensor::var`]).
    #[track_caller]
    pub fn var_dim(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.variance(Some(&dims), correction, keepdim, false)
    }

    /// The standard deviation of all elements: the square root of [`Tensor::var`].
    #[track_caller]
    pub fn std(&self, correction: f64) -> Result<Tensor> {
        self.variance(None, correction, false, true)
    }

    /// The standard deviation over `dims`: the square root of [`Tensor::var_dim`].
    #[track_caller]
    pub fn std_dim(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        let dims = shape_spec(&dims);
        self.variance(Some(&dims), correction, keepdim, true)
    }

    fn variance(
        &self,
        dims: Option<&[isize]>,
        correction: f64,
        keepdim: bool,
        std: bool,
    ) -> Result<Tensor> {
        let name = if std { "std" } else { "var" };
        if !self.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "dtype {} (floating dtypes only: f64, f32, f16, bf16)",
                    self.dtype()
                ),
            });
        }
        if !correction.is_finite() {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!("correction {correction} (a finite number)"),
            });
        }
        crate::autograd::op(
            name,
            &[self],
            || {
                let r = self.reduction(name, dims, keepdim)?;
                let values = r.storage.var(r.start, r.shape, correction, std)?;
                Tensor::from_storage(values, &r.out_shape)
            },
            |out| {
                // d var = 2 (x - mean) / (n - correction); d std = d var / (2 std), 0 where
                // std is 0.
                let x = crate::autograd::Saved::new(name, self);
                let y = crate::autograd::Saved::new(name, out);
                let reduced = crate::autograd::reduced_dims(self, dims).unwrap_or_default();
                let shape = self.shape().to_vec();
                Box::new(move |g, _| {
                    use crate::autograd::spread;
                    let (x, y) = (x.get()?, y.get()?);
                    let n = reduced
                        .iter()
                        .fold(1usize, |n, &d| n.saturating_mul(shape[d]));
                    let keep: Vec<isize> = reduced.iter().map(|&d| d as isize).collect();
                    let centred = x.sub(&x.mean_dim(&keep[..], true)?)?;
                    let g = spread(g, &shape, &reduced, keepdim)?;
                    let d = if std {
                        // 0 where the deviation is 0 (every element equal), as PyTorch, not
                        // 0 / 0.
                        let s = spread(&y, &shape, &reduced, keepdim)?;
                        let d = g.mul(&centred)?.div(&s.mul(n as f64 - correction)?)?;
                        d.masked_fill(&s.eq_scalar(0.0)?, 0.0)?
                    } else {
                        g.mul(&centred)?.mul(2.0 / (n as f64 - correction))?
                    };
                    Ok(vec![Some(d)])
                })
            },
        )
    }

    /// The layout of a reduction over `dims` (as [`Tensor::reduce`]): the reduced dimensions
    /// read in place when they are adjacent in a contiguous tensor, otherwise a copy with them
    /// moved last.
    pub(crate) fn reduction(
        &self,
        name: &'static str,
        dims: Option<&[isize]>,
        keepdim: bool,
    ) -> Result<Reduction> {
        let rank = self.dim();
        let mut reduced = vec![false; rank];
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
        let first = reduced.iter().position(|&r| r).unwrap_or(rank);
        let last = reduced.iter().rposition(|&r| r).map_or(rank, |l| l + 1);
        if self.is_contiguous() && reduced[first..last].iter().all(|&r| r) {
            return Ok(Reduction {
                storage: Arc::clone(self.view.storage()),
                start: self.first_element(),
                shape: line_shape(&shape[..first], &shape[first..last], &shape[last..])?,
                out_shape,
            });
        }
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
        Ok(Reduction {
            storage: Arc::new(moved),
            start: 0,
            shape: line_shape(&outer, &r, &[])?,
            out_shape,
        })
    }

    /// The inclusive prefix sums along dimension `dim` (negative counts from the end; a 0-d
    /// tensor takes 0 or -1), PyTorch's `cumsum`: a new contiguous tensor of the same shape.
    /// Floats (f64, f32, f16, bf16) keep their dtype and accumulate in f32 on the GPU (float64
    /// in f64; every float in f64 on the CPU); integers and bools give i64 (uint8, int8, int16 and
    /// bool converted to i64 first) and wrap. Along the last dimension of a tensor with many rows one pass reads the input once; a strided
    /// tensor is copied first.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<i64>()?, [1, 3, 6, 4, 9, 15]);
    /// assert_eq!(x.cumsum(-2)?.to_vec::<i64>()?, [1, 2, 3, 5, 7, 9]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn cumsum(&self, dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op1(
            "cumsum",
            self,
            || self.scan(false, dim),
            || {
                let dtype = self.dtype();
                // The gradient is the reversed prefix sum of the output's.
                move |g: &Tensor| {
                    if g.dim() == 0 {
                        return Ok(g.clone());
                    }
                    let back = g.flip([dim])?.cumsum(dim)?.flip([dim])?;
                    crate::autograd::cast_grad(back, dtype)
                }
            },
        )
    }

    /// The inclusive prefix products along dimension `dim` (negative counts from the end; a 0-d
    /// tensor takes 0 or -1), PyTorch's `cumprod`: a new contiguous tensor of the same shape.
    /// Floats (f64, f32, f16, bf16) keep their dtype and are multiplied in f32 (float64 in f64)
    /// on every device (in order on the CPU, in a tree on the GPU: the two agree within the
    /// rounding of each running product); integers and bools give i64 (uint8, int8, int16 and
    /// bool converted to i64 first), wrapping like repeated multiplication. A strided tensor
    /// is copied first.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.cumprod(1)?.to_vec::<i64>()?, [1, 2, 6, 4, 20, 120]);
    /// assert_eq!(x.cumprod(-2)?.to_vec::<i64>()?, [1, 2, 3, 4, 10, 18]);
    /// let f = Tensor::from_slice(&[0.5f32, 4.0, -1.0], &[3], Device::Cpu)?;
    /// assert_eq!(f.cumprod(0)?.to_vec::<f32>()?, [0.5, 2.0, -2.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn cumprod(&self, dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op(
            "cumprod",
            &[self],
            || self.scan(true, dim),
            |out| {
                let x = crate::autograd::Saved::new("cumprod", self);
                let y = crate::autograd::Saved::new("cumprod", out);
                Box::new(move |g, _| {
                    let (x, y) = (x.get()?, y.get()?);
                    Ok(vec![Some(crate::autograd::cumprod_grad(&x, &y, g, dim)?)])
                })
            },
        )
    }

    /// `cumsum` (`prod` false) or `cumprod` along `dim`.
    #[track_caller]
    fn scan(&self, prod: bool, dim: isize) -> Result<Tensor> {
        let name = if prod { "cumprod" } else { "cumsum" };
        // uint8, int8, int16 and bool have no scan kernel; their scans are int64 (PyTorch's
        // rule), so they are computed exactly as int64.
        if matches!(
            self.dtype(),
            DType::U8 | DType::I8 | DType::I16 | DType::Bool
        ) {
            return self.to_dtype(DType::I64)?.scan(prod, dim);
        }
        let rank = self.dim();
        let d = wrap_dim(name, dim as i64, rank)?;
        let shape = self.shape().to_vec();
        let rshape = match d {
            None => ReduceShape {
                outer: 1,
                r: 1,
                inner: 1,
            },
            Some(d) => scan_shape(&shape[..d], &shape[d..d + 1], &shape[d + 1..])?,
        };
        let (a, start) = self.dense_operand(&shape)?;
        let out = if prod {
            a.cumprod(start, rshape)?
        } else {
            a.cumsum(start, rshape)?
        };
        Tensor::from_storage(out, &shape)
    }

    /// `(values, indices)` of the elements sorted along `dim` (negative counts from the end),
    /// ascending or `descending` (PyTorch's `sort(dim, descending, stable=True)`): stable, so
    /// equal values keep their order; NaN sorts after every number (first when descending);
    /// -0.0 and +0.0 are equal. Indices are i64 positions along `dim`. Every dtype (uint8, int8,
    /// int16 and bool sort as int32, converted back; false before true). On the GPU, rows of up
    /// to 2048 elements along `dim` sort on chip (one block a row); longer rows sort in chunks
    /// of 2048 that are then merged pairwise through a workspace of 8 bytes an element (16 for
    /// f64 and i64; twice that for rows longer than 4096), one pass per doubling of the run
    /// length. A `dim` other than the last is moved last (a copy) and back.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[3.0f32, 1.0, 2.0, 1.0], &[4], Device::Cpu)?;
    /// let (v, i) = x.sort(0, false)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![1.0, 1.0, 2.0, 3.0], vec![1, 3, 2, 0]));
    /// assert_eq!(x.argsort(-1, true)?.to_vec::<i64>()?, [0, 2, 1, 3]);
    /// let (top, at) = x.topk(2, 0, true, true)?;
    /// assert_eq!((top.to_vec::<f32>()?, at.to_vec::<i64>()?), (vec![3.0, 2.0], vec![0, 2]));
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn sort(&self, dim: impl Dim, descending: bool) -> Result<(Tensor, Tensor)> {
        self.sort_recorded("sort", dim.to_dim() as i64, None, descending)
    }

    /// [`Tensor::sort_keep`], the values recorded (their gradient goes back where they came
    /// from).
    fn sort_recorded(
        &self,
        op: &'static str,
        dim: i64,
        k: Option<usize>,
        descending: bool,
    ) -> Result<(Tensor, Tensor)> {
        if !crate::autograd::wants(&[self]) {
            return self.sort_keep(op, dim, k, descending);
        }
        let (v, i) = crate::no_grad(|| self.sort_keep(op, dim, k, descending))?;
        let d = wrap_dim(op, dim, self.dim())?;
        Ok((crate::autograd::picked(op, self, d, v, &i, true), i))
    }

    /// The sort along `dim` keeping the first `k` of each row along it (all without `k`):
    /// `dim` is moved last (a copy when it is not), the kernels write only what is kept, and
    /// the result is moved back.
    fn sort_keep(
        &self,
        op: &'static str,
        dim: i64,
        k: Option<usize>,
        descending: bool,
    ) -> Result<(Tensor, Tensor)> {
        // uint8, int8, int16 and bool have no sort kernel: int32 holds them exactly and in the
        // same order, so they sort there and are converted back.
        let dtype = self.dtype();
        if matches!(dtype, DType::U8 | DType::I8 | DType::I16 | DType::Bool) {
            let (values, indices) = self
                .to_dtype(DType::I32)?
                .sort_keep(op, dim, k, descending)?;
            return Ok((values.to_dtype(dtype)?, indices));
        }
        let rank = self.dim();
        let d = wrap_dim(op, dim, rank)?;
        let (last, moved) = match d {
            Some(d) if d + 1 != rank => (d, self.transpose(d as isize, -1)?),
            _ => (rank.saturating_sub(1), self.clone()),
        };
        let mut shape = moved.shape().to_vec();
        let r = shape.last().copied().unwrap_or(1);
        let k = k.unwrap_or(r);
        let rows = moved.numel().checked_div(r).unwrap_or(0);
        let (a, start) = moved.dense_operand(&shape)?;
        let (values, indices) = a.sort_rows(start, rows, r, k, descending)?;
        if let Some(l) = shape.last_mut() {
            *l = k;
        }
        let (values, indices) = (
            Tensor::from_storage(values, &shape)?,
            Tensor::from_storage(indices, &shape)?,
        );
        if rank == 0 || last + 1 == rank {
            return Ok((values, indices));
        }
        let back = |t: Tensor| t.transpose(last as isize, -1)?.contiguous();
        Ok((back(values)?, back(indices)?))
    }

    /// The indices (i64) that sort `self` along `dim` (see [`Tensor::sort`]; stable).
    #[track_caller]
    pub fn argsort(&self, dim: impl Dim, descending: bool) -> Result<Tensor> {
        Ok(self.sort(dim, descending)?.1)
    }

    /// `(values, indices)` of the `k` largest (or, without `largest`, smallest) elements along
    /// `dim` (PyTorch's `topk`), in sorted order (`sorted` is accepted for PyTorch's signature;
    /// the result is always sorted), ties in their order along `dim`. `k` larger than the
    /// dimension is an error. Computed as a sort along `dim` whose kernels write only the
    /// first `k` of each row (see [`Tensor::sort`] for speed).
    #[track_caller]
    pub fn topk(
        &self,
        k: usize,
        dim: impl Dim,
        largest: bool,
        sorted: bool,
    ) -> Result<(Tensor, Tensor)> {
        let _ = sorted;
        let rank = self.dim();
        let d = wrap_dim("topk", dim.to_dim() as i64, rank)?;
        let size = d.map_or(1, |d| self.shape()[d]);
        if k > size {
            return Err(Error::InvalidArgument {
                op: "topk",
                reason: format!("k {k} is larger than the dimension's size {size}"),
            });
        }
        // A 0-d tensor is its own single row (k is 0 or 1, as PyTorch's).
        let keep = d.map(|_| k);
        self.sort_recorded("topk", dim.to_dim() as i64, keep, largest)
    }

    /// Values along `dim` picked by `index` (PyTorch's `gather`): `out[i][j][k] =
    /// self[index[i][j][k]][j][k]` for `dim` 0, and so on. `index` is i64 on the same device,
    /// of the same rank, no larger than `self` in the other dimensions; the result has its
    /// shape. An index value outside `0..self.size(dim)` (negative ones included, as PyTorch) is
    /// an error, checked on the device for CUDA tensors before the result is returned (one
    /// synchronisation). Strided tensors are read in place.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// let i = Tensor::from_slice(&[0i64, 0, 1, 0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, [1.0, 1.0, 4.0, 3.0]);
    /// let rows = Tensor::from_slice(&[1i64, 1, 0], &[3], Device::Cpu)?;
    /// assert_eq!(x.index_select(0, &rows)?.to_vec::<f32>()?, [3.0, 4.0, 3.0, 4.0, 1.0, 2.0]);
    /// let z = Tensor::zeros(&[2, 2], genesis::DType::F32, Device::Cpu)?;
    /// assert_eq!(z.scatter_add(1, &i, &x)?.to_vec::<f32>()?, [3.0, 0.0, 4.0, 3.0]);
    /// assert!(x.gather(1, &Tensor::from_slice(&[2i64], &[1, 1], Device::Cpu)?).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn gather(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op(
            "gather",
            &[self],
            || self.gather_raw(dim, index),
            |_| {
                let (shape, dtype) = (self.shape().to_vec(), self.dtype());
                let idx = crate::autograd::Saved::new("gather", index);
                Box::new(move |g, _| {
                    let z = crate::autograd::scatter_back(&shape, dtype, dim, &idx.get()?, g)?;
                    Ok(vec![Some(z)])
                })
            },
        )
    }

    fn gather_raw(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let name = "gather";
        let dim = self.along_dim(name, dim, index)?;
        let rank = self.dim();
        let shape = index.shape().to_vec();
        for d in 0..rank {
            if d != dim && shape[d] > self.shape()[d] {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: self.shape().to_vec(),
                    rhs: shape,
                });
            }
        }
        if rank > 0 && self.shape()[dim] == 0 && index.numel() > 0 {
            return Err(out_of_empty(name, index));
        }
        // Past the kernels' dimensions: the index and the part of `self` it reads, each
        // contiguous, whose dimensions then merge.
        let (index, this) = if rank > ALONG_MAX_DIMS {
            (
                index.contiguous()?,
                along_part(self, &shape, dim)?.contiguous()?,
            )
        } else {
            (index.clone(), self.clone())
        };
        let (index, istart, istrides) = strided_operand(&index)?;
        let (src, sstart, sstrides) = strided_operand(&this)?;
        let d = Along::new(
            &shape,
            dim,
            &istrides,
            &vec![0; rank],
            &sstrides,
            self.shape().get(dim).copied().unwrap_or(1),
        )?;
        Tensor::from_storage(src.gather_along(sstart, &index, istart, &d)?, &shape)
    }

    /// The slices of `self` along `dim` named by the 1-D `index` (i64 or i32, on the same
    /// device), in its order (PyTorch's `index_select`): the result has `self`'s shape with
    /// `index.numel()` at `dim`. Values outside `0..self.size(dim)` are an error naming the
    /// first bad one, negative ones included (they do not count from the end, unlike
    /// indexing), as for [`Tensor::gather`]. Along dimension 0 of a tensor whose rows are
    /// contiguous multiples of 16 bytes, one pass reads the index as it is (on the GPU: one
    /// kernel checks the values and copies the rows).
    #[track_caller]
    pub fn index_select(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op(
            "index_select",
            &[self],
            || self.index_select_raw(dim, index),
            |_| {
                let (shape, dtype) = (self.shape().to_vec(), self.dtype());
                let idx = crate::autograd::Saved::new("index_select", index);
                Box::new(move |g, _| {
                    let idx = idx.get()?.to_dtype(DType::I64)?;
                    let d = crate::args::wrap_dim("index_select", dim as i64, shape.len())?
                        .unwrap_or(0);
                    if g.dim() > 0 && g.dtype() == dtype && dtype.is_float() {
                        if d == 0 {
                            return Ok(vec![Some(rows_by_index(&shape, &idx, g)?)]);
                        }
                        // Along another dimension: the same with it moved first (the
                        // gradient copied in that order, the result copied back).
                        let mut first = shape.clone();
                        first.swap(0, d);
                        let z = rows_by_index(&first, &idx, &g.transpose(0, d as isize)?)?;
                        return Ok(vec![Some(z.transpose(0, d as isize)?.contiguous()?)]);
                    }
                    // Scatter-add the rows back: the index broadcast over the other dimensions.
                    let mut along = vec![1usize; g.dim().max(1)];
                    if g.dim() > 0 {
                        along[d] = idx.numel();
                    }
                    if g.dim() == 0 {
                        return Ok(vec![Some(g.reshape(&shape[..])?)]);
                    }
                    let full = idx.reshape(&along[..])?.expand(g.shape())?;
                    let z = crate::autograd::scatter_back(&shape, dtype, d as isize, &full, g)?;
                    Ok(vec![Some(z)])
                })
            },
        )
    }

    fn index_select_raw(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let name = "index_select";
        if index.dim() > 1 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "the index must be a vector (0-d or 1-D), got one of shape {:?}",
                    index.shape()
                ),
            });
        }
        if self.dim() == 0 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: "the tensor must have at least one dimension, got a 0-d one".into(),
            });
        }
        if !matches!(index.dtype(), DType::I64 | DType::I32) {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!("the index must be int64 or int32, not {}", index.dtype()),
            });
        }
        let dim = wrap_dim(name, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        // An index into a dimension of size 0, where every value is out of range, is refused
        // before the result (of the other dimensions, which may be huge) is allocated.
        if self.shape()[dim] == 0 && index.numel() > 0 {
            return Err(out_of_empty(name, index));
        }
        // An index into a tensor with no elements elsewhere selects nothing, so no kernel
        // reads it: its values are checked here, as PyTorch checks them.
        // (Saturating: the others of an empty tensor may be huge.)
        let others: usize = (0..self.dim())
            .filter(|&d| d != dim)
            .map(|d| self.shape()[d])
            .fold(1usize, |n, d| n.saturating_mul(d));
        if others == 0 && index.numel() > 0 {
            check_index_range(name, &index.cast_to(DType::I64)?, self.shape()[dim])?;
        }
        self.index_select_along(dim, index).map_err(|e| {
            // A bad value is found by the kernel (`gather`) or by the row copy: it is reported
            // as this op's, with its position in the index.
            let out_of_range = matches!(
                e,
                Error::Index(genesis_index::Error::IndexOutOfRange { .. })
                    | Error::Storage(genesis_storage::Error::Kernel(
                        genesis_kernels::Error::IndexOutOfRange { .. }
                    ))
            );
            if !out_of_range {
                return e;
            }
            let size = self.shape()[dim];
            match index
                .cast_to(DType::I64)
                .and_then(|i| check_index_range(name, &i, size))
            {
                Err(named) => named,
                Ok(()) => e,
            }
        })
    }

    fn index_select_along(&self, dim: usize, index: &Tensor) -> Result<Tensor> {
        let name = "index_select";
        // Whole rows of 16-byte multiples with a 1-D index on the tensor's device: one kernel
        // reads the index as it is (i64 or i32), rejects negative and too large values and moves
        // the rows in 16-byte accesses.
        if dim == 0
            && index.dim() == 1
            && let Some(rows) = genesis_index::select_rows(&self.view, &index.view)?
        {
            return Ok(Tensor {
                view: rows,
                autograd: None,
            });
        }
        let index = index.cast_to(DType::I64)?;
        let mut shape = self.shape().to_vec();
        shape[dim] = index.numel();
        let (idx, istart, istrides) = strided_operand(&index)?;
        let mut along = vec![0usize; self.dim()];
        along[dim] = istrides.first().copied().unwrap_or(0);
        let rank = self.dim();
        // Past the kernels' dimensions: `self` contiguous, whose dimensions then merge.
        let this = if rank > ALONG_MAX_DIMS {
            self.contiguous()?
        } else {
            self.clone()
        };
        let (src, sstart, sstrides) = strided_operand(&this)?;
        let d = Along::new(
            &shape,
            dim,
            &along,
            &vec![0; rank],
            &sstrides,
            self.shape()[dim],
        )?;
        let out = if index.device() == self.device() {
            src.gather_along(sstart, &idx, istart, &d)?
        } else {
            return Err(Error::DeviceMismatch {
                op: name,
                lhs: self.device(),
                rhs: index.device(),
            });
        };
        Tensor::from_storage(out, &shape)
    }

    /// A copy of `self` with the values of `src` written along `dim` where `index` points
    /// (PyTorch's out-of-place `scatter`): `out[index[i][j][k]][j][k] = src[i][j][k]` for
    /// `dim` 0, over the positions of `index` (i64, same rank, no larger than `src`, nor than
    /// `self` outside `dim`). When several positions name one element, which value lands is
    /// unspecified on the GPU (the last one on the CPU), as in PyTorch. A bad index value is an
    /// error and `self` is never changed.
    #[track_caller]
    pub fn scatter(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.scatter_recorded("scatter", dim.to_dim(), index, src, false)
    }

    /// An out-of-place scatter, recorded: `src`'s gradient is the output's gathered at
    /// `index`; `self`'s is the output's, zero where `scatter` overwrote (with `add`, all of
    /// it).
    fn scatter_recorded(
        &self,
        name: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        add: bool,
    ) -> Result<Tensor> {
        crate::autograd::op(
            name,
            &[self, src],
            || self.scatter_impl(name, dim, index, src, add),
            |_| {
                let idx = crate::autograd::Saved::new(name, index);
                let (src_shape, src_dtype) = (src.shape().to_vec(), src.dtype());
                let dtype = self.dtype();
                Box::new(move |g, needs| {
                    let idx = idx.get()?;
                    let gs = if needs[0] {
                        let g = if add {
                            g.clone()
                        } else {
                            let zeros = Tensor::zeros(idx.shape(), g.dtype(), g.device())?;
                            g.scatter_impl(name, dim, &idx, &zeros, false)?
                        };
                        Some(crate::autograd::cast_grad(g, dtype)?)
                    } else {
                        None
                    };
                    let gsrc = if needs[1] {
                        // Only the part of `src` that `index` covers was read.
                        let picked = g.gather(dim, &idx)?;
                        let z = Tensor::zeros(&src_shape[..], src_dtype, g.device())?;
                        let region: Vec<isize> = idx.shape().iter().map(|&n| n as isize).collect();
                        let mut view = z.clone();
                        for (d, &n) in region.iter().enumerate() {
                            view = view.narrow(d as isize, 0, n as usize)?;
                        }
                        view.copy_(&picked.to_dtype(src_dtype)?)?;
                        Some(z)
                    } else {
                        None
                    };
                    Ok(vec![gs, gsrc])
                })
            },
        )
    }

    /// A copy of `self` with the values of `src` added along `dim` where `index` points
    /// (PyTorch's out-of-place `scatter_add`; f64, f32, f16, bf16, i64, i32, and i16, i8, u8
    /// summed in int32 and wrapped back, as PyTorch's wrapping sums; bool as "or"), every
    /// contribution counted: on the GPU with atomic adds (float sums depend on their order of arrival), on the
    /// CPU in position order. Arguments as [`Tensor::scatter`].
    #[track_caller]
    pub fn scatter_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.scatter_recorded("scatter_add", dim.to_dim(), index, src, true)
    }

    /// In place: writes the values of `src` along `dim` of `self` where `index` points
    /// (PyTorch's `scatter_`): `self[index[i][j][k]][j][k] = src[i][j][k]` for `dim = 0`, and
    /// likewise for the other dimensions. Arguments and errors as [`Tensor::scatter`]; `self`
    /// may be any view, and every tensor sharing its storage sees the write. Every index value
    /// is checked before anything is written, so a bad one leaves `self` as it was. Where two
    /// positions of `index` name the same element the last one in row-major order wins on the
    /// CPU; on the GPU which one wins is unspecified (as in PyTorch).
    ///
    /// ```
    /// use genesis::{tensor, Tensor};
    /// let x = Tensor::zeros([2, 4], genesis::DType::F32, genesis::Device::Cpu)?;
    /// x.scatter_(1, &tensor!([[3], [0]])?, &tensor!([[1.0], [2.0]])?)?;
    /// assert_eq!(x.to_vec::<f32>()?, [0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<()> {
        let d = dim.to_dim();
        if self.in_place_recorded("scatter_", &[src], |x| x.scatter(d, index, src))? {
            return Ok(());
        }
        self.scatter_in_place("scatter_", d, index, src, false)
    }

    /// In place: adds the values of `src` along `dim` of `self` where `index` points
    /// (PyTorch's `scatter_add_`; f32, f16, bf16, i32, i64), every contribution counted (on the
    /// GPU with atomic adds, so float sums depend on their order of arrival). Arguments and
    /// errors as [`Tensor::scatter_add`]; as [`Tensor::scatter_`], `self` may be a view and is
    /// left as it was when an index value is out of range.
    ///
    /// ```
    /// use genesis::{tensor, Tensor};
    /// let counts = Tensor::zeros([3], genesis::DType::I64, genesis::Device::Cpu)?;
    /// let ones = Tensor::ones([4], genesis::DType::I64, genesis::Device::Cpu)?;
    /// counts.scatter_add_(0, &tensor!([2, 0, 2, 2])?, &ones)?;
    /// assert_eq!(counts.to_vec::<i64>()?, [1, 0, 3]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_add_(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<()> {
        let d = dim.to_dim();
        if self.in_place_recorded("scatter_add_", &[src], |x| x.scatter_add(d, index, src))? {
            return Ok(());
        }
        self.scatter_in_place("scatter_add_", d, index, src, true)
    }

    /// In place: writes the scalar `value` along `dim` of `self` where `index` points
    /// (PyTorch's `scatter_(dim, index, value)`): `self[index[i][j]][j] = value` for `dim = 0`.
    /// `value` must be exact in `self`'s dtype ([`Error::ScalarOutOfRange`] otherwise); the
    /// rest as [`Tensor::scatter_`] (a bad index leaves `self` as it was).
    ///
    /// ```
    /// use genesis::{tensor, DType, Device, Tensor};
    /// // One-hot rows from class labels.
    /// let onehot = Tensor::zeros([3, 4], DType::F32, Device::Cpu)?;
    /// onehot.scatter_scalar_(1, &tensor!([[2], [0], [3]])?, 1.0)?;
    /// assert_eq!(onehot.sum()?.item::<f32>()?, 3.0);
    /// assert_eq!(onehot.to_vec::<f32>()?[2], 1.0);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_scalar_(
        &self,
        dim: impl Dim,
        index: &Tensor,
        value: impl crate::Scalar,
    ) -> Result<()> {
        let src = self.scatter_scalar_source("scatter_", index, value)?;
        self.scatter_in_place("scatter_", dim.to_dim(), index, &src, false)
    }

    /// A copy of `self` with the scalar `value` written along `dim` where `index` points
    /// (PyTorch's out-of-place `scatter(dim, index, value)`); see [`Tensor::scatter_scalar_`].
    #[track_caller]
    pub fn scatter_scalar(
        &self,
        dim: impl Dim,
        index: &Tensor,
        value: impl crate::Scalar,
    ) -> Result<Tensor> {
        let src = self.scatter_scalar_source("scatter", index, value)?;
        self.scatter_impl("scatter", dim.to_dim(), index, &src, false)
    }

    /// `value` in `self`'s dtype on its device, broadcast (stride 0) to `index`'s shape.
    fn scatter_scalar_source(
        &self,
        name: &'static str,
        index: &Tensor,
        value: impl crate::Scalar,
    ) -> Result<Tensor> {
        let one = self.scalar_tensor_like(name, value.value())?;
        one.reshape(vec![1isize; index.dim()])?
            .expand(index.shape())
    }

    fn scatter_in_place(
        &self,
        name: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        add: bool,
    ) -> Result<()> {
        let (d, shape) = self.scatter_checks(name, dim, index, src)?;
        let size = self.shape().get(d).copied().unwrap_or(1);
        check_index_range(name, index, size)?;
        self.scatter_in_range(name, d, &shape, index, src, add)
    }

    /// `scatter_` of an index known to lie in range (a permutation of the dimension's
    /// positions, say): no reductions to check it first. A value out of range is still
    /// never written (the kernels check each), but `self` is then left part-written.
    pub(crate) fn scatter_known_in_range_(
        &self,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<()> {
        let (d, shape) = self.scatter_checks("scatter_", dim, index, src)?;
        self.scatter_in_range("scatter_", d, &shape, index, src, false)
    }

    /// The scatter of [`Tensor::scatter_in_place`] once its arguments are checked.
    fn scatter_in_range(
        &self,
        name: &'static str,
        d: usize,
        shape: &[usize],
        index: &Tensor,
        src: &Tensor,
        add: bool,
    ) -> Result<()> {
        let dim = d as isize;
        let size = self.shape().get(d).copied().unwrap_or(1);
        if add && narrow_int(self.dtype()) {
            return self.copy_(&self.scatter_add_wide(name, dim, index, src)?);
        }
        let strides = match unsigned_strides(self) {
            Some(st) if self.dim() <= ALONG_MAX_DIMS => st,
            // A view with a negative stride, or of more dimensions than the kernels take:
            // scattered into a copy, which is then written back.
            _ => {
                let out = self.scatter_impl(name, dim, index, src, add)?;
                return self.copy_(&out);
            }
        };
        let (idx, istart, istrides) = strided_operand(index)?;
        let (vals, vstart, vstrides) = strided_operand(src)?;
        let d = Along::new(shape, d, &istrides, &vstrides, &strides, size)?;
        self.view.storage().scatter_along_shared(
            self.layout(),
            add,
            &idx,
            istart,
            &vals,
            vstart,
            &d,
        )?;
        Ok(())
    }

    /// The out-of-place scatter-add of a narrow integer `self` (uint8, int8, int16), which has
    /// no kernel: computed in int32, whose sums wrap modulo 2^32, so converting them back
    /// gives the narrow type's wrapping sums exactly.
    fn scatter_add_wide(
        &self,
        name: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<Tensor> {
        let wide = self.to_dtype(DType::I32)?;
        wide.scatter_impl(name, dim, index, &src.to_dtype(DType::I32)?, true)?
            .to_dtype(self.dtype())
    }

    /// The checks shared by the scatters: `dim` wrapped, `src` of `self`'s dtype and device
    /// and rank, `index` no larger than `src` anywhere nor than `self` off `dim`. Returns `dim`
    /// and the iteration shape (`index`'s).
    fn scatter_checks(
        &self,
        name: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<(usize, Vec<usize>)> {
        let dim = self.along_dim(name, dim, index)?;
        self.check_operands(name, src)?;
        let rank = self.dim();
        if src.dim() != rank {
            return Err(Error::ShapeMismatch {
                op: name,
                lhs: src.shape().to_vec(),
                rhs: index.shape().to_vec(),
            });
        }
        let shape = index.shape().to_vec();
        for d in 0..rank {
            if shape[d] > src.shape()[d] || (d != dim && shape[d] > self.shape()[d]) {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: self.shape().to_vec(),
                    rhs: shape,
                });
            }
        }
        Ok((dim, shape))
    }

    fn scatter_impl(
        &self,
        name: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        add: bool,
    ) -> Result<Tensor> {
        let (d, shape) = self.scatter_checks(name, dim, index, src)?;
        if add && narrow_int(self.dtype()) {
            return self.scatter_add_wide(name, dim, index, src);
        }
        if add && self.dtype() == DType::Bool {
            // PyTorch's bool addition is "or": the int32 sums, then whether each is non-zero.
            let wide = self.to_dtype(DType::I32)?;
            return wide
                .scatter_impl(name, dim, index, &src.to_dtype(DType::I32)?, true)?
                .ne_scalar(0);
        }
        let dim = d;
        let mut out = self.view.contiguous()?;
        // Past the kernels' dimensions: the index and the part of `src` it reads, each
        // contiguous, whose dimensions then merge (with the output's where the index spans it).
        let (index, src) = if self.dim() > ALONG_MAX_DIMS {
            let part = along_part(src, &shape, usize::MAX)?;
            (index.contiguous()?, part.contiguous()?)
        } else {
            (index.clone(), src.clone())
        };
        let (idx, istart, istrides) = strided_operand(&index)?;
        let (vals, vstart, vstrides) = strided_operand(&src)?;
        let d = Along::new(
            &shape,
            dim,
            &istrides,
            &vstrides,
            &contiguous_strides(self.shape()),
            self.shape().get(dim).copied().unwrap_or(1),
        )?;
        out.scatter_along(0, add, &idx, istart, &vals, vstart, &d)?;
        Tensor::from_storage(out, self.shape())
    }

    /// `dim` of `self` for an op with an i64 `index` of the same rank and device.
    fn along_dim(&self, name: &'static str, dim: impl Dim, index: &Tensor) -> Result<usize> {
        if index.dtype() != DType::I64 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!("index of dtype {} (i64)", index.dtype()),
            });
        }
        self.check_device(name, index)?;
        if index.dim() != self.dim() {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "index of {} dimension(s) for a tensor of {}",
                    index.dim(),
                    self.dim()
                ),
            });
        }
        Ok(wrap_dim(name, dim.to_dim() as i64, self.dim())?.unwrap_or(0))
    }

    /// The `n x m` identity matrix (`m` defaults to `n`): ones on the main diagonal, zeros
    /// elsewhere, of any dtype (`Bool`: true on the diagonal). Built on the host and copied to
    /// `device`.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let e = Tensor::eye(2, Some(3), DType::I64, Device::Cpu)?;
    /// assert_eq!(e.to_vec::<i64>()?, [1, 0, 0, 0, 1, 0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn eye(n: usize, m: Option<usize>, dtype: DType, device: Device) -> Result<Tensor> {
        let m = m.unwrap_or(n);
        let len = numel_of("eye", &[n, m])?;
        let mut s = Storage::zeros(len, dtype, Device::Cpu)?;
        let one = host_scalar("eye", dtype, 1.0)?.to_bytes()?;
        let es = one.len();
        let bytes = s.host_bytes_mut()?;
        for i in 0..n.min(m) {
            let at = (i * m + i) * es;
            bytes[at..at + es].copy_from_slice(&one);
        }
        Tensor::from_storage(on_device(s, device)?, &[n, m])
    }

    /// `steps` values evenly spaced from `start` to `end` inclusive (PyTorch's `linspace`):
    /// `start + i * step` for the first half and `end - (steps - 1 - i) * step` for the
    /// second, `step = (end - start) / (steps - 1)`, computed in f64 and rounded once to
    /// `dtype` (integer dtypes: `start` and `end` truncated toward zero first, as PyTorch, and
    /// each value truncated; every value must be representable). Built on the host and copied
    /// to `device`.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::linspace(0.0, 1.0, 5, DType::F32, Device::Cpu)?;
    /// assert_eq!(x.to_vec::<f32>()?, [0.0, 0.25, 0.5, 0.75, 1.0]);
    /// let y = Tensor::logspace(0.0, 2.0, 3, 10.0, DType::F32, Device::Cpu)?;
    /// assert_eq!(y.to_vec::<f32>()?, [1.0, 10.0, 100.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        Self::spaced("linspace", start, end, steps, None, dtype, device)
    }

    /// `base` raised to each of [`Tensor::linspace`]`(start, end, steps)` (PyTorch's
    /// `logspace`), computed in f64 and rounded once to `dtype`.
    #[track_caller]
    pub fn logspace(
        start: f64,
        end: f64,
        steps: usize,
        base: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        Self::spaced("logspace", start, end, steps, Some(base), dtype, device)
    }

    fn spaced(
        op: &'static str,
        start: f64,
        end: f64,
        steps: usize,
        base: Option<f64>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        if !start.is_finite() || !end.is_finite() || base.is_some_and(|b| !b.is_finite()) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("start {start}, end {end} (finite numbers)"),
            });
        }
        if dtype == DType::Bool {
            return Err(Error::InvalidArgument {
                op,
                reason: "not implemented for bool".into(),
            });
        }
        numel_of(op, &[steps])?;
        // As PyTorch: an integer dtype takes `start` and `end` as its own values first
        // (truncated toward zero), and the points from those; one point is `start` as given.
        let given = start;
        let (start, end) = if dtype.is_float() {
            (start, end)
        } else {
            (start.trunc(), end.trunc())
        };
        let mut values = Storage::zeros(steps, DType::F64, Device::Cpu)?;
        let out = values.as_mut_slice::<f64>()?;
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let half = steps / 2;
        for (i, v) in out.iter_mut().enumerate() {
            // linspace: fused multiply-adds, as PyTorch's vectorised CPU kernel computes them
            // (an integer result truncates `7 - 3 (10 / 6)` from just below 2: PyTorch's
            // `linspace(-3, 7.5, 7, dtype=int64)` is [-3, -1, 0, 1, 3, 5, 7]). logspace: a
            // product, rounded, then the sum, as PyTorch's serial kernel (its `logspace(1, -1,
            // 7, dtype=int16)` has 10^(-1 - 3 (-2 / 6)) = 10^0 = 1 in the middle, where a
            // fused multiply-add gives an exponent just below 0 and the point 0).
            let x = match (base.is_some(), i < half) {
                (false, true) => step.mul_add(i as f64, start),
                (false, false) => (-step).mul_add((steps - 1 - i) as f64, end),
                (true, true) => start + step * i as f64,
                (true, false) => end - step * (steps - 1 - i) as f64,
            };
            let x = if steps == 1 { given } else { x };
            let x = base.map_or(x, |b| b.powf(x));
            let x = if dtype.is_float() { x } else { x.trunc() };
            if host_scalar(op, dtype, x).is_err() {
                return Err(Error::ScalarOutOfRange {
                    op,
                    value: x,
                    dtype,
                });
            }
            *v = x;
        }
        let s = values.to_dtype(dtype)?;
        Tensor::from_storage(on_device(s, device)?, &[steps])
    }
}

/// A tensor's storage, first element and strides for reading it in place (non-negative
/// strides), or a contiguous copy's.
/// uint8, int8 and int16: the integers without a scatter-add kernel.
fn narrow_int(dtype: DType) -> bool {
    matches!(dtype, DType::U8 | DType::I8 | DType::I16)
}

/// The error of a non-empty `index` into a dimension of size 0, where every value is out of
/// range: its first value names it, read alone (the index may be a huge broadcast view). Found
/// before the result is allocated, which the other dimensions may make huge.
fn out_of_empty(op: &'static str, index: &Tensor) -> Error {
    let first = (0..index.dim())
        .try_fold(index.clone(), |t, d| t.narrow(d as isize, 0, 1))
        .and_then(|t| t.cast_to(DType::I64)?.to_vec::<i64>());
    match first {
        Ok(v) => genesis_storage::Error::Kernel(genesis_kernels::Error::IndexOutOfRange {
            op,
            position: 0,
            value: v.first().copied().unwrap_or(0),
            size: 0,
        })
        .into(),
        Err(e) => e,
    }
}

/// Checks that every value of the i64 `index` lies in `0..size` (two reductions read back);
/// the first bad one in row-major order is the error, as the kernels report it.
pub(crate) fn check_index_range(op: &'static str, index: &Tensor, size: usize) -> Result<()> {
    if index.numel() == 0 {
        return Ok(());
    }
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let (lo, hi) = index.int_bounds()?;
    if lo >= 0 && hi < size {
        return Ok(());
    }
    let values = index.to_vec::<i64>()?;
    let (position, &value) = values
        .iter()
        .enumerate()
        .find(|(_, v)| !(0..size).contains(*v))
        .unwrap_or((0, &lo));
    Err(
        genesis_storage::Error::Kernel(genesis_kernels::Error::IndexOutOfRange {
            op,
            position,
            value,
            size,
        })
        .into(),
    )
}

/// `t`'s strides when none is negative.
fn unsigned_strides(t: &Tensor) -> Option<Vec<usize>> {
    t.strides()
        .iter()
        .map(|&s| usize::try_from(s).ok())
        .collect()
}

/// `t` narrowed to `shape` in every dimension but `dim` (all of them for `usize::MAX`): the
/// part an op along `dim` over an iteration of `shape` reads.
fn along_part(t: &Tensor, shape: &[usize], dim: usize) -> Result<Tensor> {
    let mut part = t.detach();
    for (d, &n) in shape.iter().enumerate() {
        if d != dim && part.shape()[d] != n {
            part = part.narrow(d as isize, 0, n)?;
        }
    }
    Ok(part)
}

fn strided_operand(t: &Tensor) -> Result<(Arc<Storage>, usize, Vec<usize>)> {
    match unsigned_strides(t) {
        Some(s) => Ok((Arc::clone(t.view.storage()), t.first_element(), s)),
        None => Ok((
            Arc::new(t.view.contiguous()?),
            0,
            contiguous_strides(t.shape()),
        )),
    }
}

/// Row-major strides of `shape` (saturating: a shape with no elements may have a huge
/// dimension, and then no stride is used).
fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// A host storage moved to `device` (kept when it is the CPU).
fn on_device(s: Storage, device: Device) -> Result<Storage> {
    Ok(if device == Device::Cpu {
        s
    } else {
        s.to_device(device)?
    })
}

/// The gradient of `index_select` along dimension 0 (an embedding's; other dimensions are
/// moved first): the rows of `g` (`[n, ...]`) summed into the source's rows (`shape`) by the
/// index's values, deterministically:
/// the index sorted (stable), then each source row's gradient summed in the order of the
/// positions that chose it, in f32 (f64 for f64), with no atomics
/// (`Storage::rows_by_key`): the same bits on the CPU and the GPU, run after run.
fn rows_by_index(shape: &[usize], idx: &Tensor, g: &Tensor) -> Result<Tensor> {
    let n = idx.numel();
    let cols = g.shape()[1..]
        .iter()
        .fold(1usize, |n, &d| n.saturating_mul(d));
    let (keys, perm) = idx.reshape([-1])?.sort(0, false)?;
    let g = g.contiguous()?;
    let plan = genesis_kernels::gather::RowsByKey {
        n,
        cols,
        in_rows: n,
        out_rows: shape[0],
    };
    fn at(t: &Tensor) -> (&genesis_storage::Storage, usize) {
        (t.view.storage().as_ref(), t.layout().offset())
    }
    let (gs, g0) = at(&g);
    let out = gs.rows_by_key(g0, &plan, at(&keys), at(&perm))?;
    Tensor::from_storage(out, shape)
}

/// Ops built from the others (each recorded by autograd through the ops it calls):
/// closeness, interpolation, outer products and differences.
impl Tensor {
    /// Where `self` and `other` are close (PyTorch's `isclose`): equal (infinities of one
    /// sign included), or `|self - other| <= atol + rtol * |other|` with that difference
    /// finite, or, with `equal_nan`, both NaN. The two broadcast together and must have one
    /// dtype; `rtol` and `atol` must not be negative. A `Bool` tensor.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, f32::NAN, f32::INFINITY], &[4], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1.0f32 + 1e-7, 2.1, f32::NAN, f32::INFINITY], &[4], Device::Cpu)?;
    /// assert_eq!(a.isclose(&b, 1e-5, 1e-8, false)?.to_bool_vec()?, [true, false, false, true]);
    /// assert_eq!(a.isclose(&b, 1e-5, 1e-8, true)?.to_bool_vec()?, [true, false, true, true]);
    /// assert!(!a.allclose(&b, 1e-5, 1e-8, true)?);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn isclose(&self, other: &Tensor, rtol: f64, atol: f64, equal_nan: bool) -> Result<Tensor> {
        let op = "isclose";
        if self.dtype() != other.dtype() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{op}(): expected both inputs to have same dtype, but input has {} and \
                     other has {}",
                    self.dtype(),
                    other.dtype()
                ),
            });
        }
        if !(rtol >= 0.0 && atol >= 0.0) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{op}(): rtol and atol must be non-negative, got rtol={rtol}, atol={atol}"
                ),
            });
        }
        crate::autograd::no_grad(|| {
            let mut close = self.eq(other)?;
            if equal_nan && self.dtype().is_float() {
                close = close.maximum(&self.isnan()?.mul(&other.isnan()?)?)?;
            }
            if rtol == 0.0 && atol == 0.0 {
                return Ok(close);
            }
            let (a, b) = if self.dtype() == DType::Bool {
                (self.to_dtype(DType::F32)?, other.to_dtype(DType::F32)?)
            } else {
                (self.clone(), other.clone())
            };
            let allowed = b.mul(rtol)?.abs()?.add(atol)?;
            let actual = a.sub(&b)?.abs()?;
            let within = actual.isfinite()?.mul(&actual.le(&allowed)?)?;
            close.maximum(&within)
        })
    }

    /// Whether every element of `self` is close to `other`'s ([`Tensor::isclose`], PyTorch's
    /// `allclose`); reads the answer back to the host.
    #[track_caller]
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64, equal_nan: bool) -> Result<bool> {
        self.isclose(other, rtol, atol, equal_nan)?
            .all()?
            .item::<bool>()
    }

    /// The linear interpolation `self + weight * (end - self)` (PyTorch's `lerp` with a
    /// number weight), computed as `end - (end - self) * (1 - weight)` for `weight >= 0.5`, as
    /// PyTorch does, so that weight 1 gives `end` exactly. `self` and `end` must be floats
    /// of one dtype; they broadcast together.
    #[track_caller]
    pub fn lerp(&self, end: &Tensor, weight: f64) -> Result<Tensor> {
        lerp_check(self, end)?;
        let diff = end.sub(self)?;
        if weight.abs() < 0.5 {
            self.add(&diff.mul(weight)?)
        } else {
            end.sub(&diff.mul(1.0 - weight)?)
        }
    }

    /// [`Tensor::lerp`] with a tensor of weights (of `self`'s dtype), broadcast with the two.
    #[track_caller]
    pub fn lerp_tensor(&self, end: &Tensor, weight: &Tensor) -> Result<Tensor> {
        lerp_check(self, end)?;
        if weight.dtype() != self.dtype() {
            return Err(Error::InvalidArgument {
                op: "lerp",
                reason: format!(
                    "expected dtype {} for `weight` but got dtype {}",
                    self.dtype(),
                    weight.dtype()
                ),
            });
        }
        let diff = end.sub(self)?;
        let low = self.add(&diff.mul(weight)?)?;
        let high = end.sub(&diff.mul(&weight.neg()?.add(1.0)?)?)?;
        Tensor::where_cond(&weight.abs()?.lt(0.5)?, &low, &high)
    }

    /// The outer product of two 1-D tensors (PyTorch's `outer`): `[n, m]` with element
    /// `(i, j)` `self[i] * other[j]`, in the promoted dtype.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1i64, 2, 3], &[3], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[10i64, 20], &[2], Device::Cpu)?;
    /// assert_eq!(a.outer(&b)?.to_vec::<i64>()?, [10, 20, 20, 40, 30, 60]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        for (name, t) in [("self", self), ("vec2", other)] {
            if t.dim() != 1 {
                return Err(Error::InvalidArgument {
                    op: "outer",
                    reason: format!("outer: Expected 1-D argument {name}, but got {}-D", t.dim()),
                });
            }
        }
        self.unsqueeze(1)?.mul(&other.unsqueeze(0)?)
    }

    /// The `n`-th forward difference along `dim` (PyTorch's `diff`): `out[i] = x[i + 1] -
    /// x[i]`, applied `n` times, after `prepend` and `append` (tensors of `self`'s rank and
    /// dtype, the same shape but along `dim`) are joined before and after. Bools give their
    /// `!=` (PyTorch's logical xor). `n = 0` returns the input itself, as PyTorch (prepend and
    /// append checked, not joined).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 4, 9, 16], &[4], Device::Cpu)?;
    /// assert_eq!(x.diff(1, -1, None, None)?.to_vec::<i64>()?, [3, 5, 7]);
    /// assert_eq!(x.diff(2, 0, None, None)?.to_vec::<i64>()?, [2, 2]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn diff(
        &self,
        n: usize,
        dim: impl Dim,
        prepend: Option<&Tensor>,
        append: Option<&Tensor>,
    ) -> Result<Tensor> {
        let op = "diff";
        if self.dim() == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "diff expects input to be at least one-dimensional".into(),
            });
        }
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        let mut parts: Vec<&Tensor> = Vec::new();
        for (name, t) in [("prepend", prepend), ("append", append)] {
            if let Some(t) = t
                && t.dim() != self.dim()
            {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!(
                        "diff expects {name} or its broadcast to have the same number of \
                         dimensions as input, got {} and {}",
                        t.dim(),
                        self.dim()
                    ),
                });
            }
        }
        // As PyTorch: no difference taken is the input itself, prepend and append unused.
        if n == 0 {
            return Ok(self.clone());
        }
        if let Some(p) = prepend {
            parts.push(p);
        }
        parts.push(self);
        if let Some(a) = append {
            parts.push(a);
        }
        let mut x = if parts.len() == 1 {
            self.clone()
        } else {
            Tensor::cat(&parts, d as isize)?
        };
        if x.numel() == 0 {
            // Each difference shortens the dimension by one, and there is nothing to subtract:
            // the result at once (a dimension of 2^62 was walked one difference at a time).
            let len = x.shape()[d];
            return x.narrow(d, 0, len - n.min(len));
        }
        for _ in 0..n {
            let len = x.shape()[d];
            if len == 0 {
                break;
            }
            let (hi, lo) = (x.narrow(d, 1, len - 1)?, x.narrow(d, 0, len - 1)?);
            x = if x.dtype() == DType::Bool {
                hi.ne(&lo)?
            } else {
                hi.sub(&lo)?
            };
        }
        Ok(x)
    }
}

/// `lerp`'s operands: floats of one dtype.
fn lerp_check(a: &Tensor, end: &Tensor) -> Result<()> {
    if a.dtype() != end.dtype() || !a.dtype().is_float() {
        return Err(Error::InvalidArgument {
            op: "lerp",
            reason: format!(
                "expected `self` and `end` to be floats of one dtype, got {} and {}",
                a.dtype(),
                end.dtype()
            ),
        });
    }
    Ok(())
}

/// Logical ops, counts that skip NaN, the median and `bincount`, built from the other ops.
impl Tensor {
    /// `self != 0 && other != 0` elementwise (PyTorch's `logical_and`): a `Bool` tensor of the
    /// broadcast shape, for operands of any dtypes (NaN counts as true).
    #[track_caller]
    pub fn logical_and(&self, other: &Tensor) -> Result<Tensor> {
        self.truth()?.mul(&other.truth()?)
    }

    /// `self != 0 || other != 0` elementwise (PyTorch's `logical_or`).
    #[track_caller]
    pub fn logical_or(&self, other: &Tensor) -> Result<Tensor> {
        self.truth()?.maximum(&other.truth()?)
    }

    /// `(self != 0) != (other != 0)` elementwise (PyTorch's `logical_xor`).
    #[track_caller]
    pub fn logical_xor(&self, other: &Tensor) -> Result<Tensor> {
        self.truth()?.ne(&other.truth()?)
    }

    /// `self == 0` elementwise (PyTorch's `logical_not`): a `Bool` tensor.
    #[track_caller]
    pub fn logical_not(&self) -> Result<Tensor> {
        self.eq(0)
    }

    /// The number of nonzero elements over `dims` (every dimension when empty; PyTorch's
    /// `count_nonzero`): int64.
    #[track_caller]
    pub fn count_nonzero(&self, dims: impl Dims) -> Result<Tensor> {
        self.truth()?.to_dtype(DType::I64)?.sum_dim(dims, false)
    }

    /// The sum over `dims` (every dimension when empty) with NaN taken as zero (PyTorch's
    /// `nansum`); integers as [`Tensor::sum_dim`].
    #[track_caller]
    pub fn nansum(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return self.sum_dim(dims, keepdim);
        }
        let dims = crate::args::shape_spec(&dims);
        // The gradient is PyTorch's `g * !isnan(x)`: a product, so a gradient that is not
        // finite (`nanmean` of NaNs only divides by a count of 0) gives NaN at NaN elements too.
        crate::autograd::op(
            "nansum",
            &[self],
            || Tensor::where_cond(&self.isnan()?, 0, self)?.sum_dim(&dims, keepdim),
            |_| {
                let x = crate::autograd::Saved::new("nansum", self);
                let reduced = crate::autograd::reduced_dims(self, Some(&dims)).unwrap_or_default();
                let shape = self.shape().to_vec();
                Box::new(move |g, _| {
                    let x = x.get()?;
                    let g = crate::autograd::spread(g, &shape, &reduced, keepdim)?;
                    let kept = x.isnan()?.logical_not()?.to_dtype(g.dtype())?;
                    Ok(vec![Some(g.mul(&kept)?)])
                })
            },
        )
    }

    /// The mean over `dims` (every dimension when empty) of the elements that are not NaN
    /// (PyTorch's `nanmean`; NaN where all are NaN). Floats only.
    #[track_caller]
    pub fn nanmean(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op: "nanmean",
                reason: format!(
                    "nanmean(): expected input to have floating point dtype but got {}",
                    self.dtype()
                ),
            });
        }
        let dims = crate::args::shape_spec(&dims);
        let kept = self.isnan()?.logical_not()?;
        let count = kept.to_dtype(self.dtype())?.sum_dim(&dims, keepdim)?;
        self.nansum(&dims, keepdim)?.div(&count)
    }

    /// The median of all elements (PyTorch's `median()`): the lower of the two middle values
    /// for an even count, NaN when any element is NaN; an error for an empty tensor. A 0-d
    /// tensor, without a synchronisation.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[4.0f32, 1.0, 3.0, 2.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.median()?.item::<f32>()?, 2.0);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn median(&self) -> Result<Tensor> {
        let n = self.numel();
        if n == 0 {
            return Err(Error::InvalidArgument {
                op: "median",
                reason: "median() input tensor cannot be empty".into(),
            });
        }
        let (sorted, _) = self.ravel()?.sort(0, false)?;
        let mid = sorted.narrow(0, (n - 1) / 2, 1)?;
        let value = if self.dtype().is_float() {
            // NaN sorts last: the last element says whether there is one.
            let last = sorted.narrow(0, n - 1, 1)?;
            Tensor::where_cond(&last.isnan()?, &last, &mid)?
        } else {
            mid
        };
        value.reshape(&[] as &[isize])
    }

    /// How often each value occurs in a 1-D tensor of non-negative integers (PyTorch's
    /// `bincount` without weights): int64 counts of `max(largest + 1, minlength)` bins. Reads
    /// the largest value back to size the result (a synchronisation on the GPU).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 3, 1, 0], &[4], Device::Cpu)?;
    /// assert_eq!(x.bincount(0)?.to_vec::<i64>()?, [1, 2, 0, 1]);
    /// assert_eq!(x.bincount(6)?.to_vec::<i64>()?, [1, 2, 0, 1, 0, 0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn bincount(&self, minlength: usize) -> Result<Tensor> {
        let bad = || Error::InvalidArgument {
            op: "bincount",
            reason: "bincount only supports 1-d non-negative integral inputs.".into(),
        };
        let integral = matches!(
            self.dtype(),
            DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64
        );
        if self.dim() != 1 || !integral {
            return Err(bad());
        }
        if self.numel() == 0 {
            return Tensor::zeros([minlength], DType::I64, self.device());
        }
        let x = self.to_dtype(DType::I64)?;
        let (lo, hi) = x.int_bounds()?;
        if lo < 0 {
            return Err(bad());
        }
        let bins = usize::try_from(hi).map_err(|_| bad())? + 1;
        let counts = Tensor::zeros([bins.max(minlength)], DType::I64, self.device())?;
        let ones = Tensor::ones([x.numel()], DType::I64, self.device())?;
        counts.scatter_add_(0, &x, &ones)?;
        Ok(counts)
    }
}

/// Grids, cross products and the fused multiply-adds of optimisers, built from the other ops.
impl Tensor {
    /// Coordinate grids of 1-D (or 0-D) tensors (PyTorch's `meshgrid`): with `indexing`
    /// `"ij"`, tensor `k` of the result has shape `[n0, n1, ...]` and varies along dimension
    /// `k`; with `"xy"` the first two dimensions are swapped (NumPy's default). Each result is
    /// a broadcast view of its input (no copy). The inputs must share a dtype and device.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 2, 3], &[3], Device::Cpu)?;
    /// let y = Tensor::from_slice(&[10i64, 20], &[2], Device::Cpu)?;
    /// let g = Tensor::meshgrid(&[&x, &y], "ij")?;
    /// assert_eq!(g[0].shape(), &[3, 2]);
    /// assert_eq!(g[1].contiguous()?.to_vec::<i64>()?, [10, 20, 10, 20, 10, 20]);
    /// assert_eq!(Tensor::meshgrid(&[&x, &y], "xy")?[0].shape(), &[2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn meshgrid(tensors: &[&Tensor], indexing: &str) -> Result<Vec<Tensor>> {
        let op = "meshgrid";
        let bad = |reason: String| Error::InvalidArgument { op, reason };
        let Some(first) = tensors.first() else {
            return Err(bad("torch.meshgrid: Expects a non-empty TensorList".into()));
        };
        let xy = match indexing {
            "ij" => false,
            "xy" => true,
            other => {
                return Err(bad(format!(
                    "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {other}"
                )));
            }
        };
        for t in tensors {
            if t.dim() > 1 {
                return Err(bad(format!(
                    "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {}-D",
                    t.dim()
                )));
            }
            if t.dtype() != first.dtype() || t.device() != first.device() {
                return Err(bad(
                    "torch.meshgrid: Expected all tensors in the tensor list to have the same \
                     dtype and device"
                        .into(),
                ));
            }
        }
        let swap = xy && tensors.len() >= 2;
        let mut shape: Vec<usize> = tensors.iter().map(|t| t.numel()).collect();
        if swap {
            shape.swap(0, 1);
        }
        let rank = shape.len();
        tensors
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let at = match k {
                    0 if swap => 1,
                    1 if swap => 0,
                    _ => k,
                };
                let mut view = vec![1isize; rank];
                view[at] = t.numel() as isize;
                t.reshape(view.as_slice())?.expand(shape.as_slice())
            })
            .collect()
    }

    /// The cross product of 3-vectors along `dim` (PyTorch's `linalg.cross`): `self` and
    /// `other` broadcast together, both of size 3 along `dim`; the result in the promoted
    /// dtype.
    #[track_caller]
    pub fn cross(&self, other: &Tensor, dim: impl Dim) -> Result<Tensor> {
        let op = "linalg.cross";
        if self.dim() != other.dim() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{op}: inputs must have the same number of dimensions, got {} and {}",
                    self.dim(),
                    other.dim()
                ),
            });
        }
        let shape = crate::tensor::broadcast_shape(op, self.shape(), other.shape())?;
        let d = wrap_dim(op, dim.to_dim() as i64, shape.len())?.unwrap_or(0);
        if shape.get(d) != Some(&3) || self.shape()[d] != 3 || other.shape()[d] != 3 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{op}: inputs dimension {d} must have length 3"),
            });
        }
        let (a, b) = (
            self.expand(shape.as_slice())?,
            other.expand(shape.as_slice())?,
        );
        let c = |t: &Tensor, i: usize| t.narrow(d, i, 1);
        let part = |i: usize, j: usize| -> Result<Tensor> {
            c(&a, i)?.mul(&c(&b, j)?)?.sub(&c(&a, j)?.mul(&c(&b, i)?)?)
        };
        Tensor::cat(&[&part(1, 2)?, &part(2, 0)?, &part(0, 1)?], d as isize)
    }

    /// `self + value * t1 * t2` (PyTorch's `addcmul`, in its order: `(value * t1) * t2`),
    /// broadcast, in the three tensors' result dtype (PyTorch's: `value` does not take part;
    /// an integer result takes `value` truncated toward zero; a float16 or bfloat16 result is
    /// computed in float32 and rounded once, as PyTorch does). Three bools (a `Bool` result)
    /// are refused, as PyTorch's ("addcmul_cpu_out" not implemented for 'Bool').
    #[track_caller]
    pub fn addcmul(&self, t1: &Tensor, t2: &Tensor, value: f64) -> Result<Tensor> {
        let (x, a, b) = addc_operands(self, t1, t2)?;
        if x.dtype() == DType::Bool {
            return Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op: "addcmul",
                dtype: DType::Bool,
            }));
        }
        in_opmath(&x, &a, &b, |x, a, b| {
            x.add(&scale_in_dtype("addcmul", a, value)?.mul(b)?)
        })
    }

    /// `self + value * t1 / t2` (PyTorch's `addcdiv`, in its order: `(value * t1) / t2`),
    /// broadcast, in the three tensors' result dtype (as [`Tensor::addcmul`]); integer `t1`
    /// and `t2` are refused, as in PyTorch.
    #[track_caller]
    pub fn addcdiv(&self, t1: &Tensor, t2: &Tensor, value: f64) -> Result<Tensor> {
        if !t1.dtype().is_float() && !t2.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op: "addcdiv",
                reason: "Integer division with addcdiv is no longer supported, and in a future \
                         release addcdiv will perform a true division of tensor1 and tensor2. \
                         Use addcmul with 1 / tensor2 instead."
                    .into(),
            });
        }
        let (x, a, b) = addc_operands(self, t1, t2)?;
        in_opmath(&x, &a, &b, |x, a, b| {
            x.add(&scale_in_dtype("addcdiv", a, value)?.div(b)?)
        })
    }
}

/// `f(x, a, b)` for `addcmul` and `addcdiv`, whose operands share their result dtype: for
/// float16 and bfloat16 computed in float32 and rounded once at the end, as PyTorch computes
/// them (in its `opmath` type, on the CPU and on CUDA); in that dtype otherwise.
fn in_opmath(
    x: &Tensor,
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let r = x.dtype();
    if matches!(r, DType::F16 | DType::BF16) {
        let wide = |t: &Tensor| t.to_dtype(DType::F32);
        f(&wide(x)?, &wide(a)?, &wide(b)?)?.to_dtype(r)
    } else {
        f(x, a, b)
    }
}

/// `addcmul`'s and `addcdiv`'s tensors converted to their result dtype (PyTorch's
/// `result_type` of the three).
fn addc_operands(x: &Tensor, t1: &Tensor, t2: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let r = result_type_of(&[
        Participant::Tensor(x.dtype(), x.dim()),
        Participant::Tensor(t1.dtype(), t1.dim()),
        Participant::Tensor(t2.dtype(), t2.dim()),
    ]);
    Ok((x.cast_to(r)?, t1.cast_to(r)?, t2.cast_to(r)?))
}

/// `value * a` in `a`'s dtype, `value` converted as PyTorch converts a scalar to it: a float
/// dtype takes it as it is, `Bool` takes `value != 0`, an integer one drops its fraction (an
/// error when it does not fit, checked by [`checked_scalar`]; uint8 also takes -255..=-1,
/// wrapping, as PyTorch's integer scalars). A number operand, never a tensor copied over.
fn scale_in_dtype(op: &'static str, a: &Tensor, value: f64) -> Result<Tensor> {
    match a.dtype() {
        d if d.is_float() => a.mul(value),
        DType::Bool => a.mul(value != 0.0),
        d => {
            let whole = value.fract() == 0.0 && value.abs() < 2f64.powi(63);
            let v = if whole {
                ScalarValue::Int(value as i128)
            } else {
                ScalarValue::Float(value)
            };
            checked_scalar(op, d, v)?;
            // In range (checked): the integer operand converts to `d` as the check did.
            a.mul(value.trunc() as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// `addcmul` of three bools is refused; a bool `self` with integer factors is not.
    #[test]
    fn addcmul_of_bools_is_refused() {
        let t = Tensor::from_slice(&[1i64], [1], Device::Cpu).unwrap();
        let b = t.to_dtype(DType::Bool).unwrap();
        assert!(b.addcmul(&b, &b, 3.0).is_err());
        let r = b.addcmul(&t, &t, 2.0).unwrap();
        assert_eq!(
            (r.dtype(), r.to_vec::<i64>().unwrap()),
            (DType::I64, vec![3])
        );
    }

    /// bfloat16 `addcmul` and `addcdiv` are computed in float32 and rounded once: `34 + 0.5 *
    /// 38 * -1.796875` is -0.140625 (PyTorch 2.11), not the -0.25 of a product rounded to
    /// bfloat16 first.
    #[test]
    fn half_precision_addcmul_rounds_once() {
        let bf = |v: &[f32]| {
            Tensor::from_slice(v, [v.len()], Device::Cpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let x = Tensor::from_slice(&[34i16], [1], Device::Cpu).unwrap();
        let t1 = Tensor::from_slice(&[38i32], [1], Device::Cpu).unwrap();
        let r = x.addcmul(&t1, &bf(&[-1.796875]), 0.5).unwrap();
        assert_eq!(r.dtype(), DType::BF16);
        assert_eq!(
            r.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            [-0.140625]
        );
        // 34 + 0.5 * 38 / -0.5546875 is -0.2535...: -0.25390625 in bfloat16, where a quotient
        // rounded first (-34.25) would give -0.25.
        let d = x.addcdiv(&bf(&[38.0]), &bf(&[-0.5546875]), 0.5).unwrap();
        let want = (34.0f32 + 0.5 * 38.0 / -0.5546875f32) as f64;
        let got = d.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()[0];
        let rounded = Tensor::from_slice(&[want], [1], Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()[0];
        assert_eq!((got, rounded), (-0.25390625, -0.25390625));
    }

    /// A truncating division of bfloat16 by one value (a number, a one-element tensor) is
    /// computed in float32 and rounded once, as PyTorch's CPU kernel computes it; by a tensor of
    /// divisors the quotient is rounded first (PyTorch 2.11: -9 and -10 for -3 / 0.30078125).
    #[test]
    fn half_precision_trunc_division_by_one_value() {
        let bf = |v: &[f32], shape: &[usize]| {
            Tensor::from_slice(v, shape, Device::Cpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let a = bf(&[-3.0, 2.59375, -2.09375], &[3]);
        let got = |t: Tensor| {
            assert_eq!(t.dtype(), DType::BF16);
            t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
        };
        let trunc = crate::RoundingMode::Trunc;
        assert_eq!(
            got(a.div_mode(0.30078125, trunc).unwrap()),
            [-9.0, 8.0, -6.0]
        );
        let one = bf(&[0.30078125], &[]);
        assert_eq!(got(a.div_mode(&one, trunc).unwrap()), [-9.0, 8.0, -6.0]);
        let row = bf(&[0.30078125], &[1]);
        assert_eq!(got(a.div_mode(&row, trunc).unwrap()), [-9.0, 8.0, -6.0]);
        let full = bf(&[0.30078125; 3], &[3]);
        assert_eq!(got(a.div_mode(&full, trunc).unwrap()), [-10.0, 8.0, -6.0]);
        // In place, the same.
        let b = bf(&[-3.0, 2.59375, -2.09375], &[3]);
        b.binary_(crate::BinaryOp::TruncDivide, &one).unwrap();
        assert_eq!(got(b), [-9.0, 8.0, -6.0]);
    }

    /// Integer `logspace` exponents formed as PyTorch's serial kernel forms them (a rounded
    /// product, then the sum), not by fused multiply-adds (PyTorch 2.11's values, CPU).
    #[test]
    fn integer_logspace_rounds_the_product_first() {
        let l = Tensor::logspace(1.0, -1.0, 7, 10.0, DType::I16, Device::Cpu).unwrap();
        assert_eq!(l.to_vec::<i16>().unwrap(), [10, 4, 2, 1, 0, 0, 0]);
        let l = Tensor::logspace(-3.0, 7.5, 7, 2.0, DType::I64, Device::Cpu).unwrap();
        assert_eq!(l.to_vec::<i64>().unwrap(), [0, 0, 1, 4, 12, 40, 128]);
        let l = Tensor::logspace(0.0, 2.0, 3, 2.5, DType::I64, Device::Cpu).unwrap();
        assert_eq!(l.to_vec::<i64>().unwrap(), [1, 2, 6]);
    }

    /// Integer `linspace` and `logspace` from the truncated ends, points formed by fused
    /// multiply-adds (PyTorch 2.11's values, CPU).
    #[test]
    fn integer_spacing_as_pytorch() {
        let ints = |t: Tensor| t.to_vec::<i64>().unwrap();
        let l = |a, b, n| Tensor::linspace(a, b, n, DType::I64, Device::Cpu).unwrap();
        assert_eq!(ints(l(-3.0, 7.5, 7)), [-3, -1, 0, 1, 3, 5, 7]);
        assert_eq!(ints(l(-3.0, 7.5, 8)), [-3, -1, 0, 1, 2, 4, 5, 7]);
        assert_eq!(ints(l(-3.7, 7.5, 7)), [-3, -1, 0, 1, 3, 5, 7]);
        assert_eq!(ints(l(-3.0, 8.0, 7)), [-3, -1, 0, 2, 4, 6, 8]);
        assert_eq!(ints(l(10.0, 0.0, 4)), [10, 6, 3, 0]);
        let g = |a, b, n, base| Tensor::logspace(a, b, n, base, DType::I64, Device::Cpu).unwrap();
        assert_eq!(ints(g(-0.5, 2.5, 4, 2.0)), [1, 1, 2, 4]);
        assert_eq!(ints(g(-1.5, 2.5, 5, 2.0)), [0, 0, 1, 2, 4]);
        assert_eq!(ints(g(1.5, 4.5, 3, 3.0)), [3, 15, 81]);
    }
}
