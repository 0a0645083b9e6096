//! Comparisons to bools, `where` selection, and elementwise ops written into a given storage
//! (the facade's `_out` forms).

#[cfg(feature = "cuda")]
use super::{Inner, queue};
use super::{Storage, byte_len, check_float_only};
use crate::{CpuStorage, DType, Error, Result};
use genesis_kernels::{BinaryOp, CompareOp, UnaryOp};

impl Storage {
    /// `self[a_start + i] op other[b_start + i]` for `i < len` as a new `Bool` storage (f32,
    /// f16, bf16, i32, i64; IEEE comparisons, NaN unequal to everything).
    #[track_caller]
    pub fn compare_at(
        &self,
        op: CompareOp,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        len: usize,
    ) -> Result<Storage> {
        let name = op.name();
        self.check_binary_types(name, other)?;
        self.check_range(name, a_start, len)?;
        other.check_range(name, b_start, len)?;
        let dtype = self.dtype;
        match (&self.inner, &other.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(a), Inner::Cuda(b)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let mut out = crate::cuda::CudaMem::new(a.ordinal(), len)?;
                    genesis_kernels::gpu::compare::<T>(
                        &queue(a),
                        op,
                        a.span::<T>(self.len)?.slice(a_start..a_start + len)?,
                        b.span::<T>(other.len)?.slice(b_start..b_start + len)?,
                        out.span_mut::<u8>(len)?,
                    )?;
                    Ok(Storage::make(Inner::Cuda(out), DType::Bool, len))
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
            _ => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let mut out = CpuStorage::zeroed(len)?;
                    genesis_kernels::cpu::compare::<T>(
                        op,
                        &self.as_slice::<T>()?[a_start..a_start + len],
                        &other.as_slice::<T>()?[b_start..b_start + len],
                        out.as_mut_slice::<u8>(),
                    )?;
                    Ok(Storage::cpu(out, DType::Bool, len))
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
        }
    }

    /// `cond[c_start + i] ? a[a_start + i] : b[b_start + i]` for `i < len` as a new storage of
    /// `a`'s dtype (any dtype; `cond` must be `Bool`, all on one device).
    #[track_caller]
    pub fn select_at(
        cond: (&Storage, usize),
        a: (&Storage, usize),
        b: (&Storage, usize),
        len: usize,
    ) -> Result<Storage> {
        let name = "where";
        let ((c, cs), (a, as_), (b, bs)) = (cond, a, b);
        if c.dtype != DType::Bool {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: c.dtype,
            });
        }
        a.check_binary_types(name, b)?;
        if c.device() != a.device() {
            return Err(Error::DeviceMismatch {
                op: name,
                lhs: c.device(),
                rhs: a.device(),
            });
        }
        c.check_range(name, cs, len)?;
        a.check_range(name, as_, len)?;
        b.check_range(name, bs, len)?;
        let dtype = a.dtype;
        let es = dtype.size();
        let nbytes = byte_len(len, dtype)?;
        match (&c.inner, &a.inner, &b.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(cm), Inner::Cuda(am), Inner::Cuda(bm)) => {
                let mut out = crate::cuda::CudaMem::new(am.ordinal(), nbytes)?;
                genesis_kernels::gpu::select(
                    &queue(am),
                    es,
                    cm.span::<u8>(c.len)?.slice(cs..cs + len)?,
                    am.span::<u8>(a.nbytes())?
                        .slice(as_ * es..as_ * es + nbytes)?,
                    bm.span::<u8>(b.nbytes())?
                        .slice(bs * es..bs * es + nbytes)?,
                    out.span_mut::<u8>(nbytes)?,
                )?;
                Ok(Storage::make(Inner::Cuda(out), dtype, len))
            }
            _ => {
                fn host<'s>(op: &'static str, s: &'s Storage) -> Result<&'s [u8]> {
                    s.host_bytes().ok_or(Error::NotOnHost {
                        op,
                        device: s.device(),
                    })
                }
                let (cb, ab, bb) = (host(name, c)?, host(name, a)?, host(name, b)?);
                let mut out = CpuStorage::zeroed(nbytes)?;
                let o = out.as_mut_slice::<u8>();
                for i in 0..len {
                    let src = if cb[cs + i] != 0 {
                        &ab[(as_ + i) * es..]
                    } else {
                        &bb[(bs + i) * es..]
                    };
                    o[i * es..(i + 1) * es].copy_from_slice(&src[..es]);
                }
                Ok(Storage::cpu(out, dtype, len))
            }
        }
    }

    /// `out[out_start + i] = op(self[a_start + i], other[b_start + i])` for `i < len`: writes
    /// into an existing storage (allocates nothing). `out` may not be `self` or `other` (the
    /// borrow rules see to it); it must have their dtype and device.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn binary_into(
        &self,
        op: BinaryOp,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        out: &mut Storage,
        out_start: usize,
        len: usize,
    ) -> Result<()> {
        let name = op.name();
        self.check_binary_types(name, other)?;
        self.check_binary_types(name, out)?;
        self.check_range(name, a_start, len)?;
        other.check_range(name, b_start, len)?;
        out.check_range(name, out_start, len)?;
        let dtype = self.dtype;
        check_float_only(name, op.float_only(), dtype)?;
        match (&self.inner, &other.inner, &mut out.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(a), Inner::Cuda(b), Inner::Cuda(o)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    genesis_kernels::gpu::binary::<T>(
                        &queue(a),
                        op,
                        a.span::<T>(self.len)?.slice(a_start..a_start + len)?,
                        b.span::<T>(other.len)?.slice(b_start..b_start + len)?,
                        o.span_mut::<T>(out.len)?.into_slice(out_start..out_start + len)?,
                    )?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
            _ => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let a = &self.as_slice::<T>()?[a_start..a_start + len];
                    let b = &other.as_slice::<T>()?[b_start..b_start + len];
                    let o = &mut out.as_mut_slice::<T>()?[out_start..out_start + len];
                    genesis_kernels::cpu::binary::<T>(op, a, b, o)?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
        }
    }

    /// `out[out_start + i] = op(self[start + i])` for `i < len`, into an existing storage.
    #[track_caller]
    pub fn unary_into(
        &self,
        op: UnaryOp,
        start: usize,
        out: &mut Storage,
        out_start: usize,
        len: usize,
    ) -> Result<()> {
        let name = op.name();
        self.check_binary_types(name, out)?;
        self.check_range(name, start, len)?;
        out.check_range(name, out_start, len)?;
        let dtype = self.dtype;
        check_float_only(name, op.float_only(), dtype)?;
        match (&self.inner, &mut out.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(a), Inner::Cuda(o)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    genesis_kernels::gpu::unary::<T>(
                        &queue(a),
                        op,
                        a.span::<T>(self.len)?.slice(start..start + len)?,
                        o.span_mut::<T>(out.len)?.into_slice(out_start..out_start + len)?,
                    )?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
            _ => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let a = &self.as_slice::<T>()?[start..start + len];
                    let o = &mut out.as_mut_slice::<T>()?[out_start..out_start + len];
                    genesis_kernels::cpu::unary::<T>(op, a, o)?;
                    Ok(())
                }, _ => Err(Error::UnsupportedDType { op: name, dtype }))
            }
        }
    }
}
