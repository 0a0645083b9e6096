//! Advanced-indexing execution (`genesis_kernels::index`): the gathers, scatters and index
//! preparation that `genesis-index`'s executor plans, on any device. Each method checks its
//! operands (dtypes, devices, descriptor, lengths: typed errors) and runs on its memory's
//! backend: the `index.cu` kernels on CUDA memory, their CPU twins on host memory.
//!
//! The gathers and scatters read and write at offsets computed from index values that may
//! live on a device, which no host check sees: they are `unsafe`, with the promise that the
//! values are in range (normalised by [`Storage::index_normalise`], or checked when the plan
//! was made). On host memory the twins check every offset anyway and return
//! [`genesis_kernels::Error::IndexOutOfRange`] for one outside the storage.

use genesis_kernels::index::{IndexDesc, Keys, MAX_INDEX_DIMS, Rows16, Strided};

use super::{Mem, MemMut, Storage, mixed};
use crate::compute::Compute;
use crate::{DType, Device, Error, Result};

/// A malformed request, as the kernels' error.
fn invalid(op: &'static str, reason: String) -> Error {
    Error::Kernel(genesis_kernels::Error::Unsupported { op, reason })
}

impl Storage {
    /// `DTypeMismatch` unless this storage holds `dtype`.
    fn expect_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if self.dtype() != dtype {
            return Err(Error::DTypeMismatch {
                op,
                lhs: dtype,
                rhs: self.dtype(),
            });
        }
        Ok(())
    }

    /// `DTypeMismatch` unless this storage holds bytes (`U8` or `Bool`).
    fn expect_bytes(&self, op: &'static str) -> Result<()> {
        match self.dtype() {
            DType::U8 | DType::Bool => Ok(()),
            d => Err(Error::DTypeMismatch {
                op,
                lhs: DType::U8,
                rhs: d,
            }),
        }
    }

    /// `DeviceMismatch` unless this storage is on `device`.
    fn expect_device(&self, op: &'static str, device: Device) -> Result<()> {
        if self.device() != device {
            return Err(Error::DeviceMismatch {
                op,
                lhs: device,
                rhs: self.device(),
            });
        }
        Ok(())
    }

    /// `OutOfBounds` unless this storage holds at least `need` elements.
    fn expect_len(&self, op: &'static str, need: usize) -> Result<()> {
        self.check_range(op, 0, need)
    }

    /// Checks the index values of a gather or scatter: i64 on this storage's device, the
    /// `desc.index_len()` values the descriptor reads.
    fn check_index_values(&self, op: &'static str, desc: &IndexDesc, idx: &Storage) -> Result<()> {
        idx.expect_dtype(op, DType::I64)?;
        idx.expect_device(op, self.device())?;
        idx.expect_len(op, desc.index_len())
    }

    /// Checks that a row copy, when given, moves the `n` result elements of this storage's
    /// dtype, and returns it when it has rows to copy.
    fn check_rows<'r>(
        &self,
        op: &'static str,
        rows: Option<&'r Rows16>,
        n: usize,
    ) -> Result<Option<&'r Rows16>> {
        let Some(r) = rows else { return Ok(None) };
        let bytes = r
            .nrows
            .checked_mul(r.row_units)
            .and_then(|u| u.checked_mul(16));
        if bytes != n.checked_mul(self.dtype().size()) {
            return Err(invalid(
                op,
                format!("{r:?} does not move {n} elements of {}", self.dtype()),
            ));
        }
        Ok(Some(r))
    }

    /// Gathers the result of an advanced index into a new storage on this storage's device:
    /// `out[i] = self[offset(i)]` for the result elements of `desc` (row-major over its
    /// `rank` result sizes), where `offset(i)` is the descriptor's base, its strides over the
    /// result's other dimensions, and `idx[a * nb + b] * adv_stride[a]` for each index array
    /// `a` at the result's index position `b` (see `kernels/index.cu`). `idx` holds the
    /// `n_adv * nb` normalised index values (i64, same device). With `rows` (one index array
    /// over whole rows that are multiples of 16 bytes), rows are copied 16 bytes at a time.
    ///
    /// Errors: a malformed descriptor, `idx` of another dtype or device or too short, `rows`
    /// that do not move the result; on host memory, an offset outside this storage.
    ///
    /// # Safety
    ///
    /// Every index value is in range for its dimension, so that every offset read lies in this
    /// storage (the CUDA kernels read where the values point; host memory is checked).
    pub unsafe fn index_gather(
        &self,
        desc: &IndexDesc,
        idx: &Storage,
        rows: Option<&Rows16>,
    ) -> Result<Storage> {
        let op = "index gather";
        let n = desc.check()?;
        self.check_index_values(op, desc, idx)?;
        let rows = self.check_rows(op, rows, n)?;
        let (dtype, elem, len) = (self.dtype(), self.dtype().size(), self.len());
        let mut out = Storage::empty(n, dtype, self.device())?;
        if n == 0 {
            return Ok(out);
        }
        match (self.read(op)?.mem(), idx.read(op)?.mem(), out.mem_mut(op)?) {
            // SAFETY: the caller vouches for the index values (the twins check them anyway).
            (Mem::Host(s), Mem::Host(i), MemMut::Host(o)) => unsafe {
                s.index_gather(elem, len, desc, i, rows, o, n)?
            },
            // SAFETY: as above; the kernels trust them.
            (Mem::Cuda(s), Mem::Cuda(i), MemMut::Cuda(o)) => unsafe {
                s.index_gather(elem, len, desc, i, rows, o, n)?
            },
            _ => return Err(mixed(op)),
        }
        Ok(out)
    }

    /// Writes the result-shaped `values` (this storage's dtype and device, at least the
    /// descriptor's result elements) through `desc` and the normalised index values `idx`
    /// into this storage (see [`Storage::index_gather`]), skipping the index positions marked
    /// in `dead` (`nb` bytes, `U8` or `Bool`): `self[offset(i)] = values[i]`. With `rows`, row
    /// by row.
    ///
    /// Errors: as [`Storage::index_gather`], and `values` or `dead` of another dtype or
    /// device or too short.
    ///
    /// # Safety
    ///
    /// As [`Storage::index_gather`], for the offsets written; the live positions write
    /// distinct offsets (else the CUDA result depends on the order of the writes).
    pub unsafe fn index_scatter(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &Storage,
        dead: &Storage,
        rows: Option<&Rows16>,
    ) -> Result<()> {
        let op = "index scatter";
        let n = desc.check()?;
        self.check_index_values(op, desc, idx)?;
        values.expect_dtype(op, self.dtype())?;
        values.expect_device(op, self.device())?;
        values.expect_len(op, n)?;
        dead.expect_bytes(op)?;
        dead.expect_device(op, self.device())?;
        dead.expect_len(op, desc.nb.max(0) as usize)?;
        let rows = self.check_rows(op, rows, n)?;
        if n == 0 {
            return Ok(());
        }
        let (elem, len) = (self.dtype().size(), self.len());
        let (v, i, d) = (values.read(op)?, idx.read(op)?, dead.read(op)?);
        match (self.mem_mut(op)?, v.mem(), i.mem(), d.mem()) {
            // SAFETY: the caller vouches for the index values and distinct live positions.
            (MemMut::Host(t), Mem::Host(v), Mem::Host(i), Mem::Host(d)) => unsafe {
                t.index_scatter(elem, len, v, desc, i, d, rows, n)
            },
            // SAFETY: as above.
            (MemMut::Cuda(t), Mem::Cuda(v), Mem::Cuda(i), Mem::Cuda(d)) => unsafe {
                t.index_scatter(elem, len, v, desc, i, d, rows, n)
            },
            _ => Err(mixed(op)),
        }
    }

    /// Adds the result-shaped `values` through `desc` and the normalised index values `idx`
    /// into this storage (`self[offset(i)] += values[i]`, every dtype; bool adds as a logical
    /// or), each group of equal index tuples summed in order by its representative, so that
    /// the result does not depend on the order of the threads: `groups` are `[dead, start,
    /// len, members]`: `dead` (`nb` bytes) marks the positions that are not their group's
    /// representative, and representative `b` sums `members[start[b] .. start[b] + len[b]]`
    /// (i64; `start` and `len` hold `nb` values).
    ///
    /// Errors: as [`Storage::index_scatter`], and groups of another dtype or device or too
    /// short; on host memory, groups outside `members` or naming positions past `nb`.
    ///
    /// # Safety
    ///
    /// As [`Storage::index_scatter`], with groups that partition the `nb` positions (the CUDA
    /// kernel reads where they point).
    pub unsafe fn index_scatter_add(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &Storage,
        groups: [&Storage; 4],
    ) -> Result<()> {
        let op = "index scatter_add";
        let n = desc.check()?;
        let nb = desc.nb.max(0) as usize;
        self.check_index_values(op, desc, idx)?;
        values.expect_dtype(op, self.dtype())?;
        values.expect_device(op, self.device())?;
        values.expect_len(op, n)?;
        groups[0].expect_bytes(op)?;
        for g in &groups[1..] {
            g.expect_dtype(op, DType::I64)?;
        }
        for (g, need) in groups.iter().zip([nb, nb, nb, 0]) {
            g.expect_device(op, self.device())?;
            g.expect_len(op, need)?;
        }
        if n == 0 {
            return Ok(());
        }
        let (dtype, len, members) = (self.dtype(), self.len(), groups[3].len());
        let (v, i) = (values.read(op)?, idx.read(op)?);
        let g = [
            groups[0].read(op)?,
            groups[1].read(op)?,
            groups[2].read(op)?,
            groups[3].read(op)?,
        ];
        match (
            self.mem_mut(op)?,
            v.mem(),
            i.mem(),
            [g[0].mem(), g[1].mem(), g[2].mem(), g[3].mem()],
        ) {
            (
                MemMut::Host(t),
                Mem::Host(v),
                Mem::Host(i),
                [Mem::Host(a), Mem::Host(b), Mem::Host(c), Mem::Host(d)],
            ) => {
                // SAFETY: the caller vouches for the index values and the groups.
                unsafe { t.index_scatter_add(dtype, len, v, desc, i, [a, b, c, d], members, n) }
            }
            (
                MemMut::Cuda(t),
                Mem::Cuda(v),
                Mem::Cuda(i),
                [Mem::Cuda(a), Mem::Cuda(b), Mem::Cuda(c), Mem::Cuda(d)],
            ) => {
                // SAFETY: as above.
                unsafe { t.index_scatter_add(dtype, len, v, desc, i, [a, b, c, d], members, n) }
            }
            _ => Err(mixed(op)),
        }
    }

    /// Normalises an index array into `nb` int64 of this storage (`I64`) from element `at`:
    /// the value at position `b` (row-major over `layout`'s shape, whose product is at least
    /// `nb`) of `src` (`I32` or `I64`, read through `layout`; strides of 0 broadcast), wrapped
    /// when negative (`+ size`). A value outside `0..size` is written as 0 (in range for the
    /// gathers) and the smallest such position lands in word `bad_at` of `bad` (`I64`, which
    /// the caller set to -1, all ones) when it is smaller than the word; the caller reads
    /// `bad` to report the error. No synchronisation.
    ///
    /// Errors: dtypes, devices, a layout past [`MAX_INDEX_DIMS`] dimensions, with negative
    /// strides or reaching past `src`, ranges outside `self` or `bad`.
    #[allow(clippy::too_many_arguments)]
    pub fn index_normalise(
        &mut self,
        at: usize,
        nb: usize,
        src: &Storage,
        layout: &Strided,
        size: usize,
        bad: &mut Storage,
        bad_at: usize,
    ) -> Result<()> {
        let op = "index normalise";
        self.expect_dtype(op, DType::I64)?;
        let i32 = match src.dtype() {
            DType::I32 => true,
            DType::I64 => false,
            dtype => return Err(Error::UnsupportedDType { op, dtype }),
        };
        bad.expect_dtype(op, DType::I64)?;
        src.expect_device(op, self.device())?;
        bad.expect_device(op, self.device())?;
        self.check_range(op, at, nb)?;
        bad.check_range(op, bad_at, 1)?;
        if nb == 0 {
            return Ok(());
        }
        layout.check()?;
        let count = layout.shape[..layout.rank as usize]
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s as usize));
        if count.is_none_or(|c| c < nb) {
            return Err(invalid(
                op,
                format!("{layout:?} holds fewer than {nb} values"),
            ));
        }
        src.expect_len(op, layout.reach())?;
        match (self.mem_mut(op)?, src.read(op)?.mem(), bad.mem_mut(op)?) {
            (MemMut::Host(o), Mem::Host(s), MemMut::Host(b)) => {
                o.index_normalise(at, nb, s, i32, layout, size, b, bad_at)
            }
            (MemMut::Cuda(o), Mem::Cuda(s), MemMut::Cuda(b)) => {
                o.index_normalise(at, nb, s, i32, layout, size, b, bad_at)
            }
            _ => Err(mixed(op)),
        }
    }

    /// Marks in `dead` (`U8` or `Bool`, `nb` bytes) the index positions whose tuple repeats at
    /// a later position (1: a later position writes the same elements, so the last one wins),
    /// through a table `winner` (`I64`, one zeroed word per key); the tuple of position `b`
    /// is the key `sum(self[a * nb + b] * keys.mul[a])` over the `keys.n_adv` normalised index
    /// arrays in this storage (`I64`). Every position is dead when a word of `bad` (`I64`) is
    /// not -1, so that the scatter after it writes nothing. No synchronisation.
    ///
    /// Errors: dtypes, devices, lengths, more than [`MAX_INDEX_DIMS`] index arrays; on host
    /// memory, a key outside `winner`.
    ///
    /// # Safety
    ///
    /// The index values are in range, so that every key lies in `winner` (the CUDA kernel
    /// writes where they point).
    pub unsafe fn index_dead_positions(
        &self,
        keys: &Keys,
        winner: &mut Storage,
        bad: &Storage,
        dead: &mut Storage,
        nb: usize,
    ) -> Result<()> {
        let op = "index dead_positions";
        let n_adv = usize::try_from(keys.n_adv)
            .ok()
            .filter(|&a| a <= MAX_INDEX_DIMS)
            .ok_or_else(|| invalid(op, format!("{} index arrays", keys.n_adv)))?;
        self.expect_dtype(op, DType::I64)?;
        winner.expect_dtype(op, DType::I64)?;
        bad.expect_dtype(op, DType::I64)?;
        dead.expect_bytes(op)?;
        for s in [&*winner, bad, &*dead] {
            s.expect_device(op, self.device())?;
        }
        self.expect_len(op, n_adv.saturating_mul(nb))?;
        dead.expect_len(op, nb)?;
        if nb == 0 {
            return Ok(());
        }
        let (nwinner, nbad) = (winner.len(), bad.len());
        match (
            self.read(op)?.mem(),
            winner.mem_mut(op)?,
            bad.read(op)?.mem(),
            dead.mem_mut(op)?,
        ) {
            // SAFETY: the caller vouches that every key lies in `winner` (checked anyway).
            (Mem::Host(i), MemMut::Host(w), Mem::Host(b), MemMut::Host(d)) => unsafe {
                i.index_dead_positions(nb, keys, w, nwinner, b, nbad, d)
            },
            // SAFETY: as above.
            (Mem::Cuda(i), MemMut::Cuda(w), Mem::Cuda(b), MemMut::Cuda(d)) => unsafe {
                i.index_dead_positions(nb, keys, w, nwinner, b, nbad, d)
            },
            _ => Err(mixed(op)),
        }
    }

    /// Splits the row-major positions in this storage (`I64`, every element) over the
    /// `shape.rank` sizes of `shape` (its strides unused) into `out` (`I64`, same device, at
    /// least `rank * len` elements): coordinate `d` of position `i` at `out[i * rank + d]` when
    /// `rows` (a `[len, rank]` array, `nonzero`'s layout), else at `out[d * len + i]` (one
    /// array per dimension).
    /// Positions at or past the shape's product give meaningless coordinates (no error: each
    /// output depends only on its position).
    ///
    /// Errors: dtypes, devices, lengths, a rank past [`MAX_INDEX_DIMS`], a size of 0 or less
    /// with positions to split.
    pub fn index_unravel(&self, shape: &Strided, rows: bool, out: &mut Storage) -> Result<()> {
        let op = "index unravel";
        self.expect_dtype(op, DType::I64)?;
        out.expect_dtype(op, DType::I64)?;
        out.expect_device(op, self.device())?;
        let rank = usize::try_from(shape.rank)
            .ok()
            .filter(|&r| r <= MAX_INDEX_DIMS)
            .ok_or_else(|| invalid(op, format!("rank {}", shape.rank)))?;
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        if shape.shape[..rank].iter().any(|&s| s <= 0) {
            return Err(invalid(op, format!("sizes {:?}", &shape.shape[..rank])));
        }
        out.expect_len(op, rank.saturating_mul(n))?;
        match (self.read(op)?.mem(), out.mem_mut(op)?) {
            (Mem::Host(l), MemMut::Host(o)) => l.index_unravel(n, shape, rows, o),
            (Mem::Cuda(l), MemMut::Cuda(o)) => l.index_unravel(n, shape, rows, o),
            _ => Err(mixed(op)),
        }
    }

    /// `x[idx]` of whole rows with a raw 1-D index array: `values` (`I32` or `I64`, same
    /// device) read as they are from element `offset`, `stride` elements apart (`stride` not
    /// negative); each of the `rows.nrows` values wraps when negative if `wrap` (NumPy's
    /// indexing; without `wrap` a negative value is out of range, as in PyTorch's
    /// `index_select`) and is checked against `size`, the rows of this storage in the layout
    /// `rows` describes; a new storage of `n` elements (`rows.nrows` rows) holds the rows of
    /// the good values. `None` when a value is out of range (the result is then incomplete and
    /// dropped).
    ///
    /// On CUDA one kernel checks and copies. For short arrays its first block checks them all
    /// before copying and posts its verdict to page-locked host memory: the host waits for
    /// that verdict (microseconds after the kernel starts) rather than for the copy, and
    /// returns while the copy runs. Otherwise, and on a bad value, the host synchronises the
    /// stream and reads the flag.
    ///
    /// Errors: dtypes, devices, a negative stride, values or rows outside their storages, `n`
    /// that is not the rows' elements.
    pub fn index_gather_rows_checked(
        &self,
        rows: &Rows16,
        values: &Storage,
        (offset, stride): (usize, i64),
        size: usize,
        wrap: bool,
        n: usize,
    ) -> Result<Option<Storage>> {
        let op = "index gather_rows_checked";
        let i32 = match values.dtype() {
            DType::I32 => true,
            DType::I64 => false,
            dtype => return Err(Error::UnsupportedDType { op, dtype }),
        };
        values.expect_device(op, self.device())?;
        let stride = usize::try_from(stride)
            .map_err(|_| invalid(op, format!("negative index stride {stride}")))?;
        self.check_rows(op, Some(rows), n)?;
        // The values read and the bytes of the `size` rows the kernel may read.
        if rows.nrows > 0 {
            let last = (rows.nrows - 1)
                .checked_mul(stride)
                .and_then(|l| l.checked_add(offset));
            match last {
                Some(l) => values.check_range(op, l, 1)?,
                None => return Err(invalid(op, format!("index stride {stride}"))),
            }
        }
        let src_units = match size {
            0 => Some(0),
            s => (s - 1)
                .checked_mul(rows.stride_units)
                .and_then(|u| u.checked_add(rows.base_units)?.checked_add(rows.row_units)),
        };
        let src_bytes = src_units.and_then(|u| u.checked_mul(16));
        if rows.row_units > 0 && src_bytes.is_none_or(|b| b > self.nbytes()) {
            return Err(invalid(
                op,
                format!(
                    "{size} rows of {rows:?} are outside a storage of {} bytes",
                    self.nbytes()
                ),
            ));
        }
        let mut out = Storage::empty(n, self.dtype(), self.device())?;
        if n == 0 {
            return Ok(Some(out));
        }
        let clean = match (
            self.read(op)?.mem(),
            values.read(op)?.mem(),
            out.mem_mut(op)?,
        ) {
            (Mem::Host(s), Mem::Host(v), MemMut::Host(o)) => {
                s.index_gather_rows_checked(rows, v, i32, offset, stride, size, wrap, o)?
            }
            (Mem::Cuda(s), Mem::Cuda(v), MemMut::Cuda(o)) => {
                s.index_gather_rows_checked(rows, v, i32, offset, stride, size, wrap, o)?
            }
            _ => return Err(mixed(op)),
        };
        Ok(clean.then_some(out))
    }
}
