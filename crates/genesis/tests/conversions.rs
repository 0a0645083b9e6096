//! Conversions and transfers of views read their elements in place when they lie one after
//! another in the storage (a row range, a narrowed leading dimension, the whole tensor), and
//! through a gathering copy otherwise: `to_dtype`, `to(device)` and `to_vec` give the same
//! values either way, for every dtype pair, offset and device (pinned host memory included).

#[allow(dead_code)]
mod common;

use common::{Release, devices};
use genesis::{DType, Device, Tensor, s};

const DTYPES: [DType; 9] = [
    DType::F64,
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U8,
];

/// Views of a [6, 5] tensor: contiguous ones at offsets 0, 5 and 10, an empty one, and
/// strided ones (a transpose, a column range, a step).
fn views(t: &Tensor) -> Vec<(&'static str, Tensor)> {
    vec![
        ("whole", t.clone()),
        ("rows 1..4", t.i(&s![1..4]).unwrap()),
        ("row 2", t.i(&s![2]).unwrap()),
        ("rows 5..5", t.i(&s![5..5]).unwrap()),
        ("transpose", t.t().unwrap()),
        ("cols 1..3", t.i(&s![.., 1..3]).unwrap()),
        ("rows ::2", t.i(&s![..;2]).unwrap()),
    ]
}

#[test]
fn views_convert_and_move_the_same_in_place_or_gathered() {
    let _release = Release;
    let vals: Vec<f64> = (0..30).map(|i| (i as f64) * 1.5 - 11.0).collect();
    for dev in devices() {
        for from in DTYPES {
            let base = Tensor::from_slice(&vals, [6, 5], Device::Cpu)
                .unwrap()
                .to_dtype(from)
                .unwrap();
            let mut bases = vec![("plain", base.to(dev).unwrap())];
            if dev != Device::Cpu {
                bases.push(("pinned", base.pin_memory().unwrap()));
            }
            for (kind, b) in &bases {
                for (name, v) in views(b) {
                    let what = format!("{dev:?} {kind} {from} {name}");
                    // The reference: the gathered copy's values.
                    let want = v.contiguous().unwrap().to_dtype(DType::F64).unwrap();
                    let want = want.to(Device::Cpu).unwrap().to_vec::<f64>().unwrap();
                    for to in DTYPES {
                        let c = v.to_dtype(to).unwrap();
                        assert_eq!(c.shape(), v.shape(), "{what} -> {to}");
                        assert_eq!(c.dtype(), to, "{what} -> {to}");
                        let back = v
                            .contiguous()
                            .unwrap()
                            .to_dtype(to)
                            .unwrap()
                            .to(Device::Cpu)
                            .unwrap()
                            .to_dtype(DType::F64)
                            .unwrap()
                            .to_vec::<f64>()
                            .unwrap();
                        let got = c
                            .to(Device::Cpu)
                            .unwrap()
                            .to_dtype(DType::F64)
                            .unwrap()
                            .to_vec::<f64>()
                            .unwrap();
                        assert_eq!(got, back, "{what} -> {to}");
                    }
                    for target in [Device::Cpu, dev] {
                        let m = v.to(target).unwrap();
                        assert_eq!(m.device(), target, "{what} to {target:?}");
                        assert_eq!(m.shape(), v.shape());
                        let got = m.to_dtype(DType::F64).unwrap();
                        let got = got.to(Device::Cpu).unwrap().to_vec::<f64>().unwrap();
                        assert_eq!(got, want, "{what} to {target:?}");
                    }
                    if from == DType::F64 {
                        assert_eq!(v.to_vec::<f64>().unwrap(), want, "{what} to_vec");
                    }
                }
            }
        }
    }
}

/// PyTorch's `to(dtype)` keeps the strides of a tensor whose elements fill a range of its
/// storage (a transpose or permutation of a contiguous tensor, at an offset too): one pass
/// reads it in place. A view with gaps or repeats gives a contiguous tensor.
#[test]
fn to_dtype_keeps_the_strides_of_dense_permutations() {
    let _release = Release;
    for dev in devices() {
        let v: Vec<f32> = (0..2 * 3 * 4 * 5).map(|i| i as f32 * 0.5 - 7.0).collect();
        let base = Tensor::from_slice(&v, [2, 3, 4, 5], dev).unwrap();
        let dense = [
            ("transpose", base.transpose(1, 3).unwrap()),
            ("permute", base.permute([3, 0, 2, 1]).unwrap()),
            ("row of a transpose", base.i(&s![1]).unwrap().t_last2()),
            (
                "size-1 dims",
                base.reshape([2, 1, 60]).unwrap().transpose(0, 2).unwrap(),
            ),
        ];
        for (what, x) in dense {
            for dtype in [DType::BF16, DType::F64, DType::I32] {
                let y = x.to_dtype(dtype).unwrap();
                assert_eq!(y.strides(), x.strides(), "{what} {dtype} on {dev}");
                assert!(!y.shares_storage(&x));
                let want = x.contiguous().unwrap().to_dtype(dtype).unwrap();
                assert_eq!(
                    y.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    "{what} {dtype} on {dev}"
                );
            }
        }
        // Gaps (a column range, a step) or repeats (an expand): gathered, contiguous.
        for (what, x) in [
            ("columns", base.i(&s![.., .., 1..3]).unwrap()),
            ("step", base.i(&s![.., .., .., ..;2]).unwrap()),
            (
                "expand",
                base.i(&s![.., 0..1]).unwrap().expand([2, 3, 4, 5]).unwrap(),
            ),
        ] {
            let y = x.to_dtype(DType::F16).unwrap();
            assert!(y.is_contiguous(), "{what} on {dev}");
            assert_eq!(
                y.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                "{what} on {dev}"
            );
        }
    }
}

trait LastTwo {
    fn t_last2(&self) -> Tensor;
}

impl LastTwo for Tensor {
    fn t_last2(&self) -> Tensor {
        self.transpose(-1, -2).unwrap()
    }
}
