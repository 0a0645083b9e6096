//! PyTorch's selection ops: `nonzero` (`argwhere`, `nonzero_tuple`), `unique`,
//! `unique_consecutive` and `one_hot`, on every device.
//!
//! `nonzero` is the mask compaction the indexing code uses for boolean masks (a count, a scan
//! and one pass writing the positions of the set elements, the host reading the count) and the
//! unravel pass that turns positions into coordinates. `unique` sorts (stable), marks where the
//! sorted values change, and compacts; `one_hot` scatters ones into zeros.

use genesis_kernels::index::{MAX_INDEX_DIMS, Strided};
use genesis_storage::Storage;

use crate::{BinaryOp, DType, Error, Result, Tensor};

/// `(values, inverse, counts)` of [`Tensor::unique`].
pub type Unique = (Tensor, Option<Tensor>, Option<Tensor>);

impl Tensor {
    /// The coordinates of the non-zero elements (PyTorch's `nonzero`): an int64 tensor of
    /// shape `[n, ndim]`, one row per non-zero element in row-major order. Non-zero means
    /// `!= 0` (`true` for bools; NaN is non-zero, -0.0 is zero). A 0-d tensor gives `[n, 0]`
    /// (`n` 0 or 1). On the GPU the host reads the count (one synchronisation) to size the
    /// result.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0.0f32, 1.5, 0.0, -2.0, f32::NAN, -0.0], &[2, 3], Device::Cpu)?;
    /// let nz = x.nonzero()?;
    /// assert_eq!(nz.shape(), &[3, 2]);
    /// assert_eq!(nz.to_vec::<i64>()?, [0, 1, 1, 0, 1, 1]);
    /// assert_eq!(x.argwhere()?.to_vec::<i64>()?, nz.to_vec::<i64>()?);
    /// let cols = x.nonzero_tuple()?;
    /// assert_eq!(cols[1].to_vec::<i64>()?, [1, 0, 1]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn nonzero(&self) -> Result<Tensor> {
        let (positions, n) = self.nonzero_positions()?;
        let rank = self.dim();
        let dev = self.device();
        match rank {
            0 => Tensor::empty([n, 0], DType::I64, dev),
            1 => Tensor::from_storage(positions, &[n, 1]),
            _ if n == 0 => Tensor::empty([0, rank], DType::I64, dev),
            _ => {
                let blocks = unravel(positions, self.shape())?;
                let refs: Vec<&Tensor> = blocks.iter().collect();
                // `[n, rank]` coordinates, written in place by the unravel kernel.
                match refs[..] {
                    [one] => Ok(one.clone()),
                    _ => Tensor::cat(&refs, 1),
                }
            }
        }
    }

    /// [`Tensor::nonzero`] (PyTorch's `argwhere`, the same result).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let m = Tensor::from_bools(&[false, true, true, false], &[2, 2], Device::Cpu)?;
    /// assert_eq!(m.argwhere()?.to_vec::<i64>()?, [0, 1, 1, 0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn argwhere(&self) -> Result<Tensor> {
        self.nonzero()
    }

    /// The coordinates of the non-zero elements as one int64 tensor of shape `[n]` per
    /// dimension (PyTorch's `nonzero(as_tuple=True)`; a 0-d tensor gives one tensor, as
    /// PyTorch's). Views of one storage.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0i32, 7, 0, 9], &[2, 2], Device::Cpu)?;
    /// let rows_cols = x.nonzero_tuple()?;
    /// assert_eq!(rows_cols[0].to_vec::<i64>()?, [0, 1]);
    /// assert_eq!(rows_cols[1].to_vec::<i64>()?, [1, 1]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn nonzero_tuple(&self) -> Result<Vec<Tensor>> {
        if self.dim() == 0 {
            return self.unsqueeze(0)?.nonzero_tuple();
        }
        let (positions, n) = self.nonzero_positions()?;
        if self.dim() == 1 {
            return Ok(vec![Tensor::from_storage(positions, &[n])?]);
        }
        if n == 0 {
            return (0..self.dim())
                .map(|_| Tensor::empty([0], DType::I64, self.device()))
                .collect();
        }
        let blocks = unravel(positions, self.shape())?;
        let mut out = Vec::with_capacity(self.dim());
        for b in &blocks {
            for r in 0..b.shape()[1] {
                out.push(b.narrow(1, r, 1)?.reshape([n])?);
            }
        }
        Ok(out)
    }

    /// The row-major positions of the non-zero elements (an int64 storage) and their count.
    fn nonzero_positions(&self) -> Result<(Storage, usize)> {
        // (The comparison reads a strided tensor in place up to the copy kernel's rank.)
        let x = if self.dim() > genesis_kernels::copy::MAX_DIMS {
            self.dense()?
        } else {
            self.clone()
        };
        let mask = if x.dtype() == DType::Bool {
            x
        } else {
            x.ne_scalar(0)?
        };
        let (m, start) = mask.dense_operand(mask.shape())?;
        let positions = m.nonzero_at(start, mask.numel())?;
        let n = positions.len();
        Ok((positions, n))
    }

    /// The distinct values of the flattened tensor in ascending order (PyTorch's
    /// `torch.unique` with `dim=None`), with, when asked for, the inverse (int64, the input's
    /// shape: where each element's value is in the result) and the counts (int64, how often
    /// each value occurs). The values are always sorted, as PyTorch's are on the CPU and on
    /// CUDA whatever `sorted` says (it is accepted for PyTorch's signature).
    ///
    /// Floats: -0.0 and 0.0 are one value (the result holds whichever sorts first); each NaN
    /// is a value of its own, as in PyTorch on the CPU and on CUDA (its `equal_nan` is false:
    /// NumPy's `np.unique` merges NaNs by default, PyTorch does not), after every number, the
    /// NaNs' inverse entries in the order they appear. A stable sort, a comparison of
    /// neighbours and one compaction (the host reads the count); the inverse costs a scan and
    /// a scatter, the counts one more compaction.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[3i32, 1, 3, 2, 1, 3], &[2, 3], Device::Cpu)?;
    /// let (values, inverse, counts) = x.unique(true, true, true)?;
    /// assert_eq!(values.to_vec::<i32>()?, [1, 2, 3]);
    /// let inverse = inverse.unwrap();
    /// assert_eq!(inverse.shape(), &[2, 3]);
    /// assert_eq!(inverse.to_vec::<i64>()?, [2, 0, 2, 1, 0, 2]);
    /// assert_eq!(counts.unwrap().to_vec::<i64>()?, [2, 1, 3]);
    /// let f = Tensor::from_slice(&[f32::NAN, 1.0, f32::NAN], &[3], Device::Cpu)?;
    /// assert_eq!(f.unique(true, false, false)?.0.numel(), 3); // each NaN is its own value
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn unique(
        &self,
        sorted: bool,
        return_inverse: bool,
        return_counts: bool,
    ) -> Result<Unique> {
        let _ = sorted;
        let flat = self.ravel()?;
        let n = flat.numel();
        if n == 0 {
            return self.unique_of_nothing(return_inverse, return_counts);
        }
        let dev = self.device();
        let (values, perm) = flat.sort(0, false)?;
        let differs = neighbours_differ(&values)?;
        let starts = run_starts(&run_heads(&differs, true)?)?;
        let unique = values.index_select(0, &starts)?;
        let inverse = if return_inverse {
            // Run `r` of the sorted values is value `r`, and element `perm[i]` is in the run of
            // sorted position `i`. `perm` is a permutation: the scatter writes every element,
            // each index in range.
            let run = run_ids(&differs)?;
            let out = Tensor::empty([n], DType::I64, dev)?;
            out.scatter_known_in_range_(0, &perm, &run)?;
            Some(out.reshape_any(self.shape())?)
        } else {
            None
        };
        let counts = if return_counts {
            Some(run_lengths(&starts, n)?)
        } else {
            None
        };
        Ok((unique, inverse, counts))
    }

    /// The values of the flattened tensor with each run of equal neighbours kept once
    /// (PyTorch's `torch.unique_consecutive` with `dim=None`), with, when asked for, the
    /// inverse (int64, the input's shape: the run of each element) and the counts (int64, the
    /// length of each run). Equality as for [`Tensor::unique`]: each NaN is a run of its own,
    /// -0.0 and 0.0 are equal.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1i64, 1, 2, 2, 3, 1, 1, 2], &[8], Device::Cpu)?;
    /// let (values, inverse, counts) = x.unique_consecutive(true, true)?;
    /// assert_eq!(values.to_vec::<i64>()?, [1, 2, 3, 1, 2]);
    /// assert_eq!(inverse.unwrap().to_vec::<i64>()?, [0, 0, 1, 1, 2, 3, 3, 4]);
    /// assert_eq!(counts.unwrap().to_vec::<i64>()?, [2, 2, 1, 2, 1]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn unique_consecutive(&self, return_inverse: bool, return_counts: bool) -> Result<Unique> {
        let flat = self.ravel()?;
        let n = flat.numel();
        if n == 0 {
            return self.unique_of_nothing(return_inverse, return_counts);
        }
        let differs = neighbours_differ(&flat)?;
        let starts = run_starts(&run_heads(&differs, true)?)?;
        let unique = flat.index_select(0, &starts)?;
        let inverse = if return_inverse {
            Some(run_ids(&differs)?.reshape_any(self.shape())?)
        } else {
            None
        };
        let counts = if return_counts {
            Some(run_lengths(&starts, n)?)
        } else {
            None
        };
        Ok((unique, inverse, counts))
    }

    /// `unique` of a tensor with no elements: empty values and counts, an empty inverse of the
    /// tensor's shape.
    fn unique_of_nothing(&self, return_inverse: bool, return_counts: bool) -> Result<Unique> {
        let dev = self.device();
        let inverse = if return_inverse {
            Some(Tensor::empty(self.shape(), DType::I64, dev)?)
        } else {
            None
        };
        let counts = if return_counts {
            Some(Tensor::empty([0], DType::I64, dev)?)
        } else {
            None
        };
        Ok((Tensor::empty([0], self.dtype(), dev)?, inverse, counts))
    }

    /// The one-hot encoding of an int64 tensor of class indices (PyTorch's
    /// `torch.nn.functional.one_hot`): an int64 tensor with one more dimension, of
    /// `num_classes` (the largest value plus one for `None`), 1 at each element's class and 0
    /// elsewhere. Errors, as in PyTorch: another dtype, a negative value, a value at least
    /// `num_classes`, and an empty tensor without `num_classes` (or with 0). Without
    /// `num_classes` the host reads the largest value (a synchronisation on the GPU); with it,
    /// the scatter that writes the ones checks the range.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let labels = Tensor::from_slice(&[0i64, 2, 1], &[3], Device::Cpu)?;
    /// let h = labels.one_hot(None)?;
    /// assert_eq!(h.shape(), &[3, 3]);
    /// assert_eq!(h.to_vec::<i64>()?, [1, 0, 0, 0, 0, 1, 0, 1, 0]);
    /// assert_eq!(labels.one_hot(Some(5))?.shape(), &[3, 5]);
    /// assert!(labels.one_hot(Some(2)).is_err()); // 2 is not a class of 2
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn one_hot(&self, num_classes: Option<usize>) -> Result<Tensor> {
        let op = "one_hot";
        let bad = |reason: &str| Error::InvalidArgument {
            op,
            reason: reason.into(),
        };
        if self.dtype() != DType::I64 {
            return Err(bad(
                "one_hot is only applicable to index tensor of type LongTensor (int64)",
            ));
        }
        let mut shape = self.shape().to_vec();
        if self.numel() == 0 {
            return match num_classes {
                Some(c) if c > 0 => {
                    shape.push(c);
                    Tensor::zeros(&shape, DType::I64, self.device())
                }
                _ => Err(bad(
                    "Can not infer total number of classes from empty tensor.",
                )),
            };
        }
        let classes = match num_classes {
            Some(c) => c,
            None => {
                let (lo, hi) = self.int_bounds()?;
                if lo < 0 {
                    return Err(bad("Class values must be non-negative."));
                }
                usize::try_from(hi).map_err(|_| bad("Class values overflow."))? + 1
            }
        };
        shape.push(classes);
        // One pass writes every row; a class outside 0..classes is an index error naming it.
        let (a, start) = self.dense_operand(self.shape())?;
        match a.one_hot_at(start, self.numel(), classes) {
            Ok(out) => Tensor::from_storage(out, &shape),
            Err(genesis_storage::Error::Kernel(genesis_kernels::Error::IndexOutOfRange {
                value,
                ..
            })) => Err(bad(if value < 0 {
                "Class values must be non-negative."
            } else {
                "Class values must be smaller than num_classes."
            })),
            Err(e) => Err(e.into()),
        }
    }
}

impl Tensor {
    /// The smallest and largest value of a non-empty integer tensor, as `i64`, read back
    /// together (one synchronisation on the GPU).
    pub(crate) fn int_bounds(&self) -> Result<(i64, i64)> {
        let b = Tensor::stack(&[&self.min()?, &self.max()?], 0)?
            .to_dtype(DType::I64)?
            .to_vec::<i64>()?;
        Ok((b[0], b[1]))
    }
}

/// `differs` (see [`neighbours_differ`]) with `head` before it: with `true`, where a run of
/// equal neighbours starts (the first element, and each element `!=` its predecessor: each
/// NaN starts a run).
fn run_heads(differs: &Tensor, head: bool) -> Result<Tensor> {
    let head = Tensor::from_bools(&[head], [1], differs.device())?;
    Tensor::cat(&[&head, differs], 0)
}

/// The run of each position (int64): `differs[..i].count()`, the flags summed as int32 (fewer
/// bytes than int64; the sums are int64 either way).
fn run_ids(differs: &Tensor) -> Result<Tensor> {
    run_heads(differs, false)?.to_dtype(DType::I32)?.cumsum(0)
}

/// `values[i + 1] != values[i]` for the 1-D `values` (at least one element; each NaN differs).
fn neighbours_differ(values: &Tensor) -> Result<Tensor> {
    let n = values.numel();
    values.narrow(0, 1, n - 1)?.ne(&values.narrow(0, 0, n - 1)?)
}

/// The positions (int64, 1-D) where the runs that `first` marks start.
fn run_starts(first: &Tensor) -> Result<Tensor> {
    let (starts, k) = first.nonzero_positions()?;
    Tensor::from_storage(starts, &[k])
}

/// The lengths of the runs starting at `starts` (at least one) in `n` elements: the
/// differences of their starts, the last one running to `n`.
fn run_lengths(starts: &Tensor, n: usize) -> Result<Tensor> {
    let k = starts.numel();
    let dev = starts.device();
    let counts = Tensor::empty([k], DType::I64, dev)?;
    starts.narrow(0, 1, k - 1)?.binary_out(
        BinaryOp::Sub,
        &starts.narrow(0, 0, k - 1)?,
        &mut counts.narrow(0, 0, k - 1)?,
    )?;
    let last = Tensor::full([1], n as i64, dev)?.sub(&starts.narrow(0, k - 1, 1)?)?;
    counts.narrow(0, k - 1, 1)?.copy_(&last)?;
    Ok(counts)
}

/// The coordinates in `shape` (at least 2 dimensions, every size at least 1) of the row-major
/// `positions` (an int64 storage of `n > 0` elements), as `[n, k]` blocks of columns, one
/// column per dimension in order: the unravel pass takes up to [`MAX_INDEX_DIMS`] dimensions at
/// a time, the last of them merging the rest, which the next pass splits.
fn unravel(positions: Storage, shape: &[usize]) -> Result<Vec<Tensor>> {
    let n = positions.len();
    let device = positions.device();
    let mut blocks = Vec::new();
    let mut lin = positions;
    let mut rest = shape;
    loop {
        let last = rest.len() <= MAX_INDEX_DIMS;
        let head: Vec<usize> = if last {
            rest.to_vec()
        } else {
            let mut h = rest[..MAX_INDEX_DIMS - 1].to_vec();
            h.push(
                rest[MAX_INDEX_DIMS - 1..]
                    .iter()
                    .fold(1usize, |n, &d| n.saturating_mul(d)),
            );
            h
        };
        let k = head.len();
        let desc = Strided::new(&head, &vec![0; k], 0).ok_or_else(|| Error::InvalidArgument {
            op: "nonzero",
            reason: format!("an unravel of {k} dimensions"),
        })?;
        let mut out = Storage::empty(k * n, DType::I64, device)?;
        lin.index_unravel(&desc, true, &mut out)?;
        let block = Tensor::from_storage(out, &[n, k])?;
        if last {
            blocks.push(block);
            return Ok(blocks);
        }
        // The merged tail, in a storage of its own, is split by the next pass.
        lin = block.narrow(1, k - 1, 1)?.view.contiguous()?;
        blocks.push(block.narrow(1, 0, k - 1)?);
        rest = &rest[MAX_INDEX_DIMS - 1..];
    }
}
