//! Layers: [`Linear`], [`Conv1d`], [`Conv2d`], [`ConvTranspose2d`], [`Embedding`],
//! [`LayerNorm`], [`RMSNorm`], [`BatchNorm1d`], [`BatchNorm2d`], [`GroupNorm`], [`Dropout`],
//! the pooling layers, [`Upsample`], [`Flatten`] and the activations, each a [`Module`] with
//! PyTorch's parameter names and initialisation.

use genesis::{
    ConvOptions, DType, Device, Error, Generator, Interpolation, IntoPair, PoolOptions, Result,
    Tensor,
};

use crate::Module;
use crate::init;

fn parameter(t: Tensor) -> Result<Tensor> {
    t.requires_grad_(true)
}

/// The named parameters of a layer of a `weight` and maybe a `bias`.
fn weight_and_bias(weight: &Tensor, bias: Option<&Tensor>) -> Vec<(String, Tensor)> {
    let mut p = vec![("weight".to_string(), weight.clone())];
    p.extend(bias.map(|b| ("bias".to_string(), b.clone())));
    p
}

/// `y = x Wᵀ + b` (PyTorch's `nn.Linear`): `weight` `[out, in]`, `bias` `[out]`, both
/// uniform in `±1/√in` at creation (PyTorch's initialisation; a layer of no inputs has a zero
/// bias), float32.
#[derive(Debug)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, when the layer has one.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer from `in_features` to `out_features` on `device`, drawn from `g`.
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        g: &Generator,
        device: Device,
    ) -> Result<Linear> {
        let weight = Tensor::empty([out_features, in_features], DType::F32, device)?;
        init::kaiming_uniform_(&weight, 5f64.sqrt(), g)?;
        let bias = if bias {
            Some(fan_in_bias(out_features, in_features, g, device)?)
        } else {
            None
        };
        Ok(Linear {
            weight: parameter(weight)?,
            bias,
        })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(&self.weight, self.bias.as_ref())
    }
}

/// A lookup table (PyTorch's `nn.Embedding`): `weight` `[num_embeddings, dim]`, standard
/// normal at creation; the input holds int64 (or int32) indices.
#[derive(Debug)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// A table of `num_embeddings` vectors of `dim` on `device`, drawn from `g`.
    pub fn new(
        num_embeddings: usize,
        dim: usize,
        g: &Generator,
        device: Device,
    ) -> Result<Embedding> {
        Ok(Embedding {
            weight: parameter(g.randn([num_embeddings, dim], DType::F32, device)?)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let mut shape = ids.shape().to_vec();
        shape.push(self.weight.shape()[1]);
        self.weight
            .index_select(0, &ids.reshape([-1])?)?
            .reshape(shape.iter().map(|&n| n as isize).collect::<Vec<_>>())
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

/// The mean and the reciprocal standard deviation of `x` over its last `k` dimensions
/// (kept as size 1): the statistics of a normalisation.
fn last_dims(x: &Tensor, k: usize) -> Result<Vec<isize>> {
    if k == 0 || k > x.dim() {
        return Err(Error::InvalidArgument {
            op: "normalisation",
            reason: format!(
                "normalises over the last {k} dimensions of a tensor of shape {:?}",
                x.shape()
            ),
        });
    }
    Ok((x.dim() - k..x.dim()).map(|d| d as isize).collect())
}

/// Layer normalisation over the last dimensions (PyTorch's `nn.LayerNorm`): `(x - mean) /
/// √(var + eps) * weight + bias`, the biased variance; `weight` ones and `bias` zeros at
/// creation.
#[derive(Debug)]
pub struct LayerNorm {
    /// The normalised shape (the input's last dimensions).
    pub normalized_shape: Vec<usize>,
    /// Added to the variance.
    pub eps: f64,
    /// The scale, when affine.
    pub weight: Option<Tensor>,
    /// The shift, when affine.
    pub bias: Option<Tensor>,
}

impl LayerNorm {
    /// A layer norm over `normalized_shape`, affine when `elementwise_affine`.
    pub fn new(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        device: Device,
    ) -> Result<LayerNorm> {
        let (weight, bias) = if elementwise_affine {
            (
                Some(parameter(Tensor::ones(
                    normalized_shape,
                    DType::F32,
                    device,
                )?)?),
                Some(parameter(Tensor::zeros(
                    normalized_shape,
                    DType::F32,
                    device,
                )?)?),
            )
        } else {
            (None, None)
        };
        Ok(LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight,
            bias,
        })
    }
}

impl LayerNorm {
    /// Checks that `x` ends in the normalised shape.
    fn check_input(&self, x: &Tensor) -> Result<()> {
        let dims = last_dims(x, self.normalized_shape.len())?;
        if x.shape()[x.dim() - dims.len()..] != self.normalized_shape[..] {
            return Err(Error::ShapeMismatch {
                op: "layer_norm",
                lhs: x.shape().to_vec(),
                rhs: self.normalized_shape.clone(),
            });
        }
        Ok(())
    }

    /// The layer applied to `x` with the result in `dtype` ([`Tensor::layer_norm_to`]): the
    /// values of `forward(x)?.to_dtype(dtype)`, in one pass for float32 rows and a float16 or
    /// bfloat16 `dtype` (a layer norm feeding a half-precision product).
    pub fn forward_to(&self, x: &Tensor, dtype: genesis::DType) -> Result<Tensor> {
        self.check_input(x)?;
        x.layer_norm_to(
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
            dtype,
        )
    }

    /// The residual add and the layer: `(h, forward(h))` with `h = x + r`
    /// ([`Tensor::add_layer_norm`]), the normalised rows in `dtype` when given
    /// ([`Tensor::add_layer_norm_to`]); one pass where the fused kernels apply (a transformer's
    /// residual stream: float32 `x`, a branch's output `r` of `x`'s dtype or of `dtype`).
    pub fn forward_add(
        &self,
        x: &Tensor,
        r: &Tensor,
        dtype: Option<genesis::DType>,
    ) -> Result<(Tensor, Tensor)> {
        self.check_input(x)?;
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        match dtype {
            Some(d) => x.add_layer_norm_to(r, &self.normalized_shape, w, b, self.eps, d),
            None => x.add_layer_norm(r, &self.normalized_shape, w, b, self.eps),
        }
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.check_input(x)?;
        x.layer_norm(
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = Vec::new();
        if let Some(w) = &self.weight {
            p.push(("weight".to_string(), w.clone()));
        }
        if let Some(b) = &self.bias {
            p.push(("bias".to_string(), b.clone()));
        }
        p
    }
}

/// Root-mean-square normalisation over the last dimensions (PyTorch's `nn.RMSNorm`): `x /
/// √(mean(x²) + eps) * weight`, `weight` ones at creation.
#[derive(Debug)]
pub struct RMSNorm {
    /// The normalised shape.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square.
    pub eps: f64,
    /// The scale.
    pub weight: Tensor,
}

impl RMSNorm {
    /// An RMS norm over `normalized_shape`.
    pub fn new(normalized_shape: &[usize], eps: f64, device: Device) -> Result<RMSNorm> {
        Ok(RMSNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight: parameter(Tensor::ones(normalized_shape, DType::F32, device)?)?,
        })
    }
}

impl Module for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        last_dims(x, self.normalized_shape.len())?;
        x.rms_norm(&self.normalized_shape, Some(&self.weight), self.eps)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

/// Zeroes elements with probability `p` in training and scales the rest by `1 / (1 - p)`
/// (PyTorch's `nn.Dropout`); the identity in evaluation. Masks come from the layer's own
/// seeded generator.
#[derive(Debug)]
pub struct Dropout {
    /// The probability of zeroing.
    pub p: f64,
    training: bool,
    generator: Generator,
}

impl Dropout {
    /// Dropout with probability `p` (in `[0, 1]`) drawing from a generator seeded with `seed`.
    pub fn new(p: f64, seed: u64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: "dropout",
                reason: format!("dropout probability has to be between 0 and 1, but got {p}"),
            });
        }
        Ok(Dropout {
            p,
            training: true,
            generator: Generator::new(seed),
        })
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        if self.p == 1.0 {
            return x.mul(0.0);
        }
        let keep = self
            .generator
            .rand(x.shape(), DType::F32, x.device())?
            .ge_scalar(self.p)?
            .to_dtype(x.dtype())?;
        x.mul(&keep)?.div(1.0 - self.p)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Debug, Default, Clone, Copy)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, $x: &Tensor) -> Result<Tensor> {
                $body
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                Vec::new()
            }
        }
    };
}

activation!(
    /// `max(x, 0)` (PyTorch's `nn.ReLU`).
    Relu,
    |x| x.relu()
);
activation!(
    /// `x * sigmoid(x)` (PyTorch's `nn.SiLU`).
    Silu,
    |x| x.silu()
);
activation!(
    /// `tanh(x)` (PyTorch's `nn.Tanh`).
    Tanh,
    |x| x.tanh()
);

activation!(
    /// `1 / (1 + exp(−x))` (PyTorch's `nn.Sigmoid`).
    Sigmoid,
    |x| x.sigmoid()
);
activation!(
    /// PyTorch's `nn.SELU`: [`Tensor::selu`].
    Selu,
    |x| x.selu()
);
activation!(
    /// `min(max(x, 0), 6)` (PyTorch's `nn.ReLU6`).
    Relu6,
    |x| x.relu6()
);
activation!(
    /// PyTorch's `nn.Hardsigmoid`: [`Tensor::hardsigmoid`].
    Hardsigmoid,
    |x| x.hardsigmoid()
);
activation!(
    /// PyTorch's `nn.Hardswish`: [`Tensor::hardswish`].
    Hardswish,
    |x| x.hardswish()
);
activation!(
    /// `x · tanh(softplus(x))` (PyTorch's `nn.Mish`).
    Mish,
    |x| x.mish()
);

/// `x` where `x > 0`, else `negative_slope · x` (PyTorch's `nn.LeakyReLU`, slope 0.01 by
/// default).
#[derive(Debug, Clone, Copy)]
pub struct LeakyRelu {
    /// The slope below 0.
    pub negative_slope: f64,
}

impl Default for LeakyRelu {
    fn default() -> LeakyRelu {
        LeakyRelu {
            negative_slope: 0.01,
        }
    }
}

impl Module for LeakyRelu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.leaky_relu(self.negative_slope)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// `x` where `x > 0`, else `alpha (exp(x) − 1)` (PyTorch's `nn.ELU`, `alpha` 1 by default).
#[derive(Debug, Clone, Copy)]
pub struct Elu {
    /// The negative side's scale.
    pub alpha: f64,
}

impl Default for Elu {
    fn default() -> Elu {
        Elu { alpha: 1.0 }
    }
}

impl Module for Elu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.elu(self.alpha)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// The softmax over dimension `dim` (PyTorch's `nn.Softmax(dim)`).
#[derive(Debug, Clone, Copy)]
pub struct Softmax {
    /// The dimension normalised (negative counts from the end).
    pub dim: isize,
}

impl Module for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.softmax(self.dim)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// `x Φ(x)` (PyTorch's `nn.GELU`): exact, or with the tanh approximation
/// (`approximate="tanh"`) when `tanh` is set.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gelu {
    /// The tanh approximation.
    pub tanh: bool,
}

impl Module for Gelu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.tanh { x.gelu_tanh() } else { x.gelu() }
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// A bias of `out` channels uniform in `±1/√fan_in` (PyTorch's, for linear and convolution
/// layers), zeros when `fan_in` is 0.
fn fan_in_bias(out: usize, fan_in: usize, g: &Generator, device: Device) -> Result<Tensor> {
    let b = Tensor::empty([out], DType::F32, device)?;
    let bound = if fan_in > 0 {
        1.0 / (fan_in as f64).sqrt()
    } else {
        0.0
    };
    init::uniform_(&b, -bound, bound, g)?;
    parameter(b)
}

/// A convolution's parameters, PyTorch's shapes and initialisation: `weight`
/// `[out, in / groups, k...]` (transposed: `[in, out / groups, k...]`) Kaiming-uniform with
/// `a = √5` (uniform in `±1/√fan_in`, `fan_in` its second dimension times the taps), `bias`
/// `[out]` uniform in the same bound.
#[allow(clippy::too_many_arguments)]
fn conv_parameters(
    op: &'static str,
    (inp, out): (usize, usize),
    kernel: &[usize],
    groups: usize,
    transposed: bool,
    bias: bool,
    g: &Generator,
    device: Device,
) -> Result<(Tensor, Option<Tensor>)> {
    if groups == 0 || !inp.is_multiple_of(groups) || !out.is_multiple_of(groups) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "in_channels ({inp}) and out_channels ({out}) must be multiples of groups \
                 ({groups}), which must be positive"
            ),
        });
    }
    if kernel.contains(&0) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("kernel size must be positive, got {kernel:?}"),
        });
    }
    let mut wshape = if transposed {
        vec![inp, out / groups]
    } else {
        vec![out, inp / groups]
    };
    wshape.extend_from_slice(kernel);
    let weight = Tensor::empty(wshape.as_slice(), DType::F32, device)?;
    init::kaiming_uniform_(&weight, 5f64.sqrt(), g)?;
    let fan_in = wshape[1..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    let bias = if bias {
        Some(fan_in_bias(out, fan_in.unwrap_or(0), g, device)?)
    } else {
        None
    };
    Ok((parameter(weight)?, bias))
}

/// A 2-d convolution over `[N, C, H, W]` images (or `[C, H, W]`), PyTorch's `nn.Conv2d`:
/// [`Tensor::conv2d`] with `weight` `[out, in / groups, kh, kw]` and `bias` `[out]`,
/// initialised as PyTorch's, float32.
///
/// ```
/// use genesis::{ConvOptions, DType, Device, Generator, Tensor};
/// use genesis_nn::{Conv2d, Module};
/// # fn main() -> genesis::Result<()> {
/// let g = Generator::new(0);
/// let conv = Conv2d::new(3, 8, 3, ConvOptions::new().padding(1), true, &g, Device::Cpu)?;
/// let y = conv.forward(&Tensor::zeros([2, 3, 16, 16], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), [2, 8, 16, 16]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, kh, kw]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has one.
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation and groups.
    pub options: ConvOptions,
}

impl Conv2d {
    /// A layer from `in_channels` to `out_channels` with windows of `kernel_size` (one
    /// number or a pair) on `device`, drawn from `g`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl IntoPair,
        options: ConvOptions,
        bias: bool,
        g: &Generator,
        device: Device,
    ) -> Result<Conv2d> {
        let (weight, bias) = conv_parameters(
            "Conv2d",
            (in_channels, out_channels),
            &kernel_size.into_pair(),
            options.get_groups(),
            false,
            bias,
            g,
            device,
        )?;
        Ok(Conv2d {
            weight,
            bias,
            options,
        })
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.conv2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(&self.weight, self.bias.as_ref())
    }
}

/// A 1-d convolution over `[N, C, L]` sequences (or `[C, L]`), PyTorch's `nn.Conv1d`:
/// [`Tensor::conv1d`] with `weight` `[out, in / groups, k]`, initialised as PyTorch's.
#[derive(Debug)]
pub struct Conv1d {
    /// `[out_channels, in_channels / groups, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has one.
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation (one number each) and groups.
    pub options: ConvOptions,
}

impl Conv1d {
    /// A layer from `in_channels` to `out_channels` with windows of `kernel_size` on
    /// `device`, drawn from `g`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        options: ConvOptions,
        bias: bool,
        g: &Generator,
        device: Device,
    ) -> Result<Conv1d> {
        let (weight, bias) = conv_parameters(
            "Conv1d",
            (in_channels, out_channels),
            &[kernel_size],
            options.get_groups(),
            false,
            bias,
            g,
            device,
        )?;
        Ok(Conv1d {
            weight,
            bias,
            options,
        })
    }
}

impl Module for Conv1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.conv1d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(&self.weight, self.bias.as_ref())
    }
}

/// A 2-d transposed convolution (PyTorch's `nn.ConvTranspose2d`, the upsampling of decoders
/// and generators): [`Tensor::conv_transpose2d`] with `weight` `[in, out / groups, kh, kw]`
/// and `bias` `[out]`, initialised as PyTorch's, float32.
///
/// ```
/// use genesis::{ConvOptions, DType, Device, Generator, Tensor};
/// use genesis_nn::{ConvTranspose2d, Module};
/// # fn main() -> genesis::Result<()> {
/// let g = Generator::new(0);
/// let up = ConvTranspose2d::new(8, 4, 4, ConvOptions::new().stride(2).padding(1), true, &g, Device::Cpu)?;
/// let y = up.forward(&Tensor::zeros([2, 8, 7, 7], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), [2, 4, 14, 14]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kh, kw]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has one.
    pub bias: Option<Tensor>,
    /// Stride, padding, output padding, dilation and groups.
    pub options: ConvOptions,
}

impl ConvTranspose2d {
    /// A layer from `in_channels` to `out_channels` with windows of `kernel_size` (one
    /// number or a pair) on `device`, drawn from `g`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl IntoPair,
        options: ConvOptions,
        bias: bool,
        g: &Generator,
        device: Device,
    ) -> Result<ConvTranspose2d> {
        let (weight, bias) = conv_parameters(
            "ConvTranspose2d",
            (in_channels, out_channels),
            &kernel_size.into_pair(),
            options.get_groups(),
            true,
            bias,
            g,
            device,
        )?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            options,
        })
    }
}

impl Module for ConvTranspose2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.conv_transpose2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(&self.weight, self.bias.as_ref())
    }
}

/// 2-d max pooling (PyTorch's `nn.MaxPool2d`): [`Tensor::max_pool2d`].
#[derive(Debug, Clone, Copy)]
pub struct MaxPool2d {
    /// The window.
    pub kernel_size: [usize; 2],
    /// Stride (the window's by default), padding, dilation, `ceil_mode`.
    pub options: PoolOptions,
}

impl MaxPool2d {
    /// Pooling over windows of `kernel_size` (one number or a pair).
    pub fn new(kernel_size: impl IntoPair, options: PoolOptions) -> MaxPool2d {
        MaxPool2d {
            kernel_size: kernel_size.into_pair(),
            options,
        }
    }
}

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.max_pool2d(self.kernel_size, self.options)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// 2-d average pooling (PyTorch's `nn.AvgPool2d`): [`Tensor::avg_pool2d`].
#[derive(Debug, Clone, Copy)]
pub struct AvgPool2d {
    /// The window.
    pub kernel_size: [usize; 2],
    /// Stride (the window's by default), padding, `ceil_mode`, `count_include_pad`, divisor.
    pub options: PoolOptions,
}

impl AvgPool2d {
    /// Pooling over windows of `kernel_size` (one number or a pair).
    pub fn new(kernel_size: impl IntoPair, options: PoolOptions) -> AvgPool2d {
        AvgPool2d {
            kernel_size: kernel_size.into_pair(),
            options,
        }
    }
}

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.avg_pool2d(self.kernel_size, self.options)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// Adaptive 2-d average pooling to a fixed output size (PyTorch's `nn.AdaptiveAvgPool2d`):
/// [`Tensor::adaptive_avg_pool2d`]; `AdaptiveAvgPool2d::new(1)` is a global average pool.
#[derive(Debug, Clone, Copy)]
pub struct AdaptiveAvgPool2d {
    /// The output's height and width.
    pub output_size: [usize; 2],
}

impl AdaptiveAvgPool2d {
    /// Pooling to `output_size` (one number or a pair).
    pub fn new(output_size: impl IntoPair) -> AdaptiveAvgPool2d {
        AdaptiveAvgPool2d {
            output_size: output_size.into_pair(),
        }
    }
}

impl Module for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.adaptive_avg_pool2d(self.output_size)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// Resizes `[N, C, L]` or `[N, C, H, W]` inputs to a size or by a scale factor (PyTorch's
/// `nn.Upsample`): [`Tensor::interpolate`] or [`Tensor::interpolate_scale`].
///
/// ```
/// use genesis::{DType, Device, Interpolation, Tensor};
/// use genesis_nn::{Module, Upsample};
/// # fn main() -> genesis::Result<()> {
/// let up = Upsample::scale(&[2.0, 2.0], Interpolation::Nearest);
/// let y = up.forward(&Tensor::zeros([1, 3, 4, 5], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), [1, 3, 8, 10]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Upsample {
    /// The output's spatial size, or
    pub size: Option<Vec<usize>>,
    /// the factor of each spatial dimension.
    pub scale_factor: Option<Vec<f64>>,
    /// Nearest or linear.
    pub mode: Interpolation,
}

impl Upsample {
    /// Resizing to `size` (one length a spatial dimension).
    pub fn size(size: &[usize], mode: Interpolation) -> Upsample {
        Upsample {
            size: Some(size.to_vec()),
            scale_factor: None,
            mode,
        }
    }

    /// Resizing by `scale_factor` (one a spatial dimension).
    pub fn scale(scale_factor: &[f64], mode: Interpolation) -> Upsample {
        Upsample {
            size: None,
            scale_factor: Some(scale_factor.to_vec()),
            mode,
        }
    }
}

impl Module for Upsample {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match (&self.size, &self.scale_factor) {
            (Some(s), None) => x.interpolate(s, self.mode),
            (None, Some(f)) => x.interpolate_scale(f, self.mode),
            _ => Err(Error::InvalidArgument {
                op: "Upsample",
                reason: "either size or scale_factor should be defined, and not both".into(),
            }),
        }
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// Flattens dimensions `start_dim..=end_dim` into one (PyTorch's `nn.Flatten`, by default
/// every dimension but the batch's: `start_dim` 1, `end_dim` -1).
#[derive(Debug, Clone, Copy)]
pub struct Flatten {
    /// The first dimension flattened (negative counts from the end).
    pub start_dim: isize,
    /// The last dimension flattened (negative counts from the end).
    pub end_dim: isize,
}

impl Default for Flatten {
    fn default() -> Flatten {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten(self.start_dim, self.end_dim)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// Group normalisation (PyTorch's `nn.GroupNorm`): [`Tensor::group_norm`] over
/// `num_groups` groups of `num_channels` channels, with a learnable per-channel `weight`
/// (ones) and `bias` (zeros) when affine.
#[derive(Debug)]
pub struct GroupNorm {
    /// The groups.
    pub num_groups: usize,
    /// `[num_channels]`, when affine.
    pub weight: Option<Tensor>,
    /// `[num_channels]`, when affine.
    pub bias: Option<Tensor>,
    /// Added to the variance.
    pub eps: f64,
}

impl GroupNorm {
    /// PyTorch's `nn.GroupNorm(num_groups, num_channels, eps, affine)`.
    pub fn new(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        device: Device,
    ) -> Result<GroupNorm> {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::InvalidArgument {
                op: "GroupNorm",
                reason: format!(
                    "num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
                ),
            });
        }
        let param = |v: f32| -> Result<Option<Tensor>> {
            if affine {
                Ok(Some(parameter(Tensor::full([num_channels], v, device)?)?))
            } else {
                Ok(None)
            }
        };
        Ok(GroupNorm {
            num_groups,
            weight: param(1.0)?,
            bias: param(0.0)?,
            eps,
        })
    }
}

impl Module for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.group_norm(
            self.num_groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        match &self.weight {
            Some(w) => weight_and_bias(w, self.bias.as_ref()),
            None => Vec::new(),
        }
    }
}

/// Batch normalisation's state, shared by [`BatchNorm1d`] and [`BatchNorm2d`]: the affine
/// parameters and the running statistics (PyTorch's names).
#[derive(Debug)]
struct BatchNorm {
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    running_mean: Option<Tensor>,
    running_var: Option<Tensor>,
    num_batches_tracked: Option<Tensor>,
    eps: f64,
    momentum: Option<f64>,
    training: bool,
}

impl BatchNorm {
    fn new(
        num_features: usize,
        eps: f64,
        momentum: Option<f64>,
        affine: bool,
        track_running_stats: bool,
        device: Device,
    ) -> Result<BatchNorm> {
        let affine_param = |v: f32| -> Result<Option<Tensor>> {
            if affine {
                Ok(Some(parameter(Tensor::full([num_features], v, device)?)?))
            } else {
                Ok(None)
            }
        };
        let stat = |v: f32| -> Result<Option<Tensor>> {
            if track_running_stats {
                Ok(Some(Tensor::full([num_features], v, device)?))
            } else {
                Ok(None)
            }
        };
        Ok(BatchNorm {
            weight: affine_param(1.0)?,
            bias: affine_param(0.0)?,
            running_mean: stat(0.0)?,
            running_var: stat(1.0)?,
            num_batches_tracked: if track_running_stats {
                Some(Tensor::zeros([0usize; 0], DType::I64, device)?)
            } else {
                None
            },
            eps,
            momentum,
            training: true,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let counted = self.num_batches_tracked.as_ref().filter(|_| self.training);
        let momentum = match (self.momentum, counted) {
            // PyTorch's cumulative moving average: this batch is number `count + 1`.
            (None, Some(n)) => 1.0 / (n.item::<i64>()? as f64 + 1.0),
            (m, _) => m.unwrap_or(0.0),
        };
        let y = x.batch_norm(
            self.running_mean.as_ref(),
            self.running_var.as_ref(),
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.training || self.running_mean.is_none(),
            momentum,
            self.eps,
        )?;
        // Counted once the batch is in: a refused input leaves every buffer as it was.
        if let Some(n) = counted {
            n.add_(1i64)?;
        }
        Ok(y)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = Vec::new();
        if let (Some(w), Some(b)) = (&self.weight, &self.bias) {
            p.push(("weight".to_string(), w.clone()));
            p.push(("bias".to_string(), b.clone()));
        }
        p
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        [
            ("running_mean", &self.running_mean),
            ("running_var", &self.running_var),
            ("num_batches_tracked", &self.num_batches_tracked),
        ]
        .into_iter()
        .filter_map(|(n, t)| t.as_ref().map(|t| (n.to_string(), t.clone())))
        .collect()
    }
}

macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, $op:literal, $ranks:expr, $expect:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(BatchNorm);

        impl $name {
            /// PyTorch's defaults: `eps` 1e-5, momentum 0.1, learnable `weight` (ones) and
            /// `bias` (zeros), running statistics tracked.
            pub fn new(num_features: usize, device: Device) -> Result<$name> {
                $name::with(num_features, 1e-5, Some(0.1), true, true, device)
            }

            /// Every option: `momentum` `None` for a cumulative average of the batches'
            /// statistics, `affine` for the weight and bias, `track_running_stats` for the
            /// running statistics (without them, evaluation uses the batch's too).
            pub fn with(
                num_features: usize,
                eps: f64,
                momentum: Option<f64>,
                affine: bool,
                track_running_stats: bool,
                device: Device,
            ) -> Result<$name> {
                Ok($name(BatchNorm::new(
                    num_features,
                    eps,
                    momentum,
                    affine,
                    track_running_stats,
                    device,
                )?))
            }

            /// `[num_features]`, when the layer is affine.
            pub fn weight(&self) -> Option<&Tensor> {
                self.0.weight.as_ref()
            }

            /// `[num_features]`, when the layer is affine.
            pub fn bias(&self) -> Option<&Tensor> {
                self.0.bias.as_ref()
            }

            /// The running mean, when tracked.
            pub fn running_mean(&self) -> Option<&Tensor> {
                self.0.running_mean.as_ref()
            }

            /// The running (unbiased) variance, when tracked.
            pub fn running_var(&self) -> Option<&Tensor> {
                self.0.running_var.as_ref()
            }
        }

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                if !$ranks.contains(&x.dim()) {
                    return Err(Error::InvalidArgument {
                        op: $op,
                        reason: format!(concat!("expected ", $expect, " input (got {}D input)"), x.dim()),
                    });
                }
                self.0.forward(x)
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                self.0.named_parameters()
            }

            fn named_buffers(&self) -> Vec<(String, Tensor)> {
                self.0.named_buffers()
            }

            fn set_training(&mut self, training: bool) {
                self.0.training = training;
            }
        }
    };
}

batch_norm_layer!(
    /// Batch normalisation of `[N, C]` or `[N, C, L]` inputs (PyTorch's `nn.BatchNorm1d`):
    /// [`Tensor::batch_norm`] with the batch's statistics in training, updating the running
    /// ones (buffers `running_mean`, `running_var`, `num_batches_tracked` in the state dict),
    /// and the running ones in evaluation.
    BatchNorm1d,
    "BatchNorm1d",
    [2usize, 3],
    "2D or 3D"
);
batch_norm_layer!(
    /// Batch normalisation of `[N, C, H, W]` images (PyTorch's `nn.BatchNorm2d`): as
    /// [`BatchNorm1d`].
    ///
    /// ```
    /// use genesis::{DType, Device, Generator};
    /// use genesis_nn::{BatchNorm2d, Module};
    /// # fn main() -> genesis::Result<()> {
    /// let mut bn = BatchNorm2d::new(3, Device::Cpu)?;
    /// let x = Generator::new(0).randn([4, 3, 5, 5], DType::F32, Device::Cpu)?;
    /// let y = bn.forward(&x)?; // training: the batch's statistics
    /// let m = y.mean_dim([0isize, 2, 3], false)?.to_vec::<f32>()?;
    /// assert!(m.iter().all(|v| v.abs() < 1e-5));
    /// bn.eval();
    /// let z = bn.forward(&x)?; // evaluation: the running statistics
    /// assert_eq!(z.shape(), x.shape());
    /// # Ok(())
    /// # }
    /// ```
    BatchNorm2d,
    "BatchNorm2d",
    [4usize],
    "4D"
);
