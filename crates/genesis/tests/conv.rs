//! The ops of convolutional networks, convolution, pooling and batch normalisation, against
//! direct loops written from PyTorch's definitions (in float64): generated shapes, strides,
//! paddings, dilations, groups, `ceil_mode`, training and evaluation, the values, the
//! gradients of every input and the running statistics, on every device; and the arguments
//! PyTorch refuses, refused with an error.

use genesis::{ConvOptions, DType, Device, PoolOptions, Tensor};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::devices;

fn randv(rng: &mut SmallRng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()
}

/// Small integers: windows with ties, for the max's gradient rule.
fn tied(rng: &mut SmallRng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-2..3) as f64).collect()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// PyTorch's output length (floor or ceil mode).
fn out_len(len: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    let span = d * (k - 1) + 1;
    if len + 2 * p < span {
        return None;
    }
    let num = len + 2 * p - span;
    let mut out = if ceil { num.div_ceil(s) } else { num / s } + 1;
    if ceil && (out - 1) * s >= len + p {
        out -= 1;
    }
    Some(out)
}

#[derive(Debug, Clone, Copy)]
struct ConvCase {
    n: usize,
    groups: usize,
    cg: usize,
    og: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    bias: bool,
}

impl ConvCase {
    fn random(rng: &mut SmallRng) -> ConvCase {
        ConvCase {
            n: rng.random_range(0..4).max(rng.random_range(0..2)),
            groups: rng.random_range(1..4),
            cg: rng.random_range(1..4),
            og: rng.random_range(1..4),
            h: rng.random_range(1..9),
            w: rng.random_range(1..9),
            k: [rng.random_range(1..5), rng.random_range(1..5)],
            s: [rng.random_range(1..4), rng.random_range(1..4)],
            p: [rng.random_range(0..3), rng.random_range(0..3)],
            d: [rng.random_range(1..3), rng.random_range(1..3)],
            bias: rng.random_bool(0.7),
        }
    }

    fn out(&self) -> Option<[usize; 2]> {
        Some([
            out_len(self.h, self.k[0], self.s[0], self.p[0], self.d[0], false)?,
            out_len(self.w, self.k[1], self.s[1], self.p[1], self.d[1], false)?,
        ])
    }

    fn opts(&self) -> ConvOptions {
        ConvOptions::new()
            .stride(self.s)
            .padding(self.p)
            .dilation(self.d)
            .groups(self.groups)
    }
}

/// The convolution's value and, for the upstream gradient `r`, the gradients of the input,
/// weight and bias, by direct loops.
#[allow(clippy::type_complexity)]
fn conv_ref(
    c: &ConvCase,
    x: &[f64],
    w: &[f64],
    b: &[f64],
    r: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let [oh, ow] = c.out().unwrap();
    let (cin, o) = (c.groups * c.cg, c.groups * c.og);
    let [kh, kw] = c.k;
    let mut y = vec![0.0; c.n * o * oh * ow];
    let mut gx = vec![0.0; x.len()];
    let mut gw = vec![0.0; w.len()];
    let mut gb = vec![0.0; o];
    for ni in 0..c.n {
        for oc in 0..o {
            let grp = oc / c.og;
            for yi in 0..oh {
                for xi in 0..ow {
                    let yidx = ((ni * o + oc) * oh + yi) * ow + xi;
                    let mut acc = if c.bias { b[oc] } else { 0.0 };
                    let up = r[yidx];
                    gb[oc] += up;
                    for ci in 0..c.cg {
                        let ic = grp * c.cg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (yi * c.s[0] + i * c.d[0]) as i64 - c.p[0] as i64;
                                let iw = (xi * c.s[1] + j * c.d[1]) as i64 - c.p[1] as i64;
                                if ih < 0 || iw < 0 || ih >= c.h as i64 || iw >= c.w as i64 {
                                    continue;
                                }
                                let xidx =
                                    ((ni * cin + ic) * c.h + ih as usize) * c.w + iw as usize;
                                let widx = ((oc * c.cg + ci) * kh + i) * kw + j;
                                acc += x[xidx] * w[widx];
                                gx[xidx] += up * w[widx];
                                gw[widx] += up * x[xidx];
                            }
                        }
                    }
                    y[yidx] = acc;
                }
            }
        }
    }
    (y, gx, gw, gb)
}

fn leaf(v: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    Tensor::from_slice(v, shape, device)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn grad(t: &Tensor) -> Vec<f64> {
    values(&t.grad().expect("a gradient"))
}

#[test]
fn conv2d_matches_direct_loops_in_value_and_gradient() {
    let mut rng = SmallRng::seed_from_u64(41);
    let mut checked = 0;
    for case in 0..300 {
        let c = ConvCase::random(&mut rng);
        let (cin, o) = (c.groups * c.cg, c.groups * c.og);
        let xs = [c.n, cin, c.h, c.w];
        let wsh = [o, c.cg, c.k[0], c.k[1]];
        let x = randv(&mut rng, xs.iter().product());
        let w = randv(&mut rng, wsh.iter().product());
        let b = randv(&mut rng, o);
        for device in devices() {
            let (xt, wt, bt) = (
                leaf(&x, &xs, DType::F64, device),
                leaf(&w, &wsh, DType::F64, device),
                leaf(&b, &[o], DType::F64, device),
            );
            let got = xt.conv2d(&wt, c.bias.then_some(&bt), c.opts());
            let Some([oh, ow]) = c.out() else {
                assert!(
                    got.is_err(),
                    "case {case} {c:?}: a window larger than the input"
                );
                continue;
            };
            let y = got.unwrap_or_else(|e| panic!("case {case} {c:?}: {e}"));
            assert_eq!(y.shape(), [c.n, o, oh, ow], "case {case} {c:?}");
            let r = randv(&mut SmallRng::seed_from_u64(case), y.numel());
            let (want, gx, gw, gb) = conv_ref(&c, &x, &w, &b, &r);
            close(
                &values(&y),
                &want,
                1e-10,
                &format!("case {case} {c:?} value"),
            );
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(
                &grad(&xt),
                &gx,
                1e-10,
                &format!("case {case} {c:?} input grad"),
            );
            close(
                &grad(&wt),
                &gw,
                1e-10,
                &format!("case {case} {c:?} weight grad"),
            );
            if c.bias {
                close(
                    &grad(&bt),
                    &gb,
                    1e-10,
                    &format!("case {case} {c:?} bias grad"),
                );
            } else {
                assert!(bt.grad().is_none());
            }
            checked += 1;
        }
    }
    assert!(checked > 150, "too few valid cases: {checked}");
}

#[test]
fn conv_takes_views_unbatched_inputs_lower_precision_and_one_dimension() {
    let mut rng = SmallRng::seed_from_u64(7);
    for device in devices() {
        // A transposed (non-contiguous) input and weight give what their copies give.
        let x = Tensor::from_slice(&randv(&mut rng, 2 * 3 * 6 * 5), [2, 3, 5, 6], device).unwrap();
        let xt = x.transpose(2, 3).unwrap();
        let w = Tensor::from_slice(&randv(&mut rng, 4 * 3 * 2 * 3), [4, 3, 3, 2], device).unwrap();
        let wt = w.transpose(2, 3).unwrap();
        let o = ConvOptions::new().padding(1).stride([2, 1]);
        let a = xt.conv2d(&wt, None, o).unwrap();
        let b = xt
            .contiguous()
            .unwrap()
            .conv2d(&wt.contiguous().unwrap(), None, o)
            .unwrap();
        close(&values(&a), &values(&b), 0.0, "views");
        // Unbatched: the batched result's first image.
        let one = xt.narrow(0, 0, 1).unwrap().squeeze(0).unwrap();
        let u = one.conv2d(&wt, None, o).unwrap();
        assert_eq!(u.shape(), &a.shape()[1..]);
        close(
            &values(&u),
            &values(&a.narrow(0, 0, 1).unwrap()),
            0.0,
            "unbatched",
        );
        // float32, float16 and bfloat16 follow float64 within their precision.
        let want = values(
            &xt.to_dtype(DType::F64)
                .unwrap()
                .conv2d(&wt.to_dtype(DType::F64).unwrap(), None, o)
                .unwrap(),
        );
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 6e-2)] {
            let y = xt
                .to_dtype(dtype)
                .unwrap()
                .conv2d(&wt.to_dtype(dtype).unwrap(), None, o)
                .unwrap();
            assert_eq!(y.dtype(), dtype);
            close(&values(&y), &want, tol, &format!("{dtype}"));
        }
        // conv1d is conv2d over a height of one.
        let s = Tensor::from_slice(&randv(&mut rng, 2 * 4 * 9), [2, 4, 9], device).unwrap();
        let k = Tensor::from_slice(&randv(&mut rng, 6 * 2 * 3), [6, 2, 3], device).unwrap();
        let bias = Tensor::from_slice(&randv(&mut rng, 6), [6], device).unwrap();
        let o1 = ConvOptions::new()
            .stride(2)
            .padding(2)
            .dilation(2)
            .groups(2);
        let y1 = s.conv1d(&k, Some(&bias), o1).unwrap();
        let y2 = s
            .unsqueeze(2)
            .unwrap()
            .conv2d(
                &k.unsqueeze(2).unwrap(),
                Some(&bias),
                ConvOptions::new()
                    .stride([1, 2])
                    .padding([0, 2])
                    .dilation([1, 2])
                    .groups(2),
            )
            .unwrap()
            .squeeze(2)
            .unwrap();
        assert_eq!(y1.shape(), [2, 6, 5]);
        close(&values(&y1), &values(&y2), 0.0, "conv1d");
        let u1 = s
            .narrow(0, 1, 1)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .conv1d(&k, Some(&bias), o1)
            .unwrap();
        close(
            &values(&u1),
            &values(&y1.narrow(0, 1, 1).unwrap()),
            0.0,
            "conv1d unbatched",
        );
    }
}

#[derive(Debug, Clone, Copy)]
struct PoolCase {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    ceil: bool,
    include_pad: bool,
    divisor: Option<usize>,
}

impl PoolCase {
    fn random(rng: &mut SmallRng, max: bool) -> PoolCase {
        let k = [rng.random_range(1..4), rng.random_range(1..4)];
        let d = if max {
            [rng.random_range(1..3), rng.random_range(1..3)]
        } else {
            [1, 1]
        };
        let span = |a: usize| d[a] * (k[a] - 1) + 1;
        PoolCase {
            n: rng.random_range(1..3),
            c: rng.random_range(1..3),
            h: rng.random_range(1..9),
            w: rng.random_range(1..9),
            k,
            s: [rng.random_range(1..4), rng.random_range(1..4)],
            p: [
                rng.random_range(0..=span(0) / 2),
                rng.random_range(0..=span(1) / 2),
            ],
            d,
            ceil: rng.random_bool(0.4),
            include_pad: rng.random_bool(0.6),
            divisor: rng.random_bool(0.15).then(|| rng.random_range(1..7)),
        }
    }

    fn out(&self) -> Option<[usize; 2]> {
        Some([
            out_len(
                self.h, self.k[0], self.s[0], self.p[0], self.d[0], self.ceil,
            )?,
            out_len(
                self.w, self.k[1], self.s[1], self.p[1], self.d[1], self.ceil,
            )?,
        ])
    }

    fn opts(&self) -> PoolOptions {
        let mut o = PoolOptions::new()
            .stride(self.s)
            .padding(self.p)
            .dilation(self.d)
            .ceil_mode(self.ceil)
            .count_include_pad(self.include_pad);
        if let Some(d) = self.divisor {
            o = o.divisor_override(d);
        }
        o
    }

    /// The input positions of output `(yi, xi)`'s window, row-major, `None` for padding.
    fn window(&self, yi: usize, xi: usize) -> Vec<Option<(usize, usize)>> {
        let mut v = Vec::new();
        for i in 0..self.k[0] {
            for j in 0..self.k[1] {
                let ih = (yi * self.s[0] + i * self.d[0]) as i64 - self.p[0] as i64;
                let iw = (xi * self.s[1] + j * self.d[1]) as i64 - self.p[1] as i64;
                v.push(
                    (ih >= 0 && iw >= 0 && ih < self.h as i64 && iw < self.w as i64)
                        .then_some((ih as usize, iw as usize)),
                );
            }
        }
        v
    }
}

/// Max pooling's value and input gradient for upstream `r`, PyTorch's loop: padding is
/// `-inf`, a strictly larger element (or a NaN) takes the place of the maximum.
fn max_ref(c: &PoolCase, x: &[f64], r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let [oh, ow] = c.out().unwrap();
    let (mut y, mut gx) = (Vec::new(), vec![0.0; x.len()]);
    for plane in 0..c.n * c.c {
        for yi in 0..oh {
            for xi in 0..ow {
                let mut best: Option<(f64, usize)> = None;
                for (h, w) in c.window(yi, xi).into_iter().flatten() {
                    let at = (plane * c.h + h) * c.w + w;
                    let v = x[at];
                    match best {
                        Some((b, _)) if !(v > b || (v.is_nan() && !b.is_nan())) => {}
                        _ => best = Some((v, at)),
                    }
                }
                // A dilated window may hold padding alone: `-inf`, no gradient.
                let v = match best {
                    Some((v, at)) => {
                        gx[at] += r[y.len()];
                        v
                    }
                    None => f64::NEG_INFINITY,
                };
                y.push(v);
            }
        }
    }
    (y, gx)
}

/// Average pooling's value and input gradient, PyTorch's divisors.
fn avg_ref(c: &PoolCase, x: &[f64], r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let [oh, ow] = c.out().unwrap();
    let (mut y, mut gx) = (Vec::new(), vec![0.0; x.len()]);
    let padded_count = |o: usize, a: usize| {
        let len = if a == 0 { c.h } else { c.w };
        let start = (o * c.s[a]) as i64 - c.p[a] as i64;
        let end = (start + c.k[a] as i64).min((len + c.p[a]) as i64);
        (end - start) as f64
    };
    for plane in 0..c.n * c.c {
        for yi in 0..oh {
            for xi in 0..ow {
                let inside: Vec<usize> = c
                    .window(yi, xi)
                    .into_iter()
                    .flatten()
                    .map(|(h, w)| (plane * c.h + h) * c.w + w)
                    .collect();
                let div = match c.divisor {
                    Some(d) => d as f64,
                    None if c.include_pad => padded_count(yi, 0) * padded_count(xi, 1),
                    None => inside.len() as f64,
                };
                let up = r[y.len()];
                for &at in &inside {
                    gx[at] += up / div;
                }
                y.push(inside.iter().map(|&at| x[at]).sum::<f64>() / div);
            }
        }
    }
    (y, gx)
}

#[test]
fn pooling_matches_direct_loops_in_value_and_gradient() {
    let mut rng = SmallRng::seed_from_u64(99);
    let mut checked = 0;
    for case in 0..400 {
        let max = case % 2 == 0;
        let c = PoolCase::random(&mut rng, max);
        let shape = [c.n, c.c, c.h, c.w];
        let numel = shape.iter().product();
        let x = if rng.random_bool(0.5) {
            tied(&mut rng, numel)
        } else {
            randv(&mut rng, numel)
        };
        for device in devices() {
            let xt = leaf(&x, &shape, DType::F64, device);
            let got = if max {
                xt.max_pool2d(c.k, c.opts())
            } else {
                xt.avg_pool2d(c.k, c.opts())
            };
            let Some([oh, ow]) = c.out() else {
                assert!(
                    got.is_err(),
                    "case {case} {c:?}: a window larger than the input"
                );
                continue;
            };
            let y = got.unwrap_or_else(|e| panic!("case {case} {c:?}: {e}"));
            assert_eq!(y.shape(), [c.n, c.c, oh, ow], "case {case} {c:?}");
            let r = randv(&mut SmallRng::seed_from_u64(case), y.numel());
            let (want, gx) = if max {
                max_ref(&c, &x, &r)
            } else {
                avg_ref(&c, &x, &r)
            };
            close(
                &values(&y),
                &want,
                1e-12,
                &format!("case {case} {c:?} value"),
            );
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(&grad(&xt), &gx, 1e-12, &format!("case {case} {c:?} grad"));
            checked += 1;
        }
    }
    assert!(checked > 300, "too few valid cases: {checked}");
}

#[test]
fn pooling_nan_one_dimension_and_lower_precision() {
    for device in devices() {
        let x = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0, 4.0, 0.5, -1.0], [1, 1, 6], device)
            .unwrap();
        let m = x.max_pool1d(2, PoolOptions::new()).unwrap();
        let v = m.to_vec::<f32>().unwrap();
        assert!(v[0].is_nan());
        assert_eq!(&v[1..], [4.0, 0.5]);
        let a = x.avg_pool1d(3, PoolOptions::new().stride(3)).unwrap();
        let v = a.to_vec::<f32>().unwrap();
        assert!(v[0].is_nan());
        assert_eq!(v[1], (4.0 + 0.5 - 1.0) / 3.0);
        // A 1-d op takes one number each.
        assert!(x.max_pool1d(2, PoolOptions::new().stride([1, 2])).is_err());
        // bfloat16 sums in float32 and rounds once.
        let ones = Tensor::ones([1, 1, 16, 16], DType::BF16, device).unwrap();
        let third = ones.mul(0.3).unwrap();
        let p = third.avg_pool2d(16, PoolOptions::new()).unwrap();
        assert_eq!(p.dtype(), DType::BF16);
        assert_eq!(
            values(&p),
            values(&third.narrow(2, 0, 1).unwrap().narrow(3, 0, 1).unwrap())
        );
    }
}

#[test]
fn bad_arguments_are_errors() {
    let cpu = Device::Cpu;
    let x = Tensor::ones([1, 4, 5, 5], DType::F32, cpu).unwrap();
    let w = Tensor::ones([2, 4, 3, 3], DType::F32, cpu).unwrap();
    let o = ConvOptions::new();
    let bad = [
        // rank
        Tensor::ones([4, 5], DType::F32, cpu)
            .unwrap()
            .conv2d(&w, None, o),
        x.conv2d(&Tensor::ones([2, 4, 3], DType::F32, cpu).unwrap(), None, o),
        // channels and groups
        x.conv2d(
            &Tensor::ones([2, 3, 3, 3], DType::F32, cpu).unwrap(),
            None,
            o,
        ),
        x.conv2d(&w, None, o.groups(0)),
        x.conv2d(&w, None, o.groups(3)),
        x.conv2d(
            &Tensor::ones([3, 2, 3, 3], DType::F32, cpu).unwrap(),
            None,
            o.groups(2),
        ),
        // bias
        x.conv2d(&w, Some(&Tensor::ones([3], DType::F32, cpu).unwrap()), o),
        x.conv2d(&w, Some(&Tensor::ones([2], DType::F64, cpu).unwrap()), o),
        // dtypes
        x.conv2d(&w.to_dtype(DType::F64).unwrap(), None, o),
        x.to_dtype(DType::I64)
            .unwrap()
            .conv2d(&w.to_dtype(DType::I64).unwrap(), None, o),
        // geometry
        x.conv2d(&w, None, o.stride(0)),
        x.conv2d(&w, None, o.dilation([1, 0])),
        x.conv2d(
            &Tensor::ones([2, 4, 0, 3], DType::F32, cpu).unwrap(),
            None,
            o,
        ),
        x.conv2d(&w, None, o.dilation(3)),
        x.conv2d(&w, None, o.padding(usize::MAX)),
        x.conv2d(&w, None, o.dilation(usize::MAX)),
        x.conv2d(&w, None, o.padding(usize::MAX / 2)),
        Tensor::ones([1, 4, 5], DType::F32, cpu)
            .unwrap()
            .conv1d(&w, None, o),
        Tensor::ones([1, 4, 5], DType::F32, cpu).unwrap().conv1d(
            &Tensor::ones([2, 4, 3], DType::F32, cpu).unwrap(),
            None,
            o.stride([1, 2]),
        ),
        // pooling
        x.max_pool2d(0, PoolOptions::new()),
        x.max_pool2d(2, PoolOptions::new().padding(2)),
        x.max_pool2d(6, PoolOptions::new()),
        x.max_pool2d(2, PoolOptions::new().stride(0)),
        x.avg_pool2d(2, PoolOptions::new().dilation(2)),
        x.avg_pool2d(2, PoolOptions::new().divisor_override(0)),
        x.avg_pool2d(usize::MAX, PoolOptions::new()),
        x.to_dtype(DType::I32)
            .unwrap()
            .max_pool2d(2, PoolOptions::new()),
        Tensor::ones([5], DType::F32, cpu)
            .unwrap()
            .max_pool2d(1, PoolOptions::new()),
    ];
    for (i, r) in bad.into_iter().enumerate() {
        assert!(r.is_err(), "bad call {i} was accepted");
    }
    // Extreme strides and dilations that leave one window are fine.
    let y = x.conv2d(&w, None, o.stride(usize::MAX)).unwrap();
    assert_eq!(y.shape(), [1, 2, 1, 1]);
    let y = x
        .conv2d(
            &Tensor::ones([2, 4, 1, 1], DType::F32, cpu).unwrap(),
            None,
            o.dilation(usize::MAX),
        )
        .unwrap();
    assert_eq!(y.shape(), [1, 2, 5, 5]);
    let m = x
        .max_pool2d(5, PoolOptions::new().stride(usize::MAX).ceil_mode(true))
        .unwrap();
    assert_eq!(m.shape(), [1, 4, 1, 1]);
}

/// Batch normalisation by direct loops: the output, the gradients of the input, weight and
/// bias for upstream `r`, and the running statistics after the call.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn bn_ref(
    shape: &[usize],
    x: &[f64],
    w: &[f64],
    b: &[f64],
    rm: &[f64],
    rv: &[f64],
    r: &[f64],
    training: bool,
    momentum: f64,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c) = (shape[0], shape[1]);
    let inner: usize = shape[2..].iter().product();
    let at = |i: usize, ch: usize, j: usize| (i * c + ch) * inner + j;
    let m = (n * inner) as f64;
    let (mut y, mut gx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    let (mut gw, mut gb) = (vec![0.0; c], vec![0.0; c]);
    let (mut rm2, mut rv2) = (rm.to_vec(), rv.to_vec());
    for ch in 0..c {
        let idx: Vec<usize> = (0..n)
            .flat_map(|i| (0..inner).map(move |j| at(i, ch, j)))
            .collect();
        let (mu, var) = if training {
            let mu = idx.iter().map(|&k| x[k]).sum::<f64>() / m;
            let var = idx.iter().map(|&k| (x[k] - mu).powi(2)).sum::<f64>() / m;
            rm2[ch] = (1.0 - momentum) * rm[ch] + momentum * mu;
            rv2[ch] = (1.0 - momentum) * rv[ch] + momentum * var * m / (m - 1.0);
            (mu, var)
        } else {
            (rm[ch], rv[ch])
        };
        let rstd = 1.0 / (var + eps).sqrt();
        let xhat: Vec<f64> = idx.iter().map(|&k| (x[k] - mu) * rstd).collect();
        let dxhat: Vec<f64> = idx.iter().map(|&k| r[k] * w[ch]).collect();
        let mean_d = dxhat.iter().sum::<f64>() / m;
        let mean_dx = dxhat.iter().zip(&xhat).map(|(d, h)| d * h).sum::<f64>() / m;
        for (t, &k) in idx.iter().enumerate() {
            y[k] = xhat[t] * w[ch] + b[ch];
            gx[k] = if training {
                rstd * (dxhat[t] - mean_d - xhat[t] * mean_dx)
            } else {
                rstd * dxhat[t]
            };
            gw[ch] += r[k] * xhat[t];
            gb[ch] += r[k];
        }
    }
    (y, gx, gw, gb, rm2, rv2)
}

#[test]
fn batch_norm_matches_direct_loops_in_value_gradient_and_running_statistics() {
    let mut rng = SmallRng::seed_from_u64(5);
    for case in 0..120 {
        let rank = rng.random_range(2..=4);
        let mut shape = vec![rng.random_range(1..4), rng.random_range(1..4)];
        for _ in 2..rank {
            shape.push(rng.random_range(1..4));
        }
        let numel: usize = shape.iter().product();
        let c = shape[1];
        let training = rng.random_bool(0.6);
        let (momentum, eps) = (rng.random_range(0.0..1.0), [1e-5, 0.1][case % 2]);
        let x = randv(&mut rng, numel);
        let w = randv(&mut rng, c);
        let b = randv(&mut rng, c);
        let rm = randv(&mut rng, c);
        let rv: Vec<f64> = (0..c).map(|_| rng.random_range(0.1..2.0)).collect();
        let r = randv(&mut rng, numel);
        for device in devices() {
            let xt = leaf(&x, &shape, DType::F64, device);
            let (wt, bt) = (
                leaf(&w, &[c], DType::F64, device),
                leaf(&b, &[c], DType::F64, device),
            );
            let rmt = Tensor::from_slice(&rm, [c], device).unwrap();
            let rvt = Tensor::from_slice(&rv, [c], device).unwrap();
            let got = xt.batch_norm(
                Some(&rmt),
                Some(&rvt),
                Some(&wt),
                Some(&bt),
                training,
                momentum,
                eps,
            );
            if training && numel / c <= 1 {
                assert!(got.is_err(), "case {case}: one value a channel in training");
                continue;
            }
            let y = got.unwrap();
            let (want, gx, gw, gb, rm2, rv2) =
                bn_ref(&shape, &x, &w, &b, &rm, &rv, &r, training, momentum, eps);
            let what = format!("case {case} {shape:?} training {training}");
            close(&values(&y), &want, 1e-10, &format!("{what} value"));
            close(&values(&rmt), &rm2, 1e-12, &format!("{what} running mean"));
            close(&values(&rvt), &rv2, 1e-12, &format!("{what} running var"));
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(&grad(&xt), &gx, 1e-9, &format!("{what} input grad"));
            close(&grad(&wt), &gw, 1e-10, &format!("{what} weight grad"));
            close(&grad(&bt), &gb, 1e-10, &format!("{what} bias grad"));
        }
    }
    // Refused: one value a channel in training, a rank below 2, mismatched statistics.
    let x = Tensor::ones([1, 3], DType::F32, Device::Cpu).unwrap();
    let s = Tensor::ones([3], DType::F32, Device::Cpu).unwrap();
    assert!(
        x.batch_norm(Some(&s), Some(&s), None, None, true, 0.1, 1e-5)
            .is_err()
    );
    assert!(
        x.batch_norm(None, None, None, None, false, 0.1, 1e-5)
            .is_err()
    );
    let x = Tensor::ones([2, 3], DType::F32, Device::Cpu).unwrap();
    let s2 = Tensor::ones([2], DType::F32, Device::Cpu).unwrap();
    assert!(
        x.batch_norm(Some(&s2), Some(&s2), None, None, true, 0.1, 1e-5)
            .is_err()
    );
    assert!(
        x.batch_norm(Some(&s), None, None, None, true, 0.1, 1e-5)
            .is_err()
    );
    assert!(
        x.batch_norm(None, None, Some(&s2), None, true, 0.1, 1e-5)
            .is_err()
    );
    assert!(
        Tensor::ones([3], DType::F32, Device::Cpu)
            .unwrap()
            .batch_norm(None, None, None, None, true, 0.1, 1e-5)
            .is_err()
    );
    assert!(
        x.to_dtype(DType::I64)
            .unwrap()
            .batch_norm(None, None, None, None, true, 0.1, 1e-5)
            .is_err()
    );
    // float16 in float32, rounded once; evaluation without statistics uses the batch's.
    let h = x.to_dtype(DType::F16).unwrap();
    assert_eq!(
        h.batch_norm(None, None, None, None, true, 0.1, 1e-5)
            .unwrap()
            .dtype(),
        DType::F16
    );
}

#[test]
fn adaptive_average_pooling_matches_direct_loops() {
    let mut rng = SmallRng::seed_from_u64(23);
    for case in 0..150 {
        let shape = [
            rng.random_range(0..3),
            rng.random_range(1..3),
            rng.random_range(1..9),
            rng.random_range(1..9),
        ];
        let out = [rng.random_range(1..10), rng.random_range(1..10)];
        let numel: usize = shape.iter().product();
        let x = randv(&mut rng, numel);
        let window = |o: usize, i: usize, len: usize| (i * len / o, ((i + 1) * len).div_ceil(o));
        let [n, c, h, w] = shape;
        let mut want = Vec::new();
        let mut gx = vec![0.0; numel];
        let r = randv(&mut rng, n * c * out[0] * out[1]);
        for plane in 0..n * c {
            for i in 0..out[0] {
                for j in 0..out[1] {
                    let (h0, h1) = window(out[0], i, h);
                    let (w0, w1) = window(out[1], j, w);
                    let count = ((h1 - h0) * (w1 - w0)) as f64;
                    let mut sum = 0.0;
                    for a in h0..h1 {
                        for b in w0..w1 {
                            sum += x[(plane * h + a) * w + b];
                            gx[(plane * h + a) * w + b] += r[want.len()] / count;
                        }
                    }
                    want.push(sum / count);
                }
            }
        }
        for device in devices() {
            let xt = leaf(&x, &shape, DType::F64, device);
            let y = xt.adaptive_avg_pool2d(out).unwrap();
            assert_eq!(y.shape(), [n, c, out[0], out[1]]);
            close(
                &values(&y),
                &want,
                1e-12,
                &format!("case {case} {shape:?} -> {out:?}"),
            );
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(&grad(&xt), &gx, 1e-12, &format!("case {case} grad"));
        }
    }
    let x = Tensor::ones([2, 3, 5], DType::F32, Device::Cpu).unwrap();
    assert_eq!(x.adaptive_avg_pool1d(2).unwrap().shape(), [2, 3, 2]);
    assert_eq!(x.adaptive_avg_pool2d([4, 1]).unwrap().shape(), [2, 4, 1]);
    assert_eq!(x.adaptive_avg_pool2d(0).unwrap().shape(), [2, 0, 0]);
    let empty = Tensor::ones([2, 3, 0, 5], DType::F32, Device::Cpu).unwrap();
    assert!(empty.adaptive_avg_pool2d(1).is_err());
    assert!(
        x.to_dtype(DType::I32)
            .unwrap()
            .adaptive_avg_pool1d(1)
            .is_err()
    );
    assert!(x.adaptive_avg_pool2d(usize::MAX).is_err());
    assert!(x.adaptive_avg_pool2d([usize::MAX, 1]).is_err());
}

/// Found by the fuzzer: an empty batch of sequences of 2^62 elements made the convolution's
/// strides and the average pool's divisors overflow or exhaust the host. Each op now returns
/// an error or an empty result.
#[test]
fn empty_batches_of_huge_inputs_are_refused_or_empty() {
    let cpu = Device::Cpu;
    let x = Tensor::zeros([0usize, 3, 1 << 62], DType::F64, cpu).unwrap();
    let w = Tensor::zeros([2usize, 3, 2], DType::F64, cpu).unwrap();
    let empty_or_err = |r: genesis::Result<Tensor>| r.map(|y| y.numel() == 0).unwrap_or(true);
    assert!(empty_or_err(x.conv1d(&w, None, ConvOptions::new())));
    assert!(empty_or_err(x.avg_pool1d(2, PoolOptions::new())));
    assert!(empty_or_err(x.max_pool1d(2, PoolOptions::new())));
    assert!(empty_or_err(x.adaptive_avg_pool1d(1 << 40)));
    let images = Tensor::zeros([0usize, 1, 1 << 31, 1 << 31], DType::F32, cpu).unwrap();
    assert!(empty_or_err(
        images.avg_pool2d(3, PoolOptions::new().stride(1))
    ));
    assert!(empty_or_err(
        images.batch_norm(None, None, None, None, true, 0.1, 1e-5)
    ));
}

#[test]
fn transposed_convolution_matches_direct_loops_in_value_and_gradient() {
    let mut rng = SmallRng::seed_from_u64(77);
    let mut checked = 0;
    for case in 0..250 {
        let groups = rng.random_range(1..3);
        let (cg, og) = (rng.random_range(1..3), rng.random_range(1..3));
        let (n, h, w) = (
            rng.random_range(0..3),
            rng.random_range(1..5),
            rng.random_range(1..5),
        );
        let k = [rng.random_range(1..4), rng.random_range(1..4)];
        let s = [rng.random_range(1..4), rng.random_range(1..4)];
        let d = [rng.random_range(1..3), rng.random_range(1..3)];
        let p = [rng.random_range(0..3), rng.random_range(0..3)];
        let opad = [
            rng.random_range(0..s[0].max(d[0])),
            rng.random_range(0..s[1].max(d[1])),
        ];
        let bias = rng.random_bool(0.6);
        let (cin, o) = (groups * cg, groups * og);
        let full = |a: usize, len: usize| (len - 1) * s[a] + d[a] * (k[a] - 1) + 1 + opad[a];
        let (fh, fw) = (full(0, h), full(1, w));
        let valid = fh > 2 * p[0] && fw > 2 * p[1];
        let (oh, ow) = (fh.saturating_sub(2 * p[0]), fw.saturating_sub(2 * p[1]));
        let xs = [n, cin, h, w];
        let wsh = [cin, og, k[0], k[1]];
        let x = randv(&mut rng, xs.iter().product());
        let wv = randv(&mut rng, wsh.iter().product());
        let b = randv(&mut rng, o);
        let r = randv(&mut rng, n * o * oh * ow);
        // y[n, oc, i·s + a·d − p, j·s + b·d − p] += x[n, ic, i, j] · w[ic, oc − group·og, a, b].
        let mut want = vec![0.0; n * o * oh * ow];
        let (mut gx, mut gw, mut gb) = (vec![0.0; x.len()], vec![0.0; wv.len()], vec![0.0; o]);
        for ni in 0..n {
            for oc in 0..o {
                for yi in 0..oh {
                    for xi in 0..ow {
                        let at = ((ni * o + oc) * oh + yi) * ow + xi;
                        if bias {
                            want[at] += b[oc];
                        }
                        gb[oc] += r[at];
                    }
                }
            }
            for ic in 0..cin {
                let grp = ic / cg;
                for co in 0..og {
                    let oc = grp * og + co;
                    for i in 0..h {
                        for j in 0..w {
                            for a in 0..k[0] {
                                for bb in 0..k[1] {
                                    let yi = (i * s[0] + a * d[0]) as i64 - p[0] as i64;
                                    let xi = (j * s[1] + bb * d[1]) as i64 - p[1] as i64;
                                    if yi < 0 || xi < 0 || yi >= oh as i64 || xi >= ow as i64 {
                                        continue;
                                    }
                                    let at = ((ni * o + oc) * oh + yi as usize) * ow + xi as usize;
                                    let xa = ((ni * cin + ic) * h + i) * w + j;
                                    let wa = ((ic * og + co) * k[0] + a) * k[1] + bb;
                                    want[at] += x[xa] * wv[wa];
                                    gx[xa] += r[at] * wv[wa];
                                    gw[wa] += r[at] * x[xa];
                                }
                            }
                        }
                    }
                }
            }
        }
        let opts = ConvOptions::new()
            .stride(s)
            .padding(p)
            .dilation(d)
            .groups(groups)
            .output_padding(opad);
        for device in devices() {
            let xt = leaf(&x, &xs, DType::F64, device);
            let wt = leaf(&wv, &wsh, DType::F64, device);
            let bt = leaf(&b, &[o], DType::F64, device);
            let got = xt.conv_transpose2d(&wt, bias.then_some(&bt), opts);
            if !valid {
                assert!(got.is_err(), "case {case}: an output of no rows");
                continue;
            }
            let y = got.unwrap_or_else(|e| panic!("case {case}: {e}"));
            let what = format!("case {case} x {xs:?} w {wsh:?} {opts:?}");
            assert_eq!(y.shape(), [n, o, oh, ow], "{what}");
            close(&values(&y), &want, 1e-10, &format!("{what} value"));
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(&grad(&xt), &gx, 1e-10, &format!("{what} input grad"));
            close(&grad(&wt), &gw, 1e-10, &format!("{what} weight grad"));
            if bias {
                close(&grad(&bt), &gb, 1e-10, &format!("{what} bias grad"));
            }
            checked += 1;
        }
    }
    assert!(checked > 150, "too few valid cases: {checked}");
    // The 1-d form, and what is refused.
    let cpu = Device::Cpu;
    let x = Tensor::ones([2, 4, 5], DType::F32, cpu).unwrap();
    let w = Tensor::ones([4, 3, 2], DType::F32, cpu).unwrap();
    let y = x
        .conv_transpose1d(&w, None, ConvOptions::new().stride(2).output_padding(1))
        .unwrap();
    assert_eq!(y.shape(), [2, 3, 11]);
    let y2 = x
        .unsqueeze(2)
        .unwrap()
        .conv_transpose2d(
            &w.unsqueeze(2).unwrap(),
            None,
            ConvOptions::new().stride([1, 2]).output_padding([0, 1]),
        )
        .unwrap();
    assert_eq!(values(&y), values(&y2.squeeze(2).unwrap()));
    let x4 = x.unsqueeze(2).unwrap();
    let w4 = w.unsqueeze(2).unwrap();
    assert!(
        x4.conv_transpose2d(&w4, None, ConvOptions::new().output_padding(1))
            .is_err()
    );
    assert!(
        x4.conv_transpose2d(&w4, None, ConvOptions::new().groups(3))
            .is_err()
    );
    assert!(
        x4.conv_transpose2d(&w4.narrow(0, 0, 2).unwrap(), None, ConvOptions::new())
            .is_err()
    );
    assert!(
        x4.conv_transpose2d(&w4, None, ConvOptions::new().padding(9))
            .is_err()
    );
    assert!(
        x4.conv_transpose2d(&w4, None, ConvOptions::new().stride(usize::MAX))
            .is_err()
    );
    assert!(
        x4.conv2d(
            &w4.transpose(0, 1).unwrap(),
            None,
            ConvOptions::new().output_padding(1)
        )
        .is_err()
    );
}

/// PyTorch's source index of output `d` for nearest interpolation, in float32.
fn nearest_ref(d: usize, len: usize, out: usize, scale: f32, exact: bool) -> usize {
    let src = if exact {
        ((d as f32 + 0.5) * scale).floor() as usize
    } else if out == len {
        d
    } else if out == 2 * len {
        d / 2
    } else {
        (d as f32 * scale).floor() as usize
    };
    src.min(len - 1)
}

/// PyTorch's two neighbours and weights of output `d` for linear interpolation, in float64.
fn linear_ref(d: usize, len: usize, out: usize, scale: f64, align: bool) -> [(usize, f64); 2] {
    if out == len && !align {
        return [(d, 1.0), (d, 0.0)];
    }
    let src = if align {
        let s = if out > 1 {
            (len as f64 - 1.0) / (out as f64 - 1.0)
        } else {
            0.0
        };
        s * d as f64
    } else {
        (scale * (d as f64 + 0.5) - 0.5).max(0.0)
    };
    let i0 = (src.floor() as usize).min(len - 1);
    let i1 = if i0 < len - 1 { i0 + 1 } else { i0 };
    let l1 = (src - i0 as f64).clamp(0.0, 1.0);
    [(i0, 1.0 - l1), (i1, l1)]
}

#[test]
fn interpolation_matches_pytorchs_arithmetic() {
    use genesis::Interpolation;
    let mut rng = SmallRng::seed_from_u64(31);
    for case in 0..300 {
        let two_d = rng.random_bool(0.6);
        let spatial = if two_d { 2 } else { 1 };
        let mut shape = vec![rng.random_range(0..3), rng.random_range(1..3)];
        let lens: Vec<usize> = (0..spatial).map(|_| rng.random_range(1..7)).collect();
        shape.extend(&lens);
        let by_scale = rng.random_bool(0.4);
        let factors: Vec<f64> = (0..spatial)
            .map(|_| [0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0][rng.random_range(0..8)])
            .collect();
        let outs: Vec<usize> = if by_scale {
            lens.iter()
                .zip(&factors)
                .map(|(&l, f)| (l as f64 * f).floor() as usize)
                .collect()
        } else {
            (0..spatial).map(|_| rng.random_range(1..10)).collect()
        };
        let mode = match rng.random_range(0..4) {
            0 => Interpolation::Nearest,
            1 => Interpolation::NearestExact,
            2 => Interpolation::Linear {
                align_corners: false,
            },
            _ => Interpolation::Linear {
                align_corners: true,
            },
        };
        let numel: usize = shape.iter().product();
        let x = randv(&mut rng, numel);
        if outs.contains(&0) {
            // PyTorch: "Input and output sizes should be greater than 0".
            let xt = Tensor::from_slice(&x, shape.as_slice(), Device::Cpu).unwrap();
            assert!(xt.interpolate_scale(&factors, mode).is_err(), "case {case}");
            continue;
        }
        // Per spatial dimension: each output's sources and weights.
        let taps: Vec<Vec<Vec<(usize, f64)>>> = (0..spatial)
            .map(|a| {
                let (len, out) = (lens[a], outs[a]);
                let scale = if by_scale {
                    1.0 / factors[a]
                } else {
                    len as f64 / out as f64
                };
                let scale32 = if by_scale {
                    scale as f32
                } else {
                    len as f32 / out as f32
                };
                (0..out)
                    .map(|d| match mode {
                        Interpolation::Nearest | Interpolation::NearestExact => {
                            let exact = mode == Interpolation::NearestExact;
                            let keep = out == len && !(exact && by_scale);
                            let i = if keep {
                                d
                            } else {
                                nearest_ref(d, len, out, scale32, exact)
                            };
                            vec![(i, 1.0)]
                        }
                        Interpolation::Linear { align_corners } => {
                            let same = out == len && !by_scale;
                            if same {
                                vec![(d, 1.0)]
                            } else {
                                linear_ref(d, len, out, scale, align_corners).to_vec()
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        let planes = shape[0] * shape[1];
        let (h, w) = if two_d {
            (lens[0], lens[1])
        } else {
            (1, lens[0])
        };
        let (oh, ow) = if two_d {
            (outs[0], outs[1])
        } else {
            (1, outs[0])
        };
        let (th, tw) = if two_d {
            (Some(&taps[0]), &taps[1])
        } else {
            (None, &taps[0])
        };
        let mut want = Vec::new();
        for p in 0..planes {
            for i in 0..oh {
                for cols in tw.iter().take(ow) {
                    let rows: Vec<(usize, f64)> = th.map_or(vec![(0, 1.0)], |t| t[i].clone());
                    // Along the width first, then the height (PyTorch's order).
                    let mut v = 0.0;
                    for &(r, wr) in &rows {
                        let mut across = 0.0;
                        for &(c, wc) in cols {
                            across += wc * x[(p * h + r) * w + c];
                        }
                        v += wr * across;
                    }
                    want.push(v);
                }
            }
        }
        for device in devices() {
            let xt = Tensor::from_slice(&x, shape.as_slice(), device).unwrap();
            let y = if by_scale {
                xt.interpolate_scale(&factors, mode)
            } else {
                xt.interpolate(&outs, mode)
            };
            let what = format!("case {case} {shape:?} -> {outs:?} {mode:?} scale {by_scale}");
            let y = y.unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut out_shape = shape[..2].to_vec();
            out_shape.extend(&outs);
            assert_eq!(y.shape(), out_shape.as_slice(), "{what}");
            close(&values(&y), &want, 1e-12, &what);
            // float32 within rounding of float64.
            let y32 = xt.to_dtype(DType::F32).unwrap();
            let y32 = if by_scale {
                y32.interpolate_scale(&factors, mode)
            } else {
                y32.interpolate(&outs, mode)
            }
            .unwrap();
            close(&values(&y32), &want, 1e-5, &format!("{what} f32"));
        }
    }
    // The gradient: each output's weights sent back to its sources.
    let x = Tensor::from_slice(&[0.0f64, 10.0, 20.0], [1, 1, 3], Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x
        .interpolate(
            &[5],
            Interpolation::Linear {
                align_corners: true,
            },
        )
        .unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), [0.0, 5.0, 10.0, 15.0, 20.0]);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), [1.5, 2.0, 1.5]);
    // PyTorch's nearest under a scale factor uses 1 / factor: indices 0 0 1 2 2 3 4.
    let r = Tensor::arange(0.0, 5.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .reshape([1, 1, 5])
        .unwrap();
    let n = r.interpolate_scale(&[1.5], Interpolation::Nearest).unwrap();
    assert_eq!(
        n.to_vec::<f32>().unwrap(),
        [0.0, 0.0, 1.0, 2.0, 2.0, 3.0, 4.0]
    );
    // Refused.
    let bad = [
        r.interpolate(&[2, 2], Interpolation::Nearest),
        r.interpolate(&[0], Interpolation::Nearest),
        r.interpolate_scale(&[0.0], Interpolation::Nearest),
        r.interpolate_scale(&[f64::NAN], Interpolation::Nearest),
        r.interpolate_scale(&[1e300], Interpolation::Nearest),
        r.interpolate_scale(&[0.1], Interpolation::Nearest),
        r.reshape([5])
            .unwrap()
            .interpolate(&[3], Interpolation::Nearest),
        r.to_dtype(DType::I64)
            .unwrap()
            .interpolate(&[3], Interpolation::Nearest),
        Tensor::zeros([1usize, 1, 0], DType::F32, Device::Cpu)
            .unwrap()
            .interpolate(&[3], Interpolation::Nearest),
    ];
    for (i, b) in bad.into_iter().enumerate() {
        assert!(b.is_err(), "bad call {i} accepted");
    }
}

#[test]
fn group_norm_matches_direct_loops() {
    let mut rng = SmallRng::seed_from_u64(17);
    for case in 0..100 {
        let groups = rng.random_range(1..4);
        let c = groups * rng.random_range(1..3);
        let mut shape = vec![rng.random_range(0..3), c];
        for _ in 0..rng.random_range(0..3) {
            shape.push(rng.random_range(1..4));
        }
        let numel: usize = shape.iter().product();
        let inner: usize = shape[2..].iter().product();
        let (x, w, b, r) = (
            randv(&mut rng, numel),
            randv(&mut rng, c),
            randv(&mut rng, c),
            randv(&mut rng, numel),
        );
        let eps = [1e-5, 0.5][case % 2];
        // Each (sample, group): its elements, normalised; the gradient by the formula.
        let per = c / groups * inner;
        let (mut want, mut gx) = (vec![0.0; numel], vec![0.0; numel]);
        let (mut gw, mut gb) = (vec![0.0; c], vec![0.0; c]);
        for row in 0..shape[0] * groups {
            let idx: Vec<usize> = (row * per..(row + 1) * per).collect();
            let chan = |k: usize| (k / inner) % c;
            let m = per as f64;
            let mu = idx.iter().map(|&k| x[k]).sum::<f64>() / m;
            let var = idx.iter().map(|&k| (x[k] - mu).powi(2)).sum::<f64>() / m;
            let rstd = 1.0 / (var + eps).sqrt();
            let xhat: Vec<f64> = idx.iter().map(|&k| (x[k] - mu) * rstd).collect();
            let dxhat: Vec<f64> = idx.iter().map(|&k| r[k] * w[chan(k)]).collect();
            let md = dxhat.iter().sum::<f64>() / m;
            let mdx = dxhat.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / m;
            for (t, &k) in idx.iter().enumerate() {
                want[k] = xhat[t] * w[chan(k)] + b[chan(k)];
                gx[k] = rstd * (dxhat[t] - md - xhat[t] * mdx);
                gw[chan(k)] += r[k] * xhat[t];
                gb[chan(k)] += r[k];
            }
        }
        for device in devices() {
            let xt = leaf(&x, &shape, DType::F64, device);
            let (wt, bt) = (
                leaf(&w, &[c], DType::F64, device),
                leaf(&b, &[c], DType::F64, device),
            );
            let y = xt.group_norm(groups, Some(&wt), Some(&bt), eps).unwrap();
            let what = format!("case {case} {shape:?} groups {groups}");
            close(&values(&y), &want, 1e-10, &what);
            let rt = Tensor::from_slice(&r, y.shape(), device).unwrap();
            y.mul(&rt).unwrap().sum().unwrap().backward().unwrap();
            close(&grad(&xt), &gx, 1e-9, &format!("{what} input grad"));
            close(&grad(&wt), &gw, 1e-10, &format!("{what} weight grad"));
            close(&grad(&bt), &gb, 1e-10, &format!("{what} bias grad"));
        }
    }
    let x = Tensor::ones([2usize, 6, 3], DType::F32, Device::Cpu).unwrap();
    assert!(x.group_norm(4, None, None, 1e-5).is_err());
    assert!(x.group_norm(0, None, None, 1e-5).is_err());
    let w = Tensor::ones([4usize], DType::F32, Device::Cpu).unwrap();
    assert!(x.group_norm(3, Some(&w), None, 1e-5).is_err());
    assert!(
        Tensor::ones([6usize], DType::F32, Device::Cpu)
            .unwrap()
            .group_norm(3, None, None, 1e-5)
            .is_err()
    );
    assert_eq!(
        x.to_dtype(DType::BF16)
            .unwrap()
            .group_norm(3, None, None, 1e-5)
            .unwrap()
            .dtype(),
        DType::BF16
    );
}
