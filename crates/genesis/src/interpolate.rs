//! Resizing sequences and images, PyTorch's `F.interpolate` for inputs of one or two spatial
//! dimensions (`[N, C, L]`, `[N, C, H, W]`): nearest (PyTorch's `"nearest"` and
//! `"nearest-exact"`) and linear (`"linear"`, `"bilinear"`, with or without
//! `align_corners`).
//!
//! Each spatial dimension resizes on its own, the last first. Nearest selects source rows and
//! columns (`index_select`, whose gradient adds into them); linear selects each output's two
//! neighbours and weighs them, `λ0 x0 + λ1 x1`, so its gradient is two index-adds. Source
//! positions and weights follow PyTorch's arithmetic: a size given is the scale `in / out`, a
//! scale factor given is used as `1 / factor`, computed in float32 (float64 for float64
//! inputs) as PyTorch's kernels do; float16 and bfloat16 compute in float32 and round once.

use crate::compose::bad;
use crate::{DType, Result, Tensor};

/// How [`Tensor::interpolate`] computes an output element from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interpolation {
    /// The element at `⌊dst · scale⌋` (PyTorch's `"nearest"`).
    Nearest,
    /// The element at `⌊(dst + 0.5) · scale⌋` (PyTorch's `"nearest-exact"`).
    NearestExact,
    /// The two neighbours weighted by distance (PyTorch's `"linear"` and `"bilinear"`);
    /// `align_corners` maps the first and last elements of input and output onto each other.
    Linear {
        /// PyTorch's `align_corners`.
        align_corners: bool,
    },
}

/// The output size of an interpolation: given, or the input's times a factor.
#[derive(Clone, Copy, Debug)]
enum Target<'a> {
    Size(&'a [usize]),
    Scale(&'a [f64]),
}

impl Tensor {
    /// `self` (`[N, C, L]` or `[N, C, H, W]`, floating point) resized to `size` (one length
    /// a spatial dimension; PyTorch's `F.interpolate(x, size=..., mode=...)`).
    ///
    /// ```
    /// use genesis::{DType, Device, Interpolation, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[0.0f32, 10.0], [1, 1, 2], Device::Cpu)?;
    /// let n = x.interpolate(&[4], Interpolation::Nearest)?;
    /// assert_eq!(n.to_vec::<f32>()?, [0.0, 0.0, 10.0, 10.0]);
    /// let l = x.interpolate(&[4], Interpolation::Linear { align_corners: false })?;
    /// assert_eq!(l.to_vec::<f32>()?, [0.0, 2.5, 7.5, 10.0]);
    /// let a = x.interpolate(&[3], Interpolation::Linear { align_corners: true })?;
    /// assert_eq!(a.to_vec::<f32>()?, [0.0, 5.0, 10.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn interpolate(&self, size: &[usize], mode: Interpolation) -> Result<Tensor> {
        self.interpolate_to(Target::Size(size), mode)
    }

    /// `self` resized by `scale_factor` (one a spatial dimension, finite and positive): each
    /// output length is `⌊in · factor⌋`, and the source positions use `1 / factor` as the
    /// scale, as PyTorch's `F.interpolate(x, scale_factor=...)` does.
    #[track_caller]
    pub fn interpolate_scale(&self, scale_factor: &[f64], mode: Interpolation) -> Result<Tensor> {
        self.interpolate_to(Target::Scale(scale_factor), mode)
    }

    fn interpolate_to(&self, target: Target<'_>, mode: Interpolation) -> Result<Tensor> {
        let op = "interpolate";
        let rank = self.dim();
        if !(3..=4).contains(&rank) {
            return Err(bad(
                op,
                format!(
                    "expected a 3-d [N, C, L] or 4-d [N, C, H, W] input, got shape {:?}",
                    self.shape()
                ),
            ));
        }
        if !self.dtype().is_float() {
            return Err(bad(
                op,
                format!("takes floating-point input, got {}", self.dtype()),
            ));
        }
        let spatial = rank - 2;
        let given = match target {
            Target::Size(s) => s.len(),
            Target::Scale(s) => s.len(),
        };
        if given != spatial {
            return Err(bad(
                op,
                format!(
                    "an input of {spatial} spatial dimensions takes {spatial} sizes or scale factors, got {given}"
                ),
            ));
        }
        // Float16 and bfloat16 in float32, rounded once (PyTorch's accumulation type).
        let mut y = self.in_opmath()?;
        // The last dimension first: PyTorch's bilinear interpolates along the width, then
        // the height.
        for a in (0..spatial).rev() {
            let dim = 2 + a;
            let len = self.shape()[dim];
            let (out, scale) = match target {
                Target::Size(s) => {
                    let scale = if s[a] == 0 {
                        0.0
                    } else {
                        len as f64 / s[a] as f64
                    };
                    (s[a], scale)
                }
                Target::Scale(f) => {
                    let f = f[a];
                    if !(f.is_finite() && f > 0.0) {
                        return Err(bad(
                            op,
                            format!("scale factors must be finite and positive, got {f}"),
                        ));
                    }
                    let out = (len as f64 * f).floor();
                    if out >= isize::MAX as f64 {
                        return Err(bad(op, format!("an output of {out} elements")));
                    }
                    (out as usize, 1.0 / f)
                }
            };
            if len == 0 && out > 0 {
                return Err(bad(
                    op,
                    format!(
                        "input and output sizes should be greater than 0, but got input {:?} \
                         and output {out}",
                        self.shape()
                    ),
                ));
            }
            if out == 0 {
                return Err(bad(
                    op,
                    format!("the output size along dimension {dim} would be 0"),
                ));
            }
            // PyTorch's kernels copy a dimension whose size does not change (but nearest-exact
            // under a scale factor, which moves its elements).
            if out == len
                && (mode != Interpolation::NearestExact || matches!(target, Target::Size(_)))
            {
                continue;
            }
            y = match mode {
                Interpolation::Nearest | Interpolation::NearestExact => {
                    let exact = mode == Interpolation::NearestExact;
                    // PyTorch's float32 scale: `in / out` divided in float32, or
                    // `1 / factor` rounded to it.
                    let s = match target {
                        Target::Size(_) => len as f32 / out as f32,
                        Target::Scale(_) => scale as f32,
                    };
                    let idx = nearest_indices(len, out, s, exact)?;
                    y.index_select(dim, &Tensor::from_slice(&idx, [out], y.device())?)?
                }
                Interpolation::Linear { align_corners } => {
                    // PyTorch computes the weights in float64 for float64, else float32.
                    let f32_steps = y.dtype() != DType::F64;
                    let round = |v: f64| if f32_steps { v as f32 as f64 } else { v };
                    let scale = match target {
                        Target::Size(_) if f32_steps => (len as f32 / out as f32) as f64,
                        _ => scale,
                    };
                    let (i0, i1, l0, l1) = linear_taps(len, out, scale, align_corners, round)?;
                    let mut along = vec![1usize; rank];
                    along[dim] = out;
                    let device = y.device();
                    let weight = |l: &[f64]| -> Result<Tensor> {
                        Tensor::from_slice(l, along.as_slice(), device)?.to_dtype(y.dtype())
                    };
                    let pick = |i: &[i64]| -> Result<Tensor> {
                        y.index_select(dim, &Tensor::from_slice(i, [out], device)?)
                    };
                    // `λ0 x0 + λ1 x1` as PyTorch's kernels compute it.
                    pick(&i0)?
                        .mul(&weight(&l0)?)?
                        .add(&pick(&i1)?.mul(&weight(&l1)?)?)?
                }
            };
        }
        if y.dtype() != self.dtype() {
            y.to_dtype(self.dtype())
        } else if y.shares_storage(self) {
            y.contiguous()?.deep_clone()
        } else {
            Ok(y)
        }
    }
}

/// The source index of each of `out` outputs, PyTorch's nearest arithmetic in float32
/// (`nearest_idx`: the identity when the sizes match and halving when the output is twice
/// the input, for `"nearest"`).
fn nearest_indices(len: usize, out: usize, scale: f32, exact: bool) -> Result<Vec<i64>> {
    genesis_storage::check_host_bytes(out.saturating_mul(8))?;
    let last = len as i64 - 1;
    Ok((0..out)
        .map(|d| {
            let src = if exact {
                ((d as f32 + 0.5) * scale).floor() as i64
            } else if out == len {
                d as i64
            } else if out == 2 * len {
                (d / 2) as i64
            } else {
                (d as f32 * scale).floor() as i64
            };
            src.min(last)
        })
        .collect())
}

/// Each output's two neighbours and their weights for linear interpolation, PyTorch's
/// `compute_source_index_and_lambda` in float32 (`round` rounds each step to float32) or
/// float64.
#[allow(clippy::type_complexity)]
fn linear_taps(
    len: usize,
    out: usize,
    scale: f64,
    align_corners: bool,
    round: impl Fn(f64) -> f64,
) -> Result<(Vec<i64>, Vec<i64>, Vec<f64>, Vec<f64>)> {
    genesis_storage::check_host_bytes(out.saturating_mul(32))?;
    let scale = if align_corners {
        if out > 1 {
            round(round(len as f64 - 1.0) / round(out as f64 - 1.0))
        } else {
            0.0
        }
    } else {
        round(scale)
    };
    let (mut i0s, mut i1s, mut l0s, mut l1s) = (vec![], vec![], vec![], vec![]);
    for d in 0..out {
        let src = if align_corners {
            round(scale * d as f64)
        } else {
            round(round(scale * round(d as f64 + 0.5)) - 0.5).max(0.0)
        };
        let i0 = (src.floor() as usize).min(len - 1);
        let i1 = if i0 < len - 1 { i0 + 1 } else { i0 };
        let l1 = round(src - i0 as f64).clamp(0.0, 1.0);
        i0s.push(i0 as i64);
        i1s.push(i1 as i64);
        l0s.push(round(1.0 - l1));
        l1s.push(l1);
    }
    Ok((i0s, i1s, l0s, l1s))
}
