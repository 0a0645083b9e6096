//! The flash attention kernels against their CPU twins (`genesis_kernels::attention`): bf16 and
//! f16 with head dims 64 and 128, f32 with head dim 64, causal and not, `tq = tk` in {1, 17, 64, 127, 128, 200, 1024}
//! and `tq != tk`, a few batches and heads (and 70 000 of them), contiguous `[B, H, T, D]` and GPT-2's `[B, T, 3, H,
//! D]` (q, k, v read from one projection; o in `[B, T, H, D]`; dq, dk, dv written into one
//! `[B, T, 3, H, D]` gradient). Forward: `o` and `lse`; backward (fed the GPU forward's `o` and
//! `lse`, the twin too): `dq`, `dk`, `dv`, run twice and compared bit for bit (determinism).
//!
//! Tolerance (the module documentation's bound): a result `r = sum_n a_n b_n` whose factors `a`
//! the kernel rounds to T (`p` in `o` and `dv`, `ds` in `dq` and `dk`) differs from the twin's
//! f32 value by at most `u S` with `u` T's unit roundoff (2^-8 bf16, 2^-11 f16) and
//! `S = sum_n |a_n b_n|` (computed here in f64: `sum_j p_ij |v_jc|`, `sum_i p_ij |do_ic|`,
//! `scale sum_j |ds_ij k_jc|`, `scale sum_i |ds_ij q_ic|`), plus both results' rounding to T
//! (`u |r|` each) and f32 accumulation (far smaller): we check
//! `|gpu - twin| <= 2 u (|twin| + S) + 2^-14 max |twin|` (the last term: f16's subnormal `p`
//! and `ds`, whose error is absolute). `lse` is f32 from f32 scores summed in another order:
//! `|gpu - twin| <= 1e-4 (1 + |twin|)` (a wrong mask, scale or layout moves it by O(1)).
//! Elements no kernel writes (GPT-2's gaps, none here, and a tail past every output) must keep
//! their sentinel.
//!
//! Debug builds run the twins slowly; `cargo test --release -p genesis-kernels --features cuda
//! --test gpu_attention` takes seconds.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, DeviceSpanMut, Stream, skip_without_gpu};
use genesis_kernels::Element;
use genesis_kernels::attention::{self, AttentionShape, BackwardStrides, ForwardStrides, Strides};
use genesis_kernels::real::FusedElement;
use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{bytes_of, from_bytes};

/// Elements past every output's reach, checked to keep their sentinel.
const TAIL: usize = 64;

trait Half: FusedElement<Acc = f32> + Default {
    /// Unit roundoff.
    const U: f64;
    /// The absolute floor of the bound, relative to the largest result.
    const FLOOR: f64 = 1.0 / 16384.0;
    fn of(x: f64) -> Self {
        Self::from_f64(x)
    }
    fn sentinel() -> Self;
}
impl Half for bf16 {
    const U: f64 = 1.0 / 256.0;
    fn sentinel() -> Self {
        bf16::from_f32(12345.0)
    }
}
impl Half for f16 {
    const U: f64 = 1.0 / 2048.0;
    fn sentinel() -> Self {
        f16::from_f32(12345.0)
    }
}
/// f32 (`attention_f32.cu`, head dim 64): each product as three TF32 products (within about
/// 3 x 2^-22 of the f32 product), sums in f32 in other orders than the twin's, `exp2f`; a few
/// units of 2^-22 of `S` (2^-20 here; a wrong mask, scale or layout moves a result by O(1)).
impl Half for f32 {
    const U: f64 = 1.0 / 1_048_576.0;
    const FLOOR: f64 = 1.0 / 16_777_216.0;
    fn sentinel() -> Self {
        12345.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    /// Each tensor `[B, H, T, D]`.
    Bhtd,
    /// q, k, v in one `[B, T, 3, H, D]`, o and dout `[B, T, H, D]`, dq, dk, dv in one
    /// `[B, T, 3, H, D]` (needs tq == tk).
    Gpt2,
}

/// One case: the shape, the strides, and where q, k, v (dq, dk, dv) start in their buffer.
struct Case {
    sh: AttentionShape,
    bs: BackwardStrides,
    /// Element offsets of q, k, v in `qkv` and of dq, dk, dv in the gradient buffer.
    at: [usize; 3],
    /// Lengths of the q/k/v buffer (and of the gradient buffer, laid out alike) and of o.
    qkv_len: usize,
    o_len: usize,
    /// Key j's row scaled by 1 + key_ramp j: scores that grow along the keys, so that a row's
    /// running maximum keeps moving far (the forward's rescaling of O).
    key_ramp: f64,
}

impl Case {
    fn new(sh: AttentionShape, layout: Layout) -> Case {
        let (h, d) = (sh.heads, sh.head_dim);
        match layout {
            Layout::Bhtd => {
                let (sq, sk) = (Strides::bhtd(h, sh.tq, d), Strides::bhtd(h, sh.tk, d));
                let nq = sh.batch * h * sh.tq * d;
                let nk = sh.batch * h * sh.tk * d;
                let fs = ForwardStrides {
                    q: sq,
                    k: sk,
                    v: sk,
                    o: sq,
                };
                Case {
                    sh,
                    bs: BackwardStrides::of(fs),
                    // q, k, v one after the other in one buffer.
                    at: [0, nq, nq + nk],
                    qkv_len: nq + 2 * nk,
                    o_len: nq,
                    key_ramp: 0.0,
                }
            }
            Layout::Gpt2 => {
                assert_eq!(sh.tq, sh.tk);
                let (t, c) = (sh.tq, h * d);
                let s3 = Strides {
                    batch: t * 3 * c,
                    head: d,
                    seq: 3 * c,
                };
                let so = Strides::bthd(h, t, d);
                let fs = ForwardStrides {
                    q: s3,
                    k: s3,
                    v: s3,
                    o: so,
                };
                Case {
                    sh,
                    bs: BackwardStrides::of(fs),
                    at: [0, c, 2 * c],
                    qkv_len: sh.batch * t * 3 * c,
                    o_len: sh.batch * t * c,
                    key_ramp: 0.0,
                }
            }
        }
    }
}

/// Every `(b, h, j)` below the bounds, in order.
fn every_row(b: usize, h: usize, t: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..b).flat_map(move |bi| (0..h).flat_map(move |hi| (0..t).map(move |ti| (bi, hi, ti))))
}

fn upload<T: Copy>(ctx: &Arc<Context>, v: &[T]) -> DeviceBuffer {
    DeviceBuffer::from_host(ctx, bytes_of(v)).unwrap()
}

fn download<T: Copy + Default>(b: &DeviceBuffer) -> Vec<T> {
    from_bytes(&b.to_host_vec().unwrap())
}

/// The sums `S` of the tolerance (see the top), in f64, laid out like o (`s_o`, `s_dq`) and the
/// gradient buffer (`s_dk`, `s_dv`).
struct Sums {
    o: Vec<f64>,
    grad: Vec<f64>,
}

fn sums<T: Half>(c: &Case, qkv: &[T], o: &[T], dout: &[T], lse: &[f32], grad_len: usize) -> Sums {
    let (sh, s) = (&c.sh, &c.bs);
    let d = sh.head_dim;
    let f = |x: T| x.to_f64();
    let scale = f64::from(sh.scale);
    let mut so = vec![0.0; o.len()];
    let mut sg = vec![0.0; grad_len];
    let idx = |st: Strides, b: usize, h: usize, t: usize| b * st.batch + h * st.head + t * st.seq;
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for i in 0..sh.tq {
                let li = f64::from(lse[(b * sh.heads + h) * sh.tq + i]);
                let qi = c.at[0] + idx(s.q, b, h, i);
                let oi = idx(s.o, b, h, i);
                let di_at = idx(s.dout, b, h, i);
                let di: f64 = (0..d).map(|x| f(o[oi + x]) * f(dout[di_at + x])).sum();
                let n = if sh.causal { sh.tk.min(i + 1) } else { sh.tk };
                for j in 0..n {
                    let kj = c.at[1] + idx(s.k, b, h, j);
                    let vj = c.at[2] + idx(s.v, b, h, j);
                    let x: f64 = (0..d).map(|x| f(qkv[qi + x]) * f(qkv[kj + x])).sum();
                    let p = (scale * x - li).exp();
                    let dp: f64 = (0..d).map(|x| f(dout[di_at + x]) * f(qkv[vj + x])).sum();
                    let ds = (p * (dp - di)).abs() * scale;
                    let (dqi, dkj, dvj) = (
                        c.at[0] + idx(s.dq, b, h, i),
                        c.at[1] + idx(s.dk, b, h, j),
                        c.at[2] + idx(s.dv, b, h, j),
                    );
                    for x in 0..d {
                        so[oi + x] += p * f(qkv[vj + x]).abs();
                        sg[dqi + x] += ds * f(qkv[kj + x]).abs();
                        sg[dkj + x] += ds * f(qkv[qi + x]).abs();
                        sg[dvj + x] += p * f(dout[di_at + x]).abs();
                    }
                }
            }
        }
    }
    Sums { o: so, grad: sg }
}

fn compare<T: Half>(what: &str, got: &[T], want: &[T], s: &[f64]) {
    assert_eq!(got.len(), want.len());
    let max = want
        .iter()
        .map(|x| x.to_f64().abs())
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w == T::sentinel() || g == T::sentinel() {
            assert!(g == w, "{what}: element {i}: {g:?}, want {w:?} (sentinel)");
            continue;
        }
        let (gf, wf) = (g.to_f64(), w.to_f64());
        let tol = 2.0 * T::U * (wf.abs() + s[i]) + max * T::FLOOR;
        assert!(
            (gf - wf).abs() <= tol,
            "{what}: element {i}: gpu {gf}, twin {wf} (tol {tol}, S {})",
            s[i]
        );
    }
}

/// `n` elements of `T` from element `at` of `b`, writable, with no borrow of `b`.
///
/// # Safety
///
/// `b` outlives the span's use; views that overlap are written at disjoint elements only.
unsafe fn raw_mut<'a, T>(b: &'a DeviceBuffer, at: usize, n: usize) -> DeviceSpanMut<'a, T> {
    assert!((at + n) * size_of::<T>() <= b.len());
    // SAFETY: the caller's contract; the range lies inside the buffer.
    unsafe { DeviceSpanMut::from_raw(b.device_ptr() + (at * size_of::<T>()) as u64, n) }
}

fn same_bits<T: Element>(a: T, b: T) -> bool {
    a.to_f64().to_bits() == b.to_f64().to_bits()
}

fn run_case<T: Half>(ctx: &Arc<Context>, stream: &Stream, rng: &mut SmallRng, c: &Case) {
    let sh = &c.sh;
    let what = format!("{} {:?}", T::NAME, sh);
    let fs = ForwardStrides {
        q: c.bs.q,
        k: c.bs.k,
        v: c.bs.v,
        o: c.bs.o,
    };
    let mut qkv: Vec<T> = (0..c.qkv_len)
        .map(|_| T::of(rng.random_range(-2.0..2.0)))
        .collect();
    if c.key_ramp != 0.0 {
        let st = c.bs.k;
        for (b, h, j) in every_row(sh.batch, sh.heads, sh.tk) {
            let at = c.at[1] + b * st.batch + h * st.head + j * st.seq;
            for x in &mut qkv[at..at + sh.head_dim] {
                *x = T::of(x.to_f64() * (1.0 + c.key_ramp * j as f64));
            }
        }
    }
    let dout: Vec<T> = (0..c.o_len)
        .map(|_| T::of(rng.random_range(-1.0..1.0)))
        .collect();
    let lse_len = sh.lse_len().unwrap();
    let d_qkv = upload(ctx, &qkv);
    let d_dout = upload(ctx, &dout);
    let o_init = vec![T::sentinel(); c.o_len + TAIL];
    let mut d_o = upload(ctx, &o_init);
    let mut d_lse = upload(ctx, &vec![f32::NAN; lse_len + TAIL]);
    // q, k, v: from their offsets to the end of the buffer.
    let input = |i: usize| d_qkv.as_span::<T>().unwrap().slice(c.at[i]..).unwrap();
    attention::gpu_attention_forward::<T>(
        stream,
        sh,
        &fs,
        input(0),
        input(1),
        input(2),
        d_o.as_span_mut::<T>().unwrap(),
        d_lse.as_span_mut::<f32>().unwrap(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    // On Hopper head dim 64 runs the wgmma forward unless the thread forces the mma.sync one.
    let ran = attention::last_attention_kernel().unwrap_or("");
    let f32 = T::NAME == "f32";
    if sh.batch * sh.heads > 0 && sh.tq > 0 {
        let sm90 = ctx.compute_capability() == (9, 0) && !forced_sm80() && !f32;
        assert_eq!(ran.starts_with("attn_fwd_sm90_"), sm90, "{what}: ran {ran}");
        assert_eq!(ran == "attn_fwd_f32_d64", f32, "{what}: ran {ran}");
    }
    let o_gpu: Vec<T> = download(&d_o);
    let lse_gpu: Vec<f32> = download(&d_lse);
    assert!(
        lse_gpu[lse_len..].iter().all(|x| x.is_nan()),
        "{what}: lse written past its end"
    );

    let mut o_twin = o_init.clone();
    let mut lse_twin = vec![f32::NAN; lse_len];
    attention::attention_forward(
        sh,
        &fs,
        &qkv[c.at[0]..],
        &qkv[c.at[1]..],
        &qkv[c.at[2]..],
        &mut o_twin,
        &mut lse_twin,
    )
    .unwrap();
    for (i, (&g, &w)) in lse_gpu.iter().zip(&lse_twin).enumerate() {
        let (g, w) = (f64::from(g), f64::from(w));
        assert!(
            g == w || (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: lse[{i}]: gpu {g}, twin {w}"
        );
    }
    // Backward sums, fed the GPU's o and lse (as both backwards are).
    let grad_len = c.qkv_len;
    let s = sums(c, &qkv, &o_gpu, &dout, &lse_gpu, grad_len);
    let mut s_o = s.o;
    s_o.resize(o_gpu.len(), 0.0);
    compare(&format!("{what}: o"), &o_gpu, &o_twin, &s_o);

    // dq, dk, dv live in one buffer laid out like q, k, v (GPT-2: interleaved rows).
    let grad_init = vec![T::sentinel(); grad_len + TAIL];
    let mut ws = DeviceBuffer::alloc(ctx, attention::backward_workspace_bytes(sh).max(4)).unwrap();
    let mut results: Vec<Vec<T>> = Vec::new();
    for _ in 0..2 {
        let d_grad = upload(ctx, &grad_init);
        let total = grad_len + TAIL;
        // SAFETY: `d_grad` outlives the launch (synchronised below); the kernels write dq, dk
        // and dv at disjoint elements of it.
        let (dq, dk, dv) = unsafe {
            (
                raw_mut::<T>(&d_grad, c.at[0], total - c.at[0]),
                raw_mut::<T>(&d_grad, c.at[1], total - c.at[1]),
                raw_mut::<T>(&d_grad, c.at[2], total - c.at[2]),
            )
        };
        attention::gpu_attention_backward::<T>(
            stream,
            sh,
            &c.bs,
            input(0),
            input(1),
            input(2),
            d_o.as_span::<T>().unwrap(),
            d_dout.as_span::<T>().unwrap(),
            d_lse.as_span::<f32>().unwrap(),
            dq,
            dk,
            dv,
            ws.as_span_mut::<u8>().unwrap(),
        )
        .unwrap();
        stream.synchronize().unwrap();
        // The dQ kernel is the last launch: on Hopper, head dim 64's runs on wgmma.
        if sh.batch * sh.heads > 0 && sh.tq > 0 {
            let ran = attention::last_attention_kernel().unwrap_or("");
            let sm90 = ctx.compute_capability() == (9, 0) && !forced_sm80() && !f32;
            assert_eq!(
                ran.starts_with("attn_bwd_dq_sm90_"),
                sm90,
                "{what}: ran {ran}"
            );
            let cc = ctx.compute_capability();
            let planes = cc == (8, 0) || cc.0 == 9 || cc.0 == 10;
            let f32_dq = if planes && !forced_sm80() {
                "attn_bwd_dq_planes_f32_d64"
            } else {
                "attn_bwd_dq_f32_d64"
            };
            assert_eq!(ran == f32_dq, f32, "{what}: ran {ran}");
        }
        results.push(download(&d_grad));
    }
    assert!(
        results[0]
            .iter()
            .zip(&results[1])
            .all(|(&a, &b)| same_bits(a, b)),
        "{what}: the backward is not deterministic"
    );

    // The twin writes dq, dk, dv into three copies, merged (each element written by one).
    let (mut dq, mut dk, mut dv) = (grad_init.clone(), grad_init.clone(), grad_init.clone());
    attention::attention_backward(
        sh,
        &c.bs,
        &qkv[c.at[0]..],
        &qkv[c.at[1]..],
        &qkv[c.at[2]..],
        &o_gpu,
        &dout,
        &lse_gpu[..lse_len],
        &mut dq[c.at[0]..],
        &mut dk[c.at[1]..],
        &mut dv[c.at[2]..],
    )
    .unwrap();
    let mut grad_twin = grad_init;
    for (i, g) in grad_twin.iter_mut().enumerate() {
        for src in [&dq, &dk, &dv] {
            if !same_bits(src[i], T::sentinel()) {
                *g = src[i];
            }
        }
    }
    let mut sg = s.grad;
    sg.resize(grad_twin.len(), 0.0);
    compare(&format!("{what}: dq/dk/dv"), &results[0], &grad_twin, &sg);
}

fn run_all<T: Half>(ctx: &Arc<Context>, stream: &Stream, dims: &[usize]) {
    let mut rng = SmallRng::seed_from_u64(7);
    for &d in dims {
        for causal in [false, true] {
            for t in [1, 17, 64, 127, 128, 200, 1024] {
                let layouts: &[Layout] = if t == 1024 {
                    &[Layout::Bhtd]
                } else {
                    &[Layout::Bhtd, Layout::Gpt2]
                };
                for &layout in layouts {
                    let (b, h) = if t >= 1024 { (1, 1) } else { (2, 3) };
                    let sh = AttentionShape::new(b, h, t, t, d, causal);
                    run_case::<T>(ctx, stream, &mut rng, &Case::new(sh, layout));
                }
            }
            for (tq, tk) in [(100, 300), (300, 100), (65, 0), (0, 70)] {
                let sh = AttentionShape::new(2, 2, tq, tk, d, causal);
                run_case::<T>(ctx, stream, &mut rng, &Case::new(sh, Layout::Bhtd));
            }
            // Non-default scales: a negative one reverses which score is a row's maximum,
            // and 0 makes every visible key's weight equal.
            for scale in [0.3, -0.3, 0.0] {
                let mut sh = AttentionShape::new(1, 2, 130, 130, d, causal);
                sh.scale = scale;
                run_case::<T>(ctx, stream, &mut rng, &Case::new(sh, Layout::Gpt2));
            }
            // Scores growing along the keys (a row's maximum moves by far more than the
            // forward's rescaling threshold, tile after tile), and shrinking ones.
            for ramp in [0.05, -0.004] {
                let sh = AttentionShape::new(1, 2, 250, 250, d, causal);
                let mut c = Case::new(sh, Layout::Bhtd);
                c.key_ramp = ramp;
                run_case::<T>(ctx, stream, &mut rng, &c);
            }
        }
    }
    // More (b, h) than a grid's y dimension holds (65535): blocks stride over them.
    let sh = AttentionShape::new(2, 35_000, 3, 3, 64, true);
    run_case::<T>(ctx, stream, &mut rng, &Case::new(sh, Layout::Gpt2));
}

#[test]
fn attention_bf16_matches_twin() {
    if skip_without_gpu("attention bf16") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    run_all::<bf16>(&ctx, &stream, &[64, 128]);
}

#[test]
fn attention_f16_matches_twin() {
    if skip_without_gpu("attention f16") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    run_all::<f16>(&ctx, &stream, &[64, 128]);
}

/// f32, head dim 64 (`attention_f32.cu`); head dim 128 in f32 is a typed error, nothing
/// launched.
#[test]
fn attention_f32_matches_twin() {
    if skip_without_gpu("attention f32") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    run_all::<f32>(&ctx, &stream, &[64]);
    let sh = AttentionShape::new(1, 1, 8, 8, 128, false);
    let c = Case::new(sh, Layout::Bhtd);
    let fs = ForwardStrides {
        q: c.bs.q,
        k: c.bs.k,
        v: c.bs.v,
        o: c.bs.o,
    };
    let x = upload(&ctx, &vec![0.5f32; c.qkv_len]);
    let mut o = upload(&ctx, &vec![0f32; c.o_len]);
    let mut lse = upload(&ctx, &[0f32; 8]);
    let span = |i: usize| x.as_span::<f32>().unwrap().slice(c.at[i]..).unwrap();
    let err = attention::gpu_attention_forward::<f32>(
        &stream,
        &sh,
        &fs,
        span(0),
        span(1),
        span(2),
        o.as_span_mut::<f32>().unwrap(),
        lse.as_span_mut::<f32>().unwrap(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("head_dim 128"), "{err}");
}

/// A few small cases of head dim 64 (both layouts, causal or not, edges of the 128-row query
/// and 64-key tiles) in bf16 and f32 (f32 also on the kernels of 99 KiB blocks), and of head
/// dim 128 in bf16 and f16, for compute-sanitizer runs of the Hopper kernels and of the f32
/// ones (`gpu_attention small_head_dim`).
#[test]
fn small_head_dim_64_cases() {
    if skip_without_gpu("attention small head dim 64 cases") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    for causal in [false, true] {
        for (tq, tk) in [(17, 17), (130, 130), (200, 70), (64, 193)] {
            for layout in [Layout::Bhtd, Layout::Gpt2] {
                let layout = if tq == tk { layout } else { Layout::Bhtd };
                let sh = AttentionShape::new(1, 2, tq, tk, 64, causal);
                run_case::<bf16>(&ctx, &stream, &mut rng, &Case::new(sh, layout));
                run_case::<f32>(&ctx, &stream, &mut rng, &Case::new(sh, layout));
                // f32's backward kernels of 99 KiB blocks (compute capability 8.6 and 8.9).
                attention::force_sm80_attention_on_thread(true);
                FORCED.with(|f| f.set(true));
                run_case::<f32>(&ctx, &stream, &mut rng, &Case::new(sh, layout));
                attention::force_sm80_attention_on_thread(false);
                FORCED.with(|f| f.set(false));
            }
        }
    }
}

/// The small cases of [`small_head_dim_64_cases`] at head dim 128 (two 64-column panels a row
/// on Hopper) in bf16 and f16.
#[test]
fn small_head_dim_128_cases() {
    if skip_without_gpu("attention small head dim 128 cases") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let mut rng = SmallRng::seed_from_u64(12);
    for causal in [false, true] {
        for (tq, tk) in [(17, 17), (130, 130), (200, 70), (64, 193)] {
            for layout in [Layout::Bhtd, Layout::Gpt2] {
                let layout = if tq == tk { layout } else { Layout::Bhtd };
                let sh = AttentionShape::new(1, 2, tq, tk, 128, causal);
                run_case::<bf16>(&ctx, &stream, &mut rng, &Case::new(sh, layout));
                run_case::<f16>(&ctx, &stream, &mut rng, &Case::new(sh, layout));
            }
        }
    }
}

thread_local! {
    static FORCED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn forced_sm80() -> bool {
    FORCED.with(|f| f.get())
}

/// On Hopper, the mma.sync kernels (what Ampere and Ada run) on the same cases, and f32's
/// backward kernels of 99 KiB blocks (what compute capability 8.6 and 8.9 run).
#[test]
fn attention_sm80_kernels_match_twin_on_hopper() {
    if skip_without_gpu("attention sm80 kernels on hopper") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    if ctx.compute_capability() != (9, 0) {
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    attention::force_sm80_attention_on_thread(true);
    FORCED.with(|f| f.set(true));
    run_all::<bf16>(&ctx, &stream, &[64, 128]);
    run_all::<f16>(&ctx, &stream, &[64, 128]);
    run_all::<f32>(&ctx, &stream, &[64]);
    attention::force_sm80_attention_on_thread(false);
    FORCED.with(|f| f.set(false));
}

/// Spans the launchers refuse before launching anything.
#[test]
fn attention_bad_spans() {
    if skip_without_gpu("attention bad spans") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let sh = AttentionShape::new(1, 2, 10, 10, 64, false);
    let n = 2 * 10 * 64;
    let s = Strides::bhtd(2, 10, 64);
    let fs = ForwardStrides {
        q: s,
        k: s,
        v: s,
        o: s,
    };
    let x = DeviceBuffer::alloc(&ctx, (n + 8) * 2).unwrap();
    let mut o = DeviceBuffer::alloc(&ctx, n * 2).unwrap();
    let mut lse = DeviceBuffer::alloc(&ctx, 20 * 4).unwrap();
    let xs = x.as_span::<bf16>().unwrap();
    // Short q.
    let err = attention::gpu_attention_forward::<bf16>(
        &stream,
        &sh,
        &fs,
        xs.slice(..n - 1).unwrap(),
        xs,
        xs,
        o.as_span_mut().unwrap(),
        lse.as_span_mut().unwrap(),
    );
    assert!(err.is_err());
    // Misaligned k (2 bytes in).
    let err = attention::gpu_attention_forward::<bf16>(
        &stream,
        &sh,
        &fs,
        xs,
        xs.slice(1..).unwrap(),
        xs,
        o.as_span_mut().unwrap(),
        lse.as_span_mut().unwrap(),
    );
    assert!(err.is_err());
    // Head dim 32, and f32.
    let sh32 = AttentionShape::new(1, 2, 10, 10, 32, false);
    let err = attention::gpu_attention_forward::<bf16>(
        &stream,
        &sh32,
        &fs,
        xs,
        xs,
        xs,
        o.as_span_mut().unwrap(),
        lse.as_span_mut().unwrap(),
    );
    assert!(err.is_err());
    let xf = x.as_span::<f32>().unwrap();
    let err = attention::gpu_attention_forward::<f32>(
        &stream,
        &sh,
        &fs,
        xf,
        xf,
        xf,
        o.as_span_mut().unwrap(),
        lse.as_span_mut().unwrap(),
    );
    assert!(err.is_err());
}
