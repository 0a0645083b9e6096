//! The host matmul (`matmul_host`, and the CPU twin `matmul_strided_precision`) on generated
//! problems against references: f32, f16 and bf16 within the f32 accumulation bound of an f64
//! reference (and f16/bf16 into f32 outputs, and TF32 inputs), f64 within the f64 bound,
//! u8, i8, i16, i32 and i64 exactly (wrapping). Shapes include empty ones, `1 x n`, `n x 1`, long `k`,
//! transposed and padded operands, offsets and broadcast batches; outputs start as NaN (or a
//! sentinel) and past the product stay untouched.

use genesis_kernels::matmul::{
    HostMatmul, MatmulElement, MatmulLayout, MatmulOutput, MatmulPrecision, MatmulShape,
    MatrixLayout, matmul_host, matmul_strided, matmul_strided_precision, to_tf32,
};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn unit(x: i32) -> f64 {
    2f64.powi(-x)
}

/// One generated problem: its shape and layout, and where each element of `A` and `B` lies.
#[derive(Debug, Clone, Copy)]
struct Case {
    shape: MatmulShape,
    layout: MatmulLayout,
    offset: usize,
}

impl Case {
    fn a_len(&self) -> usize {
        self.offset + self.layout.a_len(&self.shape).unwrap()
    }
    fn b_len(&self) -> usize {
        self.offset + self.layout.b_len(&self.shape).unwrap()
    }
    fn c_len(&self) -> usize {
        self.shape.c_len().unwrap()
    }
    fn a_at(&self, bi: usize, i: usize, p: usize) -> usize {
        let l = self.layout.a;
        let e = if l.transposed {
            p * l.ld + i
        } else {
            i * l.ld + p
        };
        self.offset + bi * self.shape.a_batch_stride + e
    }
    fn b_at(&self, bi: usize, p: usize, j: usize) -> usize {
        let l = self.layout.b;
        let e = if l.transposed {
            j * l.ld + p
        } else {
            p * l.ld + j
        };
        self.offset + bi * self.shape.b_batch_stride + e
    }
}

fn dim(rng: &mut SmallRng) -> usize {
    const SIZES: [usize; 12] = [0, 1, 1, 2, 3, 5, 8, 16, 17, 33, 64, 97];
    SIZES[rng.random_range(0..SIZES.len())]
}

/// Problems of every kind: small random ones, then fixed edge cases (empty, vectors, a long
/// `k`, products large enough to run on several threads).
fn cases() -> Vec<Case> {
    let mut rng = SmallRng::seed_from_u64(50);
    let mut dims: Vec<(usize, usize, usize, usize)> = (0..60)
        .map(|_| {
            let batch = rng.random_range(0..4);
            (batch, dim(&mut rng), dim(&mut rng), dim(&mut rng))
        })
        .collect();
    dims.extend([
        (1, 0, 5, 7),
        (2, 5, 0, 7),
        (2, 5, 7, 0),
        (0, 5, 7, 3),
        (1, 1, 300, 41),
        (1, 300, 1, 41),
        (3, 1, 1, 513),
        (1, 2, 3, 2000),
        (1, 150, 130, 70),
        (2, 96, 64, 129),
    ]);
    dims.into_iter()
        .map(|(batch, m, n, k)| {
            let (ta, tb) = (rng.random_bool(0.5), rng.random_bool(0.5));
            let pad = rng.random_range(0..3);
            let a = MatrixLayout {
                transposed: ta,
                ld: if ta { m } else { k } + pad,
            };
            let b = MatrixLayout {
                transposed: tb,
                ld: if tb { k } else { n } + pad,
            };
            let broadcast = rng.random_range(0..3);
            let one_a = a.span(m, k).unwrap() + pad;
            let one_b = b.span(k, n).unwrap() + pad;
            Case {
                shape: MatmulShape {
                    batch,
                    m,
                    n,
                    k,
                    a_batch_stride: if broadcast == 1 { 0 } else { one_a },
                    b_batch_stride: if broadcast == 2 { 0 } else { one_b },
                },
                layout: MatmulLayout { a, b },
                offset: rng.random_range(0..3),
            }
        })
        .collect()
}

/// `C` in f64 from the operands' values as f64 (`value`), and the error scale `sum |a||b|`.
fn reference<T: Copy>(
    c: &Case,
    a: &[T],
    b: &[T],
    value: impl Fn(T) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let MatmulShape { batch, m, n, k, .. } = c.shape;
    let (mut want, mut scale) = (Vec::new(), Vec::new());
    for bi in 0..if c.c_len() == 0 { 0 } else { batch } {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0f64, 0f64);
                for p in 0..k {
                    let x = value(a[c.a_at(bi, i, p)]) * value(b[c.b_at(bi, p, j)]);
                    s += x;
                    t += x.abs();
                }
                want.push(s);
                scale.push(t);
            }
        }
    }
    (want, scale)
}

/// `got` against `want` within `accumulation * scale + eps * |want| + tiny`, and NaN past the
/// product.
fn check_float(got: &[f64], want: &[f64], scale: &[f64], bound: (f64, f64, f64), what: &str) {
    let (accumulation, eps, tiny) = bound;
    let (head, tail) = got.split_at(want.len());
    for (i, ((g, w), s)) in head.iter().zip(want).zip(scale).enumerate() {
        let tol = accumulation * s + eps * w.abs() + tiny;
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: {g} vs {w} (tolerance {tol})"
        );
    }
    assert!(
        tail.iter().all(|x| x.is_nan()),
        "{what}: wrote past the product"
    );
}

fn values<T: MatmulElement>(len: usize, rng: &mut SmallRng) -> Vec<T> {
    (0..len)
        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect()
}

/// The f32-accumulated products of `T` operands into `O`: `matmul_host` (when `O` is `T`) and
/// the twin at both precisions.
fn f32_family<T: MatmulElement, O: MatmulOutput<T>>(eps: f64, tiny: f64) {
    let mut rng = SmallRng::seed_from_u64(7);
    for (ci, c) in cases().into_iter().enumerate() {
        let a: Vec<T> = values(c.a_len(), &mut rng);
        let b: Vec<T> = values(c.b_len(), &mut rng);
        let what = format!("{} -> {} case {ci} {c:?}", T::NAME, O::NAME);
        let k = c.shape.k as f64;
        let (ao, bo) = (&a[c.offset..], &b[c.offset..]);
        let run = |precision| {
            let mut got = vec![O::from_f32(f32::NAN); c.c_len() + 3];
            matmul_strided_precision(c.shape, c.layout, precision, ao, bo, &mut got).unwrap();
            got.iter()
                .map(|x| f64::from(x.to_f32()))
                .collect::<Vec<_>>()
        };
        let (want, scale) = reference(&c, &a, &b, |x| f64::from(x.to_f32()));
        let bound = ((k + 2.0) * unit(24), eps, tiny);
        check_float(&run(MatmulPrecision::Highest), &want, &scale, bound, &what);
        // TF32: the twin truncates its inputs first, then the same bound.
        let (want, scale) = reference(&c, &a, &b, |x| f64::from(to_tf32(x.to_f32())));
        let tf32 = format!("{what} (TF32)");
        check_float(&run(MatmulPrecision::High), &want, &scale, bound, &tf32);
    }
}

#[test]
fn f32_f16_bf16_within_the_f32_accumulation_bound() {
    f32_family::<f32, f32>(5.97e-8, 1e-30);
    f32_family::<f16, f16>(4.89e-4, 2.99e-8);
    f32_family::<bf16, bf16>(3.91e-3, 1e-30);
    f32_family::<f16, f32>(5.97e-8, 1e-30);
    f32_family::<bf16, f32>(5.97e-8, 1e-30);
}

/// `matmul_host` of `T`, NaN-initialised, as f64.
fn host<T: HostMatmul>(c: &Case, a: &[T], b: &[T], init: T) -> Vec<T> {
    let mut got = vec![init; c.c_len() + 3];
    matmul_host(c.shape, c.layout, &a[c.offset..], &b[c.offset..], &mut got).unwrap();
    got
}

#[test]
fn host_f32_f16_bf16_are_the_twin() {
    let mut rng = SmallRng::seed_from_u64(8);
    for c in cases().into_iter().take(30) {
        let a: Vec<f16> = values(c.a_len(), &mut rng);
        let b: Vec<f16> = values(c.b_len(), &mut rng);
        let mut twin = vec![f16::NAN; c.c_len() + 3];
        let (ao, bo) = (&a[c.offset..], &b[c.offset..]);
        matmul_strided(c.shape, c.layout, ao, bo, &mut twin).unwrap();
        let got = host(&c, &a, &b, f16::NAN);
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            twin.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn f64_within_the_f64_accumulation_bound() {
    let mut rng = SmallRng::seed_from_u64(9);
    for (ci, c) in cases().into_iter().enumerate() {
        let a: Vec<f64> = (0..c.a_len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let b: Vec<f64> = (0..c.b_len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let got = host(&c, &a, &b, f64::NAN);
        let (want, scale) = reference(&c, &a, &b, |x| x);
        // The reference sums in f64 too: twice the bound of one f64 accumulation.
        let bound = (2.0 * (c.shape.k as f64 + 2.0) * unit(53), 0.0, 1e-300);
        check_float(&got, &want, &scale, bound, &format!("f64 case {ci} {c:?}"));
    }
}

macro_rules! int_test {
    ($name:ident, $t:ty, $small:expr) => {
        /// Exact and wrapping: full-range values, against the same sum in wrapping arithmetic.
        #[test]
        fn $name() {
            let mut rng = SmallRng::seed_from_u64(10);
            const SENTINEL: $t = 0x5a;
            for (ci, c) in cases().into_iter().enumerate() {
                // Small values in half the cases (sums that do not wrap), any value otherwise.
                let small = ci % 2 == 0;
                let mut gen_vals = |len: usize| -> Vec<$t> {
                    (0..len)
                        .map(|_| {
                            if small {
                                rng.random_range($small)
                            } else {
                                rng.random()
                            }
                        })
                        .collect()
                };
                let (a, b) = (gen_vals(c.a_len()), gen_vals(c.b_len()));
                let got = host(&c, &a, &b, SENTINEL);
                let MatmulShape { batch, m, n, k, .. } = c.shape;
                let mut want = Vec::new();
                for bi in 0..if c.c_len() == 0 { 0 } else { batch } {
                    for i in 0..m {
                        for j in 0..n {
                            let mut s: $t = 0;
                            for p in 0..k {
                                let x = a[c.a_at(bi, i, p)].wrapping_mul(b[c.b_at(bi, p, j)]);
                                s = s.wrapping_add(x);
                            }
                            want.push(s);
                        }
                    }
                }
                assert_eq!(&got[..want.len()], &want[..], "case {ci} {c:?}");
                assert_eq!(
                    &got[want.len()..],
                    &[SENTINEL; 3],
                    "case {ci}: past the product"
                );
            }
        }
    };
}
int_test!(u8_exact_and_wrapping, u8, 0..4);
int_test!(i8_exact_and_wrapping, i8, -3..3);
int_test!(i16_exact_and_wrapping, i16, -20..20);
int_test!(i32_exact_and_wrapping, i32, -100..100);
int_test!(i64_exact_and_wrapping, i64, -100..100);

#[test]
fn integer_overflow_wraps_as_pytorch() {
    let s = MatmulShape {
        batch: 1,
        m: 1,
        n: 1,
        k: 2,
        a_batch_stride: 0,
        b_batch_stride: 0,
    };
    let l = MatmulLayout::contiguous(&s);
    let mut c = [0i32];
    matmul_host(s, l, &[i32::MAX, 1], &[2, 3], &mut c).unwrap();
    assert_eq!(c, [1]); // 2 * (2^31 - 1) + 3 = 2^32 + 1
    let mut c = [0i64];
    matmul_host(s, l, &[i64::MIN, -1], &[-1, i64::MIN], &mut c).unwrap();
    assert_eq!(c, [0]); // 2^63 + 2^63 = 2^64
    let mut c = [0u8];
    matmul_host(s, l, &[200u8, 7], &[3, 9], &mut c).unwrap();
    assert_eq!(c, [151]); // 600 + 63 = 663 = 2 * 256 + 151
    let mut c = [0i8];
    matmul_host(s, l, &[-128i8, 127], &[-1, 127], &mut c).unwrap();
    assert_eq!(c, [-127]); // 128 + 16129 = 16257 = 63 * 256 + 129 = -127 (mod 256)
    let mut c = [0i16];
    matmul_host(s, l, &[300i16, 2], &[300, 1], &mut c).unwrap();
    assert_eq!(c, [24466]); // 90002 - 65536
}

#[test]
fn host_checks_are_the_twins() {
    let s = MatmulShape {
        batch: 2,
        m: 2,
        n: 2,
        k: 2,
        a_batch_stride: 4,
        b_batch_stride: 4,
    };
    let l = MatmulLayout::contiguous(&s);
    let (a, mut c) = ([1i64; 8], [0i64; 8]);
    assert!(matmul_host(s, l, &a[..7], &a, &mut c).is_err());
    assert!(matmul_host(s, l, &a, &a[..7], &mut c).is_err());
    assert!(matmul_host(s, l, &a, &a, &mut c[..7]).is_err());
    let huge = MatmulShape {
        m: usize::MAX,
        n: 2,
        ..s
    };
    assert!(matmul_host(huge, l, &a, &a, &mut c).is_err());
    matmul_host(s, l, &a, &a, &mut c).unwrap();
    assert_eq!(c, [2; 8]);
}

/// A batch of small products runs product by product on rayon's threads, a lone product over
/// every thread: the same bits either way (f32, f16 widened, f64), for products on both sides
/// of `gemm`'s threading threshold and broadcast operands.
#[test]
fn batched_products_are_the_bits_of_each_product_alone() {
    let mut rng = SmallRng::seed_from_u64(11);
    for (batch, m, n, k, broadcast) in [
        (4, 96, 80, 96, 0),
        (3, 130, 70, 70, 1),
        (5, 256, 256, 32, 2),
        (2, 17, 33, 5, 0),
    ] {
        let transposed = rng.random_bool(0.5);
        let la = MatrixLayout {
            transposed,
            ld: if transposed { m } else { k },
        };
        let lb = MatrixLayout {
            transposed: false,
            ld: n,
        };
        let (one_a, one_b) = (la.span(m, k).unwrap(), lb.span(k, n).unwrap());
        let shape = MatmulShape {
            batch,
            m,
            n,
            k,
            a_batch_stride: if broadcast == 1 { 0 } else { one_a },
            b_batch_stride: if broadcast == 2 { 0 } else { one_b },
        };
        let layout = MatmulLayout { a: la, b: lb };
        fn check<T: HostMatmul>(
            shape: MatmulShape,
            layout: MatmulLayout,
            a: &[T],
            b: &[T],
            bits: impl Fn(&T) -> u64,
        ) {
            let (m, n) = (shape.m, shape.n);
            let mut all = vec![T::default(); shape.batch * m * n];
            matmul_host(shape, layout, a, b, &mut all).unwrap();
            let one = MatmulShape { batch: 1, ..shape };
            for bi in 0..shape.batch {
                let mut c = vec![T::default(); m * n];
                let a = &a[bi * shape.a_batch_stride..];
                let b = &b[bi * shape.b_batch_stride..];
                matmul_host(one, layout, a, b, &mut c).unwrap();
                let got: Vec<u64> = all[bi * m * n..(bi + 1) * m * n]
                    .iter()
                    .map(&bits)
                    .collect();
                let want: Vec<u64> = c.iter().map(&bits).collect();
                assert!(got == want, "product {bi} of {shape:?}");
            }
        }
        let len_a = one_a + (batch - 1) * shape.a_batch_stride;
        let len_b = one_b + (batch - 1) * shape.b_batch_stride;
        let a: Vec<f32> = values(len_a, &mut rng);
        let b: Vec<f32> = values(len_b, &mut rng);
        check(shape, layout, &a, &b, |x| u64::from(x.to_bits()));
        let a: Vec<f16> = values(len_a, &mut rng);
        let b: Vec<f16> = values(len_b, &mut rng);
        check(shape, layout, &a, &b, |x| u64::from(x.to_bits()));
        let a: Vec<f64> = (0..len_a).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f64> = (0..len_b).map(|_| rng.random_range(-1.0..1.0)).collect();
        check(shape, layout, &a, &b, |x| x.to_bits());
    }
}
