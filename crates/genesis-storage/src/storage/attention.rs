//! Flash attention of storages (`genesis_kernels::attention`): the forward and backward on the
//! CUDA kernels (bf16, f16 with head dims 64 and 128; f32 with head dim 64) or their CPU twins
//! (f32, f64, f16, bf16; any head dim), operands read in place through their strides.

use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides};

use super::{Mem, MemMut, Storage, check_float_only, mixed};
use crate::Result;
use crate::compute::{AttentionGrads, Compute};

/// An attention operand: a storage and the element its first row starts at.
pub type AttentionOperand<'a> = (&'a Storage, usize);

impl Storage {
    /// The elements of `x` from its start on (an error when the start lies past its end).
    fn tail_len(name: &'static str, x: AttentionOperand<'_>) -> Result<usize> {
        x.0.check_range(name, x.1, 0)?;
        Ok(x.0.len - x.1)
    }

    /// Flash attention's forward (see `genesis_kernels::attention` for the semantics, the
    /// strides and the GPU's conditions): `q`, `k`, `v` (one float dtype and device) read in
    /// place through `s`; returns `o`, a new storage of `o_len` elements written through
    /// `s.o`, and `lse` (`[batch, heads, tq]`, [`Storage::fused_acc_dtype`]).
    ///
    /// Errors: dtypes or devices that differ, a dtype or head dim the device's path does not
    /// take, operands or strides that reach past a storage, outputs that overlap themselves.
    #[track_caller]
    pub fn attention_forward(
        shape: &AttentionShape,
        s: &ForwardStrides,
        q: AttentionOperand<'_>,
        k: AttentionOperand<'_>,
        v: AttentionOperand<'_>,
        o_len: usize,
    ) -> Result<(Storage, Storage)> {
        let name = "scaled_dot_product_attention";
        q.0.check_binary_types(name, k.0)?;
        q.0.check_binary_types(name, v.0)?;
        let dtype = q.0.dtype;
        check_float_only(name, true, dtype)?;
        let len = [
            Self::tail_len(name, q)?,
            Self::tail_len(name, k)?,
            Self::tail_len(name, v)?,
        ];
        let n = shape.lse_len()?;
        let mut o = Storage::uninit(o_len, dtype, q.0.device())?;
        let mut lse = Storage::uninit(n, Self::fused_acc_dtype(dtype), q.0.device())?;
        let at = [q.1, k.1, v.1];
        let (qr, kr, vr) = (q.0.read(name)?, k.0.read(name)?, v.0.read(name)?);
        match (
            qr.mem(),
            kr.mem(),
            vr.mem(),
            o.mem_mut(name)?,
            lse.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(b), Mem::Host(c), MemMut::Host(x), MemMut::Host(l)) => {
                a.attention_forward(dtype, shape, s, at, len, b, c, x, o_len, l)?
            }
            (Mem::Cuda(a), Mem::Cuda(b), Mem::Cuda(c), MemMut::Cuda(x), MemMut::Cuda(l)) => {
                a.attention_forward(dtype, shape, s, at, len, b, c, x, o_len, l)?
            }
            _ => return Err(mixed(name)),
        }
        Ok((o, lse))
    }

    /// Flash attention's backward: from `q`, `k`, `v`, the forward's `o` and `lse`, and
    /// `dout` (`o`'s gradient), new storages `dq`, `dk`, `dv` of `out_len` elements written
    /// through `s.dq`, `s.dk`, `s.dv`. Errors as [`Storage::attention_forward`], and an `lse`
    /// of another dtype or device.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward(
        shape: &AttentionShape,
        s: &BackwardStrides,
        q: AttentionOperand<'_>,
        k: AttentionOperand<'_>,
        v: AttentionOperand<'_>,
        o: AttentionOperand<'_>,
        dout: AttentionOperand<'_>,
        lse: &Storage,
        out_len: [usize; 3],
    ) -> Result<[Storage; 3]> {
        let (dtype, dev) = (q.0.dtype, q.0.device());
        let mut d = [
            Storage::uninit(out_len[0], dtype, dev)?,
            Storage::uninit(out_len[1], dtype, dev)?,
            Storage::uninit(out_len[2], dtype, dev)?,
        ];
        let [dq, dk, dv] = &mut d;
        Self::attention_backward_into(
            shape,
            s,
            [q, k, v, o, dout],
            lse,
            Grads::Separate([dq, dk, dv], out_len),
        )?;
        Ok(d)
    }

    /// [`Storage::attention_backward`] writing `dq`, `dk` and `dv` into one new storage of
    /// `len` elements, from its elements `at` (through `s.dq`, `s.dk`, `s.dv`): the gradients
    /// of q, k and v that are views of one storage, laid out as it is (GPT-2's packed
    /// projection), so that its gradient needs no copy. The three `[B, H, T, D]` layouts must
    /// share no element ([`crate::Error::Aliased`] otherwise); the elements outside them are left as
    /// they were allocated. CUDA only (an unsupported-kernel error on the host). With `sums`,
    /// also returns the tile column sums where the kernels form them
    /// (`genesis_kernels::attention::gpu_attention_backward_packed`: f32, laid out there).
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward_packed(
        shape: &AttentionShape,
        s: &BackwardStrides,
        q: AttentionOperand<'_>,
        k: AttentionOperand<'_>,
        v: AttentionOperand<'_>,
        o: AttentionOperand<'_>,
        dout: AttentionOperand<'_>,
        lse: &Storage,
        len: usize,
        at: [usize; 3],
        sums: bool,
    ) -> Result<(Storage, Option<Storage>)> {
        let name = "scaled_dot_product_attention_backward";
        let piece = |st: &genesis_kernels::attention::Strides, rows: usize, a: usize| {
            let sh = [shape.batch, shape.heads, rows, shape.head_dim];
            let to = |x: usize| isize::try_from(x).unwrap_or(isize::MAX);
            crate::Layout::new(&sh, &[to(st.batch), to(st.head), to(st.seq), 1], a)
        };
        let pieces = [
            piece(&s.dq, shape.tq, at[0]),
            piece(&s.dk, shape.tk, at[1]),
            piece(&s.dv, shape.tk, at[2]),
        ];
        if !(pieces[0].disjoint_from(&pieces[1])
            && pieces[0].disjoint_from(&pieces[2])
            && pieces[1].disjoint_from(&pieces[2]))
        {
            return Err(crate::Error::Aliased { op: name });
        }
        let mut d = Storage::uninit(len, q.0.dtype, q.0.device())?;
        let mut partials = match sums && q.0.device() != crate::Device::Cpu {
            true => Some(Storage::uninit(
                genesis_kernels::attention::backward_sums_len(shape),
                crate::DType::F32,
                q.0.device(),
            )?),
            false => None,
        };
        let wrote = Self::attention_backward_into(
            shape,
            s,
            [q, k, v, o, dout],
            lse,
            Grads::Packed(&mut d, len, at, partials.as_mut()),
        )?;
        Ok((d, partials.filter(|_| wrote)))
    }

    /// The checks and the kernels of the two backwards.
    #[track_caller]
    fn attention_backward_into(
        shape: &AttentionShape,
        s: &BackwardStrides,
        ins: [AttentionOperand<'_>; 5],
        lse: &Storage,
        outs: Grads<'_>,
    ) -> Result<bool> {
        let name = "scaled_dot_product_attention_backward";
        let [q, k, v, o, dout] = ins;
        for x in [k, v, o, dout] {
            q.0.check_binary_types(name, x.0)?;
        }
        let dtype = q.0.dtype;
        check_float_only(name, true, dtype)?;
        lse.expect_dtype(name, Self::fused_acc_dtype(dtype))?;
        lse.check_range(name, 0, shape.lse_len()?)?;
        let len = [
            Self::tail_len(name, q)?,
            Self::tail_len(name, k)?,
            Self::tail_len(name, v)?,
            Self::tail_len(name, o)?,
            Self::tail_len(name, dout)?,
        ];
        let at = [q.1, k.1, v.1, o.1, dout.1];
        let r = [
            q.0.read(name)?,
            k.0.read(name)?,
            v.0.read(name)?,
            o.0.read(name)?,
            dout.0.read(name)?,
        ];
        let l = lse.read(name)?;
        let mems = [r[0].mem(), r[1].mem(), r[2].mem(), r[3].mem(), r[4].mem()];
        let wrote = match outs {
            Grads::Separate([dq, dk, dv], out_len) => {
                match (
                    mems,
                    l.mem(),
                    [dq.mem_mut(name)?, dk.mem_mut(name)?, dv.mem_mut(name)?],
                ) {
                    (
                        [
                            Mem::Host(a),
                            Mem::Host(b),
                            Mem::Host(c),
                            Mem::Host(d),
                            Mem::Host(e),
                        ],
                        Mem::Host(l),
                        [MemMut::Host(x), MemMut::Host(y), MemMut::Host(z)],
                    ) => a.attention_backward(
                        dtype,
                        shape,
                        s,
                        at,
                        len,
                        [b, c, d, e],
                        l,
                        AttentionGrads::Separate([x, y, z], out_len),
                    )?,
                    (
                        [
                            Mem::Cuda(a),
                            Mem::Cuda(b),
                            Mem::Cuda(c),
                            Mem::Cuda(d),
                            Mem::Cuda(e),
                        ],
                        Mem::Cuda(l),
                        [MemMut::Cuda(x), MemMut::Cuda(y), MemMut::Cuda(z)],
                    ) => a.attention_backward(
                        dtype,
                        shape,
                        s,
                        at,
                        len,
                        [b, c, d, e],
                        l,
                        AttentionGrads::Separate([x, y, z], out_len),
                    )?,
                    _ => return Err(mixed(name)),
                }
            }
            Grads::Packed(dqkv, n, out_at, sums) => match (
                mems,
                l.mem(),
                dqkv.mem_mut(name)?,
                sums.map(|x| x.mem_mut(name)).transpose()?,
            ) {
                (
                    [
                        Mem::Host(a),
                        Mem::Host(b),
                        Mem::Host(c),
                        Mem::Host(d),
                        Mem::Host(e),
                    ],
                    Mem::Host(l),
                    MemMut::Host(x),
                    None,
                ) => a.attention_backward(
                    dtype,
                    shape,
                    s,
                    at,
                    len,
                    [b, c, d, e],
                    l,
                    AttentionGrads::Packed(x, n, out_at, None),
                )?,
                (
                    [
                        Mem::Cuda(a),
                        Mem::Cuda(b),
                        Mem::Cuda(c),
                        Mem::Cuda(d),
                        Mem::Cuda(e),
                    ],
                    Mem::Cuda(l),
                    MemMut::Cuda(x),
                    sums,
                ) => {
                    let sums = match sums {
                        None => None,
                        Some(MemMut::Cuda(y)) => Some(y),
                        Some(_) => return Err(mixed(name)),
                    };
                    a.attention_backward(
                        dtype,
                        shape,
                        s,
                        at,
                        len,
                        [b, c, d, e],
                        l,
                        AttentionGrads::Packed(x, n, out_at, sums),
                    )?
                }
                _ => return Err(mixed(name)),
            },
        };
        Ok(wrote)
    }
}

/// Where [`Storage::attention_backward_into`] writes: three storages (with the elements each
/// holds) or one (its elements, where each gradient starts, and the tile column sums' buffer
/// when asked for).
enum Grads<'a> {
    Separate([&'a mut Storage; 3], [usize; 3]),
    Packed(&'a mut Storage, usize, [usize; 3], Option<&'a mut Storage>),
}
