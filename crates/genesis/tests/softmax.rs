//! `softmax`, `log_softmax` and `logsumexp` against f64 references computed here, on the CPU
//! and (when present) CUDA device 0, whose results are also compared with the CPU's: random
//! data (seeded `rand`) of every floating dtype over 0-d, empty, size-1, odd, transposed and
//! sliced shapes along every dimension (negative too), lines of -inf, NaN and +inf, magnitudes
//! (1e4) where a naive `exp` overflows, and lines long enough (1,000 to 100,000 elements) for
//! every kernel path (warp, shared-memory block, long rows, chunked rows, columns).

use genesis::{DType, Device, Tensor};
use rand::rngs::SmallRng as StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Release, devices};

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Softmax,
    LogSoftmax,
    LogSumExp,
}
const OPS: [Op; 3] = [Op::Softmax, Op::LogSoftmax, Op::LogSumExp];

/// A tensor of `dtype` holding `vals` (rounded to the dtype) on `dev`, and the values it holds.
fn tensor(vals: &[f64], shape: &[usize], dtype: DType, dev: Device) -> (Tensor, Vec<f64>) {
    let t = Tensor::from_slice(vals, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let held = f64s(&t);
    (t.to(dev).unwrap(), held)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn random(rng: &mut StdRng, n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (rng.random::<f64>() - 0.5) * scale)
        .collect()
}

/// Unit roundoff of the computation (f32, f64 for f64).
fn acc_eps(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    }
}

/// Half an ulp of the result type, relative.
fn out_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 2f64.powi(-53),
        DType::F32 => 2f64.powi(-24),
        DType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

/// The smallest normal number of the result type (below it, results are subnormal or 0).
fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F16 => 2f64.powi(-14),
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

/// The larger, NaN when either is NaN.
fn nanmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// A line's statistics: its max and the sum of exp(x - max) (0 when the max is not finite).
fn stats(line: &[f64]) -> (f64, f64) {
    let m = line.iter().fold(f64::NEG_INFINITY, |a, &b| nanmax(a, b));
    let s = if m.is_finite() {
        line.iter().map(|&x| (x - m).exp()).sum()
    } else {
        0.0
    };
    (m, s)
}

/// Whether `got` is `want` within `tol` (NaN and infinities exactly).
fn close(got: f64, want: f64, tol: f64) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else if want.is_infinite() {
        got == want
    } else {
        (got - want).abs() <= tol
    }
}

/// The expected values and tolerances of `op` over a line `line` (the line's outputs for
/// softmax and log_softmax, its one value for logsumexp).
fn expect(op: Op, line: &[f64], dtype: DType) -> Vec<(f64, f64)> {
    let (m, s) = stats(line);
    let n = line.len() as f64;
    let (a, o) = (acc_eps(dtype), out_eps(dtype));
    let base = 16.0 + 4.0 * n.sqrt();
    let ls = s.ln();
    match op {
        Op::LogSumExp => {
            let want = if m.is_finite() { m + ls } else { m };
            let tol = a * (base + m.abs() + ls.abs()) + o * want.abs();
            vec![(want, tol)]
        }
        _ if !m.is_finite() => vec![(f64::NAN, 0.0); line.len()],
        Op::Softmax => line
            .iter()
            .map(|&x| {
                let want = (x - m).exp() / s;
                let rel = if want == 0.0 {
                    0.0
                } else {
                    (a * (base + (x - m).abs()) + o) * want
                };
                (want, rel + tiny(dtype))
            })
            .collect(),
        Op::LogSoftmax => line
            .iter()
            .map(|&x| {
                let want = (x - m) - ls;
                (want, a * (base + (x - m).abs() + ls.abs()) + o * want.abs())
            })
            .collect(),
    }
}

fn run(op: Op, t: &Tensor, dim: isize) -> Tensor {
    match op {
        Op::Softmax => t.softmax(dim).unwrap(),
        Op::LogSoftmax => t.log_softmax(dim).unwrap(),
        Op::LogSumExp => t.logsumexp(dim, false).unwrap(),
    }
}

/// Checks `op` of `x` (row-major values of `shape`) along `dim` against the reference, and
/// returns the result's values.
fn check_along(
    op: Op,
    got: &Tensor,
    x: &[f64],
    shape: &[usize],
    dim: isize,
    dtype: DType,
    what: &str,
) -> Vec<f64> {
    let rank = shape.len();
    let d = if rank == 0 {
        None
    } else {
        Some(dim.rem_euclid(rank as isize) as usize)
    };
    let (outer, n, inner) = match d {
        None => (1, 1, 1),
        Some(d) => (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        ),
    };
    let want_shape: Vec<usize> = match (op, d) {
        (Op::LogSumExp, Some(d)) => [&shape[..d], &shape[d + 1..]].concat(),
        _ => shape.to_vec(),
    };
    assert_eq!(got.shape(), &want_shape[..], "{what}: shape");
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    let g = f64s(got);
    let mut bad = Vec::new();
    for o in 0..outer {
        for c in 0..inner {
            let line: Vec<f64> = (0..n).map(|k| x[(o * n + k) * inner + c]).collect();
            let at = |k: usize| match op {
                Op::LogSumExp => o * inner + c,
                _ => (o * n + k) * inner + c,
            };
            for (k, (want, tol)) in expect(op, &line, dtype).into_iter().enumerate() {
                let v = g[at(k)];
                if !close(v, want, tol) && bad.len() < 5 {
                    bad.push(format!(
                        "[{o}, {k}, {c}]: got {v:e}, want {want:e} (tol {tol:e})"
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{what}:\n{}", bad.join("\n"));
    g
}

/// CUDA's values against the CPU's: within 1% relative or two float16 subnormal steps.
fn same_across_devices(cpu: &[f64], gpu: &[f64], what: &str) {
    assert_eq!(cpu.len(), gpu.len(), "{what}");
    for (i, (&c, &g)) in cpu.iter().zip(gpu).enumerate() {
        let ok = if c.is_nan() {
            g.is_nan()
        } else if c.is_infinite() {
            g == c
        } else {
            // Two float16 subnormal steps absolute: exp underflows there, and one rounding
            // step of the f32 value is 2% of a result near 3e-6.
            (g - c).abs() <= 1e-2 * c.abs() + 1.2e-7 || g == c
        };
        assert!(ok, "{what}: CUDA {g:e} vs CPU {c:e} at {i}");
    }
}

/// The tensors a case runs on: the tensor itself, its transpose (rank >= 2) and a slice of
/// its last dimension (when it has at least 3), each with its values in row-major order.
fn views(t: &Tensor, held: &[f64]) -> Vec<(Tensor, Vec<f64>, &'static str)> {
    let mut v = vec![(t.clone(), held.to_vec(), "contiguous")];
    if t.dim() >= 2 {
        let tt = t.transpose(0, -1).unwrap();
        let values = f64s(&tt);
        v.push((tt, values, "transposed"));
    }
    if t.dim() >= 1 && t.shape()[t.dim() - 1] >= 3 {
        let last = t.shape()[t.dim() - 1];
        let s = t.narrow(-1, 1, last - 2).unwrap();
        let values = f64s(&s);
        v.push((s, values, "sliced"));
    }
    v
}

/// Every op along every dimension (and its negative) of each view of random data, on every
/// device, against the reference; CUDA against the CPU. `large` shapes run on the tensor itself
/// along its last and first dimensions only.
fn sweep(shapes: &[&[usize]], dtypes: &[DType], scale: f64, seed: u64, large: bool) {
    let _release = Release;
    let mut rng = StdRng::seed_from_u64(seed);
    for &shape in shapes {
        let n: usize = shape.iter().product();
        let vals = random(&mut rng, n, scale);
        for &dtype in dtypes {
            let mut cpu: Vec<Vec<f64>> = Vec::new();
            for dev in devices() {
                let (t, held) = tensor(&vals, shape, dtype, dev);
                let mut case = 0;
                let cases = if large {
                    vec![(t.clone(), held, "contiguous")]
                } else {
                    views(&t, &held)
                };
                for (view, x, kind) in cases {
                    let rank = view.dim() as isize;
                    let dims: Vec<isize> = if rank == 0 {
                        vec![0, -1]
                    } else if large {
                        vec![-1, 0]
                    } else {
                        (-rank..rank).collect()
                    };
                    for dim in dims {
                        for op in OPS {
                            let what = format!(
                                "{op:?} {dtype} {kind} {:?} dim {dim} on {dev}",
                                view.shape()
                            );
                            let got = run(op, &view, dim);
                            let g = check_along(op, &got, &x, view.shape(), dim, dtype, &what);
                            if dev == Device::Cpu {
                                cpu.push(g);
                            } else {
                                same_across_devices(&cpu[case], &g, &what);
                            }
                            case += 1;
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn small_shapes_every_dim_dtype_and_view() {
    let shapes: &[&[usize]] = &[
        &[],
        &[0],
        &[1],
        &[7],
        &[1, 1],
        &[4, 5],
        &[3, 0, 2],
        &[2, 3, 4],
        &[5, 1, 6],
        &[2, 1, 3, 33],
    ];
    sweep(shapes, &FLOATS, 8.0, 1, false);
}

#[test]
fn large_magnitudes_do_not_overflow() {
    // Values up to 1e4 in magnitude: exp(1e4) overflows every float type.
    sweep(&[&[6, 5], &[3, 40]], &FLOATS, 2e4, 2, false);
    let _release = Release;
    for dev in devices() {
        for dtype in FLOATS {
            let (t, _) = tensor(&[1e4, 1e4, -1e4], &[3], dtype, dev);
            let p = f64s(&t.softmax(0).unwrap());
            assert_eq!(p, [0.5, 0.5, 0.0], "{dtype} on {dev}");
            let l = f64s(&t.logsumexp(0, false).unwrap())[0];
            assert!(
                (l - (1e4 + 2f64.ln())).abs() <= 1e4 * out_eps(dtype) * 2.0,
                "{dtype}: {l}"
            );
        }
    }
}

#[test]
fn lines_of_every_kernel_path() {
    // Rows of up to 1024 (a warp), 10,000 (a block, the row in shared memory), 100,000 (few
    // long rows: chunks), and columns (along dim 0) with long and short lines.
    sweep(&[&[33, 1000], &[2, 10_000]], &FLOATS, 8.0, 3, true);
    sweep(&[&[2, 100_000]], &[DType::F32, DType::BF16], 8.0, 4, true);
    sweep(&[&[20_000, 3]], &[DType::F32, DType::F16], 8.0, 5, true);
    // Many long rows (a block a row, two passes) and very long rows of f64.
    sweep(&[&[300, 30_000]], &[DType::F32], 8.0, 6, true);
    sweep(&[&[3, 70_000]], &[DType::F64], 8.0, 7, true);
    // A few rows of 1,000 and 10,000 transposed and sliced.
    sweep(&[&[5, 1000], &[3, 10_000]], &[DType::F32], 8.0, 9, false);
}

#[test]
fn special_values_follow_pytorch() {
    let _release = Release;
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    // Lines: all -inf; -inf among finite values; a NaN; a +inf; two +inf; +inf and -inf; a
    // single -inf; large values.
    let rows: [[f64; 4]; 8] = [
        [-inf, -inf, -inf, -inf],
        [-inf, 1.0, -inf, 2.0],
        [1.0, nan, 2.0, 3.0],
        [1.0, inf, 2.0, 3.0],
        [inf, inf, 2.0, 3.0],
        [inf, -inf, -inf, -inf],
        [-inf, 0.5, 0.25, 0.0],
        [1e4, 1e4, -1e4, 0.0],
    ];
    let vals: Vec<f64> = rows.iter().flatten().copied().collect();
    for dtype in FLOATS {
        let mut cpu = Vec::new();
        for dev in devices() {
            let (t, held) = tensor(&vals, &[8, 4], dtype, dev);
            let mut case = 0;
            for (view, x, kind) in views(&t, &held) {
                for dim in [-1isize, 0] {
                    for op in OPS {
                        let what = format!("{op:?} {dtype} {kind} dim {dim} on {dev}");
                        let got = run(op, &view, dim);
                        let g = check_along(op, &got, &x, view.shape(), dim, dtype, &what);
                        if dev == Device::Cpu {
                            cpu.push(g);
                        } else {
                            same_across_devices(&cpu[case], &g, &what);
                        }
                        case += 1;
                    }
                }
            }
        }
    }
    for dev in devices() {
        let (t, _) = tensor(&vals, &[8, 4], DType::F32, dev);
        let lse = f64s(&t.logsumexp(1, false).unwrap());
        assert_eq!(lse[0], -inf, "a line of -inf: -inf");
        assert!(lse[2].is_nan(), "NaN propagates");
        assert_eq!((lse[3], lse[4], lse[5]), (inf, inf, inf), "+inf: +inf");
        let p = f64s(&t.softmax(1).unwrap());
        assert!(p[..4].iter().all(|v| v.is_nan()), "softmax of -inf: NaN");
        assert!(
            p[12..20].iter().all(|v| v.is_nan()),
            "softmax with +inf: NaN"
        );
        assert_eq!(p[24], 0.0, "exp(-inf) = 0");
        let l = f64s(&t.log_softmax(1).unwrap());
        assert_eq!(l[24], -inf);
    }
}

#[test]
fn zero_d_and_empty() {
    let _release = Release;
    for dev in devices() {
        for dtype in FLOATS {
            let x = Tensor::from_slice(&[3.5f64], &[] as &[usize], dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            for dim in [0isize, -1] {
                assert_eq!(f64s(&x.softmax(dim).unwrap()), [1.0]);
                assert_eq!(f64s(&x.log_softmax(dim).unwrap()), [0.0]);
                let l = x.logsumexp(dim, false).unwrap();
                assert_eq!((l.shape().len(), f64s(&l)), (0, vec![3.5]));
                let k = x.logsumexp(dim, true).unwrap();
                assert_eq!(k.shape().len(), 0, "a 0-d tensor stays 0-d");
            }
            // Empty tensors: softmax is empty; logsumexp over an empty dimension is -inf.
            let e = Tensor::zeros([3usize, 0], dtype, dev).unwrap();
            assert_eq!(e.softmax(1).unwrap().shape(), &[3, 0]);
            assert_eq!(e.log_softmax(0).unwrap().shape(), &[3, 0]);
            let l = e.logsumexp(1, false).unwrap();
            assert_eq!(f64s(&l), [f64::NEG_INFINITY; 3]);
            assert_eq!(e.logsumexp(0, true).unwrap().shape(), &[1, 0]);
            assert_eq!(f64s(&e.logsumexp((), false).unwrap()), [f64::NEG_INFINITY]);
        }
    }
}

#[test]
fn logsumexp_over_several_dims() {
    let _release = Release;
    let mut rng = StdRng::seed_from_u64(8);
    let shape = [3usize, 4, 5];
    let vals = random(&mut rng, 60, 8.0);
    for dev in devices() {
        for dtype in FLOATS {
            let (t, x) = tensor(&vals, &shape, dtype, dev);
            for (dims, keepdim) in [
                (vec![0isize, 2], false),
                (vec![2, 0], true),
                (vec![-1, -2], false),
                (vec![0, 1, 2], true),
                (vec![], false),
                (vec![], true),
                (vec![1], true),
            ] {
                let got = t.logsumexp(&dims, keepdim).unwrap();
                let wrapped: Vec<usize> = if dims.is_empty() {
                    vec![0, 1, 2]
                } else {
                    dims.iter().map(|&d| d.rem_euclid(3) as usize).collect()
                };
                let want_shape: Vec<usize> = (0..3)
                    .filter_map(|i| match (wrapped.contains(&i), keepdim) {
                        (false, _) => Some(shape[i]),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect();
                assert_eq!(got.shape(), &want_shape[..], "{dims:?}");
                // The reference: group the elements by their kept coordinates.
                let kept: Vec<usize> = (0..3).filter(|i| !wrapped.contains(i)).collect();
                let n_out: usize = kept.iter().map(|&i| shape[i]).product();
                let mut groups = vec![Vec::new(); n_out];
                for (flat, &v) in x.iter().enumerate() {
                    let coord = [flat / 20, (flat / 5) % 4, flat % 5];
                    let o = kept.iter().fold(0, |o, &k| o * shape[k] + coord[k]);
                    groups[o].push(v);
                }
                let g = f64s(&got);
                for (o, group) in groups.iter().enumerate() {
                    let (want, tol) = expect(Op::LogSumExp, group, dtype)[0];
                    assert!(
                        close(g[o], want, tol),
                        "{dims:?} {dtype} on {dev}: {} vs {want}",
                        g[o]
                    );
                }
            }
        }
        // Integers and bools give float32.
        let i = Tensor::from_slice(&[1i64, 2, 3, 4], [2, 2], dev).unwrap();
        let l = i.logsumexp(1, false).unwrap();
        assert_eq!(l.dtype(), DType::F32);
        let want = [
            (1f32.exp() + 2f32.exp()).ln(),
            (3f32.exp() + 4f32.exp()).ln(),
        ];
        for (g, w) in l.to_vec::<f32>().unwrap().iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        let b = Tensor::from_bools(&[true, false], [2], dev).unwrap();
        let l = b.logsumexp(0, false).unwrap();
        assert_eq!(l.dtype(), DType::F32);
        assert!((l.to_vec::<f32>().unwrap()[0] - (1f32.exp() + 1.0).ln()).abs() < 1e-6);
    }
}

#[test]
fn results_are_new_contiguous_tensors() {
    let _release = Release;
    for dev in devices() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dev).unwrap();
        let y = x.t().unwrap().softmax(0).unwrap();
        assert!(y.is_contiguous());
        assert_eq!(y.shape(), &[3, 2]);
        // Softmax along the rows of x: the same numbers (within rounding: the GPU takes
        // another path for each).
        let z = x.softmax(1).unwrap().t().unwrap().contiguous().unwrap();
        for (a, b) in y
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(z.to_vec::<f32>().unwrap())
        {
            assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b}");
        }
        // x itself is unchanged.
        assert_eq!(x.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
}
