//! Losses (PyTorch's `nn.functional`): [`cross_entropy`] (class indices with `ignore_index`
//! and label smoothing, or class probabilities), [`nll_loss`], [`mse_loss`],
//! [`binary_cross_entropy_with_logits`]. Each is built from recorded ops, so its gradient
//! comes from autograd.

use genesis::{DType, Error, Result, Tensor};

pub use genesis::Reduction;

/// What a cross entropy compares the logits with.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// Class indices (int64), the logits' shape without the class dimension.
    Indices(&'a Tensor),
    /// Class probabilities, the logits' shape.
    Probabilities(&'a Tensor),
}

/// The options of [`cross_entropy_with`] (PyTorch's keyword arguments, with its defaults:
/// `ignore_index` -100, no smoothing, the mean).
#[derive(Debug, Clone, Copy)]
pub struct CrossEntropy {
    /// Targets with this class index contribute nothing (nor to the mean's count); `None`:
    /// every target counts (and one outside `[0, C)` is an error). PyTorch's default, -100,
    /// is the label of padding in most datasets.
    pub ignore_index: Option<i64>,
    /// `ε` in `[0, 1]`: the target becomes `(1 - ε)` on the class plus `ε / C` everywhere.
    pub label_smoothing: f64,
    /// The reduction.
    pub reduction: Reduction,
}

impl Default for CrossEntropy {
    fn default() -> CrossEntropy {
        CrossEntropy {
            ignore_index: Some(DEFAULT_IGNORE_INDEX),
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

/// PyTorch's default `ignore_index` of `cross_entropy` and `nll_loss`.
pub const DEFAULT_IGNORE_INDEX: i64 = -100;

/// The mean cross entropy of `logits` (`[N, C]`, `[C]`, or `[N, C, d...]`: classes in
/// dimension 1) against int64 class indices `target` (PyTorch's `F.cross_entropy` with its
/// defaults: targets of -100 are ignored).
pub fn cross_entropy(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    cross_entropy_with(logits, Target::Indices(target), CrossEntropy::default())
}

/// Batched logits and targets: a `[C]` input becomes `[1, C]` (its target `[1]`).
fn batched<'a>(
    logits: &Tensor,
    target: Target<'a>,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    let lone = logits.dim() == 1;
    let logits = if lone {
        logits.unsqueeze(0)?
    } else {
        logits.clone()
    };
    match target {
        Target::Indices(t) => {
            let t = if lone { t.reshape([1])? } else { t.clone() };
            Ok((logits, Some(t), None))
        }
        Target::Probabilities(p) => {
            let p = if lone { p.unsqueeze(0)? } else { p.clone() };
            Ok((logits, None, Some(p)))
        }
    }
}

/// [`cross_entropy`] with PyTorch's options: ignored indices, label smoothing, probability
/// targets, the reduction.
pub fn cross_entropy_with(
    logits: &Tensor,
    target: Target<'_>,
    opts: CrossEntropy,
) -> Result<Tensor> {
    let eps = opts.label_smoothing;
    if !(0.0..=1.0).contains(&eps) {
        return Err(Error::InvalidArgument {
            op: "cross_entropy",
            reason: format!("label_smoothing must be between 0.0 and 1.0. Got: {eps}"),
        });
    }
    if logits.dim() == 0 {
        return Err(Error::InvalidArgument {
            op: "cross_entropy",
            reason: "the input must have a class dimension".into(),
        });
    }
    let lone = logits.dim() == 1;
    let per = cross_entropy_batched(logits, target, opts)?;
    unbatched(per, lone, opts.reduction)
}

/// A `[C]` input's unreduced loss as PyTorch gives it: a 0-d tensor, not `[1]`.
fn unbatched(out: Tensor, lone: bool, reduction: Reduction) -> Result<Tensor> {
    if lone && reduction == Reduction::None {
        out.reshape([0usize; 0])
    } else {
        Ok(out)
    }
}

/// [`cross_entropy_with`] on the input made batched (`[C]` as `[1, C]`).
fn cross_entropy_batched(
    logits: &Tensor,
    target: Target<'_>,
    opts: CrossEntropy,
) -> Result<Tensor> {
    let eps = opts.label_smoothing;
    let (logits, indices, probs) = batched(logits, target)?;
    if let (Some(t), None, true) = (&indices, &probs, eps == 0.0)
        && logits.dim() == 2
    {
        // The facade's op: one fused kernel each way where it applies (CUDA), the same
        // composed ops as below elsewhere.
        return logits.cross_entropy(t, opts.ignore_index, opts.reduction);
    }
    let logp = logits.log_softmax(1)?;
    let classes = logits.shape()[1] as f64;
    if let Some(p) = probs {
        if p.shape() != logits.shape() {
            return Err(Error::ShapeMismatch {
                op: "cross_entropy",
                lhs: logits.shape().to_vec(),
                rhs: p.shape().to_vec(),
            });
        }
        let p = if eps > 0.0 {
            p.mul(1.0 - eps)?.add(eps / classes)?
        } else {
            p
        };
        let per = logp.mul(&p)?.sum_dim([1], false)?.neg()?;
        return reduce(per, None, opts.reduction);
    }
    let t = indices.expect("indices");
    let (mut per, ignored) = nll_parts(&logp, &t, opts.ignore_index)?;
    if eps > 0.0 {
        let smooth = logp.mean_dim([1], false)?.neg()?;
        let smooth = match &ignored {
            Some(i) => Tensor::where_cond(i, 0.0, &smooth)?,
            None => smooth,
        };
        per = per.mul(1.0 - eps)?.add(&smooth.mul(eps)?)?;
    }
    reduce(per, ignored, opts.reduction)
}

/// The per-element negative log likelihood `-logp[target]` (0 where ignored, selected away so
/// that an ignored element's gradient is exactly 0, even when the mean's count is 0, as
/// PyTorch's) and, with `ignore_index`, the bool mask of the ignored elements.
fn nll_parts(
    logp: &Tensor,
    target: &Tensor,
    ignore_index: Option<i64>,
) -> Result<(Tensor, Option<Tensor>)> {
    if target.dtype() != DType::I64 {
        return Err(Error::InvalidArgument {
            op: "nll_loss",
            reason: format!(
                "expected class indices of dtype int64, got {}",
                target.dtype()
            ),
        });
    }
    if logp.dim() < 2 {
        // Callers batch a `[C]` input first; a 0-d one has no class dimension.
        return Err(Error::InvalidArgument {
            op: "nll_loss",
            reason: format!("Expected 1 or more dimensions (got {})", logp.dim()),
        });
    }
    let mut want = logp.shape().to_vec();
    want.remove(1);
    if target.shape() != want {
        return Err(Error::ShapeMismatch {
            op: "nll_loss",
            lhs: logp.shape().to_vec(),
            rhs: target.shape().to_vec(),
        });
    }
    let (safe, ignored) = match ignore_index {
        Some(ig) => {
            let ignored = target.eq_scalar(ig)?;
            (Tensor::where_cond(&ignored, 0i64, target)?, Some(ignored))
        }
        None => (target.clone(), None),
    };
    let picked = logp.gather(1, &safe.unsqueeze(1)?)?.squeeze(1)?.neg()?;
    let per = match &ignored {
        Some(i) => Tensor::where_cond(i, 0.0, &picked)?,
        None => picked,
    };
    Ok((per, ignored))
}

/// `per` reduced: the mean over the counted elements (all, or those not `ignored`: NaN when
/// none counts, as PyTorch's), the sum, or as is.
fn reduce(per: Tensor, ignored: Option<Tensor>, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(per),
        Reduction::Sum => per.sum(),
        Reduction::Mean => match ignored {
            Some(i) => per
                .sum()?
                .div(&i.logical_not()?.to_dtype(per.dtype())?.sum()?),
            None => per.mean(),
        },
    }
}

/// The negative log likelihood of log-probabilities `logp` (`[N, C]` or `[C]`, classes in
/// dimension 1) at int64 `target` (PyTorch's `F.nll_loss`; its default `ignore_index` is
/// `Some(DEFAULT_IGNORE_INDEX)`).
pub fn nll_loss(
    logp: &Tensor,
    target: &Tensor,
    ignore_index: Option<i64>,
    reduction: Reduction,
) -> Result<Tensor> {
    if logp.dim() == 0 {
        // PyTorch's `nll_loss_nd` check (a 0-d input has no class dimension).
        return Err(Error::InvalidArgument {
            op: "nll_loss",
            reason: "Expected 1 or more dimensions (got 0)".into(),
        });
    }
    let lone = logp.dim() == 1;
    let (logp, t, _) = batched(logp, Target::Indices(target))?;
    let (per, ignored) = nll_parts(&logp, &t.expect("indices"), ignore_index)?;
    unbatched(reduce(per, ignored, reduction)?, lone, reduction)
}

/// `(input - target)²`, reduced (PyTorch's `F.mse_loss`); the shapes broadcast.
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    reduce(input.sub(target)?.square()?, None, reduction)
}

/// `|input − target|`, reduced (PyTorch's `F.l1_loss`); the shapes broadcast.
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    reduce(input.sub(target)?.abs()?, None, reduction)
}

/// PyTorch's `F.smooth_l1_loss`: with `d = input − target`, `0.5 d² / beta` where
/// `|d| < beta`, else `|d| − 0.5 beta`; `beta` 0 is [`l1_loss`], a negative `beta` an error.
pub fn smooth_l1_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    if beta.is_nan() || beta < 0.0 {
        return Err(Error::InvalidArgument {
            op: "smooth_l1_loss",
            reason: format!(
                "smooth_l1_loss does not support negative values for beta (got {beta})"
            ),
        });
    }
    if beta == 0.0 {
        return l1_loss(input, target, reduction);
    }
    let d = input.sub(target)?;
    let a = d.abs()?;
    let per = Tensor::where_cond(
        &a.lt_scalar(beta)?,
        &d.square()?.mul(0.5 / beta)?,
        &a.sub(0.5 * beta)?,
    )?;
    reduce(per, None, reduction)
}

/// PyTorch's `F.huber_loss`: with `d = input − target`, `0.5 d²` where `|d| < delta`, else
/// `delta (|d| − 0.5 delta)`; `delta` must be positive.
pub fn huber_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    delta: f64,
) -> Result<Tensor> {
    if delta.is_nan() || delta <= 0.0 {
        return Err(Error::InvalidArgument {
            op: "huber_loss",
            reason: format!(
                "huber_loss does not support non-positive values for delta (got {delta})"
            ),
        });
    }
    let d = input.sub(target)?;
    let a = d.abs()?;
    let per = Tensor::where_cond(
        &a.lt_scalar(delta)?,
        &d.square()?.mul(0.5)?,
        &a.sub(0.5 * delta)?.mul(delta)?,
    )?;
    reduce(per, None, reduction)
}

/// The binary cross entropy of probabilities `input` against `target` of the same shape
/// (PyTorch's `F.binary_cross_entropy`): `−weight (t log p + (1 − t) log(1 − p))`, each log
/// at least −100, `weight` (optional) broadcast to the input. An input outside `[0, 1]` (or
/// NaN) is an error, found by reading a reduction back (a synchronisation on CUDA). The
/// gradients are PyTorch's: `weight (p − t) / max(p (1 − p), 1e-12)` for the input, and
/// `weight (log(1 − p) − log p)` (the clamped logs) for the target. For logits,
/// [`binary_cross_entropy_with_logits`] is the stable form.
pub fn binary_cross_entropy(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = "binary_cross_entropy";
    if input.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: input.shape().to_vec(),
            rhs: target.shape().to_vec(),
        });
    }
    let inside = genesis::no_grad(|| -> Result<bool> {
        input
            .ge_scalar(0.0)?
            .logical_and(&input.le_scalar(1.0)?)?
            .all()?
            .item::<bool>()
    })?;
    if !inside {
        return Err(Error::InvalidArgument {
            op,
            reason: "all elements of input should be between 0 and 1".into(),
        });
    }
    let (p, t) = (input.detach(), target.detach());
    let (log_p, log_q) = (
        p.log()?.clamp_min(-100.0)?,
        p.neg()?.log1p()?.clamp_min(-100.0)?,
    );
    // The value, and each gradient as the coefficient of a term that is zero in value.
    let value = t
        .mul(&log_p)?
        .add(&t.neg()?.add(1.0)?.mul(&log_q)?)?
        .neg()?;
    let mut per = value;
    if input.requires_grad() {
        let coef = p
            .sub(&t)?
            .div(&p.mul(&p.neg()?.add(1.0)?)?.clamp_min(1e-12)?)?;
        per = per.add(&input.sub(&p)?.mul(&coef)?)?;
    }
    if target.requires_grad() {
        per = per.add(&target.sub(&t)?.mul(&log_q.sub(&log_p)?)?)?;
    }
    if let Some(w) = weight {
        per = per.mul(w)?;
    }
    reduce(per, None, reduction)
}

/// The binary cross entropy of `logits` against probabilities `target` of the same shape
/// (PyTorch's `F.binary_cross_entropy_with_logits`), computed stably as `max(x, 0) - x t +
/// log(1 + exp(-|x|))`.
pub fn binary_cross_entropy_with_logits(
    logits: &Tensor,
    target: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    if logits.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op: "binary_cross_entropy_with_logits",
            lhs: logits.shape().to_vec(),
            rhs: target.shape().to_vec(),
        });
    }
    let per = logits
        .relu()?
        .sub(&logits.mul(target)?)?
        .add(&logits.abs()?.neg()?.exp()?.log1p()?)?;
    reduce(per, None, reduction)
}
