//! Shape, selection and normalisation ops (`ops()`) and the creation ops (`makers()`), run on
//! the CPU and on CUDA on the same generated inputs: every dtype, random shapes (0-d, empty and edge sizes
//! included), random arguments. CUDA must give what the CPU gives (dtype, shape and values:
//! exactly for the ops that move or select elements, within the rounding of the dtype for the
//! ones that compute), or refuse it as the CPU does: a device never lacks an op or a dtype
//! the other has. Skips without a GPU.

mod common;

use common::{Release, f64_values as values};
use genesis::{DType, Device, Generator, Reduction, Tensor};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DTYPES: [DType; 10] = DType::ALL;

/// How a case's results are compared.
#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    /// Bit for bit (elements moved or selected, not computed).
    Exact,
    /// Within a few roundings of the result's dtype.
    Rounded,
}

/// An op: its name, how results compare, and the op on an input already on the device,
/// with the case's random generator for its arguments (drawn the same way on both devices:
/// each device gets a generator of the same seed).
type Op = (
    &'static str,
    Cmp,
    fn(&Tensor, &mut SmallRng) -> genesis::Result<Vec<Tensor>>,
);

fn shape(rng: &mut SmallRng, min_rank: usize) -> Vec<usize> {
    let rank = rng.random_range(min_rank..=3);
    (0..rank)
        .map(|_| match rng.random_range(0..8) {
            0 => 0,
            1 => 1,
            _ => rng.random_range(2..6),
        })
        .collect()
}

/// A tensor of `dtype` on the CPU with small values of both signs (integers in -6..6, bools
/// about half true, floats with a fraction), from `seed`.
fn input(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let mut rng = SmallRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.random_range(-24i32..24) as f64) / 4.0)
        .collect();
    let t = Tensor::from_slice(&v, shape.to_vec(), Device::Cpu).unwrap();
    match dtype {
        DType::Bool => t.gt(0.0).unwrap(),
        d if d.is_float() => t.to_dtype(d).unwrap(),
        d => t
            .mul(1.5)
            .unwrap()
            .to_dtype(DType::I64)
            .unwrap()
            .to_dtype(d)
            .unwrap(),
    }
}

fn dims_of(x: &Tensor, rng: &mut SmallRng) -> isize {
    let rank = x.dim().max(1) as i64;
    rng.random_range(-rank..rank) as isize
}

fn ops() -> Vec<Op> {
    vec![
        ("roll", Cmp::Exact, |x, rng| {
            let s = rng.random_range(-7i64..7) as isize;
            if x.dim() == 0 || rng.random_bool(0.3) {
                Ok(vec![x.roll(&[s], &[])?])
            } else {
                let d = dims_of(x, rng);
                Ok(vec![x.roll(&[s], &[d])?])
            }
        }),
        ("flip", Cmp::Exact, |x, rng| {
            let d = dims_of(x, rng) as i64;
            Ok(vec![x.flip(vec![d])?])
        }),
        ("tril", Cmp::Exact, |x, rng| {
            Ok(vec![x.tril(rng.random_range(-3..3))?])
        }),
        ("triu", Cmp::Exact, |x, rng| {
            Ok(vec![x.triu(rng.random_range(-3..3))?])
        }),
        ("repeat", Cmp::Exact, |x, rng| {
            let n = x.dim() + rng.random_range(0..2);
            let reps: Vec<i64> = (0..n).map(|_| rng.random_range(0..3)).collect();
            Ok(vec![x.repeat(reps)?])
        }),
        ("tile", Cmp::Exact, |x, rng| {
            let n = rng.random_range(0..=x.dim() + 1);
            let reps: Vec<i64> = (0..n).map(|_| rng.random_range(0..3)).collect();
            Ok(vec![x.tile(reps)?])
        }),
        ("diagonal", Cmp::Exact, |x, rng| {
            let off = rng.random_range(-2..3);
            Ok(vec![x.diagonal(off, 0, -1)?])
        }),
        ("nonzero", Cmp::Exact, |x, _| Ok(vec![x.nonzero()?])),
        ("masked_select", Cmp::Exact, |x, rng| {
            let m: Vec<bool> = (0..x.numel()).map(|_| rng.random_bool(0.5)).collect();
            let mask = Tensor::from_bools(&m, x.shape().to_vec(), Device::Cpu)?.to(x.device())?;
            Ok(vec![x.masked_select(&mask)?])
        }),
        ("unique", Cmp::Exact, |x, _| {
            let (u, inv, counts) = x.unique(true, true, true)?;
            Ok(vec![u, inv.unwrap(), counts.unwrap()])
        }),
        ("unique_consecutive", Cmp::Exact, |x, _| {
            let (u, inv, counts) = x.unique_consecutive(true, true)?;
            Ok(vec![u, inv.unwrap(), counts.unwrap()])
        }),
        ("one_hot", Cmp::Exact, |x, rng| {
            // Class indices: the input's absolute values (int64 inputs only, as PyTorch's).
            let classes = if rng.random_bool(0.5) {
                None
            } else {
                Some(rng.random_range(9..12))
            };
            let idx = if x.dtype().is_float() || x.dtype() == DType::Bool {
                x.clone()
            } else {
                x.abs()?
            };
            Ok(vec![idx.one_hot(classes)?])
        }),
        ("cross_entropy", Cmp::Rounded, |x, rng| {
            // `[N, C]` logits from the input's elements; targets in 0..C, some ignored.
            let n = x.numel();
            let c = if n == 0 {
                1
            } else {
                (1..=n).rev().find(|c| n % c == 0 && *c <= 7).unwrap()
            };
            let logits = x.reshape([(n / c) as i64, c as i64])?;
            let t: Vec<i64> = (0..n / c)
                .map(|_| {
                    if rng.random_bool(0.15) {
                        -100
                    } else {
                        rng.random_range(0..c as i64)
                    }
                })
                .collect();
            let target = Tensor::from_slice(&t, [t.len()], Device::Cpu)?.to(x.device())?;
            let reduction =
                [Reduction::Mean, Reduction::Sum, Reduction::None][rng.random_range(0..3)];
            Ok(vec![logits.cross_entropy(
                &target,
                Some(-100),
                reduction,
            )?])
        }),
        ("layer_norm", Cmp::Rounded, |x, rng| {
            let last = x.shape().last().copied().unwrap_or(1);
            let w = input(&[last], x.dtype(), rng.random()).to(x.device())?;
            let b = input(&[last], x.dtype(), rng.random()).to(x.device())?;
            let affine = rng.random_bool(0.7);
            let shape: Vec<usize> = x.shape().last().map(|&l| vec![l]).unwrap_or_default();
            Ok(vec![x.layer_norm(
                &shape,
                affine.then_some(&w),
                affine.then_some(&b),
                1e-5,
            )?])
        }),
        ("rms_norm", Cmp::Rounded, |x, rng| {
            let last = x.shape().last().copied().unwrap_or(1);
            let w = input(&[last], x.dtype(), rng.random()).to(x.device())?;
            let shape: Vec<usize> = x.shape().last().map(|&l| vec![l]).unwrap_or_default();
            Ok(vec![x.rms_norm(
                &shape,
                rng.random_bool(0.7).then_some(&w),
                1e-6,
            )?])
        }),
        ("cumsum", Cmp::Rounded, |x, rng| {
            let d = dims_of(x, rng);
            Ok(vec![x.cumsum(d)?])
        }),
        ("repeat_interleave", Cmp::Exact, |x, rng| {
            let dim = (x.dim() > 0 && rng.random_bool(0.7)).then(|| dims_of(x, rng));
            if rng.random_bool(0.5) {
                return Ok(vec![x.repeat_interleave(rng.random_range(0..4), dim)?]);
            }
            let n = dim.map_or(x.numel(), |d| {
                x.shape()[d.rem_euclid(x.dim() as isize) as usize]
            });
            let c: Vec<i64> = (0..n).map(|_| rng.random_range(0..4)).collect();
            let counts = Tensor::from_slice(&c, [n], Device::Cpu)?.to(x.device())?;
            Ok(vec![x.repeat_interleave_tensor(&counts, dim)?])
        }),
        ("einsum", Cmp::Rounded, |x, rng| {
            // One operand (sums, permutations, diagonals: every dtype on every device).
            let square = x.dim() == 2 && x.shape()[0] == x.shape()[1];
            let eq = match x.dim() {
                0 => "->",
                1 => ["i->", "i->i"][rng.random_range(0..2)],
                2 if square && rng.random_bool(0.5) => ["ii->i", "ii"][rng.random_range(0..2)],
                2 => ["ij->ji", "ij->j", "ij"][rng.random_range(0..3)],
                _ => ["ijk->kji", "ijk->j", "i...->..."][rng.random_range(0..3)],
            };
            Ok(vec![Tensor::einsum(eq, &[x])?])
        }),
        ("argsort", Cmp::Exact, |x, rng| {
            let d = dims_of(x, rng);
            Ok(vec![x.argsort(d, rng.random_bool(0.5))?])
        }),
    ]
}

/// Within a few roundings of `dtype` (the CPU twins and the kernels order sums differently).
fn close(a: f64, b: f64, dtype: DType) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    let eps = match dtype {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        DType::F32 => 1e-5,
        _ => 1e-12,
    };
    (a - b).abs() <= eps * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn cuda_computes_what_the_cpu_computes() {
    let _release = Release;
    let Some(&gpu) = common::devices().get(1) else {
        return;
    };
    let mut failures = Vec::new();
    let mut cases = 0;
    let mut both_refused = 0;
    let mut meta = SmallRng::seed_from_u64(2026);
    for (name, cmp, op) in ops() {
        for dtype in DTYPES {
            for _ in 0..6 {
                let shape = shape(&mut meta, 0);
                let (data_seed, arg_seed) = (meta.random::<u64>(), meta.random::<u64>());
                let x = input(&shape, dtype, data_seed);
                let cpu = op(&x, &mut SmallRng::seed_from_u64(arg_seed));
                let on_gpu = x
                    .to(gpu)
                    .and_then(|g| op(&g, &mut SmallRng::seed_from_u64(arg_seed)));
                cases += 1;
                let what = format!("{name} {dtype} {shape:?} (seeds {data_seed}, {arg_seed})");
                match (cpu, on_gpu) {
                    (Err(_), Err(_)) => both_refused += 1,
                    (Ok(_), Err(e)) => failures.push(format!("{what}: CUDA refuses: {e}")),
                    (Err(e), Ok(_)) => failures.push(format!("{what}: only the CPU refuses: {e}")),
                    (Ok(a), Ok(b)) => {
                        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
                            if a.dtype() != b.dtype() || a.shape() != b.shape() {
                                failures.push(format!(
                                    "{what}: result {i}: CPU {} {:?}, CUDA {} {:?}",
                                    a.dtype(),
                                    a.shape(),
                                    b.dtype(),
                                    b.shape()
                                ));
                                continue;
                            }
                            let (va, vb) = (values(a), values(b));
                            let bad = va.iter().zip(&vb).position(|(p, q)| match cmp {
                                Cmp::Exact => {
                                    p.to_bits() != q.to_bits() && !(p.is_nan() && q.is_nan())
                                }
                                Cmp::Rounded => !close(*p, *q, a.dtype()),
                            });
                            if let Some(k) = bad {
                                failures.push(format!(
                                    "{what}: result {i} element {k}: CPU {}, CUDA {}",
                                    va[k], vb[k]
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{cases} cases, {both_refused} refused on both devices");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A creation op on a device: its name and the op, given the dtype, a shape and an argument
/// generator.
type Make = (
    &'static str,
    fn(DType, &[usize], &mut SmallRng, Device) -> genesis::Result<Tensor>,
);

fn makers() -> Vec<Make> {
    vec![
        ("zeros", |d, s, _, dev| Tensor::zeros(s.to_vec(), d, dev)),
        ("ones", |d, s, _, dev| Tensor::ones(s.to_vec(), d, dev)),
        ("full", |d, s, rng, dev| {
            Tensor::full(s.to_vec(), rng.random_range(-3i64..4), dev)?.to_dtype(d)
        }),
        ("eye", |d, s, _, dev| {
            Tensor::eye(s.first().copied().unwrap_or(0), s.get(1).copied(), d, dev)
        }),
        ("arange", |d, s, rng, dev| {
            let start = rng.random_range(-5i64..5) as f64 * 0.75;
            let n = s.iter().product::<usize>() as f64;
            Tensor::arange(start, start + n * 0.5, 0.5, d, dev)
        }),
        ("linspace", |d, s, rng, dev| {
            let start = rng.random_range(-5i64..5) as f64;
            Tensor::linspace(start, start + 7.0, s.iter().product(), d, dev)
        }),
        // The generator is counter-based: the same seed gives the same bits on every device.
        ("rand", |d, s, rng, dev| {
            Generator::new(rng.random()).rand(s.to_vec(), d, dev)
        }),
        ("randn", |d, s, rng, dev| {
            Generator::new(rng.random()).randn(s.to_vec(), d, dev)
        }),
        ("randint", |d, s, rng, dev| {
            let low = rng.random_range(-4i64..2);
            let high = low + rng.random_range(1i64..9);
            Generator::new(rng.random()).randint(low, high, s.to_vec(), d, dev)
        }),
    ]
}

/// Creation ops give the same tensors (bit for bit) on the CPU and on CUDA for every dtype,
/// or both refuse.
#[test]
fn cuda_creates_what_the_cpu_creates() {
    let _release = Release;
    let Some(&gpu) = common::devices().get(1) else {
        return;
    };
    let mut failures = Vec::new();
    let mut meta = SmallRng::seed_from_u64(7);
    let mut cases = 0;
    for (name, make) in makers() {
        for dtype in DTYPES {
            for _ in 0..4 {
                let shape = shape(&mut meta, 0);
                let seed = meta.random::<u64>();
                let cpu = make(
                    dtype,
                    &shape,
                    &mut SmallRng::seed_from_u64(seed),
                    Device::Cpu,
                );
                let on_gpu = make(dtype, &shape, &mut SmallRng::seed_from_u64(seed), gpu);
                cases += 1;
                let what = format!("{name} {dtype} {shape:?} (seed {seed})");
                match (cpu, on_gpu) {
                    (Err(_), Err(_)) => {}
                    (Ok(_), Err(e)) => failures.push(format!("{what}: CUDA refuses: {e}")),
                    (Err(e), Ok(_)) => failures.push(format!("{what}: only the CPU refuses: {e}")),
                    (Ok(a), Ok(b)) => {
                        let same_kind = a.dtype() == b.dtype() && a.shape() == b.shape();
                        let (va, vb) = (values(&a), values(&b));
                        let same = va.len() == vb.len()
                            && va.iter().zip(&vb).all(|(p, q)| p.to_bits() == q.to_bits());
                        if !same_kind || !same {
                            failures.push(format!(
                                "{what}: CPU {} {:?}, CUDA {} {:?}, values equal: {same}",
                                a.dtype(),
                                a.shape(),
                                b.dtype(),
                                b.shape()
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
