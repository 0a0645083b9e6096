//! Multi-head attention (PyTorch's `nn.MultiheadAttention`).

use genesis::{DType, Device, Error, Generator, Result, Tensor};

use crate::{Linear, Module, init};

/// Multi-head attention, PyTorch's `nn.MultiheadAttention(embed_dim, num_heads, bias,
/// batch_first)` without dropout: the query, key and value projected by `in_proj_weight`
/// (`[3E, E]`, Xavier-uniform) and `in_proj_bias` (`[3E]`, zeros), split into `num_heads`
/// heads of `E / num_heads`, `softmax(q kᵀ / √d + masks) v` per head, the heads joined and
/// projected by `out_proj` (`Linear(E, E)`, its bias zeros). Inputs are `[L, N, E]`
/// (`[N, L, E]` with `batch_first`) or unbatched `[L, E]`; parameter names are PyTorch's.
///
/// ```
/// use genesis::{DType, Device, Generator};
/// use genesis_nn::{Module, MultiheadAttention};
/// # fn main() -> genesis::Result<()> {
/// let g = Generator::new(0);
/// let mha = MultiheadAttention::new(16, 4, true, true, &g, Device::Cpu)?;
/// let x = g.randn([2, 5, 16], DType::F32, Device::Cpu)?; // [N, L, E]
/// assert_eq!(mha.forward(&x)?.shape(), [2, 5, 16]); // self-attention
/// let (y, w) = mha.attend(&x, &x, &x, None, None, true)?;
/// assert_eq!(w.unwrap().shape(), [2, 5, 5]); // weights averaged over the heads
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MultiheadAttention {
    /// `[3 embed_dim, embed_dim]`: the query's, key's and value's projections stacked.
    pub in_proj_weight: Tensor,
    /// `[3 embed_dim]`, when the layer has biases.
    pub in_proj_bias: Option<Tensor>,
    /// The output projection.
    pub out_proj: Linear,
    num_heads: usize,
    batch_first: bool,
}

impl MultiheadAttention {
    /// A layer of width `embed_dim` (a multiple of `num_heads`) on `device`, drawn from `g`.
    pub fn new(
        embed_dim: usize,
        num_heads: usize,
        bias: bool,
        batch_first: bool,
        g: &Generator,
        device: Device,
    ) -> Result<MultiheadAttention> {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::InvalidArgument {
                op: "MultiheadAttention",
                reason: format!(
                    "embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
                ),
            });
        }
        let e3 = embed_dim
            .checked_mul(3)
            .ok_or_else(|| Error::InvalidArgument {
                op: "MultiheadAttention",
                reason: format!("embed_dim {embed_dim} overflows"),
            })?;
        let w = Tensor::empty([e3, embed_dim], DType::F32, device)?;
        init::xavier_uniform_(&w, 1.0, g)?;
        let in_proj_bias = if bias {
            Some(Tensor::zeros([e3], DType::F32, device)?.requires_grad_(true)?)
        } else {
            None
        };
        let out_proj = Linear::new(embed_dim, embed_dim, bias, g, device)?;
        if let Some(b) = &out_proj.bias {
            init::constant_(b, 0.0)?;
        }
        Ok(MultiheadAttention {
            in_proj_weight: w.requires_grad_(true)?,
            in_proj_bias,
            out_proj,
            num_heads,
            batch_first,
        })
    }

    /// Attention of `query` (`[L, N, E]`, or `[N, L, E]` with `batch_first`, or `[L, E]`) over
    /// `key` and `value` (`[S, N, E]` likewise), PyTorch's `forward(query, key, value,
    /// key_padding_mask, need_weights, attn_mask)`: `key_padding_mask` (`[N, S]`, or `[S]`
    /// unbatched) and `attn_mask` (`[L, S]` or `[N · heads, L, S]`) are `Bool` (true: the key is
    /// left out) or float (added to the scores). Returns the output and, with `need_weights`,
    /// the attention weights averaged over the heads (`[N, L, S]`). A query that every key is
    /// masked from gets NaN, as PyTorch's.
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        key_padding_mask: Option<&Tensor>,
        attn_mask: Option<&Tensor>,
        need_weights: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let op = "MultiheadAttention";
        let bad = |reason: String| Error::InvalidArgument { op, reason };
        let e = self.in_proj_weight.shape()[1];
        let unbatched = query.dim() == 2;
        for (name, t) in [("query", query), ("key", key), ("value", value)] {
            if t.dim() != query.dim() || !(2..=3).contains(&t.dim()) || t.shape().last() != Some(&e)
            {
                return Err(bad(format!(
                    "{name} must be [L, N, {e}] ([N, L, {e}] batch first) or [L, {e}], like the \
                     query, got shapes {:?}, {:?}, {:?}",
                    query.shape(),
                    key.shape(),
                    value.shape()
                )));
            }
        }
        // [N, L, E] from every layout.
        let batch = |t: &Tensor| -> Result<Tensor> {
            if unbatched {
                t.unsqueeze(0)
            } else if self.batch_first {
                Ok(t.clone())
            } else {
                t.transpose(0, 1)
            }
        };
        let (q, k, v) = (batch(query)?, batch(key)?, batch(value)?);
        let (n, l, s) = (q.shape()[0], q.shape()[1], k.shape()[1]);
        if k.shape()[..2] != v.shape()[..2] || k.shape()[0] != n {
            return Err(bad(format!(
                "key and value must have the query's batch and one length, got {:?} and {:?}",
                key.shape(),
                value.shape()
            )));
        }
        let (h, d) = (self.num_heads, e / self.num_heads);
        let project = |t: &Tensor, i: usize| -> Result<Tensor> {
            let w = self.in_proj_weight.narrow(0, i * e, e)?;
            let b = match &self.in_proj_bias {
                Some(b) => Some(b.narrow(0, i * e, e)?),
                None => None,
            };
            // [N, T, E] -> [N, H, T, D]
            let len = t.shape()[1];
            t.linear(&w, b.as_ref())?
                .reshape([n, len, h, d])?
                .transpose(1, 2)
        };
        let (q, k, v) = (project(&q, 0)?, project(&k, 1)?, project(&v, 2)?);
        let masks = key_padding_mask.is_some() || attn_mask.is_some();
        let (o, weights) = if !masks && !need_weights {
            (q.scaled_dot_product_attention(&k, &v, false, None)?, None)
        } else {
            let mut scores = q
                .matmul(&k.transpose(-1, -2)?)?
                .mul(1.0 / (d as f64).sqrt())?;
            let dtype = scores.dtype();
            let additive = |m: &Tensor| -> Result<Tensor> {
                if m.dtype() == DType::Bool {
                    Tensor::where_cond(m, f64::NEG_INFINITY, 0.0)?.to_dtype(dtype)
                } else {
                    Ok(m.clone())
                }
            };
            if let Some(m) = attn_mask {
                let m = match m.shape() {
                    [a, b] if *a == l && *b == s => m.clone(),
                    [nh, a, b] if *nh == n * h && *a == l && *b == s => m.reshape([n, h, l, s])?,
                    other => {
                        return Err(bad(format!(
                            "attn_mask must be [{l}, {s}] or [{}, {l}, {s}], got {other:?}",
                            n * h
                        )));
                    }
                };
                scores = scores.add(&additive(&m)?)?;
            }
            if let Some(m) = key_padding_mask {
                let want: &[usize] = if unbatched { &[s] } else { &[n, s] };
                if m.shape() != want {
                    return Err(bad(format!(
                        "key_padding_mask must be {want:?}, got {:?}",
                        m.shape()
                    )));
                }
                scores = scores.add(&additive(&m.reshape([n, 1, 1, s])?)?)?;
            }
            let w = scores.softmax(-1)?;
            let weights = if need_weights {
                let avg = w.mean_dim([1isize], false)?;
                Some(if unbatched { avg.squeeze(0)? } else { avg })
            } else {
                None
            };
            (w.matmul(&v)?, weights)
        };
        // [N, H, L, D] -> [N, L, E] -> the output projection.
        let o = o.transpose(1, 2)?.contiguous()?.reshape([n, l, e])?;
        let y = self.out_proj.forward(&o)?;
        let y = if unbatched {
            y.squeeze(0)?
        } else if self.batch_first {
            y
        } else {
            y.transpose(0, 1)?
        };
        Ok((y, weights))
    }
}

impl Module for MultiheadAttention {
    /// Self-attention of `x`, no masks, no weights.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.attend(x, x, x, None, None, false)?.0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = vec![("in_proj_weight".to_string(), self.in_proj_weight.clone())];
        p.extend(
            self.in_proj_bias
                .iter()
                .map(|b| ("in_proj_bias".to_string(), b.clone())),
        );
        p.extend(
            self.out_proj
                .named_parameters()
                .into_iter()
                .map(|(name, t)| (format!("out_proj.{name}"), t)),
        );
        p
    }
}
