//! Cross entropy of logits rows against class indices in one pass
//! (`genesis_kernels::classifier`, llm.c's fused classifier): the CUDA kernels (f32, f16, bf16)
//! or their CPU twins (and f64). The softmax of the logits is never stored.

use genesis_kernels::classifier::{ClassifierShape, Reduction};

use super::{Mem, MemMut, Storage, check_float_only, mixed};
use crate::compute::{CeLogits, Compute};
use crate::{DType, Error, Result};

impl Storage {
    /// Reads a device status word: the first row whose target is bad, as an error.
    fn check_status(
        status: &Storage,
        shape: &ClassifierShape,
        targets: (&Storage, usize),
    ) -> Result<()> {
        let row = status.to_vec::<i64>()?[0];
        if row < 0 {
            return Ok(());
        }
        let r = row as usize;
        let value = targets.0.to_vec::<i64>()?[targets.1 + r];
        Err(Error::Kernel(genesis_kernels::Error::IndexOutOfRange {
            op: "cross_entropy",
            position: r,
            value,
            size: shape.classes as i64,
        }))
    }

    /// The cross entropy of `shape.rows` rows of logits (from element `logits.1`,
    /// `shape.stride` apart) against int64 class indices (from element `targets.1`; rows
    /// whose target is `shape.ignore_index` count nothing), PyTorch's `F.cross_entropy`:
    /// returns the loss (`[rows]` for `Reduction::None`, else one value: the sum, or the mean
    /// over the rows not ignored) and each row's log-sum-exp `lse` for
    /// [`Storage::cross_entropy_backward`], both [`Storage::fused_acc_dtype`]. A target
    /// outside `0..classes` is an index error (on a device, read back after the kernel: one
    /// synchronisation, which targets with [`Storage::known_bounds`] in range skip).
    #[track_caller]
    pub fn cross_entropy(
        shape: &ClassifierShape,
        reduction: Reduction,
        logits: (&Storage, usize),
        targets: (&Storage, usize),
    ) -> Result<(Storage, Storage)> {
        let name = "cross_entropy";
        let (ls, dtype) = (logits.0, logits.0.dtype);
        check_float_only(name, true, dtype)?;
        ls.check_range(name, logits.1, shape.span_len(shape.stride)?)?;
        check_targets(name, ls, shape, targets)?;
        let dev = ls.device();
        let acc = Self::fused_acc_dtype(dtype);
        let n = shape.rows;
        let mut loss = Storage::uninit(n, acc, dev)?;
        let mut lse = Storage::uninit(n, acc, dev)?;
        let mut out = Storage::uninit(1, acc, dev)?;
        let mut status = Storage::full::<i64>(1, -1, dev)?;
        {
            let (lr, tr) = (ls.read(name)?, targets.0.read(name)?);
            match (
                lr.mem(),
                tr.mem(),
                [loss.mem_mut(name)?, lse.mem_mut(name)?],
                out.mem_mut(name)?,
                status.mem_mut(name)?,
            ) {
                (
                    Mem::Host(a),
                    Mem::Host(t),
                    [MemMut::Host(l), MemMut::Host(e)],
                    MemMut::Host(o),
                    MemMut::Host(s),
                ) => a.cross_entropy(
                    dtype,
                    shape,
                    reduction,
                    logits.1,
                    (t, targets.1),
                    [l, e],
                    o,
                    s,
                )?,
                (
                    Mem::Cuda(a),
                    Mem::Cuda(t),
                    [MemMut::Cuda(l), MemMut::Cuda(e)],
                    MemMut::Cuda(o),
                    MemMut::Cuda(s),
                ) => a.cross_entropy(
                    dtype,
                    shape,
                    reduction,
                    logits.1,
                    (t, targets.1),
                    [l, e],
                    o,
                    s,
                )?,
                _ => return Err(mixed(name)),
            }
        }
        // Targets whose known bounds lie in `0..classes` need no read-back.
        if dev != crate::Device::Cpu && !targets.0.known_within(0, shape.classes as i128) {
            Self::check_status(&status, shape, targets)?;
        }
        Ok((
            if reduction == Reduction::None {
                loss
            } else {
                out
            },
            lse,
        ))
    }

    /// The gradient of [`Storage::cross_entropy`]'s loss with respect to the logits, from the
    /// loss's gradient `dloss` (`reduction.dloss_len(rows)` values of
    /// [`Storage::fused_acc_dtype`]) and the forward's `lse`: a new storage of `rows *
    /// classes` elements of the logits' dtype (`(softmax - onehot) * dloss`, divided by the
    /// count of rows not ignored for the mean; ignored rows 0).
    #[track_caller]
    pub fn cross_entropy_backward(
        shape: &ClassifierShape,
        reduction: Reduction,
        logits: (&Storage, usize),
        targets: (&Storage, usize),
        lse: &Storage,
        dloss: &Storage,
    ) -> Result<Storage> {
        let name = "cross_entropy_backward";
        let (ls, dtype) = (logits.0, logits.0.dtype);
        check_backward(name, shape, reduction, logits, targets, lse, dloss)?;
        let len = shape
            .rows
            .checked_mul(shape.classes)
            .ok_or(Error::SizeOverflow {
                len: usize::MAX,
                dtype,
            })?;
        let mut out = Storage::uninit(len, dtype, ls.device())?;
        let lr = ls.read(name)?;
        let at = logits.1;
        let logits = match (lr.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => LogitsMem::Host(CeLogits::Separate(a, at, o)),
            (Mem::Cuda(a), MemMut::Cuda(o)) => LogitsMem::Cuda(CeLogits::Separate(a, at, o)),
            _ => return Err(mixed(name)),
        };
        run_backward(name, logits, dtype, shape, reduction, targets, lse, dloss)?;
        Ok(out)
    }
}

impl Storage {
    /// [`Storage::cross_entropy_backward`] writing the gradient over the logits themselves
    /// (`self` from `logits_start`, rows `shape.stride` apart; llm.c's trick when the logits
    /// are not needed again): no second logits-sized buffer. The caller must own the logits
    /// (nothing else reads them afterwards); the write takes the storage's exclusive lock.
    #[track_caller]
    pub fn cross_entropy_backward_in_place(
        &self,
        shape: &ClassifierShape,
        reduction: Reduction,
        logits_start: usize,
        targets: (&Storage, usize),
        lse: &Storage,
        dloss: &Storage,
    ) -> Result<()> {
        let name = "cross_entropy_backward";
        let dtype = self.dtype;
        check_backward(
            name,
            shape,
            reduction,
            (self, logits_start),
            targets,
            lse,
            dloss,
        )?;
        self.with_exclusive_reading(name, &[targets.0, lse, dloss], |me| {
            let logits = match me.mem_mut(name)? {
                MemMut::Host(a) => LogitsMem::Host(CeLogits::InPlace(a, logits_start)),
                MemMut::Cuda(a) => LogitsMem::Cuda(CeLogits::InPlace(a, logits_start)),
            };
            run_backward(name, logits, dtype, shape, reduction, targets, lse, dloss)
        })
    }
}

/// The backward's operands: float logits holding `shape`'s rows from their element, the
/// targets, and `lse` and `dloss` of the accumulator dtype on the logits' device.
fn check_backward(
    name: &'static str,
    shape: &ClassifierShape,
    reduction: Reduction,
    logits: (&Storage, usize),
    targets: (&Storage, usize),
    lse: &Storage,
    dloss: &Storage,
) -> Result<()> {
    let ls = logits.0;
    check_float_only(name, true, ls.dtype)?;
    ls.check_range(name, logits.1, shape.span_len(shape.stride)?)?;
    check_targets(name, ls, shape, targets)?;
    for (s, len) in [(lse, shape.rows), (dloss, reduction.dloss_len(shape.rows))] {
        s.expect_dtype(name, Storage::fused_acc_dtype(ls.dtype))?;
        s.expect_device(name, ls.device())?;
        s.check_range(name, 0, len)?;
    }
    Ok(())
}

/// The backward's logits, on the host or a device.
enum LogitsMem<'a> {
    Host(CeLogits<'a, [u8]>),
    Cuda(CeLogits<'a, crate::cuda::CudaMem>),
}

/// Runs the backward on `logits` with the other operands read where they live, and a status
/// word set to -1 on the logits' device.
#[allow(clippy::too_many_arguments)]
fn run_backward(
    name: &'static str,
    logits: LogitsMem<'_>,
    dtype: DType,
    shape: &ClassifierShape,
    reduction: Reduction,
    targets: (&Storage, usize),
    lse: &Storage,
    dloss: &Storage,
) -> Result<()> {
    let mut status = Storage::full::<i64>(1, -1, lse.device())?;
    let (tr, er, dr) = (targets.0.read(name)?, lse.read(name)?, dloss.read(name)?);
    match (logits, tr.mem(), er.mem(), dr.mem(), status.mem_mut(name)?) {
        (LogitsMem::Host(l), Mem::Host(t), Mem::Host(e), Mem::Host(d), MemMut::Host(s)) => {
            <[u8]>::cross_entropy_backward(l, dtype, shape, reduction, (t, targets.1), e, d, s)
        }
        (LogitsMem::Cuda(l), Mem::Cuda(t), Mem::Cuda(e), Mem::Cuda(d), MemMut::Cuda(s)) => {
            crate::cuda::CudaMem::cross_entropy_backward(
                l,
                dtype,
                shape,
                reduction,
                (t, targets.1),
                e,
                d,
                s,
            )
        }
        _ => Err(mixed(name)),
    }
}

/// The targets: int64 on the logits' device, `rows` values from their element.
fn check_targets(
    name: &'static str,
    logits: &Storage,
    shape: &ClassifierShape,
    targets: (&Storage, usize),
) -> Result<()> {
    targets.0.expect_dtype(name, DType::I64)?;
    targets.0.expect_device(name, logits.device())?;
    targets.0.check_range(name, targets.1, shape.rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    /// The in-place backward writes, over the logits, the bytes the separate one returns:
    /// every reduction, an ignored row, f32 and bf16, rows apart by more than a row.
    #[test]
    fn in_place_backward_equals_the_separate_one() {
        for dtype in [DType::F32, DType::BF16] {
            for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
                let (rows, classes, stride) = (5, 7, 9);
                let values: Vec<f32> = (0..rows * stride)
                    .map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.37)
                    .collect();
                let logits = Storage::from_slice(&values, Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let shape = ClassifierShape {
                    rows,
                    classes,
                    stride,
                    ignore_index: -100,
                };
                let t = Storage::from_slice(&[3i64, -100, 0, 6, 2], Device::Cpu).unwrap();
                let (_, lse) =
                    Storage::cross_entropy(&shape, reduction, (&logits, 0), (&t, 0)).unwrap();
                let dl: Vec<f32> = (0..reduction.dloss_len(rows))
                    .map(|i| 0.5 + i as f32)
                    .collect();
                let dloss = Storage::from_slice(&dl, Device::Cpu).unwrap();
                let want = Storage::cross_entropy_backward(
                    &shape,
                    reduction,
                    (&logits, 0),
                    (&t, 0),
                    &lse,
                    &dloss,
                )
                .unwrap()
                .to_bytes()
                .unwrap();
                logits
                    .cross_entropy_backward_in_place(&shape, reduction, 0, (&t, 0), &lse, &dloss)
                    .unwrap();
                let got = logits.to_bytes().unwrap();
                let e = dtype.size();
                for r in 0..rows {
                    let (row, wrow) = (r * stride * e, r * classes * e);
                    assert_eq!(
                        got[row..row + classes * e],
                        want[wrow..wrow + classes * e],
                        "{dtype} {reduction:?} row {r}"
                    );
                }
            }
        }
    }
}
