//! The activations of `torch.nn.functional` beyond the unary table's: `leaky_relu`, `elu`,
//! `selu`, `celu`, `hardtanh`, `relu6`, `hardsigmoid`, `hardswish` and `mish`.
//!
//! Each is one recorded op built from the facade's ops: the forward is PyTorch's formula,
//! the backward PyTorch's derivative formula, including at the points where the two sides'
//! conditions differ (`hardtanh`'s gradient is 0 at its bounds, `hardswish`'s at -3 is
//! -0.5). Float16 and bfloat16 compute in float32 and round once, as PyTorch's kernels do.

use crate::autograd::Saved;
use crate::compose::bad;
use crate::{Result, Tensor};

/// SELU's `alpha` and `scale` (PyTorch's constants).
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_SCALE: f64 = 1.050_700_987_355_480_5;

impl Tensor {
    /// One activation: `forward` and `backward` (of the input and the output's gradient, in
    /// the computing precision) over `self` (floating point).
    fn activation(
        &self,
        op: &'static str,
        forward: impl Fn(&Tensor) -> Result<Tensor>,
        backward: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(bad(
                op,
                format!("takes floating-point input, got {}", self.dtype()),
            ));
        }
        let dtype = self.dtype();
        crate::autograd::op1(
            op,
            self,
            || forward(&self.in_opmath()?)?.to_dtype(dtype),
            || {
                let xs = Saved::new(op, self);
                move |g: &Tensor| {
                    backward(&xs.get()?.in_opmath()?, &g.in_opmath()?)?.to_dtype(dtype)
                }
            },
        )
    }

    /// `x` where `x > 0`, else `negative_slope · x` (PyTorch's `F.leaky_relu`).
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[-2.0f32, 0.0, 3.0], [3], Device::Cpu)?;
    /// assert_eq!(x.leaky_relu(0.1)?.to_vec::<f32>()?, [-0.2, 0.0, 3.0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn leaky_relu(&self, negative_slope: f64) -> Result<Tensor> {
        let s = negative_slope;
        self.activation(
            "leaky_relu",
            move |x| Tensor::where_cond(&x.gt_scalar(0.0)?, x, &x.mul(s)?),
            move |x, g| Tensor::where_cond(&x.gt_scalar(0.0)?, g, &g.mul(s)?),
        )
    }

    /// PyTorch's ELU family: `scale · x` where `x > 0`, else
    /// `scale · alpha · (exp(input_scale · x) − 1)`.
    fn elu_family(&self, op: &'static str, alpha: f64, scale: f64, input: f64) -> Result<Tensor> {
        self.activation(
            op,
            move |x| {
                let neg = x.mul(input)?.expm1()?.mul(alpha * scale)?;
                Tensor::where_cond(&x.gt_scalar(0.0)?, &x.mul(scale)?, &neg)
            },
            move |x, g| {
                let neg = x.mul(input)?.exp()?.mul(input * alpha * scale)?.mul(g)?;
                Tensor::where_cond(&x.le_scalar(0.0)?, &neg, &g.mul(scale)?)
            },
        )
    }

    /// `x` where `x > 0`, else `alpha · (exp(x) − 1)` (PyTorch's `F.elu`).
    pub fn elu(&self, alpha: f64) -> Result<Tensor> {
        self.elu_family("elu", alpha, 1.0, 1.0)
    }

    /// PyTorch's `F.selu`: ELU with PyTorch's `alpha` ≈ 1.6733 and `scale` ≈ 1.0507.
    pub fn selu(&self) -> Result<Tensor> {
        self.elu_family("selu", SELU_ALPHA, SELU_SCALE, 1.0)
    }

    /// `x` where `x > 0`, else `alpha · (exp(x / alpha) − 1)` (PyTorch's `F.celu`); `alpha`
    /// must not be 0.
    pub fn celu(&self, alpha: f64) -> Result<Tensor> {
        if alpha == 0.0 {
            return Err(bad("celu", "ZeroDivisionError: alpha must not be 0"));
        }
        self.elu_family("celu", alpha, 1.0, 1.0 / alpha)
    }

    /// `x` clamped to `[min_val, max_val]` (PyTorch's `F.hardtanh`), its gradient 1 strictly
    /// inside and 0 at and beyond the bounds; `min_val` at most `max_val`.
    pub fn hardtanh(&self, min_val: f64, max_val: f64) -> Result<Tensor> {
        self.hardtanh_op("hardtanh", min_val, max_val)
    }

    /// `min(max(x, 0), 6)` (PyTorch's `F.relu6`): [`Tensor::hardtanh`] on `[0, 6]`.
    pub fn relu6(&self) -> Result<Tensor> {
        self.hardtanh_op("relu6", 0.0, 6.0)
    }

    fn hardtanh_op(&self, op: &'static str, lo: f64, hi: f64) -> Result<Tensor> {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(bad(
                op,
                format!("min_val ({lo}) cannot be greater than max_val ({hi})"),
            ));
        }
        self.activation(
            op,
            move |x| x.clamp(Some(lo), Some(hi)),
            move |x, g| {
                let inside = x.gt_scalar(lo)?.logical_and(&x.lt_scalar(hi)?)?;
                Tensor::where_cond(&inside, g, 0.0)
            },
        )
    }

    /// `0` for `x ≤ −3`, `1` for `x ≥ 3`, else `x / 6 + 1/2` (PyTorch's `F.hardsigmoid`).
    pub fn hardsigmoid(&self) -> Result<Tensor> {
        self.activation(
            "hardsigmoid",
            |x| x.div(6.0)?.add(0.5)?.clamp(Some(0.0), Some(1.0)),
            |x, g| {
                let inside = x.gt_scalar(-3.0)?.logical_and(&x.lt_scalar(3.0)?)?;
                Tensor::where_cond(&inside, &g.div(6.0)?, 0.0)
            },
        )
    }

    /// `0` for `x ≤ −3`, `x` for `x ≥ 3`, else `x (x + 3) / 6` (PyTorch's `F.hardswish`),
    /// with PyTorch's gradient: 0 below −3, `x / 3 + 1/2` on `[−3, 3]`, 1 above.
    pub fn hardswish(&self) -> Result<Tensor> {
        self.activation(
            "hardswish",
            |x| {
                let mid = x.mul(&x.add(3.0)?)?.div(6.0)?;
                let upper = Tensor::where_cond(&x.ge_scalar(3.0)?, x, &mid)?;
                Tensor::where_cond(&x.le_scalar(-3.0)?, 0.0, &upper)
            },
            |x, g| {
                let mid = x.div(3.0)?.add(0.5)?.mul(g)?;
                let upper = Tensor::where_cond(&x.le_scalar(3.0)?, &mid, g)?;
                Tensor::where_cond(&x.lt_scalar(-3.0)?, 0.0, &upper)
            },
        )
    }

    /// `x · tanh(ln(1 + exp(x)))` (PyTorch's `F.mish`).
    pub fn mish(&self) -> Result<Tensor> {
        self.activation(
            "mish",
            |x| x.mul(&x.exp()?.log1p()?.tanh()?),
            |x, g| {
                let t = x.exp()?.log1p()?.tanh()?;
                let s = x.sigmoid()?;
                // tanh(sp) + x · σ(x) · (1 − tanh²(sp))
                let d = t.add(&x.mul(&s)?.mul(&t.square()?.neg()?.add(1.0)?)?)?;
                g.mul(&d)
            },
        )
    }
}
