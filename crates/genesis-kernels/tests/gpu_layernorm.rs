//! The LayerNorm kernels (`genesis_kernels::layernorm`) against their CPU twins, for f32, f16
//! and bf16: `C` from 1 to `MAX_COLS` (odd ones, GPT-2's 768, 1024, 1600, 4096, 8192), 1 to
//! 70,000 rows (one and many backward blocks, runs of rows past the least), aligned (16-byte
//! vectors) and misaligned buffers, with and without the residual, the weight and the bias, overwriting and accumulating `dh`,
//! `dw`, `db`; each run twice and compared bit for bit (determinism).
//!
//! Tolerances (the module documentation's bound, times 4 for safety): with `u = 2^-24`,
//! `k = 8 + 2 sqrt(C)` and, per row, `S = sum |h|`, `em = k u S / C` (the mean's error: an f32
//! tree against the twin's ordered f64 sum): `mean` within `em`; `rstd` within
//! `rstd (2 k u + rstd^2 em^2)`; `y` within `4 (|w| (|n| 2 k u + rstd em) + u |b|)`; the
//! backward is fed the GPU's `h`, `mean`, `rstd`, so `dh` within
//! `4 (rstd k u (mean|dn| + |n| mean|dn n|) + 2 k u rstd (|dn - a| + |n b|))` and `dw`
//! (`db`) within `4 (8 + 2 sqrt(N)) u sum |dy n|` (`sum |dy|`); each plus the old value's `u`
//! when accumulating, one rounding to `T` of either side (`2 u_T |twin|`) and the spacing of
//! `T`'s subnormals. `h = x + r` is one rounding on both sides: bit for bit. A wrong column,
//! row or sum moves values by O(1).
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, DeviceSpan, DeviceSpanMut, Stream, skip_without_gpu};
use genesis_kernels::layernorm::{self, Accumulate, LayerNormShape, MAX_COLS};
use genesis_kernels::real::FusedElement;
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

const U: f64 = 1.0 / (1u64 << 24) as f64;

trait Float: FusedElement<Acc = f32> + Default {
    const EPS: f64;
    const TINY: f64;
}
impl Float for f32 {
    const EPS: f64 = U;
    const TINY: f64 = 1e-45;
}
impl Float for f16 {
    const EPS: f64 = 1.0 / 2048.0;
    const TINY: f64 = 1.0 / (1u64 << 24) as f64;
}
impl Float for bf16 {
    const EPS: f64 = 1.0 / 256.0;
    const TINY: f64 = 1e-40;
}

const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (5, 3),
    (100, 7),
    (64, 768),
    (700, 768),
    (33, 1024),
    (17, 1600),
    (8, 4096),
    (3, 8192),
    (2, MAX_COLS),
    (5000, 64),
    (9, 1025),
    (4, 2048),
    (70000, 24),
    // From 16,384 rows the backward gives f32 rows of 384 three chunks a thread
    // (layernorm::threads: 32 threads where two chunks a thread would be 64).
    (16400, 384),
];

fn upload<E: Copy>(ctx: &Arc<Context>, v: &[E], offset: usize, fill: E) -> DeviceBuffer {
    let mut h = vec![fill; offset];
    h.extend_from_slice(v);
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

fn random<T: Float>(rng: &mut SmallRng, n: usize, shift: f64) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f64(rng.random_range(-2.0..2.0) + shift))
        .collect()
}

fn close(g: f64, w: f64, tol: f64) -> bool {
    if w.is_nan() {
        g.is_nan()
    } else {
        (g - w).abs() <= tol
    }
}

/// Collects up to 5 failures.
struct Bad(Vec<String>);
impl Bad {
    fn check(&mut self, ok: bool, f: impl FnOnce() -> String) {
        if !ok && self.0.len() < 5 {
            self.0.push(f());
        }
    }
}

/// One case: `variant` picks residual (bit 0), weight (bit 1), bias (bit 2) and accumulation
/// (bits 3, 4).
#[allow(clippy::too_many_lines)]
fn case<T: Float>(
    ctx: &Arc<Context>,
    stream: &Stream,
    rng: &mut SmallRng,
    rows: usize,
    c: usize,
    offset: usize,
    variant: u32,
) {
    let (res, hw, hb) = (variant & 1 != 0, variant & 2 != 0, variant & 4 != 0);
    let acc = Accumulate {
        dh: variant & 8 != 0,
        params: variant & 16 != 0,
    };
    let what = format!(
        "{} rows {rows} C {c} offset {offset} residual {res} w {hw} b {hb} {acc:?}",
        T::NAME
    );
    let shape = LayerNormShape::new(rows, c);
    let len = rows * c;
    let x: Vec<T> = random(rng, len, 3.0);
    let r: Vec<T> = random(rng, len, 0.0);
    let (w, b): (Vec<T>, Vec<T>) = (random(rng, c, 0.0), random(rng, c, 0.0));
    let dy: Vec<T> = random(rng, len, 0.0);
    let dh0: Vec<T> = random(rng, len, 0.0);
    let (dw0, db0): (Vec<T>, Vec<T>) = (random(rng, c, 0.0), random(rng, c, 0.0));
    let z = T::default();
    let (gx, gr) = (upload(ctx, &x, offset, z), upload(ctx, &r, offset, z));
    let (gw, gb) = (upload(ctx, &w, offset, z), upload(ctx, &b, offset, z));
    // Forward, twice.
    let fwd = || -> (Vec<T>, Vec<T>, Vec<f32>, Vec<f32>) {
        let mut gh = upload(ctx, &vec![z; len], offset, z);
        let mut gy = upload(ctx, &vec![z; len], offset, z);
        let (mut gm, mut gs) = (
            DeviceBuffer::alloc(ctx, rows * 4 + 4).unwrap(),
            DeviceBuffer::alloc(ctx, rows * 4 + 4).unwrap(),
        );
        let residual = res.then(|| {
            (
                sp::<T>(&gr, offset, len),
                gh.as_span_mut::<T>()
                    .unwrap()
                    .into_slice(offset..offset + len)
                    .unwrap(),
            )
        });
        layernorm::gpu_layer_norm_forward::<T, T>(
            stream,
            &shape,
            sp::<T>(&gx, offset, len),
            residual,
            hw.then(|| sp::<T>(&gw, offset, c)),
            hb.then(|| sp::<T>(&gb, offset, c)),
            gy.as_span_mut::<T>()
                .unwrap()
                .into_slice(offset..offset + len)
                .unwrap(),
            gm.as_span_mut::<f32>().unwrap().into_slice(..rows).unwrap(),
            gs.as_span_mut::<f32>().unwrap().into_slice(..rows).unwrap(),
        )
        .unwrap();
        stream.synchronize().unwrap();
        (
            download(&gh, offset, len),
            download(&gy, offset, len),
            download(&gm, 0, rows),
            download(&gs, 0, rows),
        )
    };
    let (h, y, mean, rstd) = fwd();
    let again = fwd();
    assert!(
        bytes_of(&again.1) == bytes_of(&y) && again.2 == mean && again.3 == rstd,
        "{what}: forward twice"
    );
    let mut th = vec![z; len];
    let (mut ty, mut tm, mut ts) = (vec![z; len], vec![0f32; rows], vec![0f32; rows]);
    layernorm::layer_norm_forward(
        &shape,
        &x,
        res.then_some((&r[..], &mut th[..])),
        hw.then_some(&w[..]),
        hb.then_some(&b[..]),
        &mut ty,
        &mut tm,
        &mut ts,
    )
    .unwrap();
    if res {
        assert_eq!(bytes_of(&h), bytes_of(&th), "{what}: h");
    }
    let hin: &[T] = if res { &h } else { &x };
    let k = 8.0 + 2.0 * (c as f64).sqrt();
    let mut bad = Bad(Vec::new());
    for n in 0..rows {
        let row = &hin[n * c..][..c];
        // Both sum h - h0 (h0 the row's first h): the sums' error scales with that spread.
        let h0 = row[0].to_f64();
        let sa: f64 = row.iter().map(|v| (v.to_f64() - h0).abs()).sum();
        let (m, rs) = (f64::from(tm[n]), f64::from(ts[n]));
        let em = k * U * sa / c as f64 + 2.0 * U * m.abs();
        bad.check(close(f64::from(mean[n]), m, em), || {
            format!("mean {n}: gpu {} twin {m} (tol {em:e})", mean[n])
        });
        let er = rs * (2.0 * k * U + rs * rs * em * em) + 4.0 * U * rs;
        bad.check(close(f64::from(rstd[n]), rs, er), || {
            format!("rstd {n}: gpu {} twin {rs} (tol {er:e})", rstd[n])
        });
        for j in 0..c {
            let nv = (row[j].to_f64() - m) * rs;
            let wv = if hw { w[j].to_f64() } else { 1.0 };
            let bv = if hb { b[j].to_f64() } else { 0.0 };
            let (g, t) = (y[n * c + j].to_f64(), ty[n * c + j].to_f64());
            let tol = 4.0 * (wv.abs() * (nv.abs() * 2.0 * k * U + rs * em) + U * bv.abs())
                + 2.0 * T::EPS * t.abs()
                + T::TINY;
            bad.check(close(g, t, tol), || {
                format!("y ({n}, {j}): gpu {g:e} twin {t:e} (tol {tol:e})")
            });
        }
    }
    assert!(bad.0.is_empty(), "{what}: forward\n{}", bad.0.join("\n"));
    // Backward from the GPU's h, mean and rstd, twice.
    let gh = upload(ctx, hin, offset, z);
    let gdy = upload(ctx, &dy, offset, z);
    let (gm, gs) = (
        DeviceBuffer::from_host(ctx, bytes_of(&mean)).unwrap(),
        DeviceBuffer::from_host(ctx, bytes_of(&rstd)).unwrap(),
    );
    let ws_len = layernorm::backward_workspace_bytes(&shape);
    let bwd = || -> (Vec<T>, Vec<T>, Vec<T>) {
        let mut gdh = upload(ctx, &dh0, offset, z);
        let (mut gdw, mut gdb) = (upload(ctx, &dw0, offset, z), upload(ctx, &db0, offset, z));
        let mut ws = DeviceBuffer::alloc(ctx, ws_len.max(4)).unwrap();
        let (dh_span, dw_span, db_span) = (
            sp_mut::<T>(&mut gdh, offset, len),
            sp_mut::<T>(&mut gdw, offset, c),
            sp_mut::<T>(&mut gdb, offset, c),
        );
        layernorm::gpu_layer_norm_backward::<T, T>(
            stream,
            &shape,
            sp::<T>(&gdy, offset, len),
            sp::<T>(&gh, offset, len),
            hw.then(|| sp::<T>(&gw, offset, c)),
            gm.as_span().unwrap(),
            gs.as_span().unwrap(),
            dh_span,
            Some(dw_span),
            hb.then_some(db_span),
            acc,
            ws.as_span_mut().unwrap(),
        )
        .unwrap();
        stream.synchronize().unwrap();
        (
            download(&gdh, offset, len),
            download(&gdw, offset, c),
            download(&gdb, offset, c),
        )
    };
    let (dh, dw, db) = bwd();
    let again = bwd();
    assert!(
        bytes_of(&again.0) == bytes_of(&dh)
            && bytes_of(&again.1) == bytes_of(&dw)
            && bytes_of(&again.2) == bytes_of(&db),
        "{what}: backward twice"
    );
    if !hb {
        assert_eq!(bytes_of(&db), bytes_of(&db0), "{what}: db untouched");
    }
    let (mut tdh, mut tdw, mut tdb) = (dh0.clone(), dw0.clone(), db0.clone());
    layernorm::layer_norm_backward(
        &shape,
        &dy,
        hin,
        hw.then_some(&w[..]),
        &mean,
        &rstd,
        &mut tdh,
        Some(&mut tdw),
        Some(&mut tdb),
        acc,
    )
    .unwrap();
    let mut bad = Bad(Vec::new());
    let (mut swa, mut sba) = (vec![0f64; c], vec![0f64; c]);
    for n in 0..rows {
        let (m, rs) = (f64::from(mean[n]), f64::from(rstd[n]));
        let nv: Vec<f64> = (0..c).map(|j| (hin[n * c + j].to_f64() - m) * rs).collect();
        let dn: Vec<f64> = (0..c)
            .map(|j| dy[n * c + j].to_f64() * if hw { w[j].to_f64() } else { 1.0 })
            .collect();
        let (a1, a2): (f64, f64) = (
            dn.iter().map(|v| v.abs()).sum::<f64>() / c as f64,
            dn.iter().zip(&nv).map(|(a, b)| (a * b).abs()).sum::<f64>() / c as f64,
        );
        let ma = dn.iter().sum::<f64>() / c as f64;
        let mb = dn.iter().zip(&nv).map(|(a, b)| a * b).sum::<f64>() / c as f64;
        for j in 0..c {
            let i = n * c + j;
            let d = dy[i].to_f64();
            swa[j] += (d * nv[j]).abs();
            sba[j] += d.abs();
            let old = if acc.dh { dh0[i].to_f64() } else { 0.0 };
            let core = rs * ((dn[j] - ma).abs() + (nv[j] * mb).abs());
            let (g, t) = (dh[i].to_f64(), tdh[i].to_f64());
            let tol = 4.0 * (rs * k * U * (a1 + nv[j].abs() * a2) + 2.0 * k * U * core)
                + U * old.abs()
                + 2.0 * T::EPS * t.abs()
                + T::TINY;
            bad.check(close(g, t, tol), || {
                format!("dh ({n}, {j}): gpu {g:e} twin {t:e} (tol {tol:e})")
            });
        }
    }
    let kr = 8.0 + 2.0 * (rows as f64).sqrt();
    for j in 0..c {
        for (name, got, twin, old, s) in
            [("dw", &dw, &tdw, &dw0, &swa), ("db", &db, &tdb, &db0, &sba)]
        {
            if name == "db" && !hb {
                continue;
            }
            let o = if acc.params { old[j].to_f64() } else { 0.0 };
            let (g, t) = (got[j].to_f64(), twin[j].to_f64());
            let tol = 4.0 * kr * U * s[j] + U * o.abs() + 2.0 * T::EPS * t.abs() + T::TINY;
            bad.check(close(g, t, tol), || {
                format!("{name} {j}: gpu {g:e} twin {t:e} (tol {tol:e})")
            });
        }
    }
    assert!(bad.0.is_empty(), "{what}: backward\n{}", bad.0.join("\n"));
}

fn check<T: Float>(ctx: &Arc<Context>, rng: &mut SmallRng) {
    let stream = Stream::new(ctx).unwrap();
    for (i, &(rows, c)) in SHAPES.iter().enumerate() {
        for offset in [0usize, 1] {
            // GPT-2's use (residual, weight, bias, dh accumulated), then a rotating variant.
            case::<T>(ctx, &stream, rng, rows, c, offset, 0b0_1111);
            case::<T>(
                ctx,
                &stream,
                rng,
                rows,
                c,
                offset,
                (i as u32 * 7 + offset as u32) % 32,
            );
        }
    }
}

#[test]
fn layernorm_kernels_match_the_cpu_twins() {
    if skip_without_gpu("layernorm") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x1a7e_0f00);
    check::<f32>(&ctx, &mut rng);
    check::<bf16>(&ctx, &mut rng);
    check::<f16>(&ctx, &mut rng);
}

#[test]
fn bad_shapes_and_spans_are_errors() {
    if skip_without_gpu("layernorm spans") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let x = DeviceBuffer::alloc(&ctx, 64 * 4).unwrap();
    let mut y = DeviceBuffer::alloc(&ctx, 64 * 4).unwrap();
    let (mut m, mut s) = (
        DeviceBuffer::alloc(&ctx, 64 * 4).unwrap(),
        DeviceBuffer::alloc(&ctx, 64 * 4).unwrap(),
    );
    let mut run = |shape: LayerNormShape, n: usize| {
        layernorm::gpu_layer_norm_forward::<f32, f32>(
            &stream,
            &shape,
            x.as_span::<f32>().unwrap().slice(..n).unwrap(),
            None,
            None,
            None,
            y.as_span_mut().unwrap(),
            m.as_span_mut().unwrap(),
            s.as_span_mut().unwrap(),
        )
    };
    assert!(run(LayerNormShape::new(4, 16), 64).is_ok());
    assert!(run(LayerNormShape::new(4, 16), 63).is_err(), "short x");
    assert!(run(LayerNormShape::new(4, 0), 0).is_err(), "C = 0");
    assert!(
        run(LayerNormShape::new(1, MAX_COLS + 1), 64).is_err(),
        "C too large"
    );
    assert!(
        run(LayerNormShape::new(usize::MAX, 2), 64).is_err(),
        "overflow"
    );
    let mut dh = DeviceBuffer::alloc(&ctx, 64 * 4).unwrap();
    let mut ws = DeviceBuffer::alloc(&ctx, 4).unwrap();
    let short_ws = layernorm::gpu_layer_norm_backward::<f32, f32>(
        &stream,
        &LayerNormShape::new(4, 16),
        x.as_span().unwrap(),
        x.as_span().unwrap(),
        None,
        m.as_span().unwrap(),
        s.as_span().unwrap(),
        dh.as_span_mut().unwrap(),
        None,
        None,
        Accumulate::default(),
        ws.as_span_mut().unwrap(),
    );
    assert!(short_ws.is_err(), "short workspace");
}

/// f32 rows with a narrower `O` output (forward) or output gradient (backward): `y` is the
/// f32 kernel's `y` rounded once to `O`, and the backward on `dy` in `O` gives the f32
/// kernel's gradients on `dy` widened to f32, bit for bit (the same sums in the same order),
/// over the shapes above, aligned and misaligned `O` buffers (the 16-bit operands 2-byte
/// aligned only: the element-wise loads against the f32 kernel's vectors).
fn narrow_case<O: Float>(
    ctx: &Arc<Context>,
    stream: &Stream,
    rng: &mut SmallRng,
    rows: usize,
    c: usize,
    off: usize,
) {
    let len = rows * c;
    let shape = LayerNormShape {
        rows,
        cols: c,
        eps: 1e-5,
    };
    let x = random::<f32>(rng, len, 1.0);
    let (w, b) = (random::<f32>(rng, c, 0.0), random::<f32>(rng, c, 0.0));
    let dy_o = random::<O>(rng, len, 0.0);
    let dy_f: Vec<f32> = dy_o.iter().map(|v| v.to_f64() as f32).collect();
    let dh0 = random::<f32>(rng, len, 0.0);
    let (gx, gw, gb) = (
        upload(ctx, &x, 0, 0.0f32),
        upload(ctx, &w, 0, 0.0f32),
        upload(ctx, &b, 0, 0.0f32),
    );
    let stats = || DeviceBuffer::alloc(ctx, rows * 4 + 4).unwrap();
    // Forward: f32 output, then O output.
    let (mut gm, mut gs) = (stats(), stats());
    let mut gy = DeviceBuffer::alloc(ctx, len * 4 + 4).unwrap();
    layernorm::gpu_layer_norm_forward::<f32, f32>(
        stream,
        &shape,
        sp(&gx, 0, len),
        None,
        Some(sp(&gw, 0, c)),
        Some(sp(&gb, 0, c)),
        sp_mut(&mut gy, 0, len),
        sp_mut(&mut gm, 0, rows),
        sp_mut(&mut gs, 0, rows),
    )
    .unwrap();
    let (mut gm2, mut gs2) = (stats(), stats());
    let mut gyo = upload(ctx, &vec![O::default(); len], off, O::default());
    layernorm::gpu_layer_norm_forward::<f32, O>(
        stream,
        &shape,
        sp(&gx, 0, len),
        None,
        Some(sp(&gw, 0, c)),
        Some(sp(&gb, 0, c)),
        sp_mut(&mut gyo, off, len),
        sp_mut(&mut gm2, 0, rows),
        sp_mut(&mut gs2, 0, rows),
    )
    .unwrap();
    stream.synchronize().unwrap();
    let y: Vec<f32> = download(&gy, 0, len);
    let yo: Vec<O> = download(&gyo, off, len);
    let ctx_s = format!("{} rows {rows} C {c} offset {off}", O::NAME);
    for (i, (a, e)) in yo.iter().zip(&y).enumerate() {
        let want = O::of_acc(*e);
        assert!(
            bytes_of(&[*a]) == bytes_of(&[want]),
            "{ctx_s}: y[{i}] {a:?}, the f32 kernel's rounded {want:?}"
        );
    }
    assert_eq!(
        download::<f32>(&gm2, 0, rows),
        download::<f32>(&gm, 0, rows),
        "{ctx_s}: mean"
    );
    assert_eq!(
        download::<f32>(&gs2, 0, rows),
        download::<f32>(&gs, 0, rows),
        "{ctx_s}: rstd"
    );
    // Backward, accumulating dh (GPT-2's use): dy widened to f32 against dy in O.
    let ws_len = layernorm::backward_workspace_bytes(&shape).max(4);
    let bwd = |dy: &DeviceBuffer, narrow: bool| {
        let mut gdh = upload(ctx, &dh0, 0, 0.0f32);
        let (mut gdw, mut gdb) = (
            DeviceBuffer::alloc(ctx, c * 4).unwrap(),
            DeviceBuffer::alloc(ctx, c * 4).unwrap(),
        );
        let mut ws = DeviceBuffer::alloc(ctx, ws_len).unwrap();
        let acc = Accumulate {
            dh: true,
            params: false,
        };
        let (h, wv) = (sp::<f32>(&gx, 0, len), Some(sp::<f32>(&gw, 0, c)));
        let (m, s) = (gm.as_span().unwrap(), gs.as_span().unwrap());
        let outs = (
            sp_mut(&mut gdh, 0, len),
            Some(sp_mut(&mut gdw, 0, c)),
            Some(sp_mut(&mut gdb, 0, c)),
        );
        let wsp = ws.as_span_mut().unwrap();
        // The narrow backward also writes dh rounded to O (at the O buffers' offset) and the
        // copy's column sums; the wide one dh's column sums (f32).
        let mut gcopy = upload(ctx, &vec![O::default(); len], off, O::default());
        let mut gsum = upload(ctx, &vec![O::default(); c], off, O::default());
        let mut gsum_f = DeviceBuffer::alloc(ctx, c * 4).unwrap();
        // Column sums up to MAX_SUM_COLS; beyond it, asking for them is an error.
        let sums = c <= layernorm::MAX_SUM_COLS;
        if !sums && !narrow {
            let mut ws = DeviceBuffer::alloc(ctx, ws_len).unwrap();
            let mut gdh = upload(ctx, &dh0, 0, 0.0f32);
            let e = layernorm::gpu_layer_norm_backward_copy::<f32, f32>(
                stream,
                &shape,
                sp(dy, 0, len),
                sp::<f32>(&gx, 0, len),
                None,
                gm.as_span().unwrap(),
                gs.as_span().unwrap(),
                sp_mut(&mut gdh, 0, len),
                None,
                Some(sp_mut(&mut gsum_f, 0, c)),
                None,
                None,
                acc,
                ws.as_span_mut().unwrap(),
            );
            assert!(e.is_err(), "column sums of {c} columns");
        }
        if narrow {
            layernorm::gpu_layer_norm_backward_copy::<f32, O>(
                stream,
                &shape,
                sp(dy, off, len),
                h,
                wv,
                m,
                s,
                outs.0,
                Some(sp_mut(&mut gcopy, off, len)),
                sums.then(|| sp_mut(&mut gsum, off, c)),
                outs.1,
                outs.2,
                acc,
                wsp,
            )
        } else {
            layernorm::gpu_layer_norm_backward_copy::<f32, f32>(
                stream,
                &shape,
                sp(dy, 0, len),
                h,
                wv,
                m,
                s,
                outs.0,
                None,
                sums.then(|| sp_mut(&mut gsum_f, 0, c)),
                outs.1,
                outs.2,
                acc,
                wsp,
            )
        }
        .unwrap();
        stream.synchronize().unwrap();
        let dh = download::<f32>(&gdh, 0, len);
        if narrow && sums {
            let copy: Vec<O> = download(&gcopy, off, len);
            for (i, (a, e)) in copy.iter().zip(&dh).enumerate() {
                let want = O::of_acc(*e);
                assert!(
                    bytes_of(&[*a]) == bytes_of(&[want]),
                    "{} rows {rows} C {c} offset {off}: copy[{i}] {a:?}, dh rounded {want:?}",
                    O::NAME
                );
            }
            let got: Vec<O> = download(&gsum, off, c);
            let mut twin = vec![O::default(); c];
            layernorm::column_sums(&copy, &mut twin).unwrap();
            let unit = if O::NAME == "bf16" {
                2f64.powi(-8)
            } else {
                2f64.powi(-11)
            };
            check_sums(
                &copy,
                &got,
                &twin,
                unit,
                &format!("{} copy", O::NAME),
                rows,
                c,
            );
        } else if sums {
            let got: Vec<f32> = download(&gsum_f, 0, c);
            let mut twin = vec![0f32; c];
            layernorm::column_sums(&dh, &mut twin).unwrap();
            check_sums(&dh, &got, &twin, 2f64.powi(-24), "f32 dh", rows, c);
        }
        (dh, download::<f32>(&gdw, 0, c), download::<f32>(&gdb, 0, c))
    };
    let wide = bwd(&upload(ctx, &dy_f, 0, 0.0f32), false);
    let narrow = bwd(&upload(ctx, &dy_o, off, O::default()), true);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(bits(&narrow.0) == bits(&wide.0), "{ctx_s}: dh differs");
    assert!(bits(&narrow.1) == bits(&wide.1), "{ctx_s}: dw differs");
    assert!(bits(&narrow.2) == bits(&wide.2), "{ctx_s}: db differs");
}

/// The kernel's column sums `got` of `rows` (the gradient as stored) against the twin's:
/// within the sums' bound, `(8 + 2 sqrt(N)) 2^-24 sum |v|`, plus a rounding to the sums'
/// type (unit roundoff `unit`) on each side.
fn check_sums<V: Float, S: Float>(
    rows_v: &[V],
    got: &[S],
    twin: &[S],
    unit: f64,
    what: &str,
    rows: usize,
    c: usize,
) {
    let k = (8.0 + 2.0 * (rows as f64).sqrt()) * 2f64.powi(-24);
    for j in 0..c {
        let abs: f64 = rows_v
            .iter()
            .skip(j)
            .step_by(c)
            .map(|v| v.to_f64().abs())
            .sum();
        let (a, e) = (got[j].to_f64(), twin[j].to_f64());
        let tol = k * abs + 2.0 * unit * e.abs().max(a.abs()) + 1e-30;
        assert!(
            (a - e).abs() <= tol,
            "{what} rows {rows} C {c}: column {j} sum {a}, twin {e} (tolerance {tol})"
        );
    }
}

#[test]
fn narrow_output_and_gradient_of_f32_rows_match_the_f32_kernels() {
    if skip_without_gpu("layernorm") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x0b16_0f32);
    for &(rows, c) in SHAPES {
        for off in [0usize, 1] {
            narrow_case::<bf16>(&ctx, &stream, &mut rng, rows, c, off);
            narrow_case::<f16>(&ctx, &stream, &mut rng, rows, c, off);
        }
    }
    // Rows of other types do not take a narrower output: an error, not a launch.
    let shape = LayerNormShape {
        rows: 1,
        cols: 8,
        eps: 1e-5,
    };
    let (gx, mut gy, mut gm, mut gs) = (
        DeviceBuffer::alloc(&ctx, 64).unwrap(),
        DeviceBuffer::alloc(&ctx, 64).unwrap(),
        DeviceBuffer::alloc(&ctx, 8).unwrap(),
        DeviceBuffer::alloc(&ctx, 8).unwrap(),
    );
    let e = layernorm::gpu_layer_norm_forward::<bf16, f32>(
        &stream,
        &shape,
        sp(&gx, 0, 8),
        None,
        None,
        None,
        sp_mut(&mut gy, 0, 8),
        sp_mut(&mut gm, 0, 1),
        sp_mut(&mut gs, 0, 1),
    );
    assert!(e.is_err(), "bf16 rows with an f32 output");
}

/// f32 rows plus a residual of the narrower output type `O` (`ln_fwd_f32_<O>_r`: autocast's
/// residual stream): `h` and the statistics are the f32 kernel's with the residual widened to
/// f32 (bit for bit: the same f32 add), `y` its `y` rounded once to `O`; aligned and misaligned
/// `O` buffers (element-wise loads against vectors).
fn mixed_residual_case<O: Float>(
    ctx: &Arc<Context>,
    stream: &Stream,
    rng: &mut SmallRng,
    rows: usize,
    c: usize,
    off: usize,
) {
    let len = rows * c;
    let shape = LayerNormShape {
        rows,
        cols: c,
        eps: 1e-5,
    };
    let x = random::<f32>(rng, len, 1.0);
    let r_o = random::<O>(rng, len, 0.0);
    let r_f: Vec<f32> = r_o.iter().map(|v| v.to_f64() as f32).collect();
    let (w, b) = (random::<f32>(rng, c, 0.0), random::<f32>(rng, c, 0.0));
    let (gx, gw, gb) = (
        upload(ctx, &x, 0, 0.0f32),
        upload(ctx, &w, 0, 0.0f32),
        upload(ctx, &b, 0, 0.0f32),
    );
    let stats = || DeviceBuffer::alloc(ctx, rows * 4 + 4).unwrap();
    let f32_buf = || DeviceBuffer::alloc(ctx, len * 4 + 4).unwrap();
    // The f32 kernel on the widened residual.
    let (mut gm, mut gs, mut gh, mut gy) = (stats(), stats(), f32_buf(), f32_buf());
    let grf = upload(ctx, &r_f, 0, 0.0f32);
    layernorm::gpu_add_layer_norm_forward::<f32, f32, f32>(
        stream,
        &shape,
        sp(&gx, 0, len),
        sp(&grf, 0, len),
        sp_mut(&mut gh, 0, len),
        Some(sp(&gw, 0, c)),
        Some(sp(&gb, 0, c)),
        sp_mut(&mut gy, 0, len),
        sp_mut(&mut gm, 0, rows),
        sp_mut(&mut gs, 0, rows),
    )
    .unwrap();
    // The mixed kernel.
    let (mut gm2, mut gs2, mut gh2) = (stats(), stats(), f32_buf());
    let gro = upload(ctx, &r_o, off, O::default());
    let mut gyo = upload(ctx, &vec![O::default(); len], off, O::default());
    layernorm::gpu_add_layer_norm_forward::<f32, O, O>(
        stream,
        &shape,
        sp(&gx, 0, len),
        sp(&gro, off, len),
        sp_mut(&mut gh2, 0, len),
        Some(sp(&gw, 0, c)),
        Some(sp(&gb, 0, c)),
        sp_mut(&mut gyo, off, len),
        sp_mut(&mut gm2, 0, rows),
        sp_mut(&mut gs2, 0, rows),
    )
    .unwrap();
    stream.synchronize().unwrap();
    let ctx_s = format!("{} residual, rows {rows} C {c} offset {off}", O::NAME);
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(download(&gh2, 0, len)) == bits(download(&gh, 0, len)),
        "{ctx_s}: h"
    );
    let h: Vec<f32> = download(&gh, 0, len);
    for (i, want) in h.iter().enumerate() {
        assert_eq!(*want, x[i] + r_f[i], "{ctx_s}: h[{i}] is not the f32 sum");
    }
    assert!(
        bits(download(&gm2, 0, rows)) == bits(download(&gm, 0, rows)),
        "{ctx_s}: mean"
    );
    assert!(
        bits(download(&gs2, 0, rows)) == bits(download(&gs, 0, rows)),
        "{ctx_s}: rstd"
    );
    let y: Vec<f32> = download(&gy, 0, len);
    let yo: Vec<O> = download(&gyo, off, len);
    for (i, (a, e)) in yo.iter().zip(&y).enumerate() {
        let want = O::of_acc(*e);
        assert!(
            bytes_of(&[*a]) == bytes_of(&[want]),
            "{ctx_s}: y[{i}] {a:?}, the f32 kernel's rounded {want:?}"
        );
    }
}

#[test]
fn narrow_residual_of_f32_rows_matches_the_f32_kernel() {
    if skip_without_gpu("layernorm") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x0b16_0f33);
    for &(rows, c) in SHAPES {
        for off in [0usize, 1] {
            mixed_residual_case::<bf16>(&ctx, &stream, &mut rng, rows, c, off);
            mixed_residual_case::<f16>(&ctx, &stream, &mut rng, rows, c, off);
        }
    }
    // A residual of another type than the rows' or the output's: an error, not a launch.
    let shape = LayerNormShape::new(1, 8);
    let b = || DeviceBuffer::alloc(&ctx, 64).unwrap();
    let (gx, gr, mut gh, mut gy, mut gm, mut gs) = (b(), b(), b(), b(), b(), b());
    let e = layernorm::gpu_add_layer_norm_forward::<f32, f32, bf16>(
        &stream,
        &shape,
        sp(&gx, 0, 8),
        sp(&gr, 0, 8),
        sp_mut(&mut gh, 0, 8),
        None,
        None,
        sp_mut(&mut gy, 0, 8),
        sp_mut(&mut gm, 0, 1),
        sp_mut(&mut gs, 0, 1),
    );
    assert!(e.is_err(), "f32 rows and output with a bf16 residual");
}
