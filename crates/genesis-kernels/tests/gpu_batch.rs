//! Small elementwise operations batched into one launch (`genesis_cuda::batch`): the same bits
//! as one launch per operation, in the same order with respect to everything else queued.
//!
//! One test function: batching is a switch of the (shared) context, so the parts run in turn.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{
    Context, DeviceBuffer, DeviceSpan, DeviceSpanMut, Event, Stream, skip_without_gpu,
};
use genesis_kernels::{BinaryOp, Element, UnaryOp, gpu};
use half::{bf16, f16};

mod common;
use common::{bytes_of, from_bytes};

/// `x` as an operand and as the output of the same launch: the elementwise kernels read and
/// write each element in one thread, so an output may be one of the operands.
fn in_place<T: Element>(x: &DeviceBuffer) -> (DeviceSpan<'_, T>, DeviceSpanMut<'_, T>) {
    let n = x.len() / size_of::<T>();
    // SAFETY: `x` holds `n` elements of `T` for as long as it is borrowed, and its drop waits
    // for the work queued on it; the two spans alias only as the kernels allow (above).
    unsafe {
        (
            DeviceSpan::from_raw(x.device_ptr(), n),
            DeviceSpanMut::from_raw(x.device_ptr(), n),
        )
    }
}

fn span<T: Element>(x: &DeviceBuffer) -> DeviceSpan<'_, T> {
    x.as_span().unwrap()
}

/// Values from small integers, so that every op of every type gives finite, exact-ish results
/// (the comparison is on bits anyway).
trait Small: Element + Default {
    fn small(i: usize) -> Self;
}
impl Small for f32 {
    fn small(i: usize) -> Self {
        (i % 13) as f32 * 0.25 + 0.5
    }
}
impl Small for f64 {
    fn small(i: usize) -> Self {
        (i % 13) as f64 * 0.25 + 0.5
    }
}
impl Small for f16 {
    fn small(i: usize) -> Self {
        f16::from_f32((i % 13) as f32 * 0.25 + 0.5)
    }
}
impl Small for bf16 {
    fn small(i: usize) -> Self {
        bf16::from_f32((i % 13) as f32 * 0.25 + 0.5)
    }
}
impl Small for i32 {
    fn small(i: usize) -> Self {
        (i % 13) as i32 - 6
    }
}
impl Small for i64 {
    fn small(i: usize) -> Self {
        (i % 13) as i64 - 6
    }
}

/// Runs a program of dependent small operations (each reads the previous result) of every op
/// the type supports, at sizes 1 to BATCH_MAX_ELEMS, and returns the final buffers' bytes.
fn program<T: Small>(ctx: &Arc<Context>, s: &Stream) -> Vec<Vec<u8>> {
    let mut outs = Vec::new();
    for n in [1usize, 7, 300, gpu::BATCH_MAX_ELEMS] {
        let a: Vec<T> = (0..n).map(T::small).collect();
        let b: Vec<T> = (0..n).map(|i| T::small(i + 5)).collect();
        let da = DeviceBuffer::from_host(ctx, bytes_of(&a)).unwrap();
        let db = DeviceBuffer::from_host(ctx, bytes_of(&b)).unwrap();
        let x = DeviceBuffer::alloc(ctx, n * size_of::<T>()).unwrap();
        let (pa, pb) = (span::<T>(&da), span::<T>(&db));
        gpu::fill::<T>(s, in_place::<T>(&x).1, T::small(3)).unwrap();
        for op in BinaryOp::ALL {
            if T::binary_kernel(op).is_none() {
                continue;
            }
            let (xr, xw) = in_place::<T>(&x);
            gpu::binary::<T>(s, op, xr, pa, xw).unwrap();
            let (xr, xw) = in_place::<T>(&x);
            gpu::binary::<T>(s, op, pb, xr, xw).unwrap();
        }
        // Each unary op on its own, from finite inputs (a chain of them would end in NaN).
        for op in UnaryOp::ALL {
            if T::unary_kernel(op).is_none() {
                continue;
            }
            let mut y = DeviceBuffer::alloc(ctx, n * size_of::<T>()).unwrap();
            gpu::unary::<T>(s, op, pb, y.as_span_mut::<T>().unwrap()).unwrap();
            s.synchronize().unwrap();
            outs.push(y.to_host_vec().unwrap());
        }
        for op in UnaryOp::ALL {
            if T::unary_kernel(op).is_none() {
                continue;
            }
            let (xr, xw) = in_place::<T>(&x);
            gpu::unary::<T>(s, op, xr, xw).unwrap();
            // Keep values in range for the next op.
            let (xr, xw) = in_place::<T>(&x);
            gpu::binary::<T>(s, BinaryOp::Minimum, xr, pb, xw).unwrap();
        }
        s.synchronize().unwrap();
        outs.push(x.to_host_vec().unwrap());
    }
    outs
}

fn same_as_unbatched<T: Small>(ctx: &Arc<Context>, s: &Stream) {
    ctx.set_batching(false).unwrap();
    let (r0, l0) = ctx.batch_counts();
    let want = program::<T>(ctx, s);
    assert_eq!(
        ctx.batch_counts(),
        (r0, l0),
        "batching off: nothing batched"
    );
    ctx.set_batching(true).unwrap();
    let got = program::<T>(ctx, s);
    let (r1, l1) = ctx.batch_counts();
    assert!(r1 > r0 && l1 > l0, "{}: small ops were batched", T::NAME);
    // The same values (NaN payloads aside, which CUDA's library functions do not fix).
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w): (Vec<T>, Vec<T>) = (from_bytes(g), from_bytes(w));
        let same = g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| T::same(*a, *b));
        assert!(
            same,
            "{}: batched results differ (output {k}): {g:?} vs {w:?}",
            T::NAME
        );
    }
}

#[test]
fn batched_small_ops() {
    if skip_without_gpu("batched_small_ops") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let s = Stream::new(&ctx).unwrap();

    // 1. Every op and type: the same bits batched as launched one by one.
    same_as_unbatched::<f32>(&ctx, &s);
    same_as_unbatched::<f16>(&ctx, &s);
    same_as_unbatched::<bf16>(&ctx, &s);
    same_as_unbatched::<i32>(&ctx, &s);
    same_as_unbatched::<i64>(&ctx, &s);
    same_as_unbatched::<f64>(&ctx, &s);
    ctx.set_batching(true).unwrap();

    // 2. A chain of 1000 dependent adds spans several full batches.
    let one = DeviceBuffer::from_host(&ctx, bytes_of(&[1.0f32])).unwrap();
    let x = DeviceBuffer::from_host(&ctx, bytes_of(&[0.0f32])).unwrap();
    let (r0, l0) = ctx.batch_counts();
    for _ in 0..1000 {
        let (xr, xw) = in_place::<f32>(&x);
        gpu::add::<f32>(&s, xr, span(&one), xw).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(from_bytes::<f32>(&x.to_host_vec().unwrap()), [1000.0]);
    let (r1, l1) = ctx.batch_counts();
    assert_eq!(r1 - r0, 1000);
    let cap = genesis_cuda::batch::batch_capacity(32) as u64;
    assert!(
        l1 - l0 <= 1000 / cap + 1,
        "{} launches for 1000 records",
        l1 - l0
    );

    // 3. A large op (launched alone) after small ones reads what they wrote, and a small op
    //    after it reads what it wrote.
    let n = 1 << 20;
    let big = DeviceBuffer::from_host(&ctx, bytes_of(&vec![2.0f32; n])).unwrap();
    let mut out = DeviceBuffer::alloc(&ctx, n * 4).unwrap();
    let (br, bw) = in_place::<f32>(&big);
    gpu::add::<f32>(
        &s,
        br.slice(..1).unwrap(),
        span(&one),
        bw.into_slice(..1).unwrap(),
    )
    .unwrap();
    gpu::add::<f32>(&s, span(&big), span(&big), out.as_span_mut().unwrap()).unwrap();
    let head = span::<f32>(&out).slice(..1).unwrap();
    gpu::add::<f32>(&s, head, span(&one), in_place::<f32>(&x).1).unwrap();
    s.synchronize().unwrap();
    let o: Vec<f32> = from_bytes(&out.to_host_vec().unwrap());
    assert_eq!((o[0], o[1], o[n - 1]), (6.0, 4.0, 4.0));
    assert_eq!(from_bytes::<f32>(&x.to_host_vec().unwrap()), [7.0]);

    // 4. Across streams: an event recorded after a small op on one stream orders a small op on
    //    another stream after it.
    let s2 = Stream::new(&ctx).unwrap();
    let ev = Event::new(&ctx, false).unwrap();
    let mut y = DeviceBuffer::alloc(&ctx, 4).unwrap();
    gpu::fill::<f32>(&s, in_place::<f32>(&x).1, 41.0).unwrap();
    ev.record(&s).unwrap();
    s2.wait_event(&ev).unwrap();
    gpu::add::<f32>(&s2, span(&x), span(&one), y.as_span_mut().unwrap()).unwrap();
    s2.synchronize().unwrap();
    assert_eq!(from_bytes::<f32>(&y.to_host_vec().unwrap()), [42.0]);

    // 5. Dropping a stream launches what is pending on it and waits for it.
    let s3 = Stream::new(&ctx).unwrap();
    gpu::fill::<f32>(&s3, y.as_span_mut().unwrap(), 5.0).unwrap();
    drop(s3);
    assert_eq!(from_bytes::<f32>(&y.to_host_vec().unwrap()), [5.0]);

    // 6. Stream::raw (work queued by other libraries) launches the batch first.
    gpu::fill::<f32>(&s, y.as_span_mut().unwrap(), 6.0).unwrap();
    let l_before = ctx.batch_counts().1;
    let _ = s.raw();
    assert_eq!(
        ctx.batch_counts().1,
        l_before + 1,
        "raw() launched the batch"
    );
    s.synchronize().unwrap();
    assert_eq!(from_bytes::<f32>(&y.to_host_vec().unwrap()), [6.0]);
}
