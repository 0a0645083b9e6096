//! `softmax`, `log_softmax` and `logsumexp` of storages along one axis, on the CPU twin or the
//! CUDA kernels (`genesis_kernels::softmax`).

use genesis_kernels::ReduceShape;
use genesis_kernels::grad::ActGrad;
use genesis_kernels::softmax::SoftmaxOp;

use super::{Mem, MemMut, Storage, byte_len, check_float_only, mixed};
use crate::compute::Compute;
use crate::{Error, Result};

impl Storage {
    /// `op` along `r` of `shape.input_len()` contiguous elements from `start`, seen as
    /// `[outer, r, inner]`, into a new storage on the same device of the same dtype (f64, f32,
    /// f16, bf16; others are [`Error::UnsupportedDType`]): the input's length for softmax and
    /// log_softmax, `[outer, inner]` for logsumexp. Computed in f32 (f64 for f64) with the
    /// line's max subtracted; see [`genesis_kernels::softmax`] for the special values (a line
    /// of no elements gives logsumexp -inf).
    #[track_caller]
    pub fn softmax(&self, op: SoftmaxOp, start: usize, shape: ReduceShape) -> Result<Storage> {
        let (name, dtype) = (op.name(), self.dtype);
        let overflow = || Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        };
        let n = shape.input_len().ok_or_else(overflow)?;
        let out_len = op.output_len(shape).ok_or_else(overflow)?;
        self.check_range(name, start, n)?;
        check_float_only(name, true, dtype)?;
        byte_len(out_len, dtype)?;
        let mut out = Storage::uninit(out_len, dtype, self.device())?;
        match (self.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), MemMut::Host(o)) => a.softmax(op, dtype, start, shape, o)?,
            (Mem::Cuda(a), MemMut::Cuda(o)) => a.softmax(op, dtype, start, shape, o)?,
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}

impl Storage {
    /// `g[g_at + i] * f'(x[x_at + i])` for `i < len` into a new storage on the same device
    /// (the gradient of activation `op`; both storages of one floating dtype): one pass of
    /// `genesis_kernels::grad`.
    #[track_caller]
    pub fn act_grad(
        op: ActGrad,
        g: &Storage,
        g_at: usize,
        x: &Storage,
        x_at: usize,
        len: usize,
    ) -> Result<Storage> {
        Ok(Self::act_grad_core(op, g, g_at, x, x_at, len, None)?.0)
    }

    /// [`Storage::act_grad`] with, for rows of `cols`, the sum of each column of the result
    /// over the rows (of the values as rounded to the dtype), computed by the same pass: a
    /// linear layer's bias gradient where the activation reads its output. Returns the
    /// gradient and the `cols` sums. `cols` must divide `len`.
    #[track_caller]
    pub fn act_grad_cols(
        op: ActGrad,
        g: &Storage,
        g_at: usize,
        x: &Storage,
        x_at: usize,
        len: usize,
        cols: usize,
    ) -> Result<(Storage, Storage)> {
        let (out, sums) = Self::act_grad_core(op, g, g_at, x, x_at, len, Some(cols))?;
        Ok((out, sums.expect("made with cols")))
    }

    #[track_caller]
    fn act_grad_core(
        op: ActGrad,
        g: &Storage,
        g_at: usize,
        x: &Storage,
        x_at: usize,
        len: usize,
        cols: Option<usize>,
    ) -> Result<(Storage, Option<Storage>)> {
        let name = "act_grad";
        g.check_binary_types(name, x)?;
        let dtype = g.dtype;
        g.check_range(name, g_at, len)?;
        x.check_range(name, x_at, len)?;
        check_float_only(name, true, dtype)?;
        if let Some(c) = cols
            && (c == 0 || !len.is_multiple_of(c))
        {
            return Err(crate::Error::ShapeMismatch {
                op: name,
                lhs: vec![len],
                rhs: vec![c],
            });
        }
        let mut out = Storage::uninit(len, dtype, g.device())?;
        let mut sums = cols
            .map(|c| Storage::uninit(c, dtype, g.device()))
            .transpose()?;
        let sm = sums.as_mut().map(|s| s.mem_mut(name)).transpose()?;
        match (g.read(name)?.mem(), x.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                let sums = match (cols, sm) {
                    (Some(c), Some(MemMut::Host(s))) => Some((c, s)),
                    (None, None) => None,
                    _ => return Err(mixed(name)),
                };
                a.act_grad(op, dtype, g_at, b, x_at, o, len, sums)?
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                let sums = match (cols, sm) {
                    (Some(c), Some(MemMut::Cuda(s))) => Some((c, s)),
                    (None, None) => None,
                    _ => return Err(mixed(name)),
                };
                a.act_grad(op, dtype, g_at, b, x_at, o, len, sums)?
            }
            _ => return Err(mixed(name)),
        }
        Ok((out, sums))
    }

    /// The gradient of softmax (`log`: log_softmax) along rows of `n`: `y` the forward's
    /// output (`len` elements from `y_at`), `g` its gradient (from `g_at`), into a new storage
    /// (see `genesis_kernels::grad::softmax_grad`).
    #[track_caller]
    pub fn softmax_grad(
        log: bool,
        y: &Storage,
        y_at: usize,
        g: &Storage,
        g_at: usize,
        len: usize,
        n: usize,
    ) -> Result<Storage> {
        let name = if log {
            "log_softmax_backward"
        } else {
            "softmax_backward"
        };
        y.check_binary_types(name, g)?;
        let dtype = y.dtype;
        y.check_range(name, y_at, len)?;
        g.check_range(name, g_at, len)?;
        check_float_only(name, true, dtype)?;
        let mut out = Storage::uninit(len, dtype, y.device())?;
        match (y.read(name)?.mem(), g.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                a.softmax_grad(log, dtype, y_at, b, g_at, o, len, n)?
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                a.softmax_grad(log, dtype, y_at, b, g_at, o, len, n)?
            }
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }
}
