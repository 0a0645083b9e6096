//! Writes through a shared handle (`&Storage`): how tensors that share a storage write it
//! (PyTorch's view semantics). Each takes the storage's write lock for the write itself (see
//! `share.rs`), bumps [`Storage::version`], and reads a source that lives in the same storage
//! into a temporary first, so overlapping views give PyTorch's answer (every element computed
//! from the values before the write) and no thread waits for itself.

use super::{BinaryRhs, Storage};
use crate::layout::Layout;
use crate::{Error, Result, UnaryOp};
use genesis_kernels::BinaryOp;
use genesis_kernels::gather::Along;

/// The first element of a layout's run, 0 for an empty one (whose offset may lie past the end
/// of its storage).
fn start_of(layout: &Layout) -> usize {
    if layout.numel() == 0 {
        0
    } else {
        layout.offset()
    }
}

/// A dense layout of `shape` at offset 0.
fn dense(shape: &[usize]) -> Layout {
    Layout::contiguous(shape)
}

impl Storage {
    /// [`Storage::with_exclusive`] for an `f` that reads `sources` (other storages than
    /// `self`) while it writes: their read locks and `self`'s write lock are taken in address
    /// order, the rule that keeps threads that write each other's sources from waiting for
    /// each other forever. Every storage `f` reads must be among `sources`; one that is
    /// `self` makes the call fail with [`Error::Aliased`] (read it out first).
    pub fn with_exclusive_reading<R, E: From<Error>>(
        &self,
        op: &'static str,
        sources: &[&Storage],
        f: impl FnOnce(&mut Storage) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let me = self as *const Storage as usize;
        let mut before: Vec<&Storage> = sources
            .iter()
            .copied()
            .filter(|s| (*s as *const Storage as usize) < me)
            .collect();
        before.sort_by_key(|s| *s as *const Storage as usize);
        let guards = before
            .iter()
            .map(|s| s.read(op))
            .collect::<Result<Vec<_>>>()?;
        // A source that is `self` would be read while written.
        if sources.iter().any(|s| std::ptr::eq(*s, self)) {
            return Err(Error::Aliased { op }.into());
        }
        // The sources above `self` are read-locked by `f` itself, after the write lock.
        let r = self.with_exclusive(op, f);
        drop(guards);
        r
    }

    /// Copies the elements of `src` under `src_layout` into this storage under `dst_layout`
    /// (same shape and dtype; any devices), through a shared handle: every tensor that shares
    /// this storage sees the write. A source in this very storage is read out first, so
    /// overlapping views copy the values from before the write (PyTorch's `copy_`). Fails,
    /// writing nothing, as [`Storage::copy_strided_from`] does.
    pub fn copy_strided_from_shared(
        &self,
        dst_layout: &Layout,
        src: &Storage,
        src_layout: &Layout,
    ) -> Result<()> {
        let op = "copy_";
        self.check_destination(op, dst_layout)?;
        if std::ptr::eq(self, src) {
            let tmp = src.contiguous(src_layout)?;
            let l = dense(src_layout.shape());
            return self.with_exclusive(op, |d| d.copy_strided_from(dst_layout, &tmp, &l));
        }
        self.with_exclusive_reading(op, &[src], |d| {
            d.copy_strided_from(dst_layout, src, src_layout)
        })
    }

    /// Sets every element of the view `layout` to `value` (one host element of this
    /// storage's dtype, as [`Storage::scalar`] makes), through a shared handle (PyTorch's
    /// `fill_`): any strided view; a view with repeated elements (stride 0) is an error.
    pub fn fill_shared(&self, layout: &Layout, value: &Storage) -> Result<()> {
        let op = "fill_";
        self.check_destination(op, layout)?;
        if value.len() != 1 || value.dtype() != self.dtype() {
            return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                op,
                reason: format!(
                    "the value is one {} element, not {} of {}",
                    self.dtype(),
                    value.len(),
                    value.dtype()
                ),
            }));
        }
        if layout.numel() == 0 {
            self.version
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Ok(());
        }
        // One element broadcast (stride 0) over the view: a strided copy on the storage's
        // device (the strided-copy kernel on CUDA).
        let one = if value.device() == self.device() && !value.is_pinned() {
            None
        } else {
            Some(value.to_device(self.device())?)
        };
        let one = one.as_ref().unwrap_or(value);
        let src = Layout::new(layout.shape(), &vec![0; layout.rank()], 0);
        self.with_exclusive_reading(op, &[one], |d| d.copy_strided_from(layout, one, &src))
    }

    /// In place through a shared handle: `self[layout] = op(self[layout], rhs)` for every
    /// position of `layout` (any strided view), `rhs` a tensor read through its layout of the
    /// same shape (stride 0 where broadcast) or a scalar. A contiguous view is written by the
    /// in-place kernel; a strided one is computed into a temporary and copied back. An `rhs`
    /// in this storage is read out first (the answer of the values before the write).
    pub fn binary_assign_shared(
        &self,
        op: BinaryOp,
        layout: &Layout,
        rhs: BinaryRhs<'_>,
    ) -> Result<()> {
        let name = op.name();
        self.check_destination(name, layout)?;
        let own;
        let own_layout;
        let rhs = match rhs {
            BinaryRhs::Tensor(o, l) if std::ptr::eq(o, self) => {
                own = o.contiguous(l)?;
                own_layout = dense(l.shape());
                BinaryRhs::Tensor(&own, &own_layout)
            }
            r => r,
        };
        if layout.is_contiguous() {
            let start = start_of(layout);
            let sources: Vec<&Storage> = match rhs {
                BinaryRhs::Tensor(o, _) => vec![o],
                BinaryRhs::Scalar(_) => Vec::new(),
            };
            return self.with_exclusive_reading(name, &sources, |d| {
                d.binary_strided_assign(op, start, layout.shape(), rhs)
            });
        }
        let out = self.binary_strided(op, layout, rhs)?;
        self.copy_strided_from_shared(layout, &out, &dense(layout.shape()))
    }

    /// In place through a shared handle: `self[layout] = op(self[layout])` for any strided
    /// view (a contiguous one by the in-place kernel, a strided one through a temporary).
    pub fn unary_assign_shared(&self, op: UnaryOp, layout: &Layout) -> Result<()> {
        let name = op.name();
        self.check_destination(name, layout)?;
        if layout.is_contiguous() {
            let (start, n) = (start_of(layout), layout.numel());
            return self.with_exclusive(name, |d| d.unary_assign(op, start, n));
        }
        let out = self.contiguous(layout)?.unary(op)?;
        self.copy_strided_from_shared(layout, &out, &dense(layout.shape()))
    }

    /// In place through a shared handle: `self[layout][i] = value` where the mask byte
    /// `mask[mask_start + i]` is set (row-major positions `i` of `layout`; `mask` is `Bool` on
    /// the same device, dense from `mask_start`; `value` is one element's bytes). A
    /// contiguous view is written by the masked-fill kernel; a strided one through a
    /// temporary. A mask in this storage is read out first.
    pub fn masked_fill_shared(
        &self,
        layout: &Layout,
        mask: &Storage,
        mask_start: usize,
        value: &[u8],
    ) -> Result<()> {
        let op = "masked_fill_";
        self.check_destination(op, layout)?;
        let n = layout.numel();
        let own;
        let (mask, mask_start) = if std::ptr::eq(mask, self) {
            own = mask.contiguous(&Layout::new(&[n], &[1], mask_start))?;
            (&own, 0)
        } else {
            (mask, mask_start)
        };
        if layout.is_contiguous() {
            let start = start_of(layout);
            return self.with_exclusive_reading(op, &[mask], |d| {
                d.masked_fill_at(start, mask, mask_start, n, value)
            });
        }
        let mut tmp = self.contiguous(layout)?;
        tmp.masked_fill_at(0, mask, mask_start, n, value)?;
        self.copy_strided_from_shared(layout, &tmp, &dense(layout.shape()))
    }

    /// In place through a shared handle: the scatter (`add`: scatter-add) of `values` into
    /// this storage under `layout` (any view without negative strides), at the positions
    /// `index` gives along `d.dim` ([`Storage::scatter_along`] with `d`'s target strides those
    /// of `layout`). Every index value must already be known to lie in `0..d.size`: a bad one
    /// is still an error, but leaves the view partly written. An index or values storage that
    /// is this very one is read out first (the values from before the write).
    #[allow(clippy::too_many_arguments)]
    pub fn scatter_along_shared(
        &self,
        layout: &Layout,
        add: bool,
        index: &Storage,
        index_start: usize,
        values: &Storage,
        values_start: usize,
        d: &Along,
    ) -> Result<()> {
        let op = if add { "scatter_add_" } else { "scatter_" };
        self.check_destination(op, layout)?;
        let (ni, nv, _) = d.reach()?;
        let own_index;
        let (index, index_start) = if std::ptr::eq(index, self) {
            own_index = index.contiguous(&Layout::new(&[ni], &[1], index_start))?;
            (&own_index, 0)
        } else {
            (index, index_start)
        };
        let own_values;
        let (values, values_start) = if std::ptr::eq(values, self) {
            own_values = values.contiguous(&Layout::new(&[nv], &[1], values_start))?;
            (&own_values, 0)
        } else {
            (values, values_start)
        };
        let start = start_of(layout);
        self.with_exclusive_reading(op, &[index, values], |s| {
            s.scatter_along(start, add, index, index_start, values, values_start, d)
        })
    }

    /// Checks a destination view before a shared write: inside the storage, and no element
    /// written twice (a stride of 0 over more than one element).
    fn check_destination(&self, _op: &'static str, layout: &Layout) -> Result<()> {
        if layout.numel() == 0 {
            return Ok(());
        }
        layout.check_bounds(self.len())?;
        if layout
            .shape()
            .iter()
            .zip(layout.strides())
            .any(|(&n, &s)| s == 0 && n > 1)
        {
            return Err(Error::OverlappingDestination);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn iota(n: usize) -> Storage {
        Storage::from_slice(&(0..n).map(|x| x as f32).collect::<Vec<_>>(), Device::Cpu).unwrap()
    }

    #[test]
    fn shared_writes_bump_the_version_and_overlap_reads_first() {
        let s = iota(6);
        assert_eq!(s.version(), 0);
        // s[1:6] = s[0:5]: the old values shift by one (PyTorch's copy_ of overlapping views).
        s.copy_strided_from_shared(&Layout::new(&[5], &[1], 1), &s, &Layout::new(&[5], &[1], 0))
            .unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.version(), 1);
        // Every other element, x += x reversed-in-place through a strided view.
        let v = Layout::new(&[3], &[2], 0);
        s.binary_assign_shared(BinaryOp::Add, &v, BinaryRhs::Tensor(&s, &v))
            .unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), [0.0, 0.0, 2.0, 2.0, 6.0, 4.0]);
        let seven = Storage::scalar(7.0, crate::DType::F32).unwrap();
        s.fill_shared(&Layout::new(&[2], &[3], 1), &seven).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), [0.0, 7.0, 2.0, 2.0, 7.0, 4.0]);
        assert_eq!(s.version(), 3);
        // A destination that repeats elements is refused, writing nothing.
        assert!(matches!(
            s.fill_shared(&Layout::new(&[2], &[0], 1), &seven),
            Err(Error::OverlappingDestination)
        ));
        // A host guard alive on this thread makes a write an error, not a deadlock.
        let g = s.host_bytes().unwrap();
        assert!(matches!(
            s.fill_shared(&Layout::new(&[1], &[1], 0), &seven),
            Err(Error::Aliased { .. })
        ));
        drop(g);
        s.unary_assign_shared(UnaryOp::Neg, &Layout::new(&[2, 2], &[1, 2], 0))
            .unwrap();
        assert_eq!(
            s.to_vec::<f32>().unwrap(),
            [-0.0, -7.0, -2.0, -2.0, 7.0, 4.0]
        );
    }

    #[test]
    fn with_exclusive_writes_in_place_and_survives_a_panic() {
        let s = iota(4);
        s.with_exclusive("t", |d| -> Result<()> {
            d.as_mut_slice::<f32>()?[3] = 9.0;
            Ok(())
        })
        .unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 9.0]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.with_exclusive("t", |d| -> Result<()> {
                d.as_mut_slice::<f32>()?[0] = 5.0;
                panic!("inside");
            });
        }));
        assert!(r.is_err());
        assert_eq!(s.to_vec::<f32>().unwrap(), [5.0, 1.0, 2.0, 9.0]);
        // Reading `s` inside its own exclusive section is an error, not a deadlock.
        let e = s.with_exclusive("t", |_| s.to_vec::<f32>()).unwrap_err();
        assert!(matches!(e, Error::Aliased { .. }));
    }
}
