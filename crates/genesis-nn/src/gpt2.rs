//! GPT-2 in nanoGPT's layout (PyTorch's parameter names: `transformer.wte.weight`,
//! `transformer.h.0.attn.c_attn.weight`, ..., the output head tied to the token embedding),
//! built from the facade's ops so that autograd trains it.

use std::collections::BTreeMap;
use std::sync::Arc;

use genesis::{DType, Device, Error, Generator, Result, Tensor, no_grad};

use crate::{LayerNorm, Linear, Module, init};

/// The sizes of a GPT-2 model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpt2Config {
    /// Longest sequence (the position table's length).
    pub block_size: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
}

impl Gpt2Config {
    /// GPT-2 124M with the vocabulary padded to 50,304 (nanoGPT's).
    pub fn gpt2_124m() -> Gpt2Config {
        Gpt2Config {
            block_size: 1024,
            vocab_size: 50_304,
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
        }
    }

    /// The sizes the examples name (`--config`): `"124m"` ([`Gpt2Config::gpt2_124m`]),
    /// `"small"` (256 positions, 4 layers, 4 heads, width 128) and `"tiny"` (64 positions, 2
    /// layers, 2 heads, width 64), byte-level (256 tokens) but for 124M; `None` for others.
    pub fn named(name: &str) -> Option<Gpt2Config> {
        let bytes = |block_size, n_layer, n_head, n_embd| Gpt2Config {
            block_size,
            vocab_size: 256,
            n_layer,
            n_head,
            n_embd,
        };
        match name {
            "124m" => Some(Gpt2Config::gpt2_124m()),
            "small" => Some(bytes(256, 4, 4, 128)),
            "tiny" => Some(bytes(64, 2, 2, 64)),
            _ => None,
        }
    }
}

/// Host bytes one block takes besides its parameters' elements (a floor: its twelve tensor
/// handles with their storages and autograd records take more).
const BLOCK_HOST_BYTES: usize = 1024;

/// The float32 parameters of one block of width `c`: two layer norms (`4c`), the attention's
/// projections (`3c² + 3c`, `c² + c`) and the MLP's (`4c² + 4c`, `4c² + c`): `12c² + 13c`;
/// `None` when that overflows.
fn block_elements(c: usize) -> Option<usize> {
    c.checked_mul(c)?
        .checked_mul(12)?
        .checked_add(c.checked_mul(13)?)
}

/// Refuses, before anything is allocated, a model of `elements` float32 parameters (`None`:
/// the count overflows `usize`) in `blocks` blocks on `device`: an overflowing count is an
/// [`Error::InvalidArgument`], and more bytes than the host has (the parameters themselves
/// when `device` is the host, and the blocks' handles wherever the parameters are) is
/// [`Error::OutOfMemory`] — rather than allocating block after block until memory runs out.
fn check_model_size(
    op: &'static str,
    sizes: impl FnOnce() -> String,
    elements: Option<usize>,
    blocks: usize,
    device: Device,
) -> Result<()> {
    let elements = elements.ok_or_else(|| Error::InvalidArgument {
        op,
        reason: format!("{}: the parameter count overflows", sizes()),
    })?;
    let handles = blocks.saturating_mul(BLOCK_HOST_BYTES);
    let host = if device.is_cuda() {
        handles
    } else {
        elements
            .saturating_mul(DType::F32.size())
            .saturating_add(handles)
    };
    genesis_storage::check_host_bytes(host)?;
    Ok(())
}

/// One transformer block: pre-LayerNorm causal self-attention and a GELU (tanh) MLP, each
/// added to the residual stream (nanoGPT's `Block`).
#[derive(Debug)]
pub struct Block {
    ln_1: LayerNorm,
    c_attn: Linear,
    attn_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    mlp_proj: Linear,
    n_head: usize,
}

impl Block {
    /// A block of width `n_embd` with `n_head` heads, initialised as in [`Gpt2::new`] for
    /// `n_layer` layers.
    pub fn new(
        n_embd: usize,
        n_head: usize,
        n_layer: usize,
        g: &Generator,
        device: Device,
    ) -> Result<Block> {
        if n_head == 0 || !n_embd.is_multiple_of(n_head) {
            return Err(Error::InvalidArgument {
                op: "Block::new",
                reason: format!("n_embd {n_embd} is not a multiple of n_head {n_head}"),
            });
        }
        check_model_size(
            "Block::new",
            || format!("a block of width {n_embd}"),
            block_elements(n_embd),
            1,
            device,
        )?;
        let linear = |i: usize, o: usize, std: f64| -> Result<Linear> {
            let l = Linear::new(i, o, true, g, device)?;
            init::normal_(&l.weight, 0.0, std, g)?;
            if let Some(b) = &l.bias {
                init::constant_(b, 0.0)?;
            }
            Ok(l)
        };
        let c = n_embd;
        let proj_std = 0.02 / (2.0 * n_layer.max(1) as f64).sqrt();
        Ok(Block {
            ln_1: LayerNorm::new(&[c], 1e-5, true, device)?,
            c_attn: linear(c, 3 * c, 0.02)?,
            attn_proj: linear(c, c, proj_std)?,
            ln_2: LayerNorm::new(&[c], 1e-5, true, device)?,
            c_fc: linear(c, 4 * c, 0.02)?,
            mlp_proj: linear(4 * c, c, proj_std)?,
            n_head,
        })
    }

    /// The block applied to `x + pending` (`[B, T, C]`; `pending`: the previous block's MLP
    /// output, not yet added): causal self-attention through
    /// [`Tensor::scaled_dot_product_attention`] (flash attention on CUDA bf16/f16 heads of 64 or
    /// 128, reading q, k and v in place from the packed projection), then the MLP. Returns the
    /// residual stream after the attention and the MLP's output, whose sum is the block's
    /// output: each residual add is formed by the layer norm that reads it
    /// ([`LayerNorm::forward_add`]), one pass over the stream instead of two.
    fn causal_forward(&self, x: &Tensor, pending: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let (b, t, c) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (h, d) = (self.n_head, c / self.n_head);
        let heads = |z: &Tensor| -> Result<Tensor> {
            z.reshape([b as isize, t as isize, h as isize, d as isize])?
                .transpose(1, 2)
        };
        let (x, a) = norm_add(&self.ln_1, x, pending)?;
        // Three pieces of width `c`, also when `c` is 0 (`split(0, ..)` gives one piece).
        let qkv = self.c_attn.forward(&a)?.split_sizes(&[c, c, c], 2)?;
        let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
        let y = q
            .scaled_dot_product_attention(&k, &v, true, None)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape([b as isize, t as isize, c as isize])?;
        let (x, a) = norm_add(&self.ln_2, &x, Some(&self.attn_proj.forward(&y)?))?;
        // The MLP's first layer and its GELU as one op: its backward sums the bias's
        // gradient in the activation's gradient pass.
        let fc = &self.c_fc;
        let m = self
            .mlp_proj
            .forward(&a.linear_gelu_tanh(&fc.weight, fc.bias.as_ref())?)?;
        Ok((x, m))
    }

    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let parts: [(&str, &dyn Module); 6] = [
            ("ln_1", &self.ln_1),
            ("attn.c_attn", &self.c_attn),
            ("attn.c_proj", &self.attn_proj),
            ("ln_2", &self.ln_2),
            ("mlp.c_fc", &self.c_fc),
            ("mlp.c_proj", &self.mlp_proj),
        ];
        parts
            .iter()
            .flat_map(|(name, m)| {
                m.named_parameters()
                    .into_iter()
                    .map(move |(n, t)| (format!("{prefix}.{name}.{n}"), t))
            })
            .collect()
    }
}

/// GPT-2: token and position embeddings, `n_layer` blocks, a final LayerNorm and the output
/// head tied to the token embedding (`lm_head.weight` is `transformer.wte.weight`).
#[derive(Debug)]
pub struct Gpt2 {
    /// The sizes.
    pub config: Gpt2Config,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Arc<Block>>,
    ln_f: LayerNorm,
    /// Recompute each block's activations in the backward instead of keeping them
    /// ([`genesis::autograd::checkpoint`]): less memory, the forward twice.
    pub recompute: bool,
}

/// `ln` applied to `x` for a product: under autocast, with float32 rows, the result written in
/// the autocast dtype by the norm itself ([`LayerNorm::forward_to`]), which the product would
/// otherwise convert it to.
fn norm(ln: &LayerNorm, x: &Tensor) -> Result<Tensor> {
    match genesis::autograd::autocast_dtype() {
        Some(d) if x.dtype() == DType::F32 => ln.forward_to(x, d),
        _ => ln.forward(x),
    }
}

/// `(h, norm(ln, h))` with `h = x + r` (`h = x` without `r`), the add formed by the norm
/// ([`LayerNorm::forward_add`]).
fn norm_add(ln: &LayerNorm, x: &Tensor, r: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
    let Some(r) = r else {
        return Ok((x.clone(), norm(ln, x)?));
    };
    match genesis::autograd::autocast_dtype() {
        Some(d) if x.dtype() == DType::F32 => ln.forward_add(x, r, Some(d)),
        _ => ln.forward_add(x, r, None),
    }
}

impl Gpt2 {
    /// A model with nanoGPT's initialisation drawn from `g`: normal weights of standard
    /// deviation 0.02 (the residual projections 0.02 / √(2 n_layer)), zero biases, LayerNorm
    /// ones and zeros; float32 on `device`.
    pub fn new(config: Gpt2Config, g: &Generator, device: Device) -> Result<Gpt2> {
        let c = config.n_embd;
        if config.n_head == 0 || !c.is_multiple_of(config.n_head) {
            return Err(Error::InvalidArgument {
                op: "Gpt2::new",
                reason: format!("n_embd {c} is not a multiple of n_head {}", config.n_head),
            });
        }
        // Embeddings, blocks and the final norm, counted before any is allocated.
        let elements = (|| {
            let embeddings = config
                .vocab_size
                .checked_add(config.block_size)?
                .checked_mul(c)?;
            let blocks = block_elements(c)?.checked_mul(config.n_layer)?;
            embeddings
                .checked_add(blocks)?
                .checked_add(c.checked_mul(2)?)
        })();
        check_model_size(
            "Gpt2::new",
            || format!("{config:?}"),
            elements,
            config.n_layer,
            device,
        )?;
        let normal = |shape: &[usize], std: f64| -> Result<Tensor> {
            let t = Tensor::empty(shape, DType::F32, device)?;
            init::normal_(&t, 0.0, std, g)?;
            t.requires_grad_(true)
        };
        let wte = normal(&[config.vocab_size, c], 0.02)?;
        let wpe = normal(&[config.block_size, c], 0.02)?;
        let blocks = (0..config.n_layer)
            .map(|_| Block::new(c, config.n_head, config.n_layer, g, device).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt2 {
            config,
            wte,
            wpe,
            blocks,
            ln_f: LayerNorm::new(&[c], 1e-5, true, device)?,
            recompute: false,
        })
    }

    /// The logits `[B, T, vocab]` of the int64 tokens `idx` (`[B, T]`, `T <= block_size`).
    pub fn logits(&self, idx: &Tensor) -> Result<Tensor> {
        if idx.dim() != 2 || idx.shape()[1] > self.config.block_size {
            return Err(Error::InvalidArgument {
                op: "Gpt2::logits",
                reason: format!(
                    "tokens of shape {:?} ([batch, time], time at most {})",
                    idx.shape(),
                    self.config.block_size
                ),
            });
        }
        let (b, t) = (idx.shape()[0], idx.shape()[1]);
        let c = self.config.n_embd;
        let tok = self
            .wte
            .index_select(0, &idx.reshape([-1])?)?
            .reshape([b as isize, t as isize, c as isize])?;
        let pos = self.wpe.narrow(0, 0, t)?;
        let mut x = tok.add(&pos)?;
        // Only the sum is needed from here on (the embedding's backward keeps the indices).
        drop(tok);
        // The last block's MLP output, added to the stream by the next norm.
        let mut pending: Option<Tensor> = None;
        for block in &self.blocks {
            if self.recompute {
                // A checkpoint keeps its inputs and returns one tensor: the block's sum.
                let block = block.clone();
                let inputs: Vec<&Tensor> = std::iter::once(&x).chain(&pending).collect();
                x = genesis::autograd::checkpoint(&inputs, move |t| {
                    let (h, m) = block.causal_forward(&t[0], t.get(1))?;
                    h.add(&m)
                })?;
                pending = None;
            } else {
                let (h, m) = block.causal_forward(&x, pending.as_ref())?;
                (x, pending) = (h, Some(m));
            }
        }
        // Under autocast the head reads the normalised rows in the autocast dtype, written so
        // by the norm: no float32 rows are held through the product (the logits are the
        // step's largest tensor).
        let (x, h) = norm_add(&self.ln_f, &x, pending.as_ref())?;
        drop((x, pending));
        h.linear(&self.wte, None)
    }

    /// The mean cross entropy of the next-token predictions for `idx` against `targets`
    /// (both `[B, T]` int64).
    pub fn loss(&self, idx: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let logits = self.logits(idx)?;
        let v = self.config.vocab_size as isize;
        crate::loss::cross_entropy(&logits.reshape([-1, v])?, &targets.reshape([-1])?)
    }
}

impl Module for Block {
    /// The block with a causal mask over the sequence (`x`: `[B, T, C]`).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.dim() != 3 {
            return Err(Error::InvalidArgument {
                op: "Block::forward",
                reason: format!("expects [batch, time, width], got {:?}", x.shape()),
            });
        }
        let (h, m) = self.causal_forward(x, None)?;
        h.add(&m)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Block::named_parameters(self, "")
            .into_iter()
            .map(|(n, t)| (n.trim_start_matches('.').to_string(), t))
            .collect()
    }
}

impl Module for Gpt2 {
    /// [`Gpt2::logits`].
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        self.logits(idx)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = vec![
            ("transformer.wte.weight".to_string(), self.wte.clone()),
            ("transformer.wpe.weight".to_string(), self.wpe.clone()),
        ];
        for (i, b) in self.blocks.iter().enumerate() {
            p.extend(b.named_parameters(&format!("transformer.h.{i}")));
        }
        p.extend(
            self.ln_f
                .named_parameters()
                .into_iter()
                .map(|(n, t)| (format!("transformer.ln_f.{n}"), t)),
        );
        p
    }

    /// The parameters, and `lm_head.weight` (the token embedding, as PyTorch's state_dict of
    /// a tied model lists it).
    fn state_dict(&self) -> BTreeMap<String, Tensor> {
        let mut s: BTreeMap<String, Tensor> = self
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (n, t.detach()))
            .collect();
        s.insert("lm_head.weight".into(), self.wte.detach());
        s
    }

    /// As [`Module::load_state_dict`]; a `lm_head.weight` in `state` must equal the token
    /// embedding's (the head is tied to it).
    fn load_state_dict(&self, state: &BTreeMap<String, Tensor>, strict: bool) -> Result<()> {
        let mut own = state.clone();
        if let Some(head) = own.remove("lm_head.weight") {
            let wte = own.get("transformer.wte.weight").unwrap_or(&head);
            // The shapes first: `eq` of others would broadcast, or fail with its own error.
            let same = head.shape() == wte.shape()
                && no_grad(|| head.to(wte.device())?.eq(wte)?.all()?.item::<bool>())?;
            if !same {
                return Err(Error::InvalidArgument {
                    op: "load_state_dict",
                    reason: "lm_head.weight differs from transformer.wte.weight (the head is \
                             tied to the token embedding)"
                        .into(),
                });
            }
        }
        load_named(&self.named_parameters(), &own, strict)
    }
}

/// [`Module::load_state_dict`]'s default for an explicit list of parameters.
fn load_named(
    own: &[(String, Tensor)],
    state: &BTreeMap<String, Tensor>,
    strict: bool,
) -> Result<()> {
    struct List<'a>(&'a [(String, Tensor)]);
    impl Module for List<'_> {
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            Ok(x.clone())
        }
        fn named_parameters(&self) -> Vec<(String, Tensor)> {
            self.0.to_vec()
        }
    }
    List(own).load_state_dict(state, strict)
}

#[cfg(test)]
mod tests {
    use super::Gpt2Config;

    #[test]
    fn named_sizes_are_the_examples() {
        assert_eq!(Gpt2Config::named("124m"), Some(Gpt2Config::gpt2_124m()));
        let tiny = Gpt2Config::named("tiny").unwrap();
        assert_eq!(
            (
                tiny.block_size,
                tiny.vocab_size,
                tiny.n_layer,
                tiny.n_head,
                tiny.n_embd
            ),
            (64, 256, 2, 2, 64)
        );
        let small = Gpt2Config::named("small").unwrap();
        assert_eq!(
            (small.block_size, small.n_layer, small.n_embd),
            (256, 4, 128)
        );
        assert_eq!(Gpt2Config::named("gpt-5"), None);
    }
}
