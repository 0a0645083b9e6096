//! Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RMSNorm`], [`Dropout`] and the
//! activations, each a [`Module`] with PyTorch's parameter names and initialisation.

use genesis::{DType, Device, Error, Generator, Result, Tensor};

use crate::Module;
use crate::init;

fn parameter(t: Tensor) -> Result<Tensor> {
    t.requires_grad_(true)
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
            let b = Tensor::empty([out_features], DType::F32, device)?;
            // PyTorch's: `1 / √fan_in`, or 0 (zeros) for a layer of no inputs.
            let bound = if in_features > 0 {
                1.0 / (in_features as f64).sqrt()
            } else {
                0.0
            };
            init::uniform_(&b, -bound, bound, g)?;
            Some(parameter(b)?)
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
        let mut p = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            p.push(("bias".to_string(), b.clone()));
        }
        p
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
