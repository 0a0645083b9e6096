//! matmul, bmm and matmul_out against f64 references, on the CPU and (when present) CUDA, for
//! f32, f16 and bf16, with odd, empty, 1-D and broadcast batch shapes.

use genesis::{DType, Device, Error, Generator, Tensor};

mod common;
use common::{Release, devices};

/// The tests of this file run one at a time: one counts the device pool's allocations.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// A random tensor of `dtype` on `dev`, and the f64 values it holds.
fn random(g: &Generator, shape: &[usize], dtype: DType, dev: Device) -> (Tensor, Vec<f64>) {
    let t = g.randn(shape, dtype, Device::Cpu).unwrap();
    let held = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    (t.to(dev).unwrap(), held)
}

fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

/// `a @ b` in f64 with NumPy's rules, and for each output the sum of |a||b| (the error scale).
fn reference(a: (&[f64], &[usize]), b: (&[f64], &[usize])) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (sa, sb) = (a.1, b.1);
    let (ma, ka) = if sa.len() == 1 {
        (1, sa[0])
    } else {
        (sa[sa.len() - 2], sa[sa.len() - 1])
    };
    let (kb, nb) = if sb.len() == 1 {
        (sb[0], 1)
    } else {
        (sb[sb.len() - 2], sb[sb.len() - 1])
    };
    assert_eq!(ka, kb);
    let ba = &sa[..sa.len().saturating_sub(2)];
    let bb = &sb[..sb.len().saturating_sub(2)];
    let batch = genesis::broadcast_shape("t", ba, bb).unwrap();
    let nbatch: usize = batch.iter().product();
    let index = |bshape: &[usize], flat: usize| -> usize {
        // Broadcast batch index of `flat` (over `batch`) in an operand with batch shape `bshape`.
        let mut rem = flat;
        let mut idx = vec![0; batch.len()];
        for d in (0..batch.len()).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        let lead = batch.len() - bshape.len();
        bshape.iter().enumerate().fold(0, |acc, (d, &n)| {
            acc * n + if n == 1 { 0 } else { idx[lead + d] }
        })
    };
    let (mut out, mut scale) = (Vec::new(), Vec::new());
    for bi in 0..nbatch {
        let (oa, ob) = (index(ba, bi) * ma * ka, index(bb, bi) * ka * nb);
        for i in 0..ma {
            for j in 0..nb {
                let (mut s, mut t) = (0.0, 0.0);
                for k in 0..ka {
                    let (x, y) = (a.0[oa + i * ka + k], b.0[ob + k * nb + j]);
                    s += x * y;
                    t += (x * y).abs();
                }
                out.push(s);
                scale.push(t);
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(ma);
    }
    if sb.len() > 1 {
        shape.push(nb);
    }
    (shape, out, scale)
}

fn check(got: &Tensor, want: &[f64], scale: &[f64], k: usize, dtype: DType, what: &str) {
    let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        // f32 accumulation over k terms, then one rounding to the output type.
        let tol = (k as f64 + 2.0) * 2f64.powi(-24) * s + eps(dtype) * w.abs() + 1e-30;
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: {g} vs {w} (tolerance {tol})"
        );
    }
}

const CASES: &[(&[usize], &[usize])] = &[
    (&[2, 3], &[3, 4]),
    (&[1, 1], &[1, 1]),
    (&[7], &[7]),
    (&[5], &[5, 3]),
    (&[4, 5], &[5]),
    (&[3, 2, 4], &[4, 5]),
    (&[4, 5], &[3, 5, 2]),
    (&[2, 1, 3, 4], &[5, 4, 6]),
    (&[0, 3], &[3, 2]),
    (&[3, 0], &[0, 2]),
    (&[129, 257], &[257, 131]),
    (&[2, 130, 70], &[2, 70, 129]),
];

#[test]
fn matmul_matches_f64_references_with_numpy_shape_rules() {
    let _serial = serial();
    let _release = Release;
    let g = Generator::new(11);
    for dev in devices() {
        for dtype in DTYPES {
            for &(sa, sb) in CASES {
                let (a, va) = random(&g, sa, dtype, dev);
                let (b, vb) = random(&g, sb, dtype, dev);
                let got = a.matmul(&b).unwrap();
                let (shape, want, scale) = reference((&va, sa), (&vb, sb));
                assert_eq!(got.shape(), shape.as_slice(), "{sa:?} @ {sb:?}");
                assert_eq!((got.dtype(), got.device()), (dtype, dev));
                let k = if sa.len() == 1 {
                    sa[0]
                } else {
                    sa[sa.len() - 1]
                };
                check(
                    &got,
                    &want,
                    &scale,
                    k,
                    dtype,
                    &format!("{dtype} {sa:?} @ {sb:?} on {dev}"),
                );
            }
            // Non-contiguous operands.
            let (a, va) = random(&g, &[6, 4], dtype, dev);
            let (b, vb) = random(&g, &[5, 6], dtype, dev);
            let got = a.t().unwrap().matmul(&b.t().unwrap()).unwrap();
            let at: Vec<f64> = (0..24).map(|i| va[(i % 6) * 4 + i / 6]).collect();
            let bt: Vec<f64> = (0..30).map(|i| vb[(i % 5) * 6 + i / 5]).collect();
            let (_, want, scale) = reference((&at, &[4, 6]), (&bt, &[6, 5]));
            check(
                &got,
                &want,
                &scale,
                6,
                dtype,
                &format!("transposed {dtype} on {dev}"),
            );
            // bmm.
            let (x, vx) = random(&g, &[3, 4, 5], dtype, dev);
            let (y, vy) = random(&g, &[3, 5, 2], dtype, dev);
            let (_, want, scale) = reference((&vx, &[3, 4, 5]), (&vy, &[3, 5, 2]));
            check(&x.bmm(&y).unwrap(), &want, &scale, 5, dtype, "bmm");
        }
    }
}

#[test]
fn gpu_matches_its_cpu_twin_on_a_larger_product() {
    let _serial = serial();
    let _release = Release;
    let g = Generator::new(5);
    let devs = devices();
    if devs.len() < 2 {
        return;
    }
    for dtype in DTYPES {
        let (a, va) = random(&g, &[300, 513], dtype, Device::Cpu);
        let (b, vb) = random(&g, &[513, 257], dtype, Device::Cpu);
        let cpu = a.matmul(&b).unwrap();
        let gpu = a
            .to(devs[1])
            .unwrap()
            .matmul(&b.to(devs[1]).unwrap())
            .unwrap();
        let (_, want, scale) = reference((&va, &[300, 513]), (&vb, &[513, 257]));
        check(&cpu, &want, &scale, 513, dtype, "cpu");
        check(&gpu, &want, &scale, 513, dtype, "gpu");
    }
}

/// Products with few output tiles and a long k, which CUDA splits over k (split-k: partial
/// products over slices of k summed in a fixed order) on any GPU of 12 or more
/// multiprocessors: within the f32 accumulation bound of the f64 reference on both devices,
/// and the same bits when run twice.
#[test]
fn thin_products_with_a_long_k_match_f64_references_and_repeat_exactly() {
    let _serial = serial();
    let _release = Release;
    let g = Generator::new(17);
    // (a, b, transpose a): one tile of output rows and 3 of columns, k 2048 (8 slices); a
    // broadcast batch of 6 with a prime k; prime m, n and k; a transposed left operand.
    let cases: &[(&[usize], &[usize], bool)] = &[
        (&[64, 2048], &[2048, 384], false),
        (&[3, 1, 40, 1031], &[2, 1031, 200], false),
        (&[131, 1543], &[1543, 127], false),
        (&[1024, 96], &[1024, 160], true),
    ];
    for dev in devices() {
        for dtype in DTYPES {
            for &(sa, sb, ta) in cases {
                let (a, va) = random(&g, sa, dtype, dev);
                let (b, vb) = random(&g, sb, dtype, dev);
                let (a, va, sa) = if ta {
                    // `a.t()`: the values of the transposed matrix, row-major.
                    let (r, c) = (sa[0], sa[1]);
                    let vt: Vec<f64> = (0..r * c).map(|i| va[(i % r) * c + i / r]).collect();
                    (a.t().unwrap(), vt, vec![c, r])
                } else {
                    (a, va, sa.to_vec())
                };
                let k = sa[sa.len() - 1];
                let what = format!("{dtype} {sa:?} @ {sb:?} on {dev}");
                let got = a.matmul(&b).unwrap();
                let (shape, want, scale) = reference((&va, &sa), (&vb, sb));
                assert_eq!(got.shape(), shape.as_slice(), "{what}");
                check(&got, &want, &scale, k, dtype, &what);
                let again = a.matmul(&b).unwrap();
                assert_eq!(
                    got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    again.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    "{what}: two runs differ"
                );
                // Into a view of a larger tensor: the second half of its rows.
                let mut rows = shape.clone();
                let last = rows.len() - 2;
                rows[last] *= 2;
                let big = Tensor::zeros(rows, dtype, dev).unwrap();
                let mut view = big.narrow(last, shape[last], shape[last]).unwrap();
                a.matmul_out(&b, &mut view).unwrap();
                check(
                    &view,
                    &want,
                    &scale,
                    k,
                    dtype,
                    &format!("{what}, matmul_out"),
                );
            }
        }
    }
}

#[test]
fn matmul_out_writes_in_place_and_errors_name_both_shapes() {
    let _serial = serial();
    let _release = Release;
    let g = Generator::new(3);
    for dev in devices() {
        let (a, _) = random(&g, &[2, 8, 16], DType::F32, dev);
        let (b, _) = random(&g, &[16, 4], DType::F32, dev);
        let mut out = Tensor::zeros([2, 8, 4], DType::F32, dev).unwrap();
        let before = allocations(dev);
        a.matmul_out(&b, &mut out).unwrap();
        assert_eq!(allocations(dev), before, "matmul_out on {dev} allocated");
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            a.matmul(&b).unwrap().to_vec::<f32>().unwrap()
        );
        let mut wrong = Tensor::zeros([2, 8, 5], DType::F32, dev).unwrap();
        assert!(matches!(
            a.matmul_out(&b, &mut wrong),
            Err(Error::InvalidArgument { op: "matmul", .. })
        ));
        // The seed's example: 1000x1000 by 500x500.
        let x = Tensor::zeros([1000, 1000], DType::F32, dev).unwrap();
        let y = Tensor::zeros([500, 500], DType::F32, dev).unwrap();
        let err = x.matmul(&y).unwrap_err();
        assert!(matches!(
            err,
            Error::InnerDimMismatch {
                op: "matmul",
                lhs_inner: 1000,
                rhs_inner: 500,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "matmul: mat1 and mat2 shapes cannot be multiplied (1000x1000 and 500x500)"
        );
        // Batch dimensions that do not broadcast; 0-d operands; dtypes; bmm's stricter rule.
        let p = Tensor::zeros([2, 3, 4], DType::F32, dev).unwrap();
        let q = Tensor::zeros([3, 4, 5], DType::F32, dev).unwrap();
        assert!(matches!(p.matmul(&q), Err(Error::ShapeMismatch { .. })));
        let s = Tensor::zeros((), DType::F32, dev).unwrap();
        assert!(matches!(s.matmul(&p), Err(Error::InvalidArgument { .. })));
        let h = Tensor::zeros([4, 5], DType::F16, dev).unwrap();
        assert!(matches!(p.matmul(&h), Err(Error::DTypeMismatch { .. })));
        // Integers multiply on the CPU only; bool nowhere.
        let i = Tensor::zeros([4, 4], DType::I32, dev).unwrap();
        assert_eq!(
            i.matmul(&i).is_ok(),
            dev == Device::Cpu,
            "int32 matmul on {dev}"
        );
        let m = Tensor::zeros([4, 4], DType::Bool, dev).unwrap();
        assert!(m.matmul(&m).is_err(), "bool matmul is refused");
        let r = Tensor::zeros([4, 5], DType::F32, dev).unwrap();
        assert!(matches!(
            p.bmm(&r),
            Err(Error::ShapeMismatch { op: "bmm", .. })
        ));
    }
}

/// Allocations made so far by the device's pool (0 on the CPU, which has no pool).
fn allocations(dev: Device) -> i64 {
    match dev {
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => genesis::cuda::memory_stats(i).unwrap()["allocation.all.allocated"],
        _ => 0,
    }
}

/// The devices that compute products of `dtype`: every one for f64, the CPU for integers.
fn computes(dtype: DType) -> Vec<Device> {
    devices()
        .into_iter()
        .filter(|&d| d == Device::Cpu || dtype == DType::F64)
        .collect()
}

/// f64, int32 and int64 products: f64 within the f64 accumulation bound on every device,
/// integers exact (small values, so the f64 reference is exact) and wrapping on the CPU, with
/// NumPy's shape rules, transposed operands and broadcast batches; integers on CUDA, which
/// has no kernel for them (nor has PyTorch), a typed `UnsupportedDType`.
#[test]
fn f64_products_everywhere_and_integer_products_on_the_cpu() {
    let _serial = serial();
    let _release = Release;
    let g = Generator::new(12);
    for dtype in [DType::F64, DType::I32, DType::I64] {
        let make = |shape: &[usize]| -> (Tensor, Vec<f64>) {
            let t = g.randn(shape, DType::F64, Device::Cpu).unwrap();
            let t = if dtype == DType::F64 {
                t
            } else {
                t.mul(40.0).unwrap().to_dtype(dtype).unwrap()
            };
            let held = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            (t, held)
        };
        let check = |got: &Tensor, want: &[f64], scale: &[f64], k: usize, what: &str| {
            assert_eq!(got.dtype(), dtype, "{what}");
            let got = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
                let tol = if dtype == DType::F64 {
                    2.0 * (k as f64 + 2.0) * 2f64.powi(-53) * s + 1e-300
                } else {
                    0.0
                };
                assert!((g - w).abs() <= tol, "{what}: element {i}: {g} vs {w}");
            }
        };
        for &(sa, sb) in CASES {
            let (a, va) = make(sa);
            let (b, vb) = make(sb);
            let (shape, want, scale) = reference((&va, sa), (&vb, sb));
            let k = if sa.len() == 1 {
                sa[0]
            } else {
                sa[sa.len() - 1]
            };
            for dev in computes(dtype) {
                let (a, b) = (a.to(dev).unwrap(), b.to(dev).unwrap());
                let got = a.matmul(&b).unwrap().to(Device::Cpu).unwrap();
                assert_eq!(got.shape(), shape.as_slice(), "{sa:?} @ {sb:?} on {dev}");
                check(
                    &got,
                    &want,
                    &scale,
                    k,
                    &format!("{dtype} {sa:?} @ {sb:?} on {dev}"),
                );
            }
        }
        // Transposed operands, batched against a broadcast transposed matrix.
        let (a, va) = make(&[3, 6, 4]);
        let (b, vb) = make(&[5, 6]);
        let at: Vec<f64> = (0..72)
            .map(|x| va[(x / 24) * 24 + (x % 6) * 4 + (x % 24) / 6])
            .collect();
        let bt: Vec<f64> = (0..30).map(|x| vb[(x % 5) * 6 + x / 5]).collect();
        let (_, want, scale) = reference((&at, &[3, 4, 6]), (&bt, &[6, 5]));
        for dev in computes(dtype) {
            let (a, b) = (a.to(dev).unwrap(), b.to(dev).unwrap());
            let got = a.transpose(1, 2).unwrap().matmul(&b.t().unwrap()).unwrap();
            let got = got.to(Device::Cpu).unwrap();
            check(
                &got,
                &want,
                &scale,
                6,
                &format!("transposed {dtype} on {dev}"),
            );
        }
        if dtype != DType::F64
            && let Some(&dev) = devices().get(1)
        {
            let (a, b) = (a.to(dev).unwrap(), b.to(dev).unwrap());
            assert!(
                matches!(
                    a.transpose(1, 2).unwrap().matmul(&b.t().unwrap()),
                    Err(Error::Storage(
                        genesis_storage::Error::UnsupportedDType { .. }
                    ))
                ),
                "{dtype} on {dev}"
            );
        }
    }
    // f64 products on a GPU at sizes past one tile and one k slice, against the CPU's.
    if let Some(&dev) = devices().get(1) {
        let a = g.randn(&[2, 130, 70][..], DType::F64, Device::Cpu).unwrap();
        let b = g.randn(&[70, 67][..], DType::F64, Device::Cpu).unwrap();
        let want = a.matmul(&b).unwrap().to_vec::<f64>().unwrap();
        let got = a.to(dev).unwrap().matmul(&b.to(dev).unwrap()).unwrap();
        let got = got.to(Device::Cpu).unwrap().to_vec::<f64>().unwrap();
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                "element {i}: {x} vs {y}"
            );
        }
    }
    // Wrapping, as PyTorch's CPU matmul: 2 * (2^31 - 1) + 3 = 2^32 + 1.
    let a = Tensor::from_slice(&[i32::MAX, 1], [1, 2], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&[2i32, 3], [2], Device::Cpu).unwrap();
    assert_eq!(a.matmul(&b).unwrap().to_vec::<i32>().unwrap(), [1]);
}

/// Views read in place (transposed, column-sliced, batch-permuted, broadcast by a zero batch
/// stride, single rows and columns, a batch folded into the rows of one product, a linear
/// layer's `x @ Wᵀ` and `gᵀ @ x` at sizes the tensor-core kernels take, with leading
/// dimensions they read in place and ones they copy) and views copied (stepped inner
/// dimensions): the same values as the product of contiguous copies (small integer values, so
/// every order of the sum is exact and a half-precision result rounds the same exact sum),
/// through `matmul` and `matmul_out`: f32, f64 and int64 on the CPU, f32, f16, bf16 and f64
/// on CUDA.
#[test]
fn strided_views_give_the_product_of_their_contiguous_copies() {
    let _serial = serial();
    let g = Generator::new(13);
    for dev in devices() {
        let dtypes: &[DType] = if dev == Device::Cpu {
            &[DType::F32, DType::F64, DType::I64]
        } else {
            &[DType::F32, DType::F16, DType::BF16, DType::F64]
        };
        for &dtype in dtypes {
            let ints = |shape: &[usize]| -> Tensor {
                g.randn(shape, DType::F32, Device::Cpu)
                    .unwrap()
                    .mul(8.0)
                    .unwrap()
                    .to_dtype(DType::I64)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .to(dev)
                    .unwrap()
            };
            let big = ints(&[4, 9, 11]);
            let mat = ints(&[9, 11]);
            let pairs: Vec<(&str, Tensor, Tensor)> = vec![
                ("t @ t", mat.t().unwrap(), ints(&[7, 9]).t().unwrap()),
                (
                    "narrow cols @ narrow rows",
                    mat.narrow(1, 2, 6).unwrap(),
                    mat.narrow(0, 1, 6).unwrap(),
                ),
                (
                    "batched transposed @ matrix",
                    big.transpose(1, 2).unwrap(),
                    ints(&[9, 5]),
                ),
                ("folded batch @ matrix", big.clone(), ints(&[11, 5])),
                (
                    "folded batch @ transposed matrix",
                    big.clone(),
                    ints(&[3, 11]).t().unwrap(),
                ),
                (
                    "permuted batch",
                    big.permute([1, 0, 2]).unwrap(),
                    ints(&[9, 11, 3]),
                ),
                (
                    "permuted batch @ matrix",
                    big.permute([1, 0, 2]).unwrap(),
                    ints(&[11, 3]),
                ),
                (
                    "expanded batch",
                    mat.unsqueeze(0).unwrap().expand([3, 9, 11]).unwrap(),
                    ints(&[3, 11, 2]),
                ),
                (
                    "narrowed batch and cols",
                    big.narrow(0, 1, 2).unwrap().narrow(2, 3, 5).unwrap(),
                    ints(&[2, 4, 5]).transpose(1, 2).unwrap(),
                ),
                (
                    "row @ column",
                    mat.narrow(0, 3, 1).unwrap(),
                    mat.t().unwrap().narrow(1, 4, 1).unwrap(),
                ),
                (
                    "stepped (copied)",
                    big.permute([2, 0, 1]).unwrap().narrow(0, 0, 9).unwrap(),
                    ints(&[9, 9, 6]).permute([1, 0, 2]).unwrap(),
                ),
                (
                    "linear x @ W.t",
                    ints(&[2, 160, 136]),
                    ints(&[200, 136]).t().unwrap(),
                ),
                (
                    "linear g.t @ x",
                    ints(&[320, 200]).t().unwrap(),
                    ints(&[320, 136]),
                ),
                (
                    "linear x @ W.t, lines off 16 bytes",
                    ints(&[2, 130, 129]),
                    ints(&[140, 129]).t().unwrap(),
                ),
                (
                    "column slice of a wide matrix, transposed",
                    ints(&[136, 300]).narrow(1, 8, 256).unwrap().t().unwrap(),
                    ints(&[136, 72]),
                ),
            ];
            for (what, a, b) in pairs {
                let what = format!("{dtype} on {dev}: {what} {:?} @ {:?}", a.shape(), b.shape());
                let want = a
                    .contiguous()
                    .unwrap()
                    .matmul(&b.contiguous().unwrap())
                    .unwrap();
                let got = a.matmul(&b).unwrap();
                assert_eq!(got.shape(), want.shape(), "{what}");
                let f64s = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                assert_eq!(f64s(&got), f64s(&want), "{what}");
                let mut out = Tensor::zeros(want.shape(), dtype, dev).unwrap();
                a.matmul_out(&b, &mut out).unwrap();
                assert_eq!(f64s(&out), f64s(&want), "{what} (matmul_out)");
            }
        }
    }
}

/// `linear` with a bias (added by the product's kernel where it can: the unsplit Hopper
/// kernels) against an f64 reference, on every device and float dtype: shapes the tensor-core
/// kernels take (a 3-D input folded into one product, output widths on and off 8 elements),
/// small and thin ones, a split product (long `k`), a bias of another dtype (added after), and a
/// strided bias.
#[test]
fn linear_with_bias_matches_an_f64_reference() {
    let _serial = serial();
    let g = Generator::new(23);
    for dev in devices() {
        for dtype in DTYPES {
            for &(lead, k, n) in &[
                (&[2usize, 160][..], 136usize, 200usize),
                (&[300][..], 256, 384),
                (&[5][..], 7, 3),
                (&[130][..], 4096, 136),
                (&[1][..], 64, 1),
            ] {
                let mut xs = lead.to_vec();
                xs.push(k);
                let (x, xv) = random(&g, &xs, dtype, dev);
                let (w, wv) = random(&g, &[n, k], dtype, dev);
                let (b2, bv2) = random(&g, &[n, 2], dtype, dev);
                // A contiguous bias, and one read with a stride of 2.
                let col = b2.narrow(1, 0, 1).unwrap().reshape([n as isize]).unwrap();
                let cases = [(col.contiguous().unwrap(), "contiguous"), (col, "strided")];
                let rows: usize = lead.iter().product();
                for (b, what) in cases {
                    let y = x.linear(&w, Some(&b)).unwrap();
                    let mut want_shape = lead.to_vec();
                    want_shape.push(n);
                    assert_eq!(y.shape(), &want_shape[..]);
                    let got = y.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                    for r in 0..rows {
                        for j in 0..n {
                            let (mut acc, mut scale) = (bv2[j * 2], bv2[j * 2].abs());
                            for i in 0..k {
                                acc += xv[r * k + i] * wv[j * k + i];
                                scale += (xv[r * k + i] * wv[j * k + i]).abs();
                            }
                            let tol = 4.0 * eps(dtype) * (acc.abs() + scale) + 1e-30;
                            let e = (got[r * n + j] - acc).abs();
                            assert!(
                                e <= tol,
                                "{dtype} on {dev} {lead:?}x{k} -> {n} ({what} bias): [{r}, {j}] \
                                 {} against {acc} (tolerance {tol})",
                                got[r * n + j]
                            );
                        }
                    }
                }
            }
            // A bias of another dtype: the product's dtype promotes with it, as PyTorch's.
            let (x, _) = random(&g, &[4, 8], dtype, dev);
            let (w, _) = random(&g, &[3, 8], dtype, dev);
            let b = Tensor::ones([3], DType::F64, dev).ok();
            if let Some(b) = b {
                let y = x.linear(&w, Some(&b));
                if let Ok(y) = y {
                    let want = x.matmul(&w.t().unwrap()).unwrap().add(&b).unwrap();
                    assert_eq!(y.dtype(), want.dtype());
                }
            }
        }
    }
}
