//! Printing tensors as PyTorch does: `Display` gives `repr(tensor)`'s exact string.
//!
//! This is PyTorch's `torch/_tensor_str.py` rewritten: the same formatter (integer mode for
//! floats that are all whole, scientific notation when the largest and smallest nonzero finite
//! magnitudes are more than 1000 apart, above 1e8 or, for fractions, below 1e-4; 4 digits of
//! precision), the same summarisation (more than 1000 elements: the first and last 3 of each
//! dimension around `...`), line breaks at 80 columns, and the same suffixes (`dtype=` when the
//! dtype is not float32, int64 or bool, `device='cuda:N'`, `size=` for empty tensors).
//!
//! Only the elements shown leave the device: their offsets are gathered into a small tensor
//! (one index kernel on the GPU), which is read back whole.

use std::fmt;
use std::sync::{Arc, Mutex};

use genesis_index::{IndexItem, IndexTensor};
use genesis_storage::{DType, Device, Layout, View};

use crate::{Error, Result, Tensor};

/// How tensors print (PyTorch's `torch.set_printoptions`); see [`set_printoptions`], which
/// checks every field against its documented range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrintOptions {
    /// Digits after the decimal point of floats (default 4), at most
    /// [`PrintOptions::MAX_PRECISION`].
    pub precision: usize,
    /// Above this many elements a tensor is summarised (default 1000); any value: 0
    /// summarises every non-empty tensor, `usize::MAX` none.
    pub threshold: usize,
    /// Items shown at each end of a summarised dimension (default 3), at most
    /// [`PrintOptions::MAX_EDGEITEMS`]; 0 shows `...` alone (with the size).
    pub edgeitems: usize,
    /// Characters per line before a break (default 80), at least 1 (a line always holds
    /// one element, however narrow).
    pub linewidth: usize,
    /// Force scientific notation on (`Some(true)`) or off (`Some(false)`); `None` (the
    /// default) decides from the values.
    pub sci_mode: Option<bool>,
}

impl PrintOptions {
    /// PyTorch's defaults.
    pub const DEFAULT: PrintOptions = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };

    /// The largest `precision`: 1000 digits, beyond the 767 significant digits of the longest
    /// exact decimal expansion of an `f64` (every digit past it is a zero), and far below the
    /// 65535 that Rust's formatting machinery accepts.
    pub const MAX_PRECISION: usize = 1000;

    /// The largest `edgeitems`: `isize::MAX`, the longest any dimension can be (so a larger
    /// value would change nothing), and small enough that both ends together
    /// (`2 * edgeitems`) are a `usize`.
    pub const MAX_EDGEITEMS: usize = isize::MAX as usize;

    /// Checks every field against its range: [`Error::InvalidPrintOption`] names the first
    /// field out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |option: &'static str, value: usize, allowed: &'static str| {
            Err(Error::InvalidPrintOption {
                option,
                value,
                allowed,
            })
        };
        if self.precision > PrintOptions::MAX_PRECISION {
            return bad("precision", self.precision, "0 to 1000");
        }
        if self.edgeitems > PrintOptions::MAX_EDGEITEMS {
            return bad("edgeitems", self.edgeitems, "0 to isize::MAX");
        }
        if self.linewidth == 0 {
            return bad("linewidth", self.linewidth, "1 or more");
        }
        Ok(())
    }

    /// The options with every field brought into its range (what the printer uses, so that
    /// it cannot fail whatever it is given).
    fn clamped(&self) -> PrintOptions {
        PrintOptions {
            precision: self.precision.min(PrintOptions::MAX_PRECISION),
            edgeitems: self.edgeitems.min(PrintOptions::MAX_EDGEITEMS),
            linewidth: self.linewidth.max(1),
            ..*self
        }
    }
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions::DEFAULT
    }
}

static OPTIONS: Mutex<PrintOptions> = Mutex::new(PrintOptions::DEFAULT);

/// Sets how tensors print from now on, for the whole process (PyTorch's
/// `torch.set_printoptions`); `PrintOptions::default()` restores PyTorch's defaults.
///
/// Options out of range ([`PrintOptions::validate`]: `precision` above
/// [`PrintOptions::MAX_PRECISION`], `edgeitems` above [`PrintOptions::MAX_EDGEITEMS`],
/// `linewidth` 0) are [`Error::InvalidPrintOption`], and the options stay as they were.
///
/// ```
/// use genesis::{PrintOptions, set_printoptions};
///
/// assert!(set_printoptions(PrintOptions { precision: 1 << 20, ..PrintOptions::default() }).is_err());
/// assert!(set_printoptions(PrintOptions { linewidth: 0, ..PrintOptions::default() }).is_err());
/// assert_eq!(genesis::printoptions(), PrintOptions::default());
/// ```
pub fn set_printoptions(options: PrintOptions) -> Result<()> {
    options.validate()?;
    *OPTIONS.lock().unwrap_or_else(|e| e.into_inner()) = options;
    Ok(())
}

/// The current print options.
pub fn printoptions() -> PrintOptions {
    *OPTIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shown elements, in row-major order of the shown positions.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
            Values::Bool(v) => v.len(),
        }
    }
}

/// Python's `f"{v:.{p}f}"`.
fn fixed(v: f64, precision: usize) -> String {
    match non_finite(v) {
        Some(s) => s.to_string(),
        None => format!("{v:.precision$}"),
    }
}

/// Python's `f"{v:.{p}e}"`: at least two exponent digits, with a sign.
fn sci(v: f64, precision: usize) -> String {
    if let Some(s) = non_finite(v) {
        return s.to_string();
    }
    let s = format!("{v:.precision$e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("nan")
    } else if v == f64::INFINITY {
        Some("inf")
    } else if v == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// PyTorch's `_Formatter`: how every element of one tensor is written, and the width they
/// are padded to.
struct Formatter {
    int_mode: bool,
    sci_mode: bool,
    max_width: usize,
    precision: usize,
}

impl Formatter {
    fn new(values: &Values, opts: &PrintOptions) -> Formatter {
        let mut f = Formatter {
            int_mode: true,
            sci_mode: false,
            max_width: 1,
            precision: opts.precision,
        };
        match values {
            Values::Int(v) => {
                f.max_width = v.iter().map(|x| x.to_string().len()).fold(1, usize::max);
            }
            Values::Bool(v) => {
                f.max_width = v.iter().map(|&b| if b { 4 } else { 5 }).fold(1, usize::max);
            }
            Values::Float(v) => f.scan_floats(v),
        }
        if let Some(sci) = opts.sci_mode {
            f.sci_mode = sci;
        }
        f
    }

    fn scan_floats(&mut self, v: &[f64]) {
        let nonzero: Vec<f64> = v
            .iter()
            .copied()
            .filter(|x| x.is_finite() && *x != 0.0)
            .collect();
        if nonzero.is_empty() {
            return;
        }
        let (min, max) = nonzero.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
            (lo.min(x.abs()), hi.max(x.abs()))
        });
        self.int_mode = nonzero.iter().all(|x| *x == x.ceil());
        let p = self.precision;
        let width = |s: String| s.len();
        if self.int_mode {
            if max / min > 1000.0 || max > 1.0e8 {
                self.sci_mode = true;
                self.max_width = nonzero
                    .iter()
                    .map(|&x| width(sci(x, p)))
                    .fold(1, usize::max);
            } else {
                self.max_width = nonzero
                    .iter()
                    .map(|&x| width(format!("{x:.0}")) + 1)
                    .fold(1, usize::max);
            }
        } else if max / min > 1000.0 || max > 1.0e8 || min < 1.0e-4 {
            self.sci_mode = true;
            self.max_width = nonzero
                .iter()
                .map(|&x| width(sci(x, p)))
                .fold(1, usize::max);
        } else {
            self.max_width = nonzero
                .iter()
                .map(|&x| width(fixed(x, p)))
                .fold(1, usize::max);
        }
    }

    fn float(&self, v: f64) -> String {
        let s = if self.sci_mode {
            sci(v, self.precision)
        } else if self.int_mode {
            let mut s = match non_finite(v) {
                Some(n) => n.to_string(),
                None => format!("{v:.0}"),
            };
            if v.is_finite() {
                s.push('.');
            }
            s
        } else {
            fixed(v, self.precision)
        };
        self.pad(s)
    }

    /// `s` right-aligned to the common width (written out: a width argument of `format!` is
    /// limited to 65535).
    fn pad(&self, s: String) -> String {
        if s.len() >= self.max_width {
            s
        } else {
            let mut out = " ".repeat(self.max_width - s.len());
            out.push_str(&s);
            out
        }
    }

    fn value(&self, values: &Values, i: usize) -> String {
        match values {
            Values::Float(v) => self.float(v[i]),
            Values::Int(v) => self.pad(v[i].to_string()),
            Values::Bool(v) => self.pad(if v[i] { "True" } else { "False" }.to_string()),
        }
    }
}

/// The positions shown along a dimension of `size`: all, or the first and last `edge` when
/// summarising (and the dimension is longer than both ends).
fn shown(size: usize, summarize: bool, edge: usize) -> (Vec<usize>, bool) {
    if summarize && size > edge.saturating_mul(2) {
        ((0..edge).chain(size - edge..size).collect(), true)
    } else {
        ((0..size).collect(), false)
    }
}

struct Printer<'a> {
    values: &'a Values,
    fmt: Formatter,
    dims: Vec<(Vec<usize>, bool)>,
    opts: PrintOptions,
    next: usize,
}

/// A sub-tensor being written: how many of its children are written, and their strings
/// (with the `...` that follows the first `edgeitems` of a summarised dimension).
struct Frame {
    written: usize,
    parts: Vec<String>,
}

impl Frame {
    fn new() -> Frame {
        Frame {
            written: 0,
            parts: Vec::new(),
        }
    }
}

impl Printer<'_> {
    /// PyTorch's `_tensor_str_with_formatter`, written with an explicit stack of the
    /// sub-tensors being written (one frame per dimension) instead of recursion, so that no
    /// rank can exhaust the thread's stack.
    fn render(&mut self, indent: usize) -> String {
        let rank = self.dims.len();
        if rank == 0 {
            self.next += 1;
            return self.fmt.value(self.values, 0);
        }
        let edge = self.opts.edgeitems;
        let mut stack = vec![Frame::new()];
        while !stack.is_empty() {
            let level = stack.len() - 1;
            let frame = &mut stack[level];
            let (count, cut) = (self.dims[level].0.len(), self.dims[level].1);
            let done = if level + 1 == rank {
                self.vector(count, cut, indent.saturating_add(level))
            } else if frame.written < count {
                if cut && frame.written == edge {
                    frame.parts.push("...".to_string());
                }
                frame.written += 1;
                stack.push(Frame::new());
                continue;
            } else {
                if cut && count == 0 {
                    frame.parts.push("...".to_string());
                }
                let sep = format!(
                    ",{}{}",
                    "\n".repeat(rank - level - 1),
                    " ".repeat(indent.saturating_add(level).saturating_add(1))
                );
                format!("[{}]", frame.parts.join(&sep))
            };
            stack.pop();
            match stack.last_mut() {
                Some(parent) => parent.parts.push(done),
                None => return done,
            }
        }
        String::new()
    }

    /// PyTorch's `_vector_str`: the last dimension, `count` elements shown (`cut`: with
    /// `...` after the first `edgeitems`), broken into lines of `linewidth`.
    fn vector(&mut self, count: usize, cut: bool, indent: usize) -> String {
        let edge = self.opts.edgeitems;
        let element_length = self.fmt.max_width.saturating_add(2);
        let per_line = (self.opts.linewidth.saturating_sub(indent) / element_length).max(1);
        let mut data = Vec::with_capacity(count.saturating_add(1));
        if cut && edge == 0 {
            data.push("...".to_string());
        } else {
            for k in 0..count {
                if cut && k == edge {
                    data.push(" ...".to_string());
                }
                data.push(self.fmt.value(self.values, self.next));
                self.next += 1;
            }
        }
        let lines: Vec<String> = data.chunks(per_line).map(|line| line.join(", ")).collect();
        format!(
            "[{}]",
            lines.join(&format!(",\n{}", " ".repeat(indent.saturating_add(1))))
        )
    }
}

impl Tensor {
    /// The elements at `positions` (row-major multi-indices given per dimension as a
    /// cartesian product), copying only them from the device.
    fn shown_values(&self, dims: &[(Vec<usize>, bool)]) -> Result<Values> {
        let layout = self.layout();
        let mut offsets: Vec<i64> = vec![layout.offset() as i64];
        for (d, (idx, _)) in dims.iter().enumerate() {
            let stride = layout.strides()[d] as i64;
            offsets = offsets
                .iter()
                .flat_map(|&o| idx.iter().map(move |&i| o + i as i64 * stride))
                .collect();
        }
        let storage = self.view.storage();
        let flat = View::with_layout(Arc::clone(storage), Layout::new(&[storage.len()], &[1], 0))?;
        let n = offsets.len();
        let picked =
            genesis_index::get(&flat, &[IndexItem::Tensor(IndexTensor::i64(&[n], offsets))])?
                .contiguous()?;
        Ok(match self.dtype() {
            DType::Bool => Values::Bool(picked.to_bytes()?.into_iter().map(|b| b != 0).collect()),
            d if d.is_float() => Values::Float(picked.to_f64_vec()?),
            DType::I64 => Values::Int(picked.to_vec::<i64>()?),
            _ => Values::Int(picked.to_dtype(DType::I64)?.to_vec::<i64>()?),
        })
    }

    /// PyTorch's `repr(tensor)` (what `Display` writes), with `opts` (brought into their
    /// ranges first).
    fn repr_with(&self, opts: &PrintOptions) -> String {
        let opts = &opts.clamped();
        const PREFIX: &str = "tensor(";
        let indent = PREFIX.len();
        let mut suffixes = Vec::new();
        if let Device::Cuda(n) = self.device() {
            suffixes.push(format!("device='cuda:{n}'"));
        }
        let dtype_suffix = format!("dtype=torch.{}", self.dtype().name());
        let body = if self.numel() == 0 {
            if self.dim() != 1 {
                let sizes: Vec<String> = self.shape().iter().map(|s| s.to_string()).collect();
                suffixes.push(format!("size=({})", sizes.join(", ")));
            }
            if self.dtype() != DType::F32 {
                suffixes.push(dtype_suffix);
            }
            "[]".to_string()
        } else {
            if opts.edgeitems == 0 {
                let sizes: Vec<String> = self.shape().iter().map(|s| s.to_string()).collect();
                let comma = if sizes.len() == 1 { "," } else { "" };
                suffixes.push(format!("size=({}{comma})", sizes.join(", ")));
            }
            if !matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool) {
                suffixes.push(dtype_suffix);
            }
            let summarize = self.numel() > opts.threshold;
            let dims: Vec<(Vec<usize>, bool)> = self
                .shape()
                .iter()
                .map(|&s| shown(s, summarize, opts.edgeitems))
                .collect();
            match self.shown_values(&dims) {
                Ok(values) => {
                    debug_assert_eq!(
                        values.len(),
                        dims.iter().map(|d| d.0.len()).product::<usize>()
                    );
                    let mut p = Printer {
                        fmt: Formatter::new(&values, opts),
                        values: &values,
                        dims,
                        opts: *opts,
                        next: 0,
                    };
                    p.render(indent)
                }
                // An error reading the elements is printed, not returned (`to_string` would
                // panic on `fmt::Error`).
                Err(e) => format!("<{e}>"),
            }
        };
        // Autograd, as PyTorch: the op that made the tensor, or that a leaf requires grad.
        if let Some(name) = self.grad_fn_name() {
            suffixes.push(format!("grad_fn=<{}Backward0>", camel(name)));
        } else if self.requires_grad() {
            suffixes.push("requires_grad=True".into());
        }
        // `_add_suffixes`.
        let mut out = format!("{PREFIX}{body}");
        let mut last_line_len = match out.rfind('\n') {
            Some(i) => out.len() - i + 1,
            None => out.len() + 2,
        };
        for suffix in suffixes {
            if last_line_len.saturating_add(suffix.len()).saturating_add(2) > opts.linewidth {
                out.push_str(&format!(",\n{}{suffix}", " ".repeat(indent)));
                last_line_len = indent + suffix.len();
            } else {
                out.push_str(&format!(", {suffix}"));
                last_line_len += suffix.len() + 2;
            }
        }
        out.push(')');
        out
    }
}

impl fmt::Display for Tensor {
    /// PyTorch's `repr`: `tensor([[1., 2.],\n        [3., 4.]])`, `tensor(21.)`,
    /// `tensor([1, 2], dtype=torch.int32, device='cuda:0')`. Tensors of more than 1000
    /// elements are summarised, and only the elements shown are copied from the device.
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor, tensor};
    /// # fn main() -> genesis::Result<()> {
    /// assert_eq!(tensor!([[1., 2.], [3., 4.]])?.to_string(), "tensor([[1., 2.],\n        [3., 4.]])");
    /// assert_eq!(tensor!([1, 2, 3])?.sum()?.to_string(), "tensor(6)");
    /// let x = Tensor::arange(0.0, 1.0, 0.25, DType::F16, Device::Cpu)?;
    /// assert_eq!(x.to_string(), "tensor([0.0000, 0.2500, 0.5000, 0.7500], dtype=torch.float16)");
    /// assert_eq!(tensor!([1e-5, 1.0])?.to_string(), "tensor([1.0000e-05, 1.0000e+00])");
    /// assert_eq!(tensor!([true, false])?.to_string(), "tensor([ True, False])");
    /// # Ok(())
    /// # }
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr_with(&printoptions()))
    }
}

/// `log_softmax` as `LogSoftmax` (PyTorch's names of backward nodes).
fn camel(name: &str) -> String {
    name.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}
