//! Layer norm of storages (`genesis_kernels::layernorm`): one pass forward and backward, on the
//! CUDA kernels (f32, f16, bf16) or their CPU twins (and f64).

use genesis_kernels::layernorm::LayerNormShape;

use super::{Mem, MemMut, Storage, check_float_only, mixed};
use crate::compute::{Compute, LnResidual};
use crate::{DType, Result};

/// `DTypeMismatch` unless `other` is `rows` or, for f32 rows, f16 or bf16: the dtypes the
/// layer norm's output and output gradient may take.
fn check_narrowing(name: &'static str, rows: DType, other: DType) -> Result<()> {
    let narrower = rows == DType::F32 && matches!(other, DType::F16 | DType::BF16);
    if other == rows || narrower {
        Ok(())
    } else {
        Err(crate::Error::DTypeMismatch {
            op: name,
            lhs: rows,
            rhs: other,
        })
    }
}

/// An optional operand's host bytes and first element (an error for device memory).
fn host_in<'a>(
    name: &'static str,
    m: Option<(Mem<'a>, usize)>,
) -> Result<Option<(&'a [u8], usize)>> {
    match m {
        None => Ok(None),
        Some((Mem::Host(h), at)) => Ok(Some((h, at))),
        _ => Err(mixed(name)),
    }
}

/// An optional operand's device memory and first element (an error for host bytes).
fn cuda_in<'a>(
    name: &'static str,
    m: Option<(Mem<'a>, usize)>,
) -> Result<Option<(&'a crate::cuda::CudaMem, usize)>> {
    match m {
        None => Ok(None),
        Some((Mem::Cuda(c), at)) => Ok(Some((c, at))),
        _ => Err(mixed(name)),
    }
}

/// A residual's operand (memory, first element, dtype) and `h` as host memory (an error for
/// device memory).
fn host_residual<'a>(
    name: &'static str,
    r: Option<(Mem<'a>, usize, DType)>,
    h: Option<MemMut<'a>>,
) -> Result<Option<LnResidual<'a, [u8]>>> {
    match (r, h) {
        (Some((Mem::Host(r), at, dtype)), Some(MemMut::Host(h))) => {
            Ok(Some(LnResidual { r, at, dtype, h }))
        }
        (None, None) => Ok(None),
        _ => Err(mixed(name)),
    }
}

/// [`host_residual`] for device memory.
fn cuda_residual<'a>(
    name: &'static str,
    r: Option<(Mem<'a>, usize, DType)>,
    h: Option<MemMut<'a>>,
) -> Result<Option<LnResidual<'a, crate::cuda::CudaMem>>> {
    match (r, h) {
        (Some((Mem::Cuda(r), at, dtype)), Some(MemMut::Cuda(h))) => {
            Ok(Some(LnResidual { r, at, dtype, h }))
        }
        (None, None) => Ok(None),
        _ => Err(mixed(name)),
    }
}

/// An optional output's host bytes (an error for device memory).
fn host_out<'a>(name: &'static str, m: Option<MemMut<'a>>) -> Result<Option<&'a mut [u8]>> {
    match m {
        None => Ok(None),
        Some(MemMut::Host(h)) => Ok(Some(h)),
        _ => Err(mixed(name)),
    }
}

/// An optional output's device memory (an error for host bytes).
fn cuda_out<'a>(
    name: &'static str,
    m: Option<MemMut<'a>>,
) -> Result<Option<&'a mut crate::cuda::CudaMem>> {
    match m {
        None => Ok(None),
        Some(MemMut::Cuda(c)) => Ok(Some(c)),
        _ => Err(mixed(name)),
    }
}

impl Storage {
    /// Checks an operand of `len` elements from `at` of the dtype and device of `like`.
    fn check_operand(
        &self,
        name: &'static str,
        like: &Storage,
        at: usize,
        len: usize,
    ) -> Result<()> {
        like.check_binary_types(name, self)?;
        self.check_range(name, at, len)
    }

    /// Layer norm over the last dimension of the contiguous `[rows, cols]` from element
    /// `x.1` of `x.0` (PyTorch's `F.layer_norm` with `normalized_shape = [cols]`), `w` and `b`
    /// (`cols` values from their element, the input's dtype) optional: returns `y` and each
    /// row's mean and `1 / sqrt(var + eps)` ([`Storage::fused_acc_dtype`]). See
    /// `genesis_kernels::layernorm` for the numerics (one pass; f32 statistics for f32, f16,
    /// bf16). Errors: dtypes or devices that differ, ranges past a storage, a dtype the
    /// device's path does not take, `cols` of 0 or past the kernels' limit.
    #[track_caller]
    pub fn layer_norm(
        shape: &LayerNormShape,
        x: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        b: Option<(&Storage, usize)>,
    ) -> Result<(Storage, Storage, Storage)> {
        Self::layer_norm_to(shape, x, w, b, x.0.dtype)
    }

    /// [`Storage::layer_norm`] with `y` of dtype `out`: the input's, or f16 or bf16 for f32
    /// rows (each value rounded once from the f32 result, as a layer norm followed by a
    /// conversion gives; autocast's layer norm feeding a half-precision product).
    #[track_caller]
    pub fn layer_norm_to(
        shape: &LayerNormShape,
        x: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        b: Option<(&Storage, usize)>,
        out: DType,
    ) -> Result<(Storage, Storage, Storage)> {
        let (y, mean, rstd, _) = Self::layer_norm_core(shape, x, None, w, b, out)?;
        Ok((y, mean, rstd))
    }

    /// [`Storage::layer_norm_to`] of `h = x + r`, formed and written by the same pass: returns
    /// `(h, y, mean, rstd)`. `r` (`rows * cols` values from its element) is of the rows'
    /// dtype or, for f32 rows, of `out` (f16 or bf16: widened exactly, then added in f32, as
    /// PyTorch adds a half-precision tensor to a float32 one); `h` is of the rows' dtype. The
    /// residual stream of a transformer under autocast: `x` float32, `r` a half-precision
    /// branch's output, `y` the next product's half-precision input.
    #[track_caller]
    pub fn add_layer_norm_to(
        shape: &LayerNormShape,
        x: (&Storage, usize),
        r: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        b: Option<(&Storage, usize)>,
        out: DType,
    ) -> Result<(Storage, Storage, Storage, Storage)> {
        let (y, mean, rstd, h) = Self::layer_norm_core(shape, x, Some(r), w, b, out)?;
        let h = h.expect("made with a residual");
        Ok((h, y, mean, rstd))
    }

    /// The checks and the kernel of the forwards: `y`, `mean`, `rstd`, and `h` when a
    /// residual is given.
    #[track_caller]
    fn layer_norm_core(
        shape: &LayerNormShape,
        x: (&Storage, usize),
        r: Option<(&Storage, usize)>,
        w: Option<(&Storage, usize)>,
        b: Option<(&Storage, usize)>,
        out: DType,
    ) -> Result<(Storage, Storage, Storage, Option<Storage>)> {
        let name = "layer_norm";
        let (xs, dtype) = (x.0, x.0.dtype);
        check_float_only(name, true, dtype)?;
        check_narrowing(name, dtype, out)?;
        let len = shape.numel()?;
        xs.check_range(name, x.1, len)?;
        for p in [w, b].into_iter().flatten() {
            p.0.check_operand(name, xs, p.1, shape.cols)?;
        }
        let dev = xs.device();
        if let Some((rs, at)) = r {
            if rs.dtype != dtype && rs.dtype != out {
                return Err(crate::Error::DTypeMismatch {
                    op: name,
                    lhs: dtype,
                    rhs: rs.dtype,
                });
            }
            rs.expect_device(name, dev)?;
            rs.check_range(name, at, len)?;
        }
        let stats = Self::fused_acc_dtype(dtype);
        let mut y = Storage::uninit(len, out, dev)?;
        let mut mean = Storage::uninit(shape.rows, stats, dev)?;
        let mut rstd = Storage::uninit(shape.rows, stats, dev)?;
        let mut h = r.map(|_| Storage::uninit(len, dtype, dev)).transpose()?;
        let xr = xs.read(name)?;
        let rr = r.map(|p| p.0.read(name)).transpose()?;
        let wr = w.map(|p| p.0.read(name)).transpose()?;
        let br = b.map(|p| p.0.read(name)).transpose()?;
        let wm = wr.as_ref().zip(w).map(|(g, p)| (g.mem(), p.1));
        let bm = br.as_ref().zip(b).map(|(g, p)| (g.mem(), p.1));
        let rm = rr.as_ref().zip(r).map(|(g, p)| (g.mem(), p.1, p.0.dtype));
        let hm = h.as_mut().map(|h| h.mem_mut(name)).transpose()?;
        match (
            xr.mem(),
            y.mem_mut(name)?,
            mean.mem_mut(name)?,
            rstd.mem_mut(name)?,
        ) {
            (Mem::Host(a), MemMut::Host(o), MemMut::Host(m), MemMut::Host(s)) => a.layer_norm(
                (dtype, out),
                shape,
                x.1,
                host_residual(name, rm, hm)?,
                host_in(name, wm)?,
                host_in(name, bm)?,
                o,
                m,
                s,
            )?,
            (Mem::Cuda(a), MemMut::Cuda(o), MemMut::Cuda(m), MemMut::Cuda(s)) => a.layer_norm(
                (dtype, out),
                shape,
                x.1,
                cuda_residual(name, rm, hm)?,
                cuda_in(name, wm)?,
                cuda_in(name, bm)?,
                o,
                m,
                s,
            )?,
            _ => return Err(mixed(name)),
        }
        Ok((y, mean, rstd, h))
    }

    /// Layer norm's backward: the input's gradient `dh` from the output's `dy` (contiguous
    /// `[rows, cols]` from its element), the forward's input `h`, `w`, and the statistics
    /// [`Storage::layer_norm`] returned; with `want` (weight, bias), `dw` and `db` too
    /// (`cols` values each, summed over the rows in a fixed order). `dy` is of `h`'s dtype, or
    /// f16 or bf16 for f32 rows ([`Storage::layer_norm_to`]'s output); the gradients are of
    /// `h`'s. `copy` and `sums` as [`Storage::layer_norm_backward_add`].
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_backward(
        shape: &LayerNormShape,
        dy: (&Storage, usize),
        h: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        mean: &Storage,
        rstd: &Storage,
        want: (bool, bool),
        copy: bool,
        sums: bool,
    ) -> Result<(Storage, LayerNormGrads)> {
        let name = "layer_norm_backward";
        let hs = h.0;
        check_float_only(name, true, hs.dtype)?;
        let mut dh = Storage::uninit(shape.numel()?, hs.dtype, hs.device())?;
        let grads = Self::layer_norm_backward_core(
            shape,
            dy,
            h,
            w,
            mean,
            rstd,
            want,
            (&mut dh, 0, false),
            (copy, sums),
        )?;
        Ok((dh, grads))
    }

    /// [`Storage::layer_norm_backward`] adding the input's gradient into the `rows * cols`
    /// elements of `dh` from element `dh.1` (a handle others may share, written under its
    /// write lock; the residual stream's gradient of llm.c), rounded once to the dtype. `dh`
    /// must not be one of the inputs. With `copy`, also returns the sum rounded to `dy`'s
    /// dtype (contiguous, from element 0), written by the same pass: the gradient of a branch
    /// of that dtype added to the residual stream (autocast's), without a conversion. With
    /// `sums`, also the column sums of that gradient as stored (the copy's, else `dh`'s; `cols`
    /// values of `dy`'s dtype, which must then be `h`'s without `copy`), from the same pass:
    /// the bias gradient of a linear branch. `cols` at most
    /// [`genesis_kernels::layernorm::MAX_SUM_COLS`] with `sums`.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_backward_add(
        shape: &LayerNormShape,
        dy: (&Storage, usize),
        h: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        mean: &Storage,
        rstd: &Storage,
        want: (bool, bool),
        dh: (&Storage, usize),
        copy: bool,
        sums: bool,
    ) -> Result<LayerNormGrads> {
        let name = "layer_norm_backward";
        let target = dh.0;
        let inputs = [
            Some(dy.0),
            Some(h.0),
            w.map(|p| p.0),
            Some(mean),
            Some(rstd),
        ];
        if inputs.iter().flatten().any(|s| std::ptr::eq(*s, target)) {
            return Err(crate::Error::Aliased { op: name });
        }
        target.with_exclusive(name, |d| {
            Self::layer_norm_backward_core(
                shape,
                dy,
                h,
                w,
                mean,
                rstd,
                want,
                (d, dh.1, true),
                (copy, sums),
            )
        })
    }

    /// The checks and the kernel of the two backwards: `dh` from its element `dh.1`, written
    /// or (`dh.2`) added to; with `copy`, `dh` rounded to `dy`'s dtype too; with `sums`, the
    /// column sums.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward_core(
        shape: &LayerNormShape,
        dy: (&Storage, usize),
        h: (&Storage, usize),
        w: Option<(&Storage, usize)>,
        mean: &Storage,
        rstd: &Storage,
        want: (bool, bool),
        dh: (&mut Storage, usize, bool),
        (copy, sums): (bool, bool),
    ) -> Result<LayerNormGrads> {
        let name = "layer_norm_backward";
        let (ds, hs, dtype) = (dy.0, h.0, h.0.dtype);
        check_float_only(name, true, dtype)?;
        check_narrowing(name, dtype, ds.dtype)?;
        let len = shape.numel()?;
        hs.check_range(name, h.1, len)?;
        ds.expect_device(name, hs.device())?;
        ds.check_range(name, dy.1, len)?;
        if let Some(p) = w {
            p.0.check_operand(name, hs, p.1, shape.cols)?;
        }
        for s in [mean, rstd] {
            s.expect_dtype(name, Self::fused_acc_dtype(dtype))?;
            s.check_range(name, 0, shape.rows)?;
        }
        let dev = hs.device();
        dh.0.check_operand(name, hs, dh.1, len)?;
        let mut dw = want
            .0
            .then(|| Storage::uninit(shape.cols, dtype, dev))
            .transpose()?;
        let mut db = want
            .1
            .then(|| Storage::uninit(shape.cols, dtype, dev))
            .transpose()?;
        let mut narrow = copy
            .then(|| Storage::uninit(len, ds.dtype, dev))
            .transpose()?;
        if sums {
            if !copy && ds.dtype != dtype {
                let reason = format!(
                    "column sums of {dtype:?} rows in {:?} without a copy",
                    ds.dtype
                );
                return Err(super::index::invalid(name, reason));
            }
            let most = genesis_kernels::layernorm::MAX_SUM_COLS;
            if shape.cols > most {
                let reason = format!("column sums of {} columns (at most {most})", shape.cols);
                return Err(super::index::invalid(name, reason));
            }
        }
        let mut col_sums = sums
            .then(|| Storage::uninit(shape.cols, ds.dtype, dev))
            .transpose()?;
        let (dr, hr, mr, rr) = (
            ds.read(name)?,
            h.0.read(name)?,
            mean.read(name)?,
            rstd.read(name)?,
        );
        let wr = w.map(|p| p.0.read(name)).transpose()?;
        let wm = wr.as_ref().zip(w).map(|(g, p)| (g.mem(), p.1));
        let dwm = dw.as_mut().map(|s| s.mem_mut(name)).transpose()?;
        let dbm = db.as_mut().map(|s| s.mem_mut(name)).transpose()?;
        let cm = narrow.as_mut().map(|s| s.mem_mut(name)).transpose()?;
        let sm = col_sums.as_mut().map(|s| s.mem_mut(name)).transpose()?;
        let (acc, at) = (dh.2, dh.1);
        match (dr.mem(), hr.mem(), mr.mem(), rr.mem(), dh.0.mem_mut(name)?) {
            (Mem::Host(a), Mem::Host(hh), Mem::Host(m), Mem::Host(r), MemMut::Host(o)) => a
                .layer_norm_backward(
                    (dtype, ds.dtype),
                    shape,
                    dy.1,
                    (hh, h.1),
                    host_in(name, wm)?,
                    [m, r],
                    (o, at, acc),
                    host_out(name, cm)?,
                    host_out(name, sm)?,
                    host_out(name, dwm)?,
                    host_out(name, dbm)?,
                )?,
            (Mem::Cuda(a), Mem::Cuda(hh), Mem::Cuda(m), Mem::Cuda(r), MemMut::Cuda(o)) => a
                .layer_norm_backward(
                    (dtype, ds.dtype),
                    shape,
                    dy.1,
                    (hh, h.1),
                    cuda_in(name, wm)?,
                    [m, r],
                    (o, at, acc),
                    cuda_out(name, cm)?,
                    cuda_out(name, sm)?,
                    cuda_out(name, dwm)?,
                    cuda_out(name, dbm)?,
                )?,
            _ => return Err(mixed(name)),
        }
        Ok(LayerNormGrads {
            copy: narrow,
            sums: col_sums,
            dw,
            db,
        })
    }
}

/// What the layer norm backwards return beside the input's gradient, each where asked for.
#[derive(Debug)]
pub struct LayerNormGrads {
    /// The input's gradient rounded to the output gradient's dtype.
    pub copy: Option<Storage>,
    /// The column sums of the input's gradient as stored (of `copy` when there is one).
    pub sums: Option<Storage>,
    /// The weight's gradient.
    pub dw: Option<Storage>,
    /// The bias's gradient.
    pub db: Option<Storage>,
}
