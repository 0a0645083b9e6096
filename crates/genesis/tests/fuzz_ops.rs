//! A seeded random fuzzer of the facade's `Tensor` ops on the CPU. Each case builds tiny random
//! tensors (every dtype, rank 0-4, sizes 0-4, NaN, infinities, -0.0 and the integer extremes
//! among the values; some of them views: transposed, permuted, expanded, narrowed, strided) and
//! calls one op of a wide table (creation, unary and binary ops, comparisons, reductions, shape
//! ops, indexing, gather/scatter and the `index_*` ops, cat/stack/split, sort/topk/unique,
//! the matmul family, linalg, norms, softmax, padding, cumulative ops, masks, einsum, random
//! ops, in-place and `_out` forms, printing) with arguments drawn from adversarial sets
//! (dimensions out of range, `i64::MIN`, huge sizes, NaN and infinite floats, mismatched dtypes
//! and shapes). Every call runs under `catch_unwind`: `Ok` and `Err` are both acceptable, a panic
//! is a failure reported with the seed, the case, the op, its arguments and its inputs (dtype,
//! shape, strides, values and how the view was made). Where an op returns `Ok` its result is
//! checked cheaply: the result on a view must equal the result on a contiguous copy (exactly, or
//! within rounding for sums and products), in-place writes through a view must leave the rest of
//! the storage alone (and a failed one all of it), and some of PyTorch's rules are checked
//! (result shapes of reductions and shape ops, sums of nothing, errors for empty extremes).
//!
//! `GENESIS_FUZZ_SEEDS=1,2,3` picks the seeds (default 1 and 2), `GENESIS_FUZZ_ITERS` the cases
//! per seed (default 1500: a few seconds in a debug build; each case is one to a few calls),
//! `GENESIS_FUZZ_DEVICE=cuda` puts the inputs on CUDA device 0,
//! `GENESIS_FUZZ_CASE` one case to replay, `GENESIS_FUZZ_GROUP` runs only the cases of one group
//! of ops (`autograd`, `indexing`, ...), `GENESIS_FUZZ_TRACE=1` prints every call before it
//! runs, `GENESIS_FUZZ_BACKTRACE=1` adds a backtrace to each panic, `GENESIS_FUZZ_NOTES=1` lists
//! the empty inputs refused for memory, `GENESIS_FUZZ_COVERAGE=1` the calls (and `Ok`s) by op. A call that runs longer than
//! `GENESIS_FUZZ_HANG_S` seconds (default 60) aborts the process, naming the call.
//!
//! The named tests after the fuzzer are the regression tests of what it found.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use genesis::{
    BinaryOp, CompareOp, ConvOptions, DType, Device, IndexItem, PadMode, PoolOptions, ReduceOp,
    Reduction, RoundingMode, Tensor, UnaryOp, bf16, f16,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type R<T> = genesis::Result<T>;

const CPU: Device = Device::Cpu;

const DTYPES: [DType; 10] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// Sizes far beyond any host (at least 2^36 elements): the library must refuse them.
const HUGE: [usize; 6] = [
    1 << 36,
    1 << 40,
    1 << 62,
    usize::MAX,
    isize::MAX as usize,
    (isize::MAX as usize) + 1,
];

// ---------------------------------------------------------------------------------------------
// Panics, hangs and memory
// ---------------------------------------------------------------------------------------------

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The call running now and since when, for the watchdog.
static CURRENT: Mutex<Option<(Instant, String)>> = Mutex::new(None);

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A panic hook that records (and does not print) the panics of the fuzzed calls, with their
/// location; other threads' panics go to the previous hook.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        let backtrace = env_flag("GENESIS_FUZZ_BACKTRACE");
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURING.with(Cell::get) {
                let p = info.payload();
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let bt = if backtrace {
                    format!("\n{}", std::backtrace::Backtrace::force_capture())
                } else {
                    String::new()
                };
                LAST_PANIC.with(|l| *l.borrow_mut() = Some(format!("{msg} (at {at}){bt}")));
            } else {
                prev(info);
            }
        }));
    });
}

/// A thread that aborts the process, naming the call, when one call runs too long (a hang).
fn start_watchdog() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let limit = std::env::var("GENESIS_FUZZ_HANG_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60u64);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let cur = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((since, what)) = &*cur
                    && since.elapsed() > Duration::from_secs(limit)
                {
                    eprintln!("fuzz_ops: a call hung for {:?}: {what}", since.elapsed());
                    std::process::abort();
                }
            }
        });
    });
}

/// The peak resident memory of the process (Linux: `VmHWM`), in bytes.
fn peak_rss() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// The values of a base tensor, by kind.
#[derive(Clone, Debug)]
enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
    B(Vec<bool>),
}

impl Vals {
    fn show(&self) -> String {
        let s = match self {
            Vals::F(v) => format!("{v:?}"),
            Vals::I(v) => format!("{v:?}"),
            Vals::B(v) => format!("{v:?}"),
        };
        if s.len() > 400 {
            format!("{}...]", &s[..400])
        } else {
            s
        }
    }
}

/// One step from a base tensor to the view an op receives.
#[derive(Clone, Debug)]
enum Step {
    Transpose(usize, usize),
    Permute(Vec<usize>),
    Expand(Vec<usize>),
    Narrow(usize, usize, usize),
    /// Every other element of a dimension (`s![.., ..;2]`).
    Stride2(usize),
}

/// A tensor given to an op, with the recipe that made it (for the report and to make it again).
#[derive(Clone)]
struct Input {
    t: Tensor,
    dtype: DType,
    base_shape: Vec<usize>,
    vals: Vals,
    steps: Vec<Step>,
}

impl Input {
    fn desc(&self) -> String {
        let mut s = format!(
            "{:?}{:?} strides {:?} offset {}",
            self.dtype,
            self.t.shape(),
            self.t.strides(),
            self.t.layout().offset()
        );
        if self.steps.is_empty() {
            s += &format!(" = {}", self.vals.show());
        } else {
            s += &format!(
                " (base {:?} = {}, then {:?})",
                self.base_shape,
                self.vals.show(),
                self.steps
            );
        }
        s
    }

    /// A new base with the same values and the view of it.
    fn fresh(&self) -> R<(Tensor, Tensor)> {
        let base = make(self.dtype, &self.base_shape, &self.vals)?;
        let view = apply(&base, &self.steps)?;
        Ok((base, view))
    }

    fn rank(&self) -> usize {
        self.t.dim()
    }

    /// Whether a value is non-finite or so large that its square or a sum of a few overflow
    /// float32 (where the order of a float computation changes the result).
    fn extreme(&self) -> bool {
        match &self.vals {
            Vals::F(v) => v.iter().any(|x| !x.is_finite() || x.abs() > 1e15),
            Vals::I(v) => v.iter().any(|x| x.unsigned_abs() > 1 << 24),
            Vals::B(_) => false,
        }
    }

    fn shape(&self) -> Vec<usize> {
        self.t.shape().to_vec()
    }
}

/// Where the inputs live: the CPU, or CUDA device 0 with `GENESIS_FUZZ_DEVICE=cuda` (other
/// tensors a case makes stay on the CPU, so ops that mix them are device errors).
fn input_device() -> Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    *DEV.get_or_init(|| match std::env::var("GENESIS_FUZZ_DEVICE").as_deref() {
        Ok("cuda") => Device::Cuda(0),
        _ => CPU,
    })
}

/// How an in-place scatter add's values are compared between a view and a contiguous copy:
/// exactly on the CPU, which adds repeated positions in order; within rounding on CUDA, whose
/// atomic adds land in order of arrival (PyTorch's too), so that float sums differ in their
/// last bits (seed 360, case 3899: an f16 `index_add_` read -1980 and -1979).
fn add_order() -> Cmp {
    if input_device() == CPU {
        Cmp::Exact
    } else {
        Cmp::Approx
    }
}

fn make(dtype: DType, shape: &[usize], vals: &Vals) -> R<Tensor> {
    let t = make_on_cpu(dtype, shape, vals)?;
    match input_device() {
        CPU => Ok(t),
        dev => t.to(dev),
    }
}

fn make_on_cpu(dtype: DType, shape: &[usize], vals: &Vals) -> R<Tensor> {
    let sh = shape.to_vec();
    match vals {
        Vals::B(b) => Tensor::from_bools(b, sh, CPU),
        Vals::I(v) => match dtype {
            DType::U8 => {
                Tensor::from_slice(&v.iter().map(|&x| x as u8).collect::<Vec<_>>(), sh, CPU)
            }
            DType::I8 => {
                Tensor::from_slice(&v.iter().map(|&x| x as i8).collect::<Vec<_>>(), sh, CPU)
            }
            DType::I16 => {
                Tensor::from_slice(&v.iter().map(|&x| x as i16).collect::<Vec<_>>(), sh, CPU)
            }
            DType::I32 => {
                Tensor::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>(), sh, CPU)
            }
            _ => Tensor::from_slice(v, sh, CPU),
        },
        Vals::F(v) => match dtype {
            DType::F16 => Tensor::from_slice(
                &v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>(),
                sh,
                CPU,
            ),
            DType::BF16 => Tensor::from_slice(
                &v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>(),
                sh,
                CPU,
            ),
            DType::F32 => {
                Tensor::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), sh, CPU)
            }
            _ => Tensor::from_slice(v, sh, CPU),
        },
    }
}

fn stride2_items(rank: usize, d: usize) -> Vec<IndexItem> {
    let mut items = vec![IndexItem::full(); d];
    items.push(IndexItem::Slice {
        start: Some(0),
        stop: None,
        step: Some(2),
    });
    items.resize(rank, IndexItem::full());
    items
}

fn apply(base: &Tensor, steps: &[Step]) -> R<Tensor> {
    let mut t = base.clone();
    for s in steps {
        t = match s {
            Step::Transpose(a, b) => t.transpose(*a, *b)?,
            Step::Permute(p) => t.permute(p)?,
            Step::Expand(sh) => t.expand(sh)?,
            Step::Narrow(d, start, len) => t.narrow(*d, *start, *len)?,
            Step::Stride2(d) => t.i(&stride2_items(t.dim(), *d))?,
        };
    }
    Ok(t)
}

fn pick<T: Copy>(rng: &mut SmallRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

fn float_val(rng: &mut SmallRng, dtype: DType) -> f64 {
    if rng.random_bool(0.75) {
        if rng.random_bool(0.5) {
            f64::from(rng.random_range(-3i32..=3))
        } else {
            f64::from(rng.random_range(-16i32..=16)) / 4.0
        }
    } else {
        let max = match dtype {
            DType::F16 => 65504.0,
            DType::BF16 => 3.3895313892515355e38,
            DType::F32 => f64::from(f32::MAX),
            _ => f64::MAX,
        };
        pick(
            rng,
            &[
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                0.0,
                max,
                -max,
                1e-40,
                6e-8,
                1e30,
                -1e30,
                0.1,
                1e10,
                -7.0,
            ],
        )
    }
}

fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::I16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        DType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    }
}

fn int_val(rng: &mut SmallRng, dtype: DType) -> i64 {
    let (lo, hi) = int_range(dtype);
    if rng.random_bool(0.8) {
        rng.random_range(-3i64..=4).clamp(lo, hi)
    } else {
        pick(rng, &[lo, hi, lo + 1, hi - 1, 0, 1, -1, 127, 100]).clamp(lo, hi)
    }
}

fn gen_vals(rng: &mut SmallRng, dtype: DType, n: usize) -> Vals {
    match dtype {
        DType::Bool => Vals::B((0..n).map(|_| rng.random_bool(0.5)).collect()),
        d if d.is_float() => Vals::F((0..n).map(|_| float_val(rng, d)).collect()),
        d => Vals::I((0..n).map(|_| int_val(rng, d)).collect()),
    }
}

fn gen_shape(rng: &mut SmallRng) -> Vec<usize> {
    if rng.random_bool(0.03) {
        // No elements, but a huge dimension: ops must not walk it.
        let rank = rng.random_range(2..=3);
        let mut s: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=3)).collect();
        let h = rng.random_range(0..rank);
        let z = (h + rng.random_range(1..rank)) % rank;
        s[h] = pick(rng, &[1 << 36, 1 << 40, 1 << 62, isize::MAX as usize]);
        s[z] = 0;
        return s;
    }
    if rng.random_bool(0.04) {
        // More dimensions than the kernels' iterations take (eight): ops must still run.
        let rank = rng.random_range(9..=10);
        return (0..rank).map(|_| rng.random_range(1..=2)).collect();
    }
    let rank = pick(rng, &[0, 1, 1, 1, 2, 2, 2, 3, 3, 4]);
    (0..rank)
        .map(|_| {
            if rng.random_bool(0.1) {
                0
            } else {
                rng.random_range(1..=4)
            }
        })
        .collect()
}

fn gen_dtype(rng: &mut SmallRng) -> DType {
    pick(rng, &DTYPES)
}

fn gen_float_dtype(rng: &mut SmallRng) -> DType {
    if rng.random_bool(0.85) {
        pick(rng, &[DType::F16, DType::BF16, DType::F32, DType::F64])
    } else {
        gen_dtype(rng)
    }
}

/// A tensor of `dtype` and `shape`, often a view (transposed, permuted, expanded, narrowed or
/// strided) of a larger or smaller base.
fn gen_input_with(rng: &mut SmallRng, dtype: DType, shape: &[usize]) -> Input {
    // A shape derived from a huge empty one may have lost its 0: made small again.
    let small: Vec<usize>;
    let shape = match shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) {
        Some(n) if n <= 4096 => shape,
        _ if shape.contains(&0) => shape,
        _ => {
            small = shape.iter().map(|&d| d.min(4)).collect();
            &small
        }
    };
    let rank = shape.len();
    let mut base_shape = shape.to_vec();
    let mut steps = Vec::new();
    let mode = if rng.random_bool(0.5) {
        0
    } else {
        rng.random_range(1..=6)
    };
    match mode {
        1 if rank >= 2 => {
            let a = rng.random_range(0..rank);
            let b = (a + rng.random_range(1..rank)) % rank;
            base_shape.swap(a, b);
            steps.push(Step::Transpose(a, b));
        }
        2 if rank >= 2 => {
            let mut p: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                p.swap(i, rng.random_range(0..=i));
            }
            for (i, &pi) in p.iter().enumerate() {
                base_shape[pi] = shape[i];
            }
            steps.push(Step::Permute(p));
        }
        3 if rank >= 1 => {
            let drop = rng.random_range(0..=rank.min(1));
            base_shape = shape[drop..]
                .iter()
                .map(|&s| if rng.random_bool(0.5) { 1 } else { s })
                .collect();
            steps.push(Step::Expand(shape.to_vec()));
        }
        4 if rank >= 1 => {
            let d = rng.random_range(0..rank);
            let extra = rng.random_range(1..=2);
            let start = rng.random_range(0..=extra);
            base_shape[d] += extra;
            steps.push(Step::Narrow(d, start, shape[d]));
        }
        5 if rank >= 1 => {
            let d = rng.random_range(0..rank);
            base_shape[d] = if shape[d] == 0 {
                0
            } else {
                2 * shape[d] - rng.random_range(0..=1)
            };
            steps.push(Step::Stride2(d));
        }
        6 if rank >= 2 => {
            // A narrowed and then transposed view.
            let d = rng.random_range(0..rank);
            let a = rng.random_range(0..rank);
            let b = (a + rng.random_range(1..rank)) % rank;
            let mut mid = shape.to_vec();
            mid.swap(a, b);
            base_shape = mid.clone();
            base_shape[d] += 1;
            steps.push(Step::Narrow(d, 1, mid[d]));
            steps.push(Step::Transpose(a, b));
        }
        _ => {}
    }
    let count = |s: &[usize]| s.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count(&base_shape).is_none_or(|n| n > 4096) {
        // A view's base of a huge empty shape can hold elements: the shape itself instead.
        base_shape = shape.to_vec();
        steps.clear();
    }
    let n = count(&base_shape).unwrap_or(0);
    let vals = gen_vals(rng, dtype, n);
    let t = match make(dtype, &base_shape, &vals).and_then(|b| apply(&b, &steps)) {
        Ok(t) => t,
        // A base beyond the library's sizes (a huge empty one made larger): contiguous.
        Err(_) if !steps.is_empty() => {
            base_shape = shape.to_vec();
            steps.clear();
            make(dtype, &base_shape, &vals).expect("the fuzzer's tensor")
        }
        Err(e) => panic!("the fuzzer's tensor {dtype:?}{shape:?}: {e}"),
    };
    // A base dimension beyond i64::MAX saturates (as every shape argument does): the view of
    // a huge empty base then differs; the shape itself instead.
    let t = if t.shape() != shape && !steps.is_empty() {
        base_shape = shape.to_vec();
        steps.clear();
        make(dtype, &base_shape, &vals).expect("the fuzzer's tensor")
    } else {
        t
    };
    assert_eq!(t.shape(), shape, "the fuzzer's view {steps:?}");
    Input {
        t,
        dtype,
        base_shape,
        vals,
        steps,
    }
}

fn gen_input(rng: &mut SmallRng) -> Input {
    let dtype = gen_dtype(rng);
    let shape = gen_shape(rng);
    gen_input_with(rng, dtype, &shape)
}

fn gen_float_input(rng: &mut SmallRng) -> Input {
    let dtype = gen_float_dtype(rng);
    let shape = gen_shape(rng);
    gen_input_with(rng, dtype, &shape)
}

/// A shape that broadcasts with `shape` (mostly), or a random one.
fn partner_shape(rng: &mut SmallRng, shape: &[usize]) -> Vec<usize> {
    match rng.random_range(0..10) {
        0..=4 => shape.to_vec(),
        5..=7 => {
            let drop = rng.random_range(0..=shape.len());
            shape[drop..]
                .iter()
                .map(|&s| if rng.random_bool(0.3) { 1 } else { s })
                .collect()
        }
        _ => gen_shape(rng),
    }
}

/// A second operand for `a`: a broadcastable shape (mostly) and the same dtype (half the time).
fn gen_partner(rng: &mut SmallRng, a: &Input) -> Input {
    let dtype = if rng.random_bool(0.5) {
        a.dtype
    } else {
        gen_dtype(rng)
    };
    let shape = partner_shape(rng, &a.shape());
    gen_input_with(rng, dtype, &shape)
}

/// An index tensor of `shape`: int64 (mostly) in `-bound..bound` (mostly), sometimes out of
/// range or of another dtype.
fn gen_index(rng: &mut SmallRng, shape: &[usize], bound: usize) -> Input {
    let small: Vec<usize>;
    let shape = match shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) {
        Some(n) if n <= 4096 => shape,
        _ if shape.contains(&0) => shape,
        _ => {
            small = shape.iter().map(|&d| d.min(4)).collect();
            &small
        }
    };
    let b = (bound as u64).min(i64::MAX as u64) as i64;
    let dtype = match rng.random_range(0..20) {
        0 => DType::I32,
        1 => DType::U8,
        2 => DType::F32,
        3 => DType::Bool,
        4 => DType::I16,
        _ => DType::I64,
    };
    let n: usize = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .unwrap_or(0);
    let bad = rng.random_bool(0.15);
    let vals = match dtype {
        DType::Bool => Vals::B((0..n).map(|_| rng.random_bool(0.5)).collect()),
        DType::F32 => Vals::F((0..n).map(|_| f64::from(rng.random_range(0..3))).collect()),
        d => {
            let (lo, hi) = int_range(d);
            Vals::I(
                (0..n)
                    .map(|_| {
                        let v = if bad && rng.random_bool(0.3) {
                            pick(
                                rng,
                                &[b, -b - 1, i64::MIN, i64::MAX, b.saturating_add(7), -1],
                            )
                        } else if b == 0 {
                            0
                        } else if rng.random_bool(0.8) {
                            rng.random_range(0..b)
                        } else {
                            rng.random_range(-b..b)
                        };
                        v.clamp(lo, hi)
                    })
                    .collect(),
            )
        }
    };
    let base = make(dtype, shape, &vals).expect("the fuzzer's index");
    let mut inp = Input {
        t: base,
        dtype,
        base_shape: shape.to_vec(),
        vals,
        steps: Vec::new(),
    };
    if shape.len() >= 2 && rng.random_bool(0.2) {
        // A transposed index: same values, other strides.
        let mut bs = shape.to_vec();
        bs.swap(0, 1);
        let vals2 = inp.vals.clone();
        let base = make(dtype, &bs, &vals2).expect("the fuzzer's index");
        inp = Input {
            t: base.transpose(0, 1).expect("transpose"),
            dtype,
            base_shape: bs,
            vals: vals2,
            steps: vec![Step::Transpose(0, 1)],
        };
    }
    inp
}

// Adversarial arguments.

fn dim(rng: &mut SmallRng, rank: usize) -> i64 {
    if rng.random_bool(0.8) {
        let r = rank.max(1) as i64;
        rng.random_range(-r..r)
    } else {
        let r = rank as i64;
        pick(
            rng,
            &[
                -5,
                -2,
                -1,
                0,
                1,
                r,
                r + 1,
                -r - 1,
                i64::MIN,
                i64::MAX,
                64,
                -65,
            ],
        )
    }
}

fn dims(rng: &mut SmallRng, rank: usize) -> Vec<i64> {
    let extra = usize::from(rng.random_bool(0.1));
    let n = rng.random_range(0..=rank.min(3) + extra);
    (0..n).map(|_| dim(rng, rank)).collect()
}

fn size(rng: &mut SmallRng) -> usize {
    if rng.random_bool(0.85) {
        rng.random_range(0..=5)
    } else {
        pick(rng, &HUGE)
    }
}

fn int_arg(rng: &mut SmallRng) -> i64 {
    if rng.random_bool(0.8) {
        rng.random_range(-5..=5)
    } else {
        pick(
            rng,
            &[
                i64::MIN,
                i64::MAX,
                i64::MIN + 1,
                i64::from(i32::MAX),
                1 << 40,
                -(1 << 40),
            ],
        )
    }
}

fn fl(rng: &mut SmallRng) -> f64 {
    if rng.random_bool(0.6) {
        pick(rng, &[0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 1e-3])
    } else {
        pick(
            rng,
            &[
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                1e308,
                f64::MAX,
                f64::MIN_POSITIVE,
                5e-324,
                1e10,
                -1e10,
                1e20,
                70000.0,
            ],
        )
    }
}

/// A scalar argument of any Rust type.
#[derive(Clone, Copy, Debug)]
enum Sc {
    F(f64),
    F32(f32),
    H(f16),
    I(i64),
    U(u64),
    U8(u8),
    B(bool),
}

fn scalar(rng: &mut SmallRng) -> Sc {
    match rng.random_range(0..10) {
        0..=2 => Sc::F(fl(rng)),
        3 => Sc::F32(fl(rng) as f32),
        4 => Sc::H(f16::from_f64(fl(rng))),
        5..=7 => Sc::I(int_arg(rng)),
        8 => Sc::U(pick(rng, &[0, 3, u64::MAX, 1 << 63, 255])),
        _ => {
            if rng.random_bool(0.5) {
                Sc::U8(pick(rng, &[0, 1, 255]))
            } else {
                Sc::B(rng.random_bool(0.5))
            }
        }
    }
}

/// Two scalars of one Rust type (for `clamp`).
fn scalar_pair(rng: &mut SmallRng) -> (Sc, Sc) {
    match rng.random_range(0..3) {
        0 => (Sc::F(fl(rng)), Sc::F(fl(rng))),
        1 => (Sc::I(int_arg(rng)), Sc::I(int_arg(rng))),
        _ => (Sc::B(rng.random_bool(0.5)), Sc::B(rng.random_bool(0.5))),
    }
}

/// `$e` with `$v` bound to the scalar's value, whatever its type.
macro_rules! with_sc {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            Sc::F($v) => $e,
            Sc::F32($v) => $e,
            Sc::H($v) => $e,
            Sc::I($v) => $e,
            Sc::U($v) => $e,
            Sc::U8($v) => $e,
            Sc::B($v) => $e,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Comparing results
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Debug)]
enum Cmp {
    /// Bit-exact (NaN equal to NaN; -0.0 and 0.0 distinct).
    Exact,
    /// Within rounding (sums, products), non-finite elements not compared.
    Approx,
    /// Only the shapes and dtypes compared.
    Shape,
    /// Not compared (random results, or results that legitimately depend on the layout).
    Skip,
}

impl Cmp {
    /// This comparison for results of `inputs`: within rounding is meaningless where sums of
    /// the inputs overflow, so then only the shapes and dtypes are compared.
    fn for_inputs(self, inputs: &[&Input]) -> Cmp {
        if self == Cmp::Approx && inputs.iter().any(|i| i.extreme()) {
            Cmp::Shape
        } else {
            self
        }
    }
}

enum Values {
    F(Vec<f64>),
    I(Vec<i64>),
}

fn values(t: &Tensor) -> R<Values> {
    if t.dtype().is_float() {
        Ok(Values::F(t.to_dtype(DType::F64)?.to_vec::<f64>()?))
    } else {
        Ok(Values::I(t.to_dtype(DType::I64)?.to_vec::<i64>()?))
    }
}

fn f64s(t: &Tensor) -> R<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

fn i64s(t: &Tensor) -> R<Vec<i64>> {
    t.to_dtype(DType::I64)?.to_vec::<i64>()
}

fn eps_of(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        DType::F32 => 1.2e-7,
        _ => 2.3e-16,
    }
}

/// Whether two results agree: exactly, or (`Cmp::Approx`) within rounding at the precision
/// `eps` (at least that of their dtype).
fn same(a: &Tensor, b: &Tensor, cmp: Cmp, eps: f64) -> Result<(), String> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Err(format!(
            "{:?}{:?} vs {:?}{:?}",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        ));
    }
    if cmp == Cmp::Shape {
        return Ok(());
    }
    let (va, vb) = match (values(a), values(b)) {
        (Ok(va), Ok(vb)) => (va, vb),
        (ra, rb) => {
            return Err(format!(
                "reading the results: {:?} / {:?}",
                ra.err(),
                rb.err()
            ));
        }
    };
    let eps = eps.max(eps_of(a.dtype()));
    match (va, vb) {
        (Values::F(x), Values::F(y)) => {
            let scale = x
                .iter()
                .chain(&y)
                .filter(|v| v.is_finite())
                .fold(1.0f64, |m, v| m.max(v.abs()));
            for (i, (p, q)) in x.iter().zip(&y).enumerate() {
                let ok = match cmp {
                    Cmp::Exact => {
                        (p.is_nan() && q.is_nan())
                            || (p == q && p.is_sign_negative() == q.is_sign_negative())
                    }
                    _ => !p.is_finite() || !q.is_finite() || (p - q).abs() <= 512.0 * eps * scale,
                };
                if !ok {
                    return Err(format!("element {i}: {p:?} vs {q:?}"));
                }
            }
        }
        (Values::I(x), Values::I(y)) => {
            if let Some(i) = (0..x.len()).find(|&i| x[i] != y[i]) {
                return Err(format!("element {i}: {} vs {}", x[i], y[i]));
            }
        }
        _ => return Err("kinds differ".into()),
    }
    Ok(())
}

/// The shape of a reduction of `shape` over `dims` (PyTorch's rules: a 0-d tensor takes 0 and
/// -1; an empty list reduces every dimension), or `None` when PyTorch refuses the dims.
fn reduced_shape(shape: &[usize], dims: &[i64], keep: bool) -> Option<Vec<usize>> {
    let rank = shape.len();
    let r = rank.max(1) as i64;
    let mut seen = vec![false; rank.max(1)];
    for &d in dims {
        if d < -r || d >= r {
            return None;
        }
        let w = d.rem_euclid(r) as usize;
        if seen[w] {
            return None;
        }
        seen[w] = true;
    }
    let all = dims.is_empty();
    Some(
        shape
            .iter()
            .enumerate()
            .filter_map(|(i, &s)| {
                if all || seen[i] {
                    keep.then_some(1)
                } else {
                    Some(s)
                }
            })
            .collect(),
    )
}

fn wrap(d: i64, rank: usize) -> Option<usize> {
    let r = rank.max(1) as i64;
    (d >= -r && d < r).then(|| d.rem_euclid(r) as usize)
}

// ---------------------------------------------------------------------------------------------
// The runner
// ---------------------------------------------------------------------------------------------

type Outs = Vec<Tensor>;

struct Fuzz {
    seed: u64,
    case: u64,
    trace: bool,
    failures: Vec<String>,
    /// Calls worth a look that are not failures (`GENESIS_FUZZ_NOTES=1` prints them): an
    /// empty input refused for memory, which a result of no elements would not need.
    notes: Vec<String>,
    calls: BTreeMap<&'static str, usize>,
    /// The calls that returned `Ok`, by op.
    oks: BTreeMap<&'static str, usize>,
    total: usize,
    slow: Duration,
    rss_reported: bool,
}

impl Fuzz {
    fn new(seed: u64) -> Fuzz {
        Fuzz {
            seed,
            case: 0,
            trace: env_flag("GENESIS_FUZZ_TRACE"),
            failures: Vec::new(),
            notes: Vec::new(),
            calls: BTreeMap::new(),
            oks: BTreeMap::new(),
            total: 0,
            slow: Duration::from_secs(5),
            rss_reported: false,
        }
    }

    fn fail(&mut self, op: &str, args: &str, inputs: &[&Input], what: String) {
        let ins: Vec<String> = inputs
            .iter()
            .map(|i| format!("\n    {}", i.desc()))
            .collect();
        self.failures.push(format!(
            "[GENESIS_FUZZ_SEEDS={} GENESIS_FUZZ_CASE={}] {op}({args}): {what}{}",
            self.seed,
            self.case,
            ins.concat()
        ));
    }

    /// Runs `f` under `catch_unwind`, the watchdog and the clock: `None` (and a failure) when
    /// it panics.
    fn guard<T>(
        &mut self,
        op: &'static str,
        args: &str,
        inputs: &[&Input],
        f: impl FnOnce() -> T,
    ) -> Option<T> {
        *self.calls.entry(op).or_default() += 1;
        self.total += 1;
        let ctx = format!(
            "[GENESIS_FUZZ_SEEDS={} GENESIS_FUZZ_CASE={}] {op}({args})",
            self.seed, self.case
        );
        if self.trace {
            let ins: Vec<String> = inputs.iter().map(|i| i.desc()).collect();
            eprintln!("{ctx} on {ins:?}");
        }
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), ctx));
        CAPTURING.with(|c| c.set(true));
        let start = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(f));
        CAPTURING.with(|c| c.set(false));
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let took = start.elapsed();
        if took > self.slow {
            eprintln!(
                "fuzz_ops: slow call ({took:?}): seed {} case {}: {op}({args})",
                self.seed, self.case
            );
            self.fail(op, args, inputs, format!("took {took:?}"));
        }
        if !self.rss_reported && peak_rss().is_some_and(|b| b > 1 << 30) {
            self.rss_reported = true;
            self.fail(
                op,
                args,
                inputs,
                "the process's peak memory passed 1 GiB".into(),
            );
        }
        match r {
            Ok(v) => Some(v),
            Err(p) => {
                let m = LAST_PANIC
                    .with(|l| l.borrow_mut().take())
                    .unwrap_or_else(|| {
                        p.downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default()
                    });
                self.fail(op, args, inputs, format!("panicked: {m}"));
                None
            }
        }
    }

    /// Calls `f` on the inputs; when one is not contiguous and `cmp` asks, again on contiguous
    /// copies, comparing. The outputs when `Ok`.
    fn run(
        &mut self,
        op: &'static str,
        args: &str,
        inputs: &[&Input],
        cmp: Cmp,
        f: impl Fn(&[Tensor]) -> R<Outs>,
    ) -> Option<Outs> {
        let ts: Vec<Tensor> = inputs.iter().map(|i| i.t.clone()).collect();
        let outs = match self.guard(op, args, inputs, || f(&ts))? {
            Ok(o) => {
                *self.oks.entry(op).or_default() += 1;
                o
            }
            Err(e) => {
                self.guard("error Display", args, inputs, || e.to_string());
                if e.is_out_of_memory()
                    && !inputs.is_empty()
                    && inputs.iter().all(|i| i.t.numel() == 0)
                {
                    let ins: Vec<String> = inputs.iter().map(|i| i.desc()).collect();
                    self.notes.push(format!("{op}({args}) on {ins:?}: {e}"));
                }
                return None;
            }
        };
        // A view of a huge broadcast (an `expand`, a repeat of one element) is a legitimate
        // result that the host cannot materialise: not read back, not compared.
        if outs.iter().any(|o| o.numel() > 1 << 16) {
            return Some(outs);
        }
        // Every result must read back.
        for (k, o) in outs.iter().enumerate() {
            if let Some(Err(e)) = self.guard("read result", args, inputs, || values(o)) {
                self.fail(
                    op,
                    args,
                    inputs,
                    format!("result {k} does not read back: {e}"),
                );
            }
        }
        // Rounding at the precision of the least precise float input.
        let eps = inputs
            .iter()
            .filter(|i| i.dtype.is_float())
            .map(|i| eps_of(i.dtype))
            .fold(0.0, f64::max);
        let cmp = cmp.for_inputs(inputs);
        if cmp != Cmp::Skip && inputs.iter().any(|i| !i.t.is_contiguous()) {
            let cs: R<Vec<Tensor>> = inputs.iter().map(|i| i.t.contiguous()).collect();
            let Ok(cs) = cs else {
                self.fail(op, args, inputs, "contiguous() of an input failed".into());
                return Some(outs);
            };
            match self.guard(op, &format!("{args} [contiguous copies]"), inputs, || {
                f(&cs)
            }) {
                Some(Ok(o2)) => {
                    if o2.len() != outs.len() {
                        self.fail(
                            op,
                            args,
                            inputs,
                            "result counts depend on the layout".into(),
                        );
                    }
                    for (k, (a, b)) in outs.iter().zip(&o2).enumerate() {
                        if let Err(why) = same(a, b, cmp, eps) {
                            self.fail(
                                op,
                                args,
                                inputs,
                                format!("result {k} depends on the layout: {why}"),
                            );
                        }
                    }
                }
                Some(Err(e)) => self.fail(
                    op,
                    args,
                    inputs,
                    format!("Ok on the views, Err on contiguous copies: {e}"),
                ),
                None => {}
            }
        }
        Some(outs)
    }

    /// An in-place op on a view of `target`: the rest of the base must stay as it was (all of
    /// it when the op fails), and the view's new values must equal those of the op on a
    /// contiguous copy.
    fn inplace(
        &mut self,
        op: &'static str,
        args: &str,
        target: &Input,
        others: &[&Input],
        f: impl Fn(&Tensor, &[Tensor]) -> R<()>,
    ) {
        self.inplace_cmp(op, args, target, others, Cmp::Exact, f);
    }

    /// [`Fuzz::inplace`] comparing the view's values with the contiguous copy's by `cmp`
    /// (within rounding for adds whose order is unspecified, only the shapes where the inputs'
    /// sums overflow).
    fn inplace_cmp(
        &mut self,
        op: &'static str,
        args: &str,
        target: &Input,
        others: &[&Input],
        cmp: Cmp,
        f: impl Fn(&Tensor, &[Tensor]) -> R<()>,
    ) {
        let mut inputs = vec![target];
        inputs.extend_from_slice(others);
        let Ok((base, view)) = target.fresh() else {
            self.fail(op, args, &inputs, "remaking the target failed".into());
            return;
        };
        let ots: Vec<Tensor> = others.iter().map(|i| i.t.clone()).collect();
        let before = values(&base).ok();
        let r = self.guard(op, args, &inputs, || f(&view, &ots));
        let Some(r) = r else { return };
        if r.is_ok() {
            *self.oks.entry(op).or_default() += 1;
        }
        let after = values(&base).ok();
        let (Some(before), Some(after)) = (before, after) else {
            self.fail(op, args, &inputs, "reading the base failed".into());
            return;
        };
        // The positions of the base the view covers.
        let n = target
            .base_shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(0);
        if n == 0 {
            // Nothing to write or to keep.
            return;
        }
        let covered: Vec<bool> = {
            let mut c = vec![false; n];
            let ords = Tensor::arange(0.0, n as f64, 1.0, DType::I64, CPU)
                .and_then(|o| o.reshape(&target.base_shape))
                .and_then(|o| apply(&o, &target.steps))
                .and_then(|o| i64s(&o));
            match ords {
                Ok(ords) => {
                    for o in ords {
                        c[o as usize] = true;
                    }
                }
                Err(e) => {
                    self.fail(op, args, &inputs, format!("ordinals: {e}"));
                    return;
                }
            }
            c
        };
        let changed: Vec<usize> = match (&before, &after) {
            (Values::F(x), Values::F(y)) => (0..n)
                .filter(|&i| {
                    !(x[i] == y[i] && x[i].is_sign_negative() == y[i].is_sign_negative()
                        || x[i].is_nan() && y[i].is_nan())
                })
                .collect(),
            (Values::I(x), Values::I(y)) => (0..n).filter(|&i| x[i] != y[i]).collect(),
            _ => vec![],
        };
        match r {
            Err(e) => {
                if !changed.is_empty() {
                    self.fail(
                        op,
                        args,
                        &inputs,
                        format!("failed ({e}) but wrote base elements {changed:?}"),
                    );
                }
            }
            Ok(()) => {
                let outside: Vec<usize> =
                    changed.iter().copied().filter(|&i| !covered[i]).collect();
                if !outside.is_empty() {
                    self.fail(
                        op,
                        args,
                        &inputs,
                        format!("wrote base elements {outside:?} outside the view"),
                    );
                }
                // The same op on a contiguous copy of the view (not for a view whose elements
                // share memory, an `expand`: a write to one is a write to all, as in PyTorch).
                let overlaps = target
                    .t
                    .shape()
                    .iter()
                    .zip(target.t.strides())
                    .any(|(&n, &s)| n > 1 && s == 0);
                if overlaps {
                    return;
                }
                let Ok(copy) = target.t.contiguous().and_then(|c| c.deep_clone()) else {
                    return;
                };
                let ocs: R<Vec<Tensor>> = others.iter().map(|i| i.t.contiguous()).collect();
                let Ok(ocs) = ocs else { return };
                match self.guard(op, &format!("{args} [contiguous copies]"), &inputs, || {
                    f(&copy, &ocs)
                }) {
                    Some(Ok(())) => {
                        if let Err(why) = same(&view, &copy, cmp.for_inputs(&inputs), 0.0) {
                            self.fail(
                                op,
                                args,
                                &inputs,
                                format!("the values written depend on the layout: {why}"),
                            );
                        }
                    }
                    Some(Err(e)) => self.fail(
                        op,
                        args,
                        &inputs,
                        format!("Ok on the view, Err on a contiguous copy: {e}"),
                    ),
                    None => {}
                }
            }
        }
    }

    fn expect(
        &mut self,
        ok: bool,
        op: &str,
        args: &str,
        inputs: &[&Input],
        what: impl FnOnce() -> String,
    ) {
        if !ok {
            self.fail(op, args, inputs, what());
        }
    }
}

fn one(t: Tensor) -> R<Outs> {
    Ok(vec![t])
}

fn two((a, b): (Tensor, Tensor)) -> R<Outs> {
    Ok(vec![a, b])
}

fn bool_t(b: bool) -> R<Outs> {
    one(Tensor::from_bools(&[b], (), CPU)?)
}

fn uniq(u: genesis::Unique) -> R<Outs> {
    let mut v = vec![u.0];
    v.extend(u.1);
    v.extend(u.2);
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The op table
// ---------------------------------------------------------------------------------------------

/// A group of ops: it draws its op, inputs and arguments from the case's generator.
type Group = fn(&mut Fuzz, &mut SmallRng);

/// The groups of ops (a case runs one, picked at random; some twice as likely).
const GROUPS: &[(&str, Group)] = &[
    ("creation", creation),
    ("unary", unary),
    ("scalar ops", scalar_ops),
    ("binary", binary),
    ("reductions", reductions),
    ("dim reductions", dim_reductions),
    ("cumulative", cumulative),
    ("shape", shape_ops),
    ("arrange", arrange_ops),
    ("join", join_ops),
    ("indexing", indexing),
    ("gather scatter", gather_scatter),
    ("index along", index_along),
    ("selection", selection),
    ("sorting", sorting),
    ("matmul", matmul_ops),
    ("linalg", linalg_ops),
    ("nn", nn_ops),
    ("einsum", einsum_ops),
    ("in place", inplace_ops),
    ("misc", misc_ops),
    ("autograd", autograd_ops),
    ("autograd", autograd_ops),
    ("aliasing", aliasing_ops),
];

fn creation(fz: &mut Fuzz, rng: &mut SmallRng) {
    let dtype = gen_dtype(rng);
    let sh: Vec<i64> = (0..rng.random_range(0..=3))
        .map(|_| {
            if rng.random_bool(0.85) {
                rng.random_range(0..=3)
            } else {
                pick(rng, &[-1, -5, 1 << 46, 1 << 40, i64::MAX, i64::MIN])
            }
        })
        .collect();
    let a = format!("{sh:?}, {dtype:?}");
    // PyTorch's rule: sizes non-negative, and a shape with a 0 holds nothing however large
    // the others.
    let valid = sh.iter().all(|&s| s >= 0) && (sh.contains(&0) || sh.iter().all(|&s| s <= 3));
    match rng.random_range(0..14) {
        0 => {
            if let Some(o) = fz.run("zeros", &a, &[], Cmp::Skip, |_| {
                one(Tensor::zeros(&sh, dtype, CPU)?)
            }) {
                let want: Vec<usize> = sh.iter().map(|&s| s as usize).collect();
                fz.expect(valid && o[0].shape() == want, "zeros", &a, &[], || {
                    "shape".into()
                });
            } else {
                fz.expect(!valid, "zeros", &a, &[], || "refused a valid shape".into());
            }
        }
        1 => {
            fz.run("ones", &a, &[], Cmp::Skip, |_| {
                one(Tensor::ones(&sh, dtype, CPU)?)
            });
        }
        2 => {
            fz.run("empty", &a, &[], Cmp::Skip, |_| {
                one(Tensor::empty(&sh, dtype, CPU)?)
            });
        }
        3 => {
            let v = fl(rng);
            let a = format!("{a}, {v}");
            fz.run("full f64", &a, &[], Cmp::Skip, |_| {
                one(Tensor::full(&sh, v, CPU)?)
            });
        }
        4 => {
            let pts = [
                0.0,
                1.0,
                -3.0,
                5.0,
                2.5,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                1e15,
                -1e15,
                1e300,
                9.007e15,
                -0.0,
            ];
            let steps = [
                1.0,
                -1.0,
                0.5,
                0.0,
                -0.0,
                f64::NAN,
                f64::INFINITY,
                1e-300,
                3.0,
                1e15,
                1e300,
                -0.75,
            ];
            let (s, e, st) = (pick(rng, &pts), pick(rng, &pts), pick(rng, &steps));
            let a = format!("{s}, {e}, {st}, {dtype:?}");
            if let Some(o) = fz.run("arange", &a, &[], Cmp::Skip, |_| {
                one(Tensor::arange(s, e, st, dtype, CPU)?)
            }) {
                let n = ((e - s) / st).ceil();
                if dtype.is_float() && n.is_finite() && n >= 0.0 {
                    fz.expect(o[0].shape() == [n as usize], "arange", &a, &[], || {
                        format!("shape {:?}, want [{n}]", o[0].shape())
                    });
                }
            }
        }
        5 => {
            let (s, e) = (fl(rng), fl(rng));
            let n = size(rng);
            let a = format!("{s}, {e}, {n}, {dtype:?}");
            if let Some(o) = fz.run("linspace", &a, &[], Cmp::Skip, |_| {
                one(Tensor::linspace(s, e, n, dtype, CPU)?)
            }) {
                fz.expect(o[0].shape() == [n], "linspace", &a, &[], || {
                    format!("shape {:?}", o[0].shape())
                });
            }
        }
        6 => {
            let (s, e, b) = (fl(rng), fl(rng), fl(rng));
            let n = size(rng);
            let a = format!("{s}, {e}, {n}, {b}, {dtype:?}");
            fz.run("logspace", &a, &[], Cmp::Skip, |_| {
                one(Tensor::logspace(s, e, n, b, dtype, CPU)?)
            });
        }
        7 => {
            let n = size(rng);
            let m = if rng.random_bool(0.5) {
                Some(size(rng))
            } else {
                None
            };
            let a = format!("{n}, {m:?}, {dtype:?}");
            if let Some(o) = fz.run("eye", &a, &[], Cmp::Skip, |_| {
                one(Tensor::eye(n, m, dtype, CPU)?)
            }) {
                fz.expect(o[0].shape() == [n, m.unwrap_or(n)], "eye", &a, &[], || {
                    format!("shape {:?}", o[0].shape())
                });
            }
        }
        8 => {
            let (r, c, off) = (size(rng), size(rng), int_arg(rng));
            let a = format!("{r}, {c}, {off}");
            // The count, walked only for small matrices.
            let small = r <= 64 && c <= 64;
            if rng.random_bool(0.5) {
                if let Some(o) = fz.run("triu_indices", &a, &[], Cmp::Skip, |_| {
                    one(Tensor::triu_indices(r, c, off, CPU)?)
                }) {
                    let count = if small {
                        (0..r)
                            .map(|i| (0..c).filter(|&j| j as i64 - i as i64 >= off).count())
                            .sum::<usize>()
                    } else {
                        0
                    };
                    fz.expect(
                        !small || o[0].shape() == [2, count],
                        "triu_indices",
                        &a,
                        &[],
                        || format!("shape {:?} want [2, {count}]", o[0].shape()),
                    );
                }
            } else if let Some(o) = fz.run("tril_indices", &a, &[], Cmp::Skip, |_| {
                one(Tensor::tril_indices(r, c, off, CPU)?)
            }) {
                let count = if small {
                    (0..r)
                        .map(|i| (0..c).filter(|&j| j as i64 - i as i64 <= off).count())
                        .sum::<usize>()
                } else {
                    0
                };
                fz.expect(
                    !small || o[0].shape() == [2, count],
                    "tril_indices",
                    &a,
                    &[],
                    || format!("shape {:?} want [2, {count}]", o[0].shape()),
                );
            }
        }
        9 => {
            let n = size(rng);
            let a = format!("{n}, {dtype:?}");
            if let Some(o) = fz.run("randperm", &a, &[], Cmp::Skip, |_| {
                one(Tensor::randperm(n, dtype, CPU)?)
            }) {
                fz.expect(o[0].shape() == [n], "randperm", &a, &[], || "shape".into());
            }
        }
        10 => {
            let a2 = a.clone();
            if rng.random_bool(0.5) {
                fz.run("rand", &a2, &[], Cmp::Skip, |_| {
                    one(Tensor::rand(&sh, dtype, CPU)?)
                });
            } else {
                fz.run("randn", &a2, &[], Cmp::Skip, |_| {
                    one(Tensor::randn(&sh, dtype, CPU)?)
                });
            }
        }
        11 => {
            let (lo, hi) = (int_arg(rng), int_arg(rng));
            let a = format!("{lo}, {hi}, {a}");
            if let Some(o) = fz.run("randint", &a, &[], Cmp::Skip, |_| {
                one(Tensor::randint(lo, hi, &sh, dtype, CPU)?)
            }) && let Ok(v) = f64s(&o[0])
            {
                // A float result is an integer of [lo, hi) rounded to the dtype: it lies between
                // lo and hi - 1 rounded the same way (hi as an f64 may round down onto lo).
                let (flo, fhi) = Tensor::from_slice(&[lo, hi.wrapping_sub(1)], [2], CPU)
                    .and_then(|t| t.to_dtype(dtype))
                    .ok()
                    .and_then(|t| f64s(&t).ok())
                    .map_or((lo as f64, hi as f64), |b| (b[0], b[1]));
                let bad = v.iter().find(|&&x| x < flo || x > fhi);
                fz.expect(
                    bad.is_none() || !dtype.is_float(),
                    "randint",
                    &a,
                    &[],
                    || format!("value {bad:?} outside [{lo}, {hi})"),
                );
            }
        }
        12 => {
            // from_slice with a shape that may not match the data.
            let n = rng.random_range(0..=6);
            let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let a = format!("{n} values, shape {sh:?}");
            fz.run("from_slice", &a, &[], Cmp::Skip, |_| {
                one(Tensor::from_slice(&data, &sh, CPU)?)
            });
        }
        _ => {
            let x = gen_input(rng);
            let s = scalar(rng);
            let a = format!("{s:?}");
            fz.run(
                "full_like",
                &a,
                &[&x],
                Cmp::Skip,
                |t| with_sc!(s, v => one(t[0].full_like(v)?)),
            );
            fz.run("zeros_like", "", &[&x], Cmp::Exact, |t| {
                one(t[0].zeros_like()?)
            });
            fz.run("ones_like", "", &[&x], Cmp::Exact, |t| {
                one(t[0].ones_like()?)
            });
            fz.run("empty_like", "", &[&x], Cmp::Skip, |t| {
                one(t[0].empty_like()?)
            });
            fz.run(
                "rand_like",
                "",
                &[&x],
                Cmp::Skip,
                |t| one(t[0].rand_like()?),
            );
            fz.run("randn_like", "", &[&x], Cmp::Skip, |t| {
                one(t[0].randn_like()?)
            });
        }
    }
}

fn unary(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let ops = UnaryOp::ALL;
    for _ in 0..4 {
        let op = pick(rng, &ops);
        let a = format!("{op:?}");
        if let Some(o) = fz.run("unary", &a, &[&x], Cmp::Exact, |t| one(t[0].unary(op)?)) {
            fz.expect(o[0].shape() == x.t.shape(), "unary", &a, &[&x], || {
                format!("shape {:?}", o[0].shape())
            });
        }
    }
    match rng.random_range(0..12) {
        0 => {
            fz.run("isnan", "", &[&x], Cmp::Exact, |t| one(t[0].isnan()?));
            fz.run("isinf", "", &[&x], Cmp::Exact, |t| one(t[0].isinf()?));
            fz.run("isfinite", "", &[&x], Cmp::Exact, |t| one(t[0].isfinite()?));
        }
        1 => {
            let (n, p, m) = (
                fl(rng),
                rng.random_bool(0.5).then(|| fl(rng)),
                rng.random_bool(0.5).then(|| fl(rng)),
            );
            let a = format!("{n}, {p:?}, {m:?}");
            fz.run("nan_to_num", &a, &[&x], Cmp::Exact, |t| {
                one(t[0].nan_to_num(n, p, m)?)
            });
        }
        2 => {
            let (b, th) = (fl(rng), fl(rng));
            let a = format!("{b}, {th}");
            fz.run("softplus_with", &a, &[&x], Cmp::Exact, |t| {
                one(t[0].softplus_with(b, th)?)
            });
        }
        3 => {
            let e = rng.random_bool(0.5).then(|| fl(rng));
            let a = format!("{e:?}");
            fz.run("logit", &a, &[&x], Cmp::Exact, |t| one(t[0].logit(e)?));
        }
        4 => {
            fz.run("sinc", "", &[&x], Cmp::Exact, |t| one(t[0].sinc()?));
            fz.run("frac", "", &[&x], Cmp::Exact, |t| one(t[0].frac()?));
        }
        5 => {
            fz.run("deg2rad", "", &[&x], Cmp::Exact, |t| one(t[0].deg2rad()?));
            fz.run("rad2deg", "", &[&x], Cmp::Exact, |t| one(t[0].rad2deg()?));
        }
        6 => {
            fz.run("logical_not", "", &[&x], Cmp::Exact, |t| {
                one(t[0].logical_not()?)
            });
        }
        7 => {
            let (lo, hi) = scalar_pair(rng);
            let (ul, uh) = (rng.random_bool(0.8), rng.random_bool(0.8));
            let a = format!("{lo:?} ({ul}), {hi:?} ({uh})");
            fz.run("clamp", &a, &[&x], Cmp::Exact, |t| match (lo, hi) {
                (Sc::F(l), Sc::F(h)) => one(t[0].clamp(ul.then_some(l), uh.then_some(h))?),
                (Sc::I(l), Sc::I(h)) => one(t[0].clamp(ul.then_some(l), uh.then_some(h))?),
                (Sc::B(l), Sc::B(h)) => one(t[0].clamp(ul.then_some(l), uh.then_some(h))?),
                _ => unreachable!(),
            });
        }
        8 => {
            let s = scalar(rng);
            let a = format!("{s:?}");
            fz.run(
                "clamp_min",
                &a,
                &[&x],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].clamp_min(v)?)),
            );
            fz.run(
                "clamp_max",
                &a,
                &[&x],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].clamp_max(v)?)),
            );
        }
        9 => {
            let s = scalar(rng);
            let a = format!("{s:?}");
            fz.run(
                "pow_scalar",
                &a,
                &[&x],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].pow_scalar(v)?)),
            );
            fz.run(
                "scalar_pow",
                &a,
                &[&x],
                Cmp::Exact,
                |t| with_sc!(s, v => one(Tensor::scalar_pow(v, &t[0])?)),
            );
        }
        10 => {
            let mut out_in = gen_partner(rng, &x);
            if rng.random_bool(0.5) {
                out_in = gen_input_with(rng, out_in.dtype, &x.shape());
            }
            let op = pick(rng, &ops);
            let a = format!("{op:?}");
            fz.run("unary_out", &a, &[&x, &out_in], Cmp::Exact, |t| {
                let mut out = t[1].deep_clone()?;
                t[0].unary_out(op, &mut out)?;
                one(out)
            });
            fz.run("exp_out", "", &[&x, &out_in], Cmp::Exact, |t| {
                let mut out = t[1].deep_clone()?;
                t[0].exp_out(&mut out)?;
                one(out)
            });
        }
        _ => {
            let opts = genesis::PrintOptions {
                precision: pick(rng, &[0, 1, 4, 17, 1000, 1001]),
                threshold: pick(rng, &[0, 1, 5, 1000, usize::MAX]),
                edgeitems: pick(rng, &[0, 1, 3, 1 << 40, usize::MAX]),
                linewidth: pick(rng, &[0, 1, 10, 80, usize::MAX]),
                sci_mode: pick(rng, &[None, Some(true), Some(false)]),
            };
            let a = format!("{opts:?}");
            fz.run("display", &a, &[&x], Cmp::Skip, |t| {
                // The options are global: the fuzzer is the only test that prints.
                let set = genesis::set_printoptions(opts);
                let s = format!("{}", t[0]);
                let d = format!("{:?}", t[0]);
                genesis::set_printoptions(genesis::PrintOptions::DEFAULT)?;
                set?;
                assert!(!s.is_empty() && !d.is_empty());
                Ok(vec![])
            });
            fz.run("item", "", &[&x], Cmp::Exact, |t| {
                let _ = t[0].item::<f64>()?;
                let _ = t[0].item::<i64>()?;
                let _ = t[0].item::<bool>()?;
                Ok(vec![])
            });
            fz.run("to_vec2", "", &[&x], Cmp::Skip, |t| {
                let _ = t[0].to_vec2::<f32>()?;
                Ok(vec![])
            });
            fz.run("to_vec3", "", &[&x], Cmp::Skip, |t| {
                let _ = t[0].to_vec3::<bool>()?;
                let _ = t[0].to_dtype(DType::I64)?.to_vec3::<i64>()?;
                Ok(vec![])
            });
        }
    }
}

fn scalar_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let s = scalar(rng);
    let a = format!("{s:?}");
    let which = rng.random_range(0..16);
    let name: &'static str = [
        "add",
        "sub",
        "mul",
        "div",
        "maximum",
        "minimum",
        "floor_divide",
        "remainder",
        "fmod",
        "atan2",
        "hypot",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "pow",
        "compare",
    ][which];
    let out = fz.run(name, &a, &[&x], Cmp::Exact, |t| {
        let t = &t[0];
        with_sc!(s, v => one(match which {
            0 => t.add(v)?,
            1 => t.sub(v)?,
            2 => t.mul(v)?,
            3 => t.div(v)?,
            4 => t.maximum(v)?,
            5 => t.minimum(v)?,
            6 => t.floor_divide(v)?,
            7 => t.remainder(v)?,
            8 => t.fmod(v)?,
            9 => t.atan2(v)?,
            10 => t.hypot(v)?,
            11 => t.bitwise_and(v)?,
            12 => t.bitwise_or(v)?,
            13 => t.bitwise_xor(v)?,
            14 => t.pow(v)?,
            _ => t.lt(v)?,
        }))
    });
    if let Some(o) = out {
        fz.expect(o[0].shape() == x.t.shape(), name, &a, &[&x], || {
            format!("shape {:?}", o[0].shape())
        });
    }
    let op = pick(rng, &BinaryOp::ALL);
    let f = fl(rng);
    let a = format!("{op:?}, {f}");
    fz.run("binary_scalar", &a, &[&x], Cmp::Exact, |t| {
        one(t[0].binary_scalar(op, f)?)
    });
    let cop = pick(rng, &CompareOp::ALL);
    let a = format!("{cop:?}, {s:?}");
    fz.run(
        "compare_scalar",
        &a,
        &[&x],
        Cmp::Exact,
        |t| with_sc!(s, v => one(t[0].compare_scalar(cop, v)?)),
    );
    let mode = if rng.random_bool(0.5) {
        RoundingMode::Trunc
    } else {
        RoundingMode::Floor
    };
    let a = format!("{s:?}, {mode:?}");
    fz.run(
        "div_mode",
        &a,
        &[&x],
        Cmp::Exact,
        |t| with_sc!(s, v => one(t[0].div_mode(v, mode)?)),
    );
}

fn binary(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let y = gen_partner(rng, &x);
    let bshape = genesis::broadcast_shape("fuzz", x.t.shape(), y.t.shape()).ok();
    let check_shape = |fz: &mut Fuzz, name: &str, o: &Option<Outs>, x: &Input, y: &Input| {
        if let Some(o) = o {
            fz.expect(
                Some(o[0].shape().to_vec()) == bshape,
                name,
                "",
                &[x, y],
                || format!("shape {:?}, broadcast {bshape:?}", o[0].shape()),
            );
        }
    };
    for _ in 0..3 {
        let op = pick(rng, &BinaryOp::ALL);
        let a = format!("{op:?}");
        let o = fz.run("binary", &a, &[&x, &y], Cmp::Exact, |t| {
            one(t[0].binary(op, &t[1])?)
        });
        check_shape(fz, "binary", &o, &x, &y);
        if let Some(o) = &o {
            let want = genesis::result_type(&x.t, &y.t);
            let ok = o[0].dtype() == want
                || !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul);
            fz.expect(ok, "binary", &a, &[&x, &y], || {
                format!("dtype {:?}, result_type {want:?}", o[0].dtype())
            });
        }
    }
    let cop = pick(rng, &CompareOp::ALL);
    let a = format!("{cop:?}");
    let o = fz.run("compare", &a, &[&x, &y], Cmp::Exact, |t| {
        one(t[0].compare(cop, &t[1])?)
    });
    check_shape(fz, "compare", &o, &x, &y);
    let which = rng.random_range(0..24);
    let name: &'static str = [
        "maximum",
        "minimum",
        "floor_divide",
        "remainder",
        "fmod",
        "atan2",
        "hypot",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "logaddexp",
        "logaddexp2",
        "xlogy",
        "heaviside",
        "logical_and",
        "logical_or",
        "logical_xor",
        "pow",
        "div_mode trunc",
        "div_mode floor",
        "eq",
        "ge",
        "outer",
        "kron",
    ][which];
    let o = fz.run(name, "", &[&x, &y], Cmp::Exact, |t| {
        let (a, b) = (&t[0], &t[1]);
        one(match which {
            0 => a.maximum(b)?,
            1 => a.minimum(b)?,
            2 => a.floor_divide(b)?,
            3 => a.remainder(b)?,
            4 => a.fmod(b)?,
            5 => a.atan2(b)?,
            6 => a.hypot(b)?,
            7 => a.bitwise_and(b)?,
            8 => a.bitwise_or(b)?,
            9 => a.bitwise_xor(b)?,
            10 => a.logaddexp(b)?,
            11 => a.logaddexp2(b)?,
            12 => a.xlogy(b)?,
            13 => a.heaviside(b)?,
            14 => a.logical_and(b)?,
            15 => a.logical_or(b)?,
            16 => a.logical_xor(b)?,
            17 => a.pow(b)?,
            18 => a.div_mode(b, RoundingMode::Trunc)?,
            19 => a.div_mode(b, RoundingMode::Floor)?,
            20 => a.eq(b)?,
            21 => a.ge(b)?,
            22 => a.outer(b)?,
            _ => a.kron(b)?,
        })
    });
    if which < 22 {
        check_shape(fz, name, &o, &x, &y);
    }
    match rng.random_range(0..8) {
        0 => {
            let (rt, at, en) = (fl(rng), fl(rng), rng.random_bool(0.5));
            let a = format!("{rt}, {at}, {en}");
            fz.run("isclose", &a, &[&x, &y], Cmp::Exact, |t| {
                one(t[0].isclose(&t[1], rt, at, en)?)
            });
            fz.run("allclose", &a, &[&x, &y], Cmp::Exact, |t| {
                bool_t(t[0].allclose(&t[1], rt, at, en)?)
            });
            fz.run("equal", "", &[&x, &y], Cmp::Exact, |t| {
                bool_t(t[0].equal(&t[1])?)
            });
        }
        1 => {
            let w = fl(rng);
            let a = format!("{w}");
            fz.run("lerp", &a, &[&x, &y], Cmp::Exact, |t| {
                one(t[0].lerp(&t[1], w)?)
            });
            let z = gen_partner(rng, &x);
            fz.run("lerp_tensor", "", &[&x, &y, &z], Cmp::Exact, |t| {
                one(t[0].lerp_tensor(&t[1], &t[2])?)
            });
        }
        2 => {
            let z = gen_partner(rng, &x);
            let v = fl(rng);
            let a = format!("{v}");
            fz.run("addcmul", &a, &[&x, &y, &z], Cmp::Exact, |t| {
                one(t[0].addcmul(&t[1], &t[2], v)?)
            });
            fz.run("addcdiv", &a, &[&x, &y, &z], Cmp::Exact, |t| {
                one(t[0].addcdiv(&t[1], &t[2], v)?)
            });
        }
        3 => {
            let cdt = if rng.random_bool(0.8) {
                DType::Bool
            } else {
                gen_dtype(rng)
            };
            let csh = partner_shape(rng, &x.shape());
            let c = gen_input_with(rng, cdt, &csh);
            fz.run("where_cond", "", &[&c, &x, &y], Cmp::Exact, |t| {
                one(Tensor::where_cond(&t[0], &t[1], &t[2])?)
            });
            let s = scalar(rng);
            let a = format!("{s:?}");
            fz.run(
                "where_cond scalar",
                &a,
                &[&c, &x],
                Cmp::Exact,
                |t| with_sc!(s, v => one(Tensor::where_cond(&t[0], &t[1], v)?)),
            );
            let s2 = scalar(rng);
            let a = format!("{s:?}, {s2:?}");
            fz.run(
                "where_cond scalars",
                &a,
                &[&c],
                Cmp::Exact,
                |t| with_sc!(s, v => with_sc!(s2, w => one(Tensor::where_cond(&t[0], v, w)?))),
            );
        }
        4 => {
            let op = pick(rng, &BinaryOp::ALL);
            let o_in = if rng.random_bool(0.5) {
                {
                    let odt = if rng.random_bool(0.5) {
                        x.dtype
                    } else {
                        gen_dtype(rng)
                    };
                    gen_input_with(rng, odt, &bshape.clone().unwrap_or_default())
                }
            } else {
                gen_input(rng)
            };
            let a = format!("{op:?}");
            fz.run("binary_out", &a, &[&x, &y, &o_in], Cmp::Exact, |t| {
                let mut out = t[2].deep_clone()?;
                t[0].binary_out(op, &t[1], &mut out)?;
                one(out)
            });
            fz.run("add_out", "", &[&x, &y, &o_in], Cmp::Exact, |t| {
                let mut out = t[2].deep_clone()?;
                t[0].add_out(&t[1], &mut out)?;
                one(out)
            });
            fz.run("div_out", "", &[&x, &y, &o_in], Cmp::Exact, |t| {
                let mut out = t[2].deep_clone()?;
                t[0].div_out(&t[1], &mut out)?;
                one(out)
            });
        }
        5 => {
            let p = fl(rng);
            let a = format!("{p}");
            fz.run("dist", &a, &[&x, &y], Cmp::Approx, |t| {
                one(t[0].dist(&t[1], p)?)
            });
        }
        6 => {
            let d = dim(rng, x.rank());
            let e = fl(rng);
            let a = format!("{d}, {e}");
            fz.run("cosine_similarity", &a, &[&x, &y], Cmp::Approx, |t| {
                one(t[0].cosine_similarity(&t[1], d, e)?)
            });
        }
        _ => {
            let inv = rng.random_bool(0.5);
            let a = format!("{inv}");
            fz.run("isin", &a, &[&x, &y], Cmp::Exact, |t| {
                one(t[0].isin(&t[1], inv)?)
            });
            fz.run("result_type", "", &[&x, &y], Cmp::Skip, |t| {
                let _ = genesis::result_type(&t[0], &t[1]);
                Ok(vec![])
            });
        }
    }
}

fn reductions(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let empty = x.t.numel() == 0;
    let inputs = [&x];
    if let Some(o) = fz.run("sum", "", &inputs, Cmp::Approx, |t| one(t[0].sum()?)) {
        fz.expect(o[0].shape().is_empty(), "sum", "", &inputs, || {
            "not 0-d".into()
        });
        if empty {
            let v = f64s(&o[0]).unwrap_or_default();
            fz.expect(v == [0.0], "sum", "", &inputs, || {
                format!("sum of nothing {v:?}")
            });
        }
        let want = if x.dtype.is_float() {
            x.dtype
        } else {
            DType::I64
        };
        fz.expect(o[0].dtype() == want, "sum", "", &inputs, || {
            format!("dtype {:?}", o[0].dtype())
        });
    }
    if let Some(o) = fz.run("prod", "", &inputs, Cmp::Approx, |t| one(t[0].prod()?))
        && empty
    {
        let v = f64s(&o[0]).unwrap_or_default();
        fz.expect(v == [1.0], "prod", "", &inputs, || {
            format!("prod of nothing {v:?}")
        });
    }
    let mean = fz.run("mean", "", &inputs, Cmp::Approx, |t| one(t[0].mean()?));
    fz.expect(
        mean.is_none() || x.dtype.is_float(),
        "mean",
        "",
        &inputs,
        || "PyTorch refuses the mean of an integer tensor".into(),
    );
    for (name, f) in [
        ("max", Tensor::max as fn(&Tensor) -> R<Tensor>),
        ("min", Tensor::min),
        ("argmax", Tensor::argmax),
        ("argmin", Tensor::argmin),
        ("median", Tensor::median),
    ] {
        let o = fz.run(name, "", &inputs, Cmp::Exact, |t| one(f(&t[0])?));
        fz.expect(!(empty && o.is_some()), name, "", &inputs, || {
            "Ok on an empty tensor".into()
        });
    }
    fz.run("any", "", &inputs, Cmp::Exact, |t| one(t[0].any()?));
    fz.run("all", "", &inputs, Cmp::Exact, |t| one(t[0].all()?));
    let c = fl(rng);
    let a = format!("{c}");
    fz.run("var", &a, &inputs, Cmp::Approx, |t| one(t[0].var(c)?));
    fz.run("std", &a, &inputs, Cmp::Approx, |t| one(t[0].std(c)?));
    fz.run("count_nonzero all", "", &inputs, Cmp::Exact, |t| {
        one(t[0].count_nonzero(())?)
    });
    if let Some(o) = fz.run("nonzero", "", &inputs, Cmp::Exact, |t| one(t[0].nonzero()?)) {
        fz.expect(
            o[0].dim() == 2 && o[0].shape()[1] == x.rank(),
            "nonzero",
            "",
            &inputs,
            || format!("shape {:?}", o[0].shape()),
        );
    }
    fz.run("argwhere", "", &inputs, Cmp::Exact, |t| {
        one(t[0].argwhere()?)
    });
    fz.run("nonzero_tuple", "", &inputs, Cmp::Exact, |t| {
        t[0].nonzero_tuple()
    });
    fz.run("aminmax all", "", &inputs, Cmp::Exact, |t| {
        two(t[0].aminmax(None, false)?)
    });
    let op = pick(rng, &ReduceOp::ALL);
    let keep = rng.random_bool(0.5);
    let a = format!("{op:?}, None, {keep}");
    fz.run("reduce", &a, &inputs, Cmp::Approx, |t| {
        let (v, i) = t[0].reduce(op, None, keep)?;
        let mut o = vec![v];
        o.extend(i);
        Ok(o)
    });
}

fn dim_reductions(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let ds = dims(rng, rank);
    let keep = rng.random_bool(0.5);
    let want = reduced_shape(x.t.shape(), &ds, keep);
    let a = format!("{ds:?}, {keep}");
    let inputs = [&x];
    let which = rng.random_range(0..17);
    let name: &'static str = [
        "sum_dim",
        "mean_dim",
        "amax",
        "amin",
        "any_dim",
        "all_dim",
        "var_dim",
        "std_dim",
        "nansum",
        "nanmean",
        "logsumexp",
        "vector_norm",
        "count_nonzero",
        "var_mean",
        "std_mean",
        "reduce",
        "prod_dim",
    ][which];
    let c = fl(rng);
    let ord = fl(rng);
    let rop = pick(rng, &ReduceOp::ALL);
    let a = match which {
        6 | 7 | 13 | 14 => format!("{a}, correction {c}"),
        11 => format!("{a}, ord {ord}"),
        15 => format!("{a}, {rop:?}"),
        _ => a,
    };
    let isize_dims: Vec<isize> = ds.iter().map(|&d| d as isize).collect();
    let cmp = if matches!(which, 2..=5 | 12) {
        Cmp::Exact
    } else {
        Cmp::Approx
    };
    let o = fz.run(name, &a, &inputs, cmp, |t| {
        let t = &t[0];
        match which {
            0 => one(t.sum_dim(&ds, keep)?),
            1 => one(t.mean_dim(&ds, keep)?),
            2 => one(t.amax(&ds, keep)?),
            3 => one(t.amin(&ds, keep)?),
            4 => one(t.any_dim(&ds, keep)?),
            5 => one(t.all_dim(&ds, keep)?),
            6 => one(t.var_dim(&ds, c, keep)?),
            7 => one(t.std_dim(&ds, c, keep)?),
            8 => one(t.nansum(&ds, keep)?),
            9 => one(t.nanmean(&ds, keep)?),
            10 => one(t.logsumexp(&ds, keep)?),
            11 => one(t.vector_norm(ord, &ds, keep)?),
            12 => one(t.count_nonzero(&ds)?),
            13 => two(t.var_mean(&ds, c, keep)?),
            14 => two(t.std_mean(&ds, c, keep)?),
            15 => {
                let (v, i) = t.reduce(rop, Some(&isize_dims), keep)?;
                let mut o = vec![v];
                o.extend(i);
                Ok(o)
            }
            _ => {
                let d = ds.first().copied().unwrap_or(0);
                one(t.prod_dim(d, keep)?)
            }
        }
    });
    // PyTorch's shapes where the dims are non-empty (an empty list's meaning varies by op).
    if !ds.is_empty() && which != 16 {
        let want = if which == 12 {
            reduced_shape(x.t.shape(), &ds, false)
        } else {
            want.clone()
        };
        match (&o, &want) {
            (Some(o), Some(w)) => {
                fz.expect(o[0].shape() == w.as_slice(), name, &a, &inputs, || {
                    format!("shape {:?}, want {w:?}", o[0].shape())
                })
            }
            (Some(o), None) => fz.fail(
                name,
                &a,
                &inputs,
                format!("accepted invalid dims: shape {:?}", o[0].shape()),
            ),
            _ => {}
        }
    }
    // One dim: max_dim and friends.
    let d = dim(rng, rank);
    let a = format!("{d}, {keep}");
    let want1 = reduced_shape(x.t.shape(), &[d], keep);
    let which = rng.random_range(0..9);
    let name: &'static str = [
        "max_dim",
        "min_dim",
        "argmax_dim",
        "argmin_dim",
        "softmax",
        "log_softmax",
        "aminmax",
        "prod_dim",
        "median via sort",
    ][which];
    let o = fz.run(
        name,
        &a,
        &inputs,
        if matches!(which, 4 | 5 | 7) {
            Cmp::Approx
        } else {
            Cmp::Exact
        },
        |t| {
            let t = &t[0];
            match which {
                0 => two(t.max_dim(d, keep)?),
                1 => two(t.min_dim(d, keep)?),
                2 => one(t.argmax_dim(d, keep)?),
                3 => one(t.argmin_dim(d, keep)?),
                4 => one(t.softmax(d)?),
                5 => one(t.log_softmax(d)?),
                6 => two(t.aminmax(Some(d as isize), keep)?),
                7 => one(t.prod_dim(d, keep)?),
                _ => two(t.sort(d, false)?),
            }
        },
    );
    if let Some(o) = &o {
        match (which, &want1) {
            (4 | 5 | 8, Some(_)) => {
                fz.expect(o[0].shape() == x.t.shape(), name, &a, &inputs, || {
                    format!("shape {:?}", o[0].shape())
                })
            }
            (_, Some(w)) => fz.expect(o[0].shape() == w.as_slice(), name, &a, &inputs, || {
                format!("shape {:?}, want {w:?}", o[0].shape())
            }),
            (_, None) => fz.fail(
                name,
                &a,
                &inputs,
                format!("accepted dim {d} of a rank-{rank} tensor"),
            ),
        }
    }
}

fn cumulative(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let d = dim(rng, x.rank());
    let a = format!("{d}");
    let inputs = [&x];
    let which = rng.random_range(0..10);
    let name: &'static str = [
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "logcumsumexp",
        "diff",
        "trapezoid",
        "trapezoid_x",
        "renorm",
        "normalize",
    ][which];
    let n = size(rng);
    let p = fl(rng);
    let e = fl(rng);
    let xs = gen_partner(rng, &x);
    let pre = rng.random_bool(0.3).then(|| gen_partner(rng, &x));
    let app = rng.random_bool(0.3).then(|| gen_partner(rng, &x));
    let a = match which {
        5 => format!(
            "n {n}, dim {d}, prepend {}, append {}",
            pre.is_some(),
            app.is_some()
        ),
        6 => format!("dx {p}, dim {d}"),
        8 => format!("p {p}, dim {d}, maxnorm {e}"),
        9 => format!("p {p}, dim {d}, eps {e}"),
        _ => a,
    };
    let mut ins = vec![&x];
    if which == 7 {
        ins.push(&xs);
    }
    if which == 5 {
        ins.extend(pre.iter());
        ins.extend(app.iter());
    }
    let cmp = if matches!(which, 2 | 3) {
        Cmp::Exact
    } else {
        Cmp::Approx
    };
    let o = fz.run(name, &a, &ins, cmp, |t| {
        let x = &t[0];
        match which {
            0 => one(x.cumsum(d)?),
            1 => one(x.cumprod(d)?),
            2 => two(x.cummax(d)?),
            3 => two(x.cummin(d)?),
            4 => one(x.logcumsumexp(d)?),
            5 => {
                let mut k = 1;
                let pre = pre.as_ref().map(|_| {
                    k += 1;
                    &t[k - 1]
                });
                let app = app.as_ref().map(|_| {
                    k += 1;
                    &t[k - 1]
                });
                one(x.diff(n, d, pre, app)?)
            }
            6 => one(x.trapezoid(p, d)?),
            7 => one(x.trapezoid_x(&t[1], d)?),
            8 => one(x.renorm(p, d, e)?),
            _ => one(x.normalize(p, d, e)?),
        }
    });
    if let Some(o) = &o {
        if which <= 4 {
            fz.expect(o[0].shape() == x.t.shape(), name, &a, &inputs, || {
                format!("shape {:?}", o[0].shape())
            });
            fz.expect(wrap(d, x.rank()).is_some(), name, &a, &inputs, || {
                "accepted an invalid dim".into()
            });
        }
        if which <= 1 && !x.dtype.is_float() {
            fz.expect(o[0].dtype() == DType::I64, name, &a, &inputs, || {
                format!("dtype {:?} (PyTorch: int64)", o[0].dtype())
            });
        }
    }
}

fn shape_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let inputs = [&x];
    let which = rng.random_range(0..22);
    let (d1, d2) = (dim(rng, rank), dim(rng, rank));
    let spec: Vec<i64> = (0..rng.random_range(0..=4))
        .map(|_| {
            if rng.random_bool(0.8) {
                rng.random_range(-1..=4)
            } else {
                pick(rng, &[-2, 1 << 46, i64::MAX, i64::MIN, -1])
            }
        })
        .collect();
    let perm: Vec<i64> = if rng.random_bool(0.7) {
        let mut p: Vec<i64> = (0..rank as i64).collect();
        for i in (1..p.len()).rev() {
            p.swap(i, rng.random_range(0..=i));
        }
        if rng.random_bool(0.3) && !p.is_empty() {
            p[0] -= rank as i64;
        }
        p
    } else {
        dims(rng, rank)
    };
    let n = size(rng);
    let start = int_arg(rng);
    let a = match which {
        0..=2 => format!("{spec:?}"),
        3 | 12 | 13 => format!("{d1}, {d2}"),
        4 | 14 => format!("{perm:?}"),
        5 | 6 | 8 | 15 => format!("{d1}"),
        7 => format!("{spec:?}"),
        9 => format!("{d1}, {start}, {n}"),
        _ => format!("{d1}, {d2}, {n}, {spec:?}, {perm:?}"),
    };
    let o = fz.run(
        [
            "view",
            "reshape",
            "unflatten",
            "transpose",
            "permute",
            "squeeze",
            "unsqueeze",
            "expand",
            "unbind",
            "narrow",
            "t",
            "ravel",
            "flatten",
            "swapaxes",
            "movedim",
            "split",
            "chunk",
            "split_sizes",
            "contiguous",
            "to_dtype",
            "deep_clone",
            "i slices",
        ][which],
        &a,
        &inputs,
        if which == 0 { Cmp::Skip } else { Cmp::Exact },
        |t| {
            let t = &t[0];
            match which {
                0 => one(t.view(&spec)?),
                1 => one(t.reshape(&spec)?),
                2 => {
                    let s: Vec<isize> = spec.iter().map(|&v| v as isize).collect();
                    one(t.unflatten(d1, &s)?)
                }
                3 => one(t.transpose(d1, d2)?),
                4 => one(t.permute(&perm)?),
                5 => one(t.squeeze(d1)?),
                6 => one(t.unsqueeze(d1)?),
                7 => one(t.expand(&spec)?),
                8 => t.unbind(d1),
                9 => one(t.narrow(d1, start, n)?),
                10 => one(t.t()?),
                11 => one(t.ravel()?),
                12 => one(t.flatten(d1, d2)?),
                13 => one(t.swapaxes(d1, d2)?),
                14 => {
                    let dst: Vec<i64> = perm.iter().rev().copied().collect();
                    one(t.movedim(&perm, &dst)?)
                }
                15 => t.split(n, d1),
                16 => t.chunk(n, d1),
                17 => {
                    let s: Vec<usize> = spec.iter().map(|&v| v as usize).collect();
                    t.split_sizes(&s, d1)
                }
                18 => one(t.contiguous()?),
                19 => {
                    let dt = DTYPES[(n % 10).min(9)];
                    one(t.to_dtype(dt)?)
                }
                20 => one(t.deep_clone()?),
                _ => {
                    let items: Vec<IndexItem> = spec
                        .iter()
                        .map(|&v| match v.rem_euclid(5) {
                            0 => IndexItem::Int(v),
                            1 => IndexItem::Slice {
                                start: Some(v),
                                stop: None,
                                step: Some(v.max(1)),
                            },
                            2 => IndexItem::Slice {
                                start: None,
                                stop: Some(v),
                                step: Some(v.wrapping_neg()),
                            },
                            3 => IndexItem::NewAxis,
                            _ => IndexItem::Ellipsis,
                        })
                        .collect();
                    one(t.i(&items)?)
                }
            }
        },
    );
    if let Some(o) = o {
        let numel = x.t.numel();
        match which {
            0..=2 => fz.expect(o[0].numel() == numel, "reshape", &a, &inputs, || {
                format!("numel {} of {:?}", o[0].numel(), o[0].shape())
            }),
            3 if rank >= 1 => {
                let (a1, a2) = (wrap(d1, rank), wrap(d2, rank));
                let mut w = x.shape();
                if let (Some(a1), Some(a2)) = (a1, a2) {
                    w.swap(a1, a2);
                }
                fz.expect(o[0].shape() == w, "transpose", &a, &inputs, || {
                    format!("shape {:?}", o[0].shape())
                });
            }
            8 => {
                if let Some(d) = wrap(d1, rank) {
                    let n_want = if rank == 0 { 0 } else { x.shape()[d] };
                    fz.expect(o.len() == n_want, "unbind", &a, &inputs, || {
                        format!("{} pieces", o.len())
                    });
                }
            }
            15 | 16 => {
                if let Some(d) = wrap(d1, rank).filter(|_| rank > 0) {
                    let total: usize = o.iter().map(|p| p.shape()[d]).sum();
                    fz.expect(total == x.shape()[d], "split/chunk", &a, &inputs, || {
                        format!("pieces sum to {total}")
                    });
                    if which == 16 {
                        fz.expect(o.len() <= n.max(1), "chunk", &a, &inputs, || {
                            format!("{} chunks", o.len())
                        });
                    }
                }
            }
            _ => {}
        }
    }
}

fn arrange_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let inputs = [&x];
    let which = rng.random_range(0..20);
    let reps: Vec<i64> = (0..rng.random_range(0..=rank + 1))
        .map(|_| {
            if rng.random_bool(0.85) {
                rng.random_range(0..=3)
            } else {
                pick(rng, &[-1, 1 << 46, i64::MAX, i64::MIN])
            }
        })
        .collect();
    let ds = dims(rng, rank);
    let (d1, d2) = (dim(rng, rank), dim(rng, rank));
    let k = int_arg(rng);
    let n = size(rng);
    let shifts: Vec<isize> = (0..ds.len().max(usize::from(rng.random_bool(0.5))))
        .map(|_| int_arg(rng) as isize)
        .collect();
    let a = format!("reps {reps:?}, dims {ds:?}, d {d1} {d2}, k {k}, n {n}, shifts {shifts:?}");
    let name: &'static str = [
        "repeat",
        "tile",
        "flip",
        "fliplr",
        "flipud",
        "roll",
        "rot90",
        "tril",
        "triu",
        "diagonal",
        "diag",
        "diagflat",
        "diag_embed",
        "repeat_interleave",
        "repeat_interleave_tensor",
        "vander",
        "pad",
        "matrix_power",
        "trace",
        "one_hot",
    ][which];
    let rlen = if rng.random_bool(0.5) {
        x.t.numel()
    } else {
        rng.random_range(0..=3)
    };
    let rt = gen_index(rng, &[rlen], 4);
    let pads: Vec<i64> = (0..rng.random_range(0..=2 * rank.min(3) + 1))
        .map(|_| {
            if rng.random_bool(0.8) {
                rng.random_range(-2..=3)
            } else {
                pick(rng, &[1 << 46, i64::MAX, i64::MIN, -(1 << 40)])
            }
        })
        .collect();
    let mode = pick(
        rng,
        &[
            PadMode::Constant,
            PadMode::Reflect,
            PadMode::Replicate,
            PadMode::Circular,
        ],
    );
    let pv = fl(rng);
    let a = match which {
        14 => format!("{a}, repeats tensor"),
        16 => format!("{pads:?}, {mode:?}, {pv}"),
        _ => a,
    };
    let mut ins = vec![&x];
    if which == 14 {
        ins.push(&rt);
    }
    let o = fz.run(name, &a, &ins, Cmp::Exact, |t| {
        let x = &t[0];
        match which {
            0 => one(x.repeat(&reps)?),
            1 => one(x.tile(&reps)?),
            2 => one(x.flip(&ds)?),
            3 => one(x.fliplr()?),
            4 => one(x.flipud()?),
            5 => {
                let d: Vec<isize> = ds.iter().map(|&d| d as isize).collect();
                one(x.roll(&shifts, &d)?)
            }
            6 => one(x.rot90(k, &ds)?),
            7 => one(x.tril(k)?),
            8 => one(x.triu(k)?),
            9 => one(x.diagonal(k, d1, d2)?),
            10 => one(x.diag(k)?),
            11 => one(x.diagflat(k)?),
            12 => one(x.diag_embed(k, d1, d2)?),
            13 => one(x.repeat_interleave(n, rng_dim(d1, n))?),
            14 => one(x.repeat_interleave_tensor(&t[1], rng_dim(d1, n))?),
            15 => one(x.vander(if n.is_multiple_of(2) { Some(n) } else { None }, k > 0)?),
            16 => one(x.pad(&pads, mode, pv)?),
            17 => one(x.matrix_power(k)?),
            18 => one(x.trace()?),
            _ => one(x.one_hot(if n.is_multiple_of(3) { None } else { Some(n) })?),
        }
    });
    if let Some(o) = o {
        match which {
            0 => {
                let w: Option<Vec<usize>> = (reps.len() >= rank && reps.iter().all(|&r| r >= 0))
                    .then(|| {
                        let mut s = vec![1usize; reps.len() - rank];
                        s.extend(x.shape());
                        s.iter()
                            .zip(&reps)
                            .map(|(&a, &r)| a.wrapping_mul(r as usize))
                            .collect()
                    });
                fz.expect(
                    w.as_deref() == Some(o[0].shape()),
                    name,
                    &a,
                    &inputs,
                    || format!("shape {:?}, want {w:?}", o[0].shape()),
                );
            }
            2 | 3 | 4 | 5 | 7 | 8 => {
                fz.expect(o[0].shape() == x.t.shape(), name, &a, &inputs, || {
                    format!("shape {:?}", o[0].shape())
                })
            }
            _ => {}
        }
    }
}

/// An optional dim for `repeat_interleave` (`None` now and then).
fn rng_dim(d: i64, n: usize) -> Option<isize> {
    (n % 4 != 1).then_some(d as isize)
}

fn join_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let count = rng.random_range(0..=3);
    let mut parts = vec![x.clone()];
    for _ in 1..count.max(1) {
        let mut s = x.shape();
        if !s.is_empty() && rng.random_bool(0.5) {
            let d = rng.random_range(0..s.len());
            s[d] = rng.random_range(0..=3);
        }
        if rng.random_bool(0.15) {
            s = gen_shape(rng);
        }
        let dt = if rng.random_bool(0.6) {
            x.dtype
        } else {
            gen_dtype(rng)
        };
        parts.push(gen_input_with(rng, dt, &s));
    }
    if count == 0 {
        parts.clear();
    }
    let refs: Vec<&Input> = parts.iter().collect();
    let extra = usize::from(rng.random_bool(0.3));
    let d = dim(rng, x.rank() + extra);
    let a = format!("{} tensors, dim {d}", parts.len());
    let which = rng.random_range(0..8);
    let name: &'static str = [
        "cat",
        "stack",
        "hstack",
        "vstack",
        "dstack",
        "block_diag",
        "cartesian_prod",
        "meshgrid",
    ][which];
    let idx = pick(rng, &["ij", "xy", "", "ji"]);
    let a = if which == 7 {
        format!("{a}, {idx:?}")
    } else {
        a
    };
    let o = fz.run(name, &a, &refs, Cmp::Exact, |t| {
        let r: Vec<&Tensor> = t.iter().collect();
        match which {
            0 => one(Tensor::cat(&r, d)?),
            1 => one(Tensor::stack(&r, d)?),
            2 => one(Tensor::hstack(&r)?),
            3 => one(Tensor::vstack(&r)?),
            4 => one(Tensor::dstack(&r)?),
            5 => one(Tensor::block_diag(&r)?),
            6 => one(Tensor::cartesian_prod(&r)?),
            _ => Tensor::meshgrid(&r, idx),
        }
    });
    if let Some(o) = o {
        if which == 0 {
            let total: usize = parts.iter().map(|p| p.t.numel()).sum();
            fz.expect(o[0].numel() == total, "cat", &a, &refs, || {
                format!(
                    "numel {} of {:?}, inputs hold {total}",
                    o[0].numel(),
                    o[0].shape()
                )
            });
        }
        if which == 1 {
            fz.expect(
                o[0].dim() == x.rank() + 1 && o[0].numel() == x.t.numel() * parts.len(),
                "stack",
                &a,
                &refs,
                || format!("shape {:?}", o[0].shape()),
            );
        }
    }
}

fn gen_items(rng: &mut SmallRng, x: &Input) -> (Vec<IndexItem>, String) {
    let rank = x.rank();
    let n = rng.random_range(0..=rank + 1);
    let mut items = Vec::new();
    for k in 0..n {
        let size = x.t.shape().get(k).copied().unwrap_or(1);
        let it = match rng.random_range(0..10) {
            0..=1 => IndexItem::Int(if rng.random_bool(0.8) {
                rng.random_range(-(size as i64) - 1..=size as i64)
            } else {
                int_arg(rng)
            }),
            2..=4 => IndexItem::Slice {
                start: rng.random_bool(0.5).then(|| int_arg(rng)),
                stop: rng.random_bool(0.5).then(|| int_arg(rng)),
                step: rng.random_bool(0.5).then(|| {
                    if rng.random_bool(0.8) {
                        rng.random_range(1..=3)
                    } else {
                        int_arg(rng)
                    }
                }),
            },
            5 => IndexItem::NewAxis,
            6 => IndexItem::Ellipsis,
            7 => {
                let sh = [rng.random_range(0..=3)];
                let d: Vec<i64> = (0..sh[0])
                    .map(|_| rng.random_range(-(size as i64)..=size as i64))
                    .collect();
                IndexItem::Tensor(genesis::IndexTensor::i64(&sh, d))
            }
            8 if size <= 64 => {
                let m: Vec<bool> = (0..size).map(|_| rng.random_bool(0.5)).collect();
                IndexItem::Tensor(genesis::IndexTensor::mask(&[size], &m))
            }
            _ => {
                let len = rng.random_range(0..=3);
                let idx = gen_index(rng, &[len], size);
                genesis::ToIndex::to_index_item(&idx.t)
            }
        };
        items.push(it);
    }
    let s = format!("{items:?}");
    (items, s)
}

fn indexing(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let (items, a) = gen_items(rng, &x);
    let inputs = [&x];
    let got = fz.run("i", &a, &inputs, Cmp::Exact, |t| one(t[0].i(&items)?));
    let vshape = got
        .as_ref()
        .map(|o| o[0].shape().to_vec())
        .unwrap_or_else(|| partner_shape(rng, &x.shape()));
    let vshape = if rng.random_bool(0.7) {
        vshape
    } else {
        partner_shape(rng, &vshape)
    };
    let vdt = if rng.random_bool(0.6) {
        x.dtype
    } else {
        gen_dtype(rng)
    };
    let v = gen_input_with(rng, vdt, &vshape);
    let acc = rng.random_bool(0.3);
    let a2 = format!("{a}, accumulate {acc}");
    fz.inplace("index_put_", &a2, &x, &[&v], |t, o| {
        t.index_put_(&items, &o[0], acc)
    });
    fz.run("index_put", &a2, &[&x, &v], Cmp::Exact, |t| {
        one(t[0].index_put(&items, &t[1], acc)?)
    });
    let s = scalar(rng);
    let a3 = format!("{a}, {s:?}");
    fz.inplace(
        "index_put_scalar_",
        &a3,
        &x,
        &[],
        |t, _| with_sc!(s, v => t.index_put_scalar_(&items, v)),
    );
}

fn gather_scatter(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let d = dim(rng, rank);
    let wd = wrap(d, rank);
    let dsize = wd.and_then(|w| x.t.shape().get(w).copied()).unwrap_or(1);
    // The index: x's shape (sizes maybe smaller), sometimes another shape.
    let ishape: Vec<usize> = if rng.random_bool(0.8) {
        x.shape()
            .iter()
            .map(|&s| {
                if rng.random_bool(0.3) {
                    s.saturating_sub(1)
                } else {
                    s
                }
            })
            .collect()
    } else {
        gen_shape(rng)
    };
    let idx = gen_index(rng, &ishape, dsize);
    let src_shape: Vec<usize> = if rng.random_bool(0.7) {
        ishape.clone()
    } else {
        partner_shape(rng, &x.shape())
    };
    let sdt = if rng.random_bool(0.7) {
        x.dtype
    } else {
        gen_dtype(rng)
    };
    let src = gen_input_with(rng, sdt, &src_shape);
    let a = format!("dim {d}");
    let which = rng.random_range(0..10);
    let s = scalar(rng);
    match which {
        0 => {
            if let Some(o) = fz.run("gather", &a, &[&x, &idx], Cmp::Exact, |t| {
                one(t[0].gather(d, &t[1])?)
            }) {
                fz.expect(
                    o[0].shape() == idx.t.shape(),
                    "gather",
                    &a,
                    &[&x, &idx],
                    || format!("shape {:?}", o[0].shape()),
                );
            }
        }
        1 => {
            fz.run("take_along_dim", &a, &[&x, &idx], Cmp::Exact, |t| {
                one(t[0].take_along_dim(&t[1], Some(d as isize))?)
            });
            fz.run("take_along_dim None", "", &[&x, &idx], Cmp::Exact, |t| {
                one(t[0].take_along_dim(&t[1], None)?)
            });
        }
        2 => {
            fz.run("scatter", &a, &[&x, &idx, &src], Cmp::Exact, |t| {
                one(t[0].scatter(d, &t[1], &t[2])?)
            });
        }
        3 => {
            fz.run("scatter_add", &a, &[&x, &idx, &src], Cmp::Approx, |t| {
                one(t[0].scatter_add(d, &t[1], &t[2])?)
            });
        }
        4 => {
            fz.inplace("scatter_", &a, &x, &[&idx, &src], |t, o| {
                t.scatter_(d, &o[0], &o[1])
            });
        }
        5 => {
            fz.inplace_cmp(
                "scatter_add_",
                &a,
                &x,
                &[&idx, &src],
                add_order(),
                |t, o| t.scatter_add_(d, &o[0], &o[1]),
            );
        }
        6 => {
            let a = format!("{a}, {s:?}");
            fz.run(
                "scatter_scalar",
                &a,
                &[&x, &idx],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].scatter_scalar(d, &t[1], v)?)),
            );
            fz.inplace(
                "scatter_scalar_",
                &a,
                &x,
                &[&idx],
                |t, o| with_sc!(s, v => t.scatter_scalar_(d, &o[0], v)),
            );
        }
        7 => {
            let len = rng.random_range(0..=4);
            let id1 = gen_index(rng, &[len], dsize);
            if let Some(o) = fz.run("index_select", &a, &[&x, &id1], Cmp::Exact, |t| {
                one(t[0].index_select(d, &t[1])?)
            }) && let Some(w) = wd.filter(|_| rank > 0)
            {
                let mut want = x.shape();
                want[w] = id1.t.numel();
                fz.expect(
                    o[0].shape() == want,
                    "index_select",
                    &a,
                    &[&x, &id1],
                    || format!("shape {:?}", o[0].shape()),
                );
            }
        }
        8 => {
            let mdt = if rng.random_bool(0.85) {
                DType::Bool
            } else {
                gen_dtype(rng)
            };
            let msh = partner_shape(rng, &x.shape());
            let m = gen_input_with(rng, mdt, &msh);
            fz.run("masked_select", "", &[&x, &m], Cmp::Exact, |t| {
                one(t[0].masked_select(&t[1])?)
            });
            let a = format!("{s:?}");
            fz.run(
                "masked_fill",
                &a,
                &[&x, &m],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].masked_fill(&t[1], v)?)),
            );
            fz.inplace(
                "masked_fill_",
                &a,
                &x,
                &[&m],
                |t, o| with_sc!(s, v => t.masked_fill_(&o[0], v)),
            );
        }
        _ => {
            let len = rng.random_range(0..=5);
            let b = gen_index(rng, &[len], 4);
            let ml = size(rng);
            let a = format!("minlength {ml}");
            fz.run("bincount", &a, &[&b], Cmp::Exact, |t| {
                one(t[0].bincount(ml)?)
            });
            fz.run("bincount of x", &a, &[&x], Cmp::Exact, |t| {
                one(t[0].bincount(ml)?)
            });
        }
    }
}

/// Whether the index tensor `t` holds a value twice (false when it cannot be read).
fn repeats(t: &Tensor) -> bool {
    let Ok(mut v) = t
        .to_dtype(DType::I64)
        .and_then(|t| t.flatten(0, -1))
        .and_then(|t| t.to_vec::<i64>())
    else {
        return false;
    };
    v.sort_unstable();
    v.windows(2).any(|w| w[0] == w[1])
}

fn index_along(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let d = dim(rng, rank);
    let wd = wrap(d, rank);
    let dsize = wd.and_then(|w| x.t.shape().get(w).copied()).unwrap_or(1);
    let ilen = if rng.random_bool(0.5) {
        dsize.min(3)
    } else {
        rng.random_range(0..=4)
    };
    let idx = gen_index(rng, &[ilen], dsize);
    let idx = if rng.random_bool(0.1) {
        let sh = gen_shape(rng);
        gen_index(rng, &sh, dsize)
    } else {
        idx
    };
    let mut sshape = x.shape();
    if let Some(w) = wd.filter(|_| rank > 0) {
        sshape[w] = ilen;
    }
    if rng.random_bool(0.2) {
        sshape = partner_shape(rng, &sshape);
    }
    let sdt = if rng.random_bool(0.7) {
        x.dtype
    } else {
        gen_dtype(rng)
    };
    let src = gen_input_with(rng, sdt, &sshape);
    let s = scalar(rng);
    let a = format!("dim {d}, {s:?}");
    match rng.random_range(0..6) {
        0 => {
            fz.run(
                "index_add",
                &a,
                &[&x, &idx, &src],
                Cmp::Approx,
                |t| with_sc!(s, v => one(t[0].index_add(d, &t[1], &t[2], v)?)),
            );
        }
        1 => {
            fz.inplace_cmp(
                "index_add_",
                &a,
                &x,
                &[&idx, &src],
                add_order(),
                |t, o| with_sc!(s, v => t.index_add_(d, &o[0], &o[1], v)),
            );
        }
        // With a repeated index, which copy lands is defined on the CPU only (the last);
        // elsewhere it may differ between a view and its contiguous copy, as PyTorch's.
        2 | 3 if input_device() != CPU && repeats(&idx.t) => {}
        2 => {
            fz.run("index_copy", &a, &[&x, &idx, &src], Cmp::Exact, |t| {
                one(t[0].index_copy(d, &t[1], &t[2])?)
            });
        }
        3 => {
            fz.inplace("index_copy_", &a, &x, &[&idx, &src], |t, o| {
                t.index_copy_(d, &o[0], &o[1])
            });
        }
        4 => {
            fz.run(
                "index_fill",
                &a,
                &[&x, &idx],
                Cmp::Exact,
                |t| with_sc!(s, v => one(t[0].index_fill(d, &t[1], v)?)),
            );
        }
        _ => {
            fz.inplace(
                "index_fill_",
                &a,
                &x,
                &[&idx],
                |t, o| with_sc!(s, v => t.index_fill_(d, &o[0], v)),
            );
        }
    }
}

fn selection(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let inputs = [&x];
    let (so, ri, rc) = (
        rng.random_bool(0.7),
        rng.random_bool(0.5),
        rng.random_bool(0.5),
    );
    let a = format!("sorted {so}, inverse {ri}, counts {rc}");
    if let Some(o) = fz.run("unique", &a, &inputs, Cmp::Exact, |t| {
        uniq(t[0].unique(so, ri, rc)?)
    }) {
        let mut k = 1;
        if ri {
            fz.expect(
                o.get(k).is_some_and(|i| i.shape() == x.t.shape()),
                "unique",
                &a,
                &inputs,
                || "inverse shape".into(),
            );
            k += 1;
        }
        if rc {
            let total: i64 = o
                .get(k)
                .and_then(|c| i64s(c).ok())
                .map(|c| c.iter().sum())
                .unwrap_or(-1);
            fz.expect(total == x.t.numel() as i64, "unique", &a, &inputs, || {
                format!("counts sum to {total}")
            });
        }
    }
    let a = format!("inverse {ri}, counts {rc}");
    fz.run("unique_consecutive", &a, &inputs, Cmp::Exact, |t| {
        uniq(t[0].unique_consecutive(ri, rc)?)
    });
    let y = gen_partner(rng, &x);
    let right = rng.random_bool(0.5);
    let a = format!("right {right}");
    fz.run("searchsorted", &a, &[&x, &y], Cmp::Exact, |t| {
        one(Tensor::searchsorted(&t[0], &t[1], right)?)
    });
    fz.run("bucketize", &a, &[&y, &x], Cmp::Exact, |t| {
        one(t[0].bucketize(&t[1], right)?)
    });
    let n = size(rng);
    let rep = rng.random_bool(0.5);
    let a = format!("{n}, replacement {rep}");
    fz.run("multinomial", &a, &inputs, Cmp::Skip, |t| {
        one(t[0].multinomial(n, rep)?)
    });
    fz.run("bernoulli", "", &inputs, Cmp::Skip, |t| {
        one(t[0].bernoulli()?)
    });
    fz.run("generator multinomial", &a, &inputs, Cmp::Skip, |t| {
        one(genesis::default_generator().multinomial(&t[0], n, rep)?)
    });
}

fn sorting(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let rank = x.rank();
    let d = dim(rng, rank);
    let desc = rng.random_bool(0.5);
    let a = format!("dim {d}, descending {desc}");
    let inputs = [&x];
    if let Some(o) = fz.run(
        "sort",
        &a,
        &inputs,
        Cmp::Exact,
        |t| two(t[0].sort(d, desc)?),
    ) {
        fz.expect(
            o[0].shape() == x.t.shape() && o[1].shape() == x.t.shape(),
            "sort",
            &a,
            &inputs,
            || format!("shapes {:?} {:?}", o[0].shape(), o[1].shape()),
        );
        if rank == 1
            && x.dtype.is_float()
            && let Ok(v) = f64s(&o[0])
        {
            let key = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
            let nan_ok = if desc {
                let k = v.iter().take_while(|v| v.is_nan()).count();
                v[k..].iter().all(|v| !v.is_nan())
            } else {
                let k = v.iter().rev().take_while(|v| v.is_nan()).count();
                v[..v.len() - k].iter().all(|v| !v.is_nan())
            };
            let sorted = v.windows(2).all(|w| {
                if w[0].is_nan() || w[1].is_nan() {
                    true
                } else if desc {
                    key(w[0]) >= key(w[1])
                } else {
                    key(w[0]) <= key(w[1])
                }
            });
            fz.expect(nan_ok && sorted, "sort", &a, &inputs, || {
                format!("not sorted: {v:?}")
            });
        }
        if let Some(g) = fz.run("gather of sort indices", &a, &[&x], Cmp::Skip, |t| {
            one(t[0].gather(d, &o[1])?)
        }) && let Err(why) = same(&g[0], &o[0], Cmp::Exact, 0.0)
        {
            fz.fail(
                "sort",
                &a,
                &inputs,
                format!("values are not the input at the indices: {why}"),
            );
        }
    }
    fz.run("argsort", &a, &inputs, Cmp::Exact, |t| {
        one(t[0].argsort(d, desc)?)
    });
    let k = size(rng);
    let (largest, sorted) = (rng.random_bool(0.5), rng.random_bool(0.7));
    let a = format!("k {k}, dim {d}, largest {largest}, sorted {sorted}");
    if let Some(o) = fz.run(
        "topk",
        &a,
        &inputs,
        if sorted { Cmp::Exact } else { Cmp::Skip },
        |t| two(t[0].topk(k, d, largest, sorted)?),
    ) && let Some(w) = wrap(d, rank)
    {
        let mut want = x.shape();
        if rank > 0 {
            want[w] = k;
        }
        fz.expect(o[0].shape() == want, "topk", &a, &inputs, || {
            format!("shape {:?}", o[0].shape())
        });
    }
    let keep = rng.random_bool(0.5);
    let a = format!("{d}, {keep}");
    fz.run("max_dim", &a, &inputs, Cmp::Exact, |t| {
        two(t[0].max_dim(d, keep)?)
    });
}

fn matmul_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let dt = if rng.random_bool(0.8) {
        gen_float_dtype(rng)
    } else {
        gen_dtype(rng)
    };
    let dt2 = if rng.random_bool(0.8) {
        dt
    } else {
        gen_dtype(rng)
    };
    let which = rng.random_range(0..16);
    let s = |rng: &mut SmallRng| {
        if rng.random_bool(0.1) {
            0
        } else {
            rng.random_range(1..=4)
        }
    };
    let (m, k, n, b) = (s(rng), s(rng), s(rng), s(rng));
    let k2 = if rng.random_bool(0.85) { k } else { s(rng) };
    // Shapes: mostly what the op takes, sometimes random.
    let (sa, sb, sc): (Vec<usize>, Vec<usize>, Vec<usize>) = match which {
        0 => {
            let ra: usize = rng.random_range(1..=4);
            let rb: usize = rng.random_range(1..=4);
            let mut a: Vec<usize> = (0..ra.saturating_sub(2))
                .map(|_| pick(rng, &[1, b]))
                .collect();
            let mut bb: Vec<usize> = (0..rb.saturating_sub(2))
                .map(|_| pick(rng, &[1, b]))
                .collect();
            if ra >= 2 {
                a.push(m);
            }
            a.push(k);
            bb.push(k2);
            if rb >= 2 {
                bb.push(n);
            }
            (a, bb, vec![])
        }
        1 | 8 | 9 | 10 => (vec![m, k], vec![k2, n], vec![m, n]),
        2 | 11 => (vec![b, m, k], vec![b, k2, n], vec![b, m, n]),
        3 => (vec![m, k], vec![k2], vec![]),
        4 | 5 => (vec![k], vec![k2], vec![]),
        6 => (vec![m, k], vec![n, k2], vec![n]),
        _ => (vec![m, k], vec![k2, n], vec![]),
    };
    let (sa, sb) = if rng.random_bool(0.1) {
        (gen_shape(rng), gen_shape(rng))
    } else {
        (sa, sb)
    };
    let x = gen_input_with(rng, dt, &sa);
    let y = gen_input_with(rng, dt2, &sb);
    let cdt = if rng.random_bool(0.8) {
        dt
    } else {
        gen_dtype(rng)
    };
    let csh = partner_shape(rng, &sc);
    let c = gen_input_with(rng, cdt, &csh);
    let (beta, alpha) = (fl(rng), fl(rng));
    let name: &'static str = [
        "matmul",
        "mm",
        "bmm",
        "mv",
        "dot",
        "inner",
        "linear",
        "linear_gelu",
        "addmm",
        "matmul_out",
        "tensordot",
        "baddbmm",
        "linear_gelu_tanh",
        "kron",
        "outer",
        "cross",
    ][which];
    let td = rng.random_range(0..=2);
    let d = dim(rng, x.rank());
    let a = format!("beta {beta}, alpha {alpha}, tensordot dims {td}, dim {d}");
    let ins: Vec<&Input> = match which {
        6 | 7 | 8 | 11 | 12 => vec![&x, &y, &c],
        _ => vec![&x, &y],
    };
    let o = fz.run(name, &a, &ins, Cmp::Approx, |t| {
        let (p, q) = (&t[0], &t[1]);
        match which {
            0 => one(p.matmul(q)?),
            1 => one(p.mm(q)?),
            2 => one(p.bmm(q)?),
            3 => one(p.mv(q)?),
            4 => one(p.dot(q)?),
            5 => one(p.inner(q)?),
            6 => one(p.linear(q, Some(&t[2]))?),
            7 => one(p.linear_gelu(q, if td == 0 { None } else { Some(&t[2]) })?),
            8 => one(t[2].addmm(p, q, beta, alpha)?),
            9 => {
                let mut out = Tensor::zeros([m, n], dt, CPU)?;
                p.matmul_out(q, &mut out)?;
                one(out)
            }
            10 => {
                let rk = p.dim().min(q.dim()).min(td);
                let ds: Vec<i64> = (p.dim() - rk..p.dim()).map(|v| v as i64).collect();
                let dq: Vec<i64> = (0..rk as i64).collect();
                one(p.tensordot(q, &ds, &dq)?)
            }
            11 => {
                let b1 = p.unsqueeze(0)?;
                let b2 = q.unsqueeze(0)?;
                one(t[2].baddbmm(&b1, &b2, beta, alpha)?)
            }
            12 => one(p.linear_gelu_tanh(q, Some(&t[2]))?),
            13 => one(p.kron(q)?),
            14 => one(p.outer(q)?),
            _ => one(p.cross(q, d)?),
        }
    });
    if let (Some(o), 0) = (&o, which) {
        // PyTorch's matmul shapes.
        let (ra, rb) = (sa.len(), sb.len());
        let want: Option<Vec<usize>> = match (ra, rb) {
            (1, 1) => (sa == sb).then(Vec::new),
            (2, 1) => (sa[1] == sb[0]).then(|| vec![sa[0]]),
            (1, 2) => (sa[0] == sb[0]).then(|| vec![sb[1]]),
            _ if ra >= 1 && rb >= 1 => {
                let (ka, kb) = (sa[ra - 1], if rb >= 2 { sb[rb - 2] } else { sb[0] });
                let ba = if ra >= 2 { &sa[..ra - 2] } else { &[][..] };
                let bb = if rb >= 2 { &sb[..rb - 2] } else { &[][..] };
                genesis::broadcast_shape("fuzz", ba, bb)
                    .ok()
                    .filter(|_| ka == kb)
                    .map(|mut s| {
                        if ra >= 2 {
                            s.push(sa[ra - 2]);
                        }
                        if rb >= 2 {
                            s.push(sb[rb - 1]);
                        }
                        s
                    })
            }
            _ => None,
        };
        fz.expect(
            want.as_deref() == Some(o[0].shape()),
            "matmul",
            &a,
            &ins,
            || format!("shape {:?}, want {want:?}", o[0].shape()),
        );
    }
}

fn linalg_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let dt = gen_float_dtype(rng);
    let n = if rng.random_bool(0.1) {
        0
    } else {
        rng.random_range(1..=4)
    };
    let mut sh = vec![n, n];
    if rng.random_bool(0.3) {
        sh.insert(0, rng.random_range(0..=2));
    }
    if rng.random_bool(0.1) {
        sh = gen_shape(rng);
    }
    if rng.random_bool(0.05) {
        // Empty, with huge batch or matrix dimensions.
        sh = pick(
            rng,
            &[
                [1 << 40, 0, 0],
                [0, 1 << 20, 1 << 20],
                [0, 1 << 40, 1 << 40],
                [1 << 62, 2, 0],
            ],
        )
        .to_vec();
    }
    let x = gen_input_with(rng, dt, &sh);
    let bsh = if rng.random_bool(0.5) {
        sh.clone()
    } else {
        let mut s = sh.clone();
        s.pop();
        s
    };
    let bsh = if rng.random_bool(0.1) {
        gen_shape(rng)
    } else {
        bsh
    };
    let bdt = if rng.random_bool(0.8) {
        dt
    } else {
        gen_dtype(rng)
    };
    let b = gen_input_with(rng, bdt, &bsh);
    let inputs = [&x];
    fz.run(
        "inverse",
        "",
        &inputs,
        Cmp::Approx,
        |t| one(t[0].inverse()?),
    );
    fz.run("det", "", &inputs, Cmp::Approx, |t| one(t[0].det()?));
    fz.run(
        "slogdet",
        "",
        &inputs,
        Cmp::Approx,
        |t| two(t[0].slogdet()?),
    );
    fz.run("logdet", "", &inputs, Cmp::Approx, |t| one(t[0].logdet()?));
    fz.run("linalg_solve", "", &[&x, &b], Cmp::Approx, |t| {
        one(t[0].linalg_solve(&t[1])?)
    });
    let p = int_arg(rng);
    let a = format!("{p}");
    fz.run("matrix_power", &a, &inputs, Cmp::Approx, |t| {
        one(t[0].matrix_power(p)?)
    });
    fz.run("trace", "", &inputs, Cmp::Approx, |t| one(t[0].trace()?));
}

fn nn_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_float_input(rng);
    let rank = x.rank();
    let k = rng.random_range(0..=rank.min(2));
    let mut ns: Vec<usize> = x.shape()[rank - k..].to_vec();
    if rng.random_bool(0.15) {
        ns = (0..rng.random_range(0..=2))
            .map(|_| rng.random_range(0..=4))
            .collect();
    }
    let wdt = if rng.random_bool(0.8) {
        x.dtype
    } else {
        gen_dtype(rng)
    };
    let wsh = if rng.random_bool(0.9) {
        ns.clone()
    } else {
        gen_shape(rng)
    };
    let w = gen_input_with(rng, wdt, &wsh);
    let bsh = if rng.random_bool(0.9) {
        ns.clone()
    } else {
        gen_shape(rng)
    };
    let bb = gen_input_with(rng, wdt, &bsh);
    let (uw, ub) = (rng.random_bool(0.6), rng.random_bool(0.6));
    let eps = if rng.random_bool(0.7) { 1e-5 } else { fl(rng) };
    let a = format!("normalized {ns:?}, weight {uw}, bias {ub}, eps {eps}");
    let ins = [&x, &w, &bb];
    let out_dt = gen_dtype(rng);
    match rng.random_range(0..7) {
        0 => {
            if let Some(o) = fz.run("layer_norm", &a, &ins, Cmp::Approx, |t| {
                one(t[0].layer_norm(&ns, uw.then_some(&t[1]), ub.then_some(&t[2]), eps)?)
            }) {
                fz.expect(o[0].shape() == x.t.shape(), "layer_norm", &a, &ins, || {
                    format!("shape {:?}", o[0].shape())
                });
            }
        }
        1 => {
            let a = format!("{a}, {out_dt:?}");
            fz.run("layer_norm_to", &a, &ins, Cmp::Approx, |t| {
                one(t[0].layer_norm_to(
                    &ns,
                    uw.then_some(&t[1]),
                    ub.then_some(&t[2]),
                    eps,
                    out_dt,
                )?)
            });
        }
        2 => {
            fz.run("rms_norm", &a, &ins, Cmp::Approx, |t| {
                one(t[0].rms_norm(&ns, uw.then_some(&t[1]), eps)?)
            });
        }
        3 => {
            let y = gen_partner(rng, &x);
            let ins = [&x, &w, &bb, &y];
            fz.run("add_layer_norm", &a, &ins, Cmp::Approx, |t| {
                two(t[0].add_layer_norm(
                    &t[3],
                    &ns,
                    uw.then_some(&t[1]),
                    ub.then_some(&t[2]),
                    eps,
                )?)
            });
            let a = format!("{a}, {out_dt:?}");
            fz.run("add_layer_norm_to", &a, &ins, Cmp::Approx, |t| {
                two(t[0].add_layer_norm_to(
                    &t[3],
                    &ns,
                    uw.then_some(&t[1]),
                    ub.then_some(&t[2]),
                    eps,
                    out_dt,
                )?)
            });
        }
        4 => {
            // cross_entropy: logits [N, C] or [C], targets [N] (class indices) or probabilities.
            let c = if rank >= 1 {
                x.shape()[rank.min(2) - 1]
            } else {
                1
            };
            let tshape: Vec<usize> = match rank {
                0 | 1 => vec![],
                _ => vec![x.shape()[0]],
            };
            let target = if rng.random_bool(0.7) {
                gen_index(rng, &tshape, c)
            } else {
                gen_partner(rng, &x)
            };
            let ii = rng.random_bool(0.3).then(|| int_arg(rng));
            let red = pick(rng, &[Reduction::Mean, Reduction::Sum, Reduction::None]);
            let a = format!("ignore_index {ii:?}, {red:?}");
            fz.run("cross_entropy", &a, &[&x, &target], Cmp::Approx, |t| {
                one(t[0].cross_entropy(&t[1], ii, red)?)
            });
        }
        5 => {
            // Attention: q [.., L, E], k [.., S, E], v [.., S, Ev].
            let s = |rng: &mut SmallRng| rng.random_range(0..=3);
            let (l, sl, e, ev) = (s(rng), s(rng), s(rng), s(rng));
            let batch: Vec<usize> = (0..rng.random_range(0..=2))
                .map(|_| rng.random_range(1..=2))
                .collect();
            let mk = |rng: &mut SmallRng, a: usize, b: usize| {
                let mut sh = batch.clone();
                sh.push(a);
                sh.push(b);
                if rng.random_bool(0.1) {
                    gen_shape(rng)
                } else {
                    sh
                }
            };
            let dt = gen_float_dtype(rng);
            let (qs, ks, vs) = (mk(rng, l, e), mk(rng, sl, e), mk(rng, sl, ev));
            let q = gen_input_with(rng, dt, &qs);
            let kdt = if rng.random_bool(0.9) {
                dt
            } else {
                gen_dtype(rng)
            };
            let kk = gen_input_with(rng, kdt, &ks);
            let v = gen_input_with(rng, dt, &vs);
            let causal = rng.random_bool(0.3);
            let scale = rng.random_bool(0.3).then(|| fl(rng));
            let a = format!("causal {causal}, scale {scale:?}");
            fz.run(
                "scaled_dot_product_attention",
                &a,
                &[&q, &kk, &v],
                Cmp::Approx,
                |t| one(t[0].scaled_dot_product_attention(&t[1], &t[2], causal, scale)?),
            );
        }
        _ => {
            let grads: Vec<Input> = (0..rng.random_range(0..=3))
                .map(|_| gen_float_input(rng))
                .collect();
            let mx = fl(rng);
            let a = format!("max_norm {mx}");
            let refs: Vec<&Input> = grads.iter().collect();
            fz.run("clip_grad_norm_", &a, &refs, Cmp::Skip, |t| {
                let owned: R<Vec<Tensor>> = t.iter().map(|g| g.deep_clone()).collect();
                let owned = owned?;
                let n = genesis::fused::clip_grad_norm_(&owned, mx)?;
                let mut o = owned;
                o.extend(n);
                Ok(o)
            });
        }
    }
}

fn einsum_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let letters = ['a', 'b', 'c', 'd'];
    let sizes: Vec<usize> = (0..4)
        .map(|_| {
            if rng.random_bool(0.1) {
                0
            } else {
                rng.random_range(1..=3)
            }
        })
        .collect();
    let ell: Vec<usize> = (0..rng.random_range(0..=2))
        .map(|_| rng.random_range(1..=2))
        .collect();
    let nops = rng.random_range(1..=3);
    let mut subs = Vec::new();
    let mut shapes = Vec::new();
    let mut used = Vec::new();
    for _ in 0..nops {
        let len = rng.random_range(0..=3);
        let mut s = String::new();
        let mut sh = Vec::new();
        let with_ell = rng.random_bool(0.2);
        let at = rng.random_range(0..=len);
        for i in 0..len {
            if with_ell && i == at {
                s += "...";
                sh.extend(&ell);
            }
            let c = rng.random_range(0..4);
            s.push(letters[c]);
            sh.push(sizes[c]);
            used.push(letters[c]);
        }
        if with_ell && at == len {
            s += "...";
            sh.extend(&ell);
        }
        subs.push(s);
        shapes.push(sh);
    }
    let mut eq = subs.join(",");
    if rng.random_bool(0.6) {
        eq += "->";
        let k = rng.random_range(0..=used.len().min(3));
        for _ in 0..k {
            eq.push(pick(rng, &used));
        }
        if rng.random_bool(0.2) {
            eq += "...";
        }
    }
    if rng.random_bool(0.1) {
        // Corrupt the equation.
        let junk = pick(
            rng,
            &["A", "1", " ", ",", "->", ".", "..", "ab->c", "é", "-", ">"],
        );
        let pos = rng.random_range(0..=eq.len());
        if eq.is_char_boundary(pos) {
            eq.insert_str(pos, junk);
        }
    }
    let dt = gen_float_dtype(rng);
    let mut ins: Vec<Input> = shapes.iter().map(|s| gen_input_with(rng, dt, s)).collect();
    if rng.random_bool(0.1) {
        ins.push(gen_float_input(rng));
    }
    if rng.random_bool(0.05) {
        ins.pop();
    }
    let refs: Vec<&Input> = ins.iter().collect();
    let a = format!("{eq:?}");
    fz.run("einsum", &a, &refs, Cmp::Approx, |t| {
        let r: Vec<&Tensor> = t.iter().collect();
        one(Tensor::einsum(&eq, &r)?)
    });
}

fn inplace_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let y = gen_partner(rng, &x);
    let s = scalar(rng);
    let a = format!("{s:?}");
    match rng.random_range(0..12) {
        0 => fz.inplace("fill_", &a, &x, &[], |t, _| with_sc!(s, v => t.fill_(v))),
        1 => fz.inplace("zero_", "", &x, &[], |t, _| t.zero_()),
        2 => fz.inplace("copy_", "", &x, &[&y], |t, o| t.copy_(&o[0])),
        3 => fz.inplace("add_", "", &x, &[&y], |t, o| t.add_(&o[0])),
        4 => fz.inplace(
            "mul_ scalar",
            &a,
            &x,
            &[],
            |t, _| with_sc!(s, v => t.mul_(v)),
        ),
        5 => {
            let op = pick(rng, &BinaryOp::ALL);
            let a = format!("{op:?}");
            fz.inplace("binary_", &a, &x, &[&y], |t, o| t.binary_(op, &o[0]));
        }
        6 => {
            let op = pick(rng, &UnaryOp::ALL);
            let a = format!("{op:?}");
            fz.inplace("unary_", &a, &x, &[], |t, _| t.unary_(op));
        }
        7 => {
            let (lo, hi) = scalar_pair(rng);
            let a = format!("{lo:?}, {hi:?}");
            fz.inplace("clamp_", &a, &x, &[], |t, _| match (lo, hi) {
                (Sc::F(l), Sc::F(h)) => t.clamp_(Some(l), Some(h)),
                (Sc::I(l), Sc::I(h)) => t.clamp_(Some(l), Some(h)),
                (Sc::B(l), Sc::B(h)) => t.clamp_(Some(l), Some(h)),
                _ => unreachable!(),
            });
        }
        8 => fz.inplace("pow_", &a, &x, &[], |t, _| with_sc!(s, v => t.pow_(v))),
        9 => fz.inplace("div_", "", &x, &[&y], |t, o| t.div_(&o[0])),
        10 => fz.inplace(
            "sub_ scalar",
            &a,
            &x,
            &[],
            |t, _| with_sc!(s, v => t.sub_(v)),
        ),
        _ => {
            // An `_out` op writing into a view.
            let op = pick(rng, &BinaryOp::ALL);
            let a = format!("{op:?}");
            let p = gen_partner(rng, &x);
            let q = gen_partner(rng, &x);
            fz.inplace("binary_out into a view", &a, &x, &[&p, &q], |t, o| {
                let mut out = t.clone();
                o[0].binary_out(op, &o[1], &mut out)
            });
        }
    }
}

fn misc_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let x = gen_input(rng);
    let inputs = [&x];
    match rng.random_range(0..6) {
        0 => {
            let dt = gen_dtype(rng);
            let a = format!("{dt:?}");
            if let Some(o) = fz.run("to_dtype", &a, &inputs, Cmp::Exact, |t| {
                one(t[0].to_dtype(dt)?)
            }) {
                fz.expect(
                    o[0].dtype() == dt && o[0].shape() == x.t.shape(),
                    "to_dtype",
                    &a,
                    &inputs,
                    || "dtype or shape".into(),
                );
            }
        }
        1 => {
            fz.run("to cpu", "", &inputs, Cmp::Exact, |t| one(t[0].to(CPU)?));
            fz.run("to_vec wrong type", "", &inputs, Cmp::Skip, |t| {
                let _ = t[0].to_vec::<f32>();
                let _ = t[0].to_vec::<i64>();
                let _ = t[0].to_bool_vec();
                Ok(vec![])
            });
        }
        2 => {
            let d = dim(rng, x.rank());
            let d2 = dim(rng, x.rank());
            let n = size(rng);
            let a = format!("{d}, {d2}, {n}");
            fz.run("vander", &a, &inputs, Cmp::Approx, |t| {
                one(t[0].vander(Some(n), d > 0)?)
            });
            fz.run("diag_embed", &a, &inputs, Cmp::Exact, |t| {
                one(t[0].diag_embed(d, d, d2)?)
            });
        }
        3 => {
            let p = fl(rng);
            let ds = dims(rng, x.rank());
            let keep = rng.random_bool(0.5);
            let a = format!("{p}, {ds:?}, {keep}");
            fz.run("vector_norm", &a, &inputs, Cmp::Approx, |t| {
                one(t[0].vector_norm(p, &ds, keep)?)
            });
        }
        4 => {
            let nc = rng.random_bool(0.5).then(|| size(rng));
            let sh = gen_shape(rng);
            let idx = gen_index(rng, &sh, 4);
            let a = format!("{nc:?}");
            fz.run("one_hot", &a, &[&idx], Cmp::Exact, |t| {
                one(t[0].one_hot(nc)?)
            });
        }
        _ => {
            let y = gen_input(rng);
            let r = rng.random_bool(0.5);
            let a = format!("{r}");
            fz.run("searchsorted any", &a, &[&x, &y], Cmp::Exact, |t| {
                one(Tensor::searchsorted(&t[0], &t[1], r)?)
            });
        }
    }
}

/// A view of `base` (1-d or 2-d): a narrowed, strided or transposed window.
fn alias_view(base: &Tensor, kind: u32, start: usize, len: usize) -> R<Tensor> {
    match (kind, base.dim()) {
        (0, _) => base.narrow(0, start, len),
        (1, 1) => base.i(&[IndexItem::Slice {
            start: Some(start as i64),
            stop: None,
            step: Some(2),
        }]),
        (1, _) => {
            base.transpose(0, 1)?
                .narrow(0, start.min(base.shape()[1]), len.min(base.shape()[1]))
        }
        _ => base.narrow(0, start, len)?.flip(0),
    }
}

/// In-place and `_out` ops whose operands are views of the target's own storage (overlapping
/// it, or not): the result must be that of operands copied first (the library reads them
/// before it writes), or an error that leaves the storage as it was.
fn aliasing_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let dt = gen_dtype(rng);
    let n = rng.random_range(1..=6);
    let shape = if rng.random_bool(0.6) {
        vec![n]
    } else {
        vec![n, rng.random_range(1..=3)]
    };
    let base_in = gen_input_with(rng, dt, &shape);
    let len = rng.random_range(0..=n);
    let (kt, ko) = (rng.random_range(0..3u32), rng.random_range(0..3u32));
    let (st, so) = (rng.random_range(0..=n - len), rng.random_range(0..=n - len));
    let which = rng.random_range(0..10);
    let bop = pick(rng, &BinaryOp::ALL);
    let acc = rng.random_bool(0.5);
    let idx: Vec<i64> = (0..len)
        .map(|_| rng.random_range(0..len.max(1) as i64))
        .collect();
    let a = format!(
        "op {which}, {bop:?}, target view {kt} at {st}, operand view {ko} at {so}, len {len}, index {idx:?}"
    );
    let ins = [&base_in];
    // `copied`: the operand read into a new tensor before the op.
    let go = |copied: bool| -> (Tensor, R<()>) {
        let base = make(base_in.dtype, &base_in.base_shape, &base_in.vals)
            .and_then(|b| apply(&b, &base_in.steps)?.contiguous());
        let base = match base {
            Ok(b) => b,
            Err(e) => return (Tensor::zeros([0], DType::F32, CPU).unwrap(), Err(e)),
        };
        let r = (|| -> R<()> {
            let t = alias_view(&base, kt, st, len)?;
            let o = alias_view(&base, ko, so, len)?;
            let o = if copied { o.deep_clone()? } else { o };
            let o2 = alias_view(&base, (ko + 1) % 3, st, len)?;
            let o2 = if copied { o2.deep_clone()? } else { o2 };
            let index = Tensor::from_slice(&idx, [idx.len()], CPU)?;
            match which {
                0 => t.copy_(&o),
                1 => t.add_(&o),
                2 => t.binary_(bop, &o),
                3 => {
                    let mut out = t.clone();
                    o.binary_out(bop, &o2, &mut out)
                }
                4 => t.index_copy_(0, &index, &o),
                5 => t.index_add_(0, &index, &o, 2),
                6 => t.scatter_(0, &index.reshape([-1])?, &o),
                7 => t.index_put_(&[genesis::ToIndex::to_index_item(&index)], &o, acc),
                8 => t.mul_(&o),
                _ => {
                    let mut out = t.clone();
                    o.unary_out(UnaryOp::ALL[(bop as usize) % UnaryOp::ALL.len()], &mut out)
                }
            }
        })();
        (base, r)
    };
    let Some((got, r)) = fz.guard("aliasing", &a, &ins, || go(false)) else {
        return;
    };
    let Some((want, rw)) = fz.guard("aliasing", &format!("{a} [operands copied]"), &ins, || {
        go(true)
    }) else {
        return;
    };
    *fz.oks.entry("aliasing").or_default() += usize::from(r.is_ok());
    match (&r, &rw) {
        (Ok(()), Ok(())) => {
            // Duplicate indices of index_copy_/scatter_/index_put_ write in no defined order.
            let dup = {
                let mut v = idx.clone();
                v.sort_unstable();
                v.windows(2).any(|w| w[0] == w[1])
            };
            // Duplicate indices of index_add_ and an accumulating index_put_ add in order of
            // arrival on CUDA (see `add_order`).
            let cmp = if dup && (which == 5 || which == 7 && acc) {
                add_order()
            } else {
                Cmp::Exact
            };
            if !(dup && matches!(which, 4 | 6) || dup && which == 7 && !acc)
                && let Err(why) = same(&got, &want, cmp, 0.0)
            {
                fz.fail(
                    "aliasing",
                    &a,
                    &ins,
                    format!("an operand sharing the target's storage gives another result: {why}"),
                );
            }
        }
        (Err(_), _) => {
            // Refused: the storage must be as it was.
            let orig = make(base_in.dtype, &base_in.base_shape, &base_in.vals)
                .and_then(|b| apply(&b, &base_in.steps));
            if let Ok(orig) = orig
                && let Err(why) = same(&got, &orig, Cmp::Exact, 0.0)
            {
                fz.fail(
                    "aliasing",
                    &a,
                    &ins,
                    format!("refused ({:?}) but wrote: {why}", r.as_ref().err()),
                );
            }
        }
        (Ok(()), Err(e)) => fz.fail(
            "aliasing",
            &a,
            &ins,
            format!("Ok with an aliasing operand, Err with a copy: {e}"),
        ),
    }
}

/// A differentiable op of the autograd group: its name and its application to `x` (a view of
/// a leaf), `y` (another, maybe a leaf too) and an index tensor.
type GradOp = (
    &'static str,
    fn(&Tensor, &Tensor, &Tensor, i64, i64) -> R<Tensor>,
);

const GRAD_OPS: &[GradOp] = &[
    ("sum_dim", |x, _, _, d, k| x.sum_dim(d, k % 2 == 0)),
    ("mean_dim", |x, _, _, d, k| x.mean_dim(d, k % 2 == 0)),
    ("amax", |x, _, _, d, k| x.amax(d, k % 2 == 0)),
    ("amin", |x, _, _, d, _| x.amin([d, 0], true)),
    ("max_dim", |x, _, _, d, k| Ok(x.max_dim(d, k % 2 == 0)?.0)),
    ("min_dim", |x, _, _, d, _| Ok(x.min_dim(d, false)?.0)),
    ("max", |x, _, _, _, _| x.max()),
    ("median", |x, _, _, _, _| x.median()),
    ("prod_dim", |x, _, _, d, k| x.prod_dim(d, k % 2 == 0)),
    ("prod", |x, _, _, _, _| x.prod()),
    ("var_dim", |x, _, _, d, k| x.var_dim(d, k as f64, true)),
    ("std_dim", |x, _, _, d, k| x.std_dim(d, k as f64, false)),
    ("var_mean", |x, _, _, d, _| Ok(x.var_mean(d, 1.0, false)?.0)),
    ("logsumexp", |x, _, _, d, k| x.logsumexp(d, k % 2 == 0)),
    ("softmax", |x, _, _, d, _| x.softmax(d)),
    ("log_softmax", |x, _, _, d, _| x.log_softmax(d)),
    ("cumsum", |x, _, _, d, _| x.cumsum(d)),
    ("cumprod", |x, _, _, d, _| x.cumprod(d)),
    ("cummax", |x, _, _, d, _| Ok(x.cummax(d)?.0)),
    ("logcumsumexp", |x, _, _, d, _| x.logcumsumexp(d)),
    ("sort", |x, _, _, d, k| Ok(x.sort(d, k % 2 == 0)?.0)),
    ("topk", |x, _, _, d, k| {
        Ok(x.topk(k.unsigned_abs() as usize, d, true, true)?.0)
    }),
    ("gather", |x, _, i, d, _| x.gather(d, i)),
    ("take_along_dim", |x, _, i, d, _| {
        x.take_along_dim(i, Some(d as isize))
    }),
    ("index_select", |x, _, i, d, _| {
        x.index_select(d, &i.reshape([-1])?)
    }),
    ("scatter", |x, y, i, d, _| x.scatter(d, i, y)),
    ("scatter_add", |x, y, i, d, _| x.scatter_add(d, i, y)),
    ("index_add", |x, y, i, d, k| {
        x.index_add(d, &i.reshape([-1])?, y, k)
    }),
    ("index_copy", |x, y, i, d, _| {
        x.index_copy(d, &i.reshape([-1])?, y)
    }),
    ("index_fill", |x, _, i, d, k| {
        x.index_fill(d, &i.reshape([-1])?, k)
    }),
    ("masked_fill", |x, y, _, _, k| x.masked_fill(&y.gt(0.0)?, k)),
    ("masked_select", |x, y, _, _, _| {
        x.masked_select(&y.gt(0.0)?)
    }),
    ("where_cond", |x, y, _, _, _| {
        Tensor::where_cond(&x.gt(y)?, x, y)
    }),
    ("add", |x, y, _, _, _| x.add(y)),
    ("mul", |x, y, _, _, _| x.mul(y)),
    ("div", |x, y, _, _, _| x.div(y)),
    ("pow", |x, y, _, _, _| x.pow(y)),
    ("pow_scalar", |x, _, _, _, k| x.pow_scalar(k)),
    ("maximum", |x, y, _, _, _| x.maximum(y)),
    ("atan2", |x, y, _, _, _| x.atan2(y)),
    ("hypot", |x, y, _, _, _| x.hypot(y)),
    ("remainder", |x, y, _, _, _| x.remainder(y)),
    ("fmod", |x, y, _, _, _| x.fmod(y)),
    ("xlogy", |x, y, _, _, _| x.xlogy(y)),
    ("logaddexp", |x, y, _, _, _| x.logaddexp(y)),
    ("lerp", |x, y, _, _, k| x.lerp(y, k as f64 / 4.0)),
    ("lerp_tensor", |x, y, _, _, _| x.lerp_tensor(y, x)),
    ("addcmul", |x, y, _, _, k| x.addcmul(y, y, k as f64)),
    ("addcdiv", |x, y, _, _, k| x.addcdiv(y, x, k as f64)),
    ("clamp", |x, _, _, d, k| {
        x.clamp(Some(d as f64), Some(k as f64))
    }),
    ("nan_to_num", |x, _, _, _, _| x.nan_to_num(0.0, None, None)),
    ("matmul", |x, y, _, _, _| x.matmul(y)),
    ("matmul_t", |x, y, _, _, _| x.matmul(&y.transpose(-1, -2)?)),
    ("linear", |x, y, _, _, _| x.linear(y, None)),
    ("mm", |x, y, _, _, _| x.mm(&y.t()?)),
    ("dot", |x, y, _, _, _| x.dot(y)),
    ("outer", |x, y, _, _, _| x.outer(y)),
    ("kron", |x, y, _, _, _| x.kron(y)),
    ("tensordot", |x, y, _, d, _| {
        let n = (d.rem_euclid(2) as usize).min(x.dim()).min(y.dim());
        let dx: Vec<i64> = (x.dim() - n..x.dim()).map(|v| v as i64).collect();
        let dy: Vec<i64> = (0..n as i64).collect();
        x.tensordot(y, &dx, &dy)
    }),
    ("einsum", |x, y, _, _, _| {
        Tensor::einsum("...i,...i->...", &[x, y])
    }),
    ("cross", |x, y, _, d, _| x.cross(y, d)),
    ("layer_norm", |x, y, _, _, _| {
        let n = x.shape().last().copied().unwrap_or(1);
        x.layer_norm(&[n], Some(&y.reshape([-1])?.narrow(0, 0, n)?), None, 1e-5)
    }),
    ("rms_norm", |x, _, _, _, _| {
        let n = x.shape().last().copied().unwrap_or(1);
        x.rms_norm(&[n], None, 1e-6)
    }),
    ("cross_entropy", |x, _, i, _, k| {
        x.cross_entropy(&i.reshape([-1])?, (k > 2).then_some(0), Reduction::Mean)
    }),
    ("sdpa", |x, y, _, _, k| {
        x.scaled_dot_product_attention(y, y, k % 2 == 0, None)
    }),
    ("pad", |x, _, _, d, k| {
        x.pad(&[d, k], PadMode::Constant, 1.0)
    }),
    ("interpolate", |x, _, _, d, k| {
        let mode = match k.rem_euclid(4) {
            0 => genesis::Interpolation::Nearest,
            1 => genesis::Interpolation::NearestExact,
            m => genesis::Interpolation::Linear {
                align_corners: m == 3,
            },
        };
        let n = x.dim().saturating_sub(2);
        if d % 2 == 0 {
            x.interpolate(&vec![d.rem_euclid(7) as usize; n], mode)
        } else {
            x.interpolate_scale(&vec![0.5 + d.rem_euclid(5) as f64 * 0.6; n], mode)
        }
    }),
    ("leaky_relu", |x, _, _, _, k| x.leaky_relu(k as f64 / 4.0)),
    ("elu", |x, _, _, _, k| x.elu(k as f64)),
    ("celu", |x, _, _, _, k| x.celu(k as f64)),
    ("selu", |x, _, _, _, _| x.selu()),
    ("hardtanh", |x, _, _, d, k| x.hardtanh(d as f64, k as f64)),
    ("relu6", |x, _, _, _, _| x.relu6()),
    ("hardsigmoid", |x, _, _, _, _| x.hardsigmoid()),
    ("hardswish", |x, _, _, _, _| x.hardswish()),
    ("mish", |x, _, _, _, _| x.mish()),
    ("group_norm", |x, y, _, _, k| {
        let g = k.rem_euclid(3) as usize;
        let c = x.shape().get(1).copied().unwrap_or(0);
        let w = y.reshape([-1])?.narrow(0, 0, c.min(y.numel()))?;
        x.group_norm(g, Some(&w), None, 1e-5)
    }),
    ("unfold", |x, _, _, d, k| {
        x.unfold(d, k.rem_euclid(4) as usize, 1 + d.rem_euclid(3) as usize)
    }),
    ("unfold_extreme", |x, _, _, d, k| {
        x.unfold(d, k as usize, d as usize)
    }),
    ("conv2d", |x, y, _, d, k| {
        let o = ConvOptions::new()
            .stride(k.rem_euclid(3) as usize)
            .padding(d.rem_euclid(3) as usize)
            .dilation(1 + (d.rem_euclid(5) == 0) as usize);
        x.conv2d(y, None, o)
    }),
    ("conv2d_extreme", |x, y, _, d, k| {
        let o = ConvOptions::new().padding(d as usize).dilation(k as usize);
        x.conv2d(y, None, o.stride(k as usize).groups(d as usize))
    }),
    ("conv_transpose2d", |x, y, _, d, k| {
        let o = ConvOptions::new()
            .stride(1 + k.rem_euclid(2) as usize)
            .padding(d.rem_euclid(2) as usize)
            .output_padding(k.rem_euclid(2) as usize)
            .dilation(1 + (d.rem_euclid(5) == 0) as usize);
        x.conv_transpose2d(y, None, o)
    }),
    ("conv_transpose2d_extreme", |x, y, _, d, k| {
        let o = ConvOptions::new().padding(d as usize).stride(k as usize);
        x.conv_transpose2d(y, None, o.output_padding(k as usize).groups(d as usize))
    }),
    ("conv1d", |x, y, _, d, k| {
        let o = ConvOptions::new()
            .stride(1 + d.rem_euclid(2) as usize)
            .padding(k.rem_euclid(2) as usize)
            .groups(1 + k.rem_euclid(2) as usize);
        x.conv1d(y, None, o)
    }),
    ("max_pool2d", |x, _, _, d, k| {
        let o = PoolOptions::new()
            .ceil_mode(k % 2 == 0)
            .padding(k.rem_euclid(2) as usize);
        x.max_pool2d([d.rem_euclid(4) as usize, k.rem_euclid(4) as usize], o)
    }),
    ("max_pool2d_extreme", |x, _, _, d, k| {
        let o = PoolOptions::new().stride(k as usize).dilation(d as usize);
        x.max_pool2d(d as usize, o.ceil_mode(true))
    }),
    ("avg_pool2d", |x, _, _, d, k| {
        let o = PoolOptions::new()
            .count_include_pad(k % 2 == 0)
            .ceil_mode(d % 2 == 0)
            .padding(k.rem_euclid(2) as usize);
        x.avg_pool2d(d.rem_euclid(4) as usize, o)
    }),
    ("adaptive_avg_pool2d", |x, _, _, d, k| {
        x.adaptive_avg_pool2d([d.rem_euclid(5) as usize, k as usize])
    }),
    ("avg_pool1d", |x, _, _, d, k| {
        x.avg_pool1d(d as usize, PoolOptions::new().stride(k as usize))
    }),
    ("max_pool1d", |x, _, _, d, k| {
        let o = PoolOptions::new().stride(1 + k.rem_euclid(3) as usize);
        x.max_pool1d(d.rem_euclid(4) as usize, o)
    }),
    ("pad_reflect", |x, _, _, d, k| {
        x.pad(&[d, k], PadMode::Reflect, 0.0)
    }),
    ("pad_circular", |x, _, _, d, k| {
        x.pad(&[d, k], PadMode::Circular, 0.0)
    }),
    ("pad_replicate", |x, _, _, d, k| {
        x.pad(&[d, k], PadMode::Replicate, 0.0)
    }),
    ("roll", |x, _, _, d, k| x.roll(&[k as isize], &[d as isize])),
    ("flip", |x, _, _, d, _| x.flip(d)),
    ("repeat", |x, _, _, d, k| {
        let mut r = vec![1i64; x.dim()];
        r.push(d.rem_euclid(3));
        r.push(k.rem_euclid(3));
        x.repeat(&r)
    }),
    ("tile", |x, _, _, d, _| x.tile([d.rem_euclid(3), 2])),
    ("expand", |x, _, _, d, _| {
        let mut s = vec![d.rem_euclid(3)];
        s.extend(x.shape().iter().map(|&v| v as i64));
        x.expand(&s)
    }),
    ("reshape", |x, _, _, _, _| x.reshape([-1])),
    ("permute_back", |x, _, _, _, _| {
        let p: Vec<i64> = (0..x.dim() as i64).rev().collect();
        x.permute(&p)
    }),
    ("transpose", |x, _, _, d, k| x.transpose(d, k)),
    ("narrow", |x, _, _, d, k| x.narrow(d, k.rem_euclid(2), 1)),
    ("index", |x, _, i, _, k| {
        x.i(&[genesis::ToIndex::to_index_item(i), IndexItem::Int(k)])
    }),
    ("index_slice", |x, _, _, d, k| {
        x.i(&[IndexItem::Slice {
            start: Some(d),
            stop: None,
            step: Some(k.max(1)),
        }])
    }),
    ("cat", |x, y, _, d, _| Tensor::cat(&[x, y, x], d)),
    ("stack", |x, y, _, d, _| Tensor::stack(&[x, y], d)),
    ("split", |x, _, _, d, k| {
        Ok(x.split(k.unsigned_abs() as usize, d)?.swap_remove(0))
    }),
    ("chunk", |x, _, _, d, k| {
        Ok(x.chunk(k.unsigned_abs() as usize, d)?
            .pop()
            .unwrap_or(x.clone()))
    }),
    ("unbind", |x, _, _, d, _| {
        Ok(x.unbind(d)?.pop().unwrap_or(x.clone()))
    }),
    ("diagonal", |x, _, _, d, k| x.diagonal(k, d, -1)),
    ("diag_embed", |x, _, _, d, k| x.diag_embed(k, d, -1)),
    ("tril", |x, _, _, _, k| x.tril(k)),
    ("triu", |x, _, _, _, k| x.triu(k)),
    ("trace", |x, _, _, _, _| x.trace()),
    ("det", |x, _, _, _, _| x.det()),
    ("inverse", |x, _, _, _, _| x.inverse()),
    ("slogdet", |x, _, _, _, _| Ok(x.slogdet()?.1)),
    ("linalg_solve", |x, y, _, _, _| x.linalg_solve(y)),
    ("matrix_power", |x, _, _, _, k| x.matrix_power(k)),
    ("repeat_interleave", |x, _, _, d, k| {
        x.repeat_interleave(k.unsigned_abs() as usize, Some(d as isize))
    }),
    ("vector_norm", |x, _, _, d, k| {
        x.vector_norm(k as f64, d, false)
    }),
    ("dist", |x, y, _, _, k| x.dist(y, k as f64)),
    ("cosine_similarity", |x, y, _, d, _| {
        x.cosine_similarity(y, d, 1e-8)
    }),
    ("normalize", |x, _, _, d, k| x.normalize(k as f64, d, 1e-12)),
    ("renorm", |x, _, _, d, k| x.renorm(2.0, d, k as f64)),
    ("trapezoid", |x, _, _, d, _| x.trapezoid(0.5, d)),
    ("diff", |x, _, _, d, k| {
        x.diff(k.unsigned_abs() as usize, d, None, None)
    }),
    ("to_dtype", |x, _, _, _, _| x.to_dtype(DType::F64)),
    ("to_dtype_half", |x, _, _, _, _| x.to_dtype(DType::F16)),
    ("logit", |x, _, _, _, _| x.logit(Some(0.01))),
    ("sinc", |x, _, _, _, _| x.sinc()),
    ("frac", |x, _, _, _, _| x.frac()),
    ("deep_clone", |x, _, _, _, _| x.deep_clone()),
    ("contiguous", |x, _, _, _, _| x.contiguous()),
    ("unary", |x, _, _, d, _| {
        x.unary(UnaryOp::ALL[d.rem_euclid(UnaryOp::ALL.len() as i64) as usize])
    }),
    ("unary_inplace", |x, _, _, d, _| {
        let y = x.mul(1.0)?;
        y.unary_(UnaryOp::ALL[d.rem_euclid(UnaryOp::ALL.len() as i64) as usize])?;
        Ok(y)
    }),
    ("add_inplace_view", |x, y, _, _, _| {
        let z = x.mul(1.0)?;
        z.add_(y)?;
        Ok(z)
    }),
    ("index_put", |x, y, i, _, k| {
        x.index_put(&[genesis::ToIndex::to_index_item(i)], y, k % 2 == 0)
    }),
    ("masked_fill_inplace", |x, y, _, _, k| {
        let z = x.mul(1.0)?;
        z.masked_fill_(&y.lt(0.0)?, k)?;
        Ok(z)
    }),
];

fn autograd_ops(fz: &mut Fuzz, rng: &mut SmallRng) {
    let dt = if rng.random_bool(0.8) {
        pick(rng, &[DType::F32, DType::F64])
    } else {
        gen_float_dtype(rng)
    };
    let (name, f) = pick(rng, GRAD_OPS);
    // Shapes the op takes (mostly): square matrices for linalg, a dimension of 3 for cross,
    // [N, C] logits for cross_entropy; else any.
    let n = rng.random_range(0..=3);
    let shape = match name {
        _ if rng.random_bool(0.2) => gen_shape(rng),
        "det" | "inverse" | "slogdet" | "linalg_solve" | "matrix_power" | "trace" | "mm"
        | "matmul" | "matmul_t" | "linear" => {
            let mut s = vec![n, n];
            if rng.random_bool(0.3) {
                s.insert(0, rng.random_range(1..=2));
            }
            s
        }
        "cross" => vec![rng.random_range(0..=2), 3],
        "cross_entropy" => vec![rng.random_range(0..=3), rng.random_range(1..=3)],
        // Images [N, C, H, W] and sequences [N, C, L] (or unbatched) for convolution and
        // pooling.
        "conv2d"
        | "conv2d_extreme"
        | "conv_transpose2d"
        | "conv_transpose2d_extreme"
        | "interpolate"
        | "max_pool2d"
        | "max_pool2d_extreme"
        | "avg_pool2d"
        | "adaptive_avg_pool2d" => {
            let mut s = vec![rng.random_range(1..=3), rng.random_range(1..=5)];
            s.push(rng.random_range(1..=5));
            if rng.random_bool(0.8) {
                s.insert(0, rng.random_range(0..=2));
            }
            s
        }
        "conv1d" | "max_pool1d" | "avg_pool1d" => {
            let mut s = vec![rng.random_range(1..=4), rng.random_range(1..=6)];
            if rng.random_bool(0.8) {
                s.insert(0, rng.random_range(0..=2));
            }
            s
        }
        _ => gen_shape(rng),
    };
    let x = gen_input_with(rng, dt, &shape);
    let ydt = if rng.random_bool(0.8) {
        dt
    } else {
        gen_float_dtype(rng)
    };
    let spatial = if name == "conv1d" { 1 } else { 2 };
    let ysh = if name.starts_with("conv") && shape.len() > spatial && rng.random_bool(0.8) {
        // A weight [O, C / groups, k...] for the input's channels.
        let c = shape[shape.len() - spatial - 1];
        let groups = if c % 2 == 0 && rng.random_bool(0.3) {
            2
        } else {
            1
        };
        // Transposed: [C, O / groups, k...].
        let mut w = if name.starts_with("conv_transpose") {
            vec![c, rng.random_range(1..=2)]
        } else {
            vec![groups * rng.random_range(1..=2), c / groups]
        };
        for _ in 0..spatial {
            w.push(rng.random_range(1..=3));
        }
        w
    } else {
        partner_shape(rng, &shape)
    };
    let y = gen_input_with(rng, ydt, &ysh);
    let d = if name == "cross" {
        -1
    } else {
        dim(rng, x.rank())
    };
    let (ish, bound) = match name {
        "cross_entropy" if shape.len() == 2 => (vec![shape[0]], shape[1]),
        _ => {
            let dsize = wrap(d, x.rank())
                .and_then(|w| shape.get(w).copied())
                .unwrap_or(1);
            let ish = if rng.random_bool(0.7) {
                shape.clone()
            } else {
                gen_shape(rng)
            };
            (ish, dsize)
        }
    };
    let idx = gen_index(rng, &ish, bound);
    let k = if rng.random_bool(0.85) {
        rng.random_range(-2..=3)
    } else {
        int_arg(rng)
    };
    let y_grad = rng.random_bool(0.5);
    let retain = rng.random_bool(0.2);
    let how = rng.random_range(0..4);
    let a = format!(
        "{name}, d {d}, k {k}, y requires grad {y_grad}, gradient kind {how}, retain {retain}"
    );
    let ins = [&x, &y, &idx];
    // The op on views of leaves (`as_view`), or on a contiguous leaf holding the view's values;
    // the leaves' shapes and gradients.
    type Grads = Option<(Vec<usize>, Vec<usize>, Option<Tensor>, Option<Tensor>)>;
    let run = |as_view: bool| -> R<Grads> {
        let xl = if as_view {
            make(x.dtype, &x.base_shape, &x.vals)?
        } else {
            x.t.contiguous()?.deep_clone()?
        };
        let xl = xl.requires_grad_(true)?;
        let yl = make(y.dtype, &y.base_shape, &y.vals)?;
        let yl = if y_grad { yl.requires_grad_(true)? } else { yl };
        let xv = if as_view {
            apply(&xl, &x.steps)?
        } else {
            xl.clone()
        };
        let yv = apply(&yl, &y.steps)?;
        let out = f(&xv, &yv, &idx.t, d, k)?;
        if !out.requires_grad() {
            return Ok(None);
        }
        match how {
            0 => out.to_dtype(DType::F64)?.sum()?.backward()?,
            1 => {
                let g = out.ones_like()?;
                out.backward_with(Some(&g), retain)?;
                if retain {
                    out.backward_with(Some(&g), false)?;
                }
            }
            2 if out.numel() <= 4096 => {
                // A gradient of other values (NaN among them).
                let n = out.numel();
                let v: Vec<f64> = (0..n).map(|i| [1.0, -2.0, f64::NAN, 0.5][i % 4]).collect();
                let g = Tensor::from_slice(&v, out.shape(), CPU)?.to_dtype(out.dtype())?;
                out.backward_with(Some(&g), false)?;
            }
            2 => out.backward_with(Some(&out.zeros_like()?), false)?,
            _ => {
                let g =
                    genesis::autograd::grad(&[&out], &[&xl], &[Some(&out.ones_like()?)], false)?;
                return Ok(Some((
                    xl.shape().to_vec(),
                    yl.shape().to_vec(),
                    g[0].clone(),
                    None,
                )));
            }
        }
        let gy = if y_grad { yl.grad() } else { None };
        Ok(Some((
            xl.shape().to_vec(),
            yl.shape().to_vec(),
            xl.grad(),
            gy,
        )))
    };
    let res = fz.guard(name, &a, &ins, || run(true));
    if let Some(Ok(_)) = &res {
        *fz.oks.entry(name).or_default() += 1;
    }
    let Some(Ok(Some((xs, ys, gx, gy)))) = res else {
        return;
    };
    for (leaf, sh, g) in [("x", xs, gx.clone()), ("y", ys, gy)] {
        if let Some(g) = g {
            fz.expect(g.shape() == sh.as_slice(), "autograd", &a, &ins, || {
                format!(
                    "{leaf}'s gradient has shape {:?}, the leaf {sh:?}",
                    g.shape()
                )
            });
            if let Some(Err(e)) = fz.guard("read gradient", &a, &ins, || values(&g)) {
                fz.fail(
                    "autograd",
                    &a,
                    &ins,
                    format!("{leaf}'s gradient does not read: {e}"),
                );
            }
        }
    }
    // The gradient through a view (not an expand) is the gradient of the same op on a
    // contiguous leaf, read through the view.
    let overlaps =
        x.t.shape()
            .iter()
            .zip(x.t.strides())
            .any(|(&n, &s)| n > 1 && s == 0);
    if x.steps.is_empty() || overlaps || x.extreme() || y.extreme() {
        return;
    }
    let Some(gx) = gx else { return };
    match fz.guard(name, &format!("{a} [contiguous leaf]"), &ins, || run(false)) {
        Some(Ok(Some((_, _, Some(gc), _)))) => {
            let through = apply(&gx, &x.steps);
            match through {
                Ok(gv) => {
                    if let Err(why) = same(&gv, &gc, Cmp::Approx, eps_of(x.dtype)) {
                        fz.fail(
                            name,
                            &a,
                            &ins,
                            format!("the gradient through the view differs: {why}"),
                        );
                    }
                }
                Err(e) => fz.fail(
                    name,
                    &a,
                    &ins,
                    format!("the gradient does not take the view: {e}"),
                ),
            }
        }
        Some(Ok(_)) => fz.fail(name, &a, &ins, "no gradient for a contiguous leaf".into()),
        Some(Err(e)) => fz.fail(
            name,
            &a,
            &ins,
            format!("Ok on a view of a leaf, Err on a contiguous leaf: {e}"),
        ),
        None => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzzer
// ---------------------------------------------------------------------------------------------

fn env_u64s(name: &str) -> Option<Vec<u64>> {
    let v = std::env::var(name).ok()?;
    Some(v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
}

fn case_rng(seed: u64, case: u64) -> SmallRng {
    SmallRng::seed_from_u64(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ case.wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

/// The fuzzer: every case of every seed; fails listing each failing call.
#[test]
fn fuzz_tensor_ops() {
    install_hook();
    start_watchdog();
    // The inputs are small: a host allocation of more than 256 MiB comes from an adversarial
    // size or value (a pad of 2^31 - 1, the bincount of 2^31 - 1), which PyTorch would also
    // honour given the memory. Capped, such a call is refused up front like one beyond the
    // machine, instead of filling it for minutes.
    genesis::set_host_memory_limit(Some(256 << 20));
    let seeds = env_u64s("GENESIS_FUZZ_SEEDS").unwrap_or_else(|| vec![1, 2]);
    let iters = env_u64s("GENESIS_FUZZ_ITERS")
        .and_then(|v| v.first().copied())
        .unwrap_or(1500);
    let only = env_u64s("GENESIS_FUZZ_CASE").and_then(|v| v.first().copied());
    let only_group = std::env::var("GENESIS_FUZZ_GROUP")
        .ok()
        .filter(|g| !g.is_empty());
    let mut failures = Vec::new();
    let started = Instant::now();
    for &seed in &seeds {
        let mut fz = Fuzz::new(seed);
        let t0 = Instant::now();
        let cases: Vec<u64> = match only {
            Some(c) => vec![c],
            None => (0..iters).collect(),
        };
        for case in cases {
            fz.case = case;
            let mut rng = case_rng(seed, case);
            let (name, group) = GROUPS[rng.random_range(0..GROUPS.len())];
            if only_group.as_ref().is_some_and(|g| g != name) {
                continue;
            }
            let c0 = Instant::now();
            group(&mut fz, &mut rng);
            if c0.elapsed() > Duration::from_secs(2) {
                eprintln!(
                    "fuzz_ops: slow case ({:?}): seed {seed} case {case}",
                    c0.elapsed()
                );
            }
            if case % 5000 == 4999 {
                eprintln!(
                    "fuzz_ops: seed {seed}: {} cases in {:?}",
                    case + 1,
                    t0.elapsed()
                );
            }
        }
        eprintln!(
            "fuzz_ops: seed {seed}: {} calls of {} ops in {:?}, {} failures",
            fz.total,
            fz.calls.len(),
            t0.elapsed(),
            fz.failures.len()
        );
        if env_flag("GENESIS_FUZZ_COVERAGE") {
            for (op, n) in &fz.calls {
                eprintln!(
                    "  {op}: {n} calls, {} Ok",
                    fz.oks.get(op).copied().unwrap_or(0)
                );
            }
        }
        if env_flag("GENESIS_FUZZ_NOTES") {
            for n in &fz.notes {
                eprintln!("note: {n}");
            }
        }
        failures.extend(fz.failures);
    }
    eprintln!("fuzz_ops: {:?} in all", started.elapsed());
    // One report per distinct op and message head, the rest counted.
    let shown: Vec<&String> = failures.iter().take(60).collect();
    assert!(
        failures.is_empty(),
        "{} failing calls (first {}):\n{}",
        failures.len(),
        shown.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Regression tests of what the fuzzer found
// ---------------------------------------------------------------------------------------------

/// `triu_indices`/`tril_indices` of a huge number of rows and no columns is the empty `[2, 0]`
/// (PyTorch's), at once: the rows were walked one by one (a hang).
#[test]
fn triangle_indices_of_huge_rows_and_no_columns_are_empty() {
    let t0 = Instant::now();
    for rows in [usize::MAX, 1 << 62, isize::MAX as usize] {
        for off in [i64::MIN, 0, i64::MAX] {
            let u = Tensor::triu_indices(rows, 0, off, CPU).unwrap();
            let l = Tensor::tril_indices(rows, 0, off, CPU).unwrap();
            assert_eq!(u.shape(), [2, 0]);
            assert_eq!(l.shape(), [2, 0]);
            assert_eq!(u.dtype(), DType::I64);
        }
    }
    assert_eq!(
        Tensor::triu_indices(0, usize::MAX, 0, CPU).unwrap().shape(),
        [2, 0]
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// `diag_embed` (and `diag`, `diagflat`) with a huge offset refuses the result's size before
/// building anything: it padded a `[1, 2^31]` intermediate (4 GiB) first.
#[test]
fn diag_embed_with_a_huge_offset_is_refused_before_building_it() {
    let x = Tensor::from_slice(&[0i16], [1], CPU).unwrap();
    let t0 = Instant::now();
    for off in [i64::from(i32::MAX), 1 << 40, i64::MAX, i64::MIN] {
        // Out of memory, too many elements, or an offset beyond any size.
        let e = x.diag_embed(off, -1, 0).unwrap_err();
        if off == i64::from(i32::MAX) {
            assert!(e.is_out_of_memory(), "{e:?}");
        }
        assert!(x.diag(off).is_err());
        assert!(x.diagflat(off).is_err());
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // Small offsets keep PyTorch's values.
    let v = Tensor::from_slice(&[1i64, 2], [2], CPU).unwrap();
    let up = v.diag_embed(1, -2, -1).unwrap();
    assert_eq!(up.to_vec::<i64>().unwrap(), [0, 1, 0, 0, 0, 2, 0, 0, 0]);
}

/// `index_select`, `gather` and `take_along_dim` along a dimension of size 0 refuse a
/// non-empty index at once: every value is out of range. `index_select` allocated the result
/// of the other dimensions first (`[1, 2^36]` bfloat16, 128 GiB, which the H200 could hold)
/// and filled it for 50 s before the kernel's check reported the index (seed 204, case 3680,
/// on CUDA); `take_along_dim` broadcasts its index as large.
#[test]
fn indexing_along_an_empty_dimension_is_refused_up_front() {
    let dev = input_device();
    let huge = 1usize << 36;
    let base = Tensor::zeros([huge, 0], DType::BF16, dev).unwrap();
    let t = base.t().unwrap();
    let index = Tensor::from_slice(&[3i64], [1], dev).unwrap();
    let square = index.reshape([1, 1]).unwrap();
    let t0 = Instant::now();
    let results = [
        t.index_select(0, &index),
        t.index_select(-2, &index),
        base.index_select(1, &index),
        t.gather(0, &square),
        base.gather(1, &square),
        t.take_along_dim(&square, Some(0)),
    ];
    for r in results {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                genesis::Error::Storage(genesis_storage::Error::Kernel(
                    genesis_kernels::Error::IndexOutOfRange {
                        value: 3,
                        size: 0,
                        ..
                    }
                ))
            ),
            "{e:?}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // No index selects nothing: the empty result.
    let none = Tensor::from_slice(&[0i64; 0], [0], dev).unwrap();
    assert_eq!(t.index_select(0, &none).unwrap().shape(), [0, huge]);
}

/// `layer_norm` of a row of equal values gives the bias exactly, however large the values: the
/// fused kernels (and their CPU twin) took the row's sum as an f32 times 1/C for the mean,
/// which for three values of 1e10 lands one ulp (1,024) away, and the variance then saw
/// spread: `w` times ±1 plus the bias (seed 407, case 2864; the composite path of an
/// expanded view gave the bias).
#[test]
fn layer_norm_of_equal_values_is_its_bias() {
    let dev = input_device();
    let w = Tensor::from_slice(&[2.25f32, 0.75, -2.0], [3], dev).unwrap();
    let b = Tensor::from_slice(&[-1.0f32, 3.0, -1.0], [3], dev).unwrap();
    for v in [1e10f32, -3e30, 7.0, 1e-30] {
        for rows in [1usize, 5] {
            let x = Tensor::full([rows, 3], v, dev).unwrap();
            let view = Tensor::full([0usize; 0], v, dev)
                .unwrap()
                .expand([rows, 3])
                .unwrap();
            for (x, what) in [(x, "contiguous"), (view, "expanded")] {
                let y = x.layer_norm(&[3], Some(&w), Some(&b), 1e-5).unwrap();
                let got = y.to_vec::<f32>().unwrap();
                assert_eq!(got, [-1.0, 3.0, -1.0].repeat(rows), "{v} {rows} {what}");
            }
        }
    }
}

/// `pad` refuses a result too large for the host up front: a replicate pad of 2^40 built its
/// index list first (an allocation failure aborts the process), a constant pad its pieces.
#[test]
fn a_huge_pad_is_refused_up_front() {
    let x = Tensor::from_slice(&[1.0f32, 2.0], [1, 2], CPU).unwrap();
    for mode in [PadMode::Replicate, PadMode::Constant] {
        for pads in [[0, 1 << 40], [1 << 40, 0], [i64::MAX / 2, 3]] {
            let e = x.pad(&pads, mode, 0.0).unwrap_err();
            assert!(e.is_out_of_memory(), "{mode:?} {pads:?}: {e:?}");
        }
    }
    // Reflect and circular pads must fit the dimension: refused as before.
    assert!(x.pad(&[0, 1 << 40], PadMode::Reflect, 0.0).is_err());
    assert!(x.pad(&[0, 1 << 40], PadMode::Circular, 0.0).is_err());
    // Overflowing pads are refused as a negative size.
    assert!(
        x.pad(&[i64::MAX, i64::MAX], PadMode::Constant, 0.0)
            .is_err()
    );
    // A pad of i64::MIN whose pair sums to a valid size (found by the fuzzer: circular
    // padding negated it while narrowing): refused where the pads must fit the dimension;
    // replicate pads clamp every position into it (one element, the last). The other order
    // overflows the size's sum on the way: refused in every mode.
    for mode in [PadMode::Constant, PadMode::Circular, PadMode::Reflect] {
        assert!(x.pad(&[i64::MIN, i64::MAX], mode, 0.0).is_err(), "{mode:?}");
    }
    let r = x
        .pad(&[i64::MIN, i64::MAX], PadMode::Replicate, 0.0)
        .unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), [2.0]);
    for mode in [
        PadMode::Constant,
        PadMode::Circular,
        PadMode::Reflect,
        PadMode::Replicate,
    ] {
        assert!(x.pad(&[i64::MAX, i64::MIN], mode, 0.0).is_err(), "{mode:?}");
    }
    let r = x.pad(&[2, 1], PadMode::Replicate, 0.0).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0, 2.0, 2.0]);
    // An empty input (a batch of 0) padded hugely is the empty result, at once: the index list
    // of the padded dimension (512 GiB) was allocated first, and the failure aborted.
    let e = Tensor::zeros([0, 1, 4], DType::I16, CPU).unwrap();
    let t0 = Instant::now();
    for pads in [[0, 1 << 36, 3, 0], [1 << 31, 1 << 31, 0, 0]] {
        let p = e.pad(&pads, PadMode::Replicate, 0.0).unwrap();
        let want = [
            0,
            1 + pads[2] as usize + pads[3] as usize,
            4 + pads[0] as usize + pads[1] as usize,
        ];
        assert_eq!(p.shape(), want);
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// `layer_norm` and `rms_norm` of float16 compute in float32 and round once (PyTorch's
/// kernels) on every path: the composite one (a strided weight, a non-contiguous input)
/// squared in float16, where 300² overflows, and gave 0.
#[test]
fn half_norms_compute_in_float32_on_every_path() {
    let h = |v: &[f32], shape: &[usize]| {
        Tensor::from_slice(v, shape.to_vec(), CPU)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap()
    };
    // rms_norm: x / sqrt(mean(x²) + eps): [300, 400] -> [0.8485, 1.1314].
    let x = h(&[300.0, 400.0], &[2]);
    let want = [0.848_528_1, 1.131_370_8];
    let strided = h(&[300.0, 0.0, 400.0, 0.0], &[4])
        .i(&stride2_items(1, 0))
        .unwrap();
    for t in [&x, &strided] {
        let y = f64s(&t.rms_norm(&[2], None, 0.0).unwrap()).unwrap();
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-3, "{y:?}");
        }
    }
    // layer_norm with a strided weight (the composite path) equals the fused path's values.
    let x = h(&[1.25, 0.0, 65504.0], &[3]);
    let w_dense = h(&[65504.0, 65504.0, -2.0], &[3]);
    let w_strided = h(&[65504.0, 0.0, 65504.0, 0.0, -2.0, 0.0], &[6])
        .i(&stride2_items(1, 0))
        .unwrap();
    let b = h(&[0.0, -3.75, f32::NEG_INFINITY], &[3]);
    let fused = x.layer_norm(&[3], Some(&w_dense), Some(&b), 1e-5).unwrap();
    let composite = x
        .layer_norm(&[3], Some(&w_strided), Some(&b), 1e-5)
        .unwrap();
    assert_eq!(composite.dtype(), DType::F16);
    let want = [-46304.0, -46336.0, f64::NEG_INFINITY];
    assert_eq!(f64s(&fused).unwrap(), want);
    assert_eq!(f64s(&composite).unwrap(), want);
    // A float32 weight promotes the result (the composite path), still one rounding.
    let w32 = w_dense.to_dtype(DType::F32).unwrap();
    let y = x.layer_norm(&[3], Some(&w32), None, 1e-5).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    let v = f64s(&y).unwrap();
    assert!((v[0] + 46316.6).abs() < 1.0, "{v:?}");
}

/// `linear` of the narrow integer dtypes with a contiguous bias (PyTorch's integer `addmm` on
/// the CPU): it was refused by the bias add (the add kernels lack uint8), while a strided bias
/// worked.
#[test]
fn integer_linear_takes_a_contiguous_bias() {
    for dtype in [DType::U8, DType::I8, DType::I16, DType::I32, DType::I64] {
        let c = |v: &[i64], shape: &[usize]| {
            Tensor::from_slice(v, shape.to_vec(), CPU)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let x = c(&[2, 2, 0], &[1, 3]);
        let w = c(&[2, 0, 1, 4, 2, 3], &[2, 3]);
        let b = c(&[1, 1], &[2]);
        let y = x.linear(&w, Some(&b)).unwrap();
        assert_eq!(y.dtype(), dtype);
        assert_eq!(i64s(&y).unwrap(), [5, 13], "{dtype:?}");
        let b0 = c(&[1], &[1]).expand([2]).unwrap();
        assert_eq!(i64s(&x.linear(&w, Some(&b0)).unwrap()).unwrap(), [5, 13]);
    }
}

/// The backward of a reduction over dimension 0 or -1 of a 0-d tensor (which PyTorch takes as
/// the tensor itself) panicked indexing the empty shape.
#[test]
fn backward_of_dim_reductions_of_a_0d_tensor() {
    type Red = fn(&Tensor) -> R<Tensor>;
    let cases: [(&str, Red, f64); 9] = [
        ("sum_dim", |x| x.sum_dim(0, false), 1.0),
        ("mean_dim", |x| x.mean_dim(-1, true), 1.0),
        ("var_dim", |x| x.var_dim(0, 0.0, false), 0.0),
        ("std_dim", |x| x.std_dim(-1, 0.0, true), 0.0),
        ("var_mean", |x| Ok(x.var_mean(0, 0.0, false)?.1), 1.0),
        ("logsumexp", |x| x.logsumexp(-1, false), 1.0),
        ("nansum", |x| x.nansum(0, false), 1.0),
        ("vector_norm", |x| x.vector_norm(2.0, 0, false), 1.0),
        ("amax", |x| x.amax(0, false), 1.0),
    ];
    for (name, f, want) in cases {
        let x = Tensor::from_slice(&[2.0f32], (), CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = f(&x).unwrap();
        assert_eq!(y.shape(), [] as [usize; 0], "{name}");
        y.backward().unwrap();
        let g = x.grad().unwrap();
        assert_eq!(g.shape(), [] as [usize; 0], "{name}");
        assert_eq!(g.to_vec::<f32>().unwrap(), [want as f32], "{name}");
    }
}

/// `tensordot` contracting a dimension of a 0-d tensor is an error (PyTorch's "the tensor has
/// no dimensions"); it panicked.
#[test]
fn tensordot_of_a_0d_tensor_is_refused() {
    let s = Tensor::from_slice(&[2.0f32], (), CPU).unwrap();
    let v = Tensor::from_slice(&[3.0f32], [1], CPU).unwrap();
    assert!(s.tensordot(&v, 0, 0).is_err());
    assert!(v.tensordot(&s, -1, -1).is_err());
    assert!(s.tensordot(&s, [0i64; 0], [0i64; 0]).is_ok());
    assert_eq!(
        s.tensordot(&v, [0i64; 0], [0i64; 0])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [6.0]
    );
}

/// `binary_out` of an op with float results (atan2, hypot, true division) of integer operands
/// into an integer `out` is PyTorch's "result type Float can't be cast to the desired output
/// type": it was the kernel's "not supported for int32" (a distinct `out`) or, when `out`
/// shared the operands' storage, the float result silently truncated into it.
#[test]
fn float_results_of_integers_are_not_written_into_an_integer_out() {
    for op in [BinaryOp::Atan2, BinaryOp::Hypot, BinaryOp::Div] {
        for dtype in [DType::I32, DType::I64] {
            let x = Tensor::from_slice(&[4i64, 2, -1, 4], [4], CPU)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let mut out = Tensor::zeros([2], dtype, CPU).unwrap();
            let (a, b) = (x.narrow(0, 0, 2).unwrap(), x.narrow(0, 2, 2).unwrap());
            assert!(a.binary_out(op, &b, &mut out).is_err(), "{op:?} {dtype:?}");
            assert_eq!(i64s(&out).unwrap(), [0, 0]);
            // `out` a view of the operands' storage: refused too, the storage unchanged.
            let mut shared = x.narrow(0, 1, 2).unwrap();
            assert!(
                a.binary_out(op, &b, &mut shared).is_err(),
                "{op:?} {dtype:?}"
            );
            assert_eq!(i64s(&x).unwrap(), [4, 2, -1, 4]);
            // A float `out` takes the float result (PyTorch's hypot takes no integers at all).
            let mut f = Tensor::zeros([2], DType::F32, CPU).unwrap();
            if op == BinaryOp::Hypot {
                assert!(a.binary(op, &b).is_err());
                assert!(a.binary_out(op, &b, &mut f).is_err());
                continue;
            }
            a.binary_out(op, &b, &mut f).unwrap();
            let want = a.binary(op, &b).unwrap();
            assert_eq!(f.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        }
    }
}

/// A tensor with no elements but a huge dimension (PyTorch allows `zeros(3, 2**40, 0)`):
/// `unbind` along the huge dimension walked it making one view each (a hang, then memory);
/// now its list of views is checked like a tensor. Along the other dimensions it is fine.
#[test]
fn unbind_of_a_huge_empty_dimension_is_refused() {
    let x = Tensor::zeros([3usize, 1 << 40, 0], DType::F32, CPU).unwrap();
    let t0 = Instant::now();
    let e = x.unbind(1).unwrap_err();
    assert!(e.is_out_of_memory(), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let parts = x.unbind(0).unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].shape(), [1 << 40, 0]);
    assert!(x.unbind(2).unwrap().is_empty());
}

/// Sizes of empty tensors with huge dimensions summed or multiplied unchecked: a debug-build
/// overflow panic in `block_diag`, `index_select`, `gather` (through `sort`), `tensordot`.
#[test]
fn huge_empty_dimensions_do_not_overflow_size_arithmetic() {
    let max = i64::MAX as usize;
    // block_diag: the columns of the blocks overflow.
    let wide = Tensor::zeros([0, max], DType::I64, CPU).unwrap();
    let small = Tensor::zeros([4, 3], DType::I64, CPU).unwrap();
    assert!(Tensor::block_diag(&[&wide, &small, &wide]).is_err());
    assert_eq!(Tensor::block_diag(&[&wide]).unwrap().shape(), [0, max]);
    // index_select along the empty dimension: its index is checked (PyTorch: out of range).
    let x = Tensor::zeros([3, 0, max], DType::Bool, CPU).unwrap();
    let i = Tensor::from_slice(&[i64::MIN], [1], CPU).unwrap();
    assert!(x.index_select(-2, &i).is_err());
    let none = Tensor::zeros([0], DType::I64, CPU).unwrap();
    assert_eq!(x.index_select(-2, &none).unwrap().shape(), [3, 0, max]);
    // sort and gather along a dimension of such a tensor.
    let y = Tensor::zeros([0, 3, max], DType::I64, CPU).unwrap();
    let (v, idx) = y.sort(-2, false).unwrap();
    assert_eq!(v.shape(), y.shape());
    assert_eq!(y.gather(-2, &idx).unwrap().shape(), y.shape());
    // tensordot contracting the empty dimension: free sizes whose product overflows.
    let a = Tensor::zeros([0usize, 1 << 62, 4], DType::F32, CPU).unwrap();
    let b = Tensor::zeros([0, 2], DType::F32, CPU).unwrap();
    let r = a.tensordot(&b, 0, 0);
    assert!(r.is_err(), "{:?}", r.map(|t| t.shape().to_vec()));
    // The empty result [2^62, 4, 0] is refused by the reshape's size check (its running
    // product overflows before the 0): an error, not a panic.
    let c = Tensor::zeros([0, 0], DType::F32, CPU).unwrap();
    let _ = a.tensordot(&c, 0, 0);
    let a = Tensor::zeros([0usize, 1 << 40, 4], DType::F32, CPU).unwrap();
    assert_eq!(a.tensordot(&c, 0, 0).unwrap().shape(), [1 << 40, 4, 0]);
}

/// The determinant of a batch of 2^40 empty matrices (each 1) allocated its 2^40 results
/// unchecked (an allocation failure aborts); `[0, 2^20, 2^20]` (no matrices) allocated one
/// 2^20 x 2^20 work matrix, and its inverse a 2^20 x 2^20 identity (8 TiB: refused). Now:
/// out of memory for the former, and the empty results (PyTorch's) for the latter.
#[test]
fn linalg_of_huge_empty_batches() {
    let many = Tensor::zeros([1usize << 40, 0, 0], DType::F32, CPU).unwrap();
    assert!(many.det().unwrap_err().is_out_of_memory());
    assert!(many.slogdet().unwrap_err().is_out_of_memory());
    let none = Tensor::zeros([0usize, 1 << 20, 1 << 20], DType::F64, CPU).unwrap();
    assert_eq!(none.det().unwrap().shape(), [0]);
    assert_eq!(none.slogdet().unwrap().0.shape(), [0]);
    assert_eq!(none.inverse().unwrap().shape(), none.shape());
    let b = Tensor::zeros([0usize, 1 << 20, 1], DType::F64, CPU).unwrap();
    assert_eq!(none.linalg_solve(&b).unwrap().shape(), b.shape());
    // Empty matrices have determinant 1 (PyTorch's).
    let three = Tensor::zeros([3, 0, 0], DType::F32, CPU).unwrap();
    assert_eq!(three.det().unwrap().to_vec::<f32>().unwrap(), [1.0; 3]);
}

/// `diff` of an empty tensor along a huge dimension took its differences one at a time (2^40
/// of them: a hang); the result is the dimension shortened by `n` (at most to 0).
#[test]
fn diff_of_an_empty_tensor_is_immediate() {
    let x = Tensor::zeros([1usize, 0, 1 << 62], DType::BF16, CPU).unwrap();
    let t0 = Instant::now();
    assert_eq!(
        x.diff(1 << 40, -1, None, None).unwrap().shape(),
        [1, 0, (1 << 62) - (1 << 40)]
    );
    assert_eq!(
        x.diff(usize::MAX, -1, None, None).unwrap().shape(),
        [1, 0, 0]
    );
    assert_eq!(x.diff(3, 0, None, None).unwrap().shape(), [0, 0, 1 << 62]);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let b = Tensor::zeros([0usize, 5], DType::Bool, CPU).unwrap();
    let d = b.diff(2, 1, None, None).unwrap();
    assert_eq!((d.shape(), d.dtype()), (&[0usize, 3][..], DType::Bool));
}

/// `to_vec2`/`to_vec3` of an empty tensor with a huge number of rows made one vector a row
/// unchecked: "capacity overflow" (a panic) for 2^63 rows, an aborting allocation for 2^40.
#[test]
fn nested_vectors_of_huge_empty_tensors_are_refused() {
    let x = Tensor::zeros([i64::MAX as usize, 0], DType::F32, CPU).unwrap();
    assert!(x.to_vec2::<f32>().unwrap_err().is_out_of_memory());
    let y = Tensor::zeros([1usize << 40, 0], DType::F32, CPU).unwrap();
    assert!(y.to_vec2::<f32>().unwrap_err().is_out_of_memory());
    let z = Tensor::zeros([1usize << 20, 1 << 20, 0], DType::I64, CPU).unwrap();
    assert!(z.to_vec3::<i64>().unwrap_err().is_out_of_memory());
    // Small ones as before.
    let w = Tensor::zeros([2usize, 0], DType::F32, CPU).unwrap();
    assert_eq!(w.to_vec2::<f32>().unwrap(), vec![Vec::<f32>::new(); 2]);
    let v = Tensor::from_slice(&[1i64, 2, 3, 4], [2, 1, 2], CPU).unwrap();
    assert_eq!(
        v.to_vec3::<i64>().unwrap(),
        vec![vec![vec![1, 2]], vec![vec![3, 4]]]
    );
}

/// `repeat_interleave` with one count for a huge dimension (of an empty tensor) spread the
/// count into a list as long as the dimension (8 TiB: an aborting allocation); now the count is
/// kept, and only the result's list (refused when too large) is made.
#[test]
fn one_repeat_count_is_not_spread_over_a_huge_dimension() {
    let x = Tensor::zeros([0usize, 3, 1 << 40], DType::Bool, CPU).unwrap();
    let three = Tensor::from_slice(&[3i64], [1], CPU).unwrap();
    let zero = Tensor::from_slice(&[0i64], [1], CPU).unwrap();
    assert!(
        x.repeat_interleave_tensor(&three, Some(-1))
            .unwrap_err()
            .is_out_of_memory()
    );
    assert_eq!(
        x.repeat_interleave_tensor(&zero, Some(-1)).unwrap().shape(),
        [0, 3, 0]
    );
    assert_eq!(
        x.repeat_interleave_tensor(&three, Some(1)).unwrap().shape(),
        [0, 9, 1 << 40]
    );
    let v = Tensor::from_slice(&[1i64, 2, 3], [3], CPU).unwrap();
    let two = Tensor::from_slice(&[2i32], (), CPU).unwrap();
    let r = v.repeat_interleave_tensor(&two, Some(0)).unwrap();
    assert_eq!(r.to_vec::<i64>().unwrap(), [1, 1, 2, 2, 3, 3]);
    let neg = Tensor::from_slice(&[-1i64], [1], CPU).unwrap();
    assert!(v.repeat_interleave_tensor(&neg, Some(0)).is_err());
}
