//! Pinned host memory in the facade: `pin_memory`, `is_pinned`,
//! `to_non_blocking` from pinned memory on the current stream, and
//! `genesis::cpu::enable_pinned_memory`. The CPU-only behaviour runs on every build; the GPU
//! tests skip without a device. The switch is process-wide, so the tests of this file run one
//! at a time.

#[allow(dead_code)]
mod common;

use std::sync::{Mutex, MutexGuard, PoisonError};

use genesis::{DType, Device, Error, Tensor, bf16, f16};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Turns the switch off when a test ends (also by panicking).
struct SwitchOff;

impl Drop for SwitchOff {
    fn drop(&mut self) {
        genesis::cpu::enable_pinned_memory(false).unwrap();
    }
}

fn gpu() -> bool {
    if genesis::cuda::is_available() {
        true
    } else {
        eprintln!("CUDA part skipped: no CUDA device found");
        false
    }
}

#[test]
fn host_tensors_are_not_pinned_by_default_and_the_switch_needs_cuda() {
    let _serial = serial();
    let x = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap();
    assert!(!x.is_pinned());
    assert!(!genesis::cpu::pinned_memory_enabled());
    genesis::cpu::enable_pinned_memory(false).unwrap();
    if !genesis::cuda::is_available() {
        // Without CUDA pinning is an error, as PyTorch's pin_memory() without an accelerator.
        assert!(x.pin_memory().is_err());
        assert!(matches!(
            genesis::cpu::enable_pinned_memory(true),
            Err(Error::InvalidArgument {
                op: "enable_pinned_memory",
                ..
            })
        ));
        assert!(!genesis::cpu::pinned_memory_enabled());
        assert!(
            !Tensor::zeros([2], DType::F32, Device::Cpu)
                .unwrap()
                .is_pinned()
        );
    }
    // A non-blocking copy of pageable memory is the synchronous one.
    let y = x.to_non_blocking(Device::Cpu).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert!(!y.shares_storage(&x));
    assert!(!y.is_pinned());
}

#[test]
fn pinned_tensors_round_trip_exactly() {
    let _serial = serial();
    let _release = common::Release;
    if !gpu() {
        return;
    }
    let dev = Device::Cuda(0);
    let f: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
    let cases = [
        Tensor::from_slice(&f, [10, 100], Device::Cpu).unwrap(),
        Tensor::from_slice(&[1.5f64, -0.1, f64::NAN, f64::MAX], [4], Device::Cpu).unwrap(),
        Tensor::from_slice(&[f16::from_f32(0.1), f16::MAX], [2], Device::Cpu).unwrap(),
        Tensor::from_slice(&[bf16::from_f32(-3.5)], [1], Device::Cpu).unwrap(),
        Tensor::from_slice(&[i64::MIN, 7, i64::MAX], [3], Device::Cpu).unwrap(),
        Tensor::from_slice(&[255u8, 0, 3], [3], Device::Cpu).unwrap(),
        Tensor::from_bools(&[true, false, true], [3], Device::Cpu).unwrap(),
        Tensor::zeros([0, 3], DType::F32, Device::Cpu).unwrap(),
    ];
    for x in &cases {
        let p = x.pin_memory().unwrap();
        assert!(p.is_pinned(), "{x:?}");
        assert_eq!(p.device(), Device::Cpu);
        assert_eq!(p.shape(), x.shape());
        // Pinning a pinned tensor gives it back.
        assert!(p.pin_memory().unwrap().shares_storage(&p));
        let bytes = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let same = |a: &[f64], b: &[f64]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        };
        assert!(same(&bytes(&p), &bytes(x)), "{x:?}");
        for moved in [p.to(dev).unwrap(), p.to_non_blocking(dev).unwrap()] {
            genesis::cuda::synchronize(0).unwrap();
            assert_eq!(moved.device(), dev);
            assert!(same(&bytes(&moved), &bytes(x)), "{x:?}");
            let back = moved.to(Device::Cpu).unwrap();
            assert!(same(&bytes(&back), &bytes(x)), "{x:?}");
        }
    }
    // A strided view is pinned as a contiguous copy.
    let t = cases[0].t().unwrap();
    let p = t.pin_memory().unwrap();
    assert!(p.is_pinned() && p.is_contiguous());
    assert_eq!(
        p.to_vec::<f32>().unwrap(),
        t.contiguous().unwrap().to_vec::<f32>().unwrap()
    );
    let pn = cases[0].pin_memory().unwrap().narrow(1, 3, 5).unwrap();
    let d = pn.to_non_blocking(dev).unwrap();
    genesis::cuda::synchronize(0).unwrap();
    assert_eq!(d.to_vec::<f32>().unwrap(), pn.to_vec::<f32>().unwrap());
    // A device tensor is not pinned.
    let g = cases[0].to(dev).unwrap();
    assert!(!g.is_pinned());
    assert!(matches!(
        g.pin_memory(),
        Err(Error::InvalidArgument {
            op: "pin_memory",
            ..
        })
    ));
}

/// (Streams exist with the `cuda` feature only.)
#[cfg(feature = "cuda")]
#[test]
fn non_blocking_copies_are_queued_on_the_current_stream() {
    let _serial = serial();
    let _release = common::Release;
    if !gpu() {
        return;
    }
    {
        use genesis::cuda::{Stream, with_stream};
        let dev = Device::Cuda(0);
        let n = 1 << 24;
        let v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        let want: f64 = v.iter().map(|&x| f64::from(x)).sum();
        let s = Stream::new(0).unwrap();
        for round in 0..4 {
            // The source is dropped at once: it is kept alive until the copy completes.
            let src = Tensor::from_slice(&v, [n], Device::Cpu)
                .unwrap()
                .pin_memory()
                .unwrap();
            let (y, total) = with_stream(&s, || {
                let y = src.to_non_blocking(dev).unwrap();
                drop(src);
                // Work queued later on the stream sees the data.
                let total = y.mul(2.0f32).unwrap().to_dtype(DType::F32).unwrap();
                (y, total)
            });
            s.synchronize().unwrap();
            let got = y.to_vec::<f32>().unwrap();
            assert!(got == v, "round {round}");
            let doubled = total.to_vec::<f32>().unwrap();
            assert_eq!(doubled[999], 1998.0);
            let sum: f64 = got.iter().map(|&x| f64::from(x)).sum();
            assert_eq!(sum, want);
        }
        // On the default stream too.
        let src = Tensor::from_slice(&v[..1000], [1000], Device::Cpu)
            .unwrap()
            .pin_memory()
            .unwrap();
        let y = src.to_non_blocking(dev).unwrap();
        drop(src);
        genesis::cuda::synchronize(0).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), &v[..1000]);
        // To the host a copy completes before it returns.
        let back = y.to_non_blocking(Device::Cpu).unwrap();
        assert_eq!(back.to_vec::<f32>().unwrap(), &v[..1000]);
    }
}

#[test]
fn the_switch_makes_new_host_tensors_pinned() {
    let _serial = serial();
    let _release = common::Release;
    if !gpu() {
        return;
    }
    let _off = SwitchOff;
    let dev = Device::Cuda(0);
    genesis::cpu::enable_pinned_memory(true).unwrap();
    assert!(genesis::cpu::pinned_memory_enabled());
    let made = [
        Tensor::zeros([3], DType::F32, Device::Cpu).unwrap(),
        Tensor::ones([3], DType::I32, Device::Cpu).unwrap(),
        Tensor::full([2, 2], 1.5f64, Device::Cpu).unwrap(),
        Tensor::empty([4], DType::U8, Device::Cpu).unwrap(),
        Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap(),
        Tensor::from_bools(&[true], [1], Device::Cpu).unwrap(),
        Tensor::arange(0.0, 5.0, 1.0, DType::I64, Device::Cpu).unwrap(),
        Tensor::from_slice(&[1.0f32, 2.0], [2], dev)
            .unwrap()
            .to(Device::Cpu)
            .unwrap(),
    ];
    for t in &made {
        assert!(t.is_pinned(), "{t:?}");
    }
    assert_eq!(made[4].to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(made[6].to_vec::<i64>().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(made[7].to_vec::<f32>().unwrap(), [1.0, 2.0]);
    // Device tensors are untouched; pinned tensors go to the device without waiting.
    let d = Tensor::zeros([3], DType::F32, dev).unwrap();
    assert!(!d.is_pinned());
    let y = made[4].to_non_blocking(dev).unwrap();
    genesis::cuda::synchronize(0).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    genesis::cpu::enable_pinned_memory(false).unwrap();
    assert!(
        !Tensor::zeros([3], DType::F32, Device::Cpu)
            .unwrap()
            .is_pinned()
    );
}
