//! The copy kernels (strided copy, transpose, every cast pair) against their CPU twins.
#![cfg(feature = "cuda")]

use genesis_cuda::{Context, DeviceBuffer, Stream, skip_without_gpu};
use genesis_kernels::copy::{cast, strided_copy, transpose};
use genesis_kernels::{DType, StridedCopy, gpu};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// Random source bytes: random bit patterns plus special values for floats; bools are 0/1.
fn source(kind: DType, n: usize, rng: &mut SmallRng) -> Vec<u8> {
    let mut b = vec![0u8; n * kind.size()];
    rng.fill_bytes(&mut b);
    let put = |b: &mut Vec<u8>, i: usize, bytes: &[u8]| {
        b[i * bytes.len()..(i + 1) * bytes.len()].copy_from_slice(bytes)
    };
    match kind {
        DType::Bool => b.iter_mut().for_each(|x| *x &= 1),
        DType::F32 => {
            let specials = [
                0.0f32,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                f32::MIN_POSITIVE / 3.0,
                2147483520.0,
                2147483648.0,
                -2147483648.0,
                300.5,
                -128.5,
                65520.0,
                65519.99,
                1.0 + f32::EPSILON,
                3.0e38,
                1e-40,
                // Exact rounding ties for f16 (1 + 2^-11, 1 + 3 * 2^-11, 2049) and bf16
                // (1 + 2^-8, 1 + 3 * 2^-8, 257), and an f16 subnormal tie.
                1.0 + 2f32.powi(-11),
                1.0 + 3.0 * 2f32.powi(-11),
                2049.0,
                -2049.0,
                1.0 + 2f32.powi(-8),
                1.0 + 3.0 * 2f32.powi(-8),
                257.0,
                3.0 * 2f32.powi(-25),
                -2.5,
            ];
            for (i, v) in specials.iter().enumerate() {
                put(&mut b, i * 7, &v.to_le_bytes());
            }
            // Plenty of in-range values too.
            for i in (1000..n).step_by(3) {
                put(
                    &mut b,
                    i,
                    &(rng.random_range(-70000.0f32..70000.0)).to_le_bytes(),
                );
            }
        }
        DType::F64 => {
            let specials = [
                0.0f64,
                -0.0,
                f64::INFINITY,
                f64::NAN,
                1e-310,
                9.3e18,
                -9.3e18,
                1.0 + 2f64.powi(-11),
                1.0 + 2f64.powi(-11) + 2f64.powi(-40),
                1e39,
                4e-45,
                1.0 + 2f64.powi(-8),
                1.0 + 2f64.powi(-8) - 2f64.powi(-40),
                1.0 + 2f64.powi(-8) + 2f64.powi(-40),
                2049.0,
                3.0 * 2f64.powi(-25),
            ];
            for (i, v) in specials.iter().enumerate() {
                put(&mut b, i * 5, &v.to_le_bytes());
            }
            for i in (1000..n).step_by(3) {
                put(&mut b, i, &(rng.random_range(-1e6f64..1e6)).to_le_bytes());
            }
        }
        DType::F16 => {
            for (i, v) in [
                f16::NAN,
                f16::INFINITY,
                f16::MAX,
                f16::MIN_POSITIVE_SUBNORMAL,
                f16::NEG_ZERO,
            ]
            .iter()
            .enumerate()
            {
                put(&mut b, i * 3, &v.to_le_bytes());
            }
        }
        DType::BF16 => {
            for (i, v) in [
                bf16::NAN,
                bf16::INFINITY,
                bf16::MAX,
                bf16::MIN_POSITIVE_SUBNORMAL,
            ]
            .iter()
            .enumerate()
            {
                put(&mut b, i * 3, &v.to_le_bytes());
            }
        }
        _ => {}
    }
    b
}

fn is_nan(kind: DType, b: &[u8]) -> bool {
    match kind {
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).is_nan(),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).is_nan(),
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
        _ => false,
    }
}

#[test]
fn every_cast_pair_matches_the_twin() {
    if skip_without_gpu("every_cast_pair_matches_the_twin") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let n = 100_003;
    for s in DType::ALL {
        let src = source(s, n, &mut rng);
        let dsrc = DeviceBuffer::from_host(&ctx, &src).unwrap();
        for d in DType::ALL {
            let mut want = vec![0u8; n * d.size()];
            cast(s, &src, d, &mut want, n).unwrap();
            let mut ddst = DeviceBuffer::from_host(&ctx, &vec![0xA5; n * d.size()]).unwrap();
            let (from, to) = (dsrc.as_span().unwrap(), ddst.as_span_mut().unwrap());
            gpu::cast(&stream, s, from, d, to, n).unwrap();
            stream.synchronize().unwrap();
            let got = ddst.to_host_vec().unwrap();
            for i in 0..n {
                let (g, w) = (
                    &got[i * d.size()..(i + 1) * d.size()],
                    &want[i * d.size()..(i + 1) * d.size()],
                );
                if g != w && !(is_nan(d, g) && is_nan(d, w)) {
                    panic!(
                        "cast {s:?} -> {d:?}, element {i} (source {:?}): gpu {g:?} cpu {w:?}",
                        &src[i * s.size()..(i + 1) * s.size()]
                    );
                }
            }
        }
    }
}

/// Elements of `elem` bytes, zero-extended to u64 (copies move bytes, so any carrier works).
fn words(bytes: &[u8], elem: usize) -> Vec<u64> {
    bytes
        .chunks(elem)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..elem].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

#[test]
fn strided_copies_and_transposes_match_the_twin() {
    if skip_without_gpu("strided_copies_and_transposes_match_the_twin") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    for elem in [1usize, 2, 4, 8] {
        let len = 1 << 16;
        let mut src = vec![0u8; len * elem];
        rng.fill_bytes(&mut src);
        let dsrc = DeviceBuffer::from_host(&ctx, &src).unwrap();
        // A transposed 3-D view, a stepped slice, a broadcast (stride 0) and a scalar.
        let cases: Vec<StridedCopy> = vec![
            StridedCopy::new(&[16, 32, 32], &[1024, 1, 32], 0, &[1024, 32, 1], 0).unwrap(),
            StridedCopy::new(&[100, 37], &[512, 3], 5, &[37, 1], 0).unwrap(),
            StridedCopy::new(&[7, 300], &[0, 1], 11, &[300, 1], 0).unwrap(),
            StridedCopy::new(&[], &[], 17, &[], 0).unwrap(),
            StridedCopy::new(&[3, 0, 4], &[1, 1, 1], 0, &[0, 4, 1], 0).unwrap(),
            // Rows read backwards (`flip`): in reversed 16-byte vectors when aligned (the
            // first three), element by element when not (the last).
            StridedCopy::new(&[64, 48], &[64, -1], 47, &[48, 1], 0).unwrap(),
            StridedCopy::new(&[1024], &[-1], 1023, &[1], 32).unwrap(),
            StridedCopy::new(&[32, 64], &[-64, -1], 32 * 64 - 1, &[64, 1], 0).unwrap(),
            StridedCopy::new(&[64, 48], &[64, -1], 48, &[48, 1], 0).unwrap(),
        ];
        for desc in &cases {
            let n = desc.numel();
            let (_, dst_ext) = desc.extents();
            let typed = |bytes: &[u8]| -> Vec<u64> { words(bytes, elem) };
            let src_el = typed(&src);
            let mut want_el = vec![0u64; dst_ext.max(1)];
            strided_copy(&src_el, &mut want_el, desc).unwrap();
            let mut ddst =
                DeviceBuffer::from_host(&ctx, &vec![0u8; dst_ext.max(1) * elem]).unwrap();
            let (from, to) = (dsrc.as_span().unwrap(), ddst.as_span_mut().unwrap());
            gpu::strided_copy(&stream, elem, from, to, desc).unwrap();
            stream.synchronize().unwrap();
            let got = typed(&ddst.to_host_vec().unwrap());
            assert_eq!(
                &got[..dst_ext.min(got.len())],
                &want_el[..dst_ext.min(want_el.len())],
                "elem {elem}, {desc:?} ({n} elements)"
            );
        }
        for (batch, rows, cols, ld) in [
            (1usize, 33usize, 65usize, 65usize),
            (3, 64, 32, 40),
            (2, 1, 100, 100),
            (1, 127, 1, 1),
        ] {
            let total_in = batch * rows * ld;
            if total_in > len {
                continue;
            }
            let src_el = words(&src, elem);
            let mut want = vec![0u64; batch * rows * cols];
            for b in 0..batch {
                transpose(
                    &src_el[b * rows * ld..],
                    &mut want[b * rows * cols..(b + 1) * rows * cols],
                    rows,
                    cols,
                    ld,
                )
                .unwrap();
            }
            let mut dout = DeviceBuffer::alloc(&ctx, batch * rows * cols * elem).unwrap();
            gpu::transpose(
                &stream,
                elem,
                dsrc.as_span().unwrap(),
                dout.as_span_mut().unwrap(),
                batch,
                rows,
                cols,
                ld,
                rows * ld,
                rows * cols,
            )
            .unwrap();
            stream.synchronize().unwrap();
            let got = words(&dout.to_host_vec().unwrap(), elem);
            assert_eq!(
                got, want,
                "transpose elem {elem} batch {batch} {rows}x{cols} ld {ld}"
            );
        }
    }
}

/// A random layout of `shape` inside a buffer: the dimensions stored in a random order, some
/// stepped, some broadcast (stride 0) when `broadcast`, at a random offset. Returns the strides
/// and offset; the buffer needs `extent` elements.
fn random_layout(shape: &[usize], broadcast: bool, rng: &mut SmallRng) -> (Vec<isize>, usize) {
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut strides = vec![0isize; rank];
    let mut step = 1isize;
    for &k in order.iter().rev() {
        if broadcast && rng.random_range(0..6) == 0 {
            continue;
        }
        let skip = if rng.random_range(0..4) == 0 {
            rng.random_range(2..4i64) as isize
        } else {
            1
        };
        strides[k] = step * skip;
        step *= (shape[k] as isize * skip).max(1);
    }
    (strides, rng.random_range(0..9))
}

#[test]
fn generated_strided_copies_match_the_twin() {
    if skip_without_gpu("generated_strided_copies_match_the_twin") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    for case in 0..1200 {
        let elem = [1usize, 2, 4, 8][case % 4];
        let rank = rng.random_range(1..=6);
        let shape: Vec<usize> = (0..rank)
            .map(|k| match rng.random_range(0..5) {
                0 => 1,
                1 if k + 1 == rank => rng.random_range(14..80),
                _ => rng.random_range(2..9),
            })
            .collect();
        let (ss, so) = random_layout(&shape, true, &mut rng);
        // The destination: contiguous (what `contiguous()` writes) or a layout of its own.
        let (ds, doff) = if rng.random_range(0..3) > 0 {
            let mut st = vec![0isize; rank];
            let mut step = 1isize;
            for k in (0..rank).rev() {
                st[k] = step;
                step *= shape[k] as isize;
            }
            (st, rng.random_range(0..3) * 8)
        } else {
            random_layout(&shape, false, &mut rng)
        };
        let desc = StridedCopy::new(&shape, &ss, so, &ds, doff).unwrap();
        let (se, de) = desc.extents();
        let mut src = vec![0u8; se.max(1) * elem];
        rng.fill_bytes(&mut src);
        let src_el = words(&src, elem);
        let mut want = vec![0u64; de.max(1)];
        strided_copy(&src_el, &mut want, &desc).unwrap();
        let dsrc = DeviceBuffer::from_host(&ctx, &src).unwrap();
        let mut ddst = DeviceBuffer::from_host(&ctx, &vec![0u8; de.max(1) * elem]).unwrap();
        gpu::strided_copy(
            &stream,
            elem,
            dsrc.as_span().unwrap(),
            ddst.as_span_mut().unwrap(),
            &desc,
        )
        .unwrap();
        stream.synchronize().unwrap();
        let got = words(&ddst.to_host_vec().unwrap(), elem);
        assert_eq!(got, want, "case {case}: elem {elem}, {desc:?}");
    }
}
