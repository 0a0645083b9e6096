//! Every public entry point of `genesis-storage` called with the
//! invalid inputs a user can pass: sizes that overflow, lengths that do not match, wrong
//! dtypes, ranges past the end (and ranges whose end overflows), layouts that reach outside,
//! read-only storages where writes are needed, devices that do not exist, bad names, files and
//! modes. Each call runs under `catch_unwind`: a panic fails the test with the call named, and
//! the result must be the typed error expected.
//!
//! The entry points, from the crate's public items: `Storage::{zeros, zeros_aligned,
//! zeros_pinned, empty, full, from_slice, upload, from_bytes, scalar, random, random_blocks,
//! map_file, create_shared, create_shared_mode, attach_shared, unlink_shared, flush,
//! check_mapping, as_slice, as_mut_slice, host_bytes_mut, to_vec, to_f64_vec, to_bytes,
//! to_device, to_pinned, try_clone, copy_from, contiguous,
//! copy_strided_from, to_dtype, add, binary, binary_at, binary_assign, binary_into,
//! binary_strided, unary, unary_at, unary_assign, unary_into, compare_at, select_at,
//! masked_select_at, masked_fill_at, nonzero_at, matmul, matmul_into, matmul_with,
//! matmul_into_with, reduce, inspect,
//! inspect_view}`, `batched_copy`, `View::{new, with_layout, relayout, contiguous}`,
//! `Layout::{new, try_new, contiguous, try_contiguous, view, infer_shape, transpose, permute,
//! narrow, slice, expand, squeeze, unsqueeze, dim, span, check_bounds, numel, try_numel,
//! coalesced, strided_blocks, indices}`, `checked_numel`, `CpuStorage::{zeroed,
//! zeroed_aligned, from_slice, from_bytes}`, `Device::from_str`, `set_current_cuda_device`,
//! `reduce_dtype`, `tracker`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use genesis_storage::{
    BinaryOp, BinaryRhs, CompareOp, CpuStorage, DType, Device, Error, Layout, LayoutError, MapMode,
    MatmulPrecision, MatmulShape, ReduceOp, ReduceShape, Sampler, Storage, UnaryOp, View,
    batched_copy, checked_numel,
};

const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::Bool,
];

#[derive(Default)]
struct Sweep {
    failures: Vec<String>,
    calls: usize,
}

impl Sweep {
    /// Runs `f`; a panic, or a value `ok` refuses, is recorded under `name`.
    fn expect<T: std::fmt::Debug>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> T,
        ok: impl FnOnce(&T) -> bool,
    ) {
        self.calls += 1;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) if ok(&v) => {}
            Ok(v) => {
                let shown = format!("{v:?}");
                let shown: String = shown.chars().take(300).collect();
                self.failures.push(format!("{name}: unexpected {shown}"));
            }
            Err(p) => {
                let m = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                self.failures.push(format!("{name}: panicked: {m}"));
            }
        }
    }

    /// The call must return an error (any typed one).
    fn err<T: std::fmt::Debug>(&mut self, name: &str, f: impl FnOnce() -> Result<T, Error>) {
        self.expect(name, f, |r| r.is_err());
    }

    fn finish(self) {
        // Cached device and pinned memory goes back before the test ends, so none is held at
        // exit (compute-sanitizer's leak check).
        #[cfg(feature = "cuda")]
        let _ = genesis_storage::cuda::empty_caches();
        assert!(
            self.failures.is_empty(),
            "{} of {} calls failed:\n{}",
            self.failures.len(),
            self.calls,
            self.failures.join("\n")
        );
    }
}

fn cpu(len: usize, dtype: DType) -> Storage {
    Storage::zeros(len, dtype, Device::Cpu).unwrap()
}

fn f32s(v: &[f32]) -> Storage {
    Storage::from_slice(v, Device::Cpu).unwrap()
}

fn bools(v: &[bool]) -> Storage {
    let bytes: Vec<u8> = v.iter().map(|&b| u8::from(b)).collect();
    Storage::from_bytes(&bytes, DType::Bool, Device::Cpu).unwrap()
}

/// A device that cannot be used here: not compiled in, or beyond the devices present.
fn missing_devices() -> Vec<Device> {
    vec![Device::Cuda(usize::MAX), Device::Cuda(4096)]
}

/// Element ranges that reach past a storage of 8: past the end, and with an end that
/// overflows `usize`.
const BAD_RANGES: [(usize, usize); 4] = [(0, 9), (8, 1), (usize::MAX, 2), (1, usize::MAX)];

/// Layouts that reach outside a storage of 8 elements, or overflow.
fn bad_layouts() -> Vec<Layout> {
    vec![
        Layout::contiguous(&[9]),
        Layout::new(&[2], &[1], usize::MAX),
        Layout::new(&[2], &[1], 7),
        Layout::new(&[2], &[(1 << 62) + 1], 0),
        Layout::new(&[2, 2], &[isize::MIN, -8], 0),
        Layout::new(&[2], &[-1], 0),
        Layout::new(&[3], &[isize::MAX], 0),
        Layout::new(&[2, 2], &[1], 0),
        Layout::contiguous(&[1 << 32, 1 << 32]),
        Layout::contiguous(&[usize::MAX, 2]),
        Layout::new(&[1 << 62, 4], &[0, 0], 0),
    ]
}

#[test]
fn creation() {
    let mut s = Sweep::default();
    // A pinned pool that already holds a segment (where a pinned request beyond the host's
    // memory once reached the driver, which granted less than asked).
    let _pinned = Storage::zeros_pinned(8, DType::F32);
    for dtype in DTYPES {
        for len in [usize::MAX, usize::MAX / 2, isize::MAX as usize, 1 << 60] {
            s.err(&format!("zeros({len}, {dtype}, cpu)"), || {
                Storage::zeros(len, dtype, Device::Cpu)
            });
            s.err(&format!("empty({len}, {dtype}, cpu)"), || {
                Storage::empty(len, dtype, Device::Cpu)
            });
            s.err(&format!("zeros_aligned({len}, {dtype}, 64)"), || {
                Storage::zeros_aligned(len, dtype, 64)
            });
            s.err(&format!("zeros_pinned({len}, {dtype})"), || {
                Storage::zeros_pinned(len, dtype)
            });
            s.err(&format!("random(uniform, {len}, {dtype})"), || {
                Storage::random(Sampler::Uniform, len, dtype, Device::Cpu, 0, 0)
            });
            s.expect(
                &format!("random_blocks(uniform, {len}, {dtype})"),
                || Storage::random_blocks(Sampler::Uniform, len, dtype),
                |_| true,
            );
        }
        for device in missing_devices() {
            s.err(&format!("zeros(4, {dtype}, {device})"), || {
                Storage::zeros(4, dtype, device)
            });
            s.err(&format!("empty(4, {dtype}, {device})"), || {
                Storage::empty(4, dtype, device)
            });
            s.err(&format!("random(4, {dtype}, {device})"), || {
                Storage::random(Sampler::Normal, 4, dtype, device, 0, 0)
            });
            s.err(&format!("from_bytes(4, {dtype}, {device})"), || {
                Storage::from_bytes(&vec![0u8; 4 * dtype.size()], dtype, device)
            });
        }
        for align in [0usize, 3, 24, 1 << 40, 1 << 63] {
            s.err(&format!("zeros_aligned(4, {dtype}, {align})"), || {
                Storage::zeros_aligned(4, dtype, align)
            });
        }
        if dtype.size() > 1 {
            s.expect(
                &format!("from_bytes(ragged, {dtype})"),
                || Storage::from_bytes(&[0u8; 3], dtype, Device::Cpu),
                |r| matches!(r, Err(Error::LengthMismatch { .. })),
            );
        }
    }
    for device in missing_devices() {
        s.err(&format!("from_slice(_, {device})"), || {
            Storage::from_slice(&[1.0f32], device)
        });
        s.err(&format!("upload(_, {device})"), || {
            Storage::upload(&[1.0f32], device)
        });
        s.err(&format!("full(4, 1.0, {device})"), || {
            Storage::full(4, 1.0f32, device)
        });
    }
    s.err("full(usize::MAX, 1.0f32)", || {
        Storage::full(usize::MAX, 1.0f32, Device::Cpu)
    });
    s.err("full(isize::MAX, 1u8)", || {
        Storage::full(isize::MAX as usize, 1u8, Device::Cpu)
    });
    s.expect(
        "from_bytes(bool 2)",
        || Storage::from_bytes(&[0, 1, 2], DType::Bool, Device::Cpu),
        |r| matches!(r, Err(Error::InvalidBool)),
    );
    for (value, dtype) in [
        (f64::NAN, DType::I32),
        (f64::INFINITY, DType::I64),
        (1.5, DType::I8),
        (300.0, DType::U8),
        (-1.0, DType::U8),
        (1e6, DType::F16),
        (1e40, DType::F32),
        (2.0, DType::Bool),
        (9223372036854775808.0, DType::I64),
        (-9223372036854777856.0, DType::I64),
    ] {
        s.expect(
            &format!("scalar({value}, {dtype})"),
            || Storage::scalar(value, dtype),
            |r| matches!(r, Err(Error::ScalarOutOfRange { .. })),
        );
    }
    for sampler in [
        Sampler::Int { low: 0, range: 0 },
        Sampler::Int {
            low: i64::MAX,
            range: 2,
        },
        Sampler::Int {
            low: 0,
            range: u64::MAX,
        },
    ] {
        for dtype in DTYPES {
            s.err(&format!("random({sampler:?}, {dtype})"), || {
                Storage::random(sampler, 4, dtype, Device::Cpu, 0, 0)
            });
        }
    }
    for dtype in [DType::I32, DType::I64, DType::U8, DType::Bool] {
        s.err(&format!("random(uniform, {dtype})"), || {
            Storage::random(Sampler::Uniform, 4, dtype, Device::Cpu, 0, 0)
        });
        s.err(&format!("random(normal, {dtype})"), || {
            Storage::random(Sampler::Normal, 4, dtype, Device::Cpu, 0, 0)
        });
    }
    s.expect(
        "random(seed, offset u64::MAX)",
        || Storage::random(Sampler::Uniform, 16, DType::F32, Device::Cpu, 0, u64::MAX),
        |_| true,
    );
    for text in [
        "",
        "gpu",
        "cuda:",
        "cuda:-1",
        "cuda:1.5",
        "cuda:99999999999999999999999",
        "CUDA:0 ",
        "cpu:0",
        "\u{0}",
    ] {
        s.expect(
            &format!("Device::from_str({text:?})"),
            || text.parse::<Device>(),
            |r| matches!(r, Err(Error::InvalidDeviceString { .. })),
        );
    }
    s.expect(
        "set_current_cuda_device(usize::MAX)",
        || genesis_storage::set_current_cuda_device(usize::MAX),
        |_| true,
    );
    genesis_storage::set_current_cuda_device(0);
    for n in [usize::MAX, 1 << 62] {
        s.err(&format!("CpuStorage::zeroed({n})"), || {
            CpuStorage::zeroed(n)
        });
        s.err(&format!("CpuStorage::zeroed_aligned({n}, 64)"), || {
            CpuStorage::zeroed_aligned(n, 64)
        });
    }
    for align in [0usize, 3, 1 << 62] {
        s.err(&format!("CpuStorage::zeroed_aligned(8, {align})"), || {
            CpuStorage::zeroed_aligned(8, align)
        });
    }
    s.finish();
}

#[test]
fn files_and_shared_memory() {
    let mut s = Sweep::default();
    let dir = std::env::temp_dir();
    let path = dir.join(format!("genesis-bad-input-{}", std::process::id()));
    std::fs::write(&path, [0u8; 64]).unwrap();
    for (offset, len) in [
        (0usize, usize::MAX),
        (usize::MAX - 3, 1),
        (64, 1),
        (0, 17),
        (0, 0),
        (2, 1),
        (1 << 62, 1 << 60),
    ] {
        for mode in [MapMode::ReadOnly, MapMode::ReadWrite] {
            s.err(
                &format!("map_file(offset {offset}, len {len}, {mode:?})"),
                || Storage::map_file(&path, DType::F32, offset, len, mode),
            );
        }
    }
    s.err("map_file(a directory)", || {
        Storage::map_file(&dir, DType::U8, 0, 1, MapMode::ReadOnly)
    });
    s.err("map_file(missing)", || {
        Storage::map_file(
            dir.join("genesis-no-such-file"),
            DType::U8,
            0,
            1,
            MapMode::ReadOnly,
        )
    });
    let mut ro = Storage::map_file(&path, DType::F32, 0, 16, MapMode::ReadOnly).unwrap();
    s.expect(
        "as_mut_slice(read-only mapping)",
        || ro.as_mut_slice::<f32>().map(|v| v.len()),
        |r| matches!(r, Err(Error::ReadOnly { .. })),
    );
    s.expect(
        "host_bytes_mut(read-only mapping)",
        || ro.host_bytes_mut().map(|v| v.len()),
        |r| matches!(r, Err(Error::ReadOnly { .. })),
    );
    s.expect(
        "copy_from(into a read-only mapping)",
        || ro.copy_from(&cpu(16, DType::F32)),
        |r| matches!(r, Err(Error::ReadOnly { .. })),
    );
    s.expect(
        "unary_assign(read-only mapping)",
        || ro.unary_assign(UnaryOp::Neg, 0, 16),
        |r| matches!(r, Err(Error::ReadOnly { .. })),
    );
    s.expect(
        "as_slice::<i32>(f32 mapping)",
        || ro.as_slice::<i32>().map(|v| v.len()),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect("check_mapping", || ro.check_mapping(), |r| r.is_ok());
    drop(ro);
    std::fs::remove_file(&path).unwrap();

    let name = format!("bad-input-{}", std::process::id());
    for len in [usize::MAX, usize::MAX / 2, 0] {
        s.err(&format!("create_shared(len {len})"), || {
            Storage::create_shared(&name, DType::F64, len)
        });
    }
    s.expect(
        "create_shared(larger than /dev/shm)",
        || Storage::create_shared(&name, DType::U8, 1 << 60),
        |r| matches!(r, Err(Error::SharedNoSpace { .. })),
    );
    s.expect(
        "attach_shared after failed creates",
        || Storage::attach_shared(&name, DType::U8),
        |r| matches!(r, Err(Error::SharedNotFound { .. })),
    );
    for mode in [0o1000, 0o4755, u32::MAX] {
        s.expect(
            &format!("create_shared_mode({mode:#o})"),
            || Storage::create_shared_mode(&name, DType::U8, 8, mode),
            |r| matches!(r, Err(Error::BadSharedMode { .. })),
        );
    }
    let long = "x".repeat(201);
    for bad in ["", "a/b", "..", ".x", "a b", "é", "a\0b", long.as_str()] {
        s.expect(
            &format!("create_shared({bad:?})"),
            || Storage::create_shared(bad, DType::U8, 1),
            |r| matches!(r, Err(Error::BadSharedName { .. })),
        );
        s.expect(
            &format!("attach_shared({bad:?})"),
            || Storage::attach_shared(bad, DType::U8),
            |r| matches!(r, Err(Error::BadSharedName { .. })),
        );
        s.expect(
            &format!("unlink_shared({bad:?})"),
            || Storage::unlink_shared(bad),
            |r| matches!(r, Err(Error::BadSharedName { .. })),
        );
    }
    let seg = Storage::create_shared(&name, DType::U8, 6).unwrap();
    for dtype in [DType::F32, DType::I64, DType::F16] {
        s.expect(
            &format!("attach_shared(6 bytes as {dtype})"),
            || Storage::attach_shared(&name, dtype),
            |r| dtype.size() == 2 && r.is_ok() || matches!(r, Err(Error::LengthMismatch { .. })),
        );
    }
    s.expect(
        "create_shared(existing)",
        || Storage::create_shared(&name, DType::U8, 6),
        |r| matches!(r, Err(Error::SharedExists { .. })),
    );
    drop(seg);
    Storage::unlink_shared(&name).unwrap();
    s.expect(
        "unlink_shared(missing)",
        || Storage::unlink_shared(&name),
        |r| matches!(r, Err(Error::SharedNotFound { .. })),
    );
    s.finish();
}

#[test]
fn access_and_copies() {
    let mut s = Sweep::default();
    let a = f32s(&[1.0; 8]);
    s.expect(
        "to_vec::<f64>(f32)",
        || a.to_vec::<f64>(),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect(
        "to_vec::<u8>(bool)",
        || bools(&[true]).to_vec::<u8>(),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect(
        "as_slice::<u8>(f32)",
        || a.as_slice::<u8>().map(|v| v.len()),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    let mut m = f32s(&[1.0; 8]);
    s.expect(
        "as_mut_slice::<half::f16>(f32)",
        || m.as_mut_slice::<i32>().map(|v| v.len()),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    for device in missing_devices() {
        s.err(&format!("to_device({device})"), || a.to_device(device));
    }
    for (start, len) in BAD_RANGES {
        s.err(&format!("to_dtype_at({start}, {len})"), || {
            a.to_dtype_at(start, len, DType::F16)
        });
        s.err(&format!("to_dtype_at({start}, {len}, same dtype)"), || {
            a.to_dtype_at(start, len, DType::F32)
        });
        s.err(&format!("to_device_at({start}, {len})"), || {
            a.to_device_at(start, len, Device::Cpu)
        });
        s.err(&format!("to_vec_at({start}, {len})"), || {
            a.to_vec_at::<f32>(start, len)
        });
    }
    s.expect(
        "to_vec_at::<f64>(f32)",
        || a.to_vec_at::<f64>(0, 1),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect(
        "to_pinned",
        || a.to_pinned().map(|p| p.len()),
        |r| cfg!(feature = "cuda") || r.is_err(),
    );
    s.expect(
        "copy_from(other dtype)",
        || m.copy_from(&cpu(8, DType::F64)),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect(
        "copy_from(other length)",
        || m.copy_from(&cpu(9, DType::F32)),
        |r| matches!(r, Err(Error::LengthMismatch { .. })),
    );
    for l in bad_layouts() {
        let name = format!("{:?}/{:?}+{}", l.shape(), l.strides(), l.offset());
        s.err(&format!("contiguous({name})"), || a.contiguous(&l));
        s.err(&format!("copy_strided_from(dst {name})"), || {
            let mut d = cpu(8, DType::F32);
            let src = Layout::contiguous(l.shape());
            d.copy_strided_from(&l, &cpu(src.numel().min(64), DType::F32), &src)
        });
        s.err(&format!("copy_strided_from(src {name})"), || {
            let mut d = cpu(64, DType::F32);
            d.copy_strided_from(&Layout::contiguous(l.shape()), &a, &l)
        });
        s.err(&format!("View::with_layout({name})"), || {
            View::with_layout(Arc::new(f32s(&[0.0; 8])), l.clone())
        });
        s.err(&format!("View::relayout({name})"), || {
            View::new(f32s(&[0.0; 8])).relayout(l.clone())
        });
        s.err(&format!("binary_strided(tensor {name})"), || {
            a.binary_strided(BinaryOp::Add, &l, BinaryRhs::Scalar(&f32s(&[1.0])))
        });
        s.expect(
            &format!("inspect_view({name})"),
            || a.inspect_view(&l).to_string(),
            |t| t.contains("OUT OF BOUNDS"),
        );
    }
    s.expect(
        "copy_strided_from(stride-0 destination)",
        || {
            let mut d = cpu(8, DType::F32);
            d.copy_strided_from(&Layout::new(&[4], &[0], 0), &a, &Layout::contiguous(&[4]))
        },
        |r| matches!(r, Err(Error::OverlappingDestination)),
    );
    s.err("copy_strided_from(shapes differ)", || {
        let mut d = cpu(8, DType::F32);
        d.copy_strided_from(
            &Layout::contiguous(&[2, 4]),
            &a,
            &Layout::contiguous(&[4, 2]),
        )
    });
    s.err("copy_strided_from(dtypes differ)", || {
        let mut d = cpu(8, DType::I32);
        d.copy_strided_from(&Layout::contiguous(&[8]), &a, &Layout::contiguous(&[8]))
    });
    s.err("binary_strided(scalar of another dtype)", || {
        a.binary_strided(
            BinaryOp::Add,
            &Layout::contiguous(&[8]),
            BinaryRhs::Scalar(&cpu(1, DType::F64)),
        )
    });
    s.err("binary_strided(scalar of two elements)", || {
        a.binary_strided(
            BinaryOp::Add,
            &Layout::contiguous(&[8]),
            BinaryRhs::Scalar(&f32s(&[1.0, 2.0])),
        )
    });
    s.err("binary_strided(shapes differ)", || {
        a.binary_strided(
            BinaryOp::Add,
            &Layout::contiguous(&[8]),
            BinaryRhs::Tensor(&a, &Layout::contiguous(&[2, 4])),
        )
    });
    for l in bad_layouts() {
        s.err(&format!("binary_strided(rhs {:?})", l.shape()), || {
            a.binary_strided(
                BinaryOp::Add,
                &Layout::contiguous(l.shape()),
                BinaryRhs::Tensor(&a, &l),
            )
        });
    }
    let (mut x, mut y) = (cpu(4, DType::F32), cpu(4, DType::F32));
    let src = cpu(5, DType::F32);
    s.err("batched_copy(lengths differ)", || {
        batched_copy(&mut [(&mut x, &src), (&mut y, &src)], 2)
    });
    let (mut x, src) = (cpu(4, DType::F32), cpu(4, DType::I32));
    s.err("batched_copy(dtypes differ)", || {
        batched_copy(&mut [(&mut x, &src)], usize::MAX)
    });
    let (mut x, src) = (cpu(4, DType::F32), cpu(4, DType::F32));
    s.expect(
        "batched_copy(streams 0)",
        || batched_copy(&mut [(&mut x, &src)], 0),
        |_| true,
    );
    s.finish();
}

#[test]
fn operations() {
    let mut s = Sweep::default();
    let a = f32s(&[1.0; 8]);
    let b = cpu(8, DType::F64);
    let mask = bools(&[true; 8]);
    s.expect(
        "add(other dtype)",
        || a.add(&b),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    s.expect(
        "add(other length)",
        || a.add(&cpu(7, DType::F32)),
        |r| matches!(r, Err(Error::LengthMismatch { .. })),
    );
    s.expect(
        "binary(other dtype)",
        || a.binary(BinaryOp::Mul, &b),
        |r| matches!(r, Err(Error::DTypeMismatch { .. })),
    );
    for op in [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Sqrt] {
        s.err(&format!("unary({op:?}, bool)"), || mask.unary(op));
    }
    for (start, len) in BAD_RANGES {
        let r = format!("{start}+{len}");
        s.err(&format!("unary_at({r})"), || {
            a.unary_at(UnaryOp::Neg, start, len)
        });
        s.err(&format!("binary_at(a {r})"), || {
            a.binary_at(BinaryOp::Add, start, &a, 0, len)
        });
        s.err(&format!("binary_at(b {r})"), || {
            a.binary_at(BinaryOp::Add, 0, &a, start, len)
        });
        s.err(&format!("unary_assign({r})"), || {
            f32s(&[0.0; 8]).unary_assign(UnaryOp::Abs, start, len)
        });
        s.err(&format!("binary_assign(self {r})"), || {
            f32s(&[0.0; 8]).binary_assign(BinaryOp::Add, start, &a, 0, len)
        });
        s.err(&format!("binary_assign(other {r})"), || {
            f32s(&[0.0; 8]).binary_assign(BinaryOp::Add, 0, &a, start, len)
        });
        s.err(&format!("binary_into(out {r})"), || {
            a.binary_into(BinaryOp::Sub, 0, &a, 0, &mut cpu(8, DType::F32), start, len)
        });
        s.err(&format!("binary_into(a {r})"), || {
            a.binary_into(BinaryOp::Sub, start, &a, 0, &mut cpu(8, DType::F32), 0, len)
        });
        s.err(&format!("unary_into(out {r})"), || {
            a.unary_into(UnaryOp::Neg, 0, &mut cpu(8, DType::F32), start, len)
        });
        s.err(&format!("unary_into(a {r})"), || {
            a.unary_into(UnaryOp::Neg, start, &mut cpu(8, DType::F32), 0, len)
        });
        s.err(&format!("compare_at(a {r})"), || {
            a.compare_at(CompareOp::Lt, start, &a, 0, len)
        });
        s.err(&format!("compare_at(b {r})"), || {
            a.compare_at(CompareOp::Lt, 0, &a, start, len)
        });
        s.err(&format!("select_at(cond {r})"), || {
            Storage::select_at((&mask, start), (&a, 0), (&a, 0), len)
        });
        s.err(&format!("select_at(b {r})"), || {
            Storage::select_at((&mask, 0), (&a, 0), (&a, start), len)
        });
        s.err(&format!("masked_select_at(a {r})"), || {
            a.masked_select_at(start, &mask, 0, len)
        });
        s.err(&format!("masked_select_at(mask {r})"), || {
            a.masked_select_at(0, &mask, start, len)
        });
        s.err(&format!("masked_fill_at({r})"), || {
            f32s(&[0.0; 8]).masked_fill_at(start, &mask, 0, len, &1.0f32.to_le_bytes())
        });
        s.err(&format!("nonzero_at({r})"), || a.nonzero_at(start, len));
        let rows = genesis_storage::ReduceShape {
            outer: 1,
            r: len,
            inner: 1,
        };
        s.err(&format!("cumsum({r})"), || a.cumsum(start, rows));
        s.err(&format!("cumprod({r})"), || a.cumprod(start, rows));
    }
    let huge = genesis_storage::ReduceShape {
        outer: usize::MAX,
        r: 2,
        inner: 1,
    };
    s.err("cumprod(shape overflows)", || a.cumprod(0, huge));
    s.err("cumprod(bool)", || {
        mask.cumprod(
            0,
            genesis_storage::ReduceShape {
                outer: 1,
                r: 1,
                inner: 1,
            },
        )
    });
    s.err("binary_into(out of another dtype)", || {
        a.binary_into(BinaryOp::Add, 0, &a, 0, &mut cpu(8, DType::I32), 0, 8)
    });
    s.err("unary_into(out of another dtype)", || {
        a.unary_into(UnaryOp::Neg, 0, &mut cpu(8, DType::F64), 0, 8)
    });
    s.err("compare_at(other dtype)", || {
        a.compare_at(CompareOp::Eq, 0, &b, 0, 8)
    });
    s.err("select_at(cond not bool)", || {
        Storage::select_at((&a, 0), (&a, 0), (&a, 0), 8)
    });
    s.err("select_at(a, b dtypes differ)", || {
        Storage::select_at((&mask, 0), (&a, 0), (&b, 0), 8)
    });
    s.err("masked_select_at(mask not bool)", || {
        a.masked_select_at(0, &a, 0, 8)
    });
    for value in [&[][..], &[0u8; 3][..], &[0u8; 8][..]] {
        s.err(
            &format!("masked_fill_at(value of {} bytes)", value.len()),
            || f32s(&[0.0; 8]).masked_fill_at(0, &mask, 0, 8, value),
        );
    }
    s.err("masked_fill_at(mask not bool)", || {
        f32s(&[0.0; 8]).masked_fill_at(0, &a, 0, 8, &1.0f32.to_le_bytes())
    });

    // matmul: shapes whose products overflow, strides past the end, dtypes that differ.
    let shapes = [
        MatmulShape {
            batch: 1,
            m: 3,
            n: 3,
            k: 3,
            a_batch_stride: 9,
            b_batch_stride: 9,
        },
        MatmulShape {
            batch: 1,
            m: 1 << 40,
            n: 1,
            k: 1 << 40,
            a_batch_stride: 0,
            b_batch_stride: 0,
        },
        MatmulShape {
            batch: usize::MAX,
            m: 2,
            n: 2,
            k: 2,
            a_batch_stride: 4,
            b_batch_stride: 4,
        },
        MatmulShape {
            batch: 2,
            m: 2,
            n: 2,
            k: 2,
            a_batch_stride: usize::MAX,
            b_batch_stride: 4,
        },
        MatmulShape {
            batch: 1,
            m: usize::MAX,
            n: usize::MAX,
            k: 0,
            a_batch_stride: 0,
            b_batch_stride: 0,
        },
    ];
    for shape in shapes {
        s.err(&format!("matmul({shape:?})"), || a.matmul(0, &a, 0, shape));
        s.err(&format!("matmul_into({shape:?})"), || {
            a.matmul_into(0, &a, 0, shape, &mut cpu(8, DType::F32), 0)
        });
        let high = MatmulPrecision::High;
        s.err(&format!("matmul_with({shape:?})"), || {
            a.matmul_with(0, &a, 0, shape, high)
        });
        s.err(&format!("matmul_into_with({shape:?})"), || {
            a.matmul_into_with(0, &a, 0, shape, &mut cpu(8, DType::F32), 0, high)
        });
    }
    let ok = MatmulShape {
        batch: 1,
        m: 2,
        n: 2,
        k: 2,
        a_batch_stride: 4,
        b_batch_stride: 4,
    };
    s.err("matmul(start past the end)", || a.matmul(5, &a, 0, ok));
    s.err("matmul(start usize::MAX)", || {
        a.matmul(0, &a, usize::MAX, ok)
    });
    s.err("matmul(dtypes differ)", || a.matmul(0, &b, 0, ok));
    s.err("matmul(bool)", || mask.matmul(0, &mask, 0, ok));
    s.err("matmul_into(out too short)", || {
        a.matmul_into(0, &a, 0, ok, &mut cpu(3, DType::F32), 0)
    });
    s.err("matmul_into(out start usize::MAX)", || {
        a.matmul_into(0, &a, 0, ok, &mut cpu(8, DType::F32), usize::MAX)
    });
    s.err("matmul_into(out of another dtype)", || {
        a.matmul_into(0, &a, 0, ok, &mut cpu(8, DType::F64), 0)
    });
    s.err("matmul_with(start past the end)", || {
        a.matmul_with(5, &a, 0, ok, MatmulPrecision::High)
    });
    s.err("matmul_into_with(out too short)", || {
        a.matmul_into_with(
            0,
            &a,
            0,
            ok,
            &mut cpu(3, DType::F32),
            0,
            MatmulPrecision::High,
        )
    });

    // reduce: shapes whose count overflows or reaches past the end; empty axes.
    for shape in [
        ReduceShape {
            outer: usize::MAX,
            r: 2,
            inner: 2,
        },
        ReduceShape {
            outer: 1,
            r: 9,
            inner: 1,
        },
        ReduceShape {
            outer: 1 << 32,
            r: 1 << 32,
            inner: 1,
        },
    ] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::ArgMin] {
            s.err(&format!("reduce({op:?}, {shape:?})"), || {
                a.reduce(op, 0, shape)
            });
        }
    }
    let empty_axis = ReduceShape {
        outer: 2,
        r: 0,
        inner: 2,
    };
    for op in [
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ] {
        s.expect(
            &format!("reduce({op:?}, empty axis)"),
            || a.reduce(op, 0, empty_axis),
            |r| matches!(r, Err(Error::EmptyReduction { .. })),
        );
    }
    s.err("reduce(start usize::MAX)", || {
        a.reduce(
            ReduceOp::Sum,
            usize::MAX,
            ReduceShape {
                outer: 1,
                r: 1,
                inner: 1,
            },
        )
    });
    s.err("reduce(mean of i32)", || {
        cpu(4, DType::I32).reduce(
            ReduceOp::Mean,
            0,
            ReduceShape {
                outer: 1,
                r: 4,
                inner: 1,
            },
        )
    });
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::ArgMax] {
        for dtype in DTYPES {
            s.expect(
                &format!("reduce_dtype({op:?}, {dtype})"),
                || genesis_storage::reduce_dtype(op, dtype),
                |_| true,
            );
        }
    }
    s.finish();
}

#[test]
fn layouts() {
    let mut s = Sweep::default();
    for shape in [
        &[usize::MAX, 2][..],
        &[1 << 32, 1 << 32],
        &[3, 2, (1 << 62) + 1, (1 << 62) + 1],
    ] {
        s.expect(
            &format!("checked_numel({shape:?})"),
            || checked_numel(shape),
            |r| matches!(r, Err(LayoutError::TooManyElements { .. })),
        );
        s.expect(
            &format!("try_contiguous({shape:?})"),
            || Layout::try_contiguous(shape),
            |r| r.is_err(),
        );
        s.expect(
            &format!("contiguous({shape:?}).numel()"),
            || Layout::contiguous(shape).numel(),
            |&n| n == usize::MAX,
        );
        s.expect(
            &format!("contiguous({shape:?}).try_numel()"),
            || Layout::contiguous(shape).try_numel(),
            |r| r.is_err(),
        );
    }
    for l in bad_layouts() {
        let name = format!("{:?}/{:?}+{}", l.shape(), l.strides(), l.offset());
        s.expect(
            &format!("check_bounds({name}, 8)"),
            || l.check_bounds(8),
            |r| r.is_err(),
        );
        s.expect(
            &format!("methods of {name}"),
            || {
                let _ = (
                    l.span(),
                    l.is_contiguous(),
                    l.strided_blocks(),
                    l.coalesced(),
                );
                let _ = l.squeeze_all();
                let _ = (l.transpose(0, -1), l.narrow(0, 1, 1), l.unsqueeze(0));
                let _ = (
                    l.permute(&[1, 0]),
                    l.expand(&[2, 2]),
                    l.view(&[4]),
                    l.squeeze(0),
                );
                let _ = (l.slice(0, 0, 1, 1), l.infer_shape(&[-1]), l.dim(-1));
                let _ = (l.numel(), l.try_numel(), l.rank());
            },
            |_| true,
        );
    }
    s.expect(
        "try_new(offset usize::MAX)",
        || Layout::try_new(&[2], &[1], usize::MAX),
        |r| r.is_err(),
    );
    s.expect(
        "try_new(stride count differs)",
        || Layout::try_new(&[2, 2], &[1], 0),
        |r| r.is_err(),
    );
    let l = Layout::contiguous(&[2, 3, 4]);
    for d in [3isize, -4, isize::MAX, isize::MIN] {
        s.expect(&format!("dim({d})"), || l.dim(d), |r| r.is_err());
        s.expect(&format!("squeeze({d})"), || l.squeeze(d), |r| r.is_err());
        s.expect(
            &format!("unsqueeze(beyond {d})"),
            // Rank 3 takes -4..=3 here.
            || l.unsqueeze(d.saturating_add(d.signum())),
            |r| r.is_err(),
        );
        s.expect(
            &format!("transpose(0, {d})"),
            || l.transpose(0, d),
            |r| r.is_err(),
        );
        s.expect(
            &format!("narrow({d}, 0, 1)"),
            || l.narrow(d, 0, 1),
            |r| r.is_err(),
        );
    }
    for (start, len) in [(3usize, 0usize), (0, 3), (usize::MAX, 1), (1, usize::MAX)] {
        s.expect(
            &format!("narrow(0, {start}, {len})"),
            || l.narrow(0, start, len),
            |r| r.is_err(),
        );
    }
    for perm in [
        &[0usize, 1][..],
        &[0, 1, 1],
        &[0, 1, 3],
        &[0, 1, 2, 3],
        &[usize::MAX, 0, 1],
    ] {
        s.expect(
            &format!("permute({perm:?})"),
            || l.permute(perm),
            |r| r.is_err(),
        );
    }
    for shape in [
        &[25usize][..],
        &[1 << 32, 1 << 32, 0],
        &[usize::MAX, usize::MAX],
        &[0],
    ] {
        s.expect(
            &format!("view({shape:?})"),
            || l.view(shape),
            |r| r.is_err(),
        );
    }
    for shape in [
        &[-1isize, -1][..],
        &[-2],
        &[5, -1],
        &[isize::MIN],
        &[isize::MAX, isize::MAX, -1],
        &[0, -1],
    ] {
        s.expect(
            &format!("infer_shape({shape:?})"),
            || l.infer_shape(shape),
            |r| r.is_err(),
        );
    }
    for shape in [
        &[2usize, 3][..],
        &[3, 3, 4],
        &[1 << 40, 1 << 40, 2, 3, 4],
        &[usize::MAX, 2, 3, 4],
    ] {
        s.expect(
            &format!("expand({shape:?})"),
            || l.expand(shape),
            |r| r.is_err(),
        );
    }
    for (dim, start, end, step) in [
        (0isize, 0usize, 2usize, 0isize),
        (0, 0, 2, -1),
        (0, 0, 2, isize::MIN),
        (5, 0, 1, 1),
        (0, 1, 0, 1),
        (0, 0, usize::MAX, 1),
        (0, usize::MAX, usize::MAX, isize::MAX),
    ] {
        s.expect(
            &format!("slice({dim}, {start}, {end}, {step})"),
            || l.slice(dim, start, end, step),
            |r| r.is_err(),
        );
    }
    s.finish();
}
