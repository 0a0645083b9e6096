//! Storages on the GPU: round trips of every dtype over every device pair, casts matching the
//! CPU for every dtype pair, strided copies and `contiguous` against the CPU, typed errors.
#![cfg(feature = "cuda")]

use genesis_cuda::skip_without_gpu;
use genesis_storage::{DType, Device, Error, Layout, Storage};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// Random bytes valid for `dtype` (bools 0/1), with float specials sprinkled in.
fn bytes_for(dtype: DType, n: usize, rng: &mut SmallRng) -> Vec<u8> {
    let mut b = vec![0u8; n * dtype.size()];
    rng.fill_bytes(&mut b);
    if dtype == DType::Bool {
        b.iter_mut().for_each(|x| *x &= 1);
    }
    if dtype == DType::F32 && n > 40 {
        for (i, v) in [f32::NAN, f32::INFINITY, -0.0, 1e-40, 65520.0, 2.5, -3.5]
            .iter()
            .enumerate()
        {
            b[i * 20..i * 20 + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

fn same(dtype: DType, a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let s = dtype.size();
    a.chunks(s).zip(b.chunks(s)).all(|(x, y)| {
        x == y
            || match dtype {
                DType::F16 => {
                    half::f16::from_le_bytes([x[0], x[1]]).is_nan()
                        && half::f16::from_le_bytes([y[0], y[1]]).is_nan()
                }
                DType::BF16 => {
                    half::bf16::from_le_bytes([x[0], x[1]]).is_nan()
                        && half::bf16::from_le_bytes([y[0], y[1]]).is_nan()
                }
                DType::F32 => {
                    f32::from_le_bytes(x.try_into().unwrap()).is_nan()
                        && f32::from_le_bytes(y.try_into().unwrap()).is_nan()
                }
                DType::F64 => {
                    f64::from_le_bytes(x.try_into().unwrap()).is_nan()
                        && f64::from_le_bytes(y.try_into().unwrap()).is_nan()
                }
                _ => false,
            }
    })
}

#[test]
fn round_trips_are_bit_exact() {
    let _release = Release;
    if skip_without_gpu("round_trips_are_bit_exact") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(1);
    let n_dev = genesis_cuda::device_count().unwrap();
    for dtype in DType::ALL {
        let bytes = bytes_for(dtype, 10_007, &mut rng);
        let cpu = Storage::from_bytes(&bytes, dtype, Device::Cpu).unwrap();
        let pinned = cpu.to_pinned().unwrap();
        assert!(pinned.is_pinned() && pinned.device() == Device::Cpu);
        assert_eq!(pinned.to_bytes().unwrap(), bytes, "{dtype}: cpu -> pinned");
        for src in [&cpu, &pinned] {
            let g = src.to_device(Device::Cuda(0)).unwrap();
            assert_eq!(g.to_bytes().unwrap(), bytes, "{dtype}: -> cuda:0");
            let back = g.to_device(Device::Cpu).unwrap();
            assert_eq!(back.to_bytes().unwrap(), bytes, "{dtype}: cuda:0 -> cpu");
            let mut into_pinned = Storage::zeros_pinned(src.len(), dtype).unwrap();
            into_pinned.copy_from(&g).unwrap();
            assert_eq!(
                into_pinned.to_bytes().unwrap(),
                bytes,
                "{dtype}: cuda:0 -> pinned"
            );
            let g2 = g.try_clone().unwrap();
            assert_eq!(g2.to_bytes().unwrap(), bytes, "{dtype}: cuda:0 -> cuda:0");
            if n_dev > 1 {
                let g1 = g.to_device(Device::Cuda(1)).unwrap();
                assert_eq!(g1.device(), Device::Cuda(1));
                assert_eq!(g1.to_bytes().unwrap(), bytes, "{dtype}: cuda:0 -> cuda:1");
                assert_eq!(
                    g1.to_device(Device::Cuda(0)).unwrap().to_bytes().unwrap(),
                    bytes,
                    "{dtype}: cuda:1 -> cuda:0"
                );
            }
        }
    }
    if n_dev < 2 {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "cuda:0 <-> cuda:1 skipped: one GPU");
    }
}

#[test]
fn casts_match_the_cpu_for_every_pair() {
    let _release = Release;
    if skip_without_gpu("casts_match_the_cpu_for_every_pair") {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(2);
    for from in DType::ALL {
        let bytes = bytes_for(from, 4099, &mut rng);
        let cpu = Storage::from_bytes(&bytes, from, Device::Cpu).unwrap();
        let gpu = cpu.to_device(Device::Cuda(0)).unwrap();
        for to in DType::ALL {
            let want = cpu.to_dtype(to).unwrap().to_bytes().unwrap();
            let got = gpu.to_dtype(to).unwrap().to_bytes().unwrap();
            assert!(same(to, &got, &want), "{from} -> {to}");
        }
        // A part, from an odd element: the same dtype is a stream-ordered copy.
        for to in [from, DType::F32] {
            let want = cpu.to_dtype_at(7, 4000, to).unwrap().to_bytes().unwrap();
            let got = gpu.to_dtype_at(7, 4000, to).unwrap().to_bytes().unwrap();
            assert!(same(to, &got, &want), "{from} -> {to} from element 7");
        }
    }
}

/// `Storage::full_scalar` on the GPU (the fill kernel, or the host for the dtypes it does not
/// take) gives the CPU's bytes for every dtype, and the same error for a value the dtype
/// cannot hold.
#[test]
fn full_scalars_match_the_cpu() {
    let _release = Release;
    if skip_without_gpu("full_scalars_match_the_cpu") {
        return;
    }
    for dtype in DType::ALL {
        for value in [0.0, 1.0, -2.5, 3.0, 300.0, 1e39, f64::NAN] {
            for len in [0, 1, 1000] {
                let cpu = Storage::full_scalar(len, value, dtype, Device::Cpu);
                let gpu = Storage::full_scalar(len, value, dtype, Device::Cuda(0));
                match (cpu, gpu) {
                    (Ok(c), Ok(g)) => {
                        assert_eq!(g.device(), Device::Cuda(0));
                        assert_eq!((g.len(), g.dtype()), (len, dtype));
                        let (c, g) = (c.to_bytes().unwrap(), g.to_bytes().unwrap());
                        assert!(same(dtype, &g, &c), "{value} as {dtype}");
                    }
                    (Err(c), Err(g)) => assert_eq!(c.to_string(), g.to_string()),
                    (c, g) => panic!("{value} as {dtype}: CPU {c:?}, GPU {g:?}"),
                }
            }
        }
    }
}

#[test]
fn contiguous_and_strided_copies_match_the_cpu() {
    let _release = Release;
    if skip_without_gpu("contiguous_and_strided_copies_match_the_cpu") {
        return;
    }
    let data: Vec<i32> = (0..(64 * 48)).collect();
    let cpu = Storage::from_slice(&data, Device::Cpu).unwrap();
    let gpu = cpu.to_device(Device::Cuda(0)).unwrap();
    let base = Layout::contiguous(&[64, 48]);
    let views = [
        base.transpose(0, 1).unwrap(),
        base.slice(0, 1, 64, 2).unwrap().slice(1, 0, 48, 3).unwrap(),
        base.view(&[4, 16, 48])
            .unwrap()
            .permute(&[2, 0, 1])
            .unwrap(),
        base.narrow(1, 5, 20).unwrap(),
        base.narrow(0, 3, 7).unwrap(),
        Layout::contiguous(&[48])
            .unsqueeze(0)
            .unwrap()
            .expand(&[5, 48])
            .unwrap(),
        base.transpose(0, 1).unwrap().narrow(0, 2, 30).unwrap(),
    ];
    for v in &views {
        let want = cpu.contiguous(v).unwrap().to_vec::<i32>().unwrap();
        let reference: Vec<i32> = v.indices().map(|i| data[i]).collect();
        assert_eq!(want, reference, "cpu {v:?}");
        let got = gpu.contiguous(v).unwrap();
        assert_eq!(got.device(), Device::Cuda(0));
        assert_eq!(got.to_vec::<i32>().unwrap(), reference, "cuda {v:?}");
    }
    // Strided destination: write the transpose into the odd columns of a wider matrix.
    let mut dst = Storage::zeros(48 * 130, DType::I32, Device::Cuda(0)).unwrap();
    let dst_layout = Layout::contiguous(&[48, 130]).slice(1, 1, 129, 2).unwrap();
    dst.copy_strided_from(&dst_layout, &gpu, &base.transpose(0, 1).unwrap())
        .unwrap();
    let host = dst.to_vec::<i32>().unwrap();
    for r in 0..48 {
        for c in 0..64 {
            assert_eq!(host[r * 130 + 1 + 2 * c], data[c * 48 + r]);
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let _release = Release;
    if skip_without_gpu("storage bad_input_is_a_typed_error") {
        return;
    }
    let n = genesis_cuda::device_count().unwrap();
    let e = Storage::zeros(4, DType::F32, Device::Cuda(n + 2)).unwrap_err();
    assert!(
        matches!(e, Error::Cuda(genesis_cuda::Error::InvalidDevice { .. })),
        "{e}"
    );
    let a = Storage::zeros(4, DType::F32, Device::Cuda(0)).unwrap();
    let mut b = Storage::zeros(5, DType::F32, Device::Cuda(0)).unwrap();
    assert!(matches!(b.copy_from(&a), Err(Error::LengthMismatch { .. })));
    assert!(matches!(a.as_slice::<f32>(), Err(Error::NotOnHost { .. })));
    let huge = Storage::zeros(usize::MAX / 16, DType::F64, Device::Cuda(0)).unwrap_err();
    assert!(
        matches!(huge, Error::Memory(_) | Error::SizeOverflow { .. }),
        "{huge}"
    );
}

/// Gives the pools' cached memory back when a test ends, so nothing is held at exit.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        if genesis_cuda::is_available() {
            let _ = genesis_storage::cuda::empty_caches();
        }
    }
}

#[test]
fn async_and_batched_copies() {
    let _release = Release;
    if skip_without_gpu("async_and_batched_copies") {
        return;
    }
    let ctx = genesis_cuda::Context::get(0).unwrap();
    let stream = genesis_cuda::Stream::new(&ctx).unwrap();
    let host: Vec<f32> = (0..1_000_003).map(|i| i as f32 * 0.5).collect();
    let pinned = Storage::from_slice(&host, Device::Cpu)
        .unwrap()
        .to_pinned()
        .unwrap();
    let mut dev = Storage::zeros(host.len(), DType::F32, Device::Cuda(0)).unwrap();
    let copy = dev.copy_from_async(&pinned, &stream).unwrap();
    copy.wait().unwrap();
    let mut back = Storage::zeros_pinned(host.len(), DType::F32).unwrap();
    {
        let pending = back.copy_from_async(&dev, &stream).unwrap();
        let _ = pending.is_done().unwrap();
        // Dropping waits.
    }
    assert_eq!(back.as_slice::<f32>().unwrap(), host.as_slice());
    // A stream of another device (or a bad pairing) is refused.
    let mut small = Storage::zeros(3, DType::F32, Device::Cuda(0)).unwrap();
    assert!(matches!(
        small.copy_from_async(&pinned, &stream),
        Err(Error::LengthMismatch { .. })
    ));

    let srcs: Vec<Storage> = (0..8)
        .map(|i| {
            Storage::full(1 << 20, i, Device::Cpu)
                .unwrap()
                .to_pinned()
                .unwrap()
        })
        .collect();
    let mut dsts: Vec<Storage> = (0..8)
        .map(|_| Storage::zeros(1 << 20, DType::I32, Device::Cuda(0)).unwrap())
        .collect();
    let mut pairs: Vec<(&mut Storage, &Storage)> = dsts.iter_mut().zip(srcs.iter()).collect();
    genesis_storage::batched_copy(&mut pairs, 4).unwrap();
    for (i, d) in dsts.iter().enumerate() {
        let v = d.to_vec::<i32>().unwrap();
        assert!(v.iter().all(|&x| x == i as i32), "pair {i}");
    }
}

#[test]
fn detached_copies_from_pinned_memory_keep_their_source() {
    let _release = Release;
    if skip_without_gpu("detached_copies_from_pinned_memory_keep_their_source") {
        return;
    }
    let ctx = genesis_cuda::Context::get(0).unwrap();
    let stream = genesis_cuda::Stream::new(&ctx).unwrap();
    let n = 1 << 22;
    let mut dsts = Vec::new();
    for round in 0..6 {
        let host: Vec<i32> = (0..n).map(|i| i ^ round).collect();
        let src = std::sync::Arc::new(
            Storage::from_slice(&host, Device::Cpu)
                .unwrap()
                .to_pinned()
                .unwrap(),
        );
        let mut dst = Storage::zeros(n as usize, DType::I32, Device::Cuda(0)).unwrap();
        dst.copy_from_async_detached(&src, &stream).unwrap();
        // The source goes at once; the copy still reads it (the pinned pool must not hand its
        // memory to the next round's source until the copy is done).
        drop(src);
        dsts.push((round, dst));
    }
    stream.synchronize().unwrap();
    for (round, d) in &dsts {
        let v = d.to_vec::<i32>().unwrap();
        assert!(
            v.iter().enumerate().all(|(i, &x)| x == i as i32 ^ round),
            "round {round}"
        );
    }
    assert_eq!(genesis_storage::cuda::release_completed_copies(), 0);
    // Into host memory the copy is waited for: the result is there on return.
    let mut back = Storage::zeros_pinned(n as usize, DType::I32).unwrap();
    let from = std::sync::Arc::new(dsts.pop().unwrap().1);
    back.copy_from_async_detached(&from, &stream).unwrap();
    assert_eq!(
        back.as_slice::<i32>().unwrap(),
        from.to_vec::<i32>().unwrap()
    );
    // Pageable memory is copied synchronously; mismatches are refused.
    let pageable = std::sync::Arc::new(Storage::full(n as usize, 7i32, Device::Cpu).unwrap());
    let mut d = Storage::zeros(n as usize, DType::I32, Device::Cuda(0)).unwrap();
    d.copy_from_async_detached(&pageable, &stream).unwrap();
    assert!(d.to_vec::<i32>().unwrap().iter().all(|&x| x == 7));
    let mut short = Storage::zeros(3, DType::I32, Device::Cuda(0)).unwrap();
    assert!(matches!(
        short.copy_from_async_detached(&pageable, &stream),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn two_dimensional_copies_between_host_and_device() {
    let _release = Release;
    if skip_without_gpu("two_dimensional_copies_between_host_and_device") {
        return;
    }
    let data: Vec<f32> = (0..(256 * 512)).map(|i| i as f32).collect();
    let host = Storage::from_slice(&data, Device::Cpu).unwrap();
    let dev = host.to_device(Device::Cuda(0)).unwrap();
    let wide = Layout::contiguous(&[256, 512]).narrow(1, 7, 300).unwrap(); // rows of 1200 bytes
    let reference: Vec<f32> = wide.indices().map(|i| data[i]).collect();
    // device -> device (copy engines), host -> device and device -> host (2-D DMA).
    assert_eq!(
        dev.contiguous(&wide).unwrap().to_vec::<f32>().unwrap(),
        reference
    );
    let mut d = Storage::zeros(256 * 300, DType::F32, Device::Cuda(0)).unwrap();
    d.copy_strided_from(&Layout::contiguous(&[256, 300]), &host, &wide)
        .unwrap();
    assert_eq!(d.to_vec::<f32>().unwrap(), reference);
    let mut h = Storage::zeros(256 * 300, DType::F32, Device::Cpu).unwrap();
    h.copy_strided_from(&Layout::contiguous(&[256, 300]), &dev, &wide)
        .unwrap();
    assert_eq!(h.to_vec::<f32>().unwrap(), reference);
    // Dense source into a strided device destination.
    let mut big = Storage::zeros(256 * 512, DType::F32, Device::Cuda(0)).unwrap();
    big.copy_strided_from(&wide, &d, &Layout::contiguous(&[256, 300]))
        .unwrap();
    let back = big.to_vec::<f32>().unwrap();
    for (k, i) in wide.indices().enumerate() {
        assert_eq!(back[i], reference[k]);
    }
}

/// An int64 or int32 storage copied from CPU memory to the device knows its values' bounds
/// until it is written or its address is handed out; other dtypes, pinned sources and copies
/// over the limit know none; copies and integer conversions pass them on.
#[test]
fn uploads_know_their_bounds_until_written() {
    let _release = Release;
    if skip_without_gpu("uploads_know_their_bounds_until_written") {
        return;
    }
    let dev = Device::Cuda(0);
    let vals = [5i64, -3, 17, 0, 9];
    let from_slice = Storage::from_slice(&vals, dev).unwrap();
    assert_eq!(from_slice.known_bounds(), Some((-3, 17)));
    let up = Storage::upload(&vals, dev).unwrap();
    assert_eq!(up.known_bounds(), Some((-3, 17)));
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let raw = Storage::from_bytes(&bytes, DType::I64, dev).unwrap();
    assert_eq!(raw.known_bounds(), Some((-3, 17)));
    // A part of a host storage: the bounds of the part copied.
    let cpu = Storage::from_slice(&vals, Device::Cpu).unwrap();
    let part = cpu.to_device_at(2, 2, dev).unwrap();
    assert_eq!(part.known_bounds(), Some((0, 17)));
    assert_eq!(part.to_vec::<i64>().unwrap(), [17, 0]);
    // None for other dtypes, pinned sources and copies over the limit; a device copy keeps them.
    assert_eq!(
        Storage::from_slice(&[1i32, -2], dev)
            .unwrap()
            .known_bounds(),
        Some((-2, 1))
    );
    assert_eq!(
        Storage::from_slice(&[1i16, 2], dev).unwrap().known_bounds(),
        None
    );
    let pinned = cpu.to_pinned().unwrap();
    assert_eq!(pinned.to_device(dev).unwrap().known_bounds(), None);
    assert_eq!(
        from_slice.to_device(dev).unwrap().known_bounds(),
        Some((-3, 17))
    );
    let big = vec![1i64; genesis_storage::BOUNDS_MAX_LEN + 1];
    assert_eq!(Storage::from_slice(&big, dev).unwrap().known_bounds(), None);
    let limit = Storage::from_slice(&big[1..], dev).unwrap();
    assert_eq!(limit.known_bounds(), Some((1, 1)));
    // Integers drawn in a range know it; floats know nothing.
    use genesis_kernels::random::Sampler;
    let int = Sampler::Int { low: -4, range: 10 };
    for dtype in [DType::I64, DType::I32] {
        let r = Storage::random(int, 1000, dtype, dev, 1, 0).unwrap();
        assert_eq!(r.known_bounds(), Some((-4, 5)), "{dtype}");
    }
    let f = Storage::random(Sampler::Uniform, 10, DType::F32, dev, 1, 0).unwrap();
    assert_eq!(f.known_bounds(), None);
    // Copies and integer conversions on the device pass them on where the dtype holds them.
    let src = Storage::from_slice(&[5i64, -3, 200], dev).unwrap();
    assert_eq!(src.try_clone().unwrap().known_bounds(), Some((-3, 200)));
    assert_eq!(
        src.to_device_at(1, 1, dev).unwrap().known_bounds(),
        Some((-3, 200))
    );
    assert_eq!(
        src.to_dtype(DType::I32).unwrap().known_bounds(),
        Some((-3, 200))
    );
    assert_eq!(
        src.to_dtype(DType::I16).unwrap().known_bounds(),
        Some((-3, 200))
    );
    assert_eq!(
        src.to_dtype(DType::I8).unwrap().known_bounds(),
        None,
        "200 wraps"
    );
    assert_eq!(
        src.to_dtype(DType::U8).unwrap().known_bounds(),
        None,
        "-3 wraps"
    );
    assert_eq!(src.to_dtype(DType::F32).unwrap().known_bounds(), None);
    assert_eq!(src.to_device(Device::Cpu).unwrap().known_bounds(), None);
    // Any write drops them: through a shared handle, or through `&mut`.
    let seven = Storage::from_slice(&[7i64], Device::Cpu).unwrap();
    let shared = Storage::from_slice(&vals, dev).unwrap();
    shared
        .fill_shared(&Layout::contiguous(&[1]), &seven)
        .unwrap();
    assert_eq!(shared.known_bounds(), None);
    let mut owned = Storage::from_slice(&vals, dev).unwrap();
    owned
        .copy_from(&Storage::from_slice(&vals, Device::Cpu).unwrap())
        .unwrap();
    assert_eq!(owned.known_bounds(), None);
    // So does handing the address out.
    for hand_out in [0, 1, 2] {
        let s = Storage::from_slice(&vals, dev).unwrap();
        match hand_out {
            0 => drop(s.data_ptr()),
            1 => drop(s.device_ptr()),
            _ => drop(s.cuda_span::<i64>().unwrap()),
        }
        assert_eq!(s.known_bounds(), None, "{hand_out}");
    }
}

/// A gather and a scatter whose index's known bounds put every value in range give the same
/// results as ones that read their check back; an index written on the device after its
/// upload is checked again, and a bad value is still an error.
#[test]
fn indexing_by_an_upload_is_exact_and_still_checked() {
    let _release = Release;
    if skip_without_gpu("indexing_by_an_upload_is_exact_and_still_checked") {
        return;
    }
    use genesis_kernels::gather::Along;
    let dev = Device::Cuda(0);
    let src: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let s = Storage::from_slice(&src, dev).unwrap();
    // Rows of a [4, 3] table by an index of 5 along dimension 0.
    let along = |n: usize| Along::new(&[n, 3], 0, &[1, 0], &[3, 1], &[3, 1], 4).unwrap();
    let idx = Storage::from_slice(&[3i64, 0, 2, 2, 1], dev).unwrap();
    assert!(idx.known_bounds().is_some());
    let got = s.gather_along(0, &idx, 0, &along(5)).unwrap();
    let want: Vec<f32> = [3, 0, 2, 2, 1]
        .iter()
        .flat_map(|&r| (0..3).map(move |c| (r * 3 + c) as f32))
        .collect();
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
    // A bad value: the bounds say so, and the device check reports it.
    let bad = Storage::from_slice(&[3i64, 4], dev).unwrap();
    let e = s.gather_along(0, &bad, 0, &along(2)).unwrap_err();
    assert!(e.to_string().contains("out of bounds"), "{e}");
    // Written after the upload (to 9): checked on the device again.
    let idx = Storage::from_slice(&[3i64, 0], dev).unwrap();
    let nine = Storage::from_slice(&[9i64], Device::Cpu).unwrap();
    idx.fill_shared(&Layout::contiguous(&[1]), &nine).unwrap();
    let e = s.gather_along(0, &idx, 0, &along(2)).unwrap_err();
    assert!(e.to_string().contains("out of bounds"), "{e}");
    // A scatter-add by an uploaded index.
    let mut t = Storage::from_slice(&[0f32; 12], dev).unwrap();
    let idx = Storage::from_slice(&[1i64, 1, 3], dev).unwrap();
    t.scatter_along(0, true, &idx, 0, &s, 0, &along(3)).unwrap();
    let mut want = [0f32; 12];
    for (i, &r) in [1usize, 1, 3].iter().enumerate() {
        for c in 0..3 {
            want[r * 3 + c] += src[i * 3 + c];
        }
    }
    assert_eq!(t.to_vec::<f32>().unwrap(), want);
}
