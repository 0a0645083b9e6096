//! [`Tensor::scaled_dot_product_attention`] (PyTorch's `F.scaled_dot_product_attention`):
//! flash attention on CUDA bf16/f16 operands of head dim 64 or 128 (one recorded op, its
//! backward the flash backward from the saved inputs, output and log-sum-exps: no `[L, S]`
//! matrix is stored), the composed product, mask, softmax and product otherwise.

use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides, Strides};
use genesis_storage::Storage;

use crate::autograd::Saved;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// The strides of a `[batch, heads, t, d]` view (rank 3: one head) for the kernels, when its
/// last dimension is contiguous and no stride is negative.
fn strides_of(t: &Tensor) -> Option<(Strides, usize)> {
    let l = t.layout();
    let s = l.strides();
    let n = s.len();
    if s[n - 1] != 1 && t.shape()[n - 1] > 1 {
        return None;
    }
    let u = |i: usize| usize::try_from(s[i]).ok();
    let st = if n == 4 {
        Strides {
            batch: u(0)?,
            head: u(1)?,
            seq: u(2)?,
        }
    } else {
        Strides {
            batch: u(0)?,
            head: 0,
            seq: u(1)?,
        }
    };
    Some((st, l.offset()))
}

/// `[batch, heads]` of a rank-3 or rank-4 operand.
fn batch_heads(t: &Tensor) -> (usize, usize) {
    let s = t.shape();
    if s.len() == 4 {
        (s[0], s[1])
    } else {
        (s[0], 1)
    }
}

impl Tensor {
    /// Attention of queries `self` (`[..., L, E]`) over keys `key` (`[..., S, E]`) and values
    /// `value` (`[..., S, Ev]`), PyTorch's `F.scaled_dot_product_attention(q, k, v,
    /// is_causal=..., scale=...)`: `softmax(q kᵀ * scale + mask) v` with `scale` `1 / sqrt(E)`
    /// unless given, and with `is_causal` query `i` seeing keys `j <= i` only (the mask
    /// aligned to the top left, as PyTorch's). The leading dimensions of the three broadcast
    /// (a size-1 or missing one is expanded, a view); the result is `[..., L, Ev]` in their
    /// dtype.
    ///
    /// CUDA bf16 and f16 operands of rank 3 or 4 with `E == Ev` of 64 or 128, and f32 ones
    /// with `E == Ev == 64` (f32 inputs and sums, each product as three TF32 tensor-core
    /// products, the arithmetic of PyTorch's f32 attention), read in place (a view into a
    /// packed projection is fine) when their rows are 16-byte aligned, run as flash
    /// attention: the `[L, S]` scores are never stored, forward or backward, and the
    /// result is a `[B, H, L, E]` view of a `[B, L, H, E]` tensor (its `transpose(1, 2)` is
    /// contiguous, as PyTorch's). Anything else runs the composed ops (the product, the mask,
    /// softmax and the product, each under its own [`autocast`](crate::autograd::autocast)
    /// policy). Under autocast, float32 CUDA operands of those head dims are cast to the
    /// autocast dtype and take the flash path (PyTorch's lower-precision list).
    ///
    /// ```
    /// use genesis::{DType, Device, Generator};
    /// # fn main() -> genesis::Result<()> {
    /// let g = Generator::new(0);
    /// let q = g.randn([2, 4, 8, 16], DType::F32, Device::Cpu)?;
    /// let y = q.scaled_dot_product_attention(&q, &q, true, None)?;
    /// assert_eq!(y.shape(), &[2, 4, 8, 16]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn scaled_dot_product_attention(
        &self,
        key: &Tensor,
        value: &Tensor,
        is_causal: bool,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let (q, k, v) = (self, key, value);
        let (rq, rk, rv) = (q.dim(), k.dim(), v.dim());
        let bad = |reason: String| Error::InvalidArgument { op: OP, reason };
        // Leading dimensions that differ broadcast, as PyTorch's (one head of keys for many
        // of queries, say): each operand is expanded to the common ones, a view.
        if rq >= 2
            && rk >= 2
            && rv >= 2
            && (q.shape()[..rq - 2] != k.shape()[..rk - 2]
                || q.shape()[..rq - 2] != v.shape()[..rv - 2])
        {
            let lead =
                crate::tensor::broadcast_shape(OP, &q.shape()[..rq - 2], &k.shape()[..rk - 2])
                    .and_then(|l| crate::tensor::broadcast_shape(OP, &l, &v.shape()[..rv - 2]));
            if let Ok(lead) = lead {
                let grow = |t: &Tensor| -> Result<Tensor> {
                    let r = t.dim();
                    let mut shape = lead.clone();
                    shape.extend_from_slice(&t.shape()[r - 2..]);
                    t.expand(shape.as_slice())
                };
                return grow(q)?.scaled_dot_product_attention(
                    &grow(k)?,
                    &grow(v)?,
                    is_causal,
                    scale,
                );
            }
        }
        if rq < 2 || rk != rq || rv != rq {
            return Err(bad(format!(
                "query, key and value must have one rank of at least 2, got shapes {:?}, {:?} \
                 and {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            )));
        }
        let n = rq;
        let (e, s) = (q.shape()[n - 1], k.shape()[n - 2]);
        if k.shape()[n - 1] != e
            || v.shape()[n - 2] != s
            || q.shape()[..n - 2] != k.shape()[..n - 2]
            || q.shape()[..n - 2] != v.shape()[..n - 2]
        {
            return Err(bad(format!(
                "shapes {:?}, {:?} and {:?} are not query [..., L, E], key [..., S, E] and \
                 value [..., S, Ev] with equal leading dimensions",
                q.shape(),
                k.shape(),
                v.shape()
            )));
        }
        // One floating dtype (after autocast's casts), as PyTorch requires.
        let auto = crate::autograd::autocast_dtype();
        let eff = |t: &Tensor| match auto {
            Some(d) if t.dtype() == DType::F32 => d,
            _ => t.dtype(),
        };
        if eff(q) != eff(k) || eff(q) != eff(v) || !q.dtype().is_float() {
            return Err(bad(format!(
                "expected query, key and value of one floating dtype, got {}, {} and {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            )));
        }
        let scale = scale.unwrap_or(1.0 / (e.max(1) as f64).sqrt());
        if !scale.is_finite() {
            return Err(bad(format!("scale {scale} is not finite")));
        }
        // Under autocast, float32 operands that would take the flash path in the autocast
        // dtype are cast to it; the composed path applies each op's own policy.
        let flash_dtype = match crate::autograd::autocast_dtype() {
            Some(d) if matches!(q.device(), Device::Cuda(_)) && matches!(e, 64 | 128) => Some(d),
            _ => None,
        };
        let flash = if let Some(d) = flash_dtype {
            let cast = |t| crate::autograd::autocast_lower(t, d);
            let (q, k, v) = (cast(q)?, cast(k)?, cast(v)?);
            q.flash_attention(&k, &v, is_causal, scale)?
        } else {
            self.flash_attention(k, v, is_causal, scale)?
        };
        if let Some(y) = flash {
            return Ok(y);
        }
        // Composed: the scale goes on the smaller of the query ([.., L, E]) and the scores
        // ([.., L, S]), and the causal mask is an additive [L, S] bias (0 or -inf) that the
        // add reads broadcast: one pass over the scores, no copy of them and no mask of their
        // shape. Masked scores are -inf, so softmax gives them 0 (PyTorch's math path).
        let l = q.shape()[n - 2];
        let scale_query = e <= s;
        let scaled;
        let q = if scale_query {
            scaled = q.mul(scale)?;
            &scaled
        } else {
            q
        };
        let mut scores = q.matmul(&k.transpose(-2, -1)?)?;
        if !scale_query {
            scores = scores.mul(scale)?;
        }
        if is_causal {
            let above = Tensor::ones([l, s], DType::Bool, q.device())?.triu(1)?;
            let bias = Tensor::zeros([l, s], scores.dtype(), q.device())?
                .masked_fill(&above, f64::NEG_INFINITY)?;
            scores = scores.add(&bias)?;
        }
        scores.softmax(-1)?.matmul(v)
    }

    /// The flash path of [`Tensor::scaled_dot_product_attention`], or `None` when the
    /// operands do not suit it.
    fn flash_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        causal: bool,
        scale: f64,
    ) -> Result<Option<Tensor>> {
        let q = self;
        let n = q.dim();
        let dtype = q.dtype();
        let e = q.shape()[n - 1];
        let suits = matches!(q.device(), Device::Cuda(_))
            && (matches!(dtype, DType::BF16 | DType::F16) && matches!(e, 64 | 128)
                || dtype == DType::F32 && e == 64)
            && k.dtype() == dtype
            && v.dtype() == dtype
            && (n == 3 || n == 4)
            && v.shape()[n - 1] == e
            && k.device() == q.device()
            && v.device() == q.device();
        if !suits {
            return Ok(None);
        }
        let (Some(sq), Some(sk), Some(sv)) = (strides_of(q), strides_of(k), strides_of(v)) else {
            return Ok(None);
        };
        let (b, h) = batch_heads(q);
        let (l, s) = (q.shape()[n - 2], k.shape()[n - 2]);
        let shape = AttentionShape {
            batch: b,
            heads: h,
            tq: l,
            tk: s,
            head_dim: e,
            causal,
            scale: scale as f32,
        };
        // The output as [B, L, H, E].
        let bthd = Strides::bthd(h, l, e);
        let fs = ForwardStrides {
            q: sq.0,
            k: sk.0,
            v: sv.0,
            o: bthd,
        };
        let o_len = b * l * h * e;
        if shape.check_gpu().is_err()
            || ![(q, sq), (k, sk), (v, sv)]
                .iter()
                .all(|(t, o)| aligned(t, *o))
        {
            return Ok(None);
        }
        let lse_cell = std::cell::RefCell::new(None);
        let out = crate::autograd::op(
            OP,
            &[q, k, v],
            || {
                let (o, lse) = Storage::attention_forward(
                    &shape,
                    &fs,
                    (q.view.storage(), sq.1),
                    (k.view.storage(), sk.1),
                    (v.view.storage(), sv.1),
                    o_len,
                )?;
                *lse_cell.borrow_mut() = Some(lse);
                let o = Tensor::from_storage(o, &[b, l, h, e])?;
                if n == 4 {
                    o.transpose(1, 2)
                } else {
                    o.reshape([b as isize, l as isize, e as isize])
                }
            },
            |out| {
                let lse = lse_cell.borrow_mut().take().expect("set by the forward");
                let saved = [
                    Saved::new(OP, q),
                    Saved::new(OP, k),
                    Saved::new(OP, v),
                    Saved::new(OP, out),
                ];
                Box::new(move |g, _| {
                    let [q, k, v, o] = [
                        saved[0].get()?,
                        saved[1].get()?,
                        saved[2].get()?,
                        saved[3].get()?,
                    ];
                    let g = match strides_of(g) {
                        Some(o) if aligned(g, o) => g.clone(),
                        _ => g.contiguous()?,
                    };
                    let ops = [&q, &k, &v, &o, &g].map(|t| strides_of(t).expect("checked layouts"));
                    let bs = BackwardStrides {
                        q: ops[0].0,
                        k: ops[1].0,
                        v: ops[2].0,
                        o: ops[3].0,
                        dout: ops[4].0,
                        dq: bthd,
                        dk: Strides::bthd(h, s, e),
                        dv: Strides::bthd(h, s, e),
                    };
                    // q, k and v read one storage, no two sharing an element (the thirds of
                    // a packed projection): their gradients go into one buffer of their reach,
                    // each where its input sits, and the engine takes that buffer as the
                    // projection's gradient without adding the three into it.
                    if let Some(grads) = packed_grads(&shape, &bs, [&q, &k, &v, &o, &g], &lse)? {
                        return Ok(grads.into_iter().map(Some).collect());
                    }
                    let kv_len = b * s * h * e;
                    let [dq, dk, dv] = Storage::attention_backward(
                        &shape,
                        &bs,
                        (q.view.storage(), ops[0].1),
                        (k.view.storage(), ops[1].1),
                        (v.view.storage(), ops[2].1),
                        (o.view.storage(), ops[3].1),
                        (g.view.storage(), ops[4].1),
                        &lse,
                        [o_len, kv_len, kv_len],
                    )?;
                    let view = |x: Storage, t: usize| -> Result<Tensor> {
                        let x = Tensor::from_storage(x, &[b, t, h, e])?;
                        if n == 4 {
                            x.transpose(1, 2)
                        } else {
                            x.reshape([b as isize, t as isize, e as isize])
                        }
                    };
                    Ok(vec![
                        Some(view(dq, l)?),
                        Some(view(dk, s)?),
                        Some(view(dv, s)?),
                    ])
                })
            },
        )?;
        Ok(Some(out))
    }
}

/// The gradients of `q`, `k` and `v` (`t[..3]`; `t[3]` is the forward's output, `t[4]` its
/// gradient) as views of one buffer laid out as the storage they read, offered to the
/// autograd engine ([`crate::autograd::offer_packed`]), when they read one storage, share no
/// element and together cover their reach; `None` otherwise.
fn packed_grads(
    shape: &AttentionShape,
    bs: &BackwardStrides,
    t: [&Tensor; 5],
    lse: &Storage,
) -> Result<Option<[Tensor; 3]>> {
    let [q, k, v, o, g] = t;
    let same = |x: &Tensor| std::sync::Arc::ptr_eq(x.view.storage(), q.view.storage());
    let layouts = [q.layout(), k.layout(), v.layout()];
    let apart = layouts[0].disjoint_from(layouts[1])
        && layouts[0].disjoint_from(layouts[2])
        && layouts[1].disjoint_from(layouts[2]);
    if !(same(k) && same(v) && apart) {
        return Ok(None);
    }
    let mut spans = Vec::new();
    for l in layouts {
        match l.span() {
            Ok(Some(sp)) => spans.push(sp),
            _ => return Ok(None),
        }
    }
    let lo = spans.iter().map(|sp| sp.0).min().unwrap_or(0);
    let hi = spans.iter().map(|sp| sp.1).max().unwrap_or(0);
    if layouts.iter().map(|l| l.numel()).sum::<usize>() != hi - lo {
        return Ok(None);
    }
    let ops = [q, k, v, o, g].map(|x| strides_of(x).expect("checked layouts"));
    let bs = BackwardStrides {
        dq: ops[0].0,
        dk: ops[1].0,
        dv: ops[2].0,
        ..*bs
    };
    // The packed projection's layout (GPT-2's: rows of q, k and v side by side, heads of
    // `head_dim` one after another in each third), where the kernels' tile column sums add up
    // to the column sums of its gradient, its bias's.
    let (hd, width) = (
        shape.heads * shape.head_dim,
        3 * shape.heads * shape.head_dim,
    );
    let projection = shape.tq == shape.tk
        && (0..3).all(|i| {
            ops[i].0.seq == width
                && ops[i].0.head == shape.head_dim
                && (shape.batch <= 1 || ops[i].0.batch == shape.tq * width)
                && ops[i].1 - lo == i * hd
        })
        && hi - lo == shape.batch * shape.tq * width;
    let (d, partials) = Storage::attention_backward_packed(
        shape,
        &bs,
        (q.view.storage(), ops[0].1),
        (k.view.storage(), ops[1].1),
        (v.view.storage(), ops[2].1),
        (o.view.storage(), ops[3].1),
        (g.view.storage(), ops[4].1),
        lse,
        hi - lo,
        [ops[0].1 - lo, ops[1].1 - lo, ops[2].1 - lo],
        projection,
    )?;
    let d = Tensor::from_storage(d, &[hi - lo])?;
    if let Some(p) = partials {
        // A row of the projection's width a tile of 64 rows, the rows added in order.
        let tiles = shape.batch * shape.tq.div_ceil(64);
        let sums = Tensor::from_storage(p, &[tiles, width])?
            .sum_dim([0], false)?
            .to_dtype(d.dtype())?;
        crate::autograd::note_column_sums(&d.reshape([-1, width as isize])?, sums);
    }
    let view = |l: &crate::Layout| {
        Tensor::through(
            &d,
            &crate::Layout::new(l.shape(), l.strides(), l.offset() - lo),
        )
    };
    let grads = [view(layouts[0])?, view(layouts[1])?, view(layouts[2])?];
    crate::autograd::offer_packed(&d);
    Ok(Some(grads))
}

/// Whether the kernels take operand `t` (strides and first element `o`): rows of whole
/// 16-byte vectors (bf16, f16: the first element and every stride of a dimension longer than
/// one a multiple of 8 elements; storages start 16-byte aligned).
fn aligned(t: &Tensor, o: (Strides, usize)) -> bool {
    let (st, at) = o;
    let shape = t.shape();
    let n = shape.len();
    let long = |i: usize, stride: usize| shape[i] <= 1 || stride.is_multiple_of(8);
    let dims_ok = if n == 4 {
        long(0, st.batch) && long(1, st.head) && long(2, st.seq)
    } else {
        long(0, st.batch) && long(1, st.seq)
    };
    at.is_multiple_of(8) && dims_ok
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Generator, Tensor};

    /// On a Hopper GPU, attention over the thirds of a packed projection (GPT-2's `qkv`; head
    /// dims 64 and 128) notes the column sums of the projection's gradient, formed by the
    /// backward's kernels, and the projection's linear layer takes them as its bias's
    /// gradient: a hook on the projection finds the note within the sums' bound of the
    /// gradient's column sums, and the note it alters (plus one) arrives as the bias's
    /// gradient. Elsewhere (no GPU, other devices) there is no note, and the bias's gradient
    /// is the gradient's column sums.
    #[test]
    fn packed_attention_notes_the_projections_bias_gradient() {
        if !crate::cuda::is_available() {
            return;
        }
        let dev = Device::Cuda(0);
        let g = Generator::new(5);
        for (b, t, h, d) in [(2, 200, 3, 64), (2, 130, 2, 128)] {
            let c = h * d;
            let leaf = |shape: &[usize], scale: f64| {
                g.randn(shape, DType::F32, Device::Cpu)
                    .unwrap()
                    .mul(scale)
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap()
                    .to(dev)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap()
            };
            let (x, w, bias) = (
                leaf(&[b, t, c], 1.0),
                leaf(&[3 * c, c], 0.1),
                leaf(&[3 * c], 0.1),
            );
            let qkv = x.linear(&w, Some(&bias)).unwrap();
            qkv.retain_grad().unwrap();
            let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<Vec<f64>>));
            let seen_in = seen.clone();
            qkv.register_hook(move |gr| {
                if let Some(s) = crate::autograd::noted_column_sums(gr, &[3 * c]) {
                    *seen_in.lock().unwrap() = Some(s.to_dtype(DType::F64)?.to_vec::<f64>()?);
                    crate::autograd::note_column_sums(gr, s.add(1.0)?);
                }
                Ok(None)
            })
            .unwrap();
            let heads = |i: usize| {
                qkv.narrow(2, i * c, c)
                    .unwrap()
                    .reshape([b, t, h, d])
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
            };
            let y = heads(0)
                .scaled_dot_product_attention(&heads(1), &heads(2), true, None)
                .unwrap();
            let gy = g.randn([b, h, t, d], DType::F32, Device::Cpu).unwrap();
            let gy = gy.to_dtype(DType::BF16).unwrap().to(dev).unwrap();
            y.mul(&gy).unwrap().sum().unwrap().backward().unwrap();
            let gq = qkv.grad().unwrap().to_dtype(DType::F64).unwrap();
            let vals = gq.to_vec::<f64>().unwrap();
            let (mut sums, mut abs) = (vec![0f64; 3 * c], vec![0f64; 3 * c]);
            for (i, v) in vals.iter().enumerate() {
                sums[i % (3 * c)] += v;
                abs[i % (3 * c)] += v.abs();
            }
            let got = bias.grad().unwrap().to_dtype(DType::F64).unwrap();
            let got = got.to_vec::<f64>().unwrap();
            let hopper = crate::cuda::get_device_properties(0)
                .map(|p| p.major == 9)
                .unwrap_or(false);
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.is_some(), hopper, "a note on Hopper only");
            let tol = |j: usize| {
                (8.0 + 2.0 * ((b * t) as f64).sqrt()) * 2f64.powi(-24) * abs[j]
                    + 2.0 * 2f64.powi(-8) * sums[j].abs()
                    + 1e-6
            };
            match seen {
                Some(noted) => {
                    for j in 0..3 * c {
                        assert!(
                            (noted[j] - sums[j]).abs() <= tol(j),
                            "column {j}: noted {} against {} (tolerance {})",
                            noted[j],
                            sums[j],
                            tol(j)
                        );
                        let want = Tensor::from_slice(&[noted[j] + 1.0], [1], Device::Cpu)
                            .unwrap()
                            .to_dtype(DType::BF16)
                            .unwrap()
                            .to_vec::<half::bf16>()
                            .unwrap()[0]
                            .to_f64();
                        assert_eq!(got[j], want, "column {j}: the altered note");
                    }
                }
                None => {
                    for j in 0..3 * c {
                        assert!((got[j] - sums[j]).abs() <= tol(j), "column {j}");
                    }
                }
            }
        }
    }
}
