//! Convolution and pooling over images and sequences, PyTorch's `F.conv1d`, `F.conv2d`,
//! `F.conv_transpose1d`, `F.conv_transpose2d`, `F.max_pool1d`, `F.max_pool2d`, `F.avg_pool1d`,
//! `F.avg_pool2d` and the adaptive average pools, built from the facade's ops on every device.
//!
//! A convolution is a product over the unfolded input ("im2col"): the input, padded, is read
//! through a strided layout that names every window (no copy), one strided copy lays the
//! windows out as the columns of a matrix `[N, groups, C/groups·kh·kw, OH·OW]`, and one batched
//! matmul with the weights `[groups, O/groups, C/groups·kh·kw]` gives the output
//! `[N, O, OH, OW]` without a transpose. Its backward recomputes the columns from the saved
//! input (the columns are never kept) with the batch's images side by side, so that the
//! weights' gradient is one product a group (no per-image partial sums), and forms the input's
//! gradient by folding the columns' gradient back: one strided add a kernel position (`kh·kw`
//! of them), or one strided copy when the windows do not overlap, so it is deterministic on
//! every device. The columns take `C·kh·kw·OH·OW` elements an image while an op runs. A
//! transposed convolution runs the same two steps the other way: the matmul gives the
//! columns, the fold gives the output, and its backward is a convolution.
//!
//! Pooling reads the same windows: max pooling as a max over each window (its gradient goes
//! to the first maximum of a window, PyTorch's choice, and a NaN is a maximum), average
//! pooling as a sum over each window divided by PyTorch's count.

use crate::autograd::{Saved, cast_grad};
use crate::compose::bad;
use crate::{DType, Error, Layout, Result, Tensor};

/// Two sizes, (height, width), from one number for both or a pair: the arguments of
/// [`ConvOptions`] and [`PoolOptions`].
pub trait IntoPair {
    /// The pair.
    fn into_pair(self) -> [usize; 2];
}

impl IntoPair for usize {
    fn into_pair(self) -> [usize; 2] {
        [self, self]
    }
}

impl IntoPair for [usize; 2] {
    fn into_pair(self) -> [usize; 2] {
        self
    }
}

impl IntoPair for (usize, usize) {
    fn into_pair(self) -> [usize; 2] {
        [self.0, self.1]
    }
}

/// The arguments of [`Tensor::conv2d`] and [`Tensor::conv1d`] beyond the tensors, PyTorch's
/// defaults unless set: stride 1, padding 0 (zeros on both sides), dilation 1, one group.
/// Each of stride, padding and dilation is one number or a (height, width) pair; a 1-d
/// convolution takes one number.
///
/// ```
/// use genesis::ConvOptions;
/// let o = ConvOptions::new().stride(2).padding([1, 0]).groups(4);
/// assert_eq!(o.get_stride(), [2, 2]);
/// assert_eq!(o.get_padding(), [1, 0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    output_padding: [usize; 2],
}

impl Default for ConvOptions {
    fn default() -> ConvOptions {
        ConvOptions {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            output_padding: [0, 0],
        }
    }
}

impl ConvOptions {
    /// PyTorch's defaults.
    pub fn new() -> ConvOptions {
        ConvOptions::default()
    }

    /// The step between windows (at least 1).
    pub fn stride(mut self, s: impl IntoPair) -> ConvOptions {
        self.stride = s.into_pair();
        self
    }

    /// Zeros added before and after each spatial dimension.
    pub fn padding(mut self, p: impl IntoPair) -> ConvOptions {
        self.padding = p.into_pair();
        self
    }

    /// The step between a window's taps (at least 1).
    pub fn dilation(mut self, d: impl IntoPair) -> ConvOptions {
        self.dilation = d.into_pair();
        self
    }

    /// Channel groups: input and output channels split into `groups` convolutions of their
    /// own (`groups == channels` is a depthwise convolution).
    pub fn groups(mut self, g: usize) -> ConvOptions {
        self.groups = g;
        self
    }

    /// Transposed convolutions: rows and columns added at the end of the output (less than
    /// the stride or the dilation), to reach an output size the stride leaves ambiguous.
    pub fn output_padding(mut self, p: impl IntoPair) -> ConvOptions {
        self.output_padding = p.into_pair();
        self
    }

    /// The stride.
    pub fn get_stride(&self) -> [usize; 2] {
        self.stride
    }

    /// The padding.
    pub fn get_padding(&self) -> [usize; 2] {
        self.padding
    }

    /// The dilation.
    pub fn get_dilation(&self) -> [usize; 2] {
        self.dilation
    }

    /// The groups.
    pub fn get_groups(&self) -> usize {
        self.groups
    }

    /// The output padding.
    pub fn get_output_padding(&self) -> [usize; 2] {
        self.output_padding
    }
}

/// The arguments of the pooling ops beyond the window, PyTorch's defaults unless set: stride
/// the window's size, padding 0, dilation 1 (max pooling only), `ceil_mode` off,
/// `count_include_pad` on and no divisor override (average pooling only).
///
/// ```
/// use genesis::{DType, Device, PoolOptions, Tensor};
/// # fn main() -> genesis::Result<()> {
/// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, Device::Cpu)?.reshape([1, 1, 4, 4])?;
/// let m = x.max_pool2d(2, PoolOptions::new())?;
/// assert_eq!(m.to_vec::<f32>()?, [5.0, 7.0, 13.0, 15.0]);
/// let a = x.avg_pool2d(3, PoolOptions::new().stride(1).padding(1))?;
/// assert_eq!(a.shape(), [1, 1, 4, 4]);
/// assert_eq!(a.to_vec::<f32>()?[0], (0.0 + 1.0 + 4.0 + 5.0) / 9.0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<usize>,
}

impl Default for PoolOptions {
    fn default() -> PoolOptions {
        PoolOptions {
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

impl PoolOptions {
    /// PyTorch's defaults.
    pub fn new() -> PoolOptions {
        PoolOptions::default()
    }

    /// The step between windows (at least 1); by default the window's size.
    pub fn stride(mut self, s: impl IntoPair) -> PoolOptions {
        self.stride = Some(s.into_pair());
        self
    }

    /// Padding before and after each spatial dimension (at most half the window): `-inf`
    /// for max pooling, zeros for average pooling.
    pub fn padding(mut self, p: impl IntoPair) -> PoolOptions {
        self.padding = p.into_pair();
        self
    }

    /// The step between a window's taps (max pooling only).
    pub fn dilation(mut self, d: impl IntoPair) -> PoolOptions {
        self.dilation = d.into_pair();
        self
    }

    /// Whether a last window that starts inside the input or its leading padding but runs
    /// past the end counts (PyTorch's `ceil_mode`).
    pub fn ceil_mode(mut self, on: bool) -> PoolOptions {
        self.ceil_mode = on;
        self
    }

    /// Average pooling: whether the padding counts in a window's divisor.
    pub fn count_include_pad(mut self, on: bool) -> PoolOptions {
        self.count_include_pad = on;
        self
    }

    /// Average pooling: divide every window's sum by `d` instead (at least 1).
    pub fn divisor_override(mut self, d: usize) -> PoolOptions {
        self.divisor_override = Some(d);
        self
    }
}

/// Where the windows of a 2-d op lie: the input `[n, c, h, w]`, the window, the output size,
/// and the padded buffer `[n, c, hp, wp]` the windows read (padding before, and after: at
/// least the padding, more where `ceil_mode` lets the last window run past it).
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dilation: [usize; 2],
    out: [usize; 2],
    padded: [usize; 2],
}

fn overflow(op: &'static str) -> Error {
    bad(op, "sizes overflow")
}

/// The output length of one spatial dimension, PyTorch's formula, and the padded length the
/// windows read.
fn out_len(
    op: &'static str,
    len: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    ceil: bool,
) -> Result<(usize, usize)> {
    if k == 0 || s == 0 || d == 0 {
        return Err(bad(
            op,
            format!("kernel size {k}, stride {s} and dilation {d} must be positive"),
        ));
    }
    let span = (k - 1)
        .checked_mul(d)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| overflow(op))?;
    let padded = p
        .checked_mul(2)
        .and_then(|v| v.checked_add(len))
        .ok_or_else(|| overflow(op))?;
    if padded < span {
        return Err(bad(
            op,
            format!(
                "the window spans {span} elements (kernel {k}, dilation {d}) but the padded \
                 input has {padded}"
            ),
        ));
    }
    let rest = padded - span;
    let mut out = if ceil { rest.div_ceil(s) } else { rest / s } + 1;
    // PyTorch: the last window must start inside the input or its leading padding.
    if ceil && (out - 1).checked_mul(s).is_none_or(|v| v >= len + p) {
        out -= 1;
    }
    let reach = (out - 1)
        .checked_mul(s)
        .and_then(|v| v.checked_add(span))
        .ok_or_else(|| overflow(op))?;
    let after = reach.saturating_sub(p + len).max(p);
    Ok((out, p + len + after))
}

impl Geometry {
    #[allow(clippy::too_many_arguments)]
    fn new(
        op: &'static str,
        shape: &[usize],
        k: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dilation: [usize; 2],
        ceil: bool,
    ) -> Result<Geometry> {
        let (oh, hp) = out_len(op, shape[2], k[0], stride[0], pad[0], dilation[0], ceil)?;
        let (ow, wp) = out_len(op, shape[3], k[1], stride[1], pad[1], dilation[1], ceil)?;
        // A stride of one window and a dilation of one tap are never taken: made 1 so that
        // the layouts' strides stay within the buffer.
        let (mut stride, mut dilation) = (stride, dilation);
        for (a, out) in [oh, ow].into_iter().enumerate() {
            if out == 1 {
                stride[a] = 1;
            }
            if k[a] == 1 {
                dilation[a] = 1;
            }
        }
        let g = Geometry {
            n: shape[0],
            c: shape[1],
            h: shape[2],
            w: shape[3],
            k,
            stride,
            pad,
            dilation,
            out: [oh, ow],
            padded: [hp, wp],
        };
        // Every buffer the op makes must be countable, the padded input and the columns, and
        // their strides must fit even where another size is 0 (an empty batch of huge images).
        for dims in [&[g.n, g.c, hp, wp][..], &[g.n, g.c, k[0], k[1], oh, ow]] {
            dims.iter()
                .filter(|&&d| d != 0)
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .filter(|&v| v <= isize::MAX as usize)
                .ok_or_else(|| overflow(op))?;
            genesis_storage::checked_numel(dims)?;
        }
        Ok(g)
    }

    /// The geometry of a transposed convolution of `[n, _, h, w]` inputs into `c` channels:
    /// the windows (one an input position) read and write a buffer of
    /// `(h − 1)·stride + dilation·(k − 1) + 1 + output_padding` rows (and so for columns)
    /// whose interior, the padding cut from both sides, is the output.
    #[allow(clippy::too_many_arguments)]
    fn transposed(
        op: &'static str,
        x: &[usize],
        c: usize,
        k: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dilation: [usize; 2],
        output_padding: [usize; 2],
    ) -> Result<Geometry> {
        let mut padded = [0; 2];
        let mut len = [0; 2];
        for a in 0..2 {
            let (s, d, op_a) = (stride[a], dilation[a], output_padding[a]);
            if k[a] == 0 || s == 0 || d == 0 {
                return Err(bad(
                    op,
                    format!(
                        "kernel size {k:?}, stride {stride:?} and dilation {dilation:?} must be positive"
                    ),
                ));
            }
            if op_a >= s.max(d) {
                return Err(bad(
                    op,
                    format!(
                        "output padding {output_padding:?} must be smaller than the stride \
                         {stride:?} or the dilation {dilation:?}"
                    ),
                ));
            }
            let n_in = x[2 + a];
            padded[a] = n_in
                .saturating_sub(1)
                .checked_mul(s)
                .and_then(|v| v.checked_add((k[a] - 1).checked_mul(d)?))
                .and_then(|v| v.checked_add(1 + op_a))
                .ok_or_else(|| overflow(op))?;
            len[a] = match padded[a].checked_sub(pad[a].saturating_mul(2)) {
                Some(l) if l > 0 && n_in > 0 => l,
                _ => {
                    return Err(bad(
                        op,
                        format!(
                            "the output would have no rows or columns (input {:?}, padding \
                             {pad:?})",
                            &x[2..]
                        ),
                    ));
                }
            };
        }
        let (mut stride, mut dilation) = (stride, dilation);
        for a in 0..2 {
            if x[2 + a] == 1 {
                stride[a] = 1;
            }
            if k[a] == 1 {
                dilation[a] = 1;
            }
        }
        let g = Geometry {
            n: x[0],
            c,
            h: len[0],
            w: len[1],
            k,
            stride,
            pad,
            dilation,
            out: [x[2], x[3]],
            padded,
        };
        for dims in [
            &[g.n, c, padded[0], padded[1]][..],
            &[g.n, c, k[0], k[1], x[2], x[3]],
        ] {
            dims.iter()
                .filter(|&&d| d != 0)
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .filter(|&v| v <= isize::MAX as usize)
                .ok_or_else(|| overflow(op))?;
            genesis_storage::checked_numel(dims)?;
        }
        Ok(g)
    }

    fn image(&self) -> usize {
        self.padded[0] * self.padded[1]
    }

    /// The input's place in the padded buffer.
    fn interior(&self) -> Layout {
        let wp = self.padded[1];
        Layout::new(
            &[self.n, self.c, self.h, self.w],
            &[
                (self.c * self.image()) as isize,
                self.image() as isize,
                wp as isize,
                1,
            ],
            self.pad[0] * wp + self.pad[1],
        )
    }

    /// Every window of the padded buffer: `[n, c, kh, kw, oh, ow]`.
    fn windows(&self) -> Layout {
        let wp = self.padded[1] as isize;
        let (s, d) = (self.stride, self.dilation);
        Layout::new(
            &[
                self.n,
                self.c,
                self.k[0],
                self.k[1],
                self.out[0],
                self.out[1],
            ],
            &[
                (self.c * self.image()) as isize,
                self.image() as isize,
                d[0] as isize * wp,
                d[1] as isize,
                s[0] as isize * wp,
                s[1] as isize,
            ],
            0,
        )
    }

    /// The windows' elements at kernel position `(i, j)`: `[n, c, oh, ow]`.
    fn tap(&self, i: usize, j: usize) -> Layout {
        let wp = self.padded[1];
        let (s, d) = (self.stride, self.dilation);
        Layout::new(
            &[self.n, self.c, self.out[0], self.out[1]],
            &[
                (self.c * self.image()) as isize,
                self.image() as isize,
                (s[0] * wp) as isize,
                s[1] as isize,
            ],
            i * d[0] * wp + j * d[1],
        )
    }

    /// The windows of `x` (`[n, c, h, w]`, zero padded) laid out as the columns of `groups`
    /// matrices: `[n, groups, c / groups · kh · kw, oh · ow]`.
    fn columns(&self, x: &Tensor, groups: usize) -> Result<Tensor> {
        let k = self.c / groups * self.taps();
        at(&self.pad_input(x, 0.0)?, &self.windows())?
            .contiguous()?
            .reshape([self.n, groups, k, self.positions()])
    }

    /// The windows of `x` as [`Geometry::columns`] gives them but with every image's side by
    /// side: `[groups, c / groups · kh · kw, n · oh · ow]`, the columns of one matmul a group
    /// over the whole batch (a weight's gradient without a product per image).
    fn columns_by_group(&self, x: &Tensor, groups: usize) -> Result<Tensor> {
        let k = self.c / groups * self.taps();
        at(&self.pad_input(x, 0.0)?, &self.windows())?
            .permute([1usize, 2, 3, 0, 4, 5])?
            .contiguous()?
            .reshape([groups, k, self.n * self.positions()])
    }

    /// [`Geometry::fold`] of columns laid out as [`Geometry::columns`] gives them
    /// (`[n, c, kh, kw, oh, ow]`, contiguous).
    fn fold_columns(&self, cols: &Tensor) -> Result<Tensor> {
        let cols = cols.contiguous()?;
        let [kh, kw] = self.k;
        let l = self.positions();
        let tap = |i: usize, j: usize| {
            at(
                &cols,
                &Layout::new(
                    &[self.n, self.c, self.out[0], self.out[1]],
                    &[
                        (self.c * kh * kw * l) as isize,
                        (kh * kw * l) as isize,
                        self.out[1] as isize,
                        1,
                    ],
                    (i * kw + j) * l,
                ),
            )
        };
        let all = || cols.reshape([self.n, self.c, kh, kw, self.out[0], self.out[1]]);
        self.fold(&cols, all, tap)
    }

    /// Whether no two windows share an element.
    fn disjoint(&self) -> bool {
        self.dilation == [1, 1] && self.stride[0] >= self.k[0] && self.stride[1] >= self.k[1]
    }

    fn taps(&self) -> usize {
        self.k[0] * self.k[1]
    }

    fn positions(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// `x` (`[n, c, h, w]`) in a padded buffer of its own filled with `fill`.
    fn pad_input(&self, x: &Tensor, fill: f64) -> Result<Tensor> {
        if self.padded == [self.h, self.w] {
            return x.contiguous();
        }
        let xp = Tensor::zeros(
            [self.n, self.c, self.padded[0], self.padded[1]],
            x.dtype(),
            x.device(),
        )?;
        if fill != 0.0 {
            xp.fill_(fill)?;
        }
        at(&xp, &self.interior())?.copy_(x)?;
        Ok(xp)
    }

    /// The padded buffer's gradient: zeros with `tap(i, j)` of `src(i, j)` added for every
    /// kernel position (one copy of `all` when the windows are disjoint).
    fn fold(
        &self,
        like: &Tensor,
        all: impl FnOnce() -> Result<Tensor>,
        src: impl Fn(usize, usize) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let gp = Tensor::zeros(
            [self.n, self.c, self.padded[0], self.padded[1]],
            like.dtype(),
            like.device(),
        )?;
        if self.disjoint() {
            at(&gp, &self.windows())?.copy_(&all()?)?;
        } else {
            for i in 0..self.k[0] {
                for j in 0..self.k[1] {
                    at(&gp, &self.tap(i, j))?.add_(&src(i, j)?)?;
                }
            }
        }
        if self.padded == [self.h, self.w] {
            return Ok(gp);
        }
        at(&gp, &self.interior())?.contiguous()
    }
}

/// `t` (contiguous) read through `l`, whose offset counts from `t`'s first element.
fn at(t: &Tensor, l: &Layout) -> Result<Tensor> {
    let shifted = Layout::new(l.shape(), l.strides(), l.offset() + t.layout().offset());
    Tensor::through(t, &shifted)
}

/// `x` as `[n, c, h, w]` for an op on images: a 3-d `[c, h, w]` gains a batch of one
/// (returned `true`).
fn batched(op: &'static str, x: &Tensor, what: &str) -> Result<(Tensor, bool)> {
    match x.dim() {
        4 => Ok((x.clone(), false)),
        3 => Ok((x.unsqueeze(0)?, true)),
        d => Err(bad(
            op,
            format!("expected a 3-d (unbatched) or 4-d (batched) {what}, got {d}-d"),
        )),
    }
}

fn float_only(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(bad(
            op,
            format!("takes floating-point tensors, got {}", t.dtype()),
        ))
    }
}

/// The checks every convolution makes of its operands: floating point, one dtype, one
/// device, a 4-d weight (`layout` names its dimensions in the error).
fn check_operands(
    op: &'static str,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    layout: &str,
) -> Result<()> {
    for t in [x, weight].into_iter().chain(bias) {
        float_only(op, t)?;
        if t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: x.dtype(),
                rhs: t.dtype(),
            });
        }
        if t.device() != x.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: x.device(),
                rhs: t.device(),
            });
        }
    }
    if weight.dim() != 4 {
        return Err(bad(
            op,
            format!(
                "weight must be 4-d {layout}, got shape {:?}",
                weight.shape()
            ),
        ));
    }
    if let Some(b) = bias {
        let o = b.shape();
        if o.len() != 1 {
            return Err(bad(op, format!("bias must be 1-d, got shape {o:?}")));
        }
    }
    Ok(())
}

/// A 1-d op's pair: one number, `[v, v]`, read as its width.
fn one(op: &'static str, what: &str, p: [usize; 2]) -> Result<usize> {
    if p[0] == p[1] {
        Ok(p[1])
    } else {
        Err(bad(
            op,
            format!("a 1-d op takes one {what}, got the pair {p:?}"),
        ))
    }
}

/// `x` (`[n, c, l]` or `[c, l]`) as a 2-d op's input `[n, c, 1, l]` (or `[c, 1, l]`).
fn as_image(op: &'static str, x: &Tensor) -> Result<Tensor> {
    match x.dim() {
        2 | 3 => x.unsqueeze(-2),
        d => Err(bad(
            op,
            format!("expected a 2-d (unbatched) or 3-d (batched) input, got {d}-d"),
        )),
    }
}

impl Tensor {
    /// The 2-d convolution of `self` (`[N, C, H, W]`, or `[C, H, W]` unbatched) with
    /// `weight` (`[O, C / groups, kh, kw]`) plus `bias` (`[O]`), PyTorch's `F.conv2d` (a
    /// cross-correlation, as every framework's): `[N, O, OH, OW]` with
    /// `OH = (H + 2·padding − dilation·(kh − 1) − 1) / stride + 1`. Floating-point tensors of
    /// one dtype and device; under [`autocast`](crate::autograd::autocast), float32 operands
    /// are lowered as for [`Tensor::linear`]. Differentiable in all three (see the module's
    /// documentation for how it runs and what memory it takes).
    ///
    /// ```
    /// use genesis::{ConvOptions, DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, Device::Cpu)?.reshape([1, 1, 4, 4])?;
    /// let w = Tensor::ones([1, 1, 3, 3], DType::F32, Device::Cpu)?;
    /// let y = x.conv2d(&w, None, ConvOptions::new())?;
    /// assert_eq!(y.shape(), [1, 1, 2, 2]);
    /// assert_eq!(y.to_vec::<f32>()?, [45.0, 54.0, 81.0, 90.0]);
    /// let same = x.conv2d(&w, None, ConvOptions::new().padding(1))?;
    /// assert_eq!(same.shape(), [1, 1, 4, 4]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        self.conv2d_op("conv2d", weight, bias, opts)
    }

    /// The 1-d convolution of `self` (`[N, C, L]`, or `[C, L]`) with `weight`
    /// (`[O, C / groups, k]`) plus `bias` (`[O]`), PyTorch's `F.conv1d`: [`Tensor::conv2d`]
    /// over a height of one. `opts` takes one number each for stride, padding and dilation.
    ///
    /// ```
    /// use genesis::{ConvOptions, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [1, 1, 4], Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, -1.0], [1, 1, 2], Device::Cpu)?;
    /// let y = x.conv1d(&w, None, ConvOptions::new())?;
    /// assert_eq!(y.to_vec::<f32>()?, [-1.0, -1.0, -1.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        let op = "conv1d";
        let (x, w, o) = conv1d_operands(op, self, weight, opts, "[out, in / groups, k]")?;
        x.conv2d_op(op, &w, bias, o)?.squeeze(-2)
    }

    fn conv2d_op(
        &self,
        op: &'static str,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        if let Some((x, w, b)) = autocast_conv(self, weight, bias)? {
            return crate::autograd::without_autocast(|| x.conv2d_op(op, &w, b.as_ref(), opts));
        }
        let (x, unbatched) = batched(op, self, "input")?;
        check_operands(op, &x, weight, bias, "[out, in / groups, kh, kw]")?;
        if opts.output_padding != [0, 0] {
            return Err(bad(op, "output padding is for transposed convolutions"));
        }
        let ws = weight.shape();
        let (o, groups) = (ws[0], opts.groups);
        let c = x.shape()[1];
        if groups == 0 || !o.is_multiple_of(groups) || ws[1].checked_mul(groups) != Some(c) {
            return Err(bad(
                op,
                format!(
                    "{groups} groups of a weight {ws:?} take {} input channels with the out \
                     channels ({o}) a multiple of the groups, got an input {:?}",
                    ws[1].saturating_mul(groups),
                    self.shape()
                ),
            ));
        }
        if let Some(b) = bias
            && b.shape() != [o]
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: b.shape().to_vec(),
                rhs: vec![o],
            });
        }
        let geo = Geometry::new(
            op,
            x.shape(),
            [ws[2], ws[3]],
            opts.stride,
            opts.padding,
            opts.dilation,
            false,
        )?;
        let (k, l) = (ws[1] * geo.taps(), geo.positions());
        let mut inputs = vec![&x, weight];
        inputs.extend(bias);
        let y = crate::autograd::op(
            op,
            &inputs,
            || {
                let y = weight
                    .reshape([groups, o / groups, k])?
                    .matmul(&geo.columns(&x, groups)?)?
                    .reshape([geo.n, o, geo.out[0], geo.out[1]])?;
                with_bias(y, bias)
            },
            |_| {
                let (xs, wsv) = (Saved::new(op, &x), Saved::new(op, weight));
                let b = bias.map(|b| b.dtype());
                Box::new(move |g, needs| {
                    let go = g.reshape([geo.n, groups, o / groups, l])?;
                    let w = wsv.get()?;
                    let gx = if needs[0] {
                        // [n, groups, k, l]: the columns' gradient, folded onto the input.
                        let gcols = w
                            .reshape([groups, o / groups, k])?
                            .transpose(-1, -2)?
                            .matmul(&go)?;
                        Some(geo.fold_columns(&gcols)?)
                    } else {
                        None
                    };
                    let gw = if needs[1] {
                        // One product a group over the batch: [groups, o / groups, k].
                        let cols = geo.columns_by_group(&xs.get()?, groups)?;
                        let gw = by_group(g, groups)?
                            .matmul(&cols.transpose(-1, -2)?)?
                            .reshape(w.shape())?;
                        Some(gw)
                    } else {
                        None
                    };
                    let mut out = vec![gx, gw];
                    if let Some(dtype) = b {
                        out.push(bias_grad(g, dtype, needs[2])?);
                    }
                    Ok(out)
                })
            },
        )?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }

    /// The 2-d transposed convolution of `self` (`[N, C, H, W]` or `[C, H, W]`) with
    /// `weight` (`[C, O / groups, kh, kw]`) plus `bias` (`[O]`), PyTorch's
    /// `F.conv_transpose2d` (the gradient of [`Tensor::conv2d`] with respect to its input):
    /// `[N, O, OH, OW]` with
    /// `OH = (H − 1)·stride − 2·padding + dilation·(kh − 1) + output_padding + 1`. Each input
    /// element scatters its products with the kernel onto its window of the output; computed
    /// as one batched matmul and a fold (one strided add a kernel position), deterministic.
    /// Differentiable in all three.
    ///
    /// ```
    /// use genesis::{ConvOptions, DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], [1, 1, 1, 2], Device::Cpu)?;
    /// let w = Tensor::ones([1, 1, 1, 3], DType::F32, Device::Cpu)?;
    /// let y = x.conv_transpose2d(&w, None, ConvOptions::new().stride(2))?;
    /// assert_eq!(y.to_vec::<f32>()?, [1.0, 1.0, 3.0, 2.0, 2.0]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        self.conv_transpose2d_op("conv_transpose2d", weight, bias, opts)
    }

    /// The 1-d transposed convolution (PyTorch's `F.conv_transpose1d`) of `self` (`[N, C, L]`
    /// or `[C, L]`) with `weight` (`[C, O / groups, k]`): [`Tensor::conv_transpose2d`] over a
    /// height of one; `opts` takes one number each.
    #[track_caller]
    pub fn conv_transpose1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        let op = "conv_transpose1d";
        let (x, w, o) = conv1d_operands(op, self, weight, opts, "[in, out / groups, k]")?;
        x.conv_transpose2d_op(op, &w, bias, o)?.squeeze(-2)
    }

    fn conv_transpose2d_op(
        &self,
        op: &'static str,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: ConvOptions,
    ) -> Result<Tensor> {
        if let Some((x, w, b)) = autocast_conv(self, weight, bias)? {
            return crate::autograd::without_autocast(|| {
                x.conv_transpose2d_op(op, &w, b.as_ref(), opts)
            });
        }
        let (x, unbatched) = batched(op, self, "input")?;
        check_operands(op, &x, weight, bias, "[in, out / groups, kh, kw]")?;
        let ws = weight.shape();
        let (cin, groups) = (x.shape()[1], opts.groups);
        if groups == 0 || ws[0] != cin || !cin.is_multiple_of(groups) {
            return Err(bad(
                op,
                format!(
                    "a weight {ws:?} takes {} input channels in {groups} groups, got an input {:?}",
                    ws[0],
                    self.shape()
                ),
            ));
        }
        let o = ws[1].checked_mul(groups).ok_or_else(|| overflow(op))?;
        if let Some(b) = bias
            && b.shape() != [o]
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: b.shape().to_vec(),
                rhs: vec![o],
            });
        }
        let geo = Geometry::transposed(
            op,
            x.shape(),
            o,
            [ws[2], ws[3]],
            opts.stride,
            opts.padding,
            opts.dilation,
            opts.output_padding,
        )?;
        // `k`: one group's output channels times the taps; `l`: the input's positions.
        let (k, l) = (ws[1] * geo.taps(), geo.positions());
        let mut inputs = vec![&x, weight];
        inputs.extend(bias);
        let y = crate::autograd::op(
            op,
            &inputs,
            || {
                // The columns `[n, o, kh, kw, h, w]`, folded onto the output.
                let cols = weight
                    .reshape([groups, cin / groups, k])?
                    .transpose(-1, -2)?
                    .matmul(&x.reshape([geo.n, groups, cin / groups, l])?)?;
                with_bias(geo.fold_columns(&cols)?, bias)
            },
            |_| {
                let (xs, wsv) = (Saved::new(op, &x), Saved::new(op, weight));
                let b = bias.map(|b| b.dtype());
                Box::new(move |g, needs| {
                    // The output's gradient read through the windows, the batch side by side:
                    // `[groups, k, n · l]`.
                    let cols = geo.columns_by_group(g, groups)?;
                    let w = wsv.get()?;
                    let gx = if needs[0] {
                        // [groups, cin / groups, n, l] back to [n, cin, h, w].
                        let gx = w
                            .reshape([groups, cin / groups, k])?
                            .matmul(&cols)?
                            .reshape([cin, geo.n, l])?
                            .transpose(0, 1)?
                            .contiguous()?
                            .reshape([geo.n, cin, geo.out[0], geo.out[1]])?;
                        Some(gx)
                    } else {
                        None
                    };
                    let gw = if needs[1] {
                        let gw = by_group(&xs.get()?, groups)?
                            .matmul(&cols.transpose(-1, -2)?)?
                            .reshape(w.shape())?;
                        Some(gw)
                    } else {
                        None
                    };
                    let mut out = vec![gx, gw];
                    if let Some(dtype) = b {
                        out.push(bias_grad(g, dtype, needs[2])?);
                    }
                    Ok(out)
                })
            },
        )?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }

    /// 2-d max pooling (PyTorch's `F.max_pool2d`) of `self` (`[N, C, H, W]` or `[C, H, W]`,
    /// floating point) over windows of `kernel` (one number or a pair): each output element
    /// the largest of its window, a NaN if the window holds one. Padding reads as `-inf` and
    /// may be at most half the window's span. The gradient goes to the first maximum of each
    /// window in row-major order, as PyTorch's. See [`PoolOptions`].
    #[track_caller]
    pub fn max_pool2d(&self, kernel: impl IntoPair, opts: PoolOptions) -> Result<Tensor> {
        self.max_pool_op("max_pool2d", kernel.into_pair(), opts)
    }

    /// 1-d max pooling (PyTorch's `F.max_pool1d`) of `self` (`[N, C, L]` or `[C, L]`):
    /// [`Tensor::max_pool2d`] over a height of one; `opts` takes one number each.
    #[track_caller]
    pub fn max_pool1d(&self, kernel: usize, opts: PoolOptions) -> Result<Tensor> {
        let op = "max_pool1d";
        let o = pool1d(op, opts)?;
        as_image(op, self)?
            .max_pool_op(op, [1, kernel], o)?
            .squeeze(-2)
    }

    /// 2-d average pooling (PyTorch's `F.avg_pool2d`) of `self` (`[N, C, H, W]` or
    /// `[C, H, W]`, floating point) over windows of `kernel`: each window's sum divided by
    /// its size (with `count_include_pad`, the default, the padding counts; otherwise only
    /// the input's elements), or by the divisor override. Zero padding, at most half the
    /// window. Float16 and bfloat16 sum in float32 and round once. See [`PoolOptions`].
    #[track_caller]
    pub fn avg_pool2d(&self, kernel: impl IntoPair, opts: PoolOptions) -> Result<Tensor> {
        self.avg_pool_op("avg_pool2d", kernel.into_pair(), opts)
    }

    /// 1-d average pooling (PyTorch's `F.avg_pool1d`) of `self` (`[N, C, L]` or `[C, L]`):
    /// [`Tensor::avg_pool2d`] over a height of one; `opts` takes one number each.
    #[track_caller]
    pub fn avg_pool1d(&self, kernel: usize, opts: PoolOptions) -> Result<Tensor> {
        let op = "avg_pool1d";
        let o = pool1d(op, opts)?;
        as_image(op, self)?
            .avg_pool_op(op, [1, kernel], o)?
            .squeeze(-2)
    }

    /// The geometry of a pooling op on `x` (`[n, c, h, w]`).
    fn pool_geometry(
        op: &'static str,
        x: &Tensor,
        kernel: [usize; 2],
        opts: &PoolOptions,
    ) -> Result<Geometry> {
        float_only(op, x)?;
        let stride = opts.stride.unwrap_or(kernel);
        for ((k, d), p) in kernel.into_iter().zip(opts.dilation).zip(opts.padding) {
            let span = k.saturating_sub(1).saturating_mul(d).saturating_add(1);
            if k > 0 && p > span / 2 {
                return Err(bad(
                    op,
                    format!(
                        "padding {:?} must be at most half the window's span {span}",
                        opts.padding
                    ),
                ));
            }
        }
        Geometry::new(
            op,
            x.shape(),
            kernel,
            stride,
            opts.padding,
            opts.dilation,
            opts.ceil_mode,
        )
    }

    fn max_pool_op(
        &self,
        op: &'static str,
        kernel: [usize; 2],
        opts: PoolOptions,
    ) -> Result<Tensor> {
        let (x, unbatched) = batched(op, self, "input")?;
        let geo = Tensor::pool_geometry(op, &x, kernel, &opts)?;
        let taps = geo.taps();
        let (n, c, [oh, ow]) = (geo.n, geo.c, geo.out);
        // `[n, c, kh·kw, oh, ow]`: the windows' elements tap by tap, one contiguous copy whose
        // rows are the output's rows (the copy runs a row at a time), reduced over the taps in
        // place.
        let taps_of = move |x: &Tensor| -> Result<Tensor> {
            let xp = geo.pad_input(x, f64::NEG_INFINITY)?;
            at(&xp, &geo.windows())?
                .contiguous()?
                .reshape([n, c, taps, oh, ow])
        };
        let y = crate::autograd::op(
            op,
            &[&x],
            || taps_of(&x)?.amax(2isize, false),
            |_| {
                let xs = Saved::new(op, &x);
                Box::new(move |g, _| {
                    let idx = taps_of(&xs.get()?)?.max_dim(2, false)?.1;
                    let slot = Tensor::arange(0.0, taps as f64, 1.0, DType::I64, g.device())?
                        .reshape([taps, 1, 1])?;
                    // [n, c, kh·kw, oh, ow]: the gradient at each window's first maximum,
                    // laid out as the columns `fold_columns` folds.
                    let spread =
                        Tensor::where_cond(&idx.unsqueeze(2)?.eq(&slot)?, &g.unsqueeze(2)?, 0.0)?;
                    Ok(vec![Some(geo.fold_columns(&spread)?)])
                })
            },
        )?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }

    fn avg_pool_op(
        &self,
        op: &'static str,
        kernel: [usize; 2],
        opts: PoolOptions,
    ) -> Result<Tensor> {
        let (x, unbatched) = batched(op, self, "input")?;
        if opts.dilation != [1, 1] {
            return Err(bad(op, "average pooling takes no dilation"));
        }
        if opts.divisor_override == Some(0) {
            return Err(bad(op, "the divisor override must be positive"));
        }
        let geo = Tensor::pool_geometry(op, &x, kernel, &opts)?;
        // An empty batch divides nothing: one divisor stands for all.
        let divisor = if geo.n == 0 || geo.c == 0 {
            vec![1.0]
        } else {
            genesis_storage::check_host_bytes(geo.positions().saturating_mul(8))?;
            pool_divisors(&geo, &opts)
        };
        // Float16 and bfloat16 in float32, rounded once.
        let y = crate::autograd::op(
            op,
            &[&x],
            || {
                let xp = geo.pad_input(&x.in_opmath()?, 0.0)?;
                // The windows laid out tap by tap (rows of the output innermost), summed over
                // the taps in place.
                let sums = at(&xp, &geo.windows())?
                    .contiguous()?
                    .sum_dim([2isize, 3], false)?;
                divide(&sums, &divisor, geo.out)?.to_dtype(x.dtype())
            },
            |_| {
                let (dtype, divisor) = (x.dtype(), divisor.clone());
                Box::new(move |g, _| {
                    let share = divide(&g.in_opmath()?, &divisor, geo.out)?;
                    let all = || {
                        share
                            .unsqueeze(2)?
                            .unsqueeze(3)?
                            .expand([geo.n, geo.c, geo.k[0], geo.k[1], geo.out[0], geo.out[1]])
                    };
                    let gx = geo.fold(&share, all, |_, _| Ok(share.clone()))?;
                    Ok(vec![Some(gx.to_dtype(dtype)?)])
                })
            },
        )?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }
}

impl Tensor {
    /// Adaptive 2-d average pooling (PyTorch's `F.adaptive_avg_pool2d`) of `self`
    /// (`[N, C, H, W]` or `[C, H, W]`, floating point, `C`, `H`, `W` not 0) to `output_size`
    /// (one number or a pair): output `(i, j)` is the mean of rows
    /// `⌊i·H/OH⌋..⌈(i+1)·H/OH⌉` and columns `⌊j·W/OW⌋..⌈(j+1)·W/OW⌉`. Computed as two matmuls
    /// with the averaging matrices (`P_h · x · P_wᵀ`, each row of `P` `1/len` over its
    /// window): the mean's value within rounding, differentiable.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let x = Tensor::arange(0.0, 10.0, 1.0, DType::F32, Device::Cpu)?.reshape([1, 1, 2, 5])?;
    /// let y = x.adaptive_avg_pool2d([1, 2])?; // columns 0..3 and 2..5
    /// assert_eq!(y.to_vec::<f32>()?, [3.5, 5.5]);
    /// assert_eq!(x.adaptive_avg_pool2d(1)?.to_vec::<f32>()?, [4.5]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn adaptive_avg_pool2d(&self, output_size: impl IntoPair) -> Result<Tensor> {
        let op = "adaptive_avg_pool2d";
        let (x, unbatched) = batched(op, self, "input")?;
        let [oh, ow] = output_size.into_pair();
        let y = adaptive_avg(op, &x, [oh, ow])?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }

    /// Adaptive 1-d average pooling (PyTorch's `F.adaptive_avg_pool1d`) of `self`
    /// (`[N, C, L]` or `[C, L]`): [`Tensor::adaptive_avg_pool2d`] over a height of one.
    #[track_caller]
    pub fn adaptive_avg_pool1d(&self, output_size: usize) -> Result<Tensor> {
        let op = "adaptive_avg_pool1d";
        let x = as_image(op, self)?;
        let (x4, unbatched) = batched(op, &x, "input")?;
        let y = adaptive_avg(op, &x4, [1, output_size])?.squeeze(-2)?;
        if unbatched { y.squeeze(0) } else { Ok(y) }
    }
}

/// `x` (`[n, c, h, w]`) averaged over PyTorch's adaptive windows to `[n, c, oh, ow]`.
fn adaptive_avg(op: &'static str, x: &Tensor, out: [usize; 2]) -> Result<Tensor> {
    float_only(op, x)?;
    let s = x.shape();
    if s[1..].contains(&0) {
        return Err(bad(
            op,
            format!("expected an input with non-zero channels and spatial sizes, got shape {s:?}"),
        ));
    }
    genesis_storage::checked_numel(&[s[0], s[1], out[0], out[1]])?;
    // The averaging matrix `[o, len]` of one dimension.
    let averaging = |o: usize, len: usize| -> Result<Tensor> {
        let cells = o.checked_mul(len).ok_or_else(|| overflow(op))?;
        genesis_storage::check_host_bytes(cells.saturating_mul(8))?;
        let mut p = vec![0.0f64; cells];
        for i in 0..o {
            // ⌊i·len/o⌋ and ⌈(i+1)·len/o⌉ in 128 bits: no overflow.
            let start = (i as u128 * len as u128 / o as u128) as usize;
            let end = ((i as u128 + 1) * len as u128).div_ceil(o as u128) as usize;
            let share = 1.0 / (end - start) as f64;
            p[i * len + start..i * len + end].fill(share);
        }
        Tensor::from_slice(&p, [o, len], x.device())?.to_dtype(x.dtype())
    };
    let pw = averaging(out[1], s[3])?;
    let ph = averaging(out[0], s[2])?;
    ph.matmul(&x.matmul(&pw.t()?)?)
}

/// A 1-d convolution's input, weight (`layout` names its dimensions in the error) and
/// options as a 2-d convolution's over a height of one.
fn conv1d_operands(
    op: &'static str,
    x: &Tensor,
    weight: &Tensor,
    opts: ConvOptions,
    layout: &str,
) -> Result<(Tensor, Tensor, ConvOptions)> {
    let x = as_image(op, x)?;
    if weight.dim() != 3 {
        return Err(bad(
            op,
            format!(
                "weight must be 3-d {layout}, got shape {:?}",
                weight.shape()
            ),
        ));
    }
    Ok((x, weight.unsqueeze(-2)?, conv1d_options(op, opts)?))
}

/// A convolution's operands lowered under autocast (as [`Tensor::linear`]'s, the bias cast to
/// the weight's dtype); `None` outside autocast or when neither operand is float32.
#[allow(clippy::type_complexity)]
fn autocast_conv(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Option<(Tensor, Tensor, Option<Tensor>)>> {
    let Some((x, w)) = crate::autograd::autocast_operands(x, weight)? else {
        return Ok(None);
    };
    let b = match bias {
        Some(b) if b.dtype() != w.dtype() => Some(b.to_dtype(w.dtype())?),
        b => b.cloned(),
    };
    Ok(Some((x, w, b)))
}

/// `t` (`[n, c, h, w]`) as `[groups, c / groups, n · h · w]`: each group's channels with the
/// batch's positions side by side (one copy unless the batch is one image).
fn by_group(t: &Tensor, groups: usize) -> Result<Tensor> {
    let s = t.shape();
    let (n, c, l) = (s[0], s[1], s[2] * s[3]);
    t.reshape([n, c, l])?
        .transpose(0, 1)?
        .contiguous()?
        .reshape([groups, c / groups, n * l])
}

/// `y` (`[n, o, ..]`) plus the channels' `bias` (`[o]`), in place in a contiguous copy.
fn with_bias(y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let Some(b) = bias else {
        return Ok(y);
    };
    let y = y.contiguous()?;
    let mut shape = vec![1usize; y.dim()];
    shape[1] = b.numel();
    y.add_(&b.reshape(shape.as_slice())?)?;
    Ok(y)
}

/// The gradient of a channels' bias of `dtype` from the output's gradient `g`
/// (`[n, o, h, w]`): its sums over every dimension but the channels', when `needed`.
fn bias_grad(g: &Tensor, dtype: DType, needed: bool) -> Result<Option<Tensor>> {
    if !needed {
        return Ok(None);
    }
    Ok(Some(cast_grad(g.sum_dim([0isize, 2, 3], false)?, dtype)?))
}

/// A 1-d convolution's options as a 2-d one's over a height of one.
fn conv1d_options(op: &'static str, opts: ConvOptions) -> Result<ConvOptions> {
    Ok(ConvOptions {
        stride: [1, one(op, "stride", opts.stride)?],
        padding: [0, one(op, "padding", opts.padding)?],
        dilation: [1, one(op, "dilation", opts.dilation)?],
        groups: opts.groups,
        output_padding: [0, one(op, "output padding", opts.output_padding)?],
    })
}

/// A 1-d pooling op's options as a 2-d op's over a height of one.
fn pool1d(op: &'static str, o: PoolOptions) -> Result<PoolOptions> {
    Ok(PoolOptions {
        stride: match o.stride {
            Some(s) => Some([1, one(op, "stride", s)?]),
            None => None,
        },
        padding: [0, one(op, "padding", o.padding)?],
        dilation: [1, one(op, "dilation", o.dilation)?],
        ..o
    })
}

/// `t` (`[.., oh, ow]`) divided by each position's divisor (`divisor`, row-major `[oh, ow]`).
fn divide(t: &Tensor, divisor: &[f64], out: [usize; 2]) -> Result<Tensor> {
    match divisor.first() {
        Some(&d) if divisor.iter().all(|&v| v == d) => t.div(d),
        _ => t.div(&Tensor::from_slice(divisor, out, t.device())?.to_dtype(t.dtype())?),
    }
}

/// Each output position's divisor for average pooling, PyTorch's: the window clipped to the
/// padded input (with `count_include_pad`) or to the input itself, or the override.
fn pool_divisors(geo: &Geometry, opts: &PoolOptions) -> Vec<f64> {
    let count = |a: usize, o: usize| -> usize {
        let len = if a == 0 { geo.h } else { geo.w };
        let (s, k, p) = (geo.stride[a], geo.k[a], geo.pad[a]);
        // In padded coordinates: the window [start, end) clipped to the padded input for
        // the count with padding, to [p, p + len) for the count without.
        let start = o * s;
        let end = (start + k).min(len + 2 * p);
        if opts.count_include_pad {
            end - start
        } else {
            end.min(p + len).saturating_sub(start.max(p))
        }
    };
    let mut out = Vec::with_capacity(geo.positions());
    for i in 0..geo.out[0] {
        for j in 0..geo.out[1] {
            out.push(match opts.divisor_override {
                Some(d) => d as f64,
                None => (count(0, i) * count(1, j)) as f64,
            });
        }
    }
    out
}
