//! Operations over many storages at once: the multi-tensor optimiser steps of
//! `genesis_kernels::optim` ([`Storage::adam_step`], [`Storage::clip_grad_norm`]), one launch
//! per up to 32 tensors of a dtype instead of several per tensor.
//!
//! Each storage involved is locked once (written ones for writing), in address order so that
//! two threads locking overlapping sets cannot deadlock; parts of one storage may be several
//! tensors (views into one allocation), but no written part may overlap another part.

use std::sync::atomic::Ordering;

use genesis_kernels::optim::AdamStep;

use super::{Inner, Storage, check_float_only, host_of_mut, mixed};
use crate::compute::{AdamParts, Compute};
use crate::cuda::CudaMem;
use crate::share::{ReadGuard, WriteGuard};
use crate::{DType, Error, Result};

/// `len` elements from `start` of a storage: one tensor of a multi-tensor op.
#[derive(Debug, Clone, Copy)]
pub struct StorageRange<'a> {
    /// The storage.
    pub storage: &'a Storage,
    /// The first element.
    pub start: usize,
    /// Elements.
    pub len: usize,
}

impl<'a> StorageRange<'a> {
    /// `len` elements from `start` of `storage`.
    pub fn new(storage: &'a Storage, start: usize, len: usize) -> StorageRange<'a> {
        StorageRange {
            storage,
            start,
            len,
        }
    }

    /// The whole of `storage`.
    pub fn whole(storage: &'a Storage) -> StorageRange<'a> {
        StorageRange::new(storage, 0, storage.len())
    }
}

enum Lock<'s> {
    Read(ReadGuard<'s, Inner>),
    Write(WriteGuard<'s, Inner>),
}

/// Where a locked storage's bytes are.
#[derive(Clone, Copy)]
enum Base {
    Host(*mut u8),
    Cuda(u64),
}

/// The storages of a multi-tensor op, locked; each part's bytes.
struct Locked<'s> {
    locks: Vec<Lock<'s>>,
    bases: Vec<Base>,
    /// For each part: its lock, its byte range and whether it is written.
    parts: Vec<(usize, usize, usize, bool)>,
}

impl<'s> Locked<'s> {
    /// Locks the storages of `parts` (each once; for writing when any of its parts is
    /// written), checking ranges, one device and one kind of memory, and that no written part
    /// overlaps another. Adds one to the version of every written storage.
    fn new(op: &'static str, parts: &[(StorageRange<'s>, bool)]) -> Result<Locked<'s>> {
        let Some(first) = parts.first() else {
            return Ok(Locked {
                locks: Vec::new(),
                bases: Vec::new(),
                parts: Vec::new(),
            });
        };
        let device = first.0.storage.device();
        for (p, _) in parts {
            p.storage.check_range(op, p.start, p.len)?;
            if p.storage.device() != device {
                return Err(Error::DeviceMismatch {
                    op,
                    lhs: device,
                    rhs: p.storage.device(),
                });
            }
        }
        let key = |s: &Storage| s as *const Storage as usize;
        let mut storages: Vec<(&'s Storage, bool)> = Vec::new();
        let mut sorted: Vec<&(StorageRange<'s>, bool)> = parts.iter().collect();
        sorted.sort_by_key(|(p, _)| key(p.storage));
        for (p, w) in sorted {
            match storages.last_mut() {
                Some((s, written)) if std::ptr::eq(*s, p.storage) => *written |= *w,
                _ => storages.push((p.storage, *w)),
            }
        }
        let mut locks = Vec::with_capacity(storages.len());
        let mut bases = Vec::with_capacity(storages.len());
        for (s, written) in &storages {
            if *written {
                let mut g = s.inner.write(op)?;
                let base = match &mut *g {
                    Inner::Cuda(m) => Base::Cuda(m.ptr()),
                    inner => Base::Host(host_of_mut(inner, op)?.as_mut_ptr()),
                };
                bases.push(base);
                locks.push(Lock::Write(g));
            } else {
                let g = s.inner.read(op)?;
                let base = match &*g {
                    Inner::Cuda(m) => Base::Cuda(m.ptr()),
                    inner => Base::Host(
                        inner
                            .host()
                            .map_or(std::ptr::null_mut(), |b| b.as_ptr().cast_mut()),
                    ),
                };
                bases.push(base);
                locks.push(Lock::Read(g));
            }
        }
        if bases
            .iter()
            .any(|b| matches!(b, Base::Host(_)) != matches!(bases[0], Base::Host(_)))
        {
            return Err(mixed(op));
        }
        let mut spans = Vec::with_capacity(parts.len());
        for (p, w) in parts {
            let k = storages
                .binary_search_by_key(&key(p.storage), |(s, _)| key(s))
                .map_err(|_| Error::Aliased { op })?;
            let elem = p.storage.dtype().size();
            spans.push((k, p.start * elem, p.len * elem, *w));
        }
        // No written part overlaps another part of its storage.
        let mut by_start: Vec<&(usize, usize, usize, bool)> =
            spans.iter().filter(|s| s.2 > 0).collect();
        by_start.sort_by_key(|s| (s.0, s.1));
        for (i, a) in by_start.iter().enumerate() {
            for b in &by_start[i + 1..] {
                if b.0 != a.0 || b.1 >= a.1 + a.2 {
                    break;
                }
                if a.3 || b.3 {
                    return Err(Error::Aliased { op });
                }
            }
        }
        for (s, written) in &storages {
            if *written {
                s.version.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(Locked {
            locks,
            bases,
            parts: spans,
        })
    }

    /// Whether the memory is the host's.
    fn on_host(&self) -> bool {
        matches!(self.bases.first(), Some(Base::Host(_)))
    }

    /// A CUDA memory among the locked ones (where work is queued).
    fn cuda(&self) -> Option<&CudaMem> {
        self.locks.iter().find_map(|l| {
            let inner: &Inner = match l {
                Lock::Read(g) => g,
                Lock::Write(g) => g,
            };
            match inner {
                Inner::Cuda(m) => Some(m),
                _ => None,
            }
        })
    }

    /// Part `i`'s host bytes, to read.
    fn host(&self, i: usize) -> &[u8] {
        let (k, at, len, _) = self.parts[i];
        let Base::Host(b) = self.bases[k] else {
            return empty();
        };
        if len == 0 {
            return empty();
        }
        // SAFETY: the storage is locked while `self` lives; `at..at + len` lies inside its
        // bytes (ranges checked), and no part written through `host_mut` overlaps it.
        unsafe { std::slice::from_raw_parts(b.add(at), len) }
    }

    /// Part `i`'s host bytes, to write.
    #[allow(clippy::mut_from_ref)]
    fn host_mut(&self, i: usize) -> &mut [u8] {
        let (k, at, len, w) = self.parts[i];
        let Base::Host(b) = self.bases[k] else {
            return empty();
        };
        if len == 0 || !w {
            return empty();
        }
        // SAFETY: the storage is write-locked while `self` lives (the part is written); its
        // range lies inside the bytes and overlaps no other part (checked in `new`), and each
        // part is lent once by the callers below.
        unsafe { std::slice::from_raw_parts_mut(b.add(at), len) }
    }

    /// Part `i` on the device, to read.
    fn span(&self, i: usize) -> genesis_cuda::DeviceSpan<'_, u8> {
        let (k, at, len, _) = self.parts[i];
        let base = match self.bases[k] {
            Base::Cuda(a) => a,
            Base::Host(_) => 0,
        };
        // SAFETY: as in `host`: device memory locked while the span lives, in range.
        unsafe { genesis_cuda::DeviceSpan::from_raw(base + at as u64, len) }
    }

    /// Part `i` on the device, to write.
    fn span_mut(&self, i: usize) -> genesis_cuda::DeviceSpanMut<'_, u8> {
        let (k, at, len, w) = self.parts[i];
        let base = match self.bases[k] {
            Base::Cuda(a) if w => a,
            _ => 0,
        };
        let len = if w { len } else { 0 };
        // SAFETY: as in `host_mut`.
        unsafe { genesis_cuda::DeviceSpanMut::from_raw(base + at as u64, len) }
    }
}

/// No bytes, at an address aligned for every element type (the parts are read as `T`s).
fn empty<'a>() -> &'a mut [u8] {
    // SAFETY: a slice of zero bytes at a dangling, 8-byte-aligned, non-null address.
    unsafe {
        std::slice::from_raw_parts_mut(std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), 0)
    }
}

impl Storage {
    /// One Adam (or AdamW) step of many tensors in place, each `[param, grad, exp_avg,
    /// exp_avg_sq]` of one dtype (f32, f16, bf16: computed in f32; f64) and one length, every
    /// storage on one device: one launch per 32 tensors of a dtype on CUDA, the bit-identical
    /// twin on the host (see `genesis_kernels::optim` for the update). The parameter and
    /// moment storages' versions go up by one. Nothing is written on error (bad
    /// hyper-parameters, mismatched dtypes, lengths or devices, a written part overlapping
    /// another: [`Error::Aliased`]).
    pub fn adam_step(h: &AdamStep, tensors: &[[StorageRange<'_>; 4]]) -> Result<()> {
        let op = "adam";
        h.check()?;
        for [p, g, m, v] in tensors {
            let dtype = p.storage.dtype();
            check_float_only(op, true, dtype)?;
            for q in [g, m, v] {
                if q.storage.dtype() != dtype {
                    return Err(Error::DTypeMismatch {
                        op,
                        lhs: dtype,
                        rhs: q.storage.dtype(),
                    });
                }
                if q.len != p.len {
                    return Err(Error::LengthMismatch {
                        op,
                        lhs: p.len,
                        rhs: q.len,
                    });
                }
            }
        }
        let flat: Vec<(StorageRange<'_>, bool)> = tensors
            .iter()
            .flat_map(|[p, g, m, v]| [(*p, true), (*g, false), (*m, true), (*v, true)])
            .collect();
        let locked = Locked::new(op, &flat)?;
        let mut dtypes: Vec<DType> = Vec::new();
        for t in tensors {
            if !dtypes.contains(&t[0].storage.dtype()) {
                dtypes.push(t[0].storage.dtype());
            }
        }
        for dtype in dtypes {
            let which = (0..tensors.len()).filter(|&t| tensors[t][0].storage.dtype() == dtype);
            if locked.on_host() {
                let list = which
                    .map(|t| {
                        let i = 4 * t;
                        AdamParts {
                            p: locked.host_mut(i),
                            g: locked.host(i + 1),
                            m: locked.host_mut(i + 2),
                            v: locked.host_mut(i + 3),
                        }
                    })
                    .collect();
                <[u8] as Compute>::adam(&[], h, dtype, list)?;
            } else {
                let list = which
                    .map(|t| {
                        let i = 4 * t;
                        AdamParts {
                            p: locked.span_mut(i),
                            g: locked.span(i + 1),
                            m: locked.span_mut(i + 2),
                            v: locked.span_mut(i + 3),
                        }
                    })
                    .collect();
                let on = locked.cuda().ok_or_else(|| mixed(op))?;
                CudaMem::adam(on, h, dtype, list)?;
            }
        }
        Ok(())
    }

    /// PyTorch's `clip_grad_norm_` over many gradients in place: their global 2-norm (the
    /// square root of the sum of squares, each gradient's squares in f32, or f64 for f64,
    /// the partial sums in f64) and the factor `min(max_norm / (norm + 1e-6), 1)`, by which
    /// every gradient is multiplied. Returns `[norm, coef]` as a new f64 storage of 2 elements
    /// on the gradients' device, without synchronising. The gradients may differ in dtype
    /// (f32, f16, bf16, f64) but not in device; `grads` must not be empty; a written part
    /// overlapping another is [`Error::Aliased`].
    pub fn clip_grad_norm(grads: &[StorageRange<'_>], max_norm: f64) -> Result<Storage> {
        let op = "clip_grad_norm";
        let Some(first) = grads.first() else {
            return Err(Error::LengthMismatch { op, lhs: 1, rhs: 0 });
        };
        for g in grads {
            check_float_only(op, true, g.storage.dtype())?;
        }
        // Runs of one dtype, in order of their first appearance (the partial sums' order).
        let mut order: Vec<usize> = (0..grads.len()).collect();
        let mut rank: Vec<DType> = Vec::new();
        for g in grads {
            if !rank.contains(&g.storage.dtype()) {
                rank.push(g.storage.dtype());
            }
        }
        order.sort_by_key(|&i| rank.iter().position(|d| *d == grads[i].storage.dtype()));
        let flat: Vec<(StorageRange<'_>, bool)> = order.iter().map(|&i| (grads[i], true)).collect();
        let mut out = Storage::uninit(2, DType::F64, first.storage.device())?;
        {
            let locked = Locked::new(op, &flat)?;
            let dtypes = order.iter().map(|&i| grads[i].storage.dtype());
            if locked.on_host() {
                let list = dtypes
                    .enumerate()
                    .map(|(i, d)| (d, locked.host_mut(i)))
                    .collect();
                let super::MemMut::Host(o) = out.mem_mut(op)? else {
                    return Err(mixed(op));
                };
                <[u8] as Compute>::clip_grad_norm(list, max_norm, o)?;
            } else {
                let list = dtypes
                    .enumerate()
                    .map(|(i, d)| (d, locked.span_mut(i)))
                    .collect();
                let super::MemMut::Cuda(o) = out.mem_mut(op)? else {
                    return Err(mixed(op));
                };
                CudaMem::clip_grad_norm(list, max_norm, o)?;
            }
        }
        Ok(out)
    }
}
