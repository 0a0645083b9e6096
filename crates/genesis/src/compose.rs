//! PyTorch conveniences built from the facade's ops (so they run on every device and are
//! differentiable): `movedim`, `swapaxes`, `unbind`, `hstack`/`vstack`/`dstack`, `rot90`,
//! `tensordot`, `aminmax`, `var_mean`/`std_mean`, `logaddexp`, `equal`, `clamp_`, `pad`,
//! `normalize`, `cosine_similarity`, `searchsorted`, `bucketize`, `triu_indices`, `tril_indices`,
//! `logaddexp2`, `xlogy`, `frac`, `deg2rad`, `rad2deg`, `sinc`, `logit`, `heaviside`, `fliplr`,
//! `flipud`, `inner`, `dist`, `diag`, `diag_embed`, `diagflat`, `cartesian_prod`, `block_diag`,
//! `isin`, `trapezoid`, `vander`, `matrix_power`, `renorm`, `cummax`, `cummin`, `logcumsumexp`.

use crate::args::{Dim, Dims, Scalar, wrap_dim};
use crate::{DType, Error, Result, Tensor};

/// How [`Tensor::pad`] fills the new elements (PyTorch's `F.pad` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// The input mirrored at its edges, the edge not repeated (`[0, 1, 2]` padded by 2 on the
    /// left gives `[2, 1, 0, 1, 2]`).
    Reflect,
    /// The edge values repeated.
    Replicate,
    /// The input repeated periodically.
    Circular,
}

/// PyTorch's refusal of `dtype` for `op` (a typed error).
fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::Storage(genesis_storage::Error::UnsupportedDType { op, dtype })
}

/// `a` and `b` of one dtype, as PyTorch requires of some ops (`heaviside`, `inner`).
fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() == b.dtype() {
        return Ok(());
    }
    Err(bad(
        op,
        format!(
            "expected both inputs of one dtype, got {} and {}",
            a.dtype(),
            b.dtype()
        ),
    ))
}

/// An invalid-argument error of `op` (also the linear algebra's, `linalg.rs`).
pub(crate) fn bad(op: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op,
        reason: reason.into(),
    }
}

/// `dims` wrapped into `0..rank`, each once.
fn unique_dims(op: &'static str, dims: &(impl Dims + ?Sized), rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for d in dims.to_dims() {
        let d = wrap_dim(op, d, rank)?.unwrap_or(0);
        if out.contains(&d) {
            return Err(bad(op, format!("dimension {d} is repeated")));
        }
        out.push(d);
    }
    Ok(out)
}

impl Tensor {
    /// The dimensions `source` moved to the positions `destination` (PyTorch's `movedim`),
    /// the others keeping their order: a view. `source` and `destination` are one dimension
    /// each or lists of equal length, without repeats; negative ones count from the end.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// let x = Tensor::zeros([2, 3, 4], DType::F32, Device::Cpu)?;
    /// assert_eq!(x.movedim(0, -1)?.shape(), &[3, 4, 2]);
    /// assert_eq!(x.movedim([0, 1], [2, 0])?.shape(), &[3, 4, 2]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn movedim(&self, source: impl Dims, destination: impl Dims) -> Result<Tensor> {
        let op = "movedim";
        let rank = self.dim();
        let src = unique_dims(op, &source, rank)?;
        let dst = unique_dims(op, &destination, rank)?;
        if src.len() != dst.len() {
            return Err(bad(
                op,
                format!(
                    "source and destination must have the same number of dimensions, got {} \
                     and {}",
                    src.len(),
                    dst.len()
                ),
            ));
        }
        if rank == 0 {
            // A 0-d tensor's one "dimension" (0 or -1) goes nowhere.
            return Ok(self.clone());
        }
        let mut perm: Vec<Option<usize>> = vec![None; rank];
        for (&s, &d) in src.iter().zip(&dst) {
            perm[d] = Some(s);
        }
        let mut rest = (0..rank).filter(|d| !src.contains(d));
        let perm: Vec<isize> = perm
            .into_iter()
            .map(|p| p.or_else(|| rest.next()).expect("one dimension each") as isize)
            .collect();
        self.permute(perm)
    }

    /// Dimensions `a` and `b` swapped (PyTorch's and NumPy's `swapaxes`): [`Tensor::transpose`].
    #[track_caller]
    pub fn swapaxes(&self, a: impl Dim, b: impl Dim) -> Result<Tensor> {
        self.transpose(a, b)
    }

    /// Dimensions `a` and `b` swapped (PyTorch's `swapdims`): [`Tensor::transpose`].
    #[track_caller]
    pub fn swapdims(&self, a: impl Dim, b: impl Dim) -> Result<Tensor> {
        self.transpose(a, b)
    }

    /// The slices of `self` along `dim`, each without that dimension (PyTorch's `unbind`):
    /// views, as many as `self.size(dim)`.
    #[track_caller]
    pub fn unbind(&self, dim: impl Dim) -> Result<Vec<Tensor>> {
        let op = "unbind";
        if self.dim() == 0 {
            return Err(bad(op, "a 0-d tensor has no dimension to unbind"));
        }
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        // As many views as the dimension is long: their list is checked like a tensor (an
        // empty tensor may have a dimension of 2^40).
        let mut out = crate::arrange::pieces(self.shape()[d])?;
        for i in 0..self.shape()[d] {
            out.push(self.narrow(d as isize, i, 1)?.squeeze(d as isize)?);
        }
        Ok(out)
    }

    /// `self` with at least `n` dimensions, PyTorch's `atleast_1d`/`_2d`/`_3d` rule: a 0-d
    /// tensor is `[1]`, `[1, 1]` or `[1, 1, 1]`; a vector `[n]` is `[1, n]` or `[1, n, 1]`; a
    /// matrix `[m, n]` is `[m, n, 1]`.
    fn at_least(&self, n: usize) -> Result<Tensor> {
        let s = self.shape();
        let shape: Vec<usize> = match (s.len(), n) {
            (r, n) if r >= n => return Ok(self.clone()),
            (0, n) => vec![1; n],
            (1, 2) => vec![1, s[0]],
            (1, 3) => vec![1, s[0], 1],
            (2, 3) => vec![s[0], s[1], 1],
            _ => unreachable!("n is 1, 2 or 3"),
        };
        self.reshape(shape)
    }

    fn stack_along(op: &'static str, tensors: &[&Tensor], least: usize) -> Result<Tensor> {
        if tensors.is_empty() {
            return Err(bad(op, "expects a non-empty list of tensors"));
        }
        let parts: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.at_least(least))
            .collect::<Result<_>>()?;
        let dim = match op {
            // hstack: along the first dimension of vectors, else the second.
            "hstack" => usize::from(parts[0].dim() > 1),
            "vstack" => 0,
            _ => 2,
        };
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, dim)
    }

    /// Tensors joined column-wise (PyTorch's `hstack`): vectors (and 0-d tensors, as vectors
    /// of one) end to end, others along dimension 1.
    #[track_caller]
    pub fn hstack(tensors: &[&Tensor]) -> Result<Tensor> {
        Tensor::stack_along("hstack", tensors, 1)
    }

    /// Tensors joined row-wise (PyTorch's `vstack`): each made at least 2-D (a vector `[n]`
    /// is a row `[1, n]`), then joined along dimension 0.
    #[track_caller]
    pub fn vstack(tensors: &[&Tensor]) -> Result<Tensor> {
        Tensor::stack_along("vstack", tensors, 2)
    }

    /// Tensors joined depth-wise (PyTorch's `dstack`): each made at least 3-D (`[n]` is
    /// `[1, n, 1]`, `[m, n]` is `[m, n, 1]`), then joined along dimension 2.
    #[track_caller]
    pub fn dstack(tensors: &[&Tensor]) -> Result<Tensor> {
        Tensor::stack_along("dstack", tensors, 3)
    }

    /// `self` rotated by 90 degrees `k` times in the plane of `dims` (PyTorch's `rot90`), from
    /// the first towards the second; negative `k` turns the other way. `dims` are two
    /// different dimensions of a tensor of at least two: a view.
    ///
    /// ```
    /// use genesis::{tensor, Tensor};
    /// let x = tensor!([[0i64, 1, 2], [3, 4, 5]])?;
    /// assert_eq!(x.rot90(1, [0, 1])?.contiguous()?.to_vec::<i64>()?, [2, 5, 1, 4, 0, 3]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn rot90(&self, k: i64, dims: impl Dims) -> Result<Tensor> {
        let op = "rot90";
        let given = dims.to_dims();
        if given.len() != 2 {
            return Err(bad(
                op,
                format!("expects two dimensions, got {}", given.len()),
            ));
        }
        if self.dim() < 2 {
            return Err(bad(
                op,
                format!(
                    "expects a tensor of at least 2 dimensions, got {}",
                    self.dim()
                ),
            ));
        }
        let d = unique_dims(op, &given, self.dim())?;
        let (a, b) = (d[0] as isize, d[1] as isize);
        match k.rem_euclid(4) {
            1 => self.flip([b])?.transpose(a, b),
            2 => self.flip([a, b]),
            3 => self.flip([a])?.transpose(a, b),
            _ => Ok(self.clone()),
        }
    }

    /// The sum of products over the dimensions `dims_self` of `self` and `dims_other` of
    /// `other`, paired in order (PyTorch's `tensordot`); the result has `self`'s other
    /// dimensions, then `other`'s. The paired sizes must match; the products are one
    /// [`Tensor::matmul`] (so dtypes must match, as there).
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// let a = Tensor::ones([2, 3, 4], DType::F32, Device::Cpu)?;
    /// let b = Tensor::ones([4, 3, 5], DType::F32, Device::Cpu)?;
    /// let c = a.tensordot(&b, [1, 2], [1, 0])?;
    /// assert_eq!(c.shape(), &[2, 5]);
    /// assert_eq!(c.to_vec::<f32>()?[0], 12.0);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn tensordot(
        &self,
        other: &Tensor,
        dims_self: impl Dims,
        dims_other: impl Dims,
    ) -> Result<Tensor> {
        let op = "tensordot";
        let da = unique_dims(op, &dims_self, self.dim())?;
        let db = unique_dims(op, &dims_other, other.dim())?;
        // A 0-d tensor takes dimension 0 elsewhere, but has none to contract (PyTorch: "the
        // tensor has no dimensions").
        if (self.dim() == 0 && !da.is_empty()) || (other.dim() == 0 && !db.is_empty()) {
            return Err(bad(op, "a 0-d tensor has no dimension to contract"));
        }
        if da.len() != db.len() {
            return Err(bad(
                op,
                format!(
                    "both sides must contract as many dimensions, got {} and {}",
                    da.len(),
                    db.len()
                ),
            ));
        }
        // A contracted dimension of size 1 on one side broadcasts to the other's size (as
        // PyTorch's): expanded views.
        let (mut sa, mut sb) = (self.shape().to_vec(), other.shape().to_vec());
        for (&x, &y) in da.iter().zip(&db) {
            match (sa[x], sb[y]) {
                (1, m) => sa[x] = m,
                (m, 1) => sb[y] = m,
                _ => {}
            }
        }
        let (ea, eb) = (self.expand(sa.clone())?, other.expand(sb.clone())?);
        let (this, other) = (&ea, &eb);
        for (&x, &y) in da.iter().zip(&db) {
            if this.shape()[x] != other.shape()[y] {
                return Err(bad(
                    op,
                    format!(
                        "contracted dimensions {x} and {y} have sizes {} and {}",
                        this.shape()[x],
                        other.shape()[y]
                    ),
                ));
            }
        }
        let free_a: Vec<usize> = (0..this.dim()).filter(|d| !da.contains(d)).collect();
        let free_b: Vec<usize> = (0..other.dim()).filter(|d| !db.contains(d)).collect();
        // Saturating: an empty tensor may have huge dimensions (the reshapes then decide).
        let size = |t: &Tensor, ds: &[usize]| {
            ds.iter()
                .fold(1usize, |n, &d| n.saturating_mul(t.shape()[d]))
        };
        let (m, k, n) = (size(this, &free_a), size(this, &da), size(other, &free_b));
        let pa: Vec<isize> = free_a.iter().chain(&da).map(|&d| d as isize).collect();
        let pb: Vec<isize> = db.iter().chain(&free_b).map(|&d| d as isize).collect();
        let a2 = this.permute(pa)?.reshape([m, k])?;
        let b2 = other.permute(pb)?.reshape([k, n])?;
        let shape: Vec<usize> = free_a
            .iter()
            .map(|&d| this.shape()[d])
            .chain(free_b.iter().map(|&d| other.shape()[d]))
            .collect();
        a2.matmul(&b2)?.reshape(shape)
    }

    /// The minimum and the maximum (PyTorch's `aminmax`): over every element (`dim` `None`),
    /// or along `dim` (`keepdim` keeping it as size 1). An empty reduction is an error, as
    /// for [`Tensor::amin`].
    #[track_caller]
    pub fn aminmax(&self, dim: Option<isize>, keepdim: bool) -> Result<(Tensor, Tensor)> {
        match dim {
            None => {
                let all: Vec<isize> = (0..self.dim() as isize).collect();
                Ok((self.amin(&all[..], keepdim)?, self.amax(&all[..], keepdim)?))
            }
            Some(d) => Ok((self.amin([d], keepdim)?, self.amax([d], keepdim)?)),
        }
    }

    /// The variance and the mean over `dims` (PyTorch's `var_mean`): [`Tensor::var_dim`] and
    /// [`Tensor::mean_dim`] together.
    #[track_caller]
    pub fn var_mean(
        &self,
        dims: impl Dims,
        correction: f64,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        Ok((
            self.var_dim(&dims, correction, keepdim)?,
            self.mean_dim(&dims, keepdim)?,
        ))
    }

    /// The standard deviation and the mean over `dims` (PyTorch's `std_mean`).
    #[track_caller]
    pub fn std_mean(
        &self,
        dims: impl Dims,
        correction: f64,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        Ok((
            self.std_dim(&dims, correction, keepdim)?,
            self.mean_dim(&dims, keepdim)?,
        ))
    }

    /// `log(exp(self) + exp(other))` without overflow, broadcasting (PyTorch's `logaddexp`):
    /// `max + log1p(exp(-|self - other|))`, and the common value where both are the same
    /// infinity. Floating dtypes (integers compute in float32, as PyTorch's).
    #[track_caller]
    pub fn logaddexp(&self, other: &Tensor) -> Result<Tensor> {
        let r = crate::result_type(self, other);
        let r = if r.is_float() { r } else { DType::F32 };
        log_add_exp(&self.cast_to(r)?, &other.cast_to(r)?, false)
    }

    /// `log2(2^self + 2^other)` without overflow, broadcasting (PyTorch's `logaddexp2`):
    /// `max + log2(1 + 2^-|self - other|)`, and the common value where both are the same
    /// infinity. Floating dtypes only (integers and bools are refused, as PyTorch's).
    ///
    /// ```
    /// use genesis::tensor;
    /// let a = tensor!([1.0f32, 1000.0, f32::NEG_INFINITY])?;
    /// let b = tensor!([1.0f32, 1000.0, f32::NEG_INFINITY])?;
    /// assert_eq!(a.logaddexp2(&b)?.to_vec::<f32>()?, [2.0, 1001.0, f32::NEG_INFINITY]);
    /// assert!(tensor!([1i64])?.logaddexp2(&tensor!([1i64])?).is_err());
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn logaddexp2(&self, other: &Tensor) -> Result<Tensor> {
        let r = crate::result_type(self, other);
        if !r.is_float() {
            return Err(unsupported("logaddexp2", r));
        }
        let w = opmath(r);
        log_add_exp(&self.cast_to(w)?, &other.cast_to(w)?, true)?.cast_to(r)
    }

    /// `self * log(other)`, 0 where `self` is 0 unless `other` is NaN, broadcasting (PyTorch's
    /// `xlogy`); integers and bools compute in float32.
    #[track_caller]
    pub fn xlogy(&self, other: &Tensor) -> Result<Tensor> {
        let r = crate::result_type(self, other);
        let r = if r.is_float() { r } else { DType::F32 };
        let (x, y) = (self.cast_to(opmath(r))?, other.cast_to(opmath(r))?);
        // PyTorch's gradients: `xlogy(x != 0, y)` for x (0 where x is 0, whatever y is but
        // NaN) and `x / y` for y.
        crate::autograd::op(
            "xlogy",
            &[&x, &y],
            || {
                let prod = x.mul(&y.log()?)?;
                let zero = x.eq(0.0)?.logical_and(&y.isnan()?.logical_not()?)?;
                Tensor::where_cond(&zero, 0.0, &prod)
            },
            |_| {
                let (xs, ys) = (
                    crate::autograd::Saved::new("xlogy", &x),
                    crate::autograd::Saved::new("xlogy", &y),
                );
                Box::new(move |g, _| {
                    let (x, y) = (xs.get()?, ys.get()?);
                    let zero = x.eq(0.0)?.logical_and(&y.isnan()?.logical_not()?)?;
                    let ly = Tensor::where_cond(&zero, 1.0, &y)?.log()?;
                    let gx = g.mul(&ly)?;
                    let gy = g.mul(&x)?.div(&y)?;
                    Ok(vec![
                        Some(crate::autograd::sum_to(&gx, x.shape())?),
                        Some(crate::autograd::sum_to(&gy, y.shape())?),
                    ])
                })
            },
        )?
        .cast_to(r)
    }

    /// The fractional part `self - trunc(self)`, with the sign of `self` (PyTorch's `frac`):
    /// floating dtypes only, as PyTorch's.
    #[track_caller]
    pub fn frac(&self) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(unsupported("frac", self.dtype()));
        }
        self.sub(&self.trunc()?)
    }

    /// Degrees to radians, `self * pi / 180` (PyTorch's `deg2rad`): integers and bools
    /// compute in float32.
    #[track_caller]
    pub fn deg2rad(&self) -> Result<Tensor> {
        self.to_float()?.mul(std::f64::consts::PI / 180.0)
    }

    /// Radians to degrees, `self * 180 / pi` (PyTorch's `rad2deg`): integers and bools
    /// compute in float32.
    #[track_caller]
    pub fn rad2deg(&self) -> Result<Tensor> {
        self.to_float()?.mul(180.0 / std::f64::consts::PI)
    }

    /// The normalised sinc, `sin(pi x) / (pi x)` and 1 at 0 (PyTorch's `sinc`): integers and
    /// bools compute in float32.
    #[track_caller]
    pub fn sinc(&self) -> Result<Tensor> {
        let r = self.to_float()?.dtype();
        let x = self.cast_to(opmath(r))?;
        // At 0, `sin(pi x) / (pi x)` of 1 instead (and so a gradient of 0 there, PyTorch's,
        // rather than the 0 / 0 of the quotient's).
        let zero = x.eq(0.0)?;
        let px = Tensor::where_cond(&zero, 1.0, &x)?.mul(std::f64::consts::PI)?;
        let s = px.sin()?.div(&px)?;
        Tensor::where_cond(&zero, 1.0, &s)?.cast_to(r)
    }

    /// The log-odds `log(x / (1 - x))` (PyTorch's `logit`), `x` first clamped to `[eps, 1 -
    /// eps]` when `eps` is given (both bounds rounded to the dtype, as PyTorch's: in bfloat16
    /// `1 - 1e-6` is 1, and the logit of 1 infinite); integers and bools compute in float32.
    #[track_caller]
    pub fn logit(&self, eps: Option<f64>) -> Result<Tensor> {
        let r = self.to_float()?.dtype();
        let x = self.cast_to(opmath(r))?;
        let bounds = eps.map(|e| (round_to(r, e), round_to(r, 1.0 - e)));
        // PyTorch's gradient, `g / (x (1 - x))` (`g * inf` at 0 and 1): NaN outside [0, 1]
        // without `eps`, and 0 outside [eps, 1 - eps] with it.
        crate::autograd::op(
            "logit",
            &[&x],
            || {
                let c = match bounds {
                    Some((lo, hi)) => x.clamp(Some(lo), Some(hi))?,
                    None => x.clone(),
                };
                c.div(&c.neg()?.add(1.0)?)?.log()
            },
            |_| {
                let xs = crate::autograd::Saved::new("logit", &x);
                Box::new(move |g, _| {
                    let x = xs.get()?;
                    // At 0 and 1 (either zero) `g * inf`, whatever the sign of the zero.
                    let pole = x.eq_scalar(0.0)?.logical_or(&x.eq_scalar(1.0)?)?;
                    let d = g.div(&x.mul(&x.neg()?.add(1.0)?)?)?;
                    let d = Tensor::where_cond(&pole, &g.mul(f64::INFINITY)?, &d)?;
                    let d = match bounds {
                        Some((lo, hi)) => {
                            let out = x.lt_scalar(lo)?.logical_or(&x.gt_scalar(hi)?)?;
                            Tensor::where_cond(&out, 0.0, &d)?
                        }
                        None => {
                            let out = x.lt_scalar(0.0)?.logical_or(&x.gt_scalar(1.0)?)?;
                            Tensor::where_cond(&out, f64::NAN, &d)?
                        }
                    };
                    Ok(vec![Some(d)])
                })
            },
        )?
        .cast_to(r)
    }

    /// The Heaviside step (PyTorch's `heaviside`): 0 where `self` is negative (or NaN), 1
    /// where positive, `values` (broadcast) where it is zero. Both of one dtype, as PyTorch
    /// requires.
    #[track_caller]
    pub fn heaviside(&self, values: &Tensor) -> Result<Tensor> {
        same_dtype("heaviside", self, values)?;
        let step = self.gt(0.0)?.cast_to(self.dtype())?;
        Tensor::where_cond(&self.eq(0.0)?, values, &step)
    }

    /// `self` with its columns in reverse order (dimension 1; PyTorch's `fliplr`): at least
    /// two dimensions.
    #[track_caller]
    pub fn fliplr(&self) -> Result<Tensor> {
        if self.dim() < 2 {
            return Err(bad(
                "fliplr",
                format!("input must be at least 2-D, got shape {:?}", self.shape()),
            ));
        }
        self.flip(1)
    }

    /// `self` with its rows in reverse order (dimension 0; PyTorch's `flipud`): at least one
    /// dimension.
    #[track_caller]
    pub fn flipud(&self) -> Result<Tensor> {
        if self.dim() < 1 {
            return Err(bad(
                "flipud",
                "input must be at least 1-D, got a 0-d tensor",
            ));
        }
        self.flip(0)
    }

    /// The inner product over the last dimension (PyTorch's `inner`): `self [..., k]` and
    /// `other [..., k]` give `self.shape[..-1] + other.shape[..-1]`, both of one dtype, as
    /// PyTorch requires; a 0-d operand multiplies ([`Tensor::mul`], promoting as PyTorch's).
    ///
    /// ```
    /// use genesis::tensor;
    /// let a = tensor!([[1.0f32, 2.0], [3.0, 4.0]])?;
    /// let b = tensor!([[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]])?;
    /// let i = a.inner(&b)?;
    /// assert_eq!(i.shape(), [2, 3]);
    /// assert_eq!(i.to_vec::<f32>()?, [1.0, 2.0, 3.0, 3.0, 4.0, 7.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn inner(&self, other: &Tensor) -> Result<Tensor> {
        // With a 0-d operand, the product (promoting, as PyTorch's).
        if self.dim() == 0 || other.dim() == 0 {
            return self.mul(other);
        }
        same_dtype("inner", self, other)?;
        let (ka, kb) = (self.shape()[self.dim() - 1], other.shape()[other.dim() - 1]);
        if ka != kb {
            return Err(Error::ShapeMismatch {
                op: "inner",
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        self.tensordot(other, [-1isize], [-1isize])
    }

    /// The `p`-norm of `self - other` over all elements, broadcasting (PyTorch's `dist`):
    /// [`Tensor::vector_norm`] of the difference; floating dtypes only.
    #[track_caller]
    pub fn dist(&self, other: &Tensor, p: f64) -> Result<Tensor> {
        // The difference first: its rules (bools refused, PyTorch's promotion) are dist's.
        let d = self.sub(other)?;
        if !d.dtype().is_float() {
            return Err(unsupported("dist", d.dtype()));
        }
        d.vector_norm(p, (), false)
    }

    /// Diagonal matrices from the last dimension (PyTorch's `diag_embed`): `self [..., n]`
    /// gives a tensor of one more dimension whose planes over `dim1` and `dim2` (wrapped
    /// against the result's rank) are `n + |offset|` square with the values on diagonal
    /// `offset` (above the main one when positive), zeros elsewhere; the other dimensions
    /// keep their order. Differentiable (a pad and views underneath).
    ///
    /// ```
    /// use genesis::tensor;
    /// let v = tensor!([1i64, 2])?;
    /// assert_eq!(v.diag_embed(0, -2, -1)?.to_vec::<i64>()?, [1, 0, 0, 2]);
    /// let up = v.diag_embed(1, -2, -1)?;
    /// assert_eq!(up.shape(), [3, 3]);
    /// assert_eq!(up.to_vec::<i64>()?, [0, 1, 0, 0, 0, 2, 0, 0, 0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn diag_embed(&self, offset: i64, dim1: impl Dim, dim2: impl Dim) -> Result<Tensor> {
        let op = "diag_embed";
        let rank = self.dim() + 1;
        let (a, b) = (dim1.to_dim() as i64, dim2.to_dim() as i64);
        let d1 = wrap_dim(op, a, rank)?.unwrap_or(0);
        let d2 = wrap_dim(op, b, rank)?.unwrap_or(0);
        if d1 == d2 {
            return Err(bad(
                op,
                format!("diagonal dimensions cannot be identical {a}, {b}"),
            ));
        }
        let n = self.shape()[rank - 2];
        let mut square = self.shape().to_vec();
        square.push(n);
        // The result ([.., n + |offset|, n + |offset|]) is checked before any step builds it.
        let side = usize::try_from(offset.unsigned_abs())
            .ok()
            .and_then(|k| k.checked_add(n))
            .ok_or_else(|| bad(op, format!("offset {offset} is too large")))?;
        let mut result = square.clone();
        result[rank - 2] = side;
        result[rank - 1] = side;
        crate::tensor::check_result_size(&result, self.dtype())?;
        // Each value followed by n zeros, flattened: value i lands at i (n + 1) = (i, i) of
        // the n x n matrix the first n * n elements make.
        let k = offset.unsigned_abs() as i64;
        let main = self
            .unsqueeze(-1)?
            .pad(&[0, n as i64], PadMode::Constant, 0.0)?
            .flatten(-2, -1)?
            .narrow(-1, 0, n * n)?
            .reshape(square.as_slice())?;
        // Diagonal `offset`: k columns before and k rows after it (above), or the reverse.
        let pads = if offset >= 0 {
            [k, 0, 0, k]
        } else {
            [0, k, k, 0]
        };
        main.pad(&pads, PadMode::Constant, 0.0)?.movedim(
            [rank as isize - 2, rank as isize - 1],
            [d1 as isize, d2 as isize],
        )
    }

    /// PyTorch's `diag`: a vector gives the square matrix with it on diagonal `offset`
    /// ([`Tensor::diag_embed`]); a matrix gives a copy of its diagonal `offset`
    /// ([`Tensor::diagonal`]); other ranks are refused.
    #[track_caller]
    pub fn diag(&self, offset: i64) -> Result<Tensor> {
        match self.dim() {
            1 => self.diag_embed(offset, 0, 1),
            2 => self.diagonal(offset, 0, 1)?.contiguous(),
            d => Err(bad(
                "diag",
                format!("diag() supports 1-D or 2-D tensors, got {d}-D"),
            )),
        }
    }

    /// The square matrix with `self`'s elements, flattened, on diagonal `offset` (PyTorch's
    /// `diagflat`).
    #[track_caller]
    pub fn diagflat(&self, offset: i64) -> Result<Tensor> {
        self.reshape([-1isize])?.diag_embed(offset, 0, 1)
    }

    /// The Cartesian product of 1-D tensors of one dtype (PyTorch's `cartesian_prod`): `[N,
    /// k]` rows of every combination, the last tensor varying fastest (one tensor: a copy of
    /// it).
    #[track_caller]
    pub fn cartesian_prod(tensors: &[&Tensor]) -> Result<Tensor> {
        let op = "cartesian_prod";
        if let Some(t) = tensors.iter().find(|t| t.dim() != 1) {
            return Err(bad(
                op,
                format!("expected 1-D tensors, got shape {:?}", t.shape()),
            ));
        }
        if tensors.len() == 1 {
            return tensors[0].contiguous();
        }
        let grids = Tensor::meshgrid(tensors, "ij")?;
        let flat: Vec<Tensor> = grids
            .iter()
            .map(|g| g.reshape([-1isize]))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = flat.iter().collect();
        Tensor::stack(&refs, 1)
    }

    /// The block-diagonal matrix of `tensors` (PyTorch's `block_diag`): each 0-d, 1-D (a row)
    /// or 2-D, placed along the diagonal in order, zeros elsewhere, in their result type (a 0-d
    /// block promotes as a lower-priority operand, as in PyTorch's `result_type`).
    /// No tensors give an empty `[1, 0]` float32 matrix, as PyTorch.
    #[track_caller]
    pub fn block_diag(tensors: &[&Tensor]) -> Result<Tensor> {
        let op = "block_diag";
        let Some(first) = tensors.first() else {
            return Tensor::zeros([1, 0], DType::F32, crate::Device::Cpu);
        };
        for (i, t) in tensors.iter().enumerate() {
            if t.dim() > 2 {
                return Err(bad(
                    op,
                    format!(
                        "input tensors must have 2 or fewer dimensions; input {i} has {}",
                        t.dim()
                    ),
                ));
            }
            if t.device() != first.device() {
                return Err(bad(
                    op,
                    "every input must be on the same device".to_string(),
                ));
            }
        }
        // PyTorch's result_type: a 0-d block promotes as a lower-priority operand.
        let parts: Vec<crate::promote::Participant> = tensors
            .iter()
            .map(|t| crate::promote::Participant::Tensor(t.dtype(), t.dim()))
            .collect();
        let dtype = crate::promote::result_type_of(&parts);
        let blocks: Vec<Tensor> = tensors
            .iter()
            .map(|t| match t.dim() {
                0 => t.reshape([1, 1]),
                1 => t.unsqueeze(0),
                _ => Ok((*t).clone()),
            })
            .map(|b| b.and_then(|b| b.cast_to(dtype)))
            .collect::<Result<_>>()?;
        let cols = blocks
            .iter()
            .try_fold(0usize, |n, b| n.checked_add(b.shape()[1]))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| bad("block_diag", "the blocks' columns overflow a dimension"))?;
        let mut before = 0usize;
        let mut rows = Vec::with_capacity(blocks.len());
        for b in &blocks {
            let w = b.shape()[1];
            let after = cols - before - w;
            rows.push(b.pad(&[before as i64, after as i64], PadMode::Constant, 0.0)?);
            before += w;
        }
        let refs: Vec<&Tensor> = rows.iter().collect();
        Tensor::cat(&refs, 0)
    }

    /// Whether each element of `self` is among `test` (PyTorch's `isin`; `invert` negates),
    /// compared after promotion (NaN matches nothing); bools are refused, as PyTorch's. By
    /// comparing every pair: memory of `self.numel() * test.numel()` bools.
    #[track_caller]
    pub fn isin(&self, test: &Tensor, invert: bool) -> Result<Tensor> {
        if self.dtype() == DType::Bool || test.dtype() == DType::Bool {
            return Err(unsupported("isin", DType::Bool));
        }
        let found = if test.numel() == 0 {
            Tensor::zeros(self.shape(), DType::Bool, self.device())?
        } else {
            self.reshape([-1isize, 1])?
                .eq(&test.reshape([1isize, -1])?)?
                .any_dim(1, false)?
                .reshape(self.shape())?
        };
        if invert {
            found.logical_not()
        } else {
            Ok(found)
        }
    }

    /// The trapezoidal rule along `dim` with spacing `dx` (PyTorch's `trapezoid(y, dx=dx,
    /// dim=dim)`): `(sum(y) - (y_first + y_last) / 2) dx`, 0 for fewer than two points, each
    /// step in `y`'s dtype as PyTorch's; integers compute in float32 (no points at all: zeros
    /// of `y`'s dtype), bools and 0-d tensors are refused.
    #[track_caller]
    pub fn trapezoid(&self, dx: f64, dim: impl Dim) -> Result<Tensor> {
        let d = self.trapezoid_dim(dim)?;
        if let Some(z) = self.trapezoid_empty(d)? {
            return Ok(z);
        }
        let y = self.to_float()?;
        let n = y.shape()[d];
        if n < 2 {
            return y.sum_dim([d], false)?.mul(0.0);
        }
        let ends = y
            .narrow(d, 0, 1)?
            .add(&y.narrow(d, n - 1, 1)?)?
            .squeeze(d)?;
        y.sum_dim([d], false)?.sub(&ends.mul(0.5)?)?.mul(dx)
    }

    /// The wrapped `dim` of the trapezoidal rule, after its checks (0-d tensors refused, and
    /// bools unless `dim` is empty, as PyTorch's).
    fn trapezoid_dim(&self, dim: impl Dim) -> Result<usize> {
        let op = "trapezoid";
        if self.dim() == 0 {
            return Err(bad(op, "y must have at least one dimension"));
        }
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        if self.dtype() == DType::Bool && self.shape()[d] > 0 {
            return Err(bad(op, "bool input for `y` is not supported"));
        }
        Ok(d)
    }

    /// No samples along `d`: zeros of `self`'s dtype without that dimension (PyTorch's, and
    /// NumPy's, answer).
    fn trapezoid_empty(&self, d: usize) -> Result<Option<Tensor>> {
        if self.shape()[d] > 0 {
            return Ok(None);
        }
        let mut shape = self.shape().to_vec();
        shape.remove(d);
        Tensor::zeros(shape.as_slice(), self.dtype(), self.device()).map(Some)
    }

    /// The trapezoidal rule along `dim` at sample points `x` (PyTorch's `trapezoid(y, x,
    /// dim=dim)`; `x` 1-D along `dim` or broadcast like `self`): the sum over neighbouring
    /// points of their spacing times the sum of their values, halved; the sums of neighbours
    /// in `y`'s dtype and the rest promoted with `x`'s, as PyTorch's (integers together in
    /// float32).
    #[track_caller]
    pub fn trapezoid_x(&self, x: &Tensor, dim: impl Dim) -> Result<Tensor> {
        let op = "trapezoid";
        let d = self.trapezoid_dim(dim)?;
        if let Some(z) = self.trapezoid_empty(d)? {
            return Ok(z);
        }
        let n = self.shape()[d];
        // A 1-D x lies along `dim`.
        let x = if x.dim() == 1 && self.dim() > 1 {
            let mut shape = vec![1usize; self.dim()];
            shape[d] = x.numel();
            x.reshape(shape.as_slice())?
        } else {
            x.clone()
        };
        let xdim = (d + x.dim()).checked_sub(self.dim()).ok_or_else(|| {
            bad(
                op,
                format!("x of shape {:?} does not broadcast with y", x.shape()),
            )
        })?;
        if x.shape()[xdim] != n {
            return Err(bad(op, "there must be one `x` value for each sample point"));
        }
        let r = crate::promote::promote_types(self.dtype(), x.dtype());
        let r = if r.is_float() { r } else { DType::F32 };
        // One point: empty neighbour sums, so zeros (whatever the values, as PyTorch's).
        let dx = x.narrow(xdim, 1, n - 1)?.sub(&x.narrow(xdim, 0, n - 1)?)?;
        let sy = self.narrow(d, 1, n - 1)?.add(&self.narrow(d, 0, n - 1)?)?;
        dx.mul(&sy)?.sum_dim([d], false)?.div(2.0)?.cast_to(r)
    }

    /// The Vandermonde matrix of a 1-D `self` (PyTorch's `vander`): `n` columns (default the
    /// length) of powers `x^(n-1) .. x^0`, or `x^0 .. x^(n-1)` when `increasing`, formed as
    /// running products; integers and bools as int64.
    #[track_caller]
    pub fn vander(&self, n: Option<usize>, increasing: bool) -> Result<Tensor> {
        if self.dim() != 1 {
            return Err(bad("vander", "x must be a one-dimensional tensor"));
        }
        // Integers and bools as int64 (PyTorch's cumulative product of integers).
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.cast_to(DType::I64)?
        };
        let n = n.unwrap_or(x.numel());
        let len = x.numel();
        let out = if n == 0 {
            Tensor::zeros([len, 0], x.dtype(), x.device())?
        } else {
            let ones = Tensor::ones([len, 1], x.dtype(), x.device())?;
            let reps = x.unsqueeze(1)?.expand([len, n - 1])?;
            Tensor::cat(&[&ones, &reps], 1)?.cumprod(1)?
        };
        if increasing { Ok(out) } else { out.flip(1) }
    }

    /// `self` (square matrices `[..., m, m]`) to the power `n` (PyTorch's `matrix_power` and
    /// `linalg.matrix_power`), by squaring with PyTorch's order of products; `n = 0` gives
    /// identity matrices, a negative `n` the [inverse](Tensor::inverse) to the power `-n`
    /// (float32 and float64 only; a singular matrix is an error).
    #[track_caller]
    pub fn matrix_power(&self, n: i64) -> Result<Tensor> {
        let op = "matrix_power";
        let r = self.dim();
        if r < 2 || self.shape()[r - 1] != self.shape()[r - 2] {
            return Err(bad(
                op,
                format!(
                    "A must be batches of square matrices, got shape {:?}",
                    self.shape()
                ),
            ));
        }
        if n < 0 {
            // PyTorch's order: the inverse to the power -n.
            return self.inverse()?.matrix_power(n.checked_neg().ok_or_else(|| {
                bad(
                    op,
                    format!("the power {n} has no positive counterpart in i64"),
                )
            })?);
        }
        let m = self.shape()[r - 1];
        if n == 0 {
            // The identities, recorded with a zero gradient for `self` (PyTorch's result is
            // part of the graph too).
            let (shape, dtype, device) = (self.shape().to_vec(), self.dtype(), self.device());
            return crate::autograd::op(
                op,
                &[self],
                || {
                    Tensor::eye(m, None, dtype, device)?
                        .expand(&shape[..])?
                        .contiguous()
                },
                |_| {
                    let shape = self.shape().to_vec();
                    Box::new(move |g, _| {
                        Ok(vec![Some(Tensor::zeros(
                            &shape[..],
                            g.dtype(),
                            g.device(),
                        )?)])
                    })
                },
            );
        }
        let (mut z, mut result, mut k) = (self.clone(), None::<Tensor>, n);
        while k > 0 {
            if k & 1 == 1 {
                result = Some(match result {
                    None => z.clone(),
                    Some(acc) => acc.matmul(&z)?,
                });
            }
            k >>= 1;
            if k > 0 {
                z = z.matmul(&z)?;
            }
        }
        result.expect("n > 0").contiguous()
    }

    /// Each slice of `self` along `dim` whose `p`-norm exceeds `maxnorm` scaled down to norm
    /// `maxnorm` (PyTorch's `renorm`: by `maxnorm / (norm + 1e-7)`); floating dtypes, at least
    /// two dimensions, `p > 0`, as PyTorch's.
    #[track_caller]
    pub fn renorm(&self, p: f64, dim: impl Dim, maxnorm: f64) -> Result<Tensor> {
        let op = "renorm";
        if !self.dtype().is_float() {
            return Err(unsupported(op, self.dtype()));
        }
        if p.is_nan() || p <= 0.0 {
            return Err(bad(op, format!("non-positive norm not supported, got {p}")));
        }
        if maxnorm.is_nan() || maxnorm < 0.0 {
            return Err(bad(
                op,
                format!("expected maxnorm to be >= 0, got {maxnorm}"),
            ));
        }
        if self.dim() < 2 {
            return Err(bad(
                op,
                format!("input needs at least 2 dimensions, got {}", self.dim()),
            ));
        }
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        let others: Vec<isize> = (0..self.dim())
            .filter(|&i| i != d)
            .map(|i| i as isize)
            .collect();
        let w = self.cast_to(opmath(self.dtype()))?;
        let norm = w.vector_norm(p, others.as_slice(), true)?;
        let factor = Tensor::where_cond(
            &norm.gt(maxnorm)?,
            &norm.add(1e-7)?.reciprocal()?.mul(maxnorm)?,
            1.0,
        )?;
        w.mul(&factor)?.cast_to(self.dtype())
    }

    /// The running maximum along `dim` and where it was reached (PyTorch's `cummax`): element
    /// `i` holds the largest of elements `0..=i`, a tie going to the later one and NaN
    /// counting as the largest (a later NaN wins), its index in int64. Every dtype. Computed
    /// by doubling (`ceil(log2 n)` rounds of comparisons of shifted copies); differentiable in
    /// the values.
    #[track_caller]
    pub fn cummax(&self, dim: impl Dim) -> Result<(Tensor, Tensor)> {
        self.cumulative_extreme("cummax", dim, true)
    }

    /// The running minimum along `dim` and where it was reached (PyTorch's `cummin`): as
    /// [`Tensor::cummax`] with the smallest.
    #[track_caller]
    pub fn cummin(&self, dim: impl Dim) -> Result<(Tensor, Tensor)> {
        self.cumulative_extreme("cummin", dim, false)
    }

    /// `log(cumsum(exp(self)))` along `dim` without overflow (PyTorch's `logcumsumexp`), by
    /// doubling with [`Tensor::logaddexp`]; floating dtypes only (float16 and bfloat16
    /// computed in float32 and rounded once).
    #[track_caller]
    pub fn logcumsumexp(&self, dim: impl Dim) -> Result<Tensor> {
        let op = "logcumsumexp";
        if !self.dtype().is_float() {
            return Err(unsupported(op, self.dtype()));
        }
        let r = self.dtype();
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0);
        let x = self.cast_to(opmath(r))?;
        // PyTorch's gradient (its formula, so that its conventions at -inf hold): with `g`
        // split by sign into logs (the lowest finite value where a part is absent),
        // `exp(rlcse(log g+ - out) + x) - exp(rlcse(log g- - out) + x)`, `rlcse` the scan
        // from the end: 0 at a -inf element after finite ones, NaN where the output is -inf.
        crate::autograd::op(
            op,
            &[&x],
            || log_cum_sum_exp(&x, d),
            |out| {
                let (xs, outs) = (
                    crate::autograd::Saved::new(op, &x),
                    crate::autograd::Saved::new(op, out),
                );
                Box::new(move |g, _| {
                    let (x, out) = (xs.get()?, outs.get()?);
                    if x.dim() == 0 || x.numel() == 0 {
                        return Ok(vec![Some(g.mul(&out.sub(&x)?.exp()?)?)]);
                    }
                    let lowest = match x.dtype() {
                        DType::F64 => f64::MIN,
                        _ => f64::from(f32::MIN),
                    };
                    let log_g = g.abs()?.log()?;
                    let part = |keep: Tensor| -> Result<Tensor> {
                        let l = Tensor::where_cond(&keep, &log_g, lowest)?.sub(&out)?;
                        let rev = log_cum_sum_exp(&l.flip([d as isize])?, d)?.flip([d as isize])?;
                        rev.add(&x)?.exp()
                    };
                    let pos = part(g.gt_scalar(0.0)?)?;
                    let neg = part(g.lt_scalar(0.0)?)?;
                    Ok(vec![Some(pos.sub(&neg)?)])
                })
            },
        )?
        .cast_to(r)
    }

    /// [`Tensor::cummax`] (`max`) or [`Tensor::cummin`]: (value, index) pairs combined by
    /// doubling, the later pair taken when it is NaN or at least (at most) the earlier one
    /// and the earlier is not NaN: the last extreme, NaN above all (an associative choice).
    fn cumulative_extreme(
        &self,
        op: &'static str,
        dim: impl Dim,
        max: bool,
    ) -> Result<(Tensor, Tensor)> {
        let d = wrap_dim(op, dim.to_dim() as i64, self.dim())?;
        // A 0-d tensor is its own extreme; an empty one has none (and no positions to make,
        // however long the dimension).
        let Some(d) = d.filter(|_| self.dim() > 0 && self.numel() > 0) else {
            let zero = Tensor::zeros(self.shape(), DType::I64, self.device())?;
            return Ok((self.contiguous()?, zero));
        };
        let n = self.shape()[d];
        let pos = positions(self, d)?;
        let mut idx = pos.expand(self.shape())?.contiguous()?;
        let mut val = self.contiguous()?;
        let mut shift = 1;
        while shift < n {
            let valid = pos.ge(shift as f64)?;
            let pv = shifted(&val, d, shift)?;
            let pi = shifted(&idx, d, shift)?;
            let beats = if max { val.ge(&pv)? } else { val.le(&pv)? };
            let later = val
                .isnan()?
                .logical_or(&pv.isnan()?.logical_not()?.logical_and(&beats)?)?;
            let keep_prev = valid.logical_and(&later.logical_not()?)?;
            val = Tensor::where_cond(&keep_prev, &pv, &val)?;
            idx = Tensor::where_cond(&keep_prev, &pi, &idx)?;
            shift *= 2;
        }
        Ok((val, idx))
    }

    /// `self` as a floating tensor: itself when floating, else float32 (the ops of PyTorch
    /// that compute integers in the default float dtype).
    fn to_float(&self) -> Result<Tensor> {
        if self.dtype().is_float() {
            Ok(self.clone())
        } else {
            self.cast_to(DType::F32)
        }
    }

    /// Whether `self` and `other` have the same shape and equal elements (PyTorch's `equal`;
    /// NaN equals nothing); elements of different dtypes compare after promotion.
    #[track_caller]
    pub fn equal(&self, other: &Tensor) -> Result<bool> {
        if self.shape() != other.shape() {
            return Ok(false);
        }
        self.eq(other)?.all()?.item::<bool>()
    }

    /// In place: [`Tensor::clamp`] written into `self` (PyTorch's `clamp_`).
    #[track_caller]
    pub fn clamp_<S: Scalar>(&self, min: Option<S>, max: Option<S>) -> Result<()> {
        if self.in_place_recorded("clamp_", &[], |x| x.clamp(min, max))? {
            return Ok(());
        }
        let out = self.clamp(min, max)?;
        crate::promote::check_cast("clamp_", out.dtype(), self.dtype())?;
        self.copy_(&out.cast_to(self.dtype())?)
    }

    /// `self` padded (PyTorch's `F.pad`): `pads` holds (before, after) pairs for the last
    /// dimension, then the one before it, and so on (at most one pair a dimension); a negative
    /// pad removes elements. [`PadMode::Constant`] writes `value` (converted to the dtype as a
    /// fill value: a fraction is dropped for integers) and pads any dimensions; the other
    /// modes take PyTorch's shapes: 1, 2 or 3 pairs for the last dimensions of a tensor of 2
    /// or 3, 3 or 4, 4 or 5 dimensions, with [`PadMode::Reflect`] pads smaller than the
    /// dimension and [`PadMode::Circular`] pads no larger. The result is a new tensor (a
    /// crop by negative pads too, as PyTorch's). Differentiable (the constant mode one
    /// recorded op, the others `index_select` underneath).
    ///
    /// ```
    /// use genesis::{tensor, PadMode, Tensor};
    /// let x = tensor!([[0.0f32, 1.0, 2.0]])?;
    /// let c = x.pad(&[1, 2], PadMode::Constant, 9.0)?;
    /// assert_eq!(c.to_vec::<f32>()?, [9.0, 0.0, 1.0, 2.0, 9.0, 9.0]);
    /// let r = x.pad(&[2, 1], PadMode::Reflect, 0.0)?;
    /// assert_eq!(r.to_vec::<f32>()?, [2.0, 1.0, 0.0, 1.0, 2.0, 1.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn pad(&self, pads: &[i64], mode: PadMode, value: f64) -> Result<Tensor> {
        let op = "pad";
        let rank = self.dim();
        if !pads.len().is_multiple_of(2) {
            return Err(bad(
                op,
                format!("padding length {} must be even", pads.len()),
            ));
        }
        let pairs = pads.len() / 2;
        if pairs > rank {
            return Err(bad(
                op,
                format!("{} pads for a tensor of {rank} dimensions", pads.len()),
            ));
        }
        if mode != PadMode::Constant && !(1..=3).contains(&pairs) {
            return Err(bad(
                op,
                format!("{mode:?} padding takes 1 to 3 pairs, got {pairs}"),
            ));
        }
        if mode != PadMode::Constant && !(pairs + 1..=pairs + 2).contains(&rank) {
            return Err(bad(
                op,
                format!(
                    "{mode:?} padding of {pairs} pair(s) takes a tensor of {} or {} \
                     dimensions, got {rank}",
                    pairs + 1,
                    pairs + 2
                ),
            ));
        }
        // The result's size is checked before the first step: a huge pad is refused, not
        // built a dimension at a time (nor its index list made).
        let mut out = self.shape().to_vec();
        for k in 0..pairs {
            let d = rank - 1 - k;
            let len = (out[d] as i64)
                .checked_add(pads[2 * k])
                .and_then(|v| v.checked_add(pads[2 * k + 1]));
            match len.and_then(|v| usize::try_from(v).ok()) {
                Some(v) => out[d] = v,
                None => break, // refused below, naming the dimension
            }
        }
        crate::tensor::check_result_size(&out, self.dtype())?;
        if mode == PadMode::Constant {
            return self.pad_constant_all(&pads[..2 * pairs], value);
        }
        let mut x = self.clone();
        for k in 0..pairs {
            let d = rank - 1 - k;
            let (l, r) = (pads[2 * k], pads[2 * k + 1]);
            let n = x.shape()[d] as i64;
            let len = padded_len(d, n, l, r)?;
            if matches!(mode, PadMode::Reflect | PadMode::Replicate) && x.dtype() == DType::Bool {
                return Err(unsupported(op, DType::Bool));
            }
            // Circular padding wraps within what negative pads leave (PyTorch's order).
            let (x0, l, r, n) = if mode == PadMode::Circular && (l < 0 || r < 0) {
                let kept = x.pad_constant(d, l.min(0), r.min(0), n + l.min(0) + r.min(0), 0.0)?;
                let n = kept.shape()[d] as i64;
                (kept, l.max(0), r.max(0), n)
            } else {
                (x, l, r, n)
            };
            let x1 = x0;
            x = match mode {
                PadMode::Constant => x1.pad_constant(d, l, r, len, value)?,
                _ => {
                    // Reflect and replicate (PyTorch's kernels) leave the dimension non-empty.
                    let ok = match mode {
                        PadMode::Reflect => len > 0 && n > 0 && l < n && r < n,
                        PadMode::Replicate => len > 0 && (n > 0 || (l <= 0 && r <= 0)),
                        _ => l <= n && r <= n,
                    };
                    if !ok {
                        return Err(bad(
                            op,
                            format!(
                                "{mode:?} pads ({l}, {r}) do not fit dimension {d} of size {n}"
                            ),
                        ));
                    }
                    if x1.numel() == 0 {
                        // Nothing to gather (another dimension is 0): the empty result's
                        // shape, without a list of every padded position.
                        let mut shape = x1.shape().to_vec();
                        shape[d] = len as usize;
                        x = x1.narrow(d as isize, 0, 0)?.reshape(shape.as_slice())?;
                        continue;
                    }
                    // The index list is checked like a tensor (its length is the result's).
                    // The positions in i128 (a pad of i64::MIN, or a huge one beside a
                    // negative one, has no i64 negation or sum); each index lands in `0..n`.
                    let mut idx = crate::arrange::pieces::<i64>(len as usize)?;
                    let (n1, l1, r1) = (n as i128, l as i128, r as i128);
                    idx.extend((-l1..n1 + r1).map(|j| {
                        (match mode {
                            PadMode::Reflect if j < 0 => -j,
                            PadMode::Reflect if j >= n1 => 2 * (n1 - 1) - j,
                            PadMode::Replicate => j.clamp(0, n1 - 1),
                            PadMode::Circular => j.rem_euclid(n1),
                            _ => j,
                        }) as i64
                    }));
                    let idx = Tensor::from_slice(&idx, [len as usize], crate::Device::Cpu)?
                        .to(x1.device())?;
                    x1.index_select(d as isize, &idx)?
                }
            };
        }
        Ok(x)
    }

    /// [`Tensor::pad`]'s constant mode: a new tensor filled with `value`, the part of `self`
    /// that negative pads keep copied into it in one strided copy. The gradient is the
    /// output's gradient padded by the negated pads (PyTorch's rule).
    fn pad_constant_all(&self, pads: &[i64], value: f64) -> Result<Tensor> {
        let rank = self.dim();
        let mut out_shape = self.shape().to_vec();
        // Per dimension: (first kept element of `self`, first position in the output, count).
        let mut spans: Vec<(usize, usize, usize)> =
            self.shape().iter().map(|&n| (0, 0, n)).collect();
        for k in 0..pads.len() / 2 {
            let d = rank - 1 - k;
            let (l, r) = (pads[2 * k], pads[2 * k + 1]);
            let n = self.shape()[d] as i64;
            let len = padded_len(d, n, l, r)?;
            let (start, kept) = kept_span(d, n, l, r)?;
            out_shape[d] = len as usize;
            spans[d] = (start, l.max(0) as usize, kept);
        }
        let neg: Vec<i64> = pads.iter().map(|&p| p.saturating_neg()).collect();
        crate::autograd::op1(
            "pad",
            self,
            || {
                let fill = self.scalar_tensor_like("pad", crate::ScalarValue::Float(value))?;
                let out = fill.expand(out_shape.as_slice())?.contiguous()?;
                if spans.iter().all(|s| s.2 > 0) {
                    let (mut dst, mut src) = (out.clone(), self.clone());
                    for (d, &(from, to, count)) in spans.iter().enumerate() {
                        dst = dst.narrow(d as isize, to, count)?;
                        src = src.narrow(d as isize, from, count)?;
                    }
                    dst.copy_(&src)?;
                }
                Ok(out)
            },
            move || move |g| g.pad(&neg, PadMode::Constant, 0.0),
        )
    }

    /// [`Tensor::pad`]'s constant mode along `d`: the kept part (narrowed by negative pads)
    /// between blocks of `value`.
    fn pad_constant(&self, d: usize, l: i64, r: i64, len: i64, value: f64) -> Result<Tensor> {
        let (start, kept) = kept_span(d, self.shape()[d] as i64, l, r)?;
        let core = self.narrow(d as isize, start, kept)?;
        // The pads read one converted value through a broadcast (stride 0) view.
        let fill = self.scalar_tensor_like("pad", crate::ScalarValue::Float(value))?;
        let block = |size: i64| -> Result<Tensor> {
            let mut shape: Vec<isize> = self.shape().iter().map(|&n| n as isize).collect();
            shape[d] = size as isize;
            fill.expand(shape)
        };
        let mut parts = Vec::new();
        if l > 0 {
            parts.push(block(l)?);
        }
        parts.push(core);
        if r > 0 {
            parts.push(block(r)?);
        }
        debug_assert_eq!(parts.iter().map(|p| p.shape()[d] as i64).sum::<i64>(), len);
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, d)
    }

    /// `self` divided by its `p`-norm along `dim`, the norm at least `eps` (PyTorch's
    /// `F.normalize(x, p, dim, eps)`; float dtypes).
    #[track_caller]
    pub fn normalize(&self, p: f64, dim: impl Dim, eps: f64) -> Result<Tensor> {
        let norm = self.vector_norm(p, [dim.to_dim()], true)?.clamp_min(eps)?;
        self.div(&norm)
    }

    /// The cosine of the angle between `self` and `other` along `dim`, broadcasting (PyTorch's
    /// `F.cosine_similarity`): each divided by its 2-norm (at least `eps`), the products summed.
    #[track_caller]
    pub fn cosine_similarity(&self, other: &Tensor, dim: impl Dim, eps: f64) -> Result<Tensor> {
        let d = dim.to_dim();
        let shape = crate::broadcast_shape("cosine_similarity", self.shape(), other.shape())?;
        let spread: Vec<isize> = shape.iter().map(|&n| n as isize).collect();
        let (a, b) = (self.expand(&spread[..])?, other.expand(&spread[..])?);
        let na = a.vector_norm(2.0, [d], true)?.clamp_min(eps)?;
        let nb = b.vector_norm(2.0, [d], true)?.clamp_min(eps)?;
        a.div(&na)?.mul(&b.div(&nb)?)?.sum_dim([d], false)
    }

    /// For each of `values`, the index where it would go in `sorted` to keep it sorted
    /// (PyTorch's `searchsorted`): the count of elements below it (with `right`, at or below
    /// it), int64. `sorted` is 1-D, or has `values`' leading dimensions with the sorted runs
    /// last. Computed by comparing every value with its run (memory `values x run length`
    /// bools), on any device; NaNs count as larger than every number.
    #[track_caller]
    pub fn searchsorted(sorted: &Tensor, values: &Tensor, right: bool) -> Result<Tensor> {
        let op = "searchsorted";
        if sorted.dim() == 0 {
            return Err(bad(
                op,
                "the sorted sequence must have at least one dimension",
            ));
        }
        let lead = &sorted.shape()[..sorted.dim() - 1];
        if sorted.dim() > 1 && (values.dim() == 0 || &values.shape()[..values.dim() - 1] != lead) {
            return Err(bad(
                op,
                format!(
                    "a sorted sequence of shape {:?} needs values with the leading dimensions \
                     {lead:?}, got {:?}",
                    sorted.shape(),
                    values.shape()
                ),
            ));
        }
        // [..., values, 1] against [..., 1, run]: how many of the run are below (or at).
        let v = values.unsqueeze(-1)?;
        let s = sorted.unsqueeze(-2)?;
        let below = if right { s.le(&v)? } else { s.lt(&v)? };
        // A NaN value goes after every number: count the whole run.
        let nan = v.isnan()?;
        let below = below.logical_or(&nan)?;
        // The result has the values' shape (a 0-d value gives a 0-d index).
        below
            .to_dtype(DType::I64)?
            .sum_dim([-1], false)?
            .reshape(values.shape())
    }

    /// The bucket of each element of `self` among `boundaries` (1-D, sorted; PyTorch's
    /// `bucketize`): [`Tensor::searchsorted`] of `self` in `boundaries`.
    #[track_caller]
    pub fn bucketize(&self, boundaries: &Tensor, right: bool) -> Result<Tensor> {
        if boundaries.dim() != 1 {
            return Err(bad(
                "bucketize",
                format!("boundaries must be 1-D, got shape {:?}", boundaries.shape()),
            ));
        }
        Tensor::searchsorted(boundaries, self, right)
    }

    /// The (row, column) indices of the upper triangle of a `rows x cols` matrix from the
    /// diagonal `offset` on (PyTorch's `triu_indices`): a `[2, n]` int64 tensor, row-major.
    #[track_caller]
    pub fn triu_indices(
        rows: usize,
        cols: usize,
        offset: i64,
        device: crate::Device,
    ) -> Result<Tensor> {
        Tensor::triangle_indices(rows, cols, |r, c| c - r >= offset, device)
    }

    /// The (row, column) indices of the lower triangle up to the diagonal `offset` (PyTorch's
    /// `tril_indices`).
    #[track_caller]
    pub fn tril_indices(
        rows: usize,
        cols: usize,
        offset: i64,
        device: crate::Device,
    ) -> Result<Tensor> {
        Tensor::triangle_indices(rows, cols, |r, c| c - r <= offset, device)
    }

    fn triangle_indices(
        rows: usize,
        cols: usize,
        keep: impl Fn(i64, i64) -> bool,
        device: crate::Device,
    ) -> Result<Tensor> {
        let (mut rs, mut cs) = (Vec::new(), Vec::new());
        // Walked on the host: past 2^28 positions it is refused rather than left to run.
        let n = rows
            .checked_mul(cols)
            .filter(|&n| n <= 1 << 28)
            .ok_or_else(|| bad("triangle indices", format!("{rows} x {cols} is too large")))?;
        rs.try_reserve(n.min(1 << 24))
            .map_err(|_| bad("triangle indices", "out of host memory"))?;
        // No positions (a side of 0) walks no rows: a huge `rows` with no columns is not a loop.
        let rows = if n == 0 { 0 } else { rows };
        for r in 0..rows as i64 {
            for c in 0..cols as i64 {
                if keep(r, c) {
                    rs.push(r);
                    cs.push(c);
                }
            }
        }
        let k = rs.len();
        rs.extend(cs);
        Tensor::from_slice(&rs, [2, k], crate::Device::Cpu)?.to(device)
    }
}

/// The dtype a composed op computes `dtype` in: float32 for float16 and bfloat16 (PyTorch's
/// `opmath` type: one rounding at the end), else `dtype`.
fn opmath(dtype: DType) -> DType {
    if matches!(dtype, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        dtype
    }
}

/// `v` rounded to the floating dtype `dtype` (to nearest, ties to even), as f64.
fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F32 => f64::from(v as f32),
        _ => v,
    }
}

/// `logaddexp` of `a` and `b` (one floating dtype), in base 2 when `two`: the maximum plus
/// `log1p(exp(-d))` of their distance `d` (base 2: `2^-d = exp(-d ln 2)` and `log2(1 + y) =
/// log1p(y) / ln 2`), and the common value where both are the same infinity.
fn log_add_exp(a: &Tensor, b: &Tensor, two: bool) -> Result<Tensor> {
    let ln2 = std::f64::consts::LN_2;
    let m = a.maximum(b)?;
    let gap = a.sub(b)?.abs()?;
    let d = if two {
        gap.mul(-ln2)?.exp()?.log1p()?.div(ln2)?
    } else {
        gap.neg()?.exp()?.log1p()?
    };
    let general = m.add(&d)?;
    let same_inf = a.isinf()?.logical_and(&a.eq(b)?)?;
    Tensor::where_cond(&same_inf, a, &general)
}

/// The inclusive log-sum-exp scan of `t` along `d` by doubling (a 0-d or empty `t` is
/// itself).
fn log_cum_sum_exp(t: &Tensor, d: usize) -> Result<Tensor> {
    if t.dim() == 0 || t.numel() == 0 {
        return t.contiguous();
    }
    let n = t.shape()[d];
    let pos = positions(t, d)?;
    let mut acc = t.contiguous()?;
    let mut shift = 1;
    while shift < n {
        let valid = pos.ge(shift as f64)?;
        let prev = shifted(&acc, d, shift)?;
        acc = Tensor::where_cond(&valid, &prev.logaddexp(&acc)?, &acc)?;
        shift *= 2;
    }
    Ok(acc)
}

/// `t` shifted `by` places forward along `d` (element `i` holds element `i - by`); the first
/// `by` places hold copies of the first elements, never used (see [`positions`]).
fn shifted(t: &Tensor, d: usize, by: usize) -> Result<Tensor> {
    let n = t.shape()[d];
    let head = t.narrow(d, 0, by.min(n))?;
    let body = t.narrow(d, 0, n - by.min(n))?;
    Tensor::cat(&[&head, &body], d)
}

/// The positions `0..n` along dimension `d` of `t` (int64, size 1 in the other dimensions):
/// a shift by `by` has a predecessor where `positions >= by`.
fn positions(t: &Tensor, d: usize) -> Result<Tensor> {
    let mut along = vec![1usize; t.dim()];
    along[d] = t.shape()[d];
    Tensor::arange(0.0, along[d] as f64, 1.0, DType::I64, t.device())?.reshape(along.as_slice())
}

/// The size of dimension `d` (size `n`) after pads `(l, r)`: an error when it would be negative
/// or overflow.
fn padded_len(d: usize, n: i64, l: i64, r: i64) -> Result<i64> {
    n.checked_add(l)
        .and_then(|v| v.checked_add(r))
        .filter(|&v| v >= 0)
        .ok_or_else(|| {
            bad(
                "pad",
                format!("pads ({l}, {r}) of dimension {d} (size {n}) leave a negative size"),
            )
        })
}

/// The first element of dimension `d` (size `n`) that pads `(l, r)` keep, and how many: an
/// error when the negative pads remove more than `n`.
fn kept_span(d: usize, n: i64, l: i64, r: i64) -> Result<(usize, usize)> {
    // In i128: a pad of `i64::MIN` has no i64 negation.
    let start = (-(l as i128)).max(0);
    let kept = n as i128 - start - (-(r as i128)).max(0);
    if kept < 0 {
        return Err(bad(
            "pad",
            format!("pads ({l}, {r}) remove more than dimension {d}'s {n} elements"),
        ));
    }
    Ok((start as usize, kept as usize))
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// `inner` with a 0-d operand is the product, promoting (PyTorch's `inner(bf16 0-d, bool
    /// 0-d)` is bf16); two tensors with dimensions must share a dtype.
    #[test]
    fn inner_of_a_0d_operand_promotes() {
        let a = Tensor::from_slice(&[-1.5f32], [0usize; 0], Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let b = Tensor::from_slice(&[1i64, 2], [2], Device::Cpu).unwrap();
        let r = a.inner(&b.to_dtype(DType::Bool).unwrap()).unwrap();
        assert_eq!(r.dtype(), DType::BF16);
        let r = b
            .inner(&Tensor::from_slice(&[2.0f32], [0usize; 0], Device::Cpu).unwrap())
            .unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), [2.0, 4.0]);
        let f = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap();
        assert!(f.inner(&b).is_err());
    }

    /// A negative power is the inverse's: the empty result of no matrices (f32, f64),
    /// refused for integers and for singular matrices.
    #[test]
    fn negative_matrix_powers() {
        let e = Tensor::zeros([2, 0, 0], DType::F32, Device::Cpu).unwrap();
        assert_eq!(e.matrix_power(-1).unwrap().shape(), &[2, 0, 0]);
        let i = Tensor::zeros([0, 2, 2], DType::I64, Device::Cpu).unwrap();
        assert!(i.matrix_power(-1).is_err());
        let m = Tensor::ones([2, 2], DType::F32, Device::Cpu).unwrap();
        assert!(m.matrix_power(-1).is_err());
        // [[2, 1], [0, 1]]^-2 = [[1/4, -3/4], [0, 1]].
        let a = Tensor::from_slice(&[2.0f64, 1.0, 0.0, 1.0], [2, 2], Device::Cpu).unwrap();
        let p = a.matrix_power(-2).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(p, [0.25, -0.75, 0.0, 1.0]);
    }

    /// One sample point with sample positions: no neighbours, so zeros whatever the values
    /// (PyTorch's `trapezoid(tensor([inf]), tensor([-1.]))` is `0.`); with a spacing the
    /// formula's `(sum - (first + last) / 2) dx` keeps the infinity's NaN, as PyTorch's.
    #[test]
    fn trapezoid_of_one_point() {
        let y = Tensor::from_slice(&[f32::INFINITY, 1.0], [1, 2], Device::Cpu).unwrap();
        let x = Tensor::from_slice(&[-1.0f32], [1], Device::Cpu)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap();
        let r = y.trapezoid_x(&x, 0).unwrap();
        assert_eq!((r.shape(), r.dtype()), (&[2usize][..], DType::F32));
        assert_eq!(r.to_vec::<f32>().unwrap(), [0.0, 0.0]);
        let r = y.trapezoid(2.0, 0).unwrap().to_vec::<f32>().unwrap();
        assert!(r[0].is_nan() && r[1] == 0.0, "{r:?}");
    }
}
