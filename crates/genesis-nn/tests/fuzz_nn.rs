//! A seeded fuzzer of `genesis-nn`'s public API on the CPU: layer constructors with zero,
//! huge and overflowing sizes; forward passes with wrong shapes, dtypes, ranks, empty batches
//! and non-finite values; losses with mismatched shapes, every reduction, `ignore_index` and
//! targets out of range, NaN and infinite values and options; optimisers with non-finite or
//! negative hyper-parameters, betas out of range, parameters of mixed dtypes and of no
//! elements; schedules at extreme steps; initialisers on every dtype and degenerate shapes;
//! `load_state_dict` with missing, extra, mis-shaped and mis-typed keys; safetensors files
//! that are truncated, corrupted or hand-written with bad headers; the GPT-2 config and model
//! at degenerate sizes; the training helpers at extreme arguments; the convolution, pooling,
//! normalisation, upsampling, attention and activation layers at random and extreme
//! arguments (a refused forward pass changes no buffer).
//!
//! Every call runs under `catch_unwind`: `Ok` and `Err` are both accepted (some calls also
//! check that a failure changed nothing), a panic is recorded with the seed, the iteration and
//! a description of the input, and the test fails listing them. Sizes are tiny, or so large
//! that any request for them must be refused before memory is touched (at least 2^45
//! elements: far beyond any host).
//!
//! `GENESIS_FUZZ_SEED` (default 0) and `GENESIS_FUZZ_ITERS` (a multiplier of the default
//! iteration counts, default 1) widen a local run; `GENESIS_FUZZ_TRACE` prints each call
//! before it runs (to find a call that hangs); `GENESIS_FUZZ_BACKTRACE` adds a backtrace to
//! each panic reported.

use std::collections::BTreeMap;

use genesis::{ConvOptions, Interpolation, PoolOptions};
use genesis::{DType, Device, Generator, Tensor};
use genesis_nn::gpt2::{Block, Gpt2, Gpt2Config};
use genesis_nn::loss::{self, CrossEntropy, Reduction, Target};
use genesis_nn::optim::{
    Adagrad, Adam, CosineWithWarmup, Optimizer, RmsProp, Schedule, Sgd, StepLr, clip_grad_norm_,
};
use genesis_nn::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d,
    Dropout, Elu, Embedding, Flatten, Gelu, GroupNorm, Hardsigmoid, Hardswish, LayerNorm,
    LeakyRelu, Linear, MaxPool2d, Mish, Module, MultiheadAttention, RMSNorm, Relu, Relu6, Selu,
    Sequential, Sigmoid, Silu, Softmax, Tanh, Upsample, init,
};
use rand::Rng;

const CPU: Device = Device::Cpu;

// ---------------------------------------------------------------------------------------------
// The harness (shared by the fuzzers) and this fuzzer's random inputs.

#[path = "../../genesis-storage/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::Fuzz;

impl Fuzz {
    /// A size: mostly small, sometimes 0, sometimes one no host can hold.
    fn size(&mut self) -> usize {
        match self.rng.random_range(0..10) {
            0 => 0,
            1 => self.pick(&HUGE),
            _ => self.rng.random_range(1..5),
        }
    }

    /// A small size (no huge ones).
    fn small(&mut self) -> usize {
        self.rng.random_range(0..4)
    }

    fn float(&mut self) -> f64 {
        if self.chance(0.5) {
            self.pick(&FLOATS)
        } else {
            self.rng.random_range(-3.0..3.0)
        }
    }

    fn dtype(&mut self) -> DType {
        self.pick(&DType::ALL)
    }

    fn float_dtype(&mut self) -> DType {
        self.pick(&[DType::F32, DType::F64, DType::F16, DType::BF16])
    }

    /// A shape of rank 0 to 4 with small sizes (some 0).
    fn shape(&mut self) -> Vec<usize> {
        let rank = self.rng.random_range(0..5);
        (0..rank).map(|_| self.small()).collect()
    }

    /// A shape of rank `lo..=hi` with small sizes, 0 rarely.
    fn shape_rank(&mut self, lo: usize, hi: usize) -> Vec<usize> {
        let rank = self.rng.random_range(lo..=hi);
        (0..rank)
            .map(|_| {
                if self.chance(0.1) {
                    0
                } else {
                    self.rng.random_range(1..4)
                }
            })
            .collect()
    }

    /// Values for a tensor of `n` elements: floats (some non-finite) or integers (some
    /// extreme), as f64 and i64.
    fn values(&mut self, n: usize) -> (Vec<f64>, Vec<i64>) {
        let nonfinite = self.chance(0.3);
        let f = (0..n)
            .map(|_| {
                if nonfinite && self.chance(0.3) {
                    self.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300])
                } else {
                    self.rng.random_range(-4.0..4.0)
                }
            })
            .collect();
        let extreme = self.chance(0.2);
        let i = (0..n)
            .map(|_| {
                if extreme && self.chance(0.3) {
                    self.pick(&INTS)
                } else {
                    self.rng.random_range(-3..6)
                }
            })
            .collect();
        (f, i)
    }

    /// A tensor of `shape` and `dtype` with random values (a description of it too).
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> (Option<Tensor>, String) {
        let n = if shape.contains(&0) {
            0
        } else {
            match shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
                Some(n) if n <= 1 << 16 => n,
                // Too many elements for a fuzz input: not made.
                _ => return (None, format!("{dtype}{shape:?}")),
            }
        };
        if n == 0 {
            // Sizes of an empty tensor may be huge.
            return (
                Tensor::zeros(shape, dtype, CPU).ok(),
                format!("{dtype}{shape:?}=[]"),
            );
        }
        let (f, i) = self.values(n);
        let t = make(shape, dtype, &f, &i);
        let shown = if dtype.is_float() {
            format!("{dtype}{shape:?}={}", short(&f))
        } else {
            format!("{dtype}{shape:?}={}", short(&i))
        };
        (t, shown)
    }

    fn any_tensor(&mut self) -> (Option<Tensor>, String) {
        let shape = self.shape();
        let dtype = self.dtype();
        self.tensor(&shape, dtype)
    }

    fn reduction(&mut self) -> Reduction {
        self.pick(&[Reduction::Mean, Reduction::Sum, Reduction::None])
    }
}

/// Sizes no host can hold (with at least one more element: 2^45 of the smallest dtype is
/// 32 TiB), and sizes whose products overflow.
const HUGE: [usize; 7] = [
    1 << 45,
    1 << 50,
    1 << 62,
    isize::MAX as usize,
    usize::MAX / 2,
    usize::MAX - 1,
    usize::MAX,
];

const FLOATS: [f64; 16] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1.0 - 1e-12,
    1.0 + 1e-12,
    2.0,
    1e308,
    -1e308,
    f64::MIN_POSITIVE,
    -1e-300,
    f64::EPSILON,
];

const INTS: [i64; 8] = [
    i64::MIN,
    i64::MAX,
    -1,
    -100,
    -101,
    1 << 40,
    i64::MIN + 1,
    255,
];

fn short<T: std::fmt::Debug>(v: &[T]) -> String {
    let s = format!("{v:?}");
    if s.len() > 120 {
        format!("{}..]", &s[..120])
    } else {
        s
    }
}

/// A tensor of `shape` in `dtype` from float or integer values (`None` when the facade
/// refuses the values, e.g. NaN as an integer: the input is then skipped).
fn make(shape: &[usize], dtype: DType, f: &[f64], i: &[i64]) -> Option<Tensor> {
    if dtype.is_float() {
        Tensor::from_slice(f, shape, CPU).ok()?.to_dtype(dtype).ok()
    } else if dtype == DType::Bool {
        let b: Vec<bool> = i.iter().map(|&v| v > 1).collect();
        Tensor::from_bools(&b, shape, CPU).ok()
    } else if dtype == DType::I64 {
        Tensor::from_slice(i, shape, CPU).ok()
    } else {
        let small: Vec<i64> = i.iter().map(|&v| v.clamp(-100, 100)).collect();
        Tensor::from_slice(&small, shape, CPU)
            .ok()?
            .to_dtype(dtype)
            .ok()
    }
}

/// The bits of every element (as f64), to compare tensors exactly (NaN included).
fn bits(t: &Tensor) -> Vec<u64> {
    t.detach()
        .to_dtype(DType::F64)
        .and_then(|t| t.to_vec::<f64>())
        .map(|v| v.into_iter().map(f64::to_bits).collect())
        .unwrap_or_default()
}

fn parameters(m: &dyn Module) -> Vec<(String, Vec<usize>, DType, Vec<u64>)> {
    m.named_parameters()
        .into_iter()
        .map(|(n, t)| (n, t.shape().to_vec(), t.dtype(), bits(&t)))
        .collect()
}

fn snapshot(m: &dyn Module) -> Vec<(String, Vec<usize>, DType, Vec<u64>)> {
    m.named_parameters()
        .into_iter()
        .chain(m.named_buffers())
        .map(|(n, t)| (n, t.shape().to_vec(), t.dtype(), bits(&t)))
        .collect()
}

fn temp_path(tag: &str, n: usize) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "genesis-fuzz-nn-{}-{tag}-{n}.safetensors",
        std::process::id()
    ))
}

// ---------------------------------------------------------------------------------------------
// Layers.

/// A layer's constructor arguments.
#[derive(Debug, Clone)]
enum LayerSpec {
    Linear(usize, usize, bool),
    Embedding(usize, usize),
    LayerNorm(Vec<usize>, f64, bool),
    RMSNorm(Vec<usize>, f64),
    Dropout(f64, u64, bool),
    Relu,
    Silu,
    Tanh,
    Gelu(bool),
    /// Transposed (0: no, 1: 2-d, 2: 1-d), in, out, kernel, stride, padding, dilation, groups,
    /// output padding, bias.
    Conv(
        u8,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        bool,
    ),
    /// 1-d or not, features, momentum (None: cumulative), affine, tracked, training.
    BatchNorm(bool, usize, Option<f64>, bool, bool, bool),
    GroupNorm(usize, usize, f64, bool),
    /// Max or average, kernel, stride, padding, dilation, ceil mode.
    Pool(bool, usize, usize, usize, usize, bool),
    AdaptiveAvgPool(usize, usize),
    Upsample(usize, bool),
    Flatten(isize, isize),
    Attention(usize, usize, bool, bool),
    Activation(u8, f64),
}

fn random_layer(z: &mut Fuzz) -> LayerSpec {
    // Arguments of the convolution and pooling layers: mostly small, sometimes 0 or huge.
    let arg = |z: &mut Fuzz| {
        if z.chance(0.85) {
            z.rng.random_range(1..4)
        } else {
            z.size()
        }
    };
    match z.rng.random_range(0..19) {
        9 | 10 => {
            let kind = z.rng.random_range(0..4) as u8 % 3;
            let (i, o, k) = (arg(z), arg(z), arg(z));
            let (s, p, d, g) = (arg(z), arg(z).saturating_sub(1), arg(z), arg(z));
            LayerSpec::Conv(kind, i, o, k, s, p, d, g, z.small(), z.chance(0.5))
        }
        11 => {
            let m = if z.chance(0.8) {
                Some(z.float().abs().min(1.5))
            } else {
                None
            };
            LayerSpec::BatchNorm(
                z.chance(0.5),
                z.size(),
                m,
                z.chance(0.7),
                z.chance(0.8),
                z.chance(0.5),
            )
        }
        12 => LayerSpec::GroupNorm(arg(z), z.size(), z.float().abs(), z.chance(0.7)),
        13 => {
            let (k, s, p, d) = (arg(z), arg(z), z.small(), arg(z));
            LayerSpec::Pool(z.chance(0.5), k, s, p, d, z.chance(0.4))
        }
        14 => LayerSpec::AdaptiveAvgPool(z.size(), arg(z)),
        15 => LayerSpec::Upsample(z.size(), z.chance(0.5)),
        16 => LayerSpec::Flatten(
            z.rng.random_range(-3i64..3) as isize,
            z.rng.random_range(-3i64..3) as isize,
        ),
        17 => LayerSpec::Attention(
            arg(z).saturating_mul(2),
            arg(z),
            z.chance(0.5),
            z.chance(0.5),
        ),
        18 => LayerSpec::Activation(z.rng.random_range(0..10), z.float()),
        r => random_basic_layer(z, r),
    }
}

fn random_basic_layer(z: &mut Fuzz, which: u32) -> LayerSpec {
    match which {
        0 => LayerSpec::Linear(z.size(), z.size(), z.chance(0.5)),
        1 => LayerSpec::Embedding(z.size(), z.size()),
        2 => {
            let rank = z.rng.random_range(0..3);
            let shape: Vec<usize> = (0..rank).map(|_| z.size()).collect();
            LayerSpec::LayerNorm(shape, z.float(), z.chance(0.7))
        }
        3 => {
            let rank = z.rng.random_range(0..3);
            let shape: Vec<usize> = (0..rank).map(|_| z.size()).collect();
            LayerSpec::RMSNorm(shape, z.float())
        }
        4 => {
            let p = z.float().abs().min(2.0);
            let p = if z.chance(0.5) { p.clamp(0.0, 1.0) } else { p };
            LayerSpec::Dropout(p, z.rng.random(), z.chance(0.7))
        }
        5 => LayerSpec::Relu,
        6 => LayerSpec::Silu,
        7 => LayerSpec::Tanh,
        _ => LayerSpec::Gelu(z.chance(0.5)),
    }
}

/// The layer, `None` when its constructor refused the arguments.
fn build(spec: &LayerSpec, g: &Generator) -> Option<Box<dyn Module>> {
    fn boxed(m: impl Module + 'static) -> Box<dyn Module> {
        Box::new(m)
    }
    match spec.clone() {
        LayerSpec::Linear(i, o, b) => Linear::new(i, o, b, g, CPU).ok().map(boxed),
        LayerSpec::Embedding(n, d) => Embedding::new(n, d, g, CPU).ok().map(boxed),
        LayerSpec::LayerNorm(s, eps, affine) => {
            LayerNorm::new(&s, eps, affine, CPU).ok().map(boxed)
        }
        LayerSpec::RMSNorm(s, eps) => RMSNorm::new(&s, eps, CPU).ok().map(boxed),
        LayerSpec::Dropout(p, seed, train) => {
            let mut d = Dropout::new(p, seed).ok()?;
            d.set_training(train);
            Some(boxed(d))
        }
        LayerSpec::Relu => Some(boxed(Relu)),
        LayerSpec::Silu => Some(boxed(Silu)),
        LayerSpec::Tanh => Some(boxed(Tanh)),
        LayerSpec::Gelu(tanh) => Some(boxed(Gelu { tanh })),
        LayerSpec::Conv(kind, i, o, k, s, p, d, groups, op, bias) => {
            let opts = ConvOptions::new()
                .stride(s)
                .padding(p)
                .dilation(d)
                .groups(groups)
                .output_padding(op);
            match kind {
                0 => Conv2d::new(i, o, k, opts, bias, g, CPU).ok().map(boxed),
                1 => ConvTranspose2d::new(i, o, k, opts, bias, g, CPU)
                    .ok()
                    .map(boxed),
                _ => Conv1d::new(i, o, k, opts, bias, g, CPU).ok().map(boxed),
            }
        }
        LayerSpec::BatchNorm(one_d, c, momentum, affine, tracked, training) => {
            let mut m: Box<dyn Module> = if one_d {
                boxed(BatchNorm1d::with(c, 1e-5, momentum, affine, tracked, CPU).ok()?)
            } else {
                boxed(BatchNorm2d::with(c, 1e-5, momentum, affine, tracked, CPU).ok()?)
            };
            m.set_training(training);
            Some(m)
        }
        LayerSpec::GroupNorm(groups, c, eps, affine) => {
            GroupNorm::new(groups, c, eps, affine, CPU).ok().map(boxed)
        }
        LayerSpec::Pool(max, k, s, p, d, ceil) => {
            let o = PoolOptions::new().stride(s).padding(p).ceil_mode(ceil);
            Some(if max {
                boxed(MaxPool2d::new(k, o.dilation(d)))
            } else {
                boxed(AvgPool2d::new(k, o))
            })
        }
        LayerSpec::AdaptiveAvgPool(h, w) => Some(boxed(AdaptiveAvgPool2d::new([h, w]))),
        LayerSpec::Upsample(size, nearest) => {
            let mode = if nearest {
                Interpolation::Nearest
            } else {
                Interpolation::Linear {
                    align_corners: false,
                }
            };
            Some(boxed(Upsample::size(&[size, size], mode)))
        }
        LayerSpec::Flatten(start_dim, end_dim) => Some(boxed(Flatten { start_dim, end_dim })),
        LayerSpec::Attention(e, h, bias, batch_first) => {
            MultiheadAttention::new(e, h, bias, batch_first, g, CPU)
                .ok()
                .map(boxed)
        }
        LayerSpec::Activation(which, a) => Some(match which {
            0 => boxed(LeakyRelu { negative_slope: a }),
            1 => boxed(Elu { alpha: a }),
            2 => boxed(Selu),
            3 => boxed(Relu6),
            4 => boxed(Hardsigmoid),
            5 => boxed(Hardswish),
            6 => boxed(Mish),
            7 => boxed(Sigmoid),
            _ => boxed(Softmax { dim: a as isize }),
        }),
    }
}

/// An input for `layer`: mostly of a shape it may accept (its weight's trailing size), else
/// any shape and dtype.
fn input_for(z: &mut Fuzz, layer: &dyn Module) -> (Option<Tensor>, String) {
    let params = layer.named_parameters();
    let weight = params.iter().find(|(n, _)| n == "weight").map(|(_, t)| t);
    if let Some(w) = weight
        && z.chance(0.7)
    {
        let mut shape = z.shape_rank(0, 2);
        let dtype = if z.chance(0.8) { DType::F32 } else { z.dtype() };
        match w.dim() {
            // An embedding takes indices; a linear layer [.., in].
            2 if dtype.is_float() => shape.push(w.shape()[1]),
            2 => {}
            // A convolution [N, C, spatial...], C either of the weight's first two sizes.
            3 | 4 => {
                let c = w.shape()[usize::from(z.chance(0.5))];
                shape = vec![z.small(), c];
                for _ in 2..w.dim() {
                    shape.push(z.rng.random_range(1..7));
                }
            }
            _ => shape.extend_from_slice(w.shape()),
        }
        return z.tensor(&shape, dtype);
    }
    // Layers of no weight (pooling, norms without affine, ...): images half the time.
    if z.chance(0.5) {
        let mut shape = vec![z.small(), z.rng.random_range(1..4)];
        for _ in 0..z.rng.random_range(1..3) {
            shape.push(z.rng.random_range(1..7));
        }
        let dtype = if z.chance(0.8) { DType::F32 } else { z.dtype() };
        return z.tensor(&shape, dtype);
    }
    z.any_tensor()
}

#[test]
fn layers() {
    let mut z = Fuzz::new("layers", 1);
    let g = Generator::new(7);
    for it in 0..z.iterations(800) {
        z.iteration = it;
        let spec = random_layer(&mut z);
        let what = format!("{spec:?}");
        let mut layer = None;
        z.call_named(&format!("{what}: constructor"), || {
            layer = build(&spec, &g);
            Ok(())
        });
        let Some(mut layer) = layer else { continue };
        for _ in 0..3 {
            let (x, shown) = input_for(&mut z, layer.as_ref());
            let Some(x) = x else { continue };
            let before = snapshot(layer.as_ref());
            let params = parameters(layer.as_ref());
            z.call_named(&format!("{what}.forward({shown})"), || {
                let r = layer.forward(&x);
                // A forward pass changes no parameter (a batch norm in training moves its
                // running statistics), and a refused one nothing at all.
                if parameters(layer.as_ref()) != params {
                    return Err("the forward pass changed the parameters".into());
                }
                if r.is_err() && snapshot(layer.as_ref()) != before {
                    return Err("a refused forward pass changed the buffers".into());
                }
                Ok(())
            });
            let grad = z.chance(0.3);
            if grad {
                z.call_named(&format!("{what}.forward({shown}).sum().backward()"), || {
                    if let Ok(y) = layer.forward(&x)
                        && let Ok(s) = y.sum()
                    {
                        let _ = s.backward();
                    }
                    Ok(())
                });
            }
        }
        let train = z.chance(0.5);
        z.call_named(&format!("{what}.set_training({train}), state_dict"), || {
            layer.set_training(train);
            let _ = layer.state_dict();
            Ok(())
        });
    }
    // The norms' extra entry points.
    for it in 0..z.iterations(150) {
        z.iteration = it;
        let rank = z.rng.random_range(0..3);
        let ns: Vec<usize> = (0..rank).map(|_| z.small() + 1).collect();
        let (eps, affine) = (z.float(), z.chance(0.7));
        let Ok(ln) = LayerNorm::new(&ns, eps, affine, CPU) else {
            continue;
        };
        let mut xs = z.shape_rank(0, 2);
        if z.chance(0.8) {
            xs.extend_from_slice(&ns);
        }
        let dt = if z.chance(0.7) { DType::F32 } else { z.dtype() };
        let (x, sx) = z.tensor(&xs, dt);
        let rshape = if z.chance(0.8) { xs.clone() } else { z.shape() };
        let rdt = if z.chance(0.7) { dt } else { z.dtype() };
        let (r, sr) = z.tensor(&rshape, rdt);
        let (Some(x), Some(r)) = (x, r) else { continue };
        let to = z.dtype();
        let what = format!("LayerNorm::new({ns:?}, {eps:?}, {affine})");
        z.call_named(&format!("{what}.forward_to({sx}, {to})"), || {
            let _ = ln.forward_to(&x, to);
            Ok(())
        });
        let d = if z.chance(0.5) { Some(to) } else { None };
        z.call_named(&format!("{what}.forward_add({sx}, {sr}, {d:?})"), || {
            let _ = ln.forward_add(&x, &r, d);
            Ok(())
        });
    }
    // Sequential of random layers.
    for it in 0..z.iterations(60) {
        z.iteration = it;
        let mut seq = Sequential::new();
        let mut names = Vec::new();
        for _ in 0..z.rng.random_range(0..4) {
            // Only the layers with owned, Send + Sync types can go in a Sequential.
            match z.rng.random_range(0..4) {
                0 => {
                    let (i, o) = (z.small(), z.small());
                    if let Ok(l) = Linear::new(i, o, true, &g, CPU) {
                        names.push(format!("Linear({i}, {o})"));
                        seq = seq.add(l);
                    }
                }
                1 => {
                    names.push("Relu".into());
                    seq = seq.add(Relu);
                }
                2 => {
                    let n = z.small();
                    if let Ok(l) = LayerNorm::new(&[n], 1e-5, true, CPU) {
                        names.push(format!("LayerNorm([{n}])"));
                        seq = seq.add(l);
                    }
                }
                _ => {
                    let p = z.pick(&[0.0, 0.5, 1.0]);
                    if let Ok(l) = Dropout::new(p, 0) {
                        names.push(format!("Dropout({p})"));
                        seq = seq.add(l);
                    }
                }
            }
        }
        let (x, sx) = z.any_tensor();
        let Some(x) = x else { continue };
        z.call_named(&format!("Sequential{names:?}.forward({sx})"), || {
            let _ = seq.forward(&x);
            seq.eval();
            let _ = seq.forward(&x);
            let _ = seq.state_dict();
            Ok(())
        });
    }
    z.finish();
}

// ---------------------------------------------------------------------------------------------
// Losses.

#[test]
fn losses() {
    let mut z = Fuzz::new("losses", 2);
    for it in 0..z.iterations(1000) {
        z.iteration = it;
        // Logits [N, C, d..] (or [C], or anything), float mostly.
        let mut ls = z.shape_rank(1, 3);
        if z.chance(0.1) {
            ls = z.shape();
        }
        let ldt = if z.chance(0.8) {
            z.float_dtype()
        } else {
            z.dtype()
        };
        let (logits, sl) = z.tensor(&ls, ldt);
        let Some(logits) = logits else { continue };
        let logits = if z.chance(0.3) && ldt.is_float() {
            logits.clone().requires_grad_(true).unwrap_or(logits)
        } else {
            logits
        };
        // Targets: the right shape (logits without dimension 1) mostly.
        let mut ts = ls.clone();
        if ts.len() >= 2 {
            ts.remove(1);
        } else {
            ts.clear();
        }
        if z.chance(0.2) {
            ts = z.shape();
        }
        let tdt = if z.chance(0.8) { DType::I64 } else { z.dtype() };
        let (target, st) = z.tensor(&ts, tdt);
        let Some(target) = target else { continue };
        let (probs, sp) = {
            let s = if z.chance(0.8) { ls.clone() } else { z.shape() };
            let d = if z.chance(0.8) { ldt } else { z.dtype() };
            z.tensor(&s, d)
        };
        let opts = CrossEntropy {
            ignore_index: if z.chance(0.3) {
                None
            } else {
                Some(z.pick(&[-100, 0, 1, -1, i64::MIN, i64::MAX, 3, 1 << 40]))
            },
            label_smoothing: if z.chance(0.5) {
                0.0
            } else {
                z.pick(&[0.1, 0.5, 1.0, -0.1, 1.5, f64::NAN, f64::INFINITY, 1e-300])
            },
            reduction: z.reduction(),
        };
        let backward = z.chance(0.3);
        let finish = |r: genesis::Result<Tensor>| {
            if backward
                && let Ok(l) = r
                && let Ok(s) = l.sum()
            {
                let _ = s.backward();
            }
            Ok(())
        };
        z.call_named(&format!("cross_entropy({sl}, {st})"), || {
            finish(loss::cross_entropy(&logits, &target))
        });
        z.call_named(
            &format!("cross_entropy_with({sl}, Indices({st}), {opts:?})"),
            || {
                finish(loss::cross_entropy_with(
                    &logits,
                    Target::Indices(&target),
                    opts,
                ))
            },
        );
        if let Some(p) = &probs {
            z.call_named(
                &format!("cross_entropy_with({sl}, Probabilities({sp}), {opts:?})"),
                || {
                    finish(loss::cross_entropy_with(
                        &logits,
                        Target::Probabilities(p),
                        opts,
                    ))
                },
            );
        }
        let (ig, red) = (opts.ignore_index, opts.reduction);
        z.call_named(&format!("nll_loss({sl}, {st}, {ig:?}, {red:?})"), || {
            finish(loss::nll_loss(&logits, &target, ig, red))
        });
        if let Some(p) = &probs {
            z.call_named(&format!("mse_loss({sl}, {sp}, {red:?})"), || {
                finish(loss::mse_loss(&logits, p, red))
            });
            z.call_named(
                &format!("binary_cross_entropy_with_logits({sl}, {sp}, {red:?})"),
                || finish(loss::binary_cross_entropy_with_logits(&logits, p, red)),
            );
        }
    }
    z.finish();
}

// ---------------------------------------------------------------------------------------------
// Optimisers, clipping, schedules, initialisers.

/// Parameters of random (mostly float) dtypes and shapes (some empty), each with a gradient
/// (mostly).
fn random_params(z: &mut Fuzz) -> (Vec<Tensor>, String) {
    let mut ps = Vec::new();
    let mut shown = Vec::new();
    for _ in 0..z.rng.random_range(0..4) {
        let shape = z.shape_rank(0, 2);
        let dt = z.float_dtype();
        let (t, s) = z.tensor(&shape, dt);
        let Some(t) = t else { continue };
        let Ok(t) = t.requires_grad_(true) else {
            continue;
        };
        let mut s = s;
        if z.chance(0.85) {
            let (g, sg) = z.tensor(&shape, dt);
            if let Some(g) = g {
                let _ = t.set_grad(Some(g));
                s = format!("{s} grad {sg}");
            }
        }
        if z.chance(0.15) {
            // A non-contiguous parameter (a transposed view of a leaf is not a leaf: use a
            // leaf made from a transposed copy's storage order instead).
            if let Ok(v) = t.detach().transpose(0, -1)
                && let Ok(v) = v.requires_grad_(true)
            {
                if let Some(g) = t.grad()
                    && let Ok(gt) = g.transpose(0, -1)
                {
                    let _ = v.set_grad(Some(gt));
                }
                ps.push(v);
                shown.push(format!("transposed {s}"));
                continue;
            }
        }
        ps.push(t);
        shown.push(s);
    }
    (ps, shown.join("; "))
}

#[test]
fn optimisers_schedules_init() {
    let mut z = Fuzz::new("optimisers", 3);
    for it in 0..z.iterations(600) {
        z.iteration = it;
        let (params, sp) = random_params(&mut z);
        let lr = z.float();
        let kind = z.rng.random_range(0..5);
        let mut opt: Box<dyn Optimizer> = match kind {
            3 => {
                let mut o = RmsProp::new(params.clone(), lr);
                o.alpha = if z.chance(0.5) { 0.99 } else { z.float() };
                o.eps = if z.chance(0.5) { 1e-8 } else { z.float() };
                o.momentum = if z.chance(0.5) { 0.0 } else { z.float() };
                o.weight_decay = if z.chance(0.5) { 0.0 } else { z.float() };
                o.centered = z.chance(0.5);
                Box::new(o)
            }
            4 => {
                let mut o = Adagrad::new(params.clone(), lr);
                o.lr_decay = if z.chance(0.5) { 0.0 } else { z.float() };
                o.eps = if z.chance(0.5) { 1e-10 } else { z.float() };
                o.weight_decay = if z.chance(0.5) { 0.0 } else { z.float() };
                o.initial_accumulator_value = if z.chance(0.5) { 0.0 } else { z.float() };
                Box::new(o)
            }
            0 => {
                let mut o = Sgd::new(params.clone(), lr);
                o.momentum = if z.chance(0.5) { 0.0 } else { z.float() };
                o.dampening = if z.chance(0.5) { 0.0 } else { z.float() };
                o.weight_decay = if z.chance(0.5) { 0.0 } else { z.float() };
                o.nesterov = z.chance(0.3);
                Box::new(o)
            }
            _ => {
                let mut o = if kind == 1 {
                    Adam::new(params.clone(), lr)
                } else {
                    Adam::adamw(params.clone(), lr)
                };
                if z.chance(0.5) {
                    o.betas = (z.float(), z.float());
                }
                if z.chance(0.3) {
                    o.eps = z.float();
                }
                if z.chance(0.3) {
                    o.weight_decay = z.float();
                }
                Box::new(o)
            }
        };
        let what = format!("{opt:?} over [{sp}]", opt = OptName(kind, lr));
        let steps = z.rng.random_range(1..4);
        z.call_named(&format!("{what}: {steps} steps"), || {
            for _ in 0..steps {
                let before: Vec<Vec<u64>> = params.iter().map(bits).collect();
                if let Err(e) = opt.step() {
                    // A refused step changes nothing.
                    let after: Vec<Vec<u64>> = params.iter().map(bits).collect();
                    if before != after {
                        return Err(format!("a failed step ({e}) changed parameters"));
                    }
                }
            }
            opt.zero_grad();
            let _ = opt.step();
            Ok(())
        });
        let max_norm = z.float();
        let (grads, sg) = random_params(&mut z);
        z.call_named(&format!("clip_grad_norm_([{sg}], {max_norm:?})"), || {
            let _ = clip_grad_norm_(&grads, max_norm);
            Ok(())
        });
    }
    // Schedules at extreme steps.
    for it in 0..z.iterations(300) {
        z.iteration = it;
        let step = z.pick(&[
            0,
            1,
            2,
            7,
            usize::MAX,
            usize::MAX - 1,
            1 << 40,
            i32::MAX as usize,
        ]);
        let s = StepLr {
            step_size: z.pick(&[0, 1, 3, usize::MAX]),
            gamma: z.float(),
        };
        let c = CosineWithWarmup {
            warmup: z.pick(&[0, 1, 5, usize::MAX]),
            total: z.pick(&[0, 1, 10, usize::MAX]),
            min_factor: z.float(),
        };
        let base = z.float();
        z.call_named(
            &format!("{s:?}.factor({step}), apply(base {base:?})"),
            || {
                let _ = s.factor(step);
                let mut o = Sgd::new(Vec::new(), 0.1);
                s.apply(&mut o, base, step);
                Ok(())
            },
        );
        z.call_named(&format!("{c:?}.factor({step})"), || {
            let _ = c.factor(step);
            Ok(())
        });
    }
    // Initialisers on every dtype and degenerate shapes.
    let g = Generator::new(3);
    for it in 0..z.iterations(300) {
        z.iteration = it;
        let shape: Vec<usize> = if z.chance(0.2) {
            // Empty, with sizes whose products overflow.
            let mut s: Vec<usize> = (0..z.rng.random_range(1..4)).map(|_| z.size()).collect();
            s.insert(z.rng.random_range(0..=s.len()), 0);
            s
        } else {
            z.shape()
        };
        let dt = z.dtype();
        let t = Tensor::zeros(&shape[..], dt, CPU);
        let Ok(t) = t else { continue };
        let t = if z.chance(0.3) && dt.is_float() {
            t.requires_grad_(true).unwrap_or_else(|e| panic!("{e}"))
        } else {
            t
        };
        let (a, b, c) = (z.float(), z.float(), z.float());
        let (d, e) = (z.float(), z.float());
        let which = z.rng.random_range(0..11);
        let name = [
            "fans",
            "uniform_",
            "normal_",
            "constant_",
            "calculate_gain",
            "kaiming_uniform_",
            "kaiming_normal_",
            "xavier_uniform_",
            "xavier_normal_",
            "trunc_normal_",
            "calculate_gain(other)",
        ][which];
        z.call_named(
            &format!("init::{name}({dt}{shape:?}, {a:?}, {b:?}, {c:?}, {d:?}, {e:?})"),
            || {
                let _ = match which {
                    0 => init::fans(&t).map(|_| ()),
                    1 => init::uniform_(&t, a, b, &g),
                    2 => init::normal_(&t, a, b, &g),
                    3 => init::constant_(&t, a),
                    4 => init::calculate_gain("leaky_relu", a).map(|_| ()),
                    5 => init::kaiming_uniform_(&t, a, &g),
                    6 => init::kaiming_normal_(&t, a, &g),
                    7 => init::xavier_uniform_(&t, a, &g),
                    8 => init::xavier_normal_(&t, a, &g),
                    9 => init::trunc_normal_(&t, a, b, c, d, &g),
                    _ => init::calculate_gain("\u{0}é", e).map(|_| ()),
                };
                Ok(())
            },
        );
    }
    z.finish();
}

/// A short name of an optimiser for the failure messages.
struct OptName(usize, f64);

impl std::fmt::Debug for OptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = ["Sgd", "Adam", "AdamW", "RmsProp", "Adagrad"][self.0];
        write!(f, "{n}(lr {:?})", self.1)
    }
}

// ---------------------------------------------------------------------------------------------
// State dicts and safetensors.

fn small_model(g: &Generator) -> Sequential {
    Sequential::new()
        .add(Linear::new(3, 2, true, g, CPU).unwrap())
        .add(Relu)
        .add(LayerNorm::new(&[2], 1e-5, true, CPU).unwrap())
}

#[test]
fn state_dicts_and_safetensors() {
    let mut z = Fuzz::new("state_dicts", 4);
    let g = Generator::new(11);
    let model = small_model(&g);
    let good = model.state_dict();
    for it in 0..z.iterations(300) {
        z.iteration = it;
        let mut state: BTreeMap<String, Tensor> = good
            .iter()
            .map(|(k, v)| (k.clone(), v.deep_clone().unwrap()))
            .collect();
        let mut edits = Vec::new();
        for _ in 0..z.rng.random_range(0..3) {
            let keys: Vec<String> = state.keys().cloned().collect();
            match z.rng.random_range(0..5) {
                0 if !keys.is_empty() => {
                    let k = keys[z.rng.random_range(0..keys.len())].clone();
                    state.remove(&k);
                    edits.push(format!("removed {k}"));
                }
                1 => {
                    let k = z.pick(&["extra", "", "0.weight.x", "\u{0}", "0.weight "]);
                    let (t, s) = z.any_tensor();
                    if let Some(t) = t {
                        state.insert(k.to_string(), t);
                        edits.push(format!("added {k:?}={s}"));
                    }
                }
                2 if !keys.is_empty() => {
                    let k = keys[z.rng.random_range(0..keys.len())].clone();
                    let shape = z.shape();
                    let dt = state[&k].dtype();
                    let (t, s) = z.tensor(&shape, dt);
                    if let Some(t) = t {
                        state.insert(k.clone(), t);
                        edits.push(format!("reshaped {k}={s}"));
                    }
                }
                3 if !keys.is_empty() => {
                    let k = keys[z.rng.random_range(0..keys.len())].clone();
                    let shape = state[&k].shape().to_vec();
                    let dt = z.dtype();
                    let (t, s) = z.tensor(&shape, dt);
                    if let Some(t) = t {
                        state.insert(k.clone(), t);
                        edits.push(format!("retyped {k}={s}"));
                    }
                }
                _ if !keys.is_empty() => {
                    // A non-contiguous value of the right shape.
                    let k = keys[z.rng.random_range(0..keys.len())].clone();
                    let shape = state[&k].shape().to_vec();
                    if shape.len() == 2 {
                        let (t, s) = z.tensor(&[shape[1], shape[0]], DType::F32);
                        if let Some(t) = t.and_then(|t| t.transpose(0, 1).ok()) {
                            state.insert(k.clone(), t);
                            edits.push(format!("transposed {k}={s}"));
                        }
                    }
                }
                _ => {}
            }
        }
        let strict = z.chance(0.6);
        z.call_named(
            &format!("load_state_dict({edits:?}, strict {strict})"),
            || {
                let before = snapshot(&model);
                match model.load_state_dict(&state, strict) {
                    Ok(()) => {
                        // Every parameter now holds the given values (converted).
                        for (n, p) in model.named_parameters() {
                            let want = state[&n].to_dtype(p.dtype()).map_err(|e| e.to_string())?;
                            if bits(&p) != bits(&want) {
                                return Err(format!("{n} does not hold the loaded values"));
                            }
                        }
                    }
                    Err(_) => {
                        if snapshot(&model) != before {
                            return Err("a failed load changed the parameters".into());
                        }
                    }
                }
                Ok(())
            },
        );
        // Restore.
        model.load_state_dict(&good, true).unwrap();
    }

    // Safetensors: a valid file, then corrupted copies of it and hand-written headers.
    let valid = temp_path("valid", 0);
    model.save_safetensors(&valid).unwrap();
    let bytes = std::fs::read(&valid).unwrap();
    std::fs::remove_file(&valid).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for it in 0..z.iterations(250) {
        z.iteration = it;
        let mut b = bytes.clone();
        let mutation = match z.rng.random_range(0..8) {
            0 => {
                let n = z.rng.random_range(0..b.len());
                b.truncate(n);
                format!("truncated to {n}")
            }
            1 => {
                let v = z.pick(&[0u64, 1, 7, u64::MAX, 1 << 40, 100_000_001, b.len() as u64]);
                b[..8].copy_from_slice(&v.to_le_bytes());
                format!("header length {v}")
            }
            2 => {
                let mut shown = Vec::new();
                for _ in 0..z.rng.random_range(1..4) {
                    let i = z.rng.random_range(0..b.len());
                    let v: u8 = z.rng.random();
                    b[i] = v;
                    shown.push((i, v));
                }
                format!("bytes set {shown:?}")
            }
            3 => {
                let i = z.rng.random_range(8..8 + header_len);
                b[i] = z.pick(&[0xff, 0xc3, 0x80, 0]);
                format!("non-UTF-8 byte in the header at {i}")
            }
            4 => {
                let extra = z.rng.random_range(1..9);
                b.extend(std::iter::repeat_n(0u8, extra));
                format!("{extra} trailing bytes")
            }
            _ => {
                let (header, data) = random_header(&mut z);
                let mut out = (header.len() as u64).to_le_bytes().to_vec();
                out.extend_from_slice(header.as_bytes());
                out.extend(std::iter::repeat_n(0u8, data));
                b = out;
                format!("header {header} and {data} data bytes")
            }
        };
        let path = temp_path("bad", it);
        std::fs::write(&path, &b).unwrap();
        z.call_named(&format!("load_safetensors({mutation})"), || {
            let before = snapshot(&model);
            let r = model.load_safetensors(&path);
            if r.is_err() && snapshot(&model) != before {
                return Err("a failed load changed the parameters".into());
            }
            Ok(())
        });
        z.call_named(&format!("genesis::load_safetensors({mutation})"), || {
            let _ = genesis::load_safetensors(&path, CPU);
            Ok(())
        });
        z.call_named(
            &format!("genesis::deserialize_safetensors({mutation})"),
            || {
                let _ = genesis::deserialize_safetensors(&b, CPU);
                Ok(())
            },
        );
        let _ = std::fs::remove_file(&path);
        model.load_state_dict(&good, true).unwrap();
    }
    // Saving to paths that cannot be written.
    for bad in [
        std::path::PathBuf::from(""),
        std::path::PathBuf::from("/"),
        std::env::temp_dir(),
        std::path::PathBuf::from("/nonexistent-genesis-dir/x.safetensors"),
        std::path::PathBuf::from("/proc/self/nope"),
    ] {
        z.call_named(&format!("save_safetensors({})", bad.display()), || {
            if model.save_safetensors(&bad).is_ok() && bad.as_os_str().is_empty() {
                return Err("saved to an empty path".into());
            }
            Ok(())
        });
        z.call_named(&format!("load_safetensors({})", bad.display()), || {
            let _ = model.load_safetensors(&bad);
            Ok(())
        });
    }
    z.finish();
}

/// A hand-written safetensors header (JSON, sometimes invalid) and the data bytes to append.
fn random_header(z: &mut Fuzz) -> (String, usize) {
    let names = ["0.weight", "0.bias", "2.weight", "2.bias", "x", "0.weight"];
    let dtypes = [
        "F32", "F64", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "U16", "U32", "U64",
        "F8_E4M3", "C64", "f32", "", "F32\u{0}", "FLOAT",
    ];
    let mut entries = Vec::new();
    let mut data = 0usize;
    for _ in 0..z.rng.random_range(0..4) {
        let name = z.pick(&names);
        let dt = z.pick(&dtypes);
        let rank = z.rng.random_range(0..3);
        let shape: Vec<String> = (0..rank)
            .map(|_| {
                if z.chance(0.2) {
                    z.pick(&[
                        "18446744073709551615",
                        "9223372036854775807",
                        "4294967296",
                        "-1",
                        "1.5",
                        "null",
                    ])
                    .to_string()
                } else {
                    z.rng.random_range(0..4usize).to_string()
                }
            })
            .collect();
        let (a, b) = if z.chance(0.7) {
            let a = z.rng.random_range(0..32usize);
            (a, a + z.rng.random_range(0..32usize))
        } else {
            let a = z.pick(&[0usize, usize::MAX, 1 << 40, 5]);
            (a, z.pick(&[0usize, usize::MAX, 3, 1 << 63]))
        };
        data = data.max(b.min(64));
        entries.push(format!(
            "\"{name}\":{{\"dtype\":\"{dt}\",\"shape\":[{}],\"data_offsets\":[{a},{b}]}}",
            shape.join(",")
        ));
    }
    if z.chance(0.2) {
        entries.push("\"__metadata__\":{\"format\":\"pt\"}".into());
    }
    if z.chance(0.1) {
        entries.push("\"__metadata__\":{\"format\":1}".into());
    }
    let mut header = format!("{{{}}}", entries.join(","));
    if z.chance(0.1) {
        header.pop();
    }
    if z.chance(0.1) {
        header = z
            .pick(&["[]", "null", "\"x\"", "{\"a\":1}", ""])
            .to_string();
    }
    if z.chance(0.5) {
        data = z.rng.random_range(0..48);
    }
    (header, data)
}

// ---------------------------------------------------------------------------------------------
// GPT-2, the training helpers and the data set.

#[test]
fn gpt2_and_training_helpers() {
    let mut z = Fuzz::new("gpt2", 5);
    let g = Generator::new(5);
    let tiny = |z: &mut Fuzz| {
        if z.chance(0.15) {
            z.pick(&HUGE)
        } else {
            z.rng.random_range(0..5)
        }
    };
    for it in 0..z.iterations(120) {
        z.iteration = it;
        let cfg = Gpt2Config {
            block_size: tiny(&mut z),
            vocab_size: tiny(&mut z),
            n_layer: if z.chance(0.1) {
                z.pick(&HUGE)
            } else {
                z.rng.random_range(0..3)
            },
            n_head: tiny(&mut z),
            n_embd: if z.chance(0.15) {
                z.pick(&HUGE)
            } else {
                z.pick(&[0, 1, 2, 4, 6])
            },
        };
        let mut model = None;
        z.call_named(&format!("Gpt2::new({cfg:?})"), || {
            model = Gpt2::new(cfg, &g, CPU).ok();
            Ok(())
        });
        let Some(mut model) = model else { continue };
        model.recompute = z.chance(0.3);
        for _ in 0..3 {
            let shape = if z.chance(0.8) {
                vec![z.small(), z.rng.random_range(0..cfg.block_size.min(4) + 2)]
            } else {
                z.shape()
            };
            let dt = if z.chance(0.8) { DType::I64 } else { z.dtype() };
            let (idx, si) = z.tensor(&shape, dt);
            let tshape = if z.chance(0.8) {
                shape.clone()
            } else {
                z.shape()
            };
            let (tg, st) = z.tensor(&tshape, DType::I64);
            let (Some(idx), Some(tg)) = (idx, tg) else {
                continue;
            };
            let rc = model.recompute;
            z.call_named(
                &format!("Gpt2({cfg:?}, recompute {rc}).loss({si}, {st}).backward()"),
                || {
                    let _ = model.logits(&idx);
                    if let Ok(l) = model.loss(&idx, &tg) {
                        let _ = l.backward();
                    }
                    Ok(())
                },
            );
        }
        // The tied head.
        let mut state = model.state_dict();
        let edit = z.rng.random_range(0..3);
        match edit {
            0 => {
                let (t, _) = z.any_tensor();
                if let Some(t) = t {
                    state.insert("lm_head.weight".into(), t);
                }
            }
            1 => {
                state.remove("transformer.wte.weight");
            }
            _ => {}
        }
        let strict = z.chance(0.5);
        z.call_named(
            &format!("Gpt2({cfg:?}).load_state_dict(edit {edit}, strict {strict})"),
            || {
                let before = snapshot(&model);
                if model.load_state_dict(&state, strict).is_err() && snapshot(&model) != before {
                    return Err("a failed load changed the parameters".into());
                }
                Ok(())
            },
        );
        model.set_training(z.chance(0.5));
    }
    for it in 0..z.iterations(60) {
        z.iteration = it;
        let (c, h, l) = (z.size(), z.size(), z.size());
        z.call_named(&format!("Block::new({c}, {h}, {l})"), || {
            if let Ok(b) = Block::new(c, h, l, &g, CPU)
                && let Ok(x) = Tensor::zeros([1, 2, c], DType::F32, CPU)
            {
                let _ = b.forward(&x);
                let _ = b.named_parameters();
            }
            Ok(())
        });
        let name = z.pick(&["124m", "small", "tiny", "", "TINY", "tiny\u{0}", "gpt-5"]);
        z.call_named(&format!("Gpt2Config::named({name:?})"), || {
            let _ = Gpt2Config::named(name);
            Ok(())
        });
    }
    // The training helpers' arguments.
    let text: Vec<u8> = (0..64u8).collect();
    for it in 0..z.iterations(200) {
        z.iteration = it;
        let pool = [
            0usize,
            1,
            2,
            3,
            40,
            63,
            64,
            65,
            usize::MAX,
            usize::MAX / 2,
            1 << 40,
        ];
        let (step, b, t, stride) = (z.pick(&pool), z.pick(&pool), z.pick(&pool), z.pick(&pool));
        // Small enough for the host when the sizes are accepted: b * t elements at most 4096.
        let len = z.pick(&[0usize, 1, 2, 10, 64]);
        let text = &text[..len];
        let fits = b.checked_mul(t).is_some_and(|n| n <= 4096);
        z.call_named(
            &format!(
                "train::window_batch(text of {len}, step {step}, b {b}, t {t}, stride {stride})"
            ),
            || {
                if !fits && b.checked_mul(t).is_some_and(|n| n <= 1 << 28) {
                    // A request the host could grant: not made (the fuzzer stays small).
                    return Ok(());
                }
                let _ = genesis_nn::train::window_batch(text, step, b, t, stride, CPU);
                Ok(())
            },
        );
        z.call_named(&format!("train::gpt2_tiny_batch(step {step})"), || {
            let _ =
                genesis_nn::train::gpt2_tiny_batch(genesis_nn::train::gpt2_tiny_text(), step, CPU);
            Ok(())
        });
        let (images, labels) = (
            Tensor::zeros([1, 64], DType::F32, CPU).unwrap(),
            Tensor::zeros([1], DType::I64, CPU).unwrap(),
        );
        z.call_named(
            &format!("train::comparison_batch(1 image, step {step})"),
            || {
                let _ = genesis_nn::train::comparison_batch(&images, &labels, step);
                Ok(())
            },
        );
    }
    for dir in [
        "",
        "/nonexistent-genesis",
        "/proc/self/fd",
        "/dev/null",
        "\u{0}",
    ] {
        z.call_named(&format!("train::python_sources({dir:?})"), || {
            let _ = genesis_nn::train::python_sources(std::path::Path::new(dir));
            Ok(())
        });
    }
    z.call_named("datasets::digits()", || {
        let (x, y) = genesis_nn::datasets::digits().map_err(|e| e.to_string())?;
        if x.shape() != [1797, 64] || y.shape() != [1797] {
            return Err(format!("shapes {:?} {:?}", x.shape(), y.shape()));
        }
        Ok(())
    });
    z.finish();
}

// ---------------------------------------------------------------------------------------------
// Regressions: one test per fixed fault the fuzzer found, asserting the behaviour now.

fn is_invalid(r: &genesis::Result<impl std::fmt::Debug>, needle: &str) -> bool {
    matches!(r, Err(genesis::Error::InvalidArgument { reason, .. }) if reason.contains(needle))
}

/// `nll_loss` of a 0-d input indexed past its shape (`Vec::remove(1)` of a 0-d shape); now
/// PyTorch's error.
#[test]
fn nll_loss_of_a_0d_input_is_an_error() {
    let x = Tensor::from_slice(&[0.5f32], [0usize; 0], CPU).unwrap();
    let t = Tensor::from_slice(&[0i64], [0usize; 0], CPU).unwrap();
    let r = loss::nll_loss(&x, &t, Some(-100), Reduction::Mean);
    assert!(
        is_invalid(&r, "Expected 1 or more dimensions (got 0)"),
        "{r:?}"
    );
}

/// `Gpt2::new` of 2^62 empty blocks allocated block after block until memory ran out, and a
/// block of width 2^32 asked for 16 GiB layer norms before its `3 * c` overflowed: the sizes
/// are now counted first.
#[test]
fn gpt2_of_absurd_sizes_is_refused_before_allocating() {
    let g = Generator::new(0);
    let cfg = |n_layer, n_embd, vocab_size| Gpt2Config {
        block_size: 4,
        vocab_size,
        n_layer,
        n_head: 1,
        n_embd,
    };
    let start = std::time::Instant::now();
    let r = Gpt2::new(cfg(1 << 62, 0, 3), &g, CPU);
    assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
    let r = Gpt2::new(cfg(1, 1 << 32, 3), &g, CPU);
    assert!(is_invalid(&r, "the parameter count overflows"), "{r:?}");
    let r = Gpt2::new(cfg(1, 1 << 20, 3), &g, CPU);
    assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
    let r = Gpt2::new(cfg(1, 4, usize::MAX), &g, CPU);
    assert!(is_invalid(&r, "the parameter count overflows"), "{r:?}");
    let r = Block::new(1 << 32, 1, 1, &g, CPU);
    assert!(is_invalid(&r, "the parameter count overflows"), "{r:?}");
    let r = Block::new(1 << 20, 1, 1, &g, CPU);
    assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    // Sizes that fit are made as before.
    let m = Gpt2::new(cfg(2, 4, 5), &g, CPU).unwrap();
    assert_eq!(m.parameters().len(), 2 + 2 * 12 + 2);
}

/// A GPT-2 of width 0 split its `[B, T, 0]` projection into one piece (`split(0, ..)`), then
/// indexed the second: the three pieces are now cut by size.
#[test]
fn gpt2_of_width_0_gives_zero_logits() {
    let cfg = Gpt2Config {
        block_size: 4,
        vocab_size: 3,
        n_layer: 2,
        n_head: 2,
        n_embd: 0,
    };
    let m = Gpt2::new(cfg, &Generator::new(0), CPU).unwrap();
    let idx = Tensor::from_slice(&[0i64, 1, 2, 2, 1, 0], [2, 3], CPU).unwrap();
    let logits = m.logits(&idx).unwrap();
    assert_eq!(logits.shape(), &[2, 3, 3]);
    assert!(logits.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    let b = Block::new(0, 1, 1, &Generator::new(0), CPU).unwrap();
    let x = Tensor::zeros([1, 2, 0], DType::F32, CPU).unwrap();
    assert_eq!(b.forward(&x).unwrap().shape(), &[1, 2, 0]);
}

/// `window_batch` overflowed `t + 1`, `b * t` and `stride * (b * step + i)`, aborted reserving
/// `b * t` tokens, and walked 2^40 windows of no tokens: now exact, checked and refused.
#[test]
fn window_batches_at_extreme_arguments() {
    use genesis_nn::train::window_batch;
    let text: Vec<u8> = (0..64u8).collect();
    // The start of each window, the formula in exact arithmetic.
    let (step, b, t, stride) = (usize::MAX, 2usize, 3usize, usize::MAX - 4);
    let (x, y) = window_batch(&text, step, b, t, stride, CPU).unwrap();
    let span = (text.len() - t - 1) as u128;
    let mut want_x = Vec::new();
    let mut want_y = Vec::new();
    for i in 0..b {
        let k = (b as u128 * step as u128 + i as u128) % span;
        let start = (stride as u128 % span * k % span) as usize;
        want_x.extend(text[start..start + t].iter().map(|&c| i64::from(c)));
        want_y.extend(text[start + 1..start + t + 1].iter().map(|&c| i64::from(c)));
    }
    assert_eq!(x.to_vec::<i64>().unwrap(), want_x);
    assert_eq!(y.to_vec::<i64>().unwrap(), want_y);
    // The same windows as before wherever the product fits.
    let (x, _) = window_batch(&text, 3, 2, 4, 5, CPU).unwrap();
    assert_eq!(x.to_vec::<i64>().unwrap()[..4], [30, 31, 32, 33]);
    let r = window_batch(&text, 0, 1, usize::MAX, 1, CPU);
    assert!(is_invalid(&r, "bytes of text for windows of"), "{r:?}");
    let r = window_batch(&text, 0, usize::MAX, 3, 1, CPU);
    assert!(is_invalid(&r, "the count overflows"), "{r:?}");
    let r = window_batch(&text, 0, 1 << 62, 3, 1, CPU);
    assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
    let start = std::time::Instant::now();
    let (x, y) = window_batch(&text, 0, 1 << 40, 0, 1, CPU).unwrap();
    assert_eq!(
        (x.shape(), y.shape()),
        (&[1usize << 40, 0][..], &[1usize << 40, 0][..])
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

/// `comparison_batch` overflowed `64 * step`; `64 * step` modulo 1,728 is now computed
/// without it.
#[test]
fn comparison_batches_at_any_step() {
    let images = Tensor::zeros([1728, 64], DType::F32, CPU).unwrap();
    let labels = Tensor::arange(0.0, 1728.0, 1.0, DType::I64, CPU).unwrap();
    for step in [0usize, 26, 27, 1000, usize::MAX] {
        let (_, y) = genesis_nn::train::comparison_batch(&images, &labels, step).unwrap();
        let start = ((64u128 * step as u128) % 1728) as i64;
        assert_eq!(y.to_vec::<i64>().unwrap()[0], start, "step {step}");
    }
}

/// The training helpers reserved one loss a step up front (`Vec::with_capacity`): a capacity
/// overflow panic for `usize::MAX` steps and an allocation abort for 2^62. A run whose losses
/// the host cannot hold is now refused before it starts.
#[test]
fn training_runs_whose_losses_cannot_be_held_are_refused() {
    use genesis_nn::train;
    for steps in [usize::MAX, 1 << 62] {
        let r = train::comparison_losses(0, steps, CPU);
        assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
        let r = train::gpt2_tiny_losses(steps, CPU);
        assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
        let r = train::train_digits(CPU, steps, 0);
        assert!(matches!(r, Err(genesis::Error::OutOfMemory(_))), "{r:?}");
    }
}

/// `init::fans` multiplied sizes unchecked (an empty `[0, 2^40, 2^40]` overflowed); the
/// Kaiming initialisers now return a tensor of no elements unchanged first (PyTorch's no-op),
/// the Xavier ones too.
#[test]
fn fans_that_overflow_are_an_error_and_empty_tensors_are_left_alone() {
    let g = Generator::new(0);
    let t = Tensor::zeros([0usize, 1 << 40, 1 << 40], DType::F32, CPU).unwrap();
    assert!(is_invalid(&init::fans(&t), "overflow"));
    init::kaiming_uniform_(&t, 5f64.sqrt(), &g).unwrap();
    init::kaiming_normal_(&t, 0.0, &g).unwrap();
    init::xavier_uniform_(&t, 1.0, &g).unwrap();
    init::xavier_normal_(&t, 1.0, &g).unwrap();
    // PyTorch's Kaiming no-op comes before the rank check; Xavier's after it.
    let flat = Tensor::zeros([0], DType::F32, CPU).unwrap();
    init::kaiming_uniform_(&flat, 0.0, &g).unwrap();
    assert!(init::xavier_uniform_(&flat, 1.0, &g).is_err());
    assert_eq!(
        init::fans(&Tensor::zeros([3, 2, 4], DType::F32, CPU).unwrap()).unwrap(),
        (8, 12)
    );
    // A receptive field with a size 0 is 0 whatever its other sizes.
    let t = Tensor::zeros([3, 2, 1usize << 40, 1 << 40, 0], DType::F32, CPU).unwrap();
    assert_eq!(init::fans(&t).unwrap(), (0, 0));
}

/// Adam with an infinite learning rate (or weight decay, or epsilon), which PyTorch takes:
/// the fused kernel refused it after the parameters on the tensor-by-tensor path had been
/// updated, and every parameter's step count had advanced. Now every parameter takes the
/// tensor-by-tensor step (PyTorch's values), and a refused step changes nothing.
#[test]
fn adam_with_infinite_hyper_parameters_follows_pytorch() {
    let p = Tensor::from_slice(&[1.0f32, -1.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    p.set_grad(Some(Tensor::from_slice(&[1.0f32, -1.0], [2], CPU).unwrap()))
        .unwrap();
    // A transposed (non-contiguous) parameter takes the tensor-by-tensor path.
    let q = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], CPU)
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    q.set_grad(Some(q.detach().deep_clone().unwrap())).unwrap();
    let mut opt = Adam::new(vec![q.clone(), p.clone()], f64::INFINITY);
    opt.step().unwrap();
    assert_eq!(opt.steps(), 1);
    // lr / (1 - β1) * m / (√v / √(1 - β2) + eps) with m = (1 - β1) g: ∓∞.
    assert_eq!(
        p.to_vec::<f32>().unwrap(),
        [f32::NEG_INFINITY, f32::INFINITY]
    );
    let mut w = Adam::adamw(vec![p.clone()], 0.1);
    w.weight_decay = f64::INFINITY;
    w.step().unwrap();
    // A refused step (NaN rate) changes nothing and is not counted.
    let before = bits(&q);
    opt.lr = f64::NAN;
    assert!(opt.step().is_err());
    assert_eq!(opt.steps(), 1);
    assert_eq!(bits(&q), before);
}

/// `StepLr` cast its count of decays to `i32`: 2^32 decays wrapped to none (a factor of 1),
/// `usize::MAX` to -1 (`1 / gamma`). PyTorch's `gamma ** decays` now.
#[test]
fn step_lr_counts_every_decay() {
    let s = StepLr {
        step_size: 1,
        gamma: 0.5,
    };
    assert_eq!(s.factor(3), 0.125);
    assert_eq!(s.factor(1 << 32), 0.0);
    assert_eq!(s.factor(usize::MAX), 0.0);
    let grow = StepLr {
        step_size: 2,
        gamma: 2.0,
    };
    assert_eq!(grow.factor(usize::MAX), f64::INFINITY);
}

/// `Linear` with no inputs drew its bias in `±1` (the bound of one input); PyTorch's bound
/// for `fan_in == 0` is 0: a zero bias.
#[test]
fn a_linear_layer_of_no_inputs_has_a_zero_bias() {
    let l = Linear::new(0, 3, true, &Generator::new(1), CPU).unwrap();
    assert_eq!(l.weight.shape(), &[3, 0]);
    assert_eq!(l.bias.unwrap().to_vec::<f32>().unwrap(), [0.0; 3]);
    let x = Tensor::zeros([2, 0], DType::F32, CPU).unwrap();
    let y = Linear::new(0, 3, true, &Generator::new(1), CPU)
        .unwrap()
        .forward(&x)
        .unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [0.0; 6]);
}
