//! Clamping, the variance and prefix sums of storages, on the CPU twins or the CUDA kernels.

use genesis_kernels::ReduceShape;
use genesis_kernels::gather::Along;
use genesis_kernels::scan::ScanOp;

use super::{Mem, MemMut, Storage, byte_len, check_kernel_dtype, mixed};
use crate::compute::Compute;
use crate::{DType, Error, Result};

impl Storage {
    /// `min(max(self[start + i], lo), hi)` for `i < len` into a new storage of `len` elements
    /// on the same device (f64, f32, f16, bf16, i32, i64), PyTorch's `clamp`: either bound may be
    /// absent, `lo > hi` gives `hi`, a NaN element stays NaN. Each bound is converted exactly
    /// to the dtype (a whole number in range for integers, no overflow to infinity for floats:
    /// [`Error::ScalarOutOfRange`] otherwise); a NaN bound is an error.
    #[track_caller]
    pub fn clamp_at(
        &self,
        start: usize,
        len: usize,
        lo: Option<f64>,
        hi: Option<f64>,
    ) -> Result<Storage> {
        let dtype = self.dtype;
        let bound = |v: Option<f64>| -> Result<Option<Storage>> {
            match v {
                None => Ok(None),
                Some(v) if v.is_nan() => Err(Error::ScalarOutOfRange { value: v, dtype }),
                Some(v) => Ok(Some(Storage::scalar(v, dtype)?)),
            }
        };
        let (lo, hi) = (bound(lo)?, bound(hi)?);
        self.clamp_with_at(start, len, lo.as_ref(), hi.as_ref())
    }

    /// [`Storage::clamp_at`] with each bound given as one host element of `self`'s dtype (so
    /// an int64 bound beyond 2^53 stays exact).
    #[track_caller]
    pub fn clamp_with_at(
        &self,
        start: usize,
        len: usize,
        lo: Option<&Storage>,
        hi: Option<&Storage>,
    ) -> Result<Storage> {
        let dtype = self.dtype;
        self.check_range("clamp", start, len)?;
        check_kernel_dtype("clamp", dtype)?;
        let bound = |v: Option<&Storage>| -> Result<Option<Vec<u8>>> {
            match v {
                None => Ok(None),
                Some(s) if s.dtype() != dtype => Err(Error::DTypeMismatch {
                    op: "clamp",
                    lhs: dtype,
                    rhs: s.dtype(),
                }),
                Some(s) if s.len() != 1 => Err(Error::LengthMismatch {
                    op: "clamp",
                    lhs: 1,
                    rhs: s.len(),
                }),
                Some(s) if s.device() != crate::Device::Cpu => Err(Error::NotOnHost {
                    op: "clamp",
                    device: s.device(),
                }),
                Some(s) => Ok(Some(s.to_bytes()?)),
            }
        };
        let (lo, hi) = (bound(lo)?, bound(hi)?);
        let mut out = Storage::uninit(len, dtype, self.device())?;
        match (self.read("clamp")?.mem(), out.mem_mut("clamp")?) {
            (Mem::Host(a), MemMut::Host(o)) => {
                Compute::clamp(a, dtype, start, len, lo.as_deref(), hi.as_deref(), o)?
            }
            (Mem::Cuda(a), MemMut::Cuda(o)) => {
                Compute::clamp(a, dtype, start, len, lo.as_deref(), hi.as_deref(), o)?
            }
            _ => return Err(mixed("clamp")),
        }
        Ok(out)
    }

    /// The variance over `r` of `shape.input_len()` contiguous elements from `start`, seen as
    /// `[outer, r, inner]`, into a new storage of `[outer, inner]` on the same device (f64, f32,
    /// f16, bf16): `sum((x - mean)^2) / max(0, n - correction)`, PyTorch's `var` with its
    /// `correction` (a finite number), or the standard deviation (its square root) when
    /// `std`. Sums are in f64 (see [`genesis_kernels::reduce::gpu_var`]); a line of no
    /// elements gives NaN.
    #[track_caller]
    pub fn var(
        &self,
        start: usize,
        shape: ReduceShape,
        correction: f64,
        std: bool,
    ) -> Result<Storage> {
        let name = if std { "std" } else { "var" };
        let dtype = self.dtype;
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        self.check_range(name, start, n)?;
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType { op: name, dtype });
        }
        if !correction.is_finite() {
            return Err(Error::ScalarOutOfRange {
                value: correction,
                dtype: DType::F64,
            });
        }
        let out_len = shape.output_len();
        byte_len(out_len, dtype)?;
        let mut values = Storage::uninit(out_len, dtype, self.device())?;
        match (self.read(name)?.mem(), values.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(v)) => a.var(dtype, start, shape, correction, std, v)?,
            (Mem::Cuda(a), MemMut::Cuda(v)) => a.var(dtype, start, shape, correction, std, v)?,
            _ => return Err(mixed(name)),
        }
        Ok(values)
    }

    /// The inclusive prefix sums along `r` of `shape.input_len()` contiguous elements from
    /// `start`, seen as `[outer, r, inner]`, into a new storage of the same length on the same
    /// device: PyTorch's `cumsum`. Floats (f64, f32, f16, bf16) keep their dtype (accumulated in
    /// f32 on the GPU, f64 for f64 and on the CPU); integers (i32, i64) give i64, wrapping.
    #[track_caller]
    pub fn cumsum(&self, start: usize, shape: ReduceShape) -> Result<Storage> {
        self.scan(ScanOp::Sum, start, shape)
    }

    /// The inclusive prefix products along `r` of `shape.input_len()` contiguous elements from
    /// `start`, seen as `[outer, r, inner]`, into a new storage of the same length on the same
    /// device: PyTorch's `cumprod`. Floats (f64, f32, f16, bf16) keep their dtype (multiplied in
    /// f32, f64 for f64); integers (i32, i64) give i64, wrapping.
    #[track_caller]
    pub fn cumprod(&self, start: usize, shape: ReduceShape) -> Result<Storage> {
        self.scan(ScanOp::Prod, start, shape)
    }

    fn scan(&self, op: ScanOp, start: usize, shape: ReduceShape) -> Result<Storage> {
        let (name, dtype) = (op.name(), self.dtype);
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        self.check_range(name, start, n)?;
        check_kernel_dtype(name, dtype)?;
        let out_dtype = if dtype.is_float() { dtype } else { DType::I64 };
        byte_len(n, out_dtype)?;
        let mut out = Storage::uninit(n, out_dtype, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => a.scan(op, dtype, start, shape, o)?,
            (Mem::Cuda(a), MemMut::Cuda(o)) => a.scan(op, dtype, start, shape, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}

impl Storage {
    /// The gather of `genesis_kernels::gather` over `d`: a new storage of `d.numel()` elements
    /// on the same device with `out[i] = self[start + target(i, index[index_start + ..])]`
    /// (any dtype; the index i64 on the same device). A value outside `0..d.size` is an error
    /// ([`genesis_kernels::Error::IndexOutOfRange`]); on CUDA it is checked on the device and
    /// read back (one synchronisation) before the result is returned, unless the index's
    /// [`Storage::known_bounds`] already put every value in range.
    #[track_caller]
    pub fn gather_along(
        &self,
        start: usize,
        index: &Storage,
        index_start: usize,
        d: &Along,
    ) -> Result<Storage> {
        let dtype = self.dtype;
        let (ni, _, nt) = d.reach()?;
        index.check_index("gather", index_start, ni)?;
        self.check_range("gather", start, nt)?;
        byte_len(d.numel(), dtype)?;
        let mut out = Storage::uninit(d.numel(), dtype, self.device())?;
        let in_range = || index.known_within(0, i128::from(d.size()));
        match (
            self.read("gather")?.mem(),
            index.read("gather")?.mem(),
            out.mem_mut("gather")?,
        ) {
            (Mem::Host(a), Mem::Host(i), MemMut::Host(o)) => {
                a.gather_along(dtype, start, i, index_start, d, o, &in_range)?
            }
            (Mem::Cuda(a), Mem::Cuda(i), MemMut::Cuda(o)) => {
                a.gather_along(dtype, start, i, index_start, d, o, &in_range)?
            }
            _ => return Err(mixed("gather")),
        }
        Ok(out)
    }

    /// In place: the scatter (`add`: scatter-add, f64, f32, f16, bf16, i32, i64) of the values from
    /// `values[values_start]` into this storage at `out_start + target(i, index[..])` over
    /// `d`. A value outside `0..d.size` is an error, checked on the device for CUDA memory
    /// (and read back, one synchronisation, unless the index's [`Storage::known_bounds`] put
    /// every value in range); the storage is then partly written, so callers
    /// check the index first or scatter into a new copy of the target.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn scatter_along(
        &mut self,
        out_start: usize,
        add: bool,
        index: &Storage,
        index_start: usize,
        values: &Storage,
        values_start: usize,
        d: &Along,
    ) -> Result<()> {
        let name = if add { "scatter_add" } else { "scatter" };
        let dtype = self.dtype;
        if values.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op: name,
                lhs: dtype,
                rhs: values.dtype,
            });
        }
        if add {
            check_kernel_dtype(name, dtype)?;
        }
        let (ni, nv, nt) = d.reach()?;
        index.check_index(name, index_start, ni)?;
        values.check_range(name, values_start, nv)?;
        self.check_range(name, out_start, nt)?;
        let in_range = || index.known_within(0, i128::from(d.size()));
        match (
            self.mem_mut(name)?,
            index.read(name)?.mem(),
            values.read(name)?.mem(),
        ) {
            (MemMut::Host(o), Mem::Host(i), Mem::Host(v)) => o.scatter_along(
                dtype,
                add,
                out_start,
                i,
                index_start,
                v,
                values_start,
                d,
                &in_range,
            ),
            (MemMut::Cuda(o), Mem::Cuda(i), Mem::Cuda(v)) => o.scatter_along(
                dtype,
                add,
                out_start,
                i,
                index_start,
                v,
                values_start,
                d,
                &in_range,
            ),
            _ => Err(mixed(name)),
        }
    }

    /// The rows of this storage (`shape.in_rows` rows of `shape.cols` from element `start`)
    /// summed by key: a new zeroed storage of `shape.out_rows` rows with `out[keys[j]] +=
    /// rows[perm[j]]`, where `keys` (i64, sorted ascending, each run of equal keys in ascending
    /// positions: a stable sort's) and `perm` (i64) hold `shape.n` values from their elements.
    /// Each row is summed in order in f32 (f64 for f64), without atomics: the same bits on
    /// the CPU and the GPU, run after run (`genesis_kernels::gather::rows_by_key`; f64, f32,
    /// f16, bf16). The CPU path reports keys or positions out of range or out of order; the
    /// GPU skips those (callers pass keys they sorted themselves).
    #[track_caller]
    pub fn rows_by_key(
        &self,
        start: usize,
        shape: &genesis_kernels::gather::RowsByKey,
        keys: (&Storage, usize),
        perm: (&Storage, usize),
    ) -> Result<Storage> {
        let name = "rows_by_key";
        let dtype = self.dtype;
        super::check_float_only(name, true, dtype)?;
        let len = |rows: usize| {
            rows.checked_mul(shape.cols).ok_or(Error::SizeOverflow {
                len: usize::MAX,
                dtype,
            })
        };
        self.check_range(name, start, len(shape.in_rows)?)?;
        keys.0.check_index(name, keys.1, shape.n)?;
        perm.0.check_index(name, perm.1, shape.n)?;
        let mut out = Storage::zeros(len(shape.out_rows)?, dtype, self.device())?;
        match (
            self.read(name)?.mem(),
            keys.0.read(name)?.mem(),
            perm.0.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(k), Mem::Host(p), MemMut::Host(o)) => {
                a.rows_by_key(dtype, start, shape, (k, keys.1), (p, perm.1), o)?
            }
            (Mem::Cuda(a), Mem::Cuda(k), Mem::Cuda(p), MemMut::Cuda(o)) => {
                a.rows_by_key(dtype, start, shape, (k, keys.1), (p, perm.1), o)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// An int64 index storage holding `len` elements from `start`.
    fn check_index(&self, op: &'static str, start: usize, len: usize) -> Result<()> {
        if self.dtype != DType::I64 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype,
            });
        }
        self.check_range(op, start, len)
    }
}

impl Storage {
    /// The stable sort of each of `rows` contiguous rows of `r` elements from `start`
    /// (ascending, or descending; f64, f32, f16, bf16, i32, i64), keeping the first `k` of each
    /// sorted row (`k == r` for a whole sort, fewer for a top-k): new storages of `rows * k`
    /// sorted values and of their positions in the row (i64), on the same device. NaN sorts
    /// after every number (first when descending) and -0.0 equals +0.0, as PyTorch's; see
    /// [`genesis_kernels::sort`] for what is fast on the GPU. `k > r` is an error.
    #[track_caller]
    pub fn sort_rows(
        &self,
        start: usize,
        rows: usize,
        r: usize,
        k: usize,
        descending: bool,
    ) -> Result<(Storage, Storage)> {
        let dtype = self.dtype;
        let n = rows.checked_mul(r).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        self.check_range("sort", start, n)?;
        check_kernel_dtype("sort", dtype)?;
        if k > r {
            return Err(Error::LengthMismatch {
                op: "sort: elements kept of a row",
                lhs: k,
                rhs: r,
            });
        }
        let kept = rows * k;
        byte_len(kept, DType::I64)?;
        let mut values = Storage::uninit(kept, dtype, self.device())?;
        let mut indices = Storage::uninit(kept, DType::I64, self.device())?;
        // No elements: nothing to sort (a row's length may be huge when there are no rows, and
        // must not size any work).
        if n == 0 {
            return Ok((values, indices));
        }
        match (
            self.read("sort")?.mem(),
            values.mem_mut("sort")?,
            indices.mem_mut("sort")?,
        ) {
            (Mem::Host(a), MemMut::Host(v), MemMut::Host(i)) => {
                a.sort_rows(dtype, start, rows, r, k, descending, v, i)?
            }
            (Mem::Cuda(a), MemMut::Cuda(v), MemMut::Cuda(i)) => {
                a.sort_rows(dtype, start, rows, r, k, descending, v, i)?
            }
            _ => return Err(mixed("sort")),
        }
        Ok((values, indices))
    }
}
