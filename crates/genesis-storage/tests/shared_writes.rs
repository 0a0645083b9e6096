//! The writes through a shared handle (`&Storage`) called with invalid input: each returns
//! its typed error (never a panic) and leaves the storage's elements unchanged; and the same
//! writes, valid, on CUDA match the CPU (GPU-gated).

use std::panic::{AssertUnwindSafe, catch_unwind};

use genesis_storage::{BinaryOp, BinaryRhs, DType, Device, Error, Layout, Storage, UnaryOp};

fn iota(n: usize, device: Device) -> Storage {
    let v: Vec<f32> = (0..n).map(|x| x as f32).collect();
    Storage::from_slice(&v, device).unwrap()
}

/// Runs `f` under `catch_unwind` and checks that it fails as `ok` says.
fn refused(name: &str, f: impl FnOnce() -> genesis_storage::Result<()>, ok: fn(&Error) -> bool) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Err(_) => panic!("{name}: panicked"),
        Ok(Ok(())) => panic!("{name}: accepted"),
        Ok(Err(e)) => assert!(ok(&e), "{name}: {e:?}"),
    }
}

#[test]
fn shared_writes_refuse_bad_input_and_write_nothing() {
    let s = iota(6, Device::Cpu);
    let keep = s.to_vec::<f32>().unwrap();
    let all = Layout::contiguous(&[6]);
    let f64s = Storage::from_slice(&[1.0f64; 6], Device::Cpu).unwrap();
    let one = Storage::scalar(1.0, DType::F32).unwrap();
    let bools = Storage::from_bytes(&[1; 6], DType::Bool, Device::Cpu).unwrap();
    refused(
        "copy_strided_from_shared(dtype)",
        || s.copy_strided_from_shared(&all, &f64s, &all),
        |e| matches!(e, Error::DTypeMismatch { .. }),
    );
    refused(
        "copy_strided_from_shared(shape)",
        || s.copy_strided_from_shared(&all, &s, &Layout::contiguous(&[5])),
        |e| matches!(e, Error::ShapeMismatch { .. }),
    );
    refused(
        "copy_strided_from_shared(out of bounds)",
        || s.copy_strided_from_shared(&Layout::new(&[6], &[1], 1), &s, &all),
        |e| matches!(e, Error::Layout(_)),
    );
    refused(
        "fill_shared(repeated elements)",
        || s.fill_shared(&Layout::new(&[6], &[0], 0), &one),
        |e| matches!(e, Error::OverlappingDestination),
    );
    refused(
        "fill_shared(value dtype)",
        || s.fill_shared(&all, &Storage::scalar(1.0, DType::F64).unwrap()),
        |e| matches!(e, Error::Kernel(_)),
    );
    refused(
        "fill_shared(two values)",
        || s.fill_shared(&all, &iota(2, Device::Cpu)),
        |e| matches!(e, Error::Kernel(_)),
    );
    refused(
        "binary_assign_shared(dtype)",
        || s.binary_assign_shared(BinaryOp::Add, &all, BinaryRhs::Tensor(&f64s, &all)),
        |e| matches!(e, Error::DTypeMismatch { .. }),
    );
    refused(
        "binary_assign_shared(strided, shape)",
        || {
            s.binary_assign_shared(
                BinaryOp::Add,
                &Layout::new(&[3], &[2], 0),
                BinaryRhs::Tensor(&s, &all),
            )
        },
        |e| matches!(e, Error::ShapeMismatch { .. }),
    );
    refused(
        "binary_assign_shared(bool)",
        || bools.binary_assign_shared(BinaryOp::Add, &all, BinaryRhs::Tensor(&bools, &all)),
        |e| matches!(e, Error::UnsupportedDType { .. }),
    );
    let ints = Storage::from_slice(&[1i32; 6], Device::Cpu).unwrap();
    refused(
        "unary_assign_shared(exp of i32, strided)",
        || ints.unary_assign_shared(UnaryOp::Exp, &Layout::new(&[3], &[2], 0)),
        |e| matches!(e, Error::UnsupportedDType { .. }),
    );
    refused(
        "masked_fill_shared(mask not bool)",
        || s.masked_fill_shared(&all, &s, 0, &1.0f32.to_le_bytes()),
        |e| matches!(e, Error::UnsupportedDType { .. }),
    );
    refused(
        "masked_fill_shared(value size)",
        || s.masked_fill_shared(&all, &bools, 0, &[0u8; 8]),
        |e| matches!(e, Error::LengthMismatch { .. }),
    );
    refused(
        "masked_fill_shared(mask too short)",
        || s.masked_fill_shared(&all, &bools, 3, &1.0f32.to_le_bytes()),
        |e| matches!(e, Error::OutOfBounds { .. }),
    );
    refused(
        "with_exclusive_reading(self among the sources)",
        || s.with_exclusive_reading("t", &[&s], |_| Ok(())),
        |e| matches!(e, Error::Aliased { .. }),
    );
    assert_eq!(
        s.to_vec::<f32>().unwrap(),
        keep,
        "failed writes write nothing"
    );
    assert_eq!(ints.to_vec::<i32>().unwrap(), [1; 6]);
}

/// Shared writes through strided views on `device`: a fill of a column, an in-place product
/// on a transposed block, a negation of a strided block, an overlapping shift, a masked fill
/// of a transposed view. The final elements.
fn shared_ops(device: Device) -> Vec<f32> {
    let s = iota(24, device);
    s.fill_shared(&col(), &Storage::scalar(-3.0, DType::F32).unwrap())
        .unwrap();
    let rhs = iota(6, device);
    s.binary_assign_shared(
        BinaryOp::Mul,
        &block(),
        BinaryRhs::Tensor(&rhs, &Layout::contiguous(&[3, 2])),
    )
    .unwrap();
    s.unary_assign_shared(UnaryOp::Neg, &negated()).unwrap();
    s.copy_strided_from_shared(
        &Layout::new(&[20], &[1], 4),
        &s,
        &Layout::new(&[20], &[1], 0),
    )
    .unwrap();
    let mask = Storage::from_bytes(&mask_bytes(), DType::Bool, device).unwrap();
    s.masked_fill_shared(&masked(), &mask, 0, &7.0f32.to_le_bytes())
        .unwrap();
    assert_eq!(s.version(), 5);
    s.to_vec::<f32>().unwrap()
}

fn col() -> Layout {
    Layout::new(&[4], &[6], 1)
}
fn block() -> Layout {
    Layout::new(&[3, 2], &[1, 6], 8)
}
fn negated() -> Layout {
    Layout::new(&[2, 3], &[12, 2], 0)
}
fn masked() -> Layout {
    Layout::new(&[4, 6], &[1, 4], 0)
}
fn mask_bytes() -> Vec<u8> {
    (0..24).map(|i| u8::from(i % 5 == 0)).collect()
}

/// [`shared_ops`] element by element on a `Vec`, through the layouts' positions.
fn reference() -> Vec<f32> {
    let mut v: Vec<f32> = (0..24).map(|x| x as f32).collect();
    for i in col().indices() {
        v[i] = -3.0;
    }
    for (k, i) in block().indices().enumerate() {
        v[i] *= k as f32;
    }
    for i in negated().indices() {
        v[i] = -v[i];
    }
    let old = v.clone();
    v[4..24].copy_from_slice(&old[0..20]);
    for (k, i) in masked().indices().enumerate() {
        if mask_bytes()[k] != 0 {
            v[i] = 7.0;
        }
    }
    v
}

#[test]
fn shared_writes_through_strided_views_match_a_reference() {
    assert_eq!(shared_ops(Device::Cpu), reference());
}

#[test]
fn shared_writes_on_cuda_match_the_cpu() {
    if !cuda_available() {
        return;
    }
    assert_eq!(shared_ops(Device::Cuda(0)), shared_ops(Device::Cpu));
    // The pool's cached memory goes back to the driver, so nothing is held at exit.
    #[cfg(feature = "cuda")]
    genesis_storage::cuda::empty_caches().unwrap();
}

fn cuda_available() -> bool {
    #[cfg(feature = "cuda")]
    {
        !genesis_cuda::skip_without_gpu("shared_writes_on_cuda_match_the_cpu")
    }
    #[cfg(not(feature = "cuda"))]
    {
        eprintln!("shared_writes_on_cuda_match_the_cpu: skipped: built without `cuda`");
        false
    }
}
