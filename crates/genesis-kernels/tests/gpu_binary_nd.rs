//! The `_nd` binary kernels (operands read through strides, broadcast dimensions, scalar
//! operands) against their CPU twin, for every op and elementwise dtype, on layouts that take
//! the vector path, the per-element path and the batch of small operations.
#![cfg(feature = "cuda")]

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::{BinaryNd, BinaryOp, CompareOp, Rhs, WhereNd, gpu, nd};
use half::{bf16, f16};
use rand::SeedableRng;
use rand::rngs::SmallRng;

mod common;
use common::{Random, bytes_of, from_bytes};

/// One case: the output shape, `a`'s strides and offset, `b`'s (or a scalar), and the lengths
/// of the buffers they are read from.
struct Case {
    shape: Vec<usize>,
    a: (Vec<isize>, usize, usize),
    b: Option<(Vec<isize>, usize, usize)>,
}

fn cases() -> Vec<Case> {
    let c =
        |shape: &[usize], a: (&[isize], usize, usize), b: Option<(&[isize], usize, usize)>| Case {
            shape: shape.to_vec(),
            a: (a.0.to_vec(), a.1, a.2),
            b: b.map(|(s, o, l)| (s.to_vec(), o, l)),
        };
    vec![
        // Row broadcast (the bias add), vector path for every dtype.
        c(
            &[512, 256],
            (&[256, 1], 0, 512 * 256),
            Some((&[0, 1], 0, 256)),
        ),
        // Row broadcast with rows that are not whole 16-byte groups.
        c(&[300, 7], (&[7, 1], 0, 2100), Some((&[0, 1], 0, 7))),
        // Column broadcast: [r, c] + [r, 1].
        c(&[333, 64], (&[64, 1], 0, 333 * 64), Some((&[1, 0], 0, 333))),
        // Broadcast on the left: [c] + [r, c].
        c(&[64, 96], (&[0, 1], 0, 96), Some((&[96, 1], 0, 64 * 96))),
        // A transposed operand and a misaligned offset.
        c(&[40, 50], (&[1, 40], 3, 2003), Some((&[50, 1], 1, 2001))),
        // Three dimensions, middle broadcast.
        c(
            &[6, 5, 32],
            (&[160, 32, 1], 0, 960),
            Some((&[32, 0, 1], 0, 192)),
        ),
        // Scalars: contiguous large (vector path), small (the batch), strided, misaligned.
        c(&[1 << 20], (&[1], 0, 1 << 20), None),
        c(&[100], (&[1], 0, 100), None),
        c(&[64, 33], (&[1, 64], 0, 64 * 33), None),
        c(&[999], (&[1], 1, 1000), None),
        // Two contiguous tensors (where's vector path for both values, with a tail), and
        // offsets that leave the first value's quads unaligned (where's element path).
        c(
            &[(1 << 20) + 3],
            (&[1], 0, (1 << 20) + 3),
            Some((&[1], 0, (1 << 20) + 3)),
        ),
        c(&[1000], (&[1], 4, 1004), Some((&[1], 2, 1002))),
        // Empty and single elements.
        c(&[0, 4], (&[4, 1], 0, 0), Some((&[0, 1], 0, 4))),
        c(&[], (&[], 5, 6), Some((&[], 2, 3))),
    ]
}

fn check<T: Random>(ctx: &std::sync::Arc<Context>, rng: &mut SmallRng) {
    let s = Stream::new(ctx).unwrap();
    for case in cases() {
        for op in BinaryOp::ALL {
            if T::binary_kernel(op).is_none() {
                continue;
            }
            let desc = BinaryNd::new(
                &case.shape,
                &case.a.0,
                case.a.1,
                case.b.as_ref().map(|(st, o, _)| (&st[..], *o)),
            )
            .unwrap();
            let n = desc.numel();
            let a: Vec<T> = (0..case.a.2).map(|_| T::random(rng)).collect();
            let b: Vec<T> = (0..case.b.as_ref().map_or(0, |b| b.2))
                .map(|_| T::random(rng))
                .collect();
            let scalar = T::random(rng);
            let mut want = vec![T::default(); n];
            let host_rhs = if case.b.is_some() {
                Rhs::Tensor(&b[..])
            } else {
                Rhs::Scalar(scalar)
            };
            nd::binary_nd(op, &desc, &a, host_rhs, &mut want).unwrap();

            let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
            let db = DeviceBuffer::from_host(ctx, bytes_of(&b)).unwrap();
            // One element more than the output, poisoned, to catch writes past the end.
            let mut dout =
                DeviceBuffer::from_host(ctx, &vec![0xA5u8; (n + 1) * size_of::<T>()]).unwrap();
            {
                let out = dout.as_span_mut::<T>().unwrap().into_slice(..n).unwrap();
                let rhs = if case.b.is_some() {
                    Rhs::Tensor(db.as_span::<T>().unwrap())
                } else {
                    Rhs::Scalar(scalar)
                };
                gpu::binary_nd::<T>(&s, op, &desc, da.as_span::<T>().unwrap(), rhs, out).unwrap();
            }
            // Synchronising launches the context's batch first (small operations queue there).
            s.synchronize().unwrap();
            let bytes = dout.to_host_vec().unwrap();
            assert!(
                bytes[n * size_of::<T>()..].iter().all(|&x| x == 0xA5),
                "wrote past the end"
            );
            let got: Vec<T> = from_bytes(&bytes[..n * size_of::<T>()]);
            // Integer ops (pow included) are exact on both.
            let tol = if op.exact_twin() || !T::IS_FLOAT {
                0
            } else {
                4
            };
            // In place, where the left operand is the output: the same bits.
            if desc.a_is_output() && n > 0 {
                let mut dx = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
                let mut host = a[..n].to_vec();
                let host_rhs = if case.b.is_some() {
                    Rhs::Tensor(&b[..])
                } else {
                    Rhs::Scalar(scalar)
                };
                nd::binary_nd_assign(op, &desc, &mut host, host_rhs).unwrap();
                {
                    let x = dx.as_span_mut::<T>().unwrap().into_slice(..n).unwrap();
                    let rhs = if case.b.is_some() {
                        Rhs::Tensor(db.as_span::<T>().unwrap())
                    } else {
                        Rhs::Scalar(scalar)
                    };
                    gpu::binary_nd_assign::<T>(&s, op, &desc, x, rhs).unwrap();
                }
                s.synchronize().unwrap();
                let in_place: Vec<T> = from_bytes(&dx.to_host_vec().unwrap()[..n * size_of::<T>()]);
                for (i, (&g, &w)) in in_place.iter().zip(&host).enumerate() {
                    assert!(
                        T::ulps_apart(g, w) <= tol || (tol > 0 && g.tiny() && w.tiny()),
                        "{}_nd_{} in place {:?}: element {i}: gpu {g:?} cpu {w:?}",
                        op.name(),
                        T::NAME,
                        case.shape
                    );
                }
            }
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // pow: a 2-ulp difference in an intermediate may move a result between 0 and a
                // subnormal.
                let smallest = if size_of::<T>() == 8 {
                    f64::MIN_POSITIVE
                } else {
                    f64::from(f32::MIN_POSITIVE)
                };
                let tiny = |x: T| x.to_f64().abs() < smallest;
                assert!(
                    T::ulps_apart(g, w) <= tol || (tol > 0 && tiny(g) && tiny(w)),
                    "{}_nd_{} {:?}: element {i}: gpu {g:?} cpu {w:?}",
                    op.name(),
                    T::NAME,
                    case.shape
                );
            }
        }
    }
}

#[test]
fn nd_kernels_match_their_twin() {
    if skip_without_gpu("nd_kernels_match_their_twin") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(17);
    check::<f32>(&ctx, &mut rng);
    check::<f16>(&ctx, &mut rng);
    check::<bf16>(&ctx, &mut rng);
    check::<i32>(&ctx, &mut rng);
    check::<i64>(&ctx, &mut rng);
    check::<f64>(&ctx, &mut rng);
}

#[test]
fn out_of_range_layouts_are_refused_before_launch() {
    if skip_without_gpu("out_of_range_layouts_are_refused_before_launch") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let da = DeviceBuffer::alloc(&ctx, 16 * 4).unwrap();
    let mut dout = DeviceBuffer::alloc(&ctx, 16 * 4).unwrap();
    // Reads 17 elements of a 16-element operand.
    let desc = BinaryNd::new(&[16], &[1], 1, None).unwrap();
    let r = gpu::binary_nd::<f32>(
        &s,
        BinaryOp::Add,
        &desc,
        da.as_span().unwrap(),
        Rhs::Scalar(1.0),
        dout.as_span_mut().unwrap(),
    );
    assert!(r.is_err());
}

/// The bits of `x` in the low bytes of a `u64`, as `gpu::where_nd` takes a scalar value.
fn bits_of<T: Copy>(x: T) -> u64 {
    let mut b = [0u8; 8];
    b[..size_of::<T>()].copy_from_slice(bytes_of(&[x]));
    u64::from_le_bytes(b)
}

fn check_compare_where<T: Random>(ctx: &std::sync::Arc<Context>, rng: &mut SmallRng) {
    use rand::Rng;
    let s = Stream::new(ctx).unwrap();
    for (ci, case) in cases().into_iter().enumerate() {
        let desc = BinaryNd::new(
            &case.shape,
            &case.a.0,
            case.a.1,
            case.b.as_ref().map(|(st, o, _)| (&st[..], *o)),
        )
        .unwrap();
        let n = desc.numel();
        let a: Vec<T> = (0..case.a.2).map(|_| T::random(rng)).collect();
        // b repeats some of a's values so that equality is exercised.
        let b: Vec<T> = (0..case.b.as_ref().map_or(0, |b| b.2))
            .map(|i| {
                if i % 3 == 0 && i < a.len() {
                    a[i]
                } else {
                    T::random(rng)
                }
            })
            .collect();
        let scalar = if a.is_empty() {
            T::random(rng)
        } else {
            a[a.len() / 2]
        };
        let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
        let db = DeviceBuffer::from_host(ctx, bytes_of(&b)).unwrap();
        for op in CompareOp::ALL {
            let host_rhs = if case.b.is_some() {
                Rhs::Tensor(&b[..])
            } else {
                Rhs::Scalar(scalar)
            };
            let mut want = vec![0u8; n];
            nd::compare_nd(op, &desc, &a, host_rhs, &mut want).unwrap();
            let mut dout = DeviceBuffer::from_host(ctx, &vec![0xA5u8; n + 1]).unwrap();
            {
                let out = dout.as_span_mut::<u8>().unwrap().into_slice(..n).unwrap();
                let rhs = if case.b.is_some() {
                    Rhs::Tensor(db.as_span::<T>().unwrap())
                } else {
                    Rhs::Scalar(scalar)
                };
                gpu::compare_nd::<T>(&s, op, &desc, da.as_span::<T>().unwrap(), rhs, out).unwrap();
            }
            s.synchronize().unwrap();
            let got = dout.to_host_vec().unwrap();
            assert_eq!(got[n], 0xA5, "wrote past the end");
            assert_eq!(
                &got[..n],
                &want[..],
                "{}_nd_{} case {ci}",
                op.name(),
                T::NAME
            );
        }
        // where: the condition through a's layout, the first value through b's (or a scalar),
        // the second contiguous or a scalar.
        let cond: Vec<u8> = (0..case.a.2)
            .map(|_| u8::from(rng.random_bool(0.5)))
            .collect();
        let other: Vec<T> = (0..n).map(|_| T::random(rng)).collect();
        let contiguous: Vec<isize> = {
            let mut st = vec![0isize; case.shape.len()];
            let mut acc = 1isize;
            for k in (0..case.shape.len()).rev() {
                st[k] = acc;
                acc *= case.shape[k] as isize;
            }
            st
        };
        for second_scalar in [false, true] {
            let w = WhereNd::new(
                &case.shape,
                (&case.a.0, case.a.1),
                case.b.as_ref().map(|(st, o, _)| (&st[..], *o)),
                (!second_scalar).then_some((&contiguous[..], 0)),
            )
            .unwrap();
            let first = if case.b.is_some() {
                Rhs::Tensor(&b[..])
            } else {
                Rhs::Scalar(scalar)
            };
            let second = if second_scalar {
                Rhs::Scalar(scalar)
            } else {
                Rhs::Tensor(&other[..])
            };
            let mut want = vec![T::default(); n];
            nd::where_nd(&w, &cond, first, second, &mut want).unwrap();
            let dc = DeviceBuffer::from_host(ctx, &cond).unwrap();
            let dother = DeviceBuffer::from_host(ctx, bytes_of(&other)).unwrap();
            let es = size_of::<T>();
            let mut dout = DeviceBuffer::from_host(ctx, &vec![0xA5u8; (n + 1) * es]).unwrap();
            {
                let out = dout
                    .as_span_mut::<u8>()
                    .unwrap()
                    .into_slice(..n * es)
                    .unwrap();
                let first = if case.b.is_some() {
                    Rhs::Tensor(db.as_span::<u8>().unwrap())
                } else {
                    Rhs::Scalar(bits_of(scalar))
                };
                let second = if second_scalar {
                    Rhs::Scalar(bits_of(scalar))
                } else {
                    Rhs::Tensor(dother.as_span::<u8>().unwrap())
                };
                gpu::where_nd(&s, es, &w, dc.as_span::<u8>().unwrap(), first, second, out).unwrap();
            }
            s.synchronize().unwrap();
            let bytes = dout.to_host_vec().unwrap();
            assert!(
                bytes[n * es..].iter().all(|&x| x == 0xA5),
                "wrote past the end"
            );
            assert_eq!(
                &bytes[..n * es],
                bytes_of(&want),
                "where_nd_e{es} case {ci}"
            );
        }
    }
}

#[test]
fn compare_and_where_nd_match_their_twin() {
    if skip_without_gpu("compare_and_where_nd_match_their_twin") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(23);
    check_compare_where::<f32>(&ctx, &mut rng);
    check_compare_where::<f16>(&ctx, &mut rng);
    check_compare_where::<bf16>(&ctx, &mut rng);
    check_compare_where::<i32>(&ctx, &mut rng);
    check_compare_where::<i64>(&ctx, &mut rng);
    check_compare_where::<f64>(&ctx, &mut rng);
}
