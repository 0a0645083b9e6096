//! The activation gradients with their column sums (`act_grad_cols_<op>_<T>` and
//! `act_grad_cols_final_<T>`): `dx` bit for bit the one-pass `act_grad` kernel's, and the
//! column sums within the bound `genesis_kernels::grad::act_grad_cols` documents of the CPU
//! twin's, for f32, f16, bf16 and f64, every activation, over narrow and wide rows, rows that
//! do not fill a split, vector and element-wise
//! paths (misaligned buffers, widths not a multiple of a vector); run to run the same bits.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, DeviceSpan, DeviceSpanMut, Stream, skip_without_gpu};
use genesis_kernels::Element;
use genesis_kernels::grad::{self, ActGrad};
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

/// (rows, cols): GPT-2's MLP (3072 wide) and narrow layers (768), odd widths, a single row,
/// rows past one split, no rows.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (7, 3),
    (33, 100),
    (1000, 768),
    (4096, 3072),
    (2048, 77),
    (1, 3072),
    (1300, 8),
    (0, 16),
];

fn upload<E: Copy + Default>(ctx: &Arc<Context>, v: &[E], offset: usize) -> DeviceBuffer {
    let mut h = vec![E::default(); offset];
    h.extend_from_slice(v);
    if h.is_empty() {
        return DeviceBuffer::alloc(ctx, 16).unwrap();
    }
    DeviceBuffer::from_host(ctx, bytes_of(&h)).unwrap()
}

fn download<E: Copy + Default>(b: &DeviceBuffer, offset: usize, n: usize) -> Vec<E> {
    let all: Vec<E> = from_bytes(&b.to_host_vec().unwrap());
    all[offset..offset + n].to_vec()
}

fn sp<T: Copy>(buf: &DeviceBuffer, offset: usize, n: usize) -> DeviceSpan<'_, T> {
    buf.as_span::<T>()
        .unwrap()
        .slice(offset..offset + n)
        .unwrap()
}

fn sp_mut<T: Copy>(buf: &mut DeviceBuffer, offset: usize, n: usize) -> DeviceSpanMut<'_, T> {
    buf.as_span_mut::<T>()
        .unwrap()
        .into_slice(offset..offset + n)
        .unwrap()
}

/// The compute type's unit roundoff of `T`.
fn unit<T: Element>() -> f64 {
    if size_of::<T>() == 8 {
        f64::EPSILON / 2.0
    } else {
        1.0 / (1u64 << 24) as f64
    }
}

/// Half an ulp of `T`, relative.
fn half_ulp<T: Element>() -> f64 {
    match size_of::<T>() {
        8 => f64::EPSILON / 2.0,
        4 => 1.0 / (1u64 << 24) as f64,
        _ if T::NAME == "bf16" => 1.0 / 256.0,
        _ => 1.0 / 2048.0,
    }
}

/// The GPU's dx and sums of `rows x cols` (buffers `off` elements into their allocations).
fn run<T: Element + Default>(
    ctx: &Arc<Context>,
    stream: &Stream,
    op: ActGrad,
    g: &[T],
    x: &[T],
    cols: usize,
    off: usize,
) -> (Vec<T>, Vec<T>) {
    let n = g.len();
    let (gg, gx) = (upload(ctx, g, off), upload(ctx, x, off));
    let mut gd = upload(ctx, &vec![T::default(); n], off);
    let mut gs = DeviceBuffer::alloc(ctx, cols * size_of::<T>()).unwrap();
    let ws_len = grad::act_grad_cols_workspace_bytes::<T>(n / cols, cols).max(8);
    let mut ws = DeviceBuffer::alloc(ctx, ws_len).unwrap();
    grad::gpu_act_grad_cols::<T>(
        stream,
        op,
        sp(&gg, off, n),
        sp(&gx, off, n),
        sp_mut(&mut gd, off, n),
        cols,
        sp_mut(&mut gs, 0, cols),
        sp_mut(&mut ws, 0, ws_len),
    )
    .unwrap();
    stream.synchronize().unwrap();
    (download(&gd, off, n), download(&gs, 0, cols))
}

fn check<T: Element + Default>(ctx: &Arc<Context>, stream: &Stream, rng: &mut SmallRng) {
    for op in [ActGrad::Gelu, ActGrad::GeluTanh, ActGrad::Silu] {
        for &(rows, cols) in SHAPES {
            for off in [0usize, 1] {
                let n = rows * cols;
                let g: Vec<T> = (0..n)
                    .map(|_| T::from_f64(rng.random_range(-2.0..2.0)))
                    .collect();
                let x: Vec<T> = (0..n)
                    .map(|_| T::from_f64(rng.random_range(-4.0..4.0)))
                    .collect();
                let ctx_s = format!("{op:?} {} {rows}x{cols} offset {off}", T::NAME);
                let (dx, sums) = run::<T>(ctx, stream, op, &g, &x, cols, off);
                // dx: the one-pass kernel's bits.
                let (gg, gx) = (upload(ctx, &g, 0), upload(ctx, &x, 0));
                let mut gd = upload(ctx, &vec![T::default(); n], 0);
                if n > 0 {
                    grad::gpu_act_grad::<T>(
                        stream,
                        op,
                        sp(&gg, 0, n),
                        sp(&gx, 0, n),
                        sp_mut(&mut gd, 0, n),
                    )
                    .unwrap();
                    stream.synchronize().unwrap();
                    let want: Vec<T> = download(&gd, 0, n);
                    assert!(bytes_of(&dx) == bytes_of(&want), "{ctx_s}: dx differs");
                }
                // Sums: within the twin's bound of the twin on the GPU's dx.
                let mut tdx = vec![T::default(); n];
                let mut tsums = vec![T::default(); cols];
                grad::act_grad_cols::<T>(op, &g, &x, &mut tdx, cols, &mut tsums).unwrap();
                for c in 0..cols {
                    let abs: f64 = (0..rows).map(|r| dx[r * cols + c].to_f64().abs()).sum();
                    let exact: f64 = (0..rows).map(|r| dx[r * cols + c].to_f64()).sum();
                    let bound = (2.0 + (rows as f64).sqrt()) * unit::<T>() * abs
                        + 2.0 * half_ulp::<T>() * exact.abs()
                        + f64::MIN_POSITIVE;
                    let got = sums[c].to_f64();
                    assert!(
                        (got - exact).abs() <= bound,
                        "{ctx_s}: column {c}: {got} against {exact} (bound {bound})"
                    );
                    // The twin's dx is within a few ulp of the kernel's (its erf, exp, tanh
                    // are libm's): its sums within those differences more.
                    let twin = tsums[c].to_f64();
                    let apart: f64 = (0..rows)
                        .map(|r| (dx[r * cols + c].to_f64() - tdx[r * cols + c].to_f64()).abs())
                        .sum();
                    assert!(
                        (got - twin).abs() <= 2.0 * bound + apart + half_ulp::<T>() * twin.abs(),
                        "{ctx_s}: column {c}: {got} against the twin's {twin}"
                    );
                }
                // The same bits again.
                let again = run::<T>(ctx, stream, op, &g, &x, cols, off);
                assert!(
                    bytes_of(&again.1) == bytes_of(&sums),
                    "{ctx_s}: sums differ run to run"
                );
            }
        }
    }
}

#[test]
fn activation_gradients_with_column_sums_match_the_one_pass_kernel_and_the_twin() {
    if skip_without_gpu("act_grad_cols") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0xc015);
    check::<f32>(&ctx, &stream, &mut rng);
    check::<bf16>(&ctx, &stream, &mut rng);
    check::<f16>(&ctx, &stream, &mut rng);
    check::<f64>(&ctx, &stream, &mut rng);
}

#[test]
fn bad_shapes_are_errors() {
    if skip_without_gpu("act_grad_cols") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let b = || DeviceBuffer::alloc(&ctx, 256).unwrap();
    let (g, x, mut d, mut s, mut ws) = (b(), b(), b(), b(), b());
    // 10 elements are not rows of 3; zero columns; sums of the wrong length; a short workspace.
    for (n, cols, sums, ws_len) in [
        (10, 3, 3, 64),
        (10, 0, 1, 64),
        (12, 3, 4, 64),
        (12, 3, 3, 4),
    ] {
        let e = grad::gpu_act_grad_cols::<f32>(
            &stream,
            ActGrad::GeluTanh,
            sp(&g, 0, n),
            sp(&x, 0, n),
            sp_mut(&mut d, 0, n),
            cols,
            sp_mut(&mut s, 0, sums),
            sp_mut(&mut ws, 0, ws_len),
        );
        assert!(
            e.is_err(),
            "n {n} cols {cols} sums {sums} workspace {ws_len}"
        );
    }
    // A CPU twin refuses the same shapes.
    let (gv, xv) = (vec![0f32; 10], vec![0f32; 10]);
    let (mut dv, mut sv) = (vec![0f32; 10], vec![0f32; 3]);
    assert!(grad::act_grad_cols(ActGrad::Gelu, &gv, &xv, &mut dv, 3, &mut sv).is_err());
}
