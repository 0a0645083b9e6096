//! Boolean-mask selection and fill (`genesis_kernels::mask`).

use super::Storage;
#[cfg(feature = "cuda")]
use super::{Inner, byte_len, queue};
use crate::{DType, Device, Error, Result};

impl Storage {
    fn check_mask(&self, op: &'static str, mask: &Storage) -> Result<()> {
        if mask.dtype != DType::Bool {
            return Err(Error::UnsupportedDType {
                op,
                dtype: mask.dtype,
            });
        }
        if mask.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: mask.device(),
            });
        }
        Ok(())
    }

    /// The elements `self[start + i]` whose mask byte `mask[mask_start + i]` is set, for
    /// `i < len`, in order, as a new storage (any dtype; `mask` is `Bool` on the same device).
    /// On the GPU: a count, a scan, and a single compaction pass that keeps the order (the
    /// host reads the count in between to size the output).
    #[track_caller]
    pub fn masked_select_at(
        &self,
        start: usize,
        mask: &Storage,
        mask_start: usize,
        len: usize,
    ) -> Result<Storage> {
        let op = "masked_select";
        self.check_mask(op, mask)?;
        self.check_range(op, start, len)?;
        mask.check_range(op, mask_start, len)?;
        let es = self.dtype.size();
        match (&self.inner, &mask.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(s), Inner::Cuda(m)) => {
                let stream = queue(s);
                let mp = m
                    .span::<u8>(mask.len)?
                    .slice(mask_start..mask_start + len)?;
                let src = s
                    .span::<u8>(self.nbytes())?
                    .slice(start * es..(start + len) * es)?;
                let (ws, count) = count_on_device(m.ordinal(), mp, &stream)?;
                let nbytes = byte_len(count, self.dtype)?;
                let mut out = crate::cuda::CudaMem::new(s.ordinal(), nbytes)?;
                let ws_span =
                    ws.span::<u8>(genesis_kernels::mask::compaction_workspace_bytes(len))?;
                // SAFETY: the workspace holds the counts of this mask, queued before on this
                // stream, and `out` the `count` elements the scan found.
                unsafe {
                    genesis_kernels::mask::compact(
                        &stream,
                        es,
                        src,
                        ws_span,
                        out.span_mut(nbytes)?,
                    )?
                };
                Ok(Storage::make(Inner::Cuda(out), self.dtype, count))
            }
            _ => {
                let src = self.host_bytes().ok_or(Error::NotOnHost {
                    op,
                    device: self.device(),
                })?;
                let m = mask.host_bytes().ok_or(Error::NotOnHost {
                    op,
                    device: mask.device(),
                })?;
                let bytes = genesis_kernels::mask::masked_select(
                    &src[start * es..(start + len) * es],
                    &m[mask_start..mask_start + len],
                    es,
                )?;
                Storage::from_bytes(&bytes, self.dtype, Device::Cpu)
            }
        }
    }

    /// The positions `i < len` whose mask byte `self[start + i]` is set (`self` is `Bool`), in
    /// order, as a new `I64` storage on `self`'s device (NumPy's `flatnonzero`). On the GPU: a
    /// count, a scan and one pass writing positions (the host reads the count in between).
    #[track_caller]
    pub fn nonzero_at(&self, start: usize, len: usize) -> Result<Storage> {
        let op = "nonzero";
        self.check_mask(op, self)?;
        self.check_range(op, start, len)?;
        match &self.inner {
            #[cfg(feature = "cuda")]
            Inner::Cuda(m) => {
                let stream = queue(m);
                let mp = m.span::<u8>(self.len)?.slice(start..start + len)?;
                let (ws, count) = count_on_device(m.ordinal(), mp, &stream)?;
                let mut out = crate::cuda::CudaMem::new(m.ordinal(), byte_len(count, DType::I64)?)?;
                let ws_span =
                    ws.span::<u8>(genesis_kernels::mask::compaction_workspace_bytes(len))?;
                // SAFETY: the workspace holds the counts of this mask, queued before on this
                // stream, and `out` the `count` positions the scan found.
                unsafe {
                    genesis_kernels::mask::positions(&stream, len, ws_span, out.span_mut(count)?)?
                };
                Ok(Storage::make(Inner::Cuda(out), DType::I64, count))
            }
            _ => {
                let m = self.host_bytes().ok_or(Error::NotOnHost {
                    op,
                    device: self.device(),
                })?;
                let pos: Vec<i64> = m[start..start + len]
                    .iter()
                    .enumerate()
                    .filter(|&(_, &b)| b != 0)
                    .map(|(i, _)| i as i64)
                    .collect();
                Storage::from_slice(&pos, Device::Cpu)
            }
        }
    }

    /// `self[start + i] = value` where `mask[mask_start + i]` is set, for `i < len`, in place
    /// (`value`'s bytes in `self`'s dtype; allocates nothing).
    #[track_caller]
    pub fn masked_fill_at(
        &mut self,
        start: usize,
        mask: &Storage,
        mask_start: usize,
        len: usize,
        value: &[u8],
    ) -> Result<()> {
        let op = "masked_fill";
        self.check_mask(op, mask)?;
        self.check_range(op, start, len)?;
        mask.check_range(op, mask_start, len)?;
        let es = self.dtype.size();
        if value.len() != es {
            return Err(Error::LengthMismatch {
                op,
                lhs: es,
                rhs: value.len(),
            });
        }
        match (&mut self.inner, &mask.inner) {
            #[cfg(feature = "cuda")]
            (Inner::Cuda(d), Inner::Cuda(m)) => {
                let stream = queue(d);
                let dst = d.span_mut::<u8>(self.len * es)?;
                genesis_kernels::mask::fill(
                    &stream,
                    dst.into_slice(start * es..(start + len) * es)?,
                    m.span::<u8>(mask.len)?
                        .slice(mask_start..mask_start + len)?,
                    value,
                )?;
                Ok(())
            }
            _ => {
                let m = mask.host_bytes().ok_or(Error::NotOnHost {
                    op,
                    device: mask.device(),
                })?;
                let dst = self.host_bytes_mut_for(op)?;
                genesis_kernels::mask::masked_fill(
                    &mut dst[start * es..(start + len) * es],
                    &m[mask_start..mask_start + len],
                    value,
                )?;
                Ok(())
            }
        }
    }
}

/// Counts the set bytes of `mask` on device `ordinal`: the compaction workspace (tile offsets
/// for the pass that follows) and the count, read by the host (one synchronisation of
/// `stream`).
#[cfg(feature = "cuda")]
fn count_on_device(
    ordinal: usize,
    mask: genesis_cuda::DeviceSpan<'_, u8>,
    stream: &crate::cuda::Queue,
) -> Result<(crate::cuda::CudaMem, usize)> {
    let ws_len = genesis_kernels::mask::compaction_workspace_bytes(mask.len());
    let mut ws = crate::cuda::CudaMem::new(ordinal, ws_len)?;
    let at = genesis_kernels::mask::count_and_scan(stream, mask, ws.span_mut::<u8>(ws_len)?)?;
    let mut total = [0u8; 8];
    crate::cuda::read_back(
        stream,
        ws.span::<u8>(ws_len)?.slice(at..at + 8)?,
        &mut total,
    )?;
    Ok((ws, u64::from_le_bytes(total) as usize))
}
