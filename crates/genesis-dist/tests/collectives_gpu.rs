//! Every collective on every dtype NCCL takes, against a CPU reduction of what every rank
//! contributed: a world of one in this process (one GPU), one process per GPU launched by
//! `Launch` (two or more GPUs), and one process driving every GPU (two or more). Each test
//! prints "skipped" and passes where its GPUs or NCCL are missing.
//!
//! Rank `r`'s contribution to element `i` is a small whole number (`contribution`), so every
//! sum, product, maximum and minimum is exact in every dtype; averages are compared within
//! the dtype's rounding.

mod common;
use common::{gpus, gpus_lock, launch_ranks, nccl_world_of_one, skip, world_of_one_env};
use std::time::Duration;

use genesis::cuda::{Stream, with_stream};
use genesis::{DType, Device, Tensor};
use genesis_dist::{Error, GroupEnv, GroupOptions, ProcessGroup, ReduceOp, Work, group};

const T: Duration = Duration::from_secs(120);

/// The dtypes NCCL takes (every Genesis dtype but int16).
const DTYPES: [DType; 9] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// Elements per rank: odd, so no vectorised path covers the whole buffer.
const N: usize = 1031;

/// Rank `rank`'s value at element `i` for reduction `op` (1..=5; 1..=2 for products, so
/// that a product over 4 ranks stays exact in bfloat16; 0 or 1 for bool).
fn contribution(rank: usize, i: usize, op: Option<ReduceOp>, dtype: DType) -> f64 {
    if dtype == DType::Bool {
        return f64::from(u8::from((i + 2 * rank).is_multiple_of(3)));
    }
    match op {
        Some(ReduceOp::Product) => ((i + rank) % 2 + 1) as f64,
        _ => ((i * 7 + rank * 3) % 5 + 1) as f64,
    }
}

fn contributions(rank: usize, n: usize, op: Option<ReduceOp>, dtype: DType) -> Vec<f64> {
    (0..n).map(|i| contribution(rank, i, op, dtype)).collect()
}

/// Elements `positions` of the reduction with `op` over ranks `0..size` of their
/// contributions, as NCCL computes it in `dtype`.
fn reduced(size: usize, positions: std::ops::Range<usize>, op: ReduceOp, dtype: DType) -> Vec<f64> {
    positions
        .map(|i| {
            let v: Vec<f64> = (0..size)
                .map(|r| contribution(r, i, Some(op), dtype))
                .collect();
            reduce_cpu(&v, op, dtype)
        })
        .collect()
}

/// The CPU reduction of `values` (one a rank) as NCCL computes it in `dtype`.
fn reduce_cpu(values: &[f64], op: ReduceOp, dtype: DType) -> f64 {
    let n = values.len() as f64;
    let sum: f64 = values.iter().sum();
    if dtype == DType::Bool {
        let any = values.iter().any(|&v| v != 0.0);
        let all = values.iter().all(|&v| v != 0.0);
        return f64::from(u8::from(match op {
            ReduceOp::Sum | ReduceOp::Max => any,
            ReduceOp::Product | ReduceOp::Min => all,
            ReduceOp::Avg => unreachable!("no average of bool"),
        }));
    }
    let float = matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64);
    match op {
        ReduceOp::Sum => sum,
        ReduceOp::Product => values.iter().product(),
        ReduceOp::Max => values.iter().copied().fold(f64::MIN, f64::max),
        ReduceOp::Min => values.iter().copied().fold(f64::MAX, f64::min),
        ReduceOp::Avg if float => sum / n,
        ReduceOp::Avg => (sum / n).trunc(),
    }
}

fn tensor(values: &[f64], dtype: DType, device: Device) -> Tensor {
    Tensor::from_slice(values, [values.len()], device)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

fn read(t: &Tensor) -> Vec<f64> {
    t.to(Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.to_vec::<f64>())
        .unwrap()
}

fn assert_close(what: &str, dtype: DType, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what} {dtype}: length");
    let tol = match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 => 1e-6,
        _ => 1e-12,
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what} {dtype}: element {i} is {g}, the CPU reduction {w}"
        );
    }
}

/// Every collective on every dtype on `pg` (one rank of a group whose ranks all run this).
fn check_every_collective(pg: &ProcessGroup) {
    let (rank, size, dev) = (pg.rank(), pg.size(), pg.device());
    let ranks = 0..size;
    for dtype in DTYPES {
        // all_reduce, every reduction.
        for op in ReduceOp::ALL {
            if dtype == DType::Bool && op == ReduceOp::Avg {
                let t = tensor(&contributions(rank, N, Some(op), dtype), dtype, dev);
                assert!(matches!(
                    pg.all_reduce(&t, op),
                    Err(Error::UnsupportedDType { .. })
                ));
                continue;
            }
            let t = tensor(&contributions(rank, N, Some(op), dtype), dtype, dev);
            let w = pg.all_reduce(&t, op).unwrap();
            w.wait().unwrap();
            assert!(w.is_completed().unwrap());
            let want = reduced(size, 0..N, op, dtype);
            assert_close(&format!("all_reduce {op:?}"), dtype, &read(&t), &want);
        }

        // broadcast from the last rank.
        let root = size - 1;
        let t = tensor(&contributions(rank, N, None, dtype), dtype, dev);
        pg.broadcast(&t, root).unwrap().wait().unwrap();
        assert_close(
            "broadcast",
            dtype,
            &read(&t),
            &contributions(root, N, None, dtype),
        );

        // reduce to rank 0, sum and max; the others keep their input.
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let mine = contributions(rank, N, Some(op), dtype);
            let t = tensor(&mine, dtype, dev);
            pg.reduce(&t, 0, op).unwrap().wait().unwrap();
            if rank == 0 {
                let want = reduced(size, 0..N, op, dtype);
                assert_close(&format!("reduce {op:?}"), dtype, &read(&t), &want);
            } else {
                assert_close(
                    &format!("reduce {op:?} (non-root)"),
                    dtype,
                    &read(&t),
                    &mine,
                );
            }
        }

        // all_gather into one tensor and into a list.
        let input = tensor(&contributions(rank, N, None, dtype), dtype, dev);
        let flat = Tensor::zeros([N * size], dtype, dev).unwrap();
        pg.all_gather_into_tensor(&flat, &input)
            .unwrap()
            .wait()
            .unwrap();
        let want: Vec<f64> = ranks
            .clone()
            .flat_map(|r| contributions(r, N, None, dtype))
            .collect();
        assert_close("all_gather_into_tensor", dtype, &read(&flat), &want);
        let list: Vec<Tensor> = ranks
            .clone()
            .map(|_| Tensor::zeros([N], dtype, dev).unwrap())
            .collect();
        pg.all_gather(&list, &input).unwrap().wait().unwrap();
        for (r, t) in list.iter().enumerate() {
            assert_close(
                &format!("all_gather[{r}]"),
                dtype,
                &read(t),
                &contributions(r, N, None, dtype),
            );
        }

        // reduce_scatter from a flat input of size * N elements, sum and min.
        for op in [ReduceOp::Sum, ReduceOp::Min] {
            let input = tensor(&contributions(rank, N * size, Some(op), dtype), dtype, dev);
            let out = Tensor::zeros([N], dtype, dev).unwrap();
            pg.reduce_scatter_tensor(&out, &input, op)
                .unwrap()
                .wait()
                .unwrap();
            let want = reduced(size, rank * N..(rank + 1) * N, op, dtype);
            assert_close(&format!("reduce_scatter {op:?}"), dtype, &read(&out), &want);
        }

        // send / recv around the ring, posted together.
        let next = (rank + 1) % size;
        let prev = (rank + size - 1) % size;
        let mine = tensor(&contributions(rank, N, None, dtype), dtype, dev);
        let got = Tensor::zeros([N], dtype, dev).unwrap();
        let works: Vec<Work> =
            group(|| Ok(vec![pg.send(&mine, next)?, pg.recv(&got, prev)?])).unwrap();
        for w in &works {
            w.wait().unwrap();
        }
        assert_close(
            "send/recv",
            dtype,
            &read(&got),
            &contributions(prev, N, None, dtype),
        );
    }

    // Two collectives in one group; a collective on another stream than the tensor's.
    let a = tensor(&contributions(rank, N, None, DType::F32), DType::F32, dev);
    let b = tensor(&contributions(rank, N, None, DType::I64), DType::I64, dev);
    let (wa, wb) = group(|| {
        Ok((
            pg.all_reduce(&a, ReduceOp::Max)?,
            pg.all_reduce(&b, ReduceOp::Sum)?,
        ))
    })
    .unwrap();
    wa.wait().unwrap();
    wb.wait().unwrap();
    let want_b: Vec<f64> = (0..N)
        .map(|i| {
            ranks
                .clone()
                .map(|r| contribution(r, i, None, DType::I64))
                .sum()
        })
        .collect();
    assert_close("grouped all_reduce", DType::I64, &read(&b), &want_b);
    let Device::Cuda(ordinal) = dev else {
        unreachable!()
    };
    let side = Stream::new(ordinal).unwrap();
    let big = tensor(
        &contributions(rank, 1 << 20, None, DType::F32),
        DType::F32,
        dev,
    );
    let w = with_stream(&side, || {
        // The tensor was allocated on the default stream: its use here is recorded.
        side.wait_stream(&Stream::default_stream(ordinal).unwrap())
            .unwrap();
        pg.all_reduce(&big, ReduceOp::Sum)
    })
    .unwrap();
    w.wait().unwrap();
    let got = read(&big);
    for i in [0, 1, 12345, (1 << 20) - 1] {
        let want: f64 = ranks
            .clone()
            .map(|r| contribution(r, i, None, DType::F32))
            .sum();
        assert_eq!(got[i], want, "all_reduce on a side stream, element {i}");
    }
    drop(big);

    // Bad arguments are typed errors, and leave the communicator usable.
    let cpu = Tensor::zeros([4usize], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        pg.all_reduce(&cpu, ReduceOp::Sum),
        Err(Error::NotOnCuda { .. })
    ));
    let m = Tensor::zeros([4usize, 3], DType::F32, dev).unwrap();
    assert!(matches!(
        pg.all_reduce(&m.t().unwrap(), ReduceOp::Sum),
        Err(Error::NotContiguous { .. })
    ));
    let i16 = Tensor::zeros([4usize], DType::I16, dev).unwrap();
    assert!(matches!(
        pg.broadcast(&i16, 0),
        Err(Error::UnsupportedDType { .. })
    ));
    let small = Tensor::zeros([4usize], DType::F32, dev).unwrap();
    let wrong = Tensor::zeros([4 * size + 1], DType::F32, dev).unwrap();
    assert!(matches!(
        pg.all_gather_into_tensor(&wrong, &small),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        pg.broadcast(&small, size),
        Err(Error::InvalidArgument { .. })
    ));
    pg.barrier().unwrap();
    assert!(!pg.is_aborted());
}

/// A world of one in this process: every collective is the identity (or its dtype's).
#[test]
fn a_world_of_one_runs_every_collective() {
    let _gpus = gpus_lock();
    if let Some(why) = skip(1) {
        eprintln!("skipped: {why}");
        return;
    }
    let (_server, pg) = nccl_world_of_one(T);
    assert_eq!((pg.rank(), pg.size(), pg.device()), (0, 1, Device::Cuda(0)));
    assert!(
        std::env::var_os("NCCL_NVLS_ENABLE").is_some(),
        "NVLS set before NCCL"
    );
    assert!(
        std::env::var_os("NCCL_RUNTIME_CONNECT").is_some(),
        "runtime connection set before NCCL"
    );
    check_every_collective(&pg);
    versions_of_written_tensors_go_up(&pg);
    // A group may hold collectives (the blocking communicator) and point-to-point calls
    // (the non-blocking one) together.
    let a = Tensor::from_slice(&[1f32, 2., 3., 4.], [4usize], Device::Cuda(0)).unwrap();
    let b = Tensor::zeros([4usize], DType::F32, Device::Cuda(0)).unwrap();
    let works = group(|| {
        Ok(vec![
            pg.all_reduce(&a, ReduceOp::Sum)?,
            pg.send(&a, 0)?,
            pg.recv(&b, 0)?,
        ])
    })
    .unwrap();
    for w in &works {
        w.wait().unwrap();
    }
    assert_eq!(b.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
    // After an abort, calls are refused with a typed error.
    pg.abort();
    let t = Tensor::zeros([4usize], DType::F32, Device::Cuda(0)).unwrap();
    assert!(matches!(
        pg.all_reduce(&t, ReduceOp::Sum),
        Err(Error::Aborted { .. })
    ));
    eprintln!("world of one: every collective and dtype checked");
}

/// Every collective that writes a tensor raises its version by one (as PyTorch's in-place
/// collectives do: a backward that saved it then refuses to run); what it only reads keeps
/// its version.
fn versions_of_written_tensors_go_up(pg: &ProcessGroup) {
    let dev = pg.device();
    let t = Tensor::ones([8usize], DType::F32, dev).unwrap();
    let out = Tensor::zeros([8 * pg.size()], DType::F32, dev).unwrap();
    let parts: Vec<Tensor> = (0..pg.size())
        .map(|_| Tensor::zeros([8usize], DType::F32, dev).unwrap())
        .collect();
    let step = |what: &str, work: Work, written: &[&Tensor], before: &[u64], read: Option<u64>| {
        work.wait().unwrap();
        for (w, v) in written.iter().zip(before) {
            assert_eq!(w.version(), v + 1, "{what}: the written tensor's version");
        }
        if let Some(v) = read {
            assert_eq!(t.version(), v, "{what}: the input's version");
        }
    };
    let v = t.version();
    step(
        "all_reduce",
        pg.all_reduce(&t, ReduceOp::Sum).unwrap(),
        &[&t],
        &[v],
        None,
    );
    let v = t.version();
    step("broadcast", pg.broadcast(&t, 0).unwrap(), &[&t], &[v], None);
    let v = t.version();
    step(
        "reduce",
        pg.reduce(&t, 0, ReduceOp::Sum).unwrap(),
        &[&t],
        &[v],
        None,
    );
    let (v, o) = (t.version(), out.version());
    let w = pg.all_gather_into_tensor(&out, &t).unwrap();
    step("all_gather_into_tensor", w, &[&out], &[o], Some(v));
    let before: Vec<u64> = parts.iter().map(Tensor::version).collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    step(
        "all_gather",
        pg.all_gather(&parts, &t).unwrap(),
        &refs,
        &before,
        Some(v),
    );
    let (v, o) = (out.version(), t.version());
    let w = pg.reduce_scatter_tensor(&t, &out, ReduceOp::Sum).unwrap();
    step("reduce_scatter_tensor", w, &[&t], &[o], None);
    assert_eq!(
        out.version(),
        v,
        "reduce_scatter_tensor: the input's version"
    );
    if pg.size() == 1 {
        let (s, r) = (t.version(), out.version());
        let recv_into = out.narrow(0, 0, 8).unwrap();
        let works = group(|| Ok(vec![pg.send(&t, 0)?, pg.recv(&recv_into, 0)?])).unwrap();
        for w in works {
            w.wait().unwrap();
        }
        assert_eq!((t.version(), out.version()), (s, r + 1), "send / recv");
    }
}

/// One rank of [`one_process_per_gpu`] (a no-op unless launched by it).
#[test]
fn rank_of_a_launched_group() {
    if std::env::var_os("GENESIS_DIST_GPU_CHILD").is_none() {
        return;
    }
    let env = GroupEnv::from_env().unwrap();
    let pg = ProcessGroup::new(&env, T).unwrap();
    check_every_collective(&pg);
    versions_of_written_tensors_go_up(&pg);
    // A second group over the same ranks whose collectives run on at most two CTAs.
    let narrow = GroupOptions { max_ctas: Some(2) };
    let pg2 = ProcessGroup::new_with(&env, T, &narrow).unwrap();
    check_every_collective(&pg2);
    eprintln!(
        "rank {} of {}: every collective and dtype checked, on NCCL's own CTAs and on two",
        env.rank, env.world_size
    );
}

/// A group of at most no CTAs is a typed error (before NCCL is asked); one of a single CTA
/// runs every collective.
#[test]
fn groups_of_no_ctas_are_refused_and_of_one_run() {
    let _gpus = gpus_lock();
    let (_server, env) = world_of_one_env();
    let none = GroupOptions { max_ctas: Some(0) };
    match ProcessGroup::new_with(&env, T, &none) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("max_ctas")),
        other => panic!("a group of at most 0 CTAs: {other:?}"),
    }
    if let Some(why) = skip(1) {
        eprintln!("skipped: {why}");
        return;
    }
    let one = GroupOptions { max_ctas: Some(1) };
    let pg = ProcessGroup::new_with(&env, T, &one).unwrap();
    check_every_collective(&pg);
}

/// One process per GPU, started by the launcher with `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
/// `MASTER_ADDR`, `MASTER_PORT`: every collective and dtype on every rank.
#[test]
fn one_process_per_gpu() {
    let _gpus = gpus_lock();
    if std::env::var_os("GENESIS_DIST_GPU_CHILD").is_some() {
        return;
    }
    if let Some(why) = skip(2) {
        eprintln!("skipped: {why}");
        return;
    }
    let n = gpus();
    launch_ranks("rank_of_a_launched_group", "GENESIS_DIST_GPU_CHILD", n);
    eprintln!("{n} processes: every collective and dtype checked");
}

/// One process driving every GPU: the collectives of all ranks queued in one group.
#[test]
fn one_process_driving_every_gpu() {
    let _gpus = gpus_lock();
    if let Some(why) = skip(2) {
        eprintln!("skipped: {why}");
        return;
    }
    let n = gpus();
    let devices: Vec<usize> = (0..n).collect();
    let pgs = ProcessGroup::new_local(&devices, T).unwrap();
    for dtype in DTYPES {
        for op in ReduceOp::ALL {
            if dtype == DType::Bool && op == ReduceOp::Avg {
                continue;
            }
            let ts: Vec<Tensor> = pgs
                .iter()
                .map(|pg| {
                    tensor(
                        &contributions(pg.rank(), N, Some(op), dtype),
                        dtype,
                        pg.device(),
                    )
                })
                .collect();
            let works = group(|| {
                pgs.iter()
                    .zip(&ts)
                    .map(|(pg, t)| pg.all_reduce(t, op))
                    .collect::<genesis_dist::Result<Vec<_>>>()
            })
            .unwrap();
            for w in &works {
                w.wait().unwrap();
            }
            let want = reduced(n, 0..N, op, dtype);
            for t in &ts {
                assert_close(&format!("local all_reduce {op:?}"), dtype, &read(t), &want);
            }
        }
        // all_gather into one tensor on each GPU.
        let inputs: Vec<Tensor> = pgs
            .iter()
            .map(|pg| {
                tensor(
                    &contributions(pg.rank(), N, None, dtype),
                    dtype,
                    pg.device(),
                )
            })
            .collect();
        let outputs: Vec<Tensor> = pgs
            .iter()
            .map(|pg| Tensor::zeros([N * n], dtype, pg.device()).unwrap())
            .collect();
        let works = group(|| {
            (0..n)
                .map(|r| pgs[r].all_gather_into_tensor(&outputs[r], &inputs[r]))
                .collect::<genesis_dist::Result<Vec<_>>>()
        })
        .unwrap();
        for w in &works {
            w.wait().unwrap();
        }
        let want: Vec<f64> = (0..n)
            .flat_map(|r| contributions(r, N, None, dtype))
            .collect();
        for o in &outputs {
            assert_close("local all_gather", dtype, &read(o), &want);
        }
    }
    eprintln!("one process, {n} GPUs: all_reduce and all_gather on every dtype checked");
}
