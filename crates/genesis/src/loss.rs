//! [`Tensor::cross_entropy`] (PyTorch's `F.cross_entropy` of `[N, C]` logits against class
//! indices): on CUDA one fused kernel forward and one backward (llm.c's classifier: the
//! softmax of the logits is never stored, half-precision logits are read as they are), the
//! composed `log_softmax` and gather otherwise.

use genesis_kernels::classifier::{ClassifierShape, Reduction as Kind};
use genesis_storage::Storage;

use crate::autograd::Saved;
use crate::{DType, Device, Error, Result, Tensor};

/// How a loss reduces its per-element values (PyTorch's `reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean (over the elements that count: not ignored).
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: the per-element losses.
    None,
}

impl Reduction {
    fn kind(self) -> Kind {
        match self {
            Reduction::Mean => Kind::Mean,
            Reduction::Sum => Kind::Sum,
            Reduction::None => Kind::None,
        }
    }
}

const OP: &str = "cross_entropy";

impl Tensor {
    /// The cross entropy of logits `self` (`[N, C]`) against int64 class indices `target`
    /// (`[N]`), PyTorch's `F.cross_entropy(logits, target, ignore_index=..., reduction=...)`:
    /// `logsumexp(row) - row[target]`, rows whose target is `ignore_index` counting nothing
    /// (nor towards the mean's count). Float32 logits, or float16/bfloat16 ones under
    /// [`autocast`](crate::autograd::autocast) (PyTorch computes the loss in float32 there),
    /// on CUDA take one fused kernel each way, whose backward writes the logits' gradient
    /// without storing their softmax; the loss is then float32. A target outside `0..C`
    /// other than `ignore_index` is an index error. On CUDA the kernel checks the targets and
    /// the host reads its verdict back (one synchronisation), except for targets whose values
    /// are known to be in range without reading them: copied from host memory (`from_slice`,
    /// `to`) or drawn by `randint`, and not written since
    /// (`genesis_storage::Storage::known_bounds`), as a training loop's batches are.
    ///
    /// ```
    /// use genesis::{Device, Reduction, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let logits = Tensor::from_slice(&[2.0f32, 0.0, 0.0, 1.0], &[2, 2], Device::Cpu)?;
    /// let target = Tensor::from_slice(&[0i64, 1], &[2], Device::Cpu)?;
    /// let loss = logits.cross_entropy(&target, None, Reduction::Mean)?;
    /// assert!((loss.item::<f32>()? - 0.2201).abs() < 1e-4);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn cross_entropy(
        &self,
        target: &Tensor,
        ignore_index: Option<i64>,
        reduction: Reduction,
    ) -> Result<Tensor> {
        let bad = |reason: String| Error::InvalidArgument { op: OP, reason };
        if self.dim() != 2 || self.shape()[1] == 0 {
            return Err(bad(format!(
                "expects logits [N, C] with C > 0, got {:?}",
                self.shape()
            )));
        }
        if target.dtype() != DType::I64 {
            return Err(bad(format!(
                "expected class indices of dtype int64, got {}",
                target.dtype()
            )));
        }
        if target.shape() != [self.shape()[0]] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: target.shape().to_vec(),
            });
        }
        if let Some(y) = self.cross_entropy_fused(target, ignore_index, reduction)? {
            return Ok(y);
        }
        let logits = match crate::autograd::autocast_up(self)? {
            Some(up) => up,
            None => self.clone(),
        };
        let logp = logits.log_softmax(1)?;
        let (safe, ignored) = match ignore_index {
            Some(ig) => {
                let ignored = target.eq_scalar(ig)?;
                (Tensor::where_cond(&ignored, 0i64, target)?, Some(ignored))
            }
            None => (target.clone(), None),
        };
        let picked = logp.gather(1, &safe.unsqueeze(1)?)?.squeeze(1)?.neg()?;
        // An ignored row's loss is selected away (not multiplied by 0), so that its gradient
        // is exactly 0 even when the mean's count is 0 (PyTorch's: the loss NaN, the gradient
        // 0).
        let (per, mask) = match &ignored {
            Some(i) => (
                Tensor::where_cond(i, 0.0, &picked)?,
                Some(i.eq_scalar(false)?.to_dtype(logp.dtype())?),
            ),
            None => (picked, None),
        };
        match reduction {
            Reduction::None => Ok(per),
            Reduction::Sum => per.sum(),
            Reduction::Mean => match mask {
                Some(m) => per.sum()?.div(&m.sum()?),
                None => per.mean(),
            },
        }
    }

    /// The fused path of [`Tensor::cross_entropy`], or `None` when it does not apply.
    fn cross_entropy_fused(
        &self,
        target: &Tensor,
        ignore_index: Option<i64>,
        reduction: Reduction,
    ) -> Result<Option<Tensor>> {
        let dtype = self.dtype();
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let strides = self.layout().strides();
        let (n, c) = (self.shape()[0], self.shape()[1]);
        let row_stride = if n > 1 { strides[0] } else { c as isize };
        let suits = matches!(self.device(), Device::Cuda(_))
            && (dtype == DType::F32 || (half && crate::autograd::autocast_dtype().is_some()))
            && target.device() == self.device()
            && (strides[1] == 1 || c == 1)
            && row_stride >= c as isize;
        if !suits {
            return Ok(None);
        }
        let shape = ClassifierShape {
            rows: n,
            classes: c,
            stride: row_stride as usize,
            // No ignored class: a value no target in range can hold.
            ignore_index: ignore_index.unwrap_or(i64::MIN),
        };
        let target = target.contiguous()?;
        let kind = reduction.kind();
        let at = |t: &Tensor| (t.view.storage().clone(), t.layout().offset());
        let lse_cell = std::cell::RefCell::new(None);
        let out_shape: Vec<usize> = if kind == Kind::None { vec![n] } else { vec![] };
        let y = crate::autograd::op(
            OP,
            &[self],
            || {
                let (l, t) = (at(self), at(&target));
                let (loss, lse) = Storage::cross_entropy(&shape, kind, (&l.0, l.1), (&t.0, t.1))?;
                *lse_cell.borrow_mut() = Some(lse);
                Tensor::from_storage(loss, &out_shape)
            },
            |_| {
                let lse = lse_cell.borrow_mut().take().expect("set by the forward");
                let logits = Saved::new(OP, self);
                let target = target.clone();
                Box::new(move |g, _| {
                    let logits = logits.get()?;
                    // The logits seen by no one but this backward, which runs once (its saved
                    // handle and `logits` are the storage's only owners): the gradient takes
                    // their place (llm.c's trick), sparing a second logits-sized buffer.
                    let alone = crate::autograd::backward_runs_once()
                        && std::sync::Arc::strong_count(logits.view.storage()) == 2
                        && logits.is_contiguous()
                        && logits.view.storage().len() == n * c;
                    let acc = Storage::fused_acc_dtype(logits.dtype());
                    // A new contiguous tensor: the kernels read `dloss` from its storage's start.
                    let g = g.to_dtype(acc)?.add(0.0)?;
                    let (l, t, d) = (at(&logits), at(&target), at(&g));
                    if alone {
                        l.0.cross_entropy_backward_in_place(
                            &shape,
                            kind,
                            l.1,
                            (&t.0, t.1),
                            &lse,
                            &d.0,
                        )?;
                        return Ok(vec![Some(logits)]);
                    }
                    let dx = Storage::cross_entropy_backward(
                        &shape,
                        kind,
                        (&l.0, l.1),
                        (&t.0, t.1),
                        &lse,
                        &d.0,
                    )?;
                    Ok(vec![Some(Tensor::from_storage(dx, &[n, c])?)])
                })
            },
        )?;
        Ok(Some(y))
    }
}
