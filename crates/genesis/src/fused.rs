//! Fused optimiser steps over many tensors at once: [`adam_`] (PyTorch's `torch._fused_adam_`
//! and `_fused_adamw_`) and [`clip_grad_norm_`] (PyTorch's `clip_grad_norm_` with its
//! multi-tensor norm). On CUDA one launch covers up to 32 tensors of a dtype, instead of
//! several launches per tensor; on the CPU the kernels' twins give the same bits.
//!
//! They write tensors in place: call them under [`no_grad`](crate::no_grad) for tensors that
//! require grad, as an optimiser does (`genesis-nn`'s optimisers use them).

use genesis_storage::{Storage, StorageRange};

use crate::autograd::check_in_place_operands;
use crate::{DType, Error, Result, Tensor};

pub use genesis_storage::AdamStep;

/// The storage range of a contiguous tensor.
fn range<'a>(op: &'static str, t: &'a Tensor) -> Result<StorageRange<'a>> {
    if !t.is_contiguous() {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "tensors must be contiguous (one has shape {:?} and strides {:?})",
                t.shape(),
                t.strides()
            ),
        });
    }
    Ok(StorageRange::new(
        t.view.storage(),
        t.first_element(),
        t.numel(),
    ))
}

/// One Adam or AdamW step (`step.decoupled`) of every parameter in place: `params[i]`, its
/// gradient `grads[i]` and its moments `exp_avgs[i]`, `exp_avg_sqs[i]` (updated), all four of
/// one shape and floating dtype (f32, f16 and bf16 computed in f32, f64 in f64) and
/// contiguous, every tensor on one device. The update is PyTorch's fused Adam (see
/// [`genesis_kernels::optim`](genesis_storage::AdamStep)); `step.step` is the step number
/// from 1. Nothing is written on error: lists of different lengths, mismatched shapes,
/// dtypes or devices, a tensor written twice (two views of one memory), bad
/// hyper-parameters, or, with grad mode on, a tensor that requires grad.
pub fn adam_(
    params: &[Tensor],
    grads: &[Tensor],
    exp_avgs: &[Tensor],
    exp_avg_sqs: &[Tensor],
    step: &AdamStep,
) -> Result<()> {
    let op = "adam_";
    for (what, list) in [
        ("grads", grads),
        ("exp_avgs", exp_avgs),
        ("exp_avg_sqs", exp_avg_sqs),
    ] {
        if list.len() != params.len() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{} params but {} {what}; one of each per parameter",
                    params.len(),
                    list.len()
                ),
            });
        }
    }
    let mut ranges = Vec::with_capacity(params.len());
    for i in 0..params.len() {
        let p = &params[i];
        for t in [&grads[i], &exp_avgs[i], &exp_avg_sqs[i]] {
            if t.shape() != p.shape() {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: p.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        for t in [p, &exp_avgs[i], &exp_avg_sqs[i]] {
            t.check_in_place(op)?;
        }
        ranges.push([
            range(op, p)?,
            range(op, &grads[i])?,
            range(op, &exp_avgs[i])?,
            range(op, &exp_avg_sqs[i])?,
        ]);
    }
    check_in_place_operands(op, &grads.iter().collect::<Vec<_>>())?;
    Storage::adam_step(step, &ranges)?;
    Ok(())
}

/// Scales `grads` in place so that their global 2-norm is at most `max_norm` (PyTorch's
/// `torch.nn.utils.clip_grad_norm_`: every gradient times `min(max_norm / (norm + 1e-6), 1)`)
/// and returns the norm before clipping, a 0-d tensor on the gradients' device (f64 for f64
/// gradients, else f32), without synchronising; `None` for no gradients. The gradients
/// (contiguous, floating, one device) may differ in dtype; each one's squares are added in
/// f32 (f64 for f64) and the partial sums in f64.
pub fn clip_grad_norm_(grads: &[Tensor], max_norm: f64) -> Result<Option<Tensor>> {
    let op = "clip_grad_norm_";
    if grads.is_empty() {
        return Ok(None);
    }
    let mut ranges = Vec::with_capacity(grads.len());
    for g in grads {
        g.check_in_place(op)?;
        ranges.push(range(op, g)?);
    }
    let out = Storage::clip_grad_norm(&ranges, max_norm)?;
    let norm = Tensor::from_storage(out, &[2])?
        .narrow(0, 0, 1)?
        .reshape(&[] as &[usize])?;
    let dtype = if grads.iter().all(|g| g.dtype() == DType::F64) {
        DType::F64
    } else {
        DType::F32
    };
    Ok(Some(norm.to_dtype(dtype)?))
}
