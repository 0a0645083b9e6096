//! Advanced-indexing execution (`genesis_kernels::index`): the gathers, scatters and index
//! preparation that `genesis-index`'s executor plans, on any device. Each method checks its
//! operands (dtypes, devices, descriptor, lengths: typed errors) and runs on its memory's
//! backend: the `index.cu` kernels on CUDA memory, their CPU twins on host memory.
//!
//! The gathers and scatters read and write at offsets computed from index values that may
//! live on a device, which no host check sees. They are safe because the values come as
//! [`IndexValues`] (each in range for its dimension: checked on the host or normalised on the
//! device), from which and the descriptor every offset's range is checked here before a
//! launch; a scatter's live positions ([`DeadMask`], [`AddGroups`], made from those values)
//! have distinct tuples, and its target layout is checked to map distinct elements to
//! distinct offsets.

use genesis_kernels::index::{IndexDesc, MAX_INDEX_DIMS, Rows16, Strided};

use super::index_values::refused;
use super::{AddGroups, DeadMask, IndexValues, Mem, MemMut, Storage, mixed};
use crate::compute::Compute;
use crate::{DType, Device, Error, Result};

/// A malformed request, as the kernels' error.
pub(super) fn invalid(op: &'static str, reason: String) -> Error {
    Error::Kernel(genesis_kernels::Error::Unsupported { op, reason })
}

/// The smallest and largest source offset a result element of `desc` may touch for index
/// values in range (`0..sizes[a]`, each size at least 1) when every result size is at least 1:
/// the base plus, for each result dimension outside the index dimensions and each index
/// array, the reach of its last coordinate (below the base for a negative stride). `None`
/// when that overflows an `i128`.
fn offset_range(desc: &IndexDesc, sizes: &[usize]) -> Option<(i128, i128)> {
    let (rank, pos, k) = (desc.rank as usize, desc.pos as usize, desc.k as usize);
    let rest = (0..rank)
        .filter(|r| *r < pos || *r >= pos + k)
        .map(|r| (i128::from(desc.res_shape[r]), desc.res_stride[r]));
    let adv = sizes
        .iter()
        .zip(&desc.adv_stride)
        .map(|(&s, &st)| (s as i128, st));
    let (mut lo, mut hi) = (i128::from(desc.base), i128::from(desc.base));
    for (extent, stride) in rest.chain(adv) {
        let far = (extent - 1).checked_mul(i128::from(stride))?;
        if far < 0 {
            lo = lo.checked_add(far)?;
        } else {
            hi = hi.checked_add(far)?;
        }
    }
    Some((lo, hi))
}

/// Checks that a scatter through `desc` writes distinct offsets for distinct (result element
/// outside the index dimensions, index tuple) pairs, conservatively: the dimensions of more
/// than one element (the result's outside the index dimensions, and the indexed ones of
/// `sizes`) sorted by the magnitude of their strides, each stride exceeds the reach of the
/// smaller ones (so a stride of 0 over several elements is refused).
fn check_distinct_writes(op: &'static str, desc: &IndexDesc, sizes: &[usize]) -> Result<()> {
    let (rank, pos, k) = (desc.rank as usize, desc.pos as usize, desc.k as usize);
    let rest = (0..rank)
        .filter(|r| *r < pos || *r >= pos + k)
        .map(|r| (desc.res_shape[r] as u128, desc.res_stride[r]));
    let adv = sizes
        .iter()
        .zip(&desc.adv_stride)
        .map(|(&s, &st)| (s as u128, st));
    let mut dims: Vec<(u128, u128)> = rest
        .chain(adv)
        .filter(|&(extent, _)| extent > 1)
        .map(|(extent, stride)| (u128::from(stride.unsigned_abs()), extent))
        .collect();
    dims.sort_unstable();
    let mut reach = 0u128;
    for (stride, extent) in dims {
        if stride <= reach {
            return Err(refused(
                op,
                "the target's layout may write an element twice (a stride of 0, or strides \
                 that overlap)"
                    .into(),
            ));
        }
        reach = reach.saturating_add((extent - 1).saturating_mul(stride));
    }
    Ok(())
}

impl Storage {
    /// `DTypeMismatch` unless this storage holds `dtype`.
    pub(super) fn expect_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if self.dtype() != dtype {
            return Err(Error::DTypeMismatch {
                op,
                lhs: dtype,
                rhs: self.dtype(),
            });
        }
        Ok(())
    }

    /// `DeviceMismatch` unless this storage is on `device`.
    pub(super) fn expect_device(&self, op: &'static str, device: Device) -> Result<()> {
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

    /// Checks a gather's or scatter's descriptor and index values against this storage, and
    /// returns the number of result elements: `idx` on this storage's device with the
    /// descriptor's `nb` and `n_adv`, and, when there are result elements, every offset the
    /// descriptor reaches for index values in range (`0..idx.sizes()[a]`) inside this storage.
    fn check_advanced(
        &self,
        op: &'static str,
        desc: &IndexDesc,
        idx: &IndexValues,
    ) -> Result<usize> {
        let n = desc.check()?;
        if idx.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: idx.device(),
            });
        }
        if desc.nb as usize != idx.nb() || desc.n_adv as usize != idx.n_adv() {
            return Err(refused(
                op,
                format!(
                    "the descriptor reads {} arrays of {} values, the index values are {} of {}",
                    desc.n_adv,
                    desc.nb,
                    idx.n_adv(),
                    idx.nb()
                ),
            ));
        }
        if n == 0 {
            // Nothing is read or written (an empty view's offset need not lie in the storage).
            return Ok(0);
        }
        let outside = |lo, hi| Error::IndexOutsideStorage {
            op,
            lo,
            hi,
            storage_len: self.len(),
        };
        match offset_range(desc, idx.sizes()) {
            Some((lo, hi)) if lo >= 0 && hi < self.len() as i128 => Ok(n),
            Some((lo, hi)) => Err(outside(lo, hi)),
            None => Err(outside(i128::MIN, i128::MAX)),
        }
    }

    /// Checks that a row copy, when given, moves the `n` result elements of this storage's
    /// dtype through the one index array of `idx` (`nrows` its positions), and that every row
    /// its values in range name lies in this storage (when `write`, rows that do not
    /// overlap); returns it when it has rows to copy.
    fn check_rows<'r>(
        &self,
        op: &'static str,
        rows: Option<&'r Rows16>,
        n: usize,
        idx: &IndexValues,
        write: bool,
    ) -> Result<Option<&'r Rows16>> {
        let Some(r) = rows else { return Ok(None) };
        self.check_row_bytes(op, r, n)?;
        if idx.n_adv() != 1 || idx.nb() != r.nrows {
            return Err(refused(
                op,
                format!(
                    "{r:?} through {} index arrays of {} values",
                    idx.n_adv(),
                    idx.nb()
                ),
            ));
        }
        if r.nrows == 0 || r.row_units == 0 {
            return Ok(Some(r));
        }
        let size = idx.sizes()[0] as u128;
        let (base, stride, row) = (
            r.base_units as u128,
            r.stride_units as u128,
            r.row_units as u128,
        );
        // Units of 16 bytes: rows from `base` to the last row a value below `size` names.
        let end = (size - 1) * stride + base + row;
        if end * 16 > self.nbytes() as u128 {
            let elem = self.dtype().size() as u128;
            return Err(Error::IndexOutsideStorage {
                op,
                lo: (base * 16 / elem) as i128,
                hi: (end * 16 / elem) as i128 - 1,
                storage_len: self.len(),
            });
        }
        if write && size > 1 && stride < row {
            return Err(refused(op, format!("the rows of {r:?} overlap")));
        }
        Ok(Some(r))
    }

    /// Checks that a row copy moves the `n` elements of this storage's dtype.
    fn check_row_bytes(&self, op: &'static str, r: &Rows16, n: usize) -> Result<()> {
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
        Ok(())
    }

    /// Gathers the result of an advanced index into a new storage on this storage's device:
    /// `out[i] = self[offset(i)]` for the result elements of `desc` (row-major over its
    /// `rank` result sizes), where `offset(i)` is the descriptor's base, its strides over the
    /// result's other dimensions, and `idx[a][b] * adv_stride[a]` for each index array `a` at
    /// the result's index position `b` (see `kernels/index.cu`). With `rows` (one index array
    /// over whole rows that are multiples of 16 bytes), rows are copied 16 bytes at a time.
    ///
    /// Errors: a malformed descriptor, `idx` on another device or of another shape than the
    /// descriptor's, offsets that values in range would take outside this storage
    /// ([`Error::IndexOutsideStorage`]: checked from the sizes, so no value reads outside),
    /// `rows` that do not move the result or name rows outside.
    pub fn index_gather(
        &self,
        desc: &IndexDesc,
        idx: &IndexValues,
        rows: Option<&Rows16>,
    ) -> Result<Storage> {
        let op = "index gather";
        let n = self.check_advanced(op, desc, idx)?;
        let rows = self.check_rows(op, rows, n, idx, false)?;
        let (dtype, elem, len) = (self.dtype(), self.dtype().size(), self.len());
        let mut out = Storage::empty(n, dtype, self.device())?;
        if n == 0 {
            return Ok(out);
        }
        match (
            self.read(op)?.mem(),
            idx.values.read(op)?.mem(),
            out.mem_mut(op)?,
        ) {
            // SAFETY: every value of `idx` lies in `0..sizes[a]` (`IndexValues`), for which
            // `check_advanced` showed every offset of `desc`, and `check_rows` every row, inside
            // this storage's `len` elements; `idx` holds `n_adv * nb` values.
            (Mem::Host(s), Mem::Host(i), MemMut::Host(o)) => unsafe {
                s.index_gather(elem, len, desc, i, rows, o, n)?
            },
            // SAFETY: as above.
            (Mem::Cuda(s), Mem::Cuda(i), MemMut::Cuda(o)) => unsafe {
                s.index_gather(elem, len, desc, i, rows, o, n)?
            },
            _ => return Err(mixed(op)),
        }
        Ok(out)
    }

    /// Checks the values a scatter writes (this storage's dtype and device, at least `n`),
    /// and that distinct result elements and index tuples write distinct offsets.
    fn check_scatter(
        &self,
        op: &'static str,
        values: &Storage,
        desc: &IndexDesc,
        idx: &IndexValues,
        n: usize,
    ) -> Result<()> {
        values.expect_dtype(op, self.dtype())?;
        values.expect_device(op, self.device())?;
        values.expect_len(op, n)?;
        if n > 0 {
            check_distinct_writes(op, desc, idx.sizes())?;
        }
        Ok(())
    }

    /// Writes the result-shaped `values` (this storage's dtype and device, at least the
    /// descriptor's result elements) through `desc` and `idx` into this storage (see
    /// [`Storage::index_gather`]), skipping the index positions `dead` marks:
    /// `self[offset(i)] = values[i]`. With `rows`, row by row.
    ///
    /// Errors: as [`Storage::index_gather`]; `values` of another dtype or device or too short;
    /// `dead` made from other index values; a target whose layout (strides and sizes of the
    /// result and of the indexed dimensions) may write an element twice, or overlapping rows
    /// ([`Error::IndexRefused`]; stride 0 included: the live positions write distinct
    /// offsets).
    pub fn index_scatter(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &IndexValues,
        dead: &DeadMask,
        rows: Option<&Rows16>,
    ) -> Result<()> {
        let op = "index scatter";
        let n = self.check_advanced(op, desc, idx)?;
        if !idx.owns(dead.of()) {
            return Err(refused(
                op,
                "the dead marks were made from other index values".into(),
            ));
        }
        self.check_scatter(op, values, desc, idx, n)?;
        let rows = self.check_rows(op, rows, n, idx, true)?;
        if n == 0 {
            return Ok(());
        }
        let (elem, len) = (self.dtype().size(), self.len());
        let (v, i, d) = (values.read(op)?, idx.values.read(op)?, dead.dead.read(op)?);
        match (self.mem_mut(op)?, v.mem(), i.mem(), d.mem()) {
            // SAFETY: every offset (and row) written lies in this storage, as in
            // `index_gather`; the live positions of `dead` (`nb` bytes) have distinct index
            // tuples, which `check_distinct_writes` showed write distinct offsets.
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

    /// Adds the result-shaped `values` through `desc` and `idx` into this storage
    /// (`self[offset(i)] += values[i]`, every dtype; bool adds as a logical or), each group of
    /// equal index tuples ([`AddGroups`]) summed in order by its representative, so that the
    /// result does not depend on the order of the threads.
    ///
    /// Errors: as [`Storage::index_scatter`], with `groups` made from other index values.
    pub fn index_scatter_add(
        &mut self,
        values: &Storage,
        desc: &IndexDesc,
        idx: &IndexValues,
        groups: &AddGroups,
    ) -> Result<()> {
        let op = "index scatter_add";
        let n = self.check_advanced(op, desc, idx)?;
        if !idx.owns(groups.of()) {
            return Err(refused(
                op,
                "the groups were made from other index values".into(),
            ));
        }
        self.check_scatter(op, values, desc, idx, n)?;
        if n == 0 {
            return Ok(());
        }
        let (dtype, len, members) = (self.dtype(), self.len(), groups.members);
        let (v, i) = (values.read(op)?, idx.values.read(op)?);
        let g = &groups.parts;
        let g = [
            g[0].read(op)?,
            g[1].read(op)?,
            g[2].read(op)?,
            g[3].read(op)?,
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
                // SAFETY: offsets as in `index_scatter`; the groups, built from `idx` by
                // `AddGroups`, partition its `nb` positions (representatives: distinct tuples).
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

    /// `self[k] += values[k]` for every element of this storage (`values` of its dtype and
    /// device, at least as long), as the indexing kernels add (integers wrap, half types round
    /// once from f32, bool is a logical or), for every dtype: one scatter-add through a
    /// descriptor of no index arrays over the dense elements.
    ///
    /// Errors: `values` of another dtype or device or too short.
    pub fn index_accumulate(&mut self, values: &Storage) -> Result<()> {
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let mut desc = IndexDesc {
            res_shape: [1; MAX_INDEX_DIMS],
            res_stride: [0; MAX_INDEX_DIMS],
            adv_stride: [0; MAX_INDEX_DIMS],
            base: 0,
            nb: 1,
            rank: 1,
            pos: 0,
            k: 0,
            n_adv: 0,
        };
        desc.res_shape[0] = n as i64;
        desc.res_stride[0] = 1;
        let idx = IndexValues::none(1, self.device())?;
        let groups = AddGroups::single(&idx)?;
        self.index_scatter_add(values, &desc, &idx, &groups)
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
        self.check_row_bytes(op, rows, n)?;
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
