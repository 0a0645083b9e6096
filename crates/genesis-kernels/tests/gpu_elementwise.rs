//! The CUDA kernels against their CPU twins, on random bit patterns (NaN, inf and subnormals
//! included), for every dtype and sizes from 0 to 2^26 elements, aligned and misaligned.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{
    Context, DeviceBuffer, Error as CudaError, KernelImage, Stream, skip_without_gpu,
};
use genesis_kernels::{BinaryOp, CompareOp, Element, UnaryOp, cpu, gpu};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{Random, bytes_of, from_bytes};

const SIZES: &[usize] = &[
    0,
    1,
    2,
    3,
    5,
    7,
    8,
    9,
    15,
    16,
    17,
    31,
    33,
    63,
    255,
    256,
    257,
    1000,
    1023,
    1024,
    1025,
    4095,
    4097,
    65_535,
    65_537,
    1 << 20,
    (1 << 20) + 7,
    (1 << 24) + 3,
    (1 << 26) - 1,
    1 << 26,
];

/// `op` on `n` elements starting `offset` elements into the buffers: bit-identical to the CPU
/// twin for the exact ops, within 4 ulp for the transcendental ones.
fn check_unary<T: Random>(
    ctx: &Arc<Context>,
    rng: &mut SmallRng,
    op: UnaryOp,
    n: usize,
    offset: usize,
) {
    let a: Vec<T> = (0..n + offset).map(|_| T::random(rng)).collect();
    let mut want = vec![T::default(); n];
    cpu::unary(op, &a[offset..], &mut want).unwrap();
    let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
    let mut dout =
        DeviceBuffer::from_host(ctx, &vec![0xA5u8; (n + offset) * size_of::<T>()]).unwrap();
    let s = Stream::new(ctx).unwrap();
    let from = da.as_span::<T>().unwrap().slice(offset..).unwrap();
    let to = dout
        .as_span_mut::<T>()
        .unwrap()
        .into_slice(offset..)
        .unwrap();
    gpu::unary::<T>(&s, op, from, to).unwrap();
    s.synchronize().unwrap();
    let bytes = dout.to_host_vec().unwrap();
    assert!(bytes[..offset * size_of::<T>()].iter().all(|&x| x == 0xA5));
    let got: Vec<T> = from_bytes(&bytes[offset * size_of::<T>()..]);
    // Integer ops are exact on both.
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let d = T::ulps_apart(g, w);
        assert!(
            op.twin().agree(a[offset + i], g, w) || (g.tiny() && w.tiny()),
            "{}_{} n={n} offset={offset}: element {i} (input {:?}): gpu {g:?} cpu {w:?} ({d} ulp)",
            op.name(),
            T::NAME,
            a[offset + i]
        );
    }
}

fn first_difference<T: Element>(got: &[T], want: &[T]) -> Option<(usize, T, T)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| !T::same(**g, **w))
        .map(|(i, (g, w))| (i, *g, *w))
}

/// `add` on `n` elements whose operands start `offset` elements into their buffers.
fn check_add<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng, n: usize, offset: usize) {
    check_binary::<T>(ctx, rng, BinaryOp::Add, n, offset)
}

/// `op` on `n` elements whose operands start `offset` elements into their buffers.
fn check_binary<T: Random>(
    ctx: &Arc<Context>,
    rng: &mut SmallRng,
    op: BinaryOp,
    n: usize,
    offset: usize,
) {
    let a: Vec<T> = (0..n + offset).map(|_| T::random(rng)).collect();
    let b: Vec<T> = (0..n + offset).map(|_| T::random(rng)).collect();
    let mut want = vec![T::default(); n];
    cpu::binary(op, &a[offset..], &b[offset..], &mut want).unwrap();
    let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
    let db = DeviceBuffer::from_host(ctx, bytes_of(&b)).unwrap();
    // Poison the output so an unwritten element cannot pass.
    let poison: Vec<u8> = vec![0xA5; (n + offset) * size_of::<T>()];
    let mut dout = DeviceBuffer::from_host(ctx, &poison).unwrap();
    let s = Stream::new(ctx).unwrap();
    gpu::binary::<T>(
        &s,
        op,
        da.as_span::<T>().unwrap().slice(offset..).unwrap(),
        db.as_span::<T>().unwrap().slice(offset..).unwrap(),
        dout.as_span_mut::<T>()
            .unwrap()
            .into_slice(offset..)
            .unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    let out_bytes = dout.to_host_vec().unwrap();
    assert!(
        out_bytes[..offset * size_of::<T>()]
            .iter()
            .all(|&x| x == 0xA5),
        "wrote before the range"
    );
    let got: Vec<T> = from_bytes(&out_bytes[offset * size_of::<T>()..]);
    if op.exact_twin() || !T::IS_FLOAT {
        if let Some((i, g, w)) = first_difference(&got, &want) {
            panic!(
                "{}_{} n={n} offset={offset}: element {i}: gpu {g:?} cpu {w:?}",
                op.name(),
                T::NAME
            );
        }
    } else {
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let d = T::ulps_apart(g, w);
            assert!(
                d <= 4 || (g.tiny() && w.tiny()),
                "{}_{} n={n} offset={offset}: element {i}: gpu {g:?} cpu {w:?} ({d} ulp)",
                op.name(),
                T::NAME
            );
        }
    }
}

/// Comparisons and `where` on `n` elements against the CPU twins. Half of the second operand
/// repeats the first, so that equality is common.
fn check_compare_select<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng, n: usize) {
    let a: Vec<T> = (0..n).map(|_| T::random(rng)).collect();
    let b: Vec<T> = a
        .iter()
        .map(|&x| {
            if rng.random_bool(0.5) {
                x
            } else {
                T::random(rng)
            }
        })
        .collect();
    let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
    let db = DeviceBuffer::from_host(ctx, bytes_of(&b)).unwrap();
    let mut dc = DeviceBuffer::from_host(ctx, &vec![0xA5u8; n.max(1)]).unwrap();
    let s = Stream::new(ctx).unwrap();
    for op in CompareOp::ALL {
        let mut want = vec![0u8; n];
        cpu::compare(op, &a, &b, &mut want).unwrap();
        let out = dc.as_span_mut::<u8>().unwrap().into_slice(..n).unwrap();
        let (pa, pb) = (da.as_span::<T>().unwrap(), db.as_span::<T>().unwrap());
        gpu::compare::<T>(&s, op, pa.slice(..n).unwrap(), pb.slice(..n).unwrap(), out).unwrap();
        s.synchronize().unwrap();
        let got = dc.to_host_vec().unwrap();
        assert_eq!(&got[..n], &want[..], "{}_{} n={n}", op.name(), T::NAME);
        // where(a < b ... , a, b) with that mask.
        let mut want_sel = vec![T::default(); n];
        cpu::select(&want, &a, &b, &mut want_sel).unwrap();
        let mut dout = DeviceBuffer::alloc(ctx, (n * size_of::<T>()).max(1)).unwrap();
        let bytes = n * size_of::<T>();
        let (pa, pb) = (da.as_span::<u8>().unwrap(), db.as_span::<u8>().unwrap());
        gpu::select(
            &s,
            size_of::<T>(),
            dc.as_span::<u8>().unwrap().slice(..n).unwrap(),
            pa.slice(..bytes).unwrap(),
            pb.slice(..bytes).unwrap(),
            dout.as_span_mut::<u8>()
                .unwrap()
                .into_slice(..bytes)
                .unwrap(),
        )
        .unwrap();
        s.synchronize().unwrap();
        let got_sel: Vec<T> = from_bytes(&dout.to_host_vec().unwrap()[..n * size_of::<T>()]);
        assert!(
            got_sel.iter().zip(&want_sel).all(|(g, w)| T::same(*g, *w)),
            "where_{} n={n}",
            T::NAME
        );
    }
}

fn check_fill<T: Random>(ctx: &Arc<Context>, rng: &mut SmallRng, n: usize, offset: usize) {
    let value = T::random(rng);
    let mut dout =
        DeviceBuffer::from_host(ctx, &vec![0x5Au8; (n + offset + 3) * size_of::<T>()]).unwrap();
    let s = Stream::new(ctx).unwrap();
    let to = dout.as_span_mut::<T>().unwrap();
    gpu::fill::<T>(&s, to.into_slice(offset..offset + n).unwrap(), value).unwrap();
    s.synchronize().unwrap();
    let bytes = dout.to_host_vec().unwrap();
    let (lo, hi) = (offset * size_of::<T>(), (offset + n) * size_of::<T>());
    assert!(
        bytes[..lo].iter().chain(&bytes[hi..]).all(|&x| x == 0x5A),
        "fill_{} wrote outside n={n}",
        T::NAME
    );
    let got: Vec<T> = from_bytes(&bytes[lo..hi]);
    let mut want = vec![T::default(); n];
    cpu::fill(&mut want, value);
    assert!(
        first_difference(&got, &want).is_none(),
        "fill_{} n={n} offset={offset}",
        T::NAME
    );
}

fn run_all<T: Random>(seed: u64) {
    if skip_without_gpu(&format!("add/fill {}", T::NAME)) {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    for &n in SIZES {
        check_add::<T>(&ctx, &mut rng, n, 0);
        check_fill::<T>(&ctx, &mut rng, n, 0);
        if n <= 1 << 20 {
            // Misaligned operands take the scalar path.
            check_add::<T>(&ctx, &mut rng, n, 1);
            check_fill::<T>(&ctx, &mut rng, n, 3);
        }
        if n <= (1 << 20) + 7 {
            for op in BinaryOp::ALL {
                if op == BinaryOp::Add || T::binary_kernel(op).is_none() {
                    continue;
                }
                check_binary::<T>(&ctx, &mut rng, op, n, 0);
                check_binary::<T>(&ctx, &mut rng, op, n, 1);
            }
            if n <= 65_537 {
                check_compare_select::<T>(&ctx, &mut rng, n);
            }
            for op in UnaryOp::ALL {
                if T::unary_kernel(op).is_some() {
                    check_unary::<T>(&ctx, &mut rng, op, n, 0);
                    check_unary::<T>(&ctx, &mut rng, op, n, 2);
                }
            }
        }
    }
}

#[test]
fn integer_division_is_refused_before_launch() {
    if skip_without_gpu("integer_division_is_refused") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let (a, mut out) = (
        DeviceBuffer::alloc(&ctx, 16).unwrap(),
        DeviceBuffer::alloc(&ctx, 16).unwrap(),
    );
    let pa = a.as_span::<i32>().unwrap();
    let e = gpu::binary::<i32>(&s, BinaryOp::Div, pa, pa, out.as_span_mut().unwrap()).unwrap_err();
    assert!(e.to_string().contains("div"), "{e}");
}

#[test]
fn add_fill_f32() {
    run_all::<f32>(1);
}
#[test]
fn add_fill_f16() {
    run_all::<f16>(2);
}
#[test]
fn add_fill_bf16() {
    run_all::<bf16>(3);
}
#[test]
fn add_fill_i32() {
    run_all::<i32>(4);
}
#[test]
fn add_fill_i64() {
    run_all::<i64>(5);
}
#[test]
fn add_fill_f64() {
    run_all::<f64>(6);
}

#[test]
fn in_place_add() {
    if skip_without_gpu("in_place_add") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    let a: Vec<f32> = (0..100_003).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..100_003).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut da = DeviceBuffer::from_host(&ctx, bytes_of(&a)).unwrap();
    let db = DeviceBuffer::from_host(&ctx, bytes_of(&b)).unwrap();
    let s = Stream::new(&ctx).unwrap();
    let (to, from) = (da.as_span_mut::<f32>().unwrap(), db.as_span().unwrap());
    gpu::binary_assign::<f32>(&s, BinaryOp::Add, to, from).unwrap();
    s.synchronize().unwrap();
    let got: Vec<f32> = from_bytes(&da.to_host_vec().unwrap());
    let mut want = a.clone();
    cpu::add_assign(&mut want, &b).unwrap();
    assert_eq!(got, want);
}

#[test]
fn image_without_code_for_the_gpu_is_a_typed_error() {
    if skip_without_gpu("image_without_code_for_the_gpu") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    if ctx.compute_capability() == (8, 0) {
        eprintln!("skipped: this GPU is sm_80, which the probe image targets");
        return;
    }
    static PROBE: &[u8] = include_bytes!("data/probe_sm80.fatbin");
    // Honest targets: refused before the driver is asked.
    let honest = KernelImage {
        name: "probe_sm80",
        image: PROBE,
        targets: &["sm_80"],
    };
    let e = genesis_cuda::Kernel::get(&ctx, &honest, "probe").unwrap_err();
    assert!(
        matches!(&e, CudaError::NoBinaryForArch { arch, .. } if *arch == ctx.arch()),
        "{e}"
    );
    // Targets that lie: the driver refuses (CUDA_ERROR_NO_BINARY_FOR_GPU) and we say the same.
    let lying = KernelImage {
        name: "probe_sm80_lying",
        image: PROBE,
        targets: &["sm_80", "sm_90", "sm_100", "sm_120"],
    };
    let e = genesis_cuda::Kernel::get(&ctx, &lying, "probe").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&ctx.arch()) && msg.contains("cargo xtask build-kernels"),
        "{msg}"
    );
}
