//! The CUDA backend: [`Compute`] for device memory of a pool, launching the kernels of
//! `genesis-kernels` on spans of it, on the calling thread's current stream of its device.

use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides};
use genesis_kernels::classifier::{ClassifierShape, Reduction};
use genesis_kernels::classify::FloatClass;
use genesis_kernels::gather::Along;
use genesis_kernels::grad::ActGrad;
use genesis_kernels::index::{IndexDesc, Keys, Rows16, Strided};
use genesis_kernels::layernorm::LayerNormShape;
use genesis_kernels::optim::AdamStep;
use genesis_kernels::scan::ScanOp;
use genesis_kernels::softmax::SoftmaxOp;
use genesis_kernels::triangle::Triangle;
use genesis_kernels::{BinaryNd, BinaryOp, CompareOp, MatmulPrecision, MatmulShape};
use genesis_kernels::{ReduceOp, ReduceShape};
use genesis_kernels::{Rhs, Sampler, UnaryOp, WhereNd, gpu};

use super::{CudaMem, Queue, queue_on};
use crate::compute::{AdamParts, AttentionGrads, CeLogits, Compute, LnResidual};
use crate::storage::Inner;
use crate::{DType, Error, Result};

impl CudaMem {
    /// The stream work on this memory is queued on: the thread's current stream of its device.
    pub(crate) fn queue(&self) -> Queue {
        queue_on(self.ctx())
    }
}

/// Elements `at..at + len` of `elem` bytes of `m`, as bytes.
fn elements(
    m: &CudaMem,
    elem: usize,
    at: usize,
    len: usize,
) -> Result<genesis_cuda::DeviceSpan<'_, u8>> {
    m.range::<u8>(at.saturating_mul(elem), len.saturating_mul(elem))
}

/// [`elements`], for kernels that write them.
fn elements_mut(
    m: &mut CudaMem,
    elem: usize,
    at: usize,
    len: usize,
) -> Result<genesis_cuda::DeviceSpanMut<'_, u8>> {
    m.range_mut::<u8>(at.saturating_mul(elem), len.saturating_mul(elem))
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType { op, dtype }
}

impl Compute for CudaMem {
    type Part<'a> = genesis_cuda::DeviceSpan<'a, u8>;
    type PartMut<'a> = genesis_cuda::DeviceSpanMut<'a, u8>;

    fn one_hot(&self, at: usize, n: usize, classes: usize, out: &mut CudaMem) -> Result<()> {
        let len = n.checked_mul(classes).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype: DType::I64,
        })?;
        let stream = self.queue();
        let mut bad = bad_word(self.ordinal(), &stream)?;
        genesis_kernels::triangle::gpu_one_hot(
            &stream,
            self.range::<i64>(at, n)?,
            classes,
            out.span_mut::<i64>(len)?,
            bad.span_mut::<u64>(1)?,
        )?;
        let mut word = [0u8; 8];
        super::read_back(&stream, bad.span::<u8>(8)?, &mut word)?;
        let position = u64::from_le_bytes(word);
        if position == u64::MAX {
            return Ok(());
        }
        let mut value = [0u8; 8];
        self.read_to_host((at + position as usize) * 8, &mut value)?;
        Err(genesis_kernels::Error::IndexOutOfRange {
            op: "one_hot",
            position: position as usize,
            value: i64::from_le_bytes(value),
            size: classes as i64,
        }
        .into())
    }

    fn act_grad(
        &self,
        op: ActGrad,
        dtype: DType,
        g_at: usize,
        x: &CudaMem,
        x_at: usize,
        out: &mut CudaMem,
        len: usize,
        sums: Option<(usize, &mut CudaMem)>,
    ) -> Result<()> {
        use genesis_kernels::grad;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let (g, x) = (self.range::<T>(g_at, len)?, x.range::<T>(x_at, len)?);
            let queue = self.queue();
            match sums {
                None => grad::gpu_act_grad::<T>(&queue, op, g, x, out.span_mut::<T>(len)?)?,
                Some((cols, s)) => {
                    let rows = len.checked_div(cols).unwrap_or(0);
                    let ws_len = grad::act_grad_cols_workspace_bytes::<T>(rows, cols).max(8);
                    let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
                    grad::gpu_act_grad_cols::<T>(
                        &queue,
                        op,
                        g,
                        x,
                        out.span_mut::<T>(len)?,
                        cols,
                        s.span_mut::<T>(cols)?,
                        ws.range_mut::<u8>(0, ws_len)?,
                    )?
                }
            }
            Ok(())
        }, _ => Err(unsupported("act_grad", dtype)))
    }

    fn attention_forward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &ForwardStrides,
        at: [usize; 3],
        len: [usize; 3],
        k: &CudaMem,
        v: &CudaMem,
        o: &mut CudaMem,
        o_len: usize,
        lse: &mut CudaMem,
    ) -> Result<()> {
        let n = shape.lse_len()?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16], T => {
            genesis_kernels::attention::gpu_attention_forward::<T>(
                &self.queue(),
                shape,
                s,
                self.range::<T>(at[0], len[0])?,
                k.range::<T>(at[1], len[1])?,
                v.range::<T>(at[2], len[2])?,
                o.range_mut::<T>(0, o_len)?,
                lse.range_mut::<f32>(0, n)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("attention", dtype)))
    }

    fn cross_entropy(
        &self,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        at: usize,
        targets: (&CudaMem, usize),
        rows: [&mut CudaMem; 2],
        out: &mut CudaMem,
        status: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::classifier as ce;
        let n = shape.rows;
        let span = shape.span_len(shape.stride)?;
        let queue = self.queue();
        let [loss, lse] = rows;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16], T => {
            ce::gpu_cross_entropy_forward::<T>(
                &queue,
                shape,
                self.range::<T>(at, span)?,
                targets.0.range::<i64>(targets.1, n)?,
                loss.range_mut::<f32>(0, n)?,
                lse.range_mut::<f32>(0, n)?,
                status.range_mut::<i64>(0, 1)?,
            )?;
            Ok::<(), Error>(())
        }, _ => Err(unsupported("cross_entropy", dtype)))?;
        if reduction != Reduction::None {
            ce::gpu_cross_entropy_reduce(
                &queue,
                shape,
                reduction,
                loss.range::<f32>(0, n)?,
                targets.0.range::<i64>(targets.1, n)?,
                out.range_mut::<f32>(0, 1)?,
            )?;
        }
        Ok(())
    }

    fn cross_entropy_backward(
        logits: CeLogits<'_, CudaMem>,
        dtype: DType,
        shape: &ClassifierShape,
        reduction: Reduction,
        targets: (&CudaMem, usize),
        lse: &CudaMem,
        dloss: &CudaMem,
        status: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::classifier as ce;
        let n = shape.rows;
        let span = shape.span_len(shape.stride)?;
        let (ordinal, queue) = match &logits {
            CeLogits::Separate(l, ..) => (l.ordinal(), l.queue()),
            CeLogits::InPlace(l, _) => (l.ordinal(), l.queue()),
        };
        let mut ws = CudaMem::new(ordinal, ce::WORKSPACE_BYTES)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16], T => {
            let grad = match logits {
                CeLogits::Separate(l, at, out) => ce::LogitsGrad::Separate {
                    logits: l.range::<T>(at, span)?,
                    dlogits: out.range_mut::<T>(0, n * shape.classes)?,
                    out_stride: shape.classes,
                },
                CeLogits::InPlace(l, at) => ce::LogitsGrad::InPlace(l.range_mut::<T>(at, span)?),
            };
            ce::gpu_cross_entropy_backward::<T>(
                &queue,
                shape,
                reduction,
                grad,
                targets.0.range::<i64>(targets.1, n)?,
                lse.range::<f32>(0, n)?,
                ce::LossGrad::Device(dloss.range::<f32>(0, reduction.dloss_len(n))?),
                ws.range_mut::<u8>(0, ce::WORKSPACE_BYTES)?,
                status.range_mut::<i64>(0, 1)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("cross_entropy", dtype)))
    }

    fn layer_norm(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        x_at: usize,
        residual: Option<LnResidual<'_, CudaMem>>,
        w: Option<(&CudaMem, usize)>,
        b: Option<(&CudaMem, usize)>,
        y: &mut CudaMem,
        mean: &mut CudaMem,
        rstd: &mut CudaMem,
    ) -> Result<()> {
        #[allow(clippy::too_many_arguments)]
        fn run<
            T: genesis_kernels::Element,
            O: genesis_kernels::Element,
            R: genesis_kernels::Element,
        >(
            x: &CudaMem,
            shape: &LayerNormShape,
            x_at: usize,
            residual: Option<LnResidual<'_, CudaMem>>,
            w: Option<(&CudaMem, usize)>,
            b: Option<(&CudaMem, usize)>,
            y: &mut CudaMem,
            mean: &mut CudaMem,
            rstd: &mut CudaMem,
        ) -> Result<()> {
            use genesis_kernels::layernorm as ln;
            let (len, rows, c) = (shape.numel()?, shape.rows, shape.cols);
            let stream = x.queue();
            let x = x.range::<T>(x_at, len)?;
            let w = w.map(|(m, at)| m.range::<T>(at, c)).transpose()?;
            let b = b.map(|(m, at)| m.range::<T>(at, c)).transpose()?;
            let y = y.range_mut::<O>(0, len)?;
            let mean = mean.range_mut::<f32>(0, rows)?;
            let rstd = rstd.range_mut::<f32>(0, rows)?;
            match residual {
                None => ln::gpu_layer_norm_forward::<T, O>(
                    &stream, shape, x, None, w, b, y, mean, rstd,
                )?,
                Some(res) => ln::gpu_add_layer_norm_forward::<T, O, R>(
                    &stream,
                    shape,
                    x,
                    res.r.range::<R>(res.at, len)?,
                    res.h.range_mut::<T>(0, len)?,
                    w,
                    b,
                    y,
                    mean,
                    rstd,
                )?,
            }
            Ok(())
        }
        let r_type = residual.as_ref().map_or(types.0, |r| r.dtype);
        crate::dtype::dispatch_narrowing!(types, [F32, F16, BF16], (T, O) => {
            if r_type == types.0 {
                run::<T, O, T>(self, shape, x_at, residual, w, b, y, mean, rstd)
            } else if r_type == types.1 {
                run::<T, O, O>(self, shape, x_at, residual, w, b, y, mean, rstd)
            } else {
                Err(unsupported("layer_norm", r_type))
            }
        }, _ => Err(unsupported("layer_norm", types.1)))
    }

    fn layer_norm_backward(
        &self,
        types: (DType, DType),
        shape: &LayerNormShape,
        dy_at: usize,
        h: (&CudaMem, usize),
        w: Option<(&CudaMem, usize)>,
        stats: [&CudaMem; 2],
        dh: (&mut CudaMem, usize, bool),
        copy: Option<&mut CudaMem>,
        sums: Option<&mut CudaMem>,
        dw: Option<&mut CudaMem>,
        db: Option<&mut CudaMem>,
    ) -> Result<()> {
        #[allow(clippy::too_many_arguments)]
        fn run<T: genesis_kernels::Element, G: genesis_kernels::Element>(
            dy: &CudaMem,
            shape: &LayerNormShape,
            dy_at: usize,
            h: (&CudaMem, usize),
            w: Option<(&CudaMem, usize)>,
            stats: [&CudaMem; 2],
            dh: (&mut CudaMem, usize, bool),
            copy: Option<&mut CudaMem>,
            sums: Option<&mut CudaMem>,
            dw: Option<&mut CudaMem>,
            db: Option<&mut CudaMem>,
        ) -> Result<()> {
            let (len, rows, c) = (shape.numel()?, shape.rows, shape.cols);
            let acc = genesis_kernels::layernorm::Accumulate {
                dh: dh.2,
                params: false,
            };
            let ws_len = genesis_kernels::layernorm::backward_workspace_bytes(shape);
            let mut ws = CudaMem::new(dy.ordinal(), ws_len)?;
            genesis_kernels::layernorm::gpu_layer_norm_backward_copy::<T, G>(
                &dy.queue(),
                shape,
                dy.range::<G>(dy_at, len)?,
                h.0.range::<T>(h.1, len)?,
                w.map(|(m, at)| m.range::<T>(at, c)).transpose()?,
                stats[0].range::<f32>(0, rows)?,
                stats[1].range::<f32>(0, rows)?,
                dh.0.range_mut::<T>(dh.1, len)?,
                copy.map(|m| m.range_mut::<G>(0, len)).transpose()?,
                sums.map(|m| m.range_mut::<G>(0, c)).transpose()?,
                dw.map(|m| m.range_mut::<T>(0, c)).transpose()?,
                db.map(|m| m.range_mut::<T>(0, c)).transpose()?,
                acc,
                ws.range_mut::<u8>(0, ws_len)?,
            )?;
            Ok(())
        }
        crate::dtype::dispatch_narrowing!(types, [F32, F16, BF16], (T, O) => {
            run::<T, O>(self, shape, dy_at, h, w, stats, dh, copy, sums, dw, db)
        }, _ => Err(unsupported("layer_norm", types.1)))
    }

    fn attention_backward(
        &self,
        dtype: DType,
        shape: &AttentionShape,
        s: &BackwardStrides,
        at: [usize; 5],
        len: [usize; 5],
        ins: [&CudaMem; 4],
        lse: &CudaMem,
        outs: AttentionGrads<'_, CudaMem>,
    ) -> Result<bool> {
        use genesis_kernels::attention as fa;
        let n = shape.lse_len()?;
        let [k, v, o, dout] = ins;
        let ws_len = fa::backward_workspace_bytes(shape);
        let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
        let queue = self.queue();
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16], T => {
            let ins = [
                self.range::<T>(at[0], len[0])?,
                k.range::<T>(at[1], len[1])?,
                v.range::<T>(at[2], len[2])?,
                o.range::<T>(at[3], len[3])?,
                dout.range::<T>(at[4], len[4])?,
            ];
            let lse = lse.range::<f32>(0, n)?;
            let ws = ws.range_mut::<u8>(0, ws_len)?;
            let [q, k, v, o, dout] = ins;
            let wrote = match outs {
                AttentionGrads::Separate([dq, dk, dv], out_len) => {
                    fa::gpu_attention_backward::<T>(
                    &queue,
                    shape,
                    s,
                    q,
                    k,
                    v,
                    o,
                    dout,
                    lse,
                    dq.range_mut::<T>(0, out_len[0])?,
                    dk.range_mut::<T>(0, out_len[1])?,
                    dv.range_mut::<T>(0, out_len[2])?,
                    ws,
                )?;
                    false
                }
                AttentionGrads::Packed(d, d_len, d_at, sums) => fa::gpu_attention_backward_packed::<T>(
                    &queue,
                    shape,
                    s,
                    q,
                    k,
                    v,
                    o,
                    dout,
                    lse,
                    d.range_mut::<T>(0, d_len)?,
                    d_at,
                    ws,
                    sums.map(|m| m.range_mut::<f32>(0, fa::backward_sums_len(shape))).transpose()?,
                )?,
            };
            Ok(wrote)
        }, _ => Err(unsupported("attention", dtype)))
    }

    fn softmax_grad(
        &self,
        log: bool,
        dtype: DType,
        y_at: usize,
        g: &CudaMem,
        g_at: usize,
        out: &mut CudaMem,
        len: usize,
        n: usize,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::grad::gpu_softmax_grad::<T>(
                &self.queue(),
                log,
                self.range::<T>(y_at, len)?,
                g.range::<T>(g_at, len)?,
                n,
                out.span_mut::<T>(len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("softmax_grad", dtype)))
    }

    fn adam<'a>(
        on: &CudaMem,
        h: &AdamStep,
        dtype: DType,
        tensors: Vec<AdamParts<Self::PartMut<'a>, Self::Part<'a>>>,
    ) -> Result<()> {
        use genesis_kernels::optim::{self, AdamTensor};
        let queue = on.queue();
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let mut list = tensors
                .into_iter()
                .map(|AdamParts { p, g, m, v }| {
                    Ok(AdamTensor::<T> {
                        p: p.cast()?,
                        g: g.cast()?,
                        m: m.cast()?,
                        v: v.cast()?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            optim::gpu_adam::<T>(&queue, h, &mut list)?;
            Ok(())
        }, _ => Err(unsupported("adam", dtype)))
    }

    fn clip_grad_norm<'a>(
        grads: Vec<(DType, Self::PartMut<'a>)>,
        max_norm: f64,
        out: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::optim;
        let queue = out.queue();
        let blocks: usize = grads
            .iter()
            .map(|(d, g)| optim::blocks_of(g.len() / d.size()))
            .sum();
        let mut partials = CudaMem::new(out.ordinal(), blocks * 8)?;
        // Runs of one dtype, each with its partials after the previous run's.
        let mut runs: Vec<(DType, Vec<genesis_cuda::DeviceSpanMut<'a, u8>>)> = Vec::new();
        for (d, g) in grads {
            match runs.last_mut() {
                Some((rd, list)) if *rd == d => list.push(g),
                _ => runs.push((d, vec![g])),
            }
        }
        let mut at = 0;
        for (dtype, list) in &runs {
            let n: usize = list
                .iter()
                .map(|g| optim::blocks_of(g.len() / dtype.size()))
                .sum();
            genesis_kernels::dispatch_dtype!(*dtype, [F32, F16, BF16, F64], T => {
                let spans = list
                    .iter()
                    .map(|g| Ok(g.as_span().cast::<T>()?))
                    .collect::<Result<Vec<_>>>()?;
                optim::gpu_sum_squares::<T>(&queue, &spans, partials.range_mut::<f64>(at, n)?)?;
                Ok(())
            }, _ => Err(unsupported("clip_grad_norm", *dtype)))?;
            at += n;
        }
        optim::gpu_clip_coef(
            &queue,
            partials.span::<f64>(blocks)?,
            max_norm,
            out.span_mut::<f64>(2)?,
        )?;
        for (dtype, list) in runs {
            genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
                let mut spans = list
                    .into_iter()
                    .map(|g| Ok(g.cast::<T>()?))
                    .collect::<Result<Vec<_>>>()?;
                optim::gpu_scale::<T>(&queue, &mut spans, out.span::<f64>(2)?)?;
                Ok(())
            }, _ => Err(unsupported("clip_grad_norm", dtype)))?;
        }
        Ok(())
    }

    fn binary(
        &self,
        op: BinaryOp,
        dtype: DType,
        a_at: usize,
        b: &CudaMem,
        b_at: usize,
        out: &mut CudaMem,
        out_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            gpu::binary::<T>(
                &self.queue(),
                op,
                self.range::<T>(a_at, len)?,
                b.range::<T>(b_at, len)?,
                out.range_mut::<T>(out_at, len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_mixed(
        &self,
        op: BinaryOp,
        b_dtype: DType,
        a_at: usize,
        b: &CudaMem,
        b_at: usize,
        out: &mut CudaMem,
        out_at: usize,
        len: usize,
        swap: bool,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(b_dtype, [F16, BF16], H => {
            gpu::binary_mixed::<H>(
                &self.queue(),
                op,
                self.range::<f32>(a_at, len)?,
                b.range::<H>(b_at, len)?,
                out.range_mut::<f32>(out_at, len)?,
                swap,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), b_dtype)))
    }

    fn binary_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        b: &CudaMem,
        b_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let stream = self.queue();
            let src = b.range::<T>(b_at, len)?;
            let dst = self.range_mut::<T>(at, len)?;
            gpu::binary_assign::<T>(&stream, op, dst, src)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_nd(
        &self,
        op: BinaryOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&CudaMem, &[u8]>,
        out: &mut CudaMem,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let n = desc.numel();
            let elems = |m: &CudaMem| m.capacity() / size_of::<T>();
            let rhs = device_rhs::<T>(b)?;
            gpu::binary_nd::<T>(
                &self.queue(),
                op,
                desc,
                self.span::<T>(elems(self))?,
                rhs,
                out.span_mut::<T>(n)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn binary_nd_assign(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        at: usize,
        desc: &BinaryNd,
        b: Rhs<&CudaMem, &[u8]>,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let n = desc.numel();
            let rhs = device_rhs::<T>(b)?;
            let stream = self.queue();
            let a_out = self.range_mut::<T>(at, n)?;
            gpu::binary_nd_assign::<T>(&stream, op, desc, a_out, rhs)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn unary(
        &self,
        op: UnaryOp,
        dtype: DType,
        at: usize,
        out: &mut CudaMem,
        out_at: usize,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            gpu::unary::<T>(
                &self.queue(),
                op,
                self.range::<T>(at, len)?,
                out.range_mut::<T>(out_at, len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn unary_assign(&mut self, op: UnaryOp, dtype: DType, at: usize, len: usize) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let stream = self.queue();
            let dst = self.range_mut::<T>(at, len)?;
            gpu::unary_assign::<T>(&stream, op, dst)?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn triangle(
        &self,
        t: &Triangle,
        elem: usize,
        at: usize,
        len: usize,
        out: &mut CudaMem,
    ) -> Result<()> {
        genesis_kernels::triangle::gpu_triangle(
            &self.queue(),
            t,
            elem,
            self.range::<u8>(at, len)?,
            out.span_mut::<u8>(len)?,
        )?;
        Ok(())
    }

    fn classify(
        &self,
        op: FloatClass,
        dtype: DType,
        at: usize,
        len: usize,
        out: &mut CudaMem,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::classify::gpu_classify::<T>(
                &self.queue(),
                op,
                self.range::<T>(at, len)?,
                out.span_mut::<u8>(len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn nan_to_num(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        values: [f64; 3],
        out: &mut CudaMem,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let values = values.map(<T as genesis_kernels::Element>::from_f64);
            genesis_kernels::classify::gpu_nan_to_num::<T>(
                &self.queue(),
                self.range::<T>(at, len)?,
                values,
                out.span_mut::<T>(len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("nan_to_num", dtype)))
    }

    fn compare(
        &self,
        op: CompareOp,
        dtype: DType,
        a_at: usize,
        b: &CudaMem,
        b_at: usize,
        out: &mut CudaMem,
        len: usize,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            gpu::compare::<T>(
                &self.queue(),
                op,
                self.range::<T>(a_at, len)?,
                b.range::<T>(b_at, len)?,
                out.span_mut::<u8>(len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn select(
        &self,
        elem: usize,
        c_at: usize,
        a: &CudaMem,
        a_at: usize,
        b: &CudaMem,
        b_at: usize,
        out: &mut CudaMem,
        len: usize,
    ) -> Result<()> {
        let bytes = len * elem;
        gpu::select(
            &a.queue(),
            elem,
            self.range::<u8>(c_at, len)?,
            elements(a, elem, a_at, len)?,
            elements(b, elem, b_at, len)?,
            out.span_mut::<u8>(bytes)?,
        )?;
        Ok(())
    }

    fn compare_nd(
        &self,
        op: CompareOp,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&CudaMem, &[u8]>,
        out: &mut CudaMem,
    ) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let n = desc.numel();
            let elems = |m: &CudaMem| m.capacity() / size_of::<T>();
            let rhs = device_rhs::<T>(b)?;
            gpu::compare_nd::<T>(
                &self.queue(),
                op,
                desc,
                self.span::<T>(elems(self))?,
                rhs,
                out.span_mut::<u8>(n)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn where_nd(
        &self,
        elem: usize,
        desc: &WhereNd,
        a: Rhs<&CudaMem, &[u8]>,
        b: Rhs<&CudaMem, &[u8]>,
        out: &mut CudaMem,
    ) -> Result<()> {
        fn side<'m>(
            r: Rhs<&'m CudaMem, &[u8]>,
            elem: usize,
        ) -> Result<Rhs<genesis_cuda::DeviceSpan<'m, u8>, u64>> {
            Ok(match r {
                Rhs::Tensor(m) => Rhs::Tensor(m.span::<u8>(m.capacity())?),
                Rhs::Scalar(bytes) => {
                    let mut v = [0u8; 8];
                    v[..elem.min(8)].copy_from_slice(&bytes[..elem.min(8)]);
                    Rhs::Scalar(u64::from_le_bytes(v))
                }
            })
        }
        gpu::where_nd(
            &self.queue(),
            elem,
            desc,
            self.span::<u8>(self.capacity())?,
            side(a, elem)?,
            side(b, elem)?,
            out.span_mut::<u8>(desc.numel() * elem)?,
        )?;
        Ok(())
    }

    fn fill(&mut self, dtype: DType, value: &[u8], len: usize) -> Result<()> {
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let mut v = [0u8; 8];
            v[..size_of::<T>()].copy_from_slice(&value[..size_of::<T>()]);
            // SAFETY: as in `binary_nd`: the bytes of one value of a plain-old-data type.
            let v: T = unsafe { v.as_ptr().cast::<T>().read_unaligned() };
            let stream = self.queue();
            gpu::fill::<T>(&stream, self.span_mut::<T>(len)?, v)?;
            Ok(())
        }, _ => Err(unsupported("fill", dtype)))
    }

    fn cast(&self, from: DType, at: usize, to: DType, out: &mut CudaMem, len: usize) -> Result<()> {
        let bytes = len
            .checked_mul(from.size())
            .ok_or(Error::SizeOverflow { len, dtype: from })?;
        gpu::cast(
            &out.queue(),
            from,
            self.range::<u8>(at.saturating_mul(from.size()), bytes)?,
            to,
            out.span_mut::<u8>(len * to.size())?,
            len,
        )?;
        Ok(())
    }

    fn reduce(
        &self,
        op: ReduceOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        values: &mut CudaMem,
        indices: Option<&mut CudaMem>,
    ) -> Result<()> {
        use genesis_kernels::reduce::{self, ReducePlan};
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        let out_len = shape.output_len();
        let vbytes = out_len * crate::reduce_dtype(op, dtype).size();
        if op.bool_only() {
            if dtype != DType::Bool {
                return Err(unsupported(op.name(), dtype));
            }
            let plan = ReducePlan::new(shape, self.ctx().multiprocessors() as usize, 1);
            let ws_len = plan.workspace_bytes_bool();
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            reduce::gpu_reduce_bool(
                &self.queue(),
                op,
                self.range::<u8>(at, n)?,
                shape,
                values.span_mut::<u8>(out_len)?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            return Ok(());
        }
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let plan = ReducePlan::new(shape, self.ctx().multiprocessors() as usize, size_of::<T>());
            let ws_len = plan.workspace_bytes::<T>(op);
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            reduce::gpu_reduce::<T>(
                &self.queue(),
                op,
                self.range::<T>(at, n)?,
                shape,
                values.span_mut::<u8>(vbytes)?,
                indices.map(|m| m.span_mut::<i64>(out_len)).transpose()?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn clamp(
        &self,
        dtype: DType,
        at: usize,
        len: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        out: &mut CudaMem,
    ) -> Result<()> {
        use crate::compute::element_from_bytes;
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let lo = lo.map(|b| element_from_bytes::<T>("clamp", b)).transpose()?;
            let hi = hi.map(|b| element_from_bytes::<T>("clamp", b)).transpose()?;
            gpu::clamp::<T>(
                &self.queue(),
                self.range::<T>(at, len)?,
                lo,
                hi,
                out.span_mut::<T>(len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("clamp", dtype)))
    }

    fn var(
        &self,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        correction: f64,
        std: bool,
        values: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::reduce::{self, ReducePlan};
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let plan = ReducePlan::new(shape, self.ctx().multiprocessors() as usize, size_of::<T>());
            let ws_len = plan.workspace_bytes_var();
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            reduce::gpu_var::<T>(
                &self.queue(),
                self.range::<T>(at, n)?,
                shape,
                correction,
                std,
                values.span_mut::<T>(shape.output_len())?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("var", dtype)))
    }

    fn scan(
        &self,
        op: ScanOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::scan::{self, ScanPlan};
        let n = shape.input_len().ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        let out_bytes = n * if dtype.is_float() { dtype.size() } else { 8 };
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let plan = ScanPlan::new(shape, self.ctx().multiprocessors() as usize);
            let ws_len = plan.workspace_bytes::<T>();
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            scan::gpu_scan::<T>(
                &self.queue(),
                op,
                self.range::<T>(at, n)?,
                shape,
                out.span_mut::<u8>(out_bytes)?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn softmax(
        &self,
        op: SoftmaxOp,
        dtype: DType,
        at: usize,
        shape: ReduceShape,
        out: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::softmax::{self, SoftmaxPlan};
        let overflow = || Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        };
        let n = shape.input_len().ok_or_else(overflow)?;
        let out_len = op.output_len(shape).ok_or_else(overflow)?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            let sms = self.ctx().multiprocessors() as usize;
            let ws_len = SoftmaxPlan::new(shape, size_of::<T>(), sms).workspace_bytes(size_of::<T>());
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            softmax::gpu_softmax::<T>(
                &self.queue(),
                op,
                self.range::<T>(at, n)?,
                shape,
                out.span_mut::<T>(out_len)?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported(op.name(), dtype)))
    }

    fn rows_by_key(
        &self,
        dtype: DType,
        at: usize,
        shape: &genesis_kernels::gather::RowsByKey,
        keys: (&CudaMem, usize),
        perm: (&CudaMem, usize),
        out: &mut CudaMem,
    ) -> Result<()> {
        let (n, c) = (shape.n, shape.cols);
        let ws_len = genesis_kernels::gather::rows_by_key_workspace_bytes(shape, dtype.size());
        let mut ws = CudaMem::new(self.ordinal(), ws_len.max(8))?;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64], T => {
            genesis_kernels::gather::gpu_rows_by_key::<T>(
                &self.queue(),
                shape,
                keys.0.range::<i64>(keys.1, n)?,
                perm.0.range::<i64>(perm.1, n)?,
                self.range::<T>(at, shape.in_rows * c)?,
                out.range_mut::<T>(0, shape.out_rows * c)?,
                ws.range_mut::<u8>(0, ws_len.max(8))?,
            )?;
            Ok(())
        }, _ => Err(unsupported("rows_by_key", dtype)))
    }

    fn gather_along(
        &self,
        dtype: DType,
        at: usize,
        idx: &CudaMem,
        idx_at: usize,
        d: &Along,
        out: &mut CudaMem,
        in_range: &dyn Fn() -> bool,
    ) -> Result<()> {
        let (ni, _, nt) = d.reach()?;
        let es = dtype.size();
        let stream = self.queue();
        let mut bad = bad_word(self.ordinal(), &stream)?;
        let ix = idx.range::<i64>(idx_at, ni)?;
        genesis_kernels::gather::gpu_gather(
            &stream,
            es,
            elements(self, es, at, nt)?,
            ix,
            d,
            out.span_mut::<u8>(d.numel() * es)?,
            bad.span_mut::<u64>(1)?,
        )?;
        if in_range() {
            return Ok(());
        }
        check_bad(&stream, "gather", &bad, idx, idx_at, d)
    }

    fn scatter_along(
        &mut self,
        dtype: DType,
        add: bool,
        out_at: usize,
        idx: &CudaMem,
        idx_at: usize,
        vals: &CudaMem,
        vals_at: usize,
        d: &Along,
        in_range: &dyn Fn() -> bool,
    ) -> Result<()> {
        let (ni, nv, nt) = d.reach()?;
        let es = dtype.size();
        let stream = self.queue();
        let mut bad = bad_word(self.ordinal(), &stream)?;
        let ix = idx.range::<i64>(idx_at, ni)?;
        genesis_kernels::gather::gpu_scatter(
            &stream,
            dtype,
            add,
            elements_mut(self, es, out_at, nt)?,
            ix,
            elements(vals, es, vals_at, nv)?,
            d,
            bad.span_mut::<u64>(1)?,
        )?;
        if in_range() {
            return Ok(());
        }
        check_bad(
            &stream,
            if add { "scatter_add" } else { "scatter" },
            &bad,
            idx,
            idx_at,
            d,
        )
    }

    fn sort_rows(
        &self,
        dtype: DType,
        at: usize,
        rows: usize,
        r: usize,
        k: usize,
        descending: bool,
        values: &mut CudaMem,
        indices: &mut CudaMem,
    ) -> Result<()> {
        use genesis_kernels::sort::{self, SortPlan};
        let n = rows.checked_mul(r).ok_or(Error::SizeOverflow {
            len: usize::MAX,
            dtype,
        })?;
        let plan = SortPlan::new(rows, r)?;
        crate::dtype::dispatch_kernel_dtype!(dtype, T => {
            let ws_len = plan.workspace_bytes::<T>()?;
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            sort::gpu_sort::<T>(
                &self.queue(),
                self.range::<T>(at, n)?,
                rows,
                r,
                k,
                descending,
                values.span_mut::<T>(rows * k)?,
                indices.span_mut::<i64>(rows * k)?,
                ws.span_mut::<u8>(ws_len)?,
            )?;
            Ok(())
        }, _ => Err(unsupported("sort", dtype)))
    }

    fn matmul(
        &self,
        dtype: DType,
        shape: MatmulShape,
        layout: genesis_kernels::matmul::MatmulLayout,
        precision: MatmulPrecision,
        a_at: usize,
        b: &CudaMem,
        b_at: usize,
        bias: Option<(&CudaMem, usize)>,
        out: &mut CudaMem,
        out_at: usize,
    ) -> Result<bool> {
        use genesis_kernels::matmul::{MatmulPlan, gpu_matmul_planned, gpu_matmul_planned_bias};
        // Split-k partials (when the plan splits) and the copies of operands a fast kernel
        // reads only once copied (k-major for Hopper TF32, 16-byte aligned lines), in a
        // workspace from the pool, on the thread's stream: released in stream order after the
        // launches.
        if dtype == DType::F64 {
            // f64 products have their own kernels (no plan, no workspace); the caller adds a
            // bias.
            let all = |m: &CudaMem| m.capacity() / size_of::<f64>();
            let a = self.span::<f64>(all(self))?.slice(a_at..)?;
            let b = b.span::<f64>(all(b))?.slice(b_at..)?;
            let c_len = all(out);
            let c = out.span_mut::<f64>(c_len)?.into_slice(out_at..)?;
            genesis_kernels::matmul::gpu_matmul_f64(&self.queue(), shape, layout, a, b, c)?;
            return Ok(false);
        }
        let sms = self.ctx().multiprocessors() as usize;
        let cc = self.ctx().compute_capability();
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16], T => {
            let plan = MatmulPlan::new_for_device::<T>(shape, sms, cc, precision);
            let all = |m: &CudaMem| m.capacity() / size_of::<T>();
            let c_len = all(out);
            let a = self.span::<T>(all(self))?.slice(a_at..)?;
            let b = b.span::<T>(all(b))?.slice(b_at..)?;
            let ws_len = plan.workspace_bytes_for(&layout, size_of::<T>(), cc, (a.addr(), b.addr()));
            let mut ws = CudaMem::new(self.ordinal(), ws_len)?;
            let c = out.span_mut::<T>(c_len)?.into_slice(out_at..)?;
            let ws = ws.span_mut::<u8>(ws_len)?;
            Ok(match bias {
                Some((m, at)) => {
                    let bias = m.span::<T>(all(m))?.slice(at..)?;
                    gpu_matmul_planned_bias::<T, T>(&self.queue(), &plan, layout, a, b, bias, c, ws)?
                }
                None => {
                    gpu_matmul_planned::<T, T>(&self.queue(), &plan, layout, a, b, c, ws)?;
                    false
                }
            })
        }, _ => Err(unsupported("matmul", dtype)))
    }

    fn random(
        &mut self,
        dtype: DType,
        sampler: Sampler,
        seed: u64,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, I32, I64], T => {
            let stream = self.queue();
            genesis_kernels::random::gpu_sample::<T>(&stream, sampler, seed, offset, self.span_mut::<T>(len)?)?;
            Ok(())
        }, _ => Err(unsupported("random", dtype)))
    }

    fn masked_fill(
        &mut self,
        at: usize,
        mask: &CudaMem,
        m_at: usize,
        len: usize,
        value: &[u8],
    ) -> Result<()> {
        let es = value.len();
        let stream = self.queue();
        let dst = elements_mut(self, es, at, len)?;
        genesis_kernels::mask::fill(&stream, dst, mask.range::<u8>(m_at, len)?, value)?;
        Ok(())
    }

    fn masked_select(
        &self,
        elem: usize,
        at: usize,
        mask: &CudaMem,
        m_at: usize,
        len: usize,
    ) -> Result<(Inner, usize)> {
        let stream = self.queue();
        let mp = mask.range::<u8>(m_at, len)?;
        let src = elements(self, elem, at, len)?;
        let (ws, count) = count_on_device(self.ordinal(), mp, &stream)?;
        let nbytes = count * elem;
        let mut out = CudaMem::new(self.ordinal(), nbytes)?;
        let ws_span = ws.span::<u8>(genesis_kernels::mask::compaction_workspace_bytes(len))?;
        // SAFETY: the workspace holds the counts of this mask, queued before on this stream,
        // and `out` the `count` elements the scan found.
        unsafe {
            genesis_kernels::mask::compact(&stream, elem, src, ws_span, out.span_mut(nbytes)?)?
        };
        Ok((Inner::Cuda(out), count))
    }

    fn nonzero(&self, at: usize, len: usize) -> Result<(Inner, usize)> {
        let stream = self.queue();
        let mp = self.range::<u8>(at, len)?;
        let (ws, count) = count_on_device(self.ordinal(), mp, &stream)?;
        let mut out = CudaMem::new(self.ordinal(), count * 8)?;
        let ws_span = ws.span::<u8>(genesis_kernels::mask::compaction_workspace_bytes(len))?;
        // SAFETY: the workspace holds the counts of this mask, queued before on this stream,
        // and `out` the `count` positions the scan found.
        unsafe { genesis_kernels::mask::positions(&stream, len, ws_span, out.span_mut(count)?)? };
        Ok((Inner::Cuda(out), count))
    }

    unsafe fn index_gather(
        &self,
        elem: usize,
        len: usize,
        desc: &IndexDesc,
        idx: &CudaMem,
        rows: Option<&Rows16>,
        out: &mut CudaMem,
        n: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { super::index::gather(self, elem, len, desc, idx, rows, out, n) }
    }

    unsafe fn index_scatter(
        &mut self,
        elem: usize,
        len: usize,
        values: &CudaMem,
        desc: &IndexDesc,
        idx: &CudaMem,
        dead: &CudaMem,
        rows: Option<&Rows16>,
        n: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { super::index::scatter(self, elem, len, values, desc, idx, dead, rows, n) }
    }

    unsafe fn index_scatter_add(
        &mut self,
        dtype: DType,
        len: usize,
        values: &CudaMem,
        desc: &IndexDesc,
        idx: &CudaMem,
        groups: [&CudaMem; 4],
        members: usize,
        n: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            super::index::scatter_add(self, dtype, len, values, desc, idx, groups, members, n)
        }
    }

    fn index_normalise(
        &mut self,
        at: usize,
        nb: usize,
        src: &CudaMem,
        i32: bool,
        layout: &Strided,
        size: usize,
        bad: &mut CudaMem,
        bad_at: usize,
    ) -> Result<()> {
        super::index::normalise(self, at, nb, src, i32, layout, size, bad, bad_at)
    }

    unsafe fn index_dead_positions(
        &self,
        nb: usize,
        keys: &Keys,
        winner: &mut CudaMem,
        nwinner: usize,
        bad: &CudaMem,
        nbad: usize,
        dead: &mut CudaMem,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { super::index::dead_positions(self, nb, keys, winner, nwinner, bad, nbad, dead) }
    }

    fn index_unravel(
        &self,
        n: usize,
        shape: &Strided,
        rows: bool,
        out: &mut CudaMem,
    ) -> Result<()> {
        super::index::unravel(self, n, shape, rows, out)
    }

    fn index_gather_rows_checked(
        &self,
        rows: &Rows16,
        values: &CudaMem,
        i32: bool,
        offset: usize,
        stride: usize,
        size: usize,
        wrap: bool,
        out: &mut CudaMem,
    ) -> Result<bool> {
        super::index::gather_rows_checked(self, rows, values, i32, offset, stride, size, wrap, out)
    }
}

/// Counts the set bytes of `mask` on device `ordinal`: the compaction workspace (tile offsets
/// for the pass that follows) and the count, read by the host (one synchronisation of
/// `stream`).
fn count_on_device(
    ordinal: usize,
    mask: genesis_cuda::DeviceSpan<'_, u8>,
    stream: &Queue,
) -> Result<(CudaMem, usize)> {
    let ws_len = genesis_kernels::mask::compaction_workspace_bytes(mask.len());
    let mut ws = CudaMem::new(ordinal, ws_len)?;
    let at = genesis_kernels::mask::count_and_scan(stream, mask, ws.span_mut::<u8>(ws_len)?)?;
    let mut total = [0u8; 8];
    super::read_back(
        stream,
        ws.span::<u8>(ws_len)?.slice(at..at + 8)?,
        &mut total,
    )?;
    Ok((ws, u64::from_le_bytes(total) as usize))
}

/// A device word set to `u64::MAX` on `stream` (queued, no synchronisation), for the kernels
/// that report the first bad index position.
/// A right operand as a kernel takes it: a whole span of `T` (the descriptor says which
/// elements), or one value of `T` from its bytes.
fn device_rhs<'m, T: genesis_kernels::Element>(
    b: Rhs<&'m CudaMem, &[u8]>,
) -> Result<Rhs<genesis_cuda::DeviceSpan<'m, T>, T>> {
    Ok(match b {
        Rhs::Tensor(m) => Rhs::Tensor(m.span::<T>(m.capacity() / size_of::<T>())?),
        Rhs::Scalar(bytes) => {
            let mut v = [0u8; 8];
            v[..size_of::<T>()].copy_from_slice(&bytes[..size_of::<T>()]);
            // SAFETY: `T` is a plain-old-data kernel element type of at most 8 bytes, and `v`
            // holds one of its values' bytes.
            Rhs::Scalar(unsafe { v.as_ptr().cast::<T>().read_unaligned() })
        }
    })
}

fn bad_word(ordinal: usize, stream: &Queue) -> Result<CudaMem> {
    let mut bad = CudaMem::new(ordinal, 8)?;
    gpu::fill::<i64>(stream, bad.span_mut::<i64>(1)?, -1)?;
    Ok(bad)
}

/// Reads the bad-position word back (one synchronisation of `stream`): an index error naming the
/// first bad position and its value when a kernel set it.
fn check_bad(
    stream: &Queue,
    op: &'static str,
    bad: &CudaMem,
    idx: &CudaMem,
    idx_at: usize,
    d: &Along,
) -> Result<()> {
    let mut word = [0u8; 8];
    super::read_back(stream, bad.span::<u8>(8)?, &mut word)?;
    let position = u64::from_le_bytes(word);
    if position == u64::MAX {
        return Ok(());
    }
    let position = position as usize;
    let mut value = [0u8; 8];
    idx.read_to_host((idx_at + d.index_offset(position)) * 8, &mut value)?;
    Err(genesis_kernels::Error::IndexOutOfRange {
        op,
        position,
        value: i64::from_le_bytes(value),
        size: d.size(),
    }
    .into())
}
