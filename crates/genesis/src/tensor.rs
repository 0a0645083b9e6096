use std::fmt;
use std::sync::Arc;

use genesis_index::{IndexItem, Value};
use genesis_storage::{
    BinaryOp, BinaryRhs, DType, Device, Layout, Storage, UnaryOp, View, WithDType,
};

use crate::args::{Dim, Dims, Scalar, shape_spec, sizes, wrap_dim};
use crate::promote::has_kernels;
use crate::{Error, Result};

/// A multi-dimensional array on a device: a shared [`Storage`] seen through a [`Layout`].
///
/// # Views and writes (PyTorch's semantics)
///
/// View operations (`view`, `transpose`, `narrow`, `expand`, basic indexing `i(...)`, ...)
/// return tensors that share the storage; it stays alive, and its memory out of the pool,
/// until the last of them is dropped. Writes through any of them — the in-place ops
/// (`add_`, `mul_`, `exp_`, `binary_`, `unary_`, `masked_fill_`, `fill_`, `zero_`, `copy_`,
/// `index_put_`, `+=`, ...) — take `&self`, work on any view (strided ones included), and are
/// seen through every tensor that shares the storage: `m.i(&s![2..5, 3..7])?.fill_(0.0)?` is
/// PyTorch's `m[2:5, 3:7] = 0`. Each write bumps the storage's [`Tensor::version`].
///
/// Soundness: the storage's memory is behind a reader–writer lock (reads share it, a write
/// holds it alone, across threads too); host bytes are only lent out under a guard that holds
/// the read lock. An operand that overlaps the destination in one storage is read before the
/// write, so the result is computed from the values before it.
///
/// # Two kinds of clone
///
/// [`Clone::clone`] (`t.clone()`) is cheap: another handle to the same storage (a view of
/// all of it), so writes through either are seen by both. [`Tensor::deep_clone`] is
/// PyTorch's `torch.clone`: a copy in a new storage.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) view: View,
    /// Autograd state when the tensor requires grad (shared by clones).
    pub(crate) autograd: Option<Arc<crate::autograd::Meta>>,
}

/// The element count of `shape` for `op`: [`genesis_storage::checked_numel`], the one checked
/// count every shape goes through (an error when it exceeds `isize::MAX`).
pub(crate) fn numel_of(_op: &'static str, shape: &[usize]) -> Result<usize> {
    Ok(genesis_storage::checked_numel(shape)?)
}

/// [`Error::OutOfMemory`] (or a shape error) unless the host can hold a tensor of `shape` and
/// `dtype`: the check an op that builds its result in steps makes before the first step, so
/// that a result too large is refused before intermediates of gigabytes are made.
pub(crate) fn check_result_size(shape: &[usize], dtype: DType) -> Result<usize> {
    let n = genesis_storage::checked_numel(shape)?;
    genesis_storage::check_host_bytes(n.saturating_mul(dtype.size()))?;
    Ok(n)
}

impl Tensor {
    #[track_caller]
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> Result<Tensor> {
        Ok(Tensor {
            view: View::with_layout(Arc::new(storage), Layout::contiguous(shape))?,
            autograd: None,
        })
    }

    /// The elements of `flat`'s storage (a contiguous tensor from offset 0) named by
    /// `layout`, as a view: no recording.
    pub(crate) fn through(flat: &Tensor, layout: &Layout) -> Result<Tensor> {
        Ok(Tensor {
            view: flat.view.relayout(layout.clone())?,
            autograd: None,
        })
    }

    /// A view of this tensor's storage through `layout`. Recorded (when it records) with the
    /// general gradient of a layout: see [`crate::autograd::layout_grad`]; the named view ops
    /// record their own, cheaper one.
    pub(crate) fn with_layout(&self, layout: Layout) -> Result<Tensor> {
        self.view_op("as_strided", layout)
    }

    /// [`Tensor::with_layout`] recorded as `name`.
    pub(crate) fn view_op(&self, name: &'static str, layout: Layout) -> Result<Tensor> {
        if !crate::autograd::wants(&[self]) {
            return Ok(Tensor {
                view: self.view.relayout(layout)?,
                autograd: None,
            });
        }
        let back = crate::autograd::LayoutGrad::of(self, &layout);
        let out = Tensor {
            view: self.view.relayout(layout)?,
            autograd: None,
        };
        Ok(crate::autograd::record_view(name, self, out, back))
    }

    /// A tensor of `shape` holding a copy of `data` (row-major) on `device`.
    #[track_caller]
    pub fn from_slice<T: WithDType>(
        data: &[T],
        shape: impl Dims,
        device: Device,
    ) -> Result<Tensor> {
        let shape = &sizes("from_slice", &shape)?[..];
        let n = numel_of("from_slice", shape)?;
        if n != data.len() {
            return Err(Error::DataLength {
                op: "from_slice",
                shape: shape.to_vec(),
                expected: n,
                got: data.len(),
            });
        }
        Tensor::created(Storage::from_slice(data, device)?, shape)
    }

    /// A `Bool` tensor of `shape` holding `data` (row-major) on `device`: masks for indexing
    /// and conditions for [`Tensor::where_cond`].
    #[track_caller]
    pub fn from_bools(data: &[bool], shape: impl Dims, device: Device) -> Result<Tensor> {
        let shape = &sizes("from_bools", &shape)?[..];
        let n = numel_of("from_bools", shape)?;
        if n != data.len() {
            return Err(Error::DataLength {
                op: "from_bools",
                shape: shape.to_vec(),
                expected: n,
                got: data.len(),
            });
        }
        let bytes: Vec<u8> = data.iter().map(|&b| u8::from(b)).collect();
        Tensor::created(Storage::from_bytes(&bytes, DType::Bool, device)?, shape)
    }

    /// A tensor of `shape` with every element `value`.
    #[track_caller]
    pub fn full<T: WithDType>(shape: impl Dims, value: T, device: Device) -> Result<Tensor> {
        let shape = &sizes("full", &shape)?[..];
        let n = numel_of("full", shape)?;
        Tensor::created(Storage::full(n, value, device)?, shape)
    }

    /// Zeros of `dtype`.
    #[track_caller]
    pub fn zeros(shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = &sizes("zeros", &shape)?[..];
        let n = numel_of("zeros", shape)?;
        Tensor::created(Storage::zeros(n, dtype, device)?, shape)
    }

    /// Ones of `dtype`.
    #[track_caller]
    pub fn ones(shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = &sizes("ones", &shape)?[..];
        let n = numel_of("ones", shape)?;
        Tensor::created(Storage::full_scalar(n, 1.0, dtype, device)?, shape)
    }

    /// A tensor whose contents are unspecified (to be overwritten whole).
    #[track_caller]
    pub fn empty(shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = &sizes("empty", &shape)?[..];
        let n = numel_of("empty", shape)?;
        Tensor::created(Storage::empty(n, dtype, device)?, shape)
    }

    /// `start, start + step, ...` below `end` (PyTorch's `arange`): `ceil((end - start) / step)`
    /// values, as `f64` arithmetic converted to `dtype`; an integer dtype takes `start` and
    /// `step` truncated toward zero first, as PyTorch does.
    #[track_caller]
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: format!("start {start}, end {end}, step {step}"),
            });
        }
        // As PyTorch: a step whose sign points away from `end` is an error, not an empty
        // tensor (`start == end` is empty for either sign).
        if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: format!(
                    "start {start}, end {end}, step {step}: upper bound and lower bound \
                     inconsistent with step sign"
                ),
            });
        }
        // As PyTorch: arange is not implemented for Bool.
        if dtype == DType::Bool {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: "arange is not implemented for bool".to_string(),
            });
        }
        let count = ((end - start) / step).ceil().max(0.0);
        // The count is checked as any shape is (below 2^63 first, so the cast is exact), and
        // the values are written into a fallible allocation: never a panic or an abort.
        if count.is_nan() || count >= 9_223_372_036_854_775_808.0 {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: format!("start {start}, end {end}, step {step}: too many elements"),
            });
        }
        let n = count as usize;
        numel_of("arange", &[n])?;
        // As PyTorch: the count comes from the numbers given, but an integer dtype takes
        // `start` and `step` as its own values (truncated toward zero: a step of 0.5 gives
        // `n` copies of `start`).
        let (start, step) = if dtype.is_float() {
            (start, step)
        } else {
            (start.trunc(), step.trunc())
        };
        // Every value must be representable in the dtype (no saturation, no infinity): the
        // first and the last bound the rest.
        if n > 0 {
            for v in [start, start + (n - 1) as f64 * step] {
                let v = if dtype.is_float() { v } else { v.trunc() };
                if Storage::scalar(v, dtype).is_err() {
                    return Err(Error::ScalarOutOfRange {
                        op: "arange",
                        value: v,
                        dtype,
                    });
                }
            }
        }
        let mut values = Storage::zeros(n, DType::F64, Device::Cpu)?;
        for (i, v) in values.as_mut_slice::<f64>()?.iter_mut().enumerate() {
            *v = start + i as f64 * step;
        }
        let s = values.to_dtype(dtype)?;
        Tensor::created(
            if device == Device::Cpu {
                s
            } else {
                s.to_device(device)?
            },
            &[n],
        )
    }

    /// Zeros with this tensor's shape, dtype and device.
    #[track_caller]
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), self.device())
    }

    /// Ones with this tensor's shape, dtype and device.
    #[track_caller]
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), self.device())
    }

    /// `value` everywhere, with this tensor's shape, dtype and device (`value` must be
    /// representable in the dtype).
    #[track_caller]
    pub fn full_like(&self, value: impl Scalar) -> Result<Tensor> {
        let one = self.scalar_tensor_like("full_like", value.value())?;
        Tensor::from_storage(one.expand(self.shape())?.view.contiguous()?, self.shape())
    }

    /// Uninitialised memory (zeros on the CPU) with this tensor's shape, dtype and device.
    #[track_caller]
    pub fn empty_like(&self) -> Result<Tensor> {
        Tensor::empty(self.shape(), self.dtype(), self.device())
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.view.layout().shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        self.view.layout().strides()
    }

    /// The layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        self.view.layout()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.view.layout().numel()
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.view.layout().rank()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.view.storage().dtype()
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.view.storage().device()
    }

    /// Whether the elements are row-major with no gaps.
    pub fn is_contiguous(&self) -> bool {
        self.view.layout().is_contiguous()
    }

    /// Whether two tensors share one storage (one is a view of the other).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.view.shares_storage(&other.view)
    }

    /// A contiguous tensor with the same elements: this one (another handle to its storage,
    /// so writes through either are seen by both, as in PyTorch) when it already is one, else
    /// a copy. [`Tensor::deep_clone`] always copies.
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        crate::autograd::op1(
            "contiguous",
            self,
            || Tensor::from_storage(self.view.contiguous()?, self.shape()),
            || |g| Ok(g.clone()),
        )
    }

    /// A contiguous copy on `device` (pinned when it is the host and
    /// [`crate::cpu::enable_pinned_memory`] is on). See [`Tensor::to_non_blocking`] for a copy
    /// that does not wait.
    #[track_caller]
    pub fn to(&self, device: Device) -> Result<Tensor> {
        // The gradient goes back to this tensor's device.
        let from = self.device();
        crate::autograd::op1(
            "to",
            self,
            || self.to_raw(device),
            move || move |g: &Tensor| g.to(from),
        )
    }

    fn to_raw(&self, device: Device) -> Result<Tensor> {
        if let Some((start, len)) = self.dense_range() {
            // Read in place: one copy (one DMA from pinned memory to a device).
            let moved = self.view.storage().to_device_at(start, len, device)?;
            return Tensor::created(moved, self.shape());
        }
        let dense = self.view.contiguous()?;
        let moved = if dense.device() == device && !dense.is_pinned() {
            dense
        } else {
            dense.to_device(device)?
        };
        Tensor::created(moved, self.shape())
    }

    /// `(first element, element count)` of this tensor's elements in its storage when they
    /// lie there in row-major order, one after another (an empty tensor: `(0, 0)`), so that a
    /// conversion or a transfer reads them in place.
    pub(crate) fn dense_range(&self) -> Option<(usize, usize)> {
        let l = self.layout();
        if !l.is_contiguous() {
            return None;
        }
        let n = l.numel();
        Some(if n == 0 { (0, 0) } else { (l.offset(), n) })
    }

    /// `(first element, element count)` of this tensor's elements in its storage when they
    /// fill that range exactly once in some order of the dimensions (a transpose or a
    /// permutation of a dense tensor: PyTorch's "non-overlapping and dense"), every stride
    /// positive.
    pub(crate) fn dense_permuted_range(&self) -> Option<(usize, usize)> {
        let l = self.layout();
        let mut dims: Vec<(isize, usize)> = l
            .shape()
            .iter()
            .zip(l.strides())
            .filter(|(n, _)| **n != 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        if dims.iter().any(|&(s, n)| s <= 0 || n == 0) {
            return None;
        }
        dims.sort_unstable();
        let mut expected = 1usize;
        for (s, n) in dims {
            if s as usize != expected {
                return None;
            }
            expected = expected.checked_mul(n)?;
        }
        Some((l.offset(), expected))
    }

    /// A copy converted to `dtype` (round to nearest-even into f16/bf16; floats to integers
    /// truncate and saturate). As PyTorch's `to(dtype)` (`preserve_format`), a tensor whose
    /// elements fill a range of its storage (contiguous, or a transpose or permutation of a
    /// contiguous tensor) keeps its strides: one conversion pass reads it in place. Other views
    /// are gathered first and give a contiguous tensor.
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        let from = self.dtype();
        crate::autograd::op1(
            "to_dtype",
            self,
            || self.to_dtype_raw(dtype),
            move || move |g| g.to_dtype(from),
        )
    }

    fn to_dtype_raw(&self, dtype: DType) -> Result<Tensor> {
        if let Some((start, len)) = self.dense_range() {
            // Read in place: one pass converts.
            let out = self.view.storage().to_dtype_at(start, len, dtype)?;
            return Tensor::from_storage(out, self.shape());
        }
        if let Some((start, len)) = self.dense_permuted_range() {
            let out = self.view.storage().to_dtype_at(start, len, dtype)?;
            let l = self.layout();
            return Ok(Tensor {
                view: View::with_layout(Arc::new(out), Layout::new(l.shape(), l.strides(), 0))?,
                autograd: None,
            });
        }
        Tensor::from_storage(self.view.contiguous()?.to_dtype(dtype)?, self.shape())
    }

    /// The elements, row-major, copied to the host; `T` must match the dtype.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        self.read_as("to_vec")
    }

    /// [`Tensor::to_vec`] for `op`, which names itself in the error of a wrong `T`.
    pub(crate) fn read_as<T: WithDType>(&self, op: &'static str) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::WrongElementType {
                op,
                dtype: self.dtype(),
                requested: T::DTYPE,
            });
        }
        if let Some((start, len)) = self.dense_range() {
            return Ok(self.view.storage().to_vec_at::<T>(start, len)?);
        }
        Ok(self.view.contiguous()?.to_vec::<T>()?)
    }

    /// The elements of a `Bool` tensor, row-major, copied to the host.
    pub fn to_bool_vec(&self) -> Result<Vec<bool>> {
        self.read_bools_as("to_bool_vec")
    }

    /// [`Tensor::to_bool_vec`] for `op`, which names itself in the error of another dtype.
    pub(crate) fn read_bools_as(&self, op: &'static str) -> Result<Vec<bool>> {
        if self.dtype() != DType::Bool {
            return Err(Error::WrongElementType {
                op,
                dtype: self.dtype(),
                requested: DType::Bool,
            });
        }
        let bytes = self.view.contiguous()?.to_bytes()?;
        Ok(bytes.into_iter().map(|b| b != 0).collect())
    }

    /// A view with another shape (one entry may be -1); an error when the strides do not allow
    /// it (use [`Tensor::reshape`]).
    pub fn view(&self, shape: impl Dims) -> Result<Tensor> {
        let shape = self.layout().infer_shape(&shape_spec(&shape))?;
        crate::autograd::op1(
            "view",
            self,
            || self.with_layout(self.layout().view(&shape)?),
            || {
                let back = self.shape().to_vec();
                move |g: &Tensor| g.reshape(&back[..])
            },
        )
    }

    /// [`Tensor::view`] when possible, else a contiguous copy with the new shape.
    #[track_caller]
    pub fn reshape(&self, shape: impl Dims) -> Result<Tensor> {
        let shape = shape_spec(&shape);
        crate::autograd::op1(
            "reshape",
            self,
            || self.reshape_raw(&shape),
            || {
                let back = self.shape().to_vec();
                move |g: &Tensor| g.reshape(&back[..])
            },
        )
    }

    fn reshape_raw(&self, shape: &[isize]) -> Result<Tensor> {
        let shape = shape.to_vec();
        match self.view(&shape) {
            Ok(t) => Ok(t),
            Err(Error::Storage(genesis_storage::Error::Layout(
                genesis_storage::LayoutError::NotViewable { .. },
            ))) => self.contiguous()?.view(&shape),
            Err(e) => Err(e),
        }
    }

    /// Swaps two dimensions (negative counts from the end; a 0-d tensor takes 0 and -1).
    pub fn transpose(&self, a: impl Dim, b: impl Dim) -> Result<Tensor> {
        let (a, b) = (a.to_dim(), b.to_dim());
        if self.dim() == 0 {
            wrap_dim("transpose", a as i64, 0)?;
            wrap_dim("transpose", b as i64, 0)?;
            return Ok(self.clone());
        }
        crate::autograd::op1(
            "transpose",
            self,
            || self.with_layout(self.layout().transpose(a, b)?),
            move || move |g| g.transpose(a, b),
        )
    }

    /// The transpose of a matrix (`transpose(0, 1)`; a 0-d or 1-d tensor is returned as is).
    /// As PyTorch, more than 2 dimensions is an error (use [`Tensor::transpose`]).
    pub fn t(&self) -> Result<Tensor> {
        match self.dim() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            d => Err(Error::InvalidArgument {
                op: "t",
                reason: format!("t() expects a tensor with <= 2 dimensions, but self is {d}D"),
            }),
        }
    }

    /// Reorders the dimensions: dimension `i` of the result is dimension `perm[i]` of `self`
    /// (negative counts from the end).
    pub fn permute(&self, perm: impl Dims) -> Result<Tensor> {
        let rank = self.dim();
        let perm = perm
            .to_dims()
            .into_iter()
            .map(|d| match usize::try_from(d) {
                // Non-negative entries go to the layout as they are: it checks the permutation.
                Ok(d) => Ok(d),
                Err(_) => Ok(wrap_dim("permute", d, rank)?.unwrap_or(0)),
            })
            .collect::<Result<Vec<usize>>>()?;
        crate::autograd::op1(
            "permute",
            self,
            || self.with_layout(self.layout().permute(&perm)?),
            || {
                let mut inverse = vec![0isize; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    if let Some(slot) = inverse.get_mut(p) {
                        *slot = i as isize;
                    }
                }
                move |g: &Tensor| g.permute(&inverse[..])
            },
        )
    }

    /// Removes dimension `dim` if its size is 1 (a 0-d tensor takes 0 and -1).
    pub fn squeeze(&self, dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        if wrap_dim("squeeze", dim as i64, self.dim())?.is_none() {
            return Ok(self.clone());
        }
        crate::autograd::op1(
            "squeeze",
            self,
            || self.with_layout(self.layout().squeeze(dim)?),
            || {
                let back = self.shape().to_vec();
                move |g: &Tensor| g.reshape(&back[..])
            },
        )
    }

    /// Inserts a dimension of size 1.
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        crate::autograd::op1(
            "unsqueeze",
            self,
            || self.with_layout(self.layout().unsqueeze(dim)?),
            || {
                let back = self.shape().to_vec();
                move |g: &Tensor| g.reshape(&back[..])
            },
        )
    }

    /// Broadcasts to `shape` without copying (stride 0 where elements repeat); -1 keeps the
    /// size of that dimension (aligned at the last dimension), as in PyTorch.
    pub fn expand(&self, shape: impl Dims) -> Result<Tensor> {
        let want = shape.to_dims();
        let extra = want.len().checked_sub(self.dim());
        let shape = want
            .iter()
            .enumerate()
            .map(|(i, &d)| match (d, extra) {
                (-1, Some(extra)) if i >= extra => Ok(self.shape()[i - extra]),
                _ => usize::try_from(d).map_err(|_| Error::InvalidArgument {
                    op: "expand",
                    reason: format!(
                        "size {d} in {want:?} (-1 keeps a size, only for the tensor's own dimensions, {:?})",
                        self.shape()
                    ),
                }),
            })
            .collect::<Result<Vec<usize>>>()?;
        crate::autograd::op1(
            "expand",
            self,
            || self.with_layout(self.layout().expand(&shape)?),
            || {
                let back = self.shape().to_vec();
                move |g: &Tensor| crate::autograd::sum_to(g, &back)
            },
        )
    }

    /// Elements `start..start + len` of dimension `dim` (both negative from the end).
    pub fn narrow(&self, dim: impl Dim, start: impl Dim, len: usize) -> Result<Tensor> {
        let (dim, start) = (dim.to_dim(), start.to_dim());
        // A negative start counts from the end of the dimension, as in PyTorch.
        let start = if start < 0 {
            let size = self.layout().dim(dim).map(|d| self.shape()[d]).unwrap_or(0);
            match usize::try_from(start + size as isize) {
                Ok(s) => s,
                Err(_) => {
                    return Err(Error::InvalidArgument {
                        op: "narrow",
                        reason: format!(
                            "start {start} is out of range for a dimension of size {size}"
                        ),
                    });
                }
            }
        } else {
            start as usize
        };
        self.view_op("narrow", self.layout().narrow(dim, start, len)?)
    }

    /// Concatenates tensors along `dim` (negative counts from the end) into a new tensor.
    /// All must have the same device and rank, and the same sizes outside `dim`; the result's
    /// dtype is the promotion of theirs ([`promote_types`](crate::promote_types), as
    /// `torch.cat`), each input of another dtype converted on the way.
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        if !crate::autograd::wants(tensors) {
            return Tensor::cat_raw(tensors, dim);
        }
        let out = crate::no_grad(|| Tensor::cat_raw(tensors, dim))?;
        // Each input's gradient is its slice of the output's along `dim`.
        let d = out.layout().dim(dim)?;
        let parts: Vec<(usize, usize, DType)> = {
            let mut at = 0;
            tensors
                .iter()
                .map(|t| {
                    let n = t.shape()[d];
                    at += n;
                    (at - n, n, t.dtype())
                })
                .collect()
        };
        let back = move |g: &Tensor, needs: &[bool]| -> Result<Vec<Option<Tensor>>> {
            parts
                .iter()
                .zip(needs)
                .map(|(&(start, n, dtype), &need)| {
                    if !need {
                        return Ok(None);
                    }
                    let part = g.narrow(d as isize, start as isize, n)?;
                    Ok(Some(crate::autograd::cast_grad(part, dtype)?))
                })
                .collect()
        };
        Ok(crate::autograd::record("cat", tensors, out, Box::new(back)))
    }

    fn cat_raw(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::InvalidArgument {
            op: "cat",
            reason: "needs at least one tensor".into(),
        })?;
        let d = first.layout().dim(dim)?;
        let mut shape = first.shape().to_vec();
        shape[d] = 0;
        let mut dtype = first.dtype();
        for t in tensors {
            first.check_device("cat", t)?;
            dtype = crate::promote::promote_types(dtype, t.dtype());
            let fits = t.dim() == first.dim()
                && t.shape()
                    .iter()
                    .zip(first.shape())
                    .enumerate()
                    .all(|(k, (a, b))| k == d || a == b);
            if !fits {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
            shape[d] =
                shape[d]
                    .checked_add(t.shape()[d])
                    .ok_or_else(|| Error::InvalidArgument {
                        op: "cat",
                        reason: "the result's size overflows".into(),
                    })?;
        }
        // Each input is one strided copy into its slice of the output (a byte copy, a 2-D copy
        // or the strided kernel, as the two layouts allow).
        let mut dst = Storage::empty(numel_of("cat", &shape)?, dtype, first.device())?;
        let full = Layout::contiguous(&shape);
        let mut at = 0usize;
        for t in tensors {
            let n = t.shape()[d];
            if n > 0 && t.numel() > 0 {
                let part = full.narrow(d as isize, at, n)?;
                let t = t.cast_to(dtype)?;
                dst.copy_strided_from(&part, t.view.storage(), t.layout())?;
            }
            at += n;
        }
        Tensor::from_storage(dst, &shape)
    }

    /// Stacks tensors of one shape along a new dimension `dim` (in `-(rank+1)..=rank`); dtypes
    /// promote as in [`Tensor::cat`].
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let dim = dim.to_dim();
        let first = tensors.first().ok_or_else(|| Error::InvalidArgument {
            op: "stack",
            reason: "needs at least one tensor".into(),
        })?;
        let mut parts = Vec::with_capacity(tensors.len());
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: "stack",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
            parts.push(t.unsqueeze(dim)?);
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, dim.rem_euclid(first.dim() as isize + 1))
    }

    /// `self[items]` (build `items` with `genesis::s![...]`): a view for basic indexing, a new
    /// tensor for advanced indexing.
    #[track_caller]
    pub fn i(&self, items: &[IndexItem]) -> Result<Tensor> {
        crate::autograd::op1(
            "index",
            self,
            || {
                Ok(Tensor {
                    view: genesis_index::get(&self.view, items)?,
                    autograd: None,
                })
            },
            || {
                let (shape, dtype) = (self.shape().to_vec(), self.dtype());
                let kept: Vec<IndexItem> = items.to_vec();
                move |g: &Tensor| {
                    // The gradient lands where the elements came from; repeats add up.
                    let z = Tensor::zeros(&shape[..], dtype, g.device())?;
                    z.index_put_(&kept, g, true)?;
                    Ok(z)
                }
            },
        )
    }

    fn assign(&self, items: &[IndexItem], value: Value<'_>, accumulate: bool) -> Result<()> {
        self.check_in_place("index_put_")?;
        // Writes go to the shared storage, under its write lock: every view of it sees them,
        // as in PyTorch. Operands that live in the same storage are copied first (the answer
        // of the values before the write, and no read of a storage being written).
        let storage = self.view.storage();
        let own = |v: &View| -> Result<View> {
            Ok(View::with_layout(
                Arc::new(v.contiguous()?),
                Layout::contiguous(v.layout().shape()),
            )?)
        };
        let items = items
            .iter()
            .map(|item| match item {
                IndexItem::Stored(ix) if Arc::ptr_eq(ix.view.storage(), storage) => {
                    Ok(IndexItem::stored(own(&ix.view)?))
                }
                other => Ok(other.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        let own_value;
        let value = match value {
            Value::Tensor(v) if Arc::ptr_eq(v.storage(), storage) => {
                own_value = own(v)?;
                Value::Tensor(&own_value)
            }
            v => v,
        };
        // Every storage the assignment reads, for the lock order.
        let mut sources: Vec<&Storage> = items
            .iter()
            .filter_map(|item| match item {
                IndexItem::Stored(ix) => Some(&**ix.view.storage()),
                _ => None,
            })
            .collect();
        if let Value::Tensor(v) = &value {
            sources.push(v.storage());
        }
        sources.dedup_by(|a, b| std::ptr::eq(*a, *b));
        let layout = self.layout();
        self.write_storage("index_put", &sources, |s| {
            genesis_index::set(s, layout, &items, value, accumulate).map_err(Error::from)
        })
    }

    /// `self[items] = value` (`value` broadcast to the indexed shape), or with `accumulate`
    /// `self[items] += value` adding at duplicate indices: PyTorch's `index_put_(indices,
    /// values, accumulate)`, with any index items (slices, integers, index and mask tensors,
    /// `NEW`, `ELLIPSIS`), in place. The write goes to the storage, so every tensor that shares
    /// it (a view of `self`, or `self` a view of it) sees it, as in PyTorch. A `value` or an
    /// index tensor that shares `self`'s storage is read before the write.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor, s};
    /// # fn main() -> genesis::Result<()> {
    /// let m = Tensor::zeros(&[3, 4], DType::F32, Device::Cpu)?;
    /// let row = m.i(&s![1])?; // a view of row 1
    /// m.index_put_(&s![1, 1..3], &Tensor::full(&[2], 5.0f32, Device::Cpu)?, false)?;
    /// assert_eq!(row.to_vec::<f32>()?, [0.0, 5.0, 5.0, 0.0]);
    /// row.index_put_scalar_(&s![..;3], -1.0)?; // through the view, seen by `m`
    /// assert_eq!(m.i(&s![1])?.to_vec::<f32>()?, [-1.0, 5.0, 5.0, -1.0]);
    /// // Accumulating: both 2s add up in row 0.
    /// let idx = Tensor::from_slice(&[2i64, 2], &[2], Device::Cpu)?;
    /// m.index_put_(&s![0, @&idx], &Tensor::ones(&[2], DType::F32, Device::Cpu)?, true)?;
    /// assert_eq!(m.i(&s![0])?.to_vec::<f32>()?, [0.0, 0.0, 2.0, 0.0]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without `accumulate`, a `value` of another dtype is converted to `self`'s first, as
    /// Python's `x[i] = v` converts (any dtype into any other, floats into integers truncating
    /// toward zero). With it, the in-place rule applies: the promoted dtype of `self` and
    /// `value` must cast into `self`'s ([`can_cast`](crate::can_cast); an integer tensor takes
    /// no float value), and `value` is converted to it.
    #[doc(alias = "__setitem__")]
    pub fn index_put_(&self, items: &[IndexItem], value: &Tensor, accumulate: bool) -> Result<()> {
        let recorded = self.in_place_recorded("index_put_", &[value], |x| {
            x.index_put(items, value, accumulate)
        })?;
        if recorded {
            return Ok(());
        }
        if accumulate {
            let r = crate::promote::promote_types(self.dtype(), value.dtype());
            crate::promote::check_cast("index_put_", r, self.dtype())?;
        }
        let value = value.cast_to(self.dtype())?;
        self.assign(items, Value::Tensor(&value.view), accumulate)
    }

    /// A copy of `self` with `self[items] = values` (or, with `accumulate`, `+= values`,
    /// adding at repeated indices): PyTorch's out-of-place `index_put`, differentiable. The
    /// gradient of `self` is the output's with the written positions zeroed (all of it when
    /// accumulating); of `values`, the output's gradient at `items`, summed to `values`'
    /// shape. `values` converts to `self`'s dtype as in [`Tensor::index_put_`].
    #[track_caller]
    pub fn index_put(
        &self,
        items: &[IndexItem],
        values: &Tensor,
        accumulate: bool,
    ) -> Result<Tensor> {
        let op = "index_put";
        crate::autograd::op(
            op,
            &[self, values],
            || {
                let out = self.deep_clone()?;
                if accumulate {
                    out.index_put_(items, values, true)?;
                } else {
                    out.index_put_(items, values, false)?;
                }
                Ok(out)
            },
            |_| {
                let kept: Vec<IndexItem> = items.to_vec();
                let (vs, vd) = (values.shape().to_vec(), values.dtype());
                Box::new(move |g, needs| {
                    let gx = if needs[0] {
                        let gx = g.deep_clone()?;
                        if !accumulate {
                            gx.index_put_scalar_(&kept, 0.0)?;
                        }
                        Some(gx)
                    } else {
                        None
                    };
                    let gv = if needs[1] {
                        // `values` may carry leading size-1 dimensions beyond the target's.
                        let picked = g.i(&kept)?;
                        let extra = vs.len().saturating_sub(picked.dim());
                        let summed = crate::autograd::sum_to(&picked, &vs[extra..])?;
                        Some(crate::autograd::cast_grad(summed.reshape(&vs[..])?, vd)?)
                    } else {
                        None
                    };
                    Ok(vec![gx, gv])
                })
            },
        )
    }

    /// `self[items] = value` for a scalar, converted to the dtype as a fill value (PyTorch's
    /// checked conversion, as for [`Tensor::masked_fill`] and [`Tensor::full_like`]: a float
    /// into an integer dtype must lie in its range and drops its fraction); in place, as
    /// [`Tensor::index_put_`]. (PyTorch's `index_fill_(dim, index, value)` is
    /// [`Tensor::index_fill_`].)
    #[doc(alias = "__setitem__")]
    pub fn index_put_scalar_(&self, items: &[IndexItem], value: impl Scalar) -> Result<()> {
        let host = crate::args::checked_scalar("index_put_scalar_", self.dtype(), value.value())?;
        let x = host.to_f64_vec()?[0];
        if x.abs() > 9_007_199_254_740_992.0 {
            // Integers beyond 2^53 are not f64 values: they go as a 0-d tensor.
            let s = Tensor::from_storage(host.to_device(self.device())?, &[])?;
            return self.assign(items, Value::Tensor(&s.view), false);
        }
        self.assign(items, Value::Scalar(x), false)
    }

    /// `op(self)` elementwise into a new contiguous tensor of the same shape and device: the
    /// funnel of every unary op of the table ([`UnaryOp`]; `x.erf()` is `x.unary(UnaryOp::Erf)`).
    /// The dtype stays, but for the float-only ops ([`UnaryOp::float_only`]) of integers and
    /// bools, which give float32 (PyTorch's rule). Floats compute in f32 (f16/bf16 widened and
    /// rounded once; float64 in `f64`, on every device); the library functions (exp, erf, ...)
    /// are within a few ulp of the exact value ([`UnaryOp::twin`]), the other ops exact.
    /// Integers wrap; of bools, `sign` is a copy, `square` int64, the others an error.
    #[track_caller]
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let (saves_x, saves_out) = crate::autograd::unary_saves(op);
        crate::autograd::op(
            op.name(),
            &[self],
            || self.unary_raw(op),
            |out| {
                let x = saves_x.then(|| crate::autograd::Saved::new(op.name(), self));
                let y = saves_out.then(|| crate::autograd::Saved::new(op.name(), out));
                Box::new(move |g, _| {
                    let x = x.as_ref().map(|s| s.get()).transpose()?;
                    let y = y.as_ref().map(|s| s.get()).transpose()?;
                    Ok(vec![crate::autograd::unary_grad(
                        op,
                        x.as_ref(),
                        y.as_ref(),
                        g,
                    )?])
                })
            },
        )
    }

    /// [`Tensor::unary`] without recording.
    fn unary_raw(&self, op: UnaryOp) -> Result<Tensor> {
        if !has_kernels(self.dtype()) || (op.float_only() && !self.dtype().is_float()) {
            return self.unary_promoted(op);
        }
        let (a, start) = self.dense_operand(self.shape())?;
        Tensor::from_storage(a.unary_at(op, start, self.numel())?, self.shape())
    }

    /// In place: `self = op(self)`, for any tensor (a strided view included; see
    /// [`Tensor::binary_`]). A contiguous `self` of a dtype the kernels have allocates
    /// nothing; a float result into an integer or bool tensor is an error (as in PyTorch).
    #[track_caller]
    pub fn unary_(&self, op: UnaryOp) -> Result<()> {
        if self.in_place_recorded(op.name(), &[], |x| x.unary(op))? {
            return Ok(());
        }
        if !has_kernels(self.dtype()) || (op.float_only() && !self.dtype().is_float()) {
            return self.unary_promoted_(op);
        }
        self.view.storage().unary_assign_shared(op, self.layout())?;
        Ok(())
    }

    /// In place: every element of `self` becomes `value` (PyTorch's `fill_`), which must be
    /// representable in the dtype. `self` may be any view (a slice, a column, a transpose):
    /// the elements it sees are written in its storage, and every tensor sharing the storage
    /// sees them. A view that repeats elements (an `expand`) is an error. On CUDA the value
    /// is broadcast by the strided-copy kernel. Bumps [`Tensor::version`].
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor, s};
    /// # fn main() -> genesis::Result<()> {
    /// let m = Tensor::ones(&[6, 8], DType::F32, Device::Cpu)?;
    /// m.i(&s![2..5, 3..7])?.fill_(0.0)?; // PyTorch's m[2:5, 3:7] = 0
    /// assert_eq!(m.sum()?.to_vec::<f32>()?, [48.0 - 12.0]);
    /// m.t()?.i(&s![0])?.fill_(7.0)?; // column 0, through a transpose
    /// assert_eq!(m.i(&s![.., 0])?.to_vec::<f32>()?, [7.0; 6]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn fill_(&self, value: impl Scalar) -> Result<()> {
        let everywhere = || Tensor::ones(self.shape(), DType::Bool, self.device());
        if self.in_place_recorded("fill_", &[], |x| x.masked_fill(&everywhere()?, value))? {
            return Ok(());
        }
        let one = crate::args::checked_scalar("fill_", self.dtype(), value.value())?;
        self.view.storage().fill_shared(self.layout(), &one)?;
        Ok(())
    }

    /// In place: every element of `self` becomes 0 (PyTorch's `zero_`; see [`Tensor::fill_`]).
    #[track_caller]
    pub fn zero_(&self) -> Result<()> {
        self.fill_(0)
    }

    /// In place: `self`'s elements become `src`'s (PyTorch's `copy_`): `src` is broadcast to
    /// `self`'s shape, converted to `self`'s dtype, and may be on any device. `self` may be
    /// any view; an `src` that overlaps `self` in one storage is read before the write.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor, s};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 5.0, 1.0, DType::F32, Device::Cpu)?;
    /// x.i(&s![1..])?.copy_(&x.i(&s![..4])?)?; // overlapping views: shift right by one
    /// assert_eq!(x.to_vec::<f32>()?, [0.0, 0.0, 1.0, 2.0, 3.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        let everywhere = || Tensor::ones(self.shape(), DType::Bool, self.device());
        let recorded = self.in_place_recorded("copy_", &[src], |x| {
            let s = src.to(x.device())?.to_dtype(x.dtype())?;
            Tensor::where_cond(&everywhere()?, &s, x)
        })?;
        if recorded {
            return Ok(());
        }
        let op = "copy_";
        let shape = broadcast_shape(op, self.shape(), src.shape())?;
        if shape != self.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: src.shape().to_vec(),
            });
        }
        let converted;
        let src = if src.dtype() == self.dtype() {
            src
        } else {
            converted = src.to_dtype(self.dtype())?;
            &converted
        };
        let layout = src.layout().expand(self.shape())?;
        self.view
            .storage()
            .copy_strided_from_shared(self.layout(), src.view.storage(), &layout)?;
        Ok(())
    }

    /// A new tensor with a copy of this one's elements (PyTorch's `torch.clone`): same shape,
    /// dtype and device, contiguous, in its own storage, so writes to either are not seen by
    /// the other. [`Clone::clone`] (`t.clone()`) is different: it makes another handle to the
    /// same storage, as a view does.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::Cpu)?;
    /// let (deep, handle) = (x.deep_clone()?, x.clone());
    /// x.fill_(0.0)?;
    /// assert_eq!(deep.to_vec::<f32>()?, [1.0, 2.0]); // its own storage
    /// assert_eq!(handle.to_vec::<f32>()?, [0.0, 0.0]); // the same storage
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn deep_clone(&self) -> Result<Tensor> {
        crate::autograd::op1(
            "clone",
            self,
            || self.deep_clone_raw(),
            || |g| Ok(g.clone()),
        )
    }

    fn deep_clone_raw(&self) -> Result<Tensor> {
        let s = self.view.storage();
        let own = if s.is_pinned() {
            self.view.contiguous()?.to_pinned()?
        } else {
            self.view.contiguous()?
        };
        Tensor::from_storage(own, self.shape())
    }

    /// How many times this tensor's storage has been written in place (PyTorch's
    /// `_version`): every in-place op, fill, copy, index assignment or masked fill through
    /// any tensor that shares the storage adds one. A new tensor starts at 0.
    pub fn version(&self) -> u64 {
        self.view.storage().version()
    }

    /// The address of the tensor's first element (PyTorch's `data_ptr()`): a device address
    /// for a CUDA tensor, a host address otherwise; the storage's address plus the view's
    /// offset in bytes (for an empty tensor the address may point nowhere).
    ///
    /// For libraries that queue work on the memory themselves (NCCL): the address stays valid
    /// while a tensor sharing the storage lives; device work through it must be queued on a
    /// stream ordered with the tensor's other users (its device's current stream, or another
    /// one named to [`Tensor::record_stream`]). Host memory must not be touched through it
    /// while Genesis may read or write the storage.
    pub fn data_ptr(&self) -> u64 {
        let st = self.view.storage();
        st.data_ptr() + (self.layout().offset() * st.dtype().size()) as u64
    }

    /// Marks this CUDA tensor's memory as used by work queued on `stream` (PyTorch's
    /// `Tensor.record_stream`): when the last tensor sharing the storage is dropped, the pool
    /// reuses the memory only once the work queued on `stream` until then is done. Needed when
    /// the tensor is used on a stream other than the one current when it was allocated.
    /// An error for a tensor not on CUDA or a stream of another device.
    pub fn record_stream(&self, stream: &crate::cuda::Stream) -> Result<()> {
        if self.device() != Device::Cuda(stream.device()) {
            return Err(Error::DeviceMismatch {
                op: "record_stream",
                lhs: self.device(),
                rhs: Device::Cuda(stream.device()),
            });
        }
        // Facade streams are pooled or the legacy stream: they outlive the pool's use.
        Ok(self.view.storage().record_stream(stream.id())?)
    }

    /// The first element of a contiguous tensor (an error for a strided one), for the `_out`
    /// destinations, which are written as one run.
    pub(crate) fn in_place_start(&self, op: &'static str) -> Result<usize> {
        if !self.is_contiguous() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "the destination must be contiguous here; this one has shape {:?} and strides {:?}",
                    self.shape(),
                    self.strides()
                ),
            });
        }
        Ok(self.first_element())
    }

    /// Where the elements start in the storage, for ops that take a contiguous run: the
    /// layout's offset, or 0 when there are no elements (a view of nothing, such as
    /// `narrow(0, 2, 0)` of an empty tensor, may have an offset past the end of its storage,
    /// and the storage ops check `start..start + len` against it).
    pub(crate) fn first_element(&self) -> usize {
        if self.numel() == 0 {
            0
        } else {
            self.layout().offset()
        }
    }

    /// Runs `f` on this tensor's storage under its write lock, `f` reading (only) the
    /// storages `sources` (the way `_out` forms and in-place ops write a storage that views
    /// share; see [`Storage::with_exclusive_reading`]).
    pub(crate) fn write_storage<R>(
        &self,
        op: &'static str,
        sources: &[&Storage],
        f: impl FnOnce(&mut Storage) -> Result<R>,
    ) -> Result<R> {
        self.view.storage().with_exclusive_reading(op, sources, f)
    }

    /// `op(self, scalar)` elementwise, the scalar taken in `self`'s dtype: it is converted to
    /// that dtype first (for integer dtypes it must be a whole number in range), and the op is
    /// `op(self, s)` for `s` a 0-d tensor of `self`'s dtype, which keeps `self`'s dtype (but
    /// for `Div` of integers, float32). The named ops and operators take a scalar by
    /// PyTorch's rules instead (`int32 tensor + 0.5` is float32).
    #[track_caller]
    pub fn binary_scalar(&self, op: BinaryOp, scalar: f64) -> Result<Tensor> {
        use crate::autograd::{Operand2, binary_grad};
        crate::autograd::op(
            op.name(),
            &[self],
            || {
                let s = host_scalar(op.name(), self.dtype(), scalar)?;
                self.binary_scalar_storage(op, &s)
            },
            |_| {
                let keep = !matches!(op, BinaryOp::Mul | BinaryOp::Div);
                let a = crate::autograd::SavedOrMeta::new(op.name(), self, keep);
                Box::new(move |g, _| {
                    let [ga, _] = binary_grad(
                        op,
                        &a.get(g)?,
                        Operand2::Scalar(scalar),
                        g,
                        g,
                        [true, false],
                    )?;
                    Ok(vec![ga])
                })
            },
        )
    }

    /// `op(self, s)` for `s` one host element of `self`'s dtype.
    pub(crate) fn binary_scalar_storage(&self, op: BinaryOp, s: &Storage) -> Result<Tensor> {
        if !has_kernels(self.dtype()) || (op.float_only() && !self.dtype().is_float()) {
            let s = Tensor::from_storage(s.to_device(self.device())?, &[])?;
            return self.binary(op, &s);
        }
        // `x ** 0.5` is `sqrt(x)`, as in PyTorch and NumPy: the same values but where C's `pow`
        // differs from `sqrt` (pow(-inf, 0.5) = inf and pow(-0, 0.5) = 0; sqrt gives NaN and -0).
        if op == BinaryOp::Pow && self.dtype().is_float() && s.to_f64_vec()?[..] == [0.5] {
            return self.unary(UnaryOp::Sqrt);
        }
        let out = self
            .view
            .storage()
            .binary_strided(op, self.layout(), BinaryRhs::Scalar(s))?;
        Tensor::from_storage(out, self.shape())
    }

    /// This tensor's elements in row-major order at `shape` as `(storage, first element)`:
    /// its own storage when it is contiguous at that shape (no copy), otherwise a contiguous
    /// temporary gathered by the strided-copy kernel.
    pub(crate) fn dense_operand(&self, shape: &[usize]) -> Result<(Arc<Storage>, usize)> {
        if self.shape() == shape && self.is_contiguous() {
            return Ok((Arc::clone(self.view.storage()), self.first_element()));
        }
        let t = if self.shape() == shape {
            self.view.contiguous()?
        } else {
            self.expand(shape)?.view.contiguous()?
        };
        Ok((Arc::new(t), 0))
    }

    pub(crate) fn check_operands(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        self.check_device(op, other)
    }

    /// `self` and `other` on one device ([`Error::DeviceMismatch`] otherwise).
    pub(crate) fn check_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }
}

/// PyTorch lets a 0-d host tensor join an op with a tensor on another device (as a value
/// taking part in type promotion as a 0-d tensor): the operands with the 0-d host one copied
/// to the other's device, or `None` when they are on one device or neither is such a tensor
/// (a mismatch the op then reports).
pub(crate) fn host_scalar_moved(a: &Tensor, b: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    if a.device() == b.device() {
        return Ok(None);
    }
    if b.dim() == 0 && b.device() == Device::Cpu {
        return Ok(Some((a.clone(), b.to(a.device())?)));
    }
    if a.dim() == 0 && a.device() == Device::Cpu {
        return Ok(Some((a.to(b.device())?, b.clone())));
    }
    Ok(None)
}

/// `value` as a one-element host storage of `dtype` through [`Storage::scalar`], the one exact
/// scalar conversion: for integer dtypes (and bool) a whole number in range, for float dtypes
/// a value that does not overflow to an infinity.
pub(crate) fn host_scalar(op: &'static str, dtype: DType, value: f64) -> Result<Storage> {
    match Storage::scalar(value, dtype) {
        Err(genesis_storage::Error::ScalarOutOfRange { .. }) => {
            Err(Error::ScalarOutOfRange { op, value, dtype })
        }
        r => Ok(r?),
    }
}

/// The NumPy broadcast of two shapes: aligned at the last dimension, each pair of sizes equal
/// or one of them 1. A shape of more than [`MAX_RANK`](crate::MAX_RANK) dimensions is
/// [`LayoutError::RankTooLarge`](crate::LayoutError::RankTooLarge).
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    genesis_storage::check_rank(rank)?;
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::ShapeMismatch {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
            }),
        })
        .collect()
}

/// A tensor as an index tensor (`x.i(&s![@&idx])`): `I64`, `I32` or `Bool` (a mask), on any
/// device; a CUDA index tensor stays on its device (its values are checked there; a mask is
/// counted there, which the host reads to size the result). Other dtypes are rejected with
/// [`genesis_index::Error::InvalidIndex`] when the index is planned.
impl genesis_index::ToIndex for &Tensor {
    fn to_index_item(self) -> IndexItem {
        IndexItem::stored(self.view.clone())
    }
}

impl genesis_index::ToIndex for Tensor {
    fn to_index_item(self) -> IndexItem {
        IndexItem::stored(self.view)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}
