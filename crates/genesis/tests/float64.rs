//! float64 on a CUDA device against the CPU, op family by op family: binary ops (contiguous,
//! broadcast, strided and scalar operands, in place too), unary ops, comparisons and `where`,
//! clamp, reductions (sum, mean, prod, max, min, argmax, argmin, var, std, any, all), cumsum,
//! sort, scatter_add, casts to and from float64, fill, and the promotions that lead into
//! float64 (`f64 + f32`, `i64 / f64`, Python-like scalars, 0-d operands). Exact ops must give
//! the CPU's bits; transcendental ops and `pow` agree within 4 ulp; sums within the rounding
//! of an f64 sum in another order. The data mixes ordinary values with NaN, infinities,
//! signed zeros, subnormals and huge values. Without a CUDA device the tests say so and pass.

use genesis::{BinaryOp, CompareOp, DType, Device, Tensor, Twin, UnaryOp, s};

#[allow(dead_code)]
mod common;
use common::Release;

/// CUDA device 0, or `None` (saying so on stderr) when there is none.
fn gpu() -> Option<Device> {
    if genesis::cuda::is_available() {
        Some(Device::Cuda(0))
    } else {
        eprintln!("CUDA part skipped: no CUDA device found");
        None
    }
}

/// Deterministic pseudo-random numbers in [0, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` values in [-8, 8) with, when `special`, one in 16 replaced by NaN, ±inf, ±0, a
/// subnormal or a huge value.
fn data(n: usize, seed: u64, special: bool) -> Vec<f64> {
    let mut rng = Lcg(seed);
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        5e-324,
        -2.5e-310,
        1e300,
        -1e300,
    ];
    (0..n)
        .map(|i| {
            let v = (rng.next() - 0.5) * 16.0;
            if special && i % 16 == 7 {
                specials[(rng.next() * specials.len() as f64) as usize]
            } else {
                v
            }
        })
        .collect()
}

/// An f64 tensor of `shape` on the CPU and its copy on `dev`.
fn pair(vals: &[f64], shape: &[usize], dev: Device) -> (Tensor, Tensor) {
    let c = Tensor::from_slice(vals, shape, Device::Cpu).unwrap();
    let g = c.to(dev).unwrap();
    (c, g)
}

fn host(t: &Tensor) -> Vec<f64> {
    t.to(Device::Cpu).unwrap().to_vec::<f64>().unwrap()
}

/// Representable f64 values between `a` and `b` (0 for the same bits or two NaNs, `u64::MAX`
/// when exactly one is NaN).
fn ulps(a: f64, b: f64) -> u64 {
    if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    let key = |x: f64| {
        let b = x.to_bits() as i128;
        if b & (1 << 63) != 0 {
            -(b & !(1 << 63))
        } else {
            b
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u128::from(u64::MAX)) as u64
}

/// The GPU result equals the CPU result in dtype, shape and bits (or within `tol` ulp, a
/// result below f64's smallest normal on both sides counting as equal when `tol > 0`).
fn same(what: &str, gpu: &Tensor, cpu: &Tensor, tol: u64) {
    assert_eq!(gpu.dtype(), cpu.dtype(), "{what}: dtype");
    assert_eq!(gpu.shape(), cpu.shape(), "{what}: shape");
    assert!(
        gpu.device() != Device::Cpu,
        "{what}: the GPU result is on the GPU"
    );
    let (g, c) = (
        gpu.to(Device::Cpu).unwrap().to_dtype(DType::F64).unwrap(),
        cpu.to_dtype(DType::F64).unwrap(),
    );
    let (g, c) = (g.to_vec::<f64>().unwrap(), c.to_vec::<f64>().unwrap());
    for (i, (&x, &y)) in g.iter().zip(&c).enumerate() {
        let tiny = tol > 0 && x.abs() < f64::MIN_POSITIVE && y.abs() < f64::MIN_POSITIVE;
        assert!(
            ulps(x, y) <= tol || tiny,
            "{what}: element {i}: gpu {x:e} cpu {y:e} ({} ulp)",
            ulps(x, y)
        );
    }
}

/// Each (GPU, CPU) operand pair of a binary op: contiguous, broadcast both ways, strided
/// (transposed, stepped, narrowed at an offset), and large enough for the vector paths and
/// several blocks.
fn operand_pairs(dev: Device) -> Vec<(&'static str, [(Tensor, Tensor); 2])> {
    let p = |vals: Vec<f64>, shape: &[usize]| pair(&vals, shape, dev);
    let t = |(c, g): (Tensor, Tensor)| (c.t().unwrap(), g.t().unwrap());
    let big = (1 << 20) + 3;
    vec![
        (
            "contiguous",
            [
                p(data(33 * 65, 1, true), &[33, 65]),
                p(data(33 * 65, 2, true), &[33, 65]),
            ],
        ),
        (
            "row broadcast",
            [
                p(data(64 * 256, 3, true), &[64, 256]),
                p(data(256, 4, true), &[256]),
            ],
        ),
        (
            "column and row broadcast",
            [
                p(data(33, 5, true), &[33, 1]),
                p(data(65, 6, true), &[1, 65]),
            ],
        ),
        (
            "transposed",
            [
                t(p(data(65 * 33, 7, true), &[65, 33])),
                p(data(33 * 65, 8, true), &[33, 65]),
            ],
        ),
        (
            "narrowed at an offset",
            [
                {
                    let (c, g) = p(data(40 * 50, 9, true), &[40, 50]);
                    (c.narrow(1, 3, 45).unwrap(), g.narrow(1, 3, 45).unwrap())
                },
                t(p(data(45 * 40, 10, true), &[45, 40])),
            ],
        ),
        (
            "stepped",
            [
                {
                    let (c, g) = p(data(30 * 20, 11, true), &[30, 20]);
                    (c.i(&s![..;3, ..]).unwrap(), g.i(&s![..;3, ..]).unwrap())
                },
                p(data(20, 12, true), &[20]),
            ],
        ),
        (
            "large",
            [
                p(data(big, 13, true), &[big]),
                p(data(big, 14, true), &[big]),
            ],
        ),
        ("0-d", [p(vec![2.5], &[]), p(data(77, 15, true), &[7, 11])]),
    ]
}

#[test]
fn binary_ops_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    for (what, [(ac, ag), (bc, bg)]) in operand_pairs(dev) {
        for op in BinaryOp::ALL.into_iter().filter(|op| !op.int_only()) {
            let tol = if op.exact_twin() { 0 } else { 4 };
            let name = format!("{} {what}", op.name());
            same(
                &name,
                &ag.binary(op, &bg).unwrap(),
                &ac.binary(op, &bc).unwrap(),
                tol,
            );
            // The other operand order too (broadcast on the left).
            same(
                &format!("{name} swapped"),
                &bg.binary(op, &ag).unwrap(),
                &bc.binary(op, &ac).unwrap(),
                tol,
            );
            for v in [0.5, -3.25, 0.0, f64::INFINITY, 1e-310] {
                same(
                    &format!("{name} scalar {v}"),
                    &ag.binary_scalar(op, v).unwrap(),
                    &ac.binary_scalar(op, v).unwrap(),
                    tol,
                );
            }
        }
    }
}

#[test]
fn operators_scalars_and_in_place_ops_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    let (xc, xg) = pair(&data(300, 21, true), &[20, 15], dev);
    let (yc, yg) = pair(&data(15, 22, true), &[15], dev);
    same("x + y", &(&xg + &yg).unwrap(), &(&xc + &yc).unwrap(), 0);
    same("x - 1", &(&xg - 1).unwrap(), &(&xc - 1).unwrap(), 0);
    same("2.5 * x", &(2.5 * &xg).unwrap(), &(2.5 * &xc).unwrap(), 0);
    same("1 / x", &(1 / &xg).unwrap(), &(1 / &xc).unwrap(), 0);
    same("x ** 0.5", &xg.pow(0.5).unwrap(), &xc.pow(0.5).unwrap(), 0);
    same("x ** 3", &xg.pow(3).unwrap(), &xc.pow(3).unwrap(), 4);
    same("x ** y", &xg.pow(&yg).unwrap(), &xc.pow(&yc).unwrap(), 4);
    // In place: contiguous (the in-place kernels), a strided view (through a temporary).
    for (what, tc, tg) in [
        (
            "contiguous",
            xc.deep_clone().unwrap(),
            xg.deep_clone().unwrap(),
        ),
        (
            "transposed",
            xc.deep_clone().unwrap().t().unwrap(),
            xg.deep_clone().unwrap().t().unwrap(),
        ),
    ] {
        let (oc, og) = (
            Tensor::from_slice(&data(tc.numel(), 23, true), tc.shape(), Device::Cpu).unwrap(),
            Tensor::from_slice(&data(tg.numel(), 23, true), tg.shape(), dev).unwrap(),
        );
        tc.add_(&oc).unwrap();
        tg.add_(&og).unwrap();
        tc.mul_(-1.5).unwrap();
        tg.mul_(-1.5).unwrap();
        tc.div_(7).unwrap();
        tg.div_(7).unwrap();
        tc.sub_(0.25f32).unwrap();
        tg.sub_(0.25f32).unwrap();
        tc.relu_().unwrap();
        tg.relu_().unwrap();
        tc.exp_().unwrap();
        tg.exp_().unwrap();
        same(&format!("in place {what}"), &tg, &tc, 4);
    }
}

#[test]
fn unary_ops_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    let big = (1 << 20) + 5;
    for (what, n) in [("small", 1000), ("large", big)] {
        let vals = data(n, 31, true);
        let (c, g) = pair(&vals, &[n], dev);
        for op in UnaryOp::ALL {
            let name = format!("{} {what}", op.name());
            let (gy, cy) = (g.unary(op).unwrap(), c.unary(op).unwrap());
            match op.twin() {
                Twin::Exact => same(&name, &gy, &cy, 0),
                Twin::Ulps => same(&name, &gy, &cy, Twin::ULPS),
                Twin::WideUlps => same(&name, &gy, &cy, 2 * Twin::ULPS),
                Twin::InputUlps => {
                    let gy = gy.to(Device::Cpu).unwrap().to_vec::<f64>().unwrap();
                    let cy = cy.to_vec::<f64>().unwrap();
                    for ((x, gv), cv) in vals.iter().zip(&gy).zip(&cy) {
                        assert!(op.twin().agree(*x, *gv, *cv), "{name}({x}): {gv} vs {cv}");
                    }
                }
            }
        }
        // Positive arguments for log and sqrt; wide arguments for sin and cos.
        let pos: Vec<f64> = vals.iter().map(|v| v.abs() * 1e3).collect();
        let (c, g) = pair(&pos, &[n], dev);
        same("log of positives", &g.log().unwrap(), &c.log().unwrap(), 4);
        same(
            "sqrt of positives",
            &g.sqrt().unwrap(),
            &c.sqrt().unwrap(),
            0,
        );
        same("sin of wide", &g.sin().unwrap(), &c.sin().unwrap(), 4);
        same("cos of wide", &g.cos().unwrap(), &c.cos().unwrap(), 4);
    }
    // A strided view and in place.
    let (c, g) = pair(&data(600, 32, true), &[20, 30], dev);
    same(
        "tanh of a transpose",
        &g.t().unwrap().tanh().unwrap(),
        &c.t().unwrap().tanh().unwrap(),
        4,
    );
    let (c2, g2) = (c.deep_clone().unwrap(), g.deep_clone().unwrap());
    c2.unary_(UnaryOp::Sigmoid).unwrap();
    g2.unary_(UnaryOp::Sigmoid).unwrap();
    same("sigmoid in place", &g2, &c2, 4);
    // float64 is computed in f64: 1 + 2^-40 keeps its last bits.
    let x = Tensor::from_slice(&[1.0 + 2f64.powi(-40)], [1], dev).unwrap();
    assert_eq!(
        host(&x.neg().unwrap()),
        [-(1.0 + 2f64.powi(-40))],
        "computed in f64, not f32"
    );
}

#[test]
fn comparisons_and_where_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    for (what, [(ac, ag), (bc, bg)]) in operand_pairs(dev) {
        // Equal elements sometimes: compare each operand with itself shifted into the other.
        for op in CompareOp::ALL {
            let name = format!("{} {what}", op.name());
            let (got, want) = (ag.compare(op, &bg).unwrap(), ac.compare(op, &bc).unwrap());
            assert_eq!(got.dtype(), DType::Bool);
            assert_eq!(
                got.to_bool_vec().unwrap(),
                want.to_bool_vec().unwrap(),
                "{name}"
            );
            let (got, want) = (ag.compare(op, &ag).unwrap(), ac.compare(op, &ac).unwrap());
            assert_eq!(
                got.to_bool_vec().unwrap(),
                want.to_bool_vec().unwrap(),
                "{name} self"
            );
            for v in [0.5, 0.0, -0.0, f64::NEG_INFINITY] {
                let (got, want) = (
                    ag.compare_scalar(op, v).unwrap(),
                    ac.compare_scalar(op, v).unwrap(),
                );
                assert_eq!(
                    got.to_bool_vec().unwrap(),
                    want.to_bool_vec().unwrap(),
                    "{name} scalar {v}"
                );
            }
        }
        // where: a broadcast condition, tensor and scalar branches.
        let (cc, cg) = (ac.gt(&bc).unwrap(), ag.gt(&bg).unwrap());
        same(
            &format!("where {what}"),
            &Tensor::where_cond(&cg, &ag, &bg).unwrap(),
            &Tensor::where_cond(&cc, &ac, &bc).unwrap(),
            0,
        );
        same(
            &format!("where {what} scalar"),
            &Tensor::where_cond(&cg, &ag, -1.5).unwrap(),
            &Tensor::where_cond(&cc, &ac, -1.5).unwrap(),
            0,
        );
        same(
            &format!("where {what} scalar first"),
            &Tensor::where_cond(&cg, 7, &bg).unwrap(),
            &Tensor::where_cond(&cc, 7, &bc).unwrap(),
            0,
        );
    }
}

#[test]
fn clamp_and_fill_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    let (c, g) = pair(&data(4099, 41, true), &[4099], dev);
    for (lo, hi) in [
        (Some(-1.5), Some(2.25)),
        (Some(-1.5), None),
        (None, Some(1e-310)),
        (Some(3.0), Some(-3.0)),
    ] {
        same(
            &format!("clamp {lo:?} {hi:?}"),
            &g.clamp(lo, hi).unwrap(),
            &c.clamp(lo, hi).unwrap(),
            0,
        );
    }
    same(
        "clamp of a transpose",
        &g.narrow(0, 1, 4096)
            .unwrap()
            .reshape([64, 64])
            .unwrap()
            .t()
            .unwrap()
            .clamp_min(0)
            .unwrap(),
        &c.narrow(0, 1, 4096)
            .unwrap()
            .reshape([64, 64])
            .unwrap()
            .t()
            .unwrap()
            .clamp_min(0)
            .unwrap(),
        0,
    );
    // fill: whole tensors (the fill kernel and, when small, the batch), a strided view.
    for n in [5usize, 3000, (1 << 20) + 1] {
        let t = Tensor::zeros([n], DType::F64, dev).unwrap();
        t.fill_(0.1).unwrap();
        assert!(host(&t).iter().all(|&v| v == 0.1), "fill_ {n}");
        let f = Tensor::full([n], -2.5e-310f64, dev).unwrap();
        assert!(host(&f).iter().all(|&v| v == -2.5e-310), "full {n}");
    }
    let m = Tensor::zeros([6, 8], DType::F64, dev).unwrap();
    m.t()
        .unwrap()
        .narrow(0, 2, 3)
        .unwrap()
        .fill_(1.0 / 3.0)
        .unwrap();
    let want: Vec<f64> = (0..48)
        .map(|i| {
            if (2..5).contains(&(i % 8)) {
                1.0 / 3.0
            } else {
                0.0
            }
        })
        .collect();
    assert_eq!(host(&m), want, "fill_ of a strided view");
}

/// `|gpu - cpu| <= r * eps * sum |x| + 2 eps |cpu|` elementwise for sums over `r` elements of
/// magnitudes `abs` (the rounding of two f64 sums in different orders).
fn sums_agree(what: &str, gpu: &Tensor, cpu: &Tensor, r: usize, abs: f64) {
    assert_eq!(gpu.dtype(), cpu.dtype(), "{what}: dtype");
    assert_eq!(gpu.shape(), cpu.shape(), "{what}: shape");
    for (i, (g, c)) in host(gpu).iter().zip(host(cpu)).enumerate() {
        let tol = r as f64 * f64::EPSILON * abs + 2.0 * f64::EPSILON * c.abs();
        assert!(
            (g - c).abs() <= tol || (g.is_nan() && c.is_nan()) || *g == c,
            "{what}: element {i}: gpu {g:e} cpu {c:e}"
        );
    }
}

#[test]
fn reductions_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    for (what, shape) in [
        ("small", vec![7usize, 33, 5]),
        ("rows", vec![1000, 37, 1]),
        ("long", vec![1, (1 << 20) + 9, 1]),
        ("columns", vec![3, 4097, 70]),
    ] {
        let n: usize = shape.iter().product();
        // Sums: finite values; the exact reductions: the special values too.
        let (fc, fg) = pair(&data(n, 51, false), &shape, dev);
        let (sc, sg) = pair(&data(n, 52, true), &shape, dev);
        let abs: f64 = 8.0 * n as f64;
        sums_agree(
            &format!("sum {what}"),
            &fg.sum().unwrap(),
            &fc.sum().unwrap(),
            n,
            abs,
        );
        sums_agree(
            &format!("mean {what}"),
            &fg.mean().unwrap(),
            &fc.mean().unwrap(),
            n,
            abs / n as f64,
        );
        for dims in [vec![1isize], vec![0], vec![-1], vec![0, 2]] {
            let r: usize = dims
                .iter()
                .map(|&d| shape[d.rem_euclid(3) as usize])
                .product();
            for keepdim in [false, true] {
                let name = format!("{what} dims {dims:?} keepdim {keepdim}");
                sums_agree(
                    &format!("sum_dim {name}"),
                    &fg.sum_dim(&dims[..], keepdim).unwrap(),
                    &fc.sum_dim(&dims[..], keepdim).unwrap(),
                    r,
                    8.0 * r as f64,
                );
                sums_agree(
                    &format!("mean_dim {name}"),
                    &fg.mean_dim(&dims[..], keepdim).unwrap(),
                    &fc.mean_dim(&dims[..], keepdim).unwrap(),
                    r,
                    8.0,
                );
                same(
                    &format!("amax {name}"),
                    &sg.amax(&dims[..], keepdim).unwrap(),
                    &sc.amax(&dims[..], keepdim).unwrap(),
                    0,
                );
                same(
                    &format!("amin {name}"),
                    &sg.amin(&dims[..], keepdim).unwrap(),
                    &sc.amin(&dims[..], keepdim).unwrap(),
                    0,
                );
                for correction in [0.0, 1.0] {
                    for (std, got, want) in [
                        (
                            false,
                            fg.var_dim(&dims[..], correction, keepdim).unwrap(),
                            fc.var_dim(&dims[..], correction, keepdim).unwrap(),
                        ),
                        (
                            true,
                            fg.std_dim(&dims[..], correction, keepdim).unwrap(),
                            fc.std_dim(&dims[..], correction, keepdim).unwrap(),
                        ),
                    ] {
                        assert_eq!(got.dtype(), DType::F64);
                        for (g, w) in host(&got).iter().zip(host(&want)) {
                            assert!(
                                (g - w).abs() <= 16.0 * r as f64 * f64::EPSILON * w.abs()
                                    || (g.is_nan() && w.is_nan()),
                                "var {name} correction {correction} std {std}: {g:e} vs {w:e}"
                            );
                        }
                    }
                }
            }
        }
        // Exact: max, min and the arg reductions (the first NaN; the first of equal values).
        same(
            &format!("max {what}"),
            &sg.max().unwrap(),
            &sc.max().unwrap(),
            0,
        );
        same(
            &format!("min {what}"),
            &sg.min().unwrap(),
            &sc.min().unwrap(),
            0,
        );
        assert_eq!(
            sg.argmax().unwrap().to_vec::<i64>().unwrap(),
            sc.argmax().unwrap().to_vec::<i64>().unwrap(),
            "argmax {what}"
        );
        assert_eq!(
            fg.argmin().unwrap().to_vec::<i64>().unwrap(),
            fc.argmin().unwrap().to_vec::<i64>().unwrap(),
            "argmin {what}"
        );
        for dim in [0isize, 1, 2] {
            let ((gv, gi), (cv, ci)) = (
                sg.max_dim(dim, false).unwrap(),
                sc.max_dim(dim, false).unwrap(),
            );
            same(&format!("max_dim {what} {dim}"), &gv, &cv, 0);
            assert_eq!(
                gi.to_vec::<i64>().unwrap(),
                ci.to_vec::<i64>().unwrap(),
                "max_dim {what} {dim}"
            );
            let ((gv, gi), (cv, ci)) = (
                fg.min_dim(dim, true).unwrap(),
                fc.min_dim(dim, true).unwrap(),
            );
            same(&format!("min_dim {what} {dim}"), &gv, &cv, 0);
            assert_eq!(
                gi.to_vec::<i64>().unwrap(),
                ci.to_vec::<i64>().unwrap(),
                "min_dim {what} {dim}"
            );
            // any / all: zeros, NaN counts as true.
            for (g, c) in [
                (
                    sg.any_dim(dim, false).unwrap(),
                    sc.any_dim(dim, false).unwrap(),
                ),
                (
                    sg.all_dim(dim, true).unwrap(),
                    sc.all_dim(dim, true).unwrap(),
                ),
            ] {
                assert_eq!(
                    g.to_bool_vec().unwrap(),
                    c.to_bool_vec().unwrap(),
                    "any/all {what} {dim}"
                );
            }
        }
        // Products of values near 1 (no overflow): the rounding of products in two orders.
        let near: Vec<f64> = data(n, 53, false).iter().map(|v| 1.0 + v / 8e3).collect();
        let (pc, pg) = pair(&near, &shape, dev);
        for (g, c, r) in [
            (pg.prod().unwrap(), pc.prod().unwrap(), n),
            (
                pg.prod_dim(1, false).unwrap(),
                pc.prod_dim(1, false).unwrap(),
                shape[1],
            ),
        ] {
            assert_eq!(g.dtype(), DType::F64);
            for (x, y) in host(&g).iter().zip(host(&c)) {
                assert!(
                    (x - y).abs() <= 2.0 * r as f64 * f64::EPSILON * y.abs(),
                    "prod {what}: {x:e} vs {y:e}"
                );
            }
        }
    }
    // A strided tensor reduces through a copy.
    let (c, g) = pair(&data(40 * 30, 54, false), &[40, 30], dev);
    sums_agree(
        "sum_dim of a transpose",
        &g.t().unwrap().sum_dim(1, false).unwrap(),
        &c.t().unwrap().sum_dim(1, false).unwrap(),
        40,
        320.0,
    );
    // Empty reductions: sum 0, mean NaN, prod 1.
    let e = Tensor::zeros([0, 3], DType::F64, dev).unwrap();
    assert_eq!(host(&e.sum_dim(0, false).unwrap()), [0.0; 3]);
    assert!(host(&e.mean().unwrap())[0].is_nan());
    assert_eq!(host(&e.prod().unwrap()), [1.0]);
}

#[test]
fn cumsum_sort_and_scatter_add_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    for shape in [
        vec![5usize, 2049],
        vec![1, (1 << 20) + 3],
        vec![300, 7],
        vec![3, 1000, 7],
    ] {
        let n: usize = shape.iter().product();
        let (c, g) = pair(&data(n, 61, false), &shape, dev);
        for dim in 0..shape.len() as isize {
            let (got, want) = (g.cumsum(dim).unwrap(), c.cumsum(dim).unwrap());
            let r = shape[dim as usize];
            sums_agree(
                &format!("cumsum {shape:?} {dim}"),
                &got,
                &want,
                r,
                8.0 * r as f64,
            );
        }
        // Sort: the special values included (NaN last, -0 equal to +0, stable).
        let (sc, sg) = pair(&data(n, 62, true), &shape, dev);
        for descending in [false, true] {
            let d = shape.len() as isize - 1;
            let ((gv, gi), (cv, ci)) = (
                sg.sort(d, descending).unwrap(),
                sc.sort(d, descending).unwrap(),
            );
            same(&format!("sort {shape:?} {descending}"), &gv, &cv, 0);
            assert_eq!(
                gi.to_vec::<i64>().unwrap(),
                ci.to_vec::<i64>().unwrap(),
                "sort {shape:?}"
            );
        }
    }
    // scatter_add of multiples of 2^-20 into multiples of 2^-20: exact sums in any order.
    let vals: Vec<f64> = data(3000, 63, false)
        .iter()
        .map(|v| (v * 1048576.0).round() / 1048576.0)
        .collect();
    let idx: Vec<i64> = (0..3000).map(|i| (i * 7 % 13) as i64).collect();
    let (vc, vg) = pair(&vals, &[3000], dev);
    let ic = Tensor::from_slice(&idx, [3000], Device::Cpu).unwrap();
    let ig = ic.to(dev).unwrap();
    // The targets too: a sum that starts from an arbitrary f64 rounds differently in
    // another order.
    let targets: Vec<f64> = data(13, 64, false)
        .iter()
        .map(|v| (v * 1048576.0).round() / 1048576.0)
        .collect();
    let (tc, tg) = pair(&targets, &[13], dev);
    same(
        "scatter_add",
        &tg.scatter_add(0, &ig, &vg).unwrap(),
        &tc.scatter_add(0, &ic, &vc).unwrap(),
        0,
    );
}

#[test]
fn casts_to_and_from_float64_match_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    // Values every dtype holds (whole numbers in int8's range, some halves).
    let small: Vec<f64> = data(999, 71, false)
        .iter()
        .map(|v| (v * 8.0).round() / 2.0)
        .collect();
    let (c, g) = pair(&small, &[999], dev);
    for d in DType::ALL {
        let (gd, cd) = (g.to_dtype(d).unwrap(), c.to_dtype(d).unwrap());
        same(&format!("f64 -> {d}"), &gd, &cd, 0);
        same(
            &format!("{d} -> f64"),
            &gd.to_dtype(DType::F64).unwrap(),
            &cd.to_dtype(DType::F64).unwrap(),
            0,
        );
    }
    // The special values through the float dtypes (rounding, overflow to inf, subnormals).
    let (c, g) = pair(&data(999, 72, true), &[999], dev);
    for d in [DType::F32, DType::F16, DType::BF16] {
        same(
            &format!("special f64 -> {d}"),
            &g.to_dtype(d).unwrap(),
            &c.to_dtype(d).unwrap(),
            0,
        );
    }
    // int64 beyond 2^53 rounds to nearest-even on both.
    let big: Vec<i64> = (0..100).map(|i| (1i64 << 60) + 3 * i - 150).collect();
    let bc = Tensor::from_slice(&big, [100], Device::Cpu).unwrap();
    same(
        "i64 -> f64",
        &bc.to(dev).unwrap().to_dtype(DType::F64).unwrap(),
        &bc.to_dtype(DType::F64).unwrap(),
        0,
    );
}

#[test]
fn promotion_into_float64_matches_the_cpu() {
    let _release = Release;
    let Some(dev) = gpu() else { return };
    let whole: Vec<f64> = data(60, 81, false)
        .iter()
        .map(|v| (v * 8.0).round())
        .collect();
    let (fc, fg) = pair(&data(60, 82, true), &[6, 10], dev);
    for d in DType::ALL {
        // The other operand in `d` (bools: v > 0), row-broadcast, and as a 0-d tensor.
        let oc = Tensor::from_slice(&whole[..10], [10], Device::Cpu)
            .unwrap()
            .to_dtype(d)
            .unwrap();
        let og = oc.to(dev).unwrap();
        let (zc, zg) = (
            oc.narrow(0, 3, 1).unwrap().squeeze(0).unwrap(),
            og.narrow(0, 3, 1).unwrap().squeeze(0).unwrap(),
        );
        for (what, c2, g2) in [("tensor", &oc, &og), ("0-d", &zc, &zg)] {
            let name = format!("f64 with {d} {what}");
            for op in [
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Maximum,
                BinaryOp::Minimum,
            ] {
                let (gr, cr) = (fg.binary(op, g2), fc.binary(op, c2));
                if op == BinaryOp::Sub && d == DType::Bool {
                    // Subtraction with a bool operand is refused, as in PyTorch.
                    assert!(gr.is_err() && cr.is_err(), "{name} sub");
                    assert!(g2.binary(op, &fg).is_err() && c2.binary(op, &fc).is_err());
                    continue;
                }
                let (gr, cr) = (gr.unwrap(), cr.unwrap());
                assert_eq!(cr.dtype(), DType::F64, "{name} {}", op.name());
                same(&format!("{name} {}", op.name()), &gr, &cr, 0);
                let (gr, cr) = (g2.binary(op, &fg), c2.binary(op, &fc));
                same(
                    &format!("{name} {} swapped", op.name()),
                    &gr.unwrap(),
                    &cr.unwrap(),
                    0,
                );
            }
            for op in CompareOp::ALL {
                assert_eq!(
                    fg.compare(op, g2).unwrap().to_bool_vec().unwrap(),
                    fc.compare(op, c2).unwrap().to_bool_vec().unwrap(),
                    "{name} {}",
                    op.name()
                );
            }
            let (cg, cc) = (fg.gt(0).unwrap(), fc.gt(0).unwrap());
            same(
                &format!("where {name}"),
                &Tensor::where_cond(&cg, &fg, g2).unwrap(),
                &Tensor::where_cond(&cc, &fc, c2).unwrap(),
                0,
            );
        }
    }
    // The named cases: f64 + f32, i64 / f64, a 0-d f64 with an i32 tensor (float64: a higher
    // category), a 0-d f64 with an f32 tensor (float32: same category), scalars.
    let x32 = Tensor::from_slice(&[0.1f32, -2.5, 3.0], [3], dev).unwrap();
    let x64 = Tensor::from_slice(&[0.2f64, 1e-17, -7.0], [3], dev).unwrap();
    let i64s = Tensor::from_slice(&[7i64, -3, 1 << 60], [3], dev).unwrap();
    let s = (&x64 + &x32).unwrap();
    assert_eq!(s.dtype(), DType::F64);
    assert_eq!(host(&s), [0.2 + f64::from(0.1f32), 1e-17 - 2.5, -4.0]);
    let q = i64s.div(&x64).unwrap();
    assert_eq!(q.dtype(), DType::F64);
    assert_eq!(
        host(&q),
        [7.0 / 0.2, -3.0 / 1e-17, (1i64 << 60) as f64 / -7.0]
    );
    let z = Tensor::from_slice(&[0.5f64], (), dev).unwrap();
    let i32s = Tensor::from_slice(&[1i32, 2, 3], [3], dev).unwrap();
    assert_eq!((&i32s * &z).unwrap().dtype(), DType::F64);
    assert_eq!(host(&(&i32s * &z).unwrap()), [0.5, 1.0, 1.5]);
    assert_eq!((&x32 * &z).unwrap().dtype(), DType::F32);
    assert_eq!((&x64 + 1).unwrap().dtype(), DType::F64);
    assert_eq!(host(&(&x64 * 3).unwrap()), [0.2 * 3.0, 1e-17 * 3.0, -21.0]);
    assert_eq!(host(&(0.5 - &x64).unwrap()), [0.5 - 0.2, 0.5 - 1e-17, 7.5]);
    // Sums: f64 stays f64 and is summed in f64.
    let t = Tensor::from_slice(&[1.0, 2f64.powi(-40), 2f64.powi(-40)], [3], dev).unwrap();
    assert_eq!(host(&t.sum().unwrap()), [1.0 + 2f64.powi(-39)]);
}
