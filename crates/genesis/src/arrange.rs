//! PyTorch's shape and arrangement ops: `split`, `split_sizes`, `chunk`, `flatten`, `ravel`,
//! `unflatten`, `repeat`, `tile`, `flip`, `roll`, `tril`, `triu`, `diagonal`, `unfold`.
//!
//! Built from the facade's views (layouts over the same storage) and its copies, so that every
//! device runs them without kernels of their own: the splits, `flatten` (where the layout
//! allows), `unflatten`, `diagonal` and `unfold` are views; `repeat`/`tile` and `flip` are one
//! strided copy of a view (stride 0 for the repeats, negative strides for the flips); `roll`
//! copies the blocks of the result in one pass (up to three rolled dimensions at a time);
//! `tril` and `triu` are one `where` with a broadcast `[rows, cols]` mask.

use genesis_storage::{Layout, Storage};

use crate::args::{Dim, Dims, wrap_dim};
use crate::tensor::numel_of;
use crate::{DType, Error, Result, Tensor};

/// The rank up to which the strided-copy kernel copies a layout in one launch.
const COPY_RANK: usize = genesis_kernels::copy::MAX_DIMS;

/// A vector for `n` pieces, or [`Error::OutOfMemory`] when the host cannot hold it (a split of
/// a huge empty dimension into pieces of 1).
pub(crate) fn pieces<T>(n: usize) -> Result<Vec<T>> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>().max(1));
    genesis_storage::check_host_bytes(bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| genesis_storage::Error::HostOutOfMemory { bytes })?;
    Ok(v)
}

impl Tensor {
    /// `dim` of a tensor of at least one dimension (PyTorch's "expects at least a
    /// 1-dimensional tensor" for a 0-d one).
    fn dim_1d(&self, op: &'static str, dim: impl Dim) -> Result<usize> {
        if self.dim() == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{op} expects at least a 1-dimensional tensor"),
            });
        }
        Ok(wrap_dim(op, dim.to_dim() as i64, self.dim())?.unwrap_or(0))
    }

    /// Elements `start..start + len` of dimension `d` (already wrapped and in range).
    fn narrow_at(&self, d: usize, start: usize, len: usize) -> Result<Tensor> {
        self.with_layout(self.layout().narrow(d as isize, start, len)?)
    }

    /// The elements `layout` names in this tensor's storage, row-major, as a new contiguous
    /// tensor of `layout`'s shape: one strided copy (the layout coalesced first; a layout of
    /// more dimensions than the copy kernel takes is copied a block of its inner dimensions at
    /// a time).
    pub(crate) fn copy_layout(&self, layout: &Layout) -> Result<Tensor> {
        crate::autograd::op1(
            "copy",
            self,
            || self.copy_layout_raw(layout),
            || {
                let back = crate::autograd::LayoutGrad::of(self, layout);
                move |g: &Tensor| back.grad(g)
            },
        )
    }

    fn copy_layout_raw(&self, layout: &Layout) -> Result<Tensor> {
        let shape = layout.shape().to_vec();
        let n = numel_of("copy", &shape)?;
        let storage = self.view.storage();
        if n == 0 {
            return Tensor::from_storage(Storage::empty(0, self.dtype(), self.device())?, &shape);
        }
        let c = layout.coalesced();
        if c.rank() <= COPY_RANK {
            return Tensor::from_storage(storage.contiguous(&c)?, &shape);
        }
        let mut dst = Storage::empty(n, self.dtype(), self.device())?;
        copy_pair(&mut dst, &Layout::contiguous(c.shape()), storage, &c)?;
        Tensor::from_storage(dst, &shape)
    }

    /// A contiguous tensor with the same elements: this one when it is contiguous, else a
    /// copy ([`Tensor::contiguous`], for layouts of any rank).
    pub(crate) fn dense(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            self.copy_layout(self.layout())
        }
    }

    /// A view with `shape` when the layout allows it, else a copy with it ([`Tensor::reshape`],
    /// for layouts of any rank).
    pub(crate) fn reshape_any(&self, shape: &[usize]) -> Result<Tensor> {
        if self.numel() == 0 {
            // (Without the product of the other sizes, which may not be representable.)
            let layout = Layout::try_contiguous(shape)?;
            if layout.numel() != 0 {
                return Err(genesis_storage::LayoutError::ElementCount {
                    shape: shape.iter().map(|&d| d as isize).collect(),
                    numel: 0,
                }
                .into());
            }
            return self.with_layout(layout);
        }
        match self.view(shape) {
            Err(Error::Storage(genesis_storage::Error::Layout(
                genesis_storage::LayoutError::NotViewable { .. },
            ))) => self.copy_layout(self.layout())?.view(shape),
            r => r,
        }
    }

    /// The tensor cut along `dim` into pieces of `split_size` (the last one shorter when the
    /// size does not divide), as views of it (PyTorch's `torch.split` with an integer).
    /// A `split_size` at least the dimension's size gives one piece; 0 is only allowed for a
    /// dimension of size 0 (one empty piece). A 0-d tensor is an error, as in PyTorch.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 10.0, 1.0, DType::I64, Device::Cpu)?.reshape(&[5, 2])?;
    /// let parts = x.split(2, 0)?;
    /// let shapes: Vec<&[usize]> = parts.iter().map(|p| p.shape()).collect();
    /// assert_eq!(shapes, [&[2, 2][..], &[2, 2], &[1, 2]]);
    /// assert_eq!(parts[2].to_vec::<i64>()?, [8, 9]);
    /// assert!(parts[0].shares_storage(&x)); // views
    /// let cols = x.split_sizes(&[1, 1], -1)?;
    /// assert_eq!(cols[1].to_vec::<i64>()?, [1, 3, 5, 7, 9]);
    /// assert!(x.split_sizes(&[2, 2], 0).is_err()); // must sum to 5
    /// # Ok(())
    /// # }
    /// ```
    pub fn split(&self, split_size: usize, dim: impl Dim) -> Result<Vec<Tensor>> {
        let op = "split";
        let d = self.dim_1d(op, dim)?;
        let size = self.shape()[d];
        if split_size == 0 && size > 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "split_size can only be 0 if dimension size is 0, but got dimension size \
                     of {size}"
                ),
            });
        }
        let n = if split_size == 0 {
            1
        } else {
            size.div_ceil(split_size).max(1)
        };
        let mut out = pieces(n)?;
        for i in 0..n {
            // `i * split_size` is below `size` for every piece but a lone empty one.
            let start = i.saturating_mul(split_size).min(size);
            out.push(self.narrow_at(d, start, split_size.min(size - start))?);
        }
        Ok(out)
    }

    /// The tensor cut along `dim` into pieces of the given `sizes`, which must add up to the
    /// dimension's size, as views of it (PyTorch's `torch.split` with a list, and
    /// `split_with_sizes`). See [`Tensor::split`].
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?;
    /// let parts = x.split_sizes(&[1, 0, 5], 0)?;
    /// assert_eq!(parts[1].shape(), &[0]);
    /// assert_eq!(parts[2].to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0, 5.0]);
    /// assert!(x.split_sizes(&[1, 2], 0).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn split_sizes(&self, sizes: &[usize], dim: impl Dim) -> Result<Vec<Tensor>> {
        let op = "split_sizes";
        let d = self.dim_1d(op, dim)?;
        let size = self.shape()[d];
        let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if total != Some(size) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "split_sizes {sizes:?} must sum exactly to {size} (the size of dimension {d})"
                ),
            });
        }
        let mut out = pieces(sizes.len())?;
        let mut start = 0;
        for &s in sizes {
            out.push(self.narrow_at(d, start, s)?);
            start += s;
        }
        Ok(out)
    }

    /// The tensor cut along `dim` into `chunks` views of `ceil(size / chunks)` elements each
    /// (PyTorch's `torch.chunk`): the last one is shorter when the size does not divide, and
    /// there may be fewer than `chunks` pieces (`chunk(4)` of 6 elements gives pieces of 2, 2
    /// and 2). A dimension of size 0 gives `chunks` empty pieces. `chunks` of 0 and a 0-d
    /// tensor are errors.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?;
    /// let sizes: Vec<usize> = x.chunk(4, 0)?.iter().map(|c| c.numel()).collect();
    /// assert_eq!(sizes, [2, 2, 2]);
    /// let sizes: Vec<usize> = x.chunk(4, -1)?.iter().map(|c| c.numel()).collect();
    /// assert_eq!(sizes, [2, 2, 2]);
    /// assert_eq!(x.chunk(5, 0)?.len(), 3);
    /// assert!(x.chunk(0, 0).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn chunk(&self, chunks: usize, dim: impl Dim) -> Result<Vec<Tensor>> {
        let op = "chunk";
        if self.dim() == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "chunk expects at least a 1-dimensional tensor".into(),
            });
        }
        if chunks == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "chunk expects `chunks` to be greater than 0, got: 0".into(),
            });
        }
        let d = self.dim_1d(op, dim)?;
        let size = self.shape()[d];
        if size == 0 {
            let mut out = pieces(chunks)?;
            for _ in 0..chunks {
                out.push(self.narrow_at(d, 0, 0)?);
            }
            return Ok(out);
        }
        self.split(size.div_ceil(chunks), d)
    }

    /// Dimensions `start_dim..=end_dim` merged into one (PyTorch's `flatten`; negative dims
    /// count from the end): a view when the layout allows it (as [`Tensor::reshape`]), a copy
    /// otherwise. A 0-d tensor becomes 1-D (it takes dims 0 and -1); `start_dim` after
    /// `end_dim` is an error. `flatten(0, -1)` is [`Tensor::ravel`].
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::zeros(&[2, 3, 4, 5], DType::F32, Device::Cpu)?;
    /// assert_eq!(x.flatten(1, 2)?.shape(), &[2, 12, 5]);
    /// assert_eq!(x.flatten(0, -1)?.shape(), &[120]);
    /// assert_eq!(x.flatten(-2, -1)?.shape(), &[2, 3, 20]);
    /// assert!(x.flatten(1, 2)?.shares_storage(&x)); // a view
    /// assert!(x.flatten(2, 1).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn flatten(&self, start_dim: impl Dim, end_dim: impl Dim) -> Result<Tensor> {
        let op = "flatten";
        let rank = self.dim();
        let s = wrap_dim(op, start_dim.to_dim() as i64, rank)?.unwrap_or(0);
        let e = wrap_dim(op, end_dim.to_dim() as i64, rank)?.unwrap_or(0);
        if s > e {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "flatten() has invalid args: start_dim ({}) cannot come after end_dim ({})",
                    start_dim.to_dim(),
                    end_dim.to_dim()
                ),
            });
        }
        if rank == 0 {
            return self.reshape([1]);
        }
        if s == e {
            return Ok(self.clone());
        }
        let shape = self.shape();
        let merged = genesis_storage::checked_numel(&shape[s..=e])
            .ok()
            .ok_or_else(|| Error::InvalidArgument {
                op,
                reason: format!(
                    "the product of dimensions {s} to {e} of {shape:?} is not representable"
                ),
            })?;
        let mut new: Vec<usize> = shape[..s].to_vec();
        new.push(merged);
        new.extend_from_slice(&shape[e + 1..]);
        self.reshape_any(&new)
    }

    /// The elements as one dimension, row-major (PyTorch's `ravel`, `flatten(0, -1)`): a view
    /// when the tensor is contiguous, a copy otherwise. A 0-d tensor gives one element.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::I32, Device::Cpu)?.reshape(&[2, 3])?;
    /// assert_eq!(x.t()?.ravel()?.to_vec::<i32>()?, [0, 3, 1, 4, 2, 5]);
    /// assert_eq!(Tensor::full((), 7i32, Device::Cpu)?.ravel()?.shape(), &[1]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn ravel(&self) -> Result<Tensor> {
        self.dense()?.reshape([-1])
    }

    /// Dimension `dim` split into `sizes` (PyTorch's `unflatten`; one entry may be -1, inferred
    /// from the others): a view. The sizes must multiply to the dimension's size and be
    /// non-empty; a 0-d tensor is an error.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::zeros(&[2, 12, 5], DType::F32, Device::Cpu)?;
    /// assert_eq!(x.unflatten(1, &[3, 4])?.shape(), &[2, 3, 4, 5]);
    /// assert_eq!(x.unflatten(-2, &[2, -1, 3])?.shape(), &[2, 2, 2, 3, 5]);
    /// assert!(x.unflatten(1, &[5, -1]).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn unflatten(&self, dim: impl Dim, sizes: &[isize]) -> Result<Tensor> {
        let op = "unflatten";
        let rank = self.dim();
        if rank == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "dimension specified as {} but the tensor has no dimensions",
                    dim.to_dim()
                ),
            });
        }
        let d = wrap_dim(op, dim.to_dim() as i64, rank)?.unwrap_or(0);
        if sizes.is_empty() {
            return Err(Error::InvalidArgument {
                op,
                reason: "sizes must be non-empty".into(),
            });
        }
        let size = self.shape()[d];
        let bad = |why: &str| Error::InvalidArgument {
            op,
            reason: format!("sizes {sizes:?} do not fit dimension {d} of size {size}: {why}"),
        };
        let mut infer = None;
        let mut known = 1usize;
        for (i, &s) in sizes.iter().enumerate() {
            match s {
                -1 if infer.is_some() => return Err(bad("only one size can be -1")),
                -1 => infer = Some(i),
                s if s < 0 => return Err(bad("a size is negative")),
                s => {
                    known = known
                        .checked_mul(s as usize)
                        .ok_or_else(|| bad("their product overflows"))?
                }
            }
        }
        let mut inferred: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
        match infer {
            Some(i) => {
                if known == 0 || !size.is_multiple_of(known) {
                    return Err(bad("the size -1 cannot be inferred"));
                }
                inferred[i] = size / known;
            }
            None if known != size => return Err(bad("their product differs")),
            None => {}
        }
        let mut new: Vec<usize> = self.shape()[..d].to_vec();
        new.extend_from_slice(&inferred);
        new.extend_from_slice(&self.shape()[d + 1..]);
        self.reshape_any(&new)
    }

    /// The tensor repeated `repeats[i]` times along each dimension (PyTorch's
    /// `Tensor.repeat`): `repeats` has at least as many entries as the tensor has dimensions,
    /// extra ones adding leading dimensions; a new contiguous tensor. One strided copy of a view
    /// that interleaves a stride-0 dimension before each repeated one.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 2, 3], &[3], Device::Cpu)?;
    /// let r = x.repeat(&[2, 2])?;
    /// assert_eq!(r.shape(), &[2, 6]);
    /// assert_eq!(r.to_vec::<i64>()?, [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
    /// assert!(x.repeat(()).is_err()); // fewer repeats than dimensions
    /// assert_eq!(x.tile(&[2])?.to_vec::<i64>()?, [1, 2, 3, 1, 2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn repeat(&self, repeats: impl Dims) -> Result<Tensor> {
        let op = "repeat";
        let reps = repeats.to_dims();
        if reps.len() < self.dim() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "number of dimensions of repeat dims ({}) can not be smaller than number \
                     of dimensions of tensor ({})",
                    reps.len(),
                    self.dim()
                ),
            });
        }
        let reps = reps
            .iter()
            .map(|&r| usize::try_from(r))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| Error::InvalidArgument {
                op,
                reason: format!("negative repeat in {reps:?}"),
            })?;
        let lead = reps.len() - self.dim();
        let mut shape = vec![1usize; lead];
        shape.extend_from_slice(self.shape());
        let mut strides = vec![0isize; lead];
        strides.extend_from_slice(self.strides());
        let out_shape = shape
            .iter()
            .zip(&reps)
            .map(|(&s, &r)| s.checked_mul(r).filter(|&d| d <= isize::MAX as usize))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| Error::InvalidArgument {
                op,
                reason: format!("the result's size overflows ({shape:?} times {reps:?})"),
            })?;
        let n = numel_of(op, &out_shape)?;
        if n == 0 {
            return Tensor::empty(&out_shape, self.dtype(), self.device());
        }
        // A stride-0 dimension of `r` before each dimension repeated `r` times: row-major it
        // is the result. Size-1 dimensions are left out (every dimension kept is at least 2,
        // so there are at most 62 of them for a representable result).
        let (mut ishape, mut istrides) = (Vec::new(), Vec::new());
        for ((&s, &st), &r) in shape.iter().zip(&strides).zip(&reps) {
            if r != 1 {
                ishape.push(r);
                istrides.push(0);
            }
            if s != 1 {
                ishape.push(s);
                istrides.push(st);
            }
        }
        let layout = Layout::new(&ishape, &istrides, self.layout().offset());
        self.copy_layout(&layout)?.reshape_any(&out_shape)
    }

    /// Each element repeated `repeats` times along `dim` (PyTorch's
    /// `Tensor.repeat_interleave` with an integer): `[a, b]` becomes `[a, a, b, b]` for 2.
    /// Without a dimension the tensor is flattened first (a 0-d tensor too); a 0-d tensor with
    /// a dimension is an error, as PyTorch's. A new contiguous tensor (one strided copy of a
    /// view with a stride-0 dimension after `dim`), differentiable.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 2, 3, 4], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.repeat_interleave(2, Some(0))?.to_vec::<i64>()?, [1, 2, 1, 2, 3, 4, 3, 4]);
    /// assert_eq!(x.repeat_interleave(2, None)?.to_vec::<i64>()?, [1, 1, 2, 2, 3, 3, 4, 4]);
    /// let counts = Tensor::from_slice(&[0i64, 3], &[2], Device::Cpu)?;
    /// let r = x.repeat_interleave_tensor(&counts, Some(1))?;
    /// assert_eq!(r.to_vec::<i64>()?, [2, 2, 2, 4, 4, 4]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn repeat_interleave(&self, repeats: usize, dim: Option<isize>) -> Result<Tensor> {
        let op = "repeat_interleave";
        let (x, d) = self.interleave_dim(op, dim)?;
        let size = x.shape()[d];
        let mut out_shape = x.shape().to_vec();
        out_shape[d] = size
            .checked_mul(repeats)
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| Error::InvalidArgument {
                op,
                reason: format!("the result's size overflows ({size} times {repeats})"),
            })?;
        numel_of(op, &out_shape)?;
        // Dimension `d` followed by a broadcast dimension of `repeats`: row-major, the result
        // (one copy; recorded as an expand and a reshape, whose gradients sum the repeats).
        let mut shape = x.shape().to_vec();
        shape.insert(d + 1, repeats);
        x.unsqueeze(d as isize + 1)?
            .expand(&shape[..])?
            .reshape(&out_shape[..])
    }

    /// Element `i` along `dim` repeated `repeats[i]` times (PyTorch's
    /// `Tensor.repeat_interleave` with a tensor): `repeats` a 0-d or 1-d int32 or int64 tensor
    /// of non-negative counts, one per element along `dim` (one count for all when it holds a
    /// single value). Without a dimension the tensor is flattened first. The counts are read
    /// on the host to size the result (on a GPU, one synchronisation, as PyTorch's); the rows
    /// are gathered by [`Tensor::index_select`], so the result is differentiable. Counts whose
    /// total the host or the device cannot hold are an error.
    #[track_caller]
    pub fn repeat_interleave_tensor(&self, repeats: &Tensor, dim: Option<isize>) -> Result<Tensor> {
        let op = "repeat_interleave";
        if repeats.dim() > 1 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "repeats must be a 0-d or 1-d tensor, got shape {:?}",
                    repeats.shape()
                ),
            });
        }
        if !matches!(repeats.dtype(), DType::I32 | DType::I64) {
            return Err(Error::Storage(genesis_storage::Error::UnsupportedDType {
                op,
                dtype: repeats.dtype(),
            }));
        }
        let (x, d) = self.interleave_dim(op, dim)?;
        let size = x.shape()[d];
        let counts = repeats.to_dtype(DType::I64)?.to_vec::<i64>()?;
        // One count for every element: not spread into a list as long as the dimension (which
        // an empty tensor may have of 2^40).
        let single = counts.len() == 1 && size != 1;
        if !single && counts.len() != size {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "repeats must have the same size as the input along dim {d}: {} against {size}",
                    counts.len()
                ),
            });
        }
        let overflow = || Error::InvalidArgument {
            op,
            reason: "the result's size overflows".into(),
        };
        let mut total = 0usize;
        for &c in &counts {
            let c = usize::try_from(c).map_err(|_| Error::InvalidArgument {
                op,
                reason: format!("repeats can not be negative (got {c})"),
            })?;
            total = if single {
                c.checked_mul(size).ok_or_else(overflow)?
            } else {
                total.checked_add(c).ok_or_else(overflow)?
            };
        }
        // The row of every output position, on the host (an error when it cannot hold them).
        let mut rows: Vec<i64> = pieces(total)?;
        if total > 0 {
            // (With a single count, `size` is at most `total` here.)
            for i in 0..size {
                let c = counts[if single { 0 } else { i }];
                rows.extend(std::iter::repeat_n(i as i64, c as usize));
            }
        }
        let idx = Tensor::from_slice(&rows, [rows.len()], x.device())?;
        x.index_select(d as isize, &idx)
    }

    /// The Kronecker product (PyTorch's `torch.kron`): the operands' shapes padded with leading
    /// 1s to one rank, `out[i * q + k] = self[i] * other[k]` along every dimension (sizes
    /// multiplied), in the dtype [`Tensor::mul`] gives (bools: "and"). Differentiable.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1i64, 2], &[2], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1i64, 10, 100], &[3], Device::Cpu)?;
    /// assert_eq!(a.kron(&b)?.to_vec::<i64>()?, [1, 10, 100, 2, 20, 200]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn kron(&self, other: &Tensor) -> Result<Tensor> {
        let rank = self.dim().max(other.dim());
        let padded = |t: &Tensor| -> Vec<usize> {
            let mut s = vec![1usize; rank - t.dim()];
            s.extend_from_slice(t.shape());
            s
        };
        let (sa, sb) = (padded(self), padded(other));
        // a as [a0, 1, a1, 1, ...] times b as [1, b0, 1, b1, ...]: row-major, the product.
        let a_shape: Vec<usize> = sa.iter().flat_map(|&d| [d, 1]).collect();
        let b_shape: Vec<usize> = sb.iter().flat_map(|&d| [1, d]).collect();
        let out: Vec<usize> = sa
            .iter()
            .zip(&sb)
            .map(|(&x, &y)| x.checked_mul(y))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::InvalidArgument {
                op: "kron",
                reason: format!("the result's size overflows ({sa:?} by {sb:?})"),
            })?;
        self.reshape(a_shape)?
            .mul(&other.reshape(b_shape)?)?
            .reshape(out)
    }

    /// The elements of `self` at `indices` along `dim` (PyTorch's `torch.take_along_dim`):
    /// [`Tensor::gather`] after broadcasting the two shapes in every other dimension (they
    /// must have the same rank; a 0-d tensor takes no dimension); without a dimension both are
    /// flattened first. Indices are int64, each in range (an error otherwise, where PyTorch's
    /// CPU reads past the input).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[10.0f32, 11.0, 12.0, 20.0, 21.0, 22.0], &[2, 3], Device::Cpu)?;
    /// let i = Tensor::from_slice(&[2i64, 0], &[2, 1], Device::Cpu)?;
    /// assert_eq!(x.take_along_dim(&i, Some(1))?.to_vec::<f32>()?, [12.0, 20.0]);
    /// assert_eq!(x.take_along_dim(&i, None)?.to_vec::<f32>()?, [12.0, 10.0]);
    /// let bad = Tensor::from_slice(&[3i64], &[1, 1], Device::Cpu)?;
    /// assert!(x.take_along_dim(&bad, Some(1)).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn take_along_dim(&self, indices: &Tensor, dim: Option<isize>) -> Result<Tensor> {
        let op = "take_along_dim";
        let Some(d) = dim else {
            return self.reshape([-1])?.gather(0, &indices.reshape([-1])?);
        };
        if self.dim() != indices.dim() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "input and indices should have the same number of dimensions, but got {} \
                     and {}",
                    self.dim(),
                    indices.dim()
                ),
            });
        }
        // PyTorch takes no dimension of a 0-d tensor here.
        let d = self.dim_1d(op, d)?;
        let (mut xs, mut is) = (self.shape().to_vec(), indices.shape().to_vec());
        for k in (0..xs.len()).filter(|&k| k != d) {
            let b = match (xs[k], is[k]) {
                (x, i) if x == i || i == 1 => x,
                (1, i) => i,
                _ => {
                    return Err(Error::ShapeMismatch {
                        op,
                        lhs: self.shape().to_vec(),
                        rhs: indices.shape().to_vec(),
                    });
                }
            };
            (xs[k], is[k]) = (b, b);
        }
        self.expand(xs)?.gather(d as isize, &indices.expand(is)?)
    }

    /// The tensor and dimension `repeat_interleave` works on: flattened and 0 without a
    /// dimension, else the dimension wrapped (an error for a 0-d tensor, as PyTorch's).
    fn interleave_dim(&self, op: &'static str, dim: Option<isize>) -> Result<(Tensor, usize)> {
        match dim {
            None => Ok((self.reshape([-1])?, 0)),
            Some(d) => Ok((self.clone(), self.dim_1d(op, d)?)),
        }
    }

    /// The tensor repeated `reps[i]` times along each dimension (PyTorch's `torch.tile`):
    /// [`Tensor::repeat`], with `reps` padded with leading 1s when it has fewer entries than
    /// the tensor has dimensions.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1u8, 2, 3, 4], &[2, 2], Device::Cpu)?;
    /// let t = x.tile(&[2])?; // as `tile(&[1, 2])`
    /// assert_eq!(t.shape(), &[2, 4]);
    /// assert_eq!(t.to_vec::<u8>()?, [1, 2, 1, 2, 3, 4, 3, 4]);
    /// assert_eq!(x.tile(&[2, 1, 1])?.shape(), &[2, 2, 2]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn tile(&self, reps: impl Dims) -> Result<Tensor> {
        let reps = reps.to_dims();
        let mut padded = vec![1i64; self.dim().saturating_sub(reps.len())];
        padded.extend_from_slice(&reps);
        self.repeat(&padded).map_err(|e| match e {
            Error::InvalidArgument { reason, .. } => Error::InvalidArgument { op: "tile", reason },
            e => e,
        })
    }

    /// The elements in reverse order along each of `dims` (PyTorch's `flip`; negative dims
    /// count from the end, a 0-d tensor takes 0 and -1; a dim listed twice is an error): a new
    /// contiguous tensor, one strided copy of a view with negative strides.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::I32, Device::Cpu)?.reshape(&[2, 3])?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<i32>()?, [2, 1, 0, 5, 4, 3]);
    /// assert_eq!(x.flip(&[0, -1])?.to_vec::<i32>()?, [5, 4, 3, 2, 1, 0]);
    /// assert!(x.flip(&[1, -1]).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn flip(&self, dims: impl Dims) -> Result<Tensor> {
        let op = "flip";
        let rank = self.dim();
        let mut flipped = vec![false; rank];
        let mut seen_scalar = false;
        for d in dims.to_dims() {
            let seen = match wrap_dim(op, d, rank)? {
                Some(w) => std::mem::replace(&mut flipped[w], true),
                None => std::mem::replace(&mut seen_scalar, true),
            };
            if seen {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("dim {d} appears multiple times in the list of dims"),
                });
            }
        }
        let l = self.layout();
        if self.numel() == 0 {
            return self.copy_layout(l);
        }
        let mut strides = l.strides().to_vec();
        let mut offset = l.offset() as i128;
        for d in (0..rank).filter(|&d| flipped[d]) {
            offset += (self.shape()[d] as i128 - 1) * strides[d] as i128;
            strides[d] = -strides[d];
        }
        // The view reaches the same elements as `self`: the offset is one of them.
        self.copy_layout(&Layout::new(l.shape(), &strides, offset as usize))
    }

    /// The elements shifted along `dims` by `shifts` with wrap-around (PyTorch's `roll`):
    /// element `i` moves to `(i + shift) mod size`; `shifts` and `dims` pair up (a dim may
    /// appear more than once, its shifts adding). Empty `dims` rolls the flattened tensor by
    /// the one shift and restores the shape. Errors: empty `shifts`, lengths that differ, a
    /// dim out of range (a 0-d tensor has none). A new contiguous tensor: the blocks of the
    /// result copied in one pass for up to three rolled dimensions, a pass per three after.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::I32, Device::Cpu)?.reshape(&[2, 3])?;
    /// assert_eq!(x.roll(&[1], &[1])?.to_vec::<i32>()?, [2, 0, 1, 5, 3, 4]);
    /// assert_eq!(x.roll(&[-1, 1], &[1, 0])?.to_vec::<i32>()?, [4, 5, 3, 1, 2, 0]);
    /// assert_eq!(x.roll(&[2], &[])?.to_vec::<i32>()?, [4, 5, 0, 1, 2, 3]);
    /// assert!(x.roll(&[1, 1], &[0]).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn roll(&self, shifts: &[isize], dims: &[isize]) -> Result<Tensor> {
        // The gradient rolls back.
        let back: Vec<isize> = shifts.iter().map(|s| s.wrapping_neg()).collect();
        let dims_back = dims.to_vec();
        crate::autograd::op1(
            "roll",
            self,
            || self.roll_raw(shifts, dims),
            move || move |g| g.roll(&back, &dims_back),
        )
    }

    fn roll_raw(&self, shifts: &[isize], dims: &[isize]) -> Result<Tensor> {
        let op = "roll";
        if shifts.is_empty() {
            return Err(Error::InvalidArgument {
                op,
                reason: "`shifts` required".into(),
            });
        }
        if dims.is_empty() && shifts.len() == 1 {
            let flat = self.ravel()?;
            return flat.roll_raw(shifts, &[0])?.reshape_any(self.shape());
        }
        if shifts.len() != dims.len() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "shifts and dimensions must align. shifts: {}, dims: {}",
                    shifts.len(),
                    dims.len()
                ),
            });
        }
        let rank = self.dim();
        let mut shift = vec![0usize; rank];
        for (&s, &d) in shifts.iter().zip(dims) {
            if rank == 0 {
                return Err(Error::DimOutOfRange {
                    op,
                    dim: d as i64,
                    rank,
                });
            }
            let d = wrap_dim(op, d as i64, rank)?.unwrap_or(0);
            let size = self.shape()[d];
            if size > 0 {
                let s = (s as i128).rem_euclid(size as i128) as usize;
                shift[d] = (shift[d] + s) % size;
            }
        }
        let rolled: Vec<usize> = (0..rank).filter(|&d| shift[d] != 0).collect();
        if self.numel() == 0 || rolled.is_empty() {
            return self.copy_layout(self.layout());
        }
        let mut x = self.clone();
        for group in rolled.chunks(3) {
            x = x.roll_blocks(&shift, group)?;
        }
        Ok(x)
    }

    /// `self` rolled by `shift[d]` along each dimension `d` of `group` (each shift in
    /// `1..size`): the `2^group.len()` blocks of the result, each one strided copy.
    fn roll_blocks(&self, shift: &[usize], group: &[usize]) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        let mut dst = Storage::empty(numel_of("roll", &shape)?, self.dtype(), self.device())?;
        let full = Layout::contiguous(&shape);
        for combo in 0..1usize << group.len() {
            let (mut to, mut from) = (full.clone(), self.layout().clone());
            for (k, &d) in group.iter().enumerate() {
                let (n, s) = (shape[d], shift[d]);
                // The result's first `s` elements along `d` are the source's last `s`; the
                // rest are the source's first `n - s`.
                let (t0, f0, len) = if combo >> k & 1 == 0 {
                    (0, n - s, s)
                } else {
                    (s, 0, n - s)
                };
                to = to.narrow(d as isize, t0, len)?;
                from = from.narrow(d as isize, f0, len)?;
            }
            copy_pair(&mut dst, &to, self.view.storage(), &from)?;
        }
        Tensor::from_storage(dst, &shape)
    }

    /// The lower triangle of the last two dimensions (PyTorch's `tril`): elements `[i, j]`
    /// with `j - i <= diagonal` are kept, the rest are 0 (`false` for bools); other dimensions
    /// are a batch. A tensor of fewer than 2 dimensions is an error. A new tensor: one `where`
    /// over the tensor with a `[rows, cols]` mask broadcast over the batch.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::ones(&[3, 3], DType::I32, Device::Cpu)?;
    /// assert_eq!(x.tril(0)?.to_vec::<i32>()?, [1, 0, 0, 1, 1, 0, 1, 1, 1]);
    /// assert_eq!(x.triu(1)?.to_vec::<i32>()?, [0, 1, 1, 0, 0, 1, 0, 0, 0]);
    /// assert_eq!(x.tril(-1)?.to_vec::<i32>()?, [0, 0, 0, 1, 0, 0, 1, 1, 0]);
    /// assert!(Tensor::ones(&[3], DType::I32, Device::Cpu)?.tril(0).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("tril", diagonal, true)
    }

    /// The upper triangle of the last two dimensions (PyTorch's `triu`): elements `[i, j]`
    /// with `j - i >= diagonal` are kept, the rest are 0; see [`Tensor::tril`].
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::ones(&[2, 2, 3], DType::Bool, Device::Cpu)?; // a batch of two
    /// let u = x.triu(0)?;
    /// assert_eq!(u.shape(), &[2, 2, 3]);
    /// assert_eq!(u.to_bool_vec()?[..6], [true, true, true, false, true, true]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("triu", diagonal, false)
    }

    fn triangle(&self, op: &'static str, diagonal: i64, lower: bool) -> Result<Tensor> {
        // The gradient keeps the same triangle.
        crate::autograd::op1(
            op,
            self,
            || self.triangle_raw(op, diagonal, lower),
            move || move |g| g.triangle_raw(op, diagonal, lower),
        )
    }

    fn triangle_raw(&self, op: &'static str, diagonal: i64, lower: bool) -> Result<Tensor> {
        let rank = self.dim();
        if rank < 2 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("input tensor must have at least 2 dimensions, got {rank}"),
            });
        }
        if self.numel() == 0 {
            return self.copy_layout(self.layout());
        }
        let (r, c) = (self.shape()[rank - 2], self.shape()[rank - 1]);
        // One pass over the elements (a strided tensor is gathered first).
        let (a, start) = self.dense_operand(self.shape())?;
        let out = a.triangle_at(start, self.numel(), [r, c], diagonal, lower)?;
        Tensor::from_storage(out, self.shape())
    }

    /// The diagonal of dimensions `dim1` and `dim2` as a view (PyTorch's `diagonal`):
    /// elements `[.., i, .., i + offset, ..]` (`offset` above the main diagonal when
    /// positive, below when negative), the two dimensions removed and the diagonal appended
    /// last, sharing the storage (writes through it are seen by the tensor). An offset past
    /// the matrix gives an empty diagonal. `dim1 == dim2` is an error.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 12.0, 1.0, DType::I64, Device::Cpu)?.reshape(&[3, 4])?;
    /// assert_eq!(x.diagonal(0, 0, 1)?.to_vec::<i64>()?, [0, 5, 10]);
    /// assert_eq!(x.diagonal(1, 0, 1)?.to_vec::<i64>()?, [1, 6, 11]);
    /// assert_eq!(x.diagonal(-1, 0, 1)?.to_vec::<i64>()?, [4, 9]);
    /// assert_eq!(x.diagonal(0, 1, 0)?.strides(), &[5]);
    /// x.diagonal(0, 0, 1)?.fill_(-1)?; // a view: writes reach `x`
    /// assert_eq!(x.to_vec::<i64>()?[5], -1);
    /// assert!(x.diagonal(0, 1, -1).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn diagonal(&self, offset: i64, dim1: impl Dim, dim2: impl Dim) -> Result<Tensor> {
        let op = "diagonal";
        let rank = self.dim();
        let (a, b) = (dim1.to_dim() as i64, dim2.to_dim() as i64);
        let d1 = wrap_dim(op, a, rank)?.unwrap_or(0);
        let d2 = wrap_dim(op, b, rank)?.unwrap_or(0);
        if d1 == d2 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("diagonal dimensions cannot be identical {a}, {b}"),
            });
        }
        let l = self.layout();
        let (s1, s2) = (l.shape()[d1] as i128, l.shape()[d2] as i128);
        let (st1, st2) = (l.strides()[d1] as i128, l.strides()[d2] as i128);
        let off = offset as i128;
        let (len, delta) = if off >= 0 {
            ((s2 - off).min(s1).max(0), off * st2)
        } else {
            ((s1 + off).min(s2).max(0), -off * st1)
        };
        let mut shape = Vec::with_capacity(rank - 1);
        let mut strides = Vec::with_capacity(rank - 1);
        for d in (0..rank).filter(|&d| d != d1 && d != d2) {
            shape.push(l.shape()[d]);
            strides.push(l.strides()[d]);
        }
        shape.push(len as usize);
        let empty = len == 0 || shape.contains(&0);
        // A view of no elements is never walked: its offset and strides need not be exact.
        let start = if empty {
            l.offset()
        } else {
            usize::try_from(l.offset() as i128 + delta).map_err(|_| bad_view(op, l))?
        };
        strides.push(if empty {
            l.strides()[d1].wrapping_add(l.strides()[d2])
        } else {
            isize::try_from(st1 + st2).map_err(|_| bad_view(op, l))?
        });
        self.with_layout(Layout::new(&shape, &strides, start))
    }
}

fn bad_view(op: &'static str, l: &Layout) -> Error {
    Error::InvalidArgument {
        op,
        reason: format!(
            "the view of shape {:?}, strides {:?} and offset {} is not representable",
            l.shape(),
            l.strides(),
            l.offset()
        ),
    }
}

/// Copies `src` under `from` into `dst` under `to` (one shape): one strided copy, or, past the
/// copy kernel's rank, one per index of the outer dimensions.
fn copy_pair(dst: &mut Storage, to: &Layout, src: &Storage, from: &Layout) -> Result<()> {
    if to.numel() == 0 {
        return Ok(());
    }
    // Size-1 dimensions dropped on both sides (the only merging that keeps them paired).
    let keep: Vec<usize> = (0..to.rank()).filter(|&d| to.shape()[d] != 1).collect();
    let pick = |l: &Layout| {
        Layout::new(
            &keep.iter().map(|&d| l.shape()[d]).collect::<Vec<_>>(),
            &keep.iter().map(|&d| l.strides()[d]).collect::<Vec<_>>(),
            l.offset(),
        )
    };
    let (to, from) = (pick(to), pick(from));
    if to.rank() <= COPY_RANK {
        return Ok(dst.copy_strided_from(&to, src, &from)?);
    }
    let outer = to.rank() - COPY_RANK;
    let mut idx = vec![0usize; outer];
    let inner = |l: &Layout, idx: &[usize]| {
        let mut off = l.offset() as i128;
        for (k, &i) in idx.iter().enumerate() {
            off += i as i128 * l.strides()[k] as i128;
        }
        Layout::new(&l.shape()[outer..], &l.strides()[outer..], off as usize)
    };
    loop {
        dst.copy_strided_from(&inner(&to, &idx), src, &inner(&from, &idx))?;
        let mut k = outer;
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < to.shape()[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

impl Tensor {
    /// Every window of `size` elements along `dim`, `step` apart, as a view (PyTorch's
    /// `Tensor.unfold`): `dim` becomes the windows' count, `(n − size) / step + 1`, and a new
    /// last dimension of `size` holds each window. Windows may overlap (`step < size`): the view
    /// shares elements, and its gradient adds them up. A 0-d tensor is one window of one
    /// element (`size` at most 1).
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 7.0, 1.0, DType::F32, Device::Cpu)?;
    /// let w = x.unfold(0, 3, 2)?;
    /// assert_eq!(w.shape(), [3, 3]);
    /// assert_eq!(w.to_vec::<f32>()?, [0.0, 1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 5.0, 6.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn unfold(&self, dim: impl Dim, size: usize, step: usize) -> Result<Tensor> {
        let op = "unfold";
        let rank = self.dim();
        let d = wrap_dim(op, dim.to_dim() as i64, rank)?;
        let l = self.layout();
        let (n, stride) = match d {
            Some(d) => (l.shape()[d], l.strides()[d]),
            None => (1, 1),
        };
        if step == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("step is {step} but must be > 0"),
            });
        }
        if size > n {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "maximum size for tensor at dimension {dim} is {n} but size is {size}",
                    dim = d.unwrap_or(0)
                ),
            });
        }
        let count = (n - size) / step + 1;
        let mut shape = l.shape().to_vec();
        let mut strides = l.strides().to_vec();
        if let Some(d) = d {
            shape[d] = count;
            // A stride that cannot be named: only where one window is taken (never walked).
            strides[d] = if count > 1 {
                stride
                    .checked_mul(step as isize)
                    .ok_or_else(|| bad_view(op, l))?
            } else {
                stride
            };
        }
        shape.push(size);
        strides.push(stride);
        self.with_layout(Layout::new(&shape, &strides, l.offset()))
    }
}
