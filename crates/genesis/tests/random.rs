//! Seeded random tensors: the same seed gives the same bits on every device; distributions,
//! ranges and errors.

use genesis::{DType, Device, Error, Generator, Tensor, manual_seed};

mod common;
use common::{Release, devices};

fn bits(t: &Tensor) -> Vec<u64> {
    common::f64_values(t)
        .into_iter()
        .map(f64::to_bits)
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_bits_on_every_device() {
    let _release = Release;
    let devs = devices();
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for n in [0usize, 1, 3, 4, 5, 1001, 65_537] {
            let mut per_device = Vec::new();
            for &dev in &devs {
                let g = Generator::new(1234);
                let u = g.rand([n], dtype, dev).unwrap();
                let z = g.randn([n], dtype, dev).unwrap();
                let k = g.randint(-50, 50, [n], DType::I64, dev).unwrap();
                let k32 = g.randint(-7, 1 << 20, [n], DType::I32, dev).unwrap();
                assert_eq!((u.dtype(), u.device(), u.shape()), (dtype, dev, &[n][..]));
                per_device.push((
                    bits(&u),
                    bits(&z),
                    k.to(Device::Cpu).unwrap().to_vec::<i64>().unwrap(),
                    k32.to(Device::Cpu).unwrap().to_vec::<i32>().unwrap(),
                    g.offset(),
                ));
            }
            for (d, other) in per_device.iter().enumerate().skip(1) {
                assert!(
                    other == &per_device[0],
                    "{dtype} n={n}: {} differs from the CPU",
                    devs[d]
                );
            }
        }
    }
}

#[test]
fn uniform_normal_and_integer_distributions() {
    for dev in devices() {
        let _release = Release;
        let g = Generator::new(7);
        let n = 200_000;
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
            let u = g
                .rand([n], dtype, dev)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            assert!(
                u.iter().all(|x| (0.0..1.0).contains(x)),
                "{dtype} rand outside [0, 1)"
            );
            let mean = u.iter().sum::<f64>() / n as f64;
            assert!((mean - 0.5).abs() < 0.01, "{dtype} rand mean {mean}");
            let z = g
                .randn([n], dtype, dev)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let mean = z.iter().sum::<f64>() / n as f64;
            let var = z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            assert!(
                mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
                "{dtype} randn {mean} {var}"
            );
            let within1 = z.iter().filter(|x| x.abs() < 1.0).count() as f64 / n as f64;
            assert!(
                (within1 - 0.6827).abs() < 0.01,
                "{dtype} randn P(|z|<1) = {within1}"
            );
        }
        let k = g
            .randint(3, 13, [n], DType::I64, dev)
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        for v in 3..13 {
            let c = k.iter().filter(|&&x| x == v).count();
            assert!((c as f64 / n as f64 - 0.1).abs() < 0.01, "{v}: {c}");
        }
        assert!(k.iter().all(|x| (3..13).contains(x)));
        let big = g
            .randint(i64::MIN, i64::MAX, [1000], DType::I64, dev)
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        assert!(big.iter().any(|&x| x < 0) && big.iter().any(|&x| x > 0));
        let f = g.randint(0, 4, [100], DType::F32, dev).unwrap();
        assert_eq!(f.dtype(), DType::F32);
        assert!(
            f.to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|&x| x == x.trunc() && (0.0..4.0).contains(&x))
        );
        // Successive draws differ; shapes are kept; empty shapes work.
        let a = g.rand([3, 5], DType::F32, dev).unwrap();
        let b = g.rand([3, 5], DType::F32, dev).unwrap();
        assert_eq!(a.shape(), [3, 5]);
        assert_ne!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        assert_eq!(g.rand([0, 4], DType::F32, dev).unwrap().numel(), 0);
        assert_eq!(a.rand_like().unwrap().shape(), [3, 5]);
        assert_eq!(a.randn_like().unwrap().device(), dev);
    }
}

#[test]
fn generator_state_replays_and_errors_are_typed() {
    let g = Generator::new(99);
    let _ = g.rand([10], DType::F32, Device::Cpu).unwrap();
    let (seed, offset) = (g.seed(), g.offset());
    assert_eq!(offset, 3, "10 f32 uniforms use three Philox blocks");
    let x = g.randn([17], DType::F32, Device::Cpu).unwrap();
    g.set_state(seed, offset);
    let y = g.randn([17], DType::F32, Device::Cpu).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
    // The global generator.
    manual_seed(5);
    let a = Tensor::randn([8], DType::F32, Device::Cpu).unwrap();
    manual_seed(5);
    let b = Tensor::randn([8], DType::F32, Device::Cpu).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(
        a.to_vec::<f32>().unwrap(),
        Generator::new(5)
            .randn([8], DType::F32, Device::Cpu)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
    // Errors.
    assert!(matches!(
        g.rand([2], DType::I32, Device::Cpu),
        Err(Error::InvalidArgument { op: "rand", .. })
    ));
    assert!(matches!(
        g.randn([2], DType::Bool, Device::Cpu),
        Err(Error::InvalidArgument { op: "randn", .. })
    ));
    assert!(matches!(
        g.randint(5, 5, [2], DType::I64, Device::Cpu),
        Err(Error::InvalidArgument { op: "randint", .. })
    ));
    assert!(matches!(
        g.randint(0, 1 << 40, [2], DType::I32, Device::Cpu),
        Err(Error::InvalidArgument { op: "randint", .. })
    ));
    assert!(matches!(
        g.randint(0, 2, [2], DType::Bool, Device::Cpu),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(g.rand([usize::MAX, 2], DType::F32, Device::Cpu).is_err());
}

#[test]
fn integers_of_every_range_width_agree_across_devices() {
    let _release = Release;
    let devs = devices();
    // Ranges of one value up to the whole of int64 (the kernels' remainder takes a
    // multiply-high and corrections; the CPU twin divides).
    let cases: [(i64, i64); 9] = [
        (5, 6),
        (0, 2),
        (-1, 2),
        (-3, 4),
        (0, 1000),
        (0, i64::from(i32::MAX)),
        (-(1 << 32), 5),
        (-(1 << 62), (1 << 62) + 7),
        (i64::MIN, i64::MAX),
    ];
    for (low, high) in cases {
        for n in [1usize, 2, 3, 4097] {
            let mut seen = Vec::new();
            for &dev in &devs {
                let g = Generator::new(99);
                let k = g.randint(low, high, [n], DType::I64, dev).unwrap();
                let v = k.to(Device::Cpu).unwrap().to_vec::<i64>().unwrap();
                assert!(v.iter().all(|x| (low..high).contains(x)), "[{low}, {high})");
                seen.push(v);
            }
            assert!(seen.iter().all(|v| v == &seen[0]), "[{low}, {high}) n={n}");
        }
    }
}

/// randperm gives permutations (the same on every device from one seed), multinomial draws
/// each category about as often as its weight says (never a zero weight; without
/// replacement, distinct categories), bernoulli's mean follows its probability; bad
/// arguments are typed errors.
#[test]
fn sampling_randperm_multinomial_bernoulli() {
    let _release = Release;
    for dev in devices() {
        for n in [0usize, 1, 2, 7, 1000, 5000] {
            let g = Generator::new(11);
            let p = g.randperm(n, DType::I64, dev).unwrap();
            let mut v = p.to_vec::<i64>().unwrap();
            let first = v.clone();
            v.sort_unstable();
            assert_eq!(
                v,
                (0..n as i64).collect::<Vec<_>>(),
                "randperm({n}) on {dev}"
            );
            let again = Generator::new(11)
                .randperm(n, DType::I64, Device::Cpu)
                .unwrap();
            assert_eq!(
                again.to_vec::<i64>().unwrap(),
                first,
                "same seed, same permutation"
            );
        }
        let w = [0.0f64, 1.0, 3.0, 0.0, 6.0];
        let probs = Tensor::from_slice(&w, [5], dev).unwrap();
        let g = Generator::new(5);
        let n = 20_000usize;
        let draws = g.multinomial(&probs, n, true).unwrap();
        assert_eq!(draws.shape(), &[n]);
        let mut counts = [0usize; 5];
        for k in draws.to_vec::<i64>().unwrap() {
            counts[k as usize] += 1;
        }
        assert_eq!(
            (counts[0], counts[3]),
            (0, 0),
            "zero weights drawn on {dev}"
        );
        for (k, &c) in counts.iter().enumerate() {
            let expect = n as f64 * w[k] / 10.0;
            // Five standard deviations of a binomial count.
            let sd = (n as f64 * w[k] / 10.0 * (1.0 - w[k] / 10.0)).sqrt();
            assert!(
                (c as f64 - expect).abs() <= 5.0 * sd + 1.0,
                "category {k}: {c} draws, expected about {expect} on {dev}"
            );
        }
        // Without replacement: distinct, non-zero categories, a row at a time.
        let rows =
            Tensor::from_slice(&[1.0f32, 0.0, 2.0, 3.0, 5.0, 5.0, 0.0, 1.0], [2, 4], dev).unwrap();
        for _ in 0..20 {
            let d = g.multinomial(&rows, 3, false).unwrap();
            assert_eq!(d.shape(), &[2, 3]);
            let v = d.to_vec::<i64>().unwrap();
            for r in v.chunks(3) {
                let mut s = r.to_vec();
                s.sort_unstable();
                s.dedup();
                assert_eq!(s.len(), 3, "distinct draws {r:?}");
            }
            assert!(
                !v[..3].contains(&1) && !v[3..].contains(&2),
                "a zero weight drawn: {v:?}"
            );
        }
        // Errors.
        let bad = |t: &[f32]| Tensor::from_slice(t, [t.len()], dev).unwrap();
        assert!(g.multinomial(&bad(&[0.0, 0.0]), 1, true).is_err());
        assert!(g.multinomial(&bad(&[1.0, -1.0]), 1, true).is_err());
        assert!(g.multinomial(&bad(&[1.0, f32::NAN]), 1, true).is_err());
        assert!(g.multinomial(&bad(&[1.0, 0.0]), 2, false).is_err());
        assert!(g.multinomial(&bad(&[1.0, 1.0]), 3, false).is_err());
        assert!(g.multinomial(&bad(&[1.0, 1.0]), 0, true).is_err());
        assert!(g.multinomial(&bad(&[]), 1, true).is_err());
        // bernoulli: the mean follows the probability; out-of-range probabilities refused.
        let probs = Tensor::full([20_000], 0.3f32, dev).unwrap();
        let b = g.bernoulli(&probs).unwrap();
        assert_eq!(b.dtype(), DType::F32);
        let mean = b.to_vec::<f32>().unwrap().iter().sum::<f32>() / 20_000.0;
        assert!((mean - 0.3).abs() < 0.02, "bernoulli mean {mean} on {dev}");
        assert!(g.bernoulli(&bad(&[0.5, 1.5])).is_err());
        assert!(g.bernoulli(&bad(&[f32::NAN])).is_err());
        assert!(g.randperm(300, DType::U8, dev).is_err());
    }
}
