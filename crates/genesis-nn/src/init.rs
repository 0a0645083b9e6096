//! Seeded initialisers (PyTorch's `nn.init`): each fills a tensor in place (under
//! [`no_grad`], so parameters that require grad can be filled) with values drawn from a
//! [`Generator`], the same on every device for the same seed.

use genesis::{DType, Device, Error, Generator, Result, Tensor, no_grad};

/// `(fan_in, fan_out)` of a weight: `[out, in, k...]` has `in * k...` inputs and `out * k...`
/// outputs per element (PyTorch's `_calculate_fan_in_and_fan_out`); fewer than 2 dimensions
/// is an error, and so are fans that `usize` cannot hold (only a tensor of no elements, with
/// huge other sizes, has them).
pub fn fans(t: &Tensor) -> Result<(usize, usize)> {
    let s = t.shape();
    if s.len() < 2 {
        return Err(Error::InvalidArgument {
            op: "init",
            reason: format!(
                "fan in and fan out can not be computed for a tensor with fewer than 2 \
                 dimensions (shape {s:?})"
            ),
        });
    }
    let overflow = || Error::InvalidArgument {
        op: "init",
        reason: format!("the fan in and fan out of shape {s:?} overflow"),
    };
    // The receptive field: 0 when a size is 0, whatever the others.
    let field = if s[2..].contains(&0) {
        0
    } else {
        s[2..]
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(overflow)?
    };
    let fan_in = s[1].checked_mul(field).ok_or_else(overflow)?;
    let fan_out = s[0].checked_mul(field).ok_or_else(overflow)?;
    Ok((fan_in, fan_out))
}

/// Whether `t` has no element: PyTorch's Kaiming initialisers return such a tensor unchanged
/// before computing its fans ("initializing zero-element tensors is a no-op"), and every
/// initialiser leaves it as it is.
fn no_elements(t: &Tensor) -> bool {
    t.numel() == 0
}

fn fill(t: &Tensor, values: &Tensor) -> Result<()> {
    no_grad(|| t.copy_(&values.to(t.device())?.to_dtype(t.dtype())?))
}

/// Values uniform in `[low, high)`.
pub fn uniform_(t: &Tensor, low: f64, high: f64, g: &Generator) -> Result<()> {
    let u = g.rand(t.shape(), DType::F32, t.device())?;
    fill(t, &u.mul(high - low)?.add(low)?)
}

/// Normal values of mean `mean` and standard deviation `std`.
pub fn normal_(t: &Tensor, mean: f64, std: f64, g: &Generator) -> Result<()> {
    let n = g.randn(t.shape(), DType::F32, t.device())?;
    fill(t, &n.mul(std)?.add(mean)?)
}

/// Every element `value`.
pub fn constant_(t: &Tensor, value: f64) -> Result<()> {
    no_grad(|| t.fill_(value))
}

/// The gain of a nonlinearity (PyTorch's `calculate_gain`): `"linear"`, `"sigmoid"`,
/// `"conv*"` 1, `"tanh"` 5/3, `"relu"` √2, `"leaky_relu"` √(2 / (1 + slope²)), `"selu"` 3/4.
pub fn calculate_gain(nonlinearity: &str, slope: f64) -> Result<f64> {
    Ok(match nonlinearity {
        "linear" | "sigmoid" | "conv1d" | "conv2d" | "conv3d" => 1.0,
        "tanh" => 5.0 / 3.0,
        "relu" => 2f64.sqrt(),
        "leaky_relu" => (2.0 / (1.0 + slope * slope)).sqrt(),
        "selu" => 0.75,
        other => {
            return Err(Error::InvalidArgument {
                op: "calculate_gain",
                reason: format!("unsupported nonlinearity {other}"),
            });
        }
    })
}

/// Kaiming (He) uniform: bound `gain * √(3 / fan_in)`, gain of `leaky_relu` with slope `a`
/// (PyTorch's default `kaiming_uniform_(mode="fan_in", nonlinearity="leaky_relu")`). A tensor
/// of no elements is left as it is, whatever its rank (PyTorch's no-op).
pub fn kaiming_uniform_(t: &Tensor, a: f64, g: &Generator) -> Result<()> {
    if no_elements(t) {
        return Ok(());
    }
    let (fan_in, _) = fans(t)?;
    let bound = calculate_gain("leaky_relu", a)? * (3.0 / fan_in as f64).sqrt();
    uniform_(t, -bound, bound, g)
}

/// Kaiming (He) normal: std `gain / √fan_in`, gain of `leaky_relu` with slope `a`. A tensor of
/// no elements is left as it is (PyTorch's no-op).
pub fn kaiming_normal_(t: &Tensor, a: f64, g: &Generator) -> Result<()> {
    if no_elements(t) {
        return Ok(());
    }
    let (fan_in, _) = fans(t)?;
    let std = calculate_gain("leaky_relu", a)? / (fan_in as f64).sqrt();
    normal_(t, 0.0, std, g)
}

/// Xavier (Glorot) uniform: bound `gain * √(6 / (fan_in + fan_out))` (a tensor of no elements
/// and at least 2 dimensions is left as it is).
pub fn xavier_uniform_(t: &Tensor, gain: f64, g: &Generator) -> Result<()> {
    if no_elements(t) && t.dim() >= 2 {
        return Ok(());
    }
    let (fan_in, fan_out) = fans(t)?;
    let bound = gain * (6.0 / (fan_in + fan_out) as f64).sqrt();
    uniform_(t, -bound, bound, g)
}

/// Xavier (Glorot) normal: std `gain * √(2 / (fan_in + fan_out))` (a tensor of no elements
/// and at least 2 dimensions is left as it is).
pub fn xavier_normal_(t: &Tensor, gain: f64, g: &Generator) -> Result<()> {
    if no_elements(t) && t.dim() >= 2 {
        return Ok(());
    }
    let (fan_in, fan_out) = fans(t)?;
    normal_(t, 0.0, gain * (2.0 / (fan_in + fan_out) as f64).sqrt(), g)
}

/// Normal values of `mean` and `std` truncated to `[low, high]` (PyTorch's `trunc_normal_`):
/// normals drawn in rounds and those outside rejected, so the values follow the truncated
/// distribution exactly. `low < high` and the interval must not be far in a tail (each round
/// must keep some values).
pub fn trunc_normal_(
    t: &Tensor,
    mean: f64,
    std: f64,
    low: f64,
    high: f64,
    g: &Generator,
) -> Result<()> {
    let bad = |reason: String| Error::InvalidArgument {
        op: "trunc_normal_",
        reason,
    };
    let ordered = low < high && std > 0.0; // false for NaN too
    if !ordered {
        return Err(bad(format!(
            "needs low < high and std > 0 (got {low}, {high}, {std})"
        )));
    }
    let n = t.numel();
    let mut kept: Vec<f64> = Vec::with_capacity(n);
    for _ in 0..64 {
        if kept.len() >= n {
            break;
        }
        let want = (n - kept.len()).max(16) * 2;
        let draw = g.randn([want], DType::F64, Device::Cpu)?.to_vec::<f64>()?;
        kept.extend(
            draw.into_iter()
                .map(|z| mean + std * z)
                .filter(|v| (low..=high).contains(v)),
        );
    }
    if kept.len() < n {
        return Err(bad(format!(
            "[{low}, {high}] keeps too few normals of mean {mean} and std {std}"
        )));
    }
    kept.truncate(n);
    fill(t, &Tensor::from_slice(&kept, t.shape(), Device::Cpu)?)
}
