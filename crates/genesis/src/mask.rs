//! Boolean masks on any device: `masked_select` (`x[mask]`) and `masked_fill`.

use crate::args::checked_scalar;
use crate::tensor::{broadcast_shape, numel_of};
use crate::{DType, Error, Result, Scalar, Tensor};

fn check_mask(op: &'static str, x: &Tensor, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("the mask must be a bool tensor, not {}", mask.dtype()),
        });
    }
    if mask.device() != x.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: x.device(),
            rhs: mask.device(),
        });
    }
    Ok(())
}

/// The checks of a fill of `x` (in place or not): a bool mask on `x`'s device that broadcasts
/// to `x`'s shape without enlarging it, and a value the dtype represents (returned, checked).
fn check_fill(x: &Tensor, mask: &Tensor, value: impl Scalar) -> Result<genesis_storage::Storage> {
    let op = "masked_fill";
    check_mask(op, x, mask)?;
    let shape = broadcast_shape(op, x.shape(), mask.shape())?;
    if shape != x.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: mask.shape().to_vec(),
        });
    }
    checked_scalar(op, x.dtype(), value.value())
}

impl Tensor {
    /// The elements where `mask` is true, in row-major order, as a 1-D tensor (PyTorch's
    /// `masked_select`, and `x[mask]` for a mask of `x`'s shape). `self` and `mask` (a `Bool`
    /// tensor on the same device) broadcast together. On the GPU the mask stays on the device:
    /// a count, a scan and one compaction pass that keeps the order; the host reads the count
    /// (one synchronisation) to size the result.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[3.0f32, -1.0, 4.0, -1.5, 5.0], &[5], Device::Cpu)?;
    /// let positive = x.masked_select(&x.gt_scalar(0.0)?)?;
    /// assert_eq!(positive.to_vec::<f32>()?, [3.0, 4.0, 5.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn masked_select(&self, mask: &Tensor) -> Result<Tensor> {
        crate::autograd::op(
            "masked_select",
            &[self],
            || self.masked_select_raw(mask),
            |_| {
                let m = mask.detach();
                let (shape, dtype) = (self.shape().to_vec(), self.dtype());
                Box::new(move |g, _| {
                    // The selected elements' gradients go back to the mask's positions (of the
                    // broadcast shape, then summed down to the input's).
                    let full = crate::broadcast_shape("masked_select", &shape, m.shape())?;
                    let m = m.expand(full.iter().map(|&n| n as isize).collect::<Vec<_>>())?;
                    let z = Tensor::zeros(&full[..], dtype, g.device())?;
                    z.index_put_(&[crate::IndexArg::index_item(&m)], g, false)?;
                    Ok(vec![Some(crate::autograd::sum_to(&z, &shape)?)])
                })
            },
        )
    }

    fn masked_select_raw(&self, mask: &Tensor) -> Result<Tensor> {
        let op = "masked_select";
        check_mask(op, self, mask)?;
        let shape = broadcast_shape(op, self.shape(), mask.shape())?;
        let (x, x0) = self.dense_operand(&shape)?;
        let (m, m0) = mask.dense_operand(&shape)?;
        let n = numel_of(op, &shape)?;
        let out = x.masked_select_at(x0, &m, m0, n)?;
        let len = out.len();
        Tensor::from_storage(out, &[len])
    }

    /// In place: `self[mask] = value`, `mask` (`Bool`, same device) broadcast to `self`'s
    /// shape; `value` must be representable in the dtype. `self` may be any tensor, a
    /// strided view included: the write goes to its storage and every tensor sharing it sees
    /// it (PyTorch's semantics). Allocates nothing when `self` is contiguous and `mask` has
    /// its shape and is contiguous; a strided `self` is filled through a temporary. Bumps
    /// [`Tensor::version`].
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[3.0f32, -1.0, 4.0, -1.5], &[2, 2], Device::Cpu)?;
    /// let y = x.contiguous()?; // x is contiguous: y is x (as in PyTorch)
    /// y.masked_fill_(&y.lt_scalar(0.0)?, 0.0)?;
    /// assert_eq!(x.to_vec::<f32>()?, [3.0, 0.0, 4.0, 0.0]); // seen through x
    /// x.t()?.masked_fill_(&Tensor::from_bools(&[true, false], &[2], Device::Cpu)?, 9.0)?;
    /// assert_eq!(x.to_vec::<f32>()?, [9.0, 9.0, 4.0, 0.0]); // column 0 of x.t() is row 0 of x
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn masked_fill_(&self, mask: &Tensor, value: impl Scalar) -> Result<()> {
        if self.in_place_recorded("masked_fill_", &[], |x| x.masked_fill(mask, value))? {
            return Ok(());
        }
        let bytes = check_fill(self, mask, value)?.to_bytes()?;
        let (m, m0) = mask.dense_operand(self.shape())?;
        self.view
            .storage()
            .masked_fill_shared(self.layout(), &m, m0, &bytes)?;
        Ok(())
    }

    /// A copy of `self` with `value` where `mask` is true (see [`Tensor::masked_fill_`]). A
    /// float tensor is filled in one pass that reads it and the mask in place (a broadcast
    /// mask at stride 0, never made dense).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: impl Scalar) -> Result<Tensor> {
        crate::autograd::op(
            "masked_fill",
            &[self],
            || {
                if self.dtype().is_float() {
                    // One pass of `where` reading `self` and the mask in place (a broadcast
                    // mask at stride 0): no copy of `self` to fill and no mask of its shape.
                    // A number takes a float tensor's dtype, so the result keeps it.
                    check_fill(self, mask, value)?;
                    return crate::no_grad(|| Tensor::where_cond(mask, value, self));
                }
                let out = Tensor::from_storage(self.view.contiguous()?, self.shape())?;
                out.masked_fill_(mask, value)?;
                Ok(out)
            },
            |_| {
                // Filled positions take no gradient.
                let m = mask.detach();
                Box::new(move |g, _| Ok(vec![Some(Tensor::where_cond(&m, 0.0, g)?)]))
            },
        )
    }
}
