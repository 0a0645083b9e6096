//! PyTorch's index ops along one dimension: `index_add`, `index_copy`, `index_fill` (and their
//! in-place forms). Each names whole slices of `self` along `dim` by a vector of indices; they
//! are scatters (`index_add`, `index_copy`) or an index assignment (`index_fill`) with the
//! index broadcast over the other dimensions, so they share those ops' kernels, checks and
//! gradients.

use crate::args::{Dim, Scalar, ScalarValue, wrap_dim};
use crate::{DType, Error, IndexItem, Result, Tensor};

/// Which of the three ops, for its index rules.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Add,
    Copy,
    Fill,
}

impl Kind {
    fn name(self, in_place: bool) -> &'static str {
        match (self, in_place) {
            (Kind::Add, false) => "index_add",
            (Kind::Add, true) => "index_add_",
            (Kind::Copy, false) => "index_copy",
            (Kind::Copy, true) => "index_copy_",
            (Kind::Fill, false) => "index_fill",
            (Kind::Fill, true) => "index_fill_",
        }
    }
}

impl Tensor {
    /// The checked dimension and the index as a 1-D int64 tensor. PyTorch's rules: the index
    /// is 0-d or 1-D, int64 (`index_add` also takes int32), on `self`'s device; a 0-d `self`
    /// takes dimension 0 (or -1).
    fn along_index(
        &self,
        op: &'static str,
        kind: Kind,
        dim: isize,
        index: &Tensor,
    ) -> Result<(usize, Tensor)> {
        let dim = wrap_dim(op, dim as i64, self.dim().max(1))?.unwrap_or(0);
        if index.dim() > 1 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "the index must be a vector (0-d or 1-D), got one of shape {:?}",
                    index.shape()
                ),
            });
        }
        let dtype_ok = match kind {
            Kind::Add => matches!(index.dtype(), DType::I64 | DType::I32),
            Kind::Copy | Kind::Fill => index.dtype() == DType::I64,
        };
        if !dtype_ok {
            let want = if kind == Kind::Add {
                "int64 or int32"
            } else {
                "int64"
            };
            return Err(Error::InvalidArgument {
                op,
                reason: format!("the index must be {want}, not {}", index.dtype()),
            });
        }
        if index.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: index.device(),
            });
        }
        Ok((dim, index.reshape([-1])?.cast_to(DType::I64)?))
    }

    /// Checks `source` against `self` for `index_add`/`index_copy` (same dtype; the shape of
    /// `self` with `index.numel()` at `dim`; for a 0-d `self`, a 0-d source and one index) and
    /// returns both as tensors of at least one dimension (a 0-d one as a vector of one
    /// element), with the index broadcast to the source's shape: the scatter's arguments.
    fn along_operands(
        &self,
        op: &'static str,
        kind: Kind,
        dim: usize,
        index: &Tensor,
        source: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        if source.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: source.dtype(),
            });
        }
        let n = index.numel();
        let scalar = self.dim() == 0;
        let target = if scalar {
            self.reshape([1])?
        } else {
            self.clone()
        };
        let mut want = target.shape().to_vec();
        want[dim] = n;
        let fits = match kind {
            // index_add: a 0-d `self` takes a 0-d source and one index; otherwise the shapes
            // match exactly (PyTorch's rule).
            Kind::Add if scalar => source.dim() == 0 && n == 1,
            // index_copy: vectors and 0-d tensors are alike (a 0-d source is one slice).
            Kind::Copy if self.dim() <= 1 && source.dim() <= 1 => source.numel() == n,
            _ => source.shape() == want.as_slice(),
        };
        if !fits {
            return Err(Error::ShapeMismatch {
                op,
                lhs: if scalar { vec![] } else { want },
                rhs: source.shape().to_vec(),
            });
        }
        let source = source.reshape(&want[..])?;
        let mut along = vec![1isize; want.len()];
        along[dim] = n as isize;
        let spread: Vec<isize> = want.iter().map(|&d| d as isize).collect();
        let index = index.reshape(&along[..])?.expand(&spread[..])?;
        Ok((target, index, source))
    }

    /// `source` times `alpha` in `self`'s dtype, PyTorch's `index_add` scaling: integers take
    /// `alpha` truncated toward zero, bools any nonzero `alpha` as one. `None` when `alpha`
    /// is zero for bools (nothing is added).
    fn scaled(&self, source: &Tensor, alpha: ScalarValue) -> Result<Option<Tensor>> {
        let dtype = self.dtype();
        if dtype == DType::Bool {
            return Ok((alpha.to_f64() != 0.0).then(|| source.clone()));
        }
        if dtype.is_float() {
            let a = alpha.to_f64();
            return if a == 1.0 {
                Ok(Some(source.clone()))
            } else {
                source.mul(a).map(Some)
            };
        }
        let a: i64 = match alpha {
            ScalarValue::Float(f) => {
                let t = f.trunc();
                if !(i64::MIN as f64..=i64::MAX as f64).contains(&t) {
                    return Err(Error::ScalarOutOfRange {
                        op: "index_add",
                        value: f,
                        dtype,
                    });
                }
                t as i64
            }
            ScalarValue::Int(i) => i64::try_from(i).map_err(|_| Error::ScalarOutOfRange {
                op: "index_add",
                value: i as f64,
                dtype,
            })?,
            ScalarValue::Bool(b) => i64::from(b),
        };
        if a == 1 {
            Ok(Some(source.clone()))
        } else {
            source.mul(a).map(Some)
        }
    }

    /// A copy of `self` with `alpha * source` added along `dim` at the positions `index` names
    /// (PyTorch's `index_add`): for `dim` 0, `out[index[i], ...] += alpha * source[i, ...]`,
    /// repeated indices adding up. `index` is a vector (0-d or 1-D) of int64 or int32 on
    /// `self`'s device, every value in `0..self.size(dim)` (negative values are an error, as
    /// PyTorch's); `source` has `self`'s dtype and shape but `index.numel()` at `dim`. `alpha`
    /// truncates toward zero for integer tensors; bools add as "or". Floats on the GPU add with
    /// atomics, so their sums depend on the order of arrival, as PyTorch's. Differentiable in
    /// `self` and `source`.
    ///
    /// ```
    /// use genesis::{tensor, DType, Device, Tensor};
    /// let x = Tensor::zeros([3, 2], DType::F32, Device::Cpu)?;
    /// let y = x.index_add(0, &tensor!([2i64, 0, 2])?, &tensor!([[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]])?, 1)?;
    /// assert_eq!(y.to_vec::<f32>()?, [3.0, 4.0, 0.0, 0.0, 6.0, 8.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn index_add(
        &self,
        dim: impl Dim,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Scalar,
    ) -> Result<Tensor> {
        let op = Kind::Add.name(false);
        match self.index_add_parts(op, dim.to_dim(), index, source, alpha.value())? {
            Some((dim, target, index, src)) => target
                .scatter_add(dim as isize, &index, &src)?
                .reshape(self.shape()),
            None => self.deep_clone(),
        }
    }

    /// In place: [`Tensor::index_add`] into `self` (PyTorch's `index_add_`). `self` may be a
    /// view; every tensor sharing its storage sees the write. A bad index value leaves `self`
    /// as it was.
    #[track_caller]
    pub fn index_add_(
        &self,
        dim: impl Dim,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Scalar,
    ) -> Result<()> {
        let op = Kind::Add.name(true);
        let d = dim.to_dim();
        if self.in_place_recorded(op, &[source], |x| x.index_add(d, index, source, alpha))? {
            return Ok(());
        }
        match self.index_add_parts(op, d, index, source, alpha.value())? {
            Some((dim, target, index, src)) => target.scatter_add_(dim as isize, &index, &src),
            None => Ok(()),
        }
    }

    /// `index_add`'s and `index_add_`'s checked operands: the dimension, `self` as the
    /// scatter's target, the index spread over the source and the source times `alpha`; `None`
    /// when nothing is added. PyTorch still checks the index values then: against `self`'s
    /// length along `dim` for a bool `alpha` of false, against the length 0 for an empty 1-D
    /// `self` (an empty `self` of more dimensions reads none).
    fn index_add_parts(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        source: &Tensor,
        alpha: ScalarValue,
    ) -> Result<Option<(usize, Tensor, Tensor, Tensor)>> {
        let (dim, index) = self.along_index(op, Kind::Add, dim, index)?;
        let (target, spread, source) = self.along_operands(op, Kind::Add, dim, &index, source)?;
        if self.numel() == 0 {
            if self.dim() == 1 {
                crate::everyday::check_index_range(op, &index, 0)?;
            }
            return Ok(None);
        }
        match self.scaled(&source, alpha)? {
            Some(src) => Ok(Some((dim, target, spread, src))),
            None => {
                crate::everyday::check_index_range(op, &index, target.shape()[dim])?;
                Ok(None)
            }
        }
    }

    /// A copy of `self` with the slices of `source` written along `dim` at the positions
    /// `index` names (PyTorch's `index_copy`): for `dim` 0, `out[index[i], ...] =
    /// source[i, ...]`. `index` is a vector of int64 on `self`'s device, every value in
    /// `0..self.size(dim)`; `source` as for [`Tensor::index_add`]. Where an index repeats,
    /// which slice lands is unspecified on the GPU (the last on the CPU), as in PyTorch.
    /// Differentiable in `self` and `source`.
    ///
    /// ```
    /// use genesis::{tensor, DType, Device, Tensor};
    /// let x = Tensor::zeros([2, 3], DType::F32, Device::Cpu)?;
    /// let y = x.index_copy(1, &tensor!([2i64, 0])?, &tensor!([[1.0f32, 2.0], [3.0, 4.0]])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, [2.0, 0.0, 1.0, 4.0, 0.0, 3.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn index_copy(&self, dim: impl Dim, index: &Tensor, source: &Tensor) -> Result<Tensor> {
        let op = Kind::Copy.name(false);
        let (dim, index) = self.along_index(op, Kind::Copy, dim.to_dim(), index)?;
        let (target, index, source) = self.along_operands(op, Kind::Copy, dim, &index, source)?;
        target
            .scatter(dim as isize, &index, &source)?
            .reshape(self.shape())
    }

    /// In place: [`Tensor::index_copy`] into `self` (PyTorch's `index_copy_`); as
    /// [`Tensor::index_add_`], `self` may be a view and a bad index leaves it as it was.
    #[track_caller]
    pub fn index_copy_(&self, dim: impl Dim, index: &Tensor, source: &Tensor) -> Result<()> {
        let op = Kind::Copy.name(true);
        let d = dim.to_dim();
        if self.in_place_recorded(op, &[source], |x| x.index_copy(d, index, source))? {
            return Ok(());
        }
        let (dim, index) = self.along_index(op, Kind::Copy, d, index)?;
        let (target, index, source) = self.along_operands(op, Kind::Copy, dim, &index, source)?;
        target.scatter_(dim as isize, &index, &source)
    }

    /// The index items that select the slices `index` names along `dim` (of a tensor of at
    /// least one dimension).
    fn along_items(dim: usize, index: &Tensor) -> Vec<IndexItem> {
        let mut items = vec![
            IndexItem::Slice {
                start: None,
                stop: None,
                step: None,
            };
            dim
        ];
        items.push(crate::IndexArg::index_item(index));
        items
    }

    /// A copy of `self` with `value` written into the slices along `dim` that `index` names
    /// (PyTorch's `index_fill`): for `dim` 0, `out[index[i], ...] = value`. `index` is a
    /// vector of int64 on `self`'s device; as in PyTorch, negative values count from the end
    /// (`-1` is the last slice) and values outside `-size..size` are an error. `value` becomes
    /// `self`'s dtype by the checked conversion of fill values ([`Tensor::masked_fill`]).
    /// Differentiable in `self` (zero gradient where filled).
    ///
    /// ```
    /// use genesis::{tensor, DType, Device, Tensor};
    /// let x = Tensor::ones([2, 3], DType::F32, Device::Cpu)?;
    /// let y = x.index_fill(1, &tensor!([0i64, -1])?, 5.0)?;
    /// assert_eq!(y.to_vec::<f32>()?, [5.0, 1.0, 5.0, 5.0, 1.0, 5.0]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn index_fill(&self, dim: impl Dim, index: &Tensor, value: impl Scalar) -> Result<Tensor> {
        match self.fill_plan(Kind::Fill.name(false), dim.to_dim(), index, value.value())? {
            Some((target, items, fill)) => target
                .index_put(&items, &fill, false)?
                .reshape(self.shape()),
            // Nothing to fill: PyTorch reads no index value.
            None => self.deep_clone(),
        }
    }

    /// In place: [`Tensor::index_fill`] into `self` (PyTorch's `index_fill_`); `self` may be
    /// a view, and every tensor sharing its storage sees the write.
    #[track_caller]
    pub fn index_fill_(&self, dim: impl Dim, index: &Tensor, value: impl Scalar) -> Result<()> {
        let op = Kind::Fill.name(true);
        let d = dim.to_dim();
        if self.in_place_recorded(op, &[], |x| x.index_fill(d, index, value))? {
            return Ok(());
        }
        match self.fill_plan(op, d, index, value.value())? {
            Some((target, items, fill)) => target.index_put_(&items, &fill, false),
            None => Ok(()),
        }
    }

    /// What `index_fill` writes: the target (a 0-d `self` as a vector of one), the items of
    /// the slices, and `value` checked and converted as a fill value (a 0-d tensor); `None`
    /// when `self` is empty and nothing is read (but an index into an empty dimension is out
    /// of range, as in PyTorch).
    fn fill_plan(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        value: ScalarValue,
    ) -> Result<Option<(Tensor, Vec<IndexItem>, Tensor)>> {
        let (dim, index) = self.along_index(op, Kind::Fill, dim, index)?;
        let fill = self.scalar_tensor_like(op, value)?;
        if self.numel() == 0 && (self.dim() == 0 || self.shape()[dim] > 0 || index.numel() == 0) {
            return Ok(None);
        }
        let target = if self.dim() == 0 {
            self.reshape([1])?
        } else {
            self.clone()
        };
        Ok(Some((target, Self::along_items(dim, &index), fill)))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// A bool `alpha` of false adds nothing but still checks the index values (PyTorch:
    /// "index out of range in self").
    #[test]
    fn index_add_of_false_alpha_checks_the_index() {
        let x = Tensor::zeros([4, 1], DType::Bool, Device::Cpu).unwrap();
        let s = Tensor::ones([1, 1], DType::Bool, Device::Cpu).unwrap();
        let bad = Tensor::from_slice(&[-1i64], [1], Device::Cpu).unwrap();
        assert!(x.index_add(0, &bad, &s, false).is_err());
        assert!(x.index_add_(0, &bad, &s, false).is_err());
        let ok = Tensor::from_slice(&[3i64], [1], Device::Cpu).unwrap();
        // An empty 1-D `self` checks its index values against the length 0; an empty 2-D one
        // reads none (PyTorch's two paths).
        let e = Tensor::zeros([0], DType::I64, Device::Cpu).unwrap();
        let two = Tensor::from_slice(&[0i64, 0], [2], Device::Cpu).unwrap();
        assert!(e.index_add(0, &two, &two, 1).is_err());
        assert!(e.index_add_(0, &two, &two, 1).is_err());
        let none = Tensor::zeros([0], DType::I64, Device::Cpu).unwrap();
        assert_eq!(e.index_add(0, &none, &e, 1).unwrap().shape(), &[0]);
        let e2 = Tensor::zeros([0, 3], DType::F32, Device::Cpu).unwrap();
        let one = Tensor::from_slice(&[0i64], [1], Device::Cpu).unwrap();
        let rows = Tensor::zeros([1, 3], DType::F32, Device::Cpu).unwrap();
        assert_eq!(e2.index_add(0, &one, &rows, 1).unwrap().shape(), &[0, 3]);
        let ints = |t: Tensor| t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(ints(x.index_add(0, &ok, &s, false).unwrap()), [0; 4]);
        assert_eq!(ints(x.index_add(0, &ok, &s, true).unwrap()), [0, 0, 0, 1]);
    }
}
