//! Boolean masks on every device: `masked_select` (`x[mask]`) and `masked_fill`, against
//! references computed here, for every dtype, odd sizes (tile boundaries), broadcast and
//! strided operands, and typed errors.

use genesis::{DType, Device, Error, Generator, IndexTensor, Tensor, s};

mod common;
use common::{Release, devices};

const DTYPES: [DType; 8] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::I16,
];

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

#[test]
fn masked_select_keeps_row_major_order_for_every_dtype_and_density() {
    let _release = Release;
    let g = Generator::new(8);
    for dev in devices() {
        for n in [0usize, 1, 17, 4095, 4096, 4097, 100_003] {
            for density in [0.0, 0.1, 0.5, 1.0] {
                let mask = g
                    .rand([n], DType::F32, dev)
                    .unwrap()
                    .lt_scalar(density)
                    .unwrap();
                let bits = mask.to_bool_vec().unwrap();
                for dtype in DTYPES {
                    let x = Tensor::arange(0.0, n as f64, 1.0, DType::F64, dev)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap();
                    let held = f64s(&x);
                    let got = x.masked_select(&mask).unwrap();
                    assert_eq!((got.dtype(), got.device()), (dtype, dev));
                    let want: Vec<f64> = held
                        .iter()
                        .zip(&bits)
                        .filter(|(_, b)| **b)
                        .map(|(v, _)| *v)
                        .collect();
                    assert_eq!(got.shape(), [want.len()]);
                    assert_eq!(f64s(&got), want, "{dtype} n={n} density={density} on {dev}");
                }
            }
        }
    }
}

#[test]
fn masked_select_broadcasts_and_reads_strided_or_offset_operands() {
    let _release = Release;
    let g = Generator::new(9);
    for dev in devices() {
        // A [5, 1] row mask over a [5, 3] matrix: whole rows.
        let x = Tensor::arange(0.0, 15.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([5, 3])
            .unwrap();
        let rows = Tensor::from_bools(&[true, false, false, true, true], [5, 1], dev).unwrap();
        assert_eq!(
            x.masked_select(&rows).unwrap().to_vec::<f32>().unwrap(),
            [0.0, 1.0, 2.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0]
        );
        // A transposed operand and a view at an offset (not 16-byte aligned).
        let m = g.randn([300, 70], DType::F32, dev).unwrap();
        let mt = m.t().unwrap();
        let mask = mt.gt_scalar(0.0).unwrap();
        let want: Vec<f32> = mt
            .contiguous()
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .filter(|&v| v > 0.0)
            .collect();
        assert_eq!(
            mt.masked_select(&mask).unwrap().to_vec::<f32>().unwrap(),
            want
        );
        let flat = m.reshape([-1]).unwrap();
        let tail = flat.narrow(0, 1, 20_000).unwrap();
        let tmask = tail.lt_scalar(0.5).unwrap();
        let want: Vec<f32> = tail
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .filter(|&v| v < 0.5)
            .collect();
        assert_eq!(
            tail.masked_select(&tmask).unwrap().to_vec::<f32>().unwrap(),
            want
        );
        // The same as indexing with a host mask through the index plan.
        let host_bits = tmask.to_bool_vec().unwrap();
        let via_plan = tail
            .i(&s![@IndexTensor::mask(&[20_000], &host_bits)])
            .unwrap();
        assert_eq!(via_plan.to_vec::<f32>().unwrap(), want);
    }
}

#[test]
fn masked_fill_in_place_and_out_of_place() {
    let _release = Release;
    let g = Generator::new(10);
    for dev in devices() {
        // 30 % and 2 % of the elements: the GPU kernel skips the 32-byte sectors a sparse
        // mask leaves untouched.
        for (dtype, density) in DTYPES.iter().flat_map(|&d| [(d, 0.3), (d, 0.02)]) {
            let n = 10_001;
            let x = Tensor::arange(0.0, n as f64, 1.0, DType::F64, dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let held = f64s(&x);
            let mask = g
                .rand([n], DType::F32, dev)
                .unwrap()
                .lt_scalar(density)
                .unwrap();
            let bits = mask.to_bool_vec().unwrap();
            let filled = x.masked_fill(&mask, 7.0).unwrap();
            assert_eq!(f64s(&x), held, "out of place leaves the input");
            x.masked_fill_(&mask, 7.0).unwrap();
            let want: Vec<f64> = held
                .iter()
                .zip(&bits)
                .map(|(&v, &b)| if b { 7.0 } else { v })
                .collect();
            assert_eq!(f64s(&x), want, "{dtype} at {density} on {dev}");
            assert_eq!(f64s(&filled), want);
        }
        // A broadcast mask: whole columns.
        let m = Tensor::zeros([3, 4], DType::F32, dev).unwrap();
        let cols = Tensor::from_bools(&[false, true, false, true], [4], dev).unwrap();
        m.masked_fill_(&cols, -1.5).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), [0.0, -1.5, 0.0, -1.5].repeat(3));
        // Errors leave the tensor unchanged.
        let keep = m.to_vec::<f32>().unwrap();
        let not_bool = Tensor::zeros([4], DType::F32, dev).unwrap();
        assert!(matches!(
            m.masked_fill_(&not_bool, 1.0),
            Err(Error::InvalidArgument {
                op: "masked_fill",
                ..
            })
        ));
        let big = Tensor::from_bools(&[true; 24], [2, 3, 4], dev).unwrap();
        assert!(matches!(
            m.masked_fill_(&big, 1.0),
            Err(Error::ShapeMismatch { .. })
        ));
        let wrong = Tensor::from_bools(&[true; 3], [3], dev).unwrap();
        assert!(matches!(
            m.masked_fill_(&wrong, 1.0),
            Err(Error::ShapeMismatch { .. })
        ));
        let ints = Tensor::zeros([4], DType::I32, dev).unwrap();
        assert!(matches!(
            ints.masked_fill_(&cols, 3e9),
            Err(Error::ScalarOutOfRange { .. })
        ));
        assert_eq!(
            m.to_vec::<f32>().unwrap(),
            keep,
            "failed fills write nothing"
        );
        // Through another handle of the storage: the write is seen by `m`.
        let alias = m.clone();
        let before = m.version();
        alias.masked_fill_(&cols, 2.0).unwrap();
        assert_eq!(m.version(), before + 1);
        assert_ne!(m.to_vec::<f32>().unwrap(), keep);
        assert!(matches!(
            m.masked_select(&not_bool),
            Err(Error::InvalidArgument { .. })
        ));
        if dev != Device::Cpu {
            let host_mask = Tensor::from_bools(&[true; 4], [4], Device::Cpu).unwrap();
            assert!(matches!(
                m.masked_select(&host_mask),
                Err(Error::DeviceMismatch { .. })
            ));
        }
    }
}

#[test]
fn masked_select_of_tens_of_millions_keeps_every_element() {
    // Enough tiles (16 388 of 4096) for the scan's vector path and a partial last tile.
    let _release = Release;
    let n = (64usize << 20) + 12_345;
    let bits: Vec<bool> = (0..n)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % 10 < 3)
        .collect();
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let want: Vec<u8> = data
        .iter()
        .zip(&bits)
        .filter(|(_, b)| **b)
        .map(|(v, _)| *v)
        .collect();
    for dev in devices() {
        let x = Tensor::from_slice(&data, [n], dev).unwrap();
        let mask = Tensor::from_bools(&bits, [n], dev).unwrap();
        let got = x.masked_select(&mask).unwrap();
        assert_eq!(got.shape(), [want.len()], "on {dev}");
        assert!(got.to_vec::<u8>().unwrap() == want, "on {dev}");
    }
}

/// `masked_fill` out of place (float tensors: one pass reading the mask broadcast): generated
/// shapes with masks broadcast along any subset of the dimensions, views read in place (a
/// transpose, a slice), every float dtype, values finite, infinite and NaN; the result keeps
/// the dtype and the input is untouched; errors as the in-place fill's.
#[test]
fn masked_fill_out_of_place_broadcasts_the_mask_over_views() {
    let _release = Release;
    let g = Generator::new(23);
    for dev in devices() {
        for (case, dtype) in [DType::F32, DType::F16, DType::BF16, DType::F64]
            .into_iter()
            .cycle()
            .take(16)
            .enumerate()
        {
            let shape = [2 + case % 3, 3 + case % 5, 1 + case % 4];
            let base = g
                .randn(shape, DType::F32, dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            // A view: the last two dimensions transposed, or a slice of every other row.
            let x = match case % 3 {
                0 => base.clone(),
                1 => base.transpose(1, 2).unwrap(),
                _ => base.i(&s![.., ..;2, ..]).unwrap(),
            };
            let xs = x.shape().to_vec();
            // The mask keeps a dimension or broadcasts it (size 1), by the bits of `case`.
            let mshape: Vec<usize> = xs
                .iter()
                .enumerate()
                .map(|(d, &n)| if (case >> d) & 1 == 1 { 1 } else { n })
                .collect();
            let mask = g
                .rand(&mshape[..], DType::F32, dev)
                .unwrap()
                .lt_scalar(0.4)
                .unwrap();
            let value = [1.5, f64::NEG_INFINITY, f64::NAN, -3.0][case % 4];
            let held = f64s(&x);
            let y = x.masked_fill(&mask, value).unwrap();
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.shape(), &xs[..]);
            assert_eq!(f64s(&x), held, "the input is untouched");
            let full = mask
                .expand(xs.iter().map(|&n| n as isize).collect::<Vec<_>>())
                .unwrap()
                .contiguous()
                .unwrap()
                .to_bool_vec()
                .unwrap();
            let want = Tensor::from_slice(&[value], [1], Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let v = f64s(&want)[0];
            for (i, (got, (&h, &b))) in f64s(&y).iter().zip(held.iter().zip(&full)).enumerate() {
                let w = if b { v } else { h };
                assert!(
                    got.to_bits() == w.to_bits() || (got.is_nan() && w.is_nan()),
                    "{dtype} case {case} on {dev}: element {i}: {got} against {w}"
                );
            }
        }
        let x = Tensor::zeros([3, 4], DType::F16, dev).unwrap();
        let cols = Tensor::from_bools(&[false, true, false, true], [4], dev).unwrap();
        assert!(matches!(
            x.masked_fill(&Tensor::zeros([4], DType::F32, dev).unwrap(), 1.0),
            Err(Error::InvalidArgument {
                op: "masked_fill",
                ..
            })
        ));
        let big = Tensor::from_bools(&[true; 24], [2, 3, 4], dev).unwrap();
        assert!(matches!(
            x.masked_fill(&big, 1.0),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            x.masked_fill(&cols, 1e10),
            Err(Error::ScalarOutOfRange { .. })
        ));
        // The gradient reaches the positions left as they were.
        let w = Tensor::ones([3, 4], DType::F32, dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        w.masked_fill(&cols, 0.0)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            w.grad().unwrap().to_vec::<f32>().unwrap(),
            [1.0, 0.0, 1.0, 0.0].repeat(3)
        );
    }
}
