//! Seed 000's tour of the CUDA storage, ported line by line from its Python to Genesis: creating
//! tensors, elementwise ops, reductions, matmul and shapes, indexing (slices, steps, integer
//! arrays, masks, mixed), writes through views, memory statistics and snapshots, streams,
//! access patterns, batching, in-place ops, leak checks, errors and a matmul timing. Each
//! section names the seed's heading; the seed's Python is quoted in the comments above the
//! Rust that does the same.
//!
//! ```text
//! cargo run --release --example tour                   # CPU
//! cargo run --release --example tour --features cuda   # CPU, then GPU 0 if there is one
//! ```
//!
//! On the CPU the sizes are the seed's except the timing loops, which are smaller; the memory
//! sections report the CUDA pool, which is empty there.

use std::time::Instant;

use genesis::{DType, Device, IndexTensor, Tensor, s, tensor};

/// Waits for the device's queued work (nothing to wait for on the CPU).
fn sync(device: Device) -> genesis::Result<()> {
    if let Device::Cuda(n) = device {
        genesis::cuda::synchronize(n)?;
    }
    Ok(())
}

/// Bytes allocated by the device's pool (0 on the CPU, whose memory is not pooled).
fn allocated(device: Device) -> genesis::Result<u64> {
    Ok(match device {
        Device::Cuda(n) => genesis::cuda::memory_allocated(n)?,
        _ => 0,
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn basics(dev: Device) -> genesis::Result<()> {
    println!("## Creating tensors");
    // data = [[1.0, 2.0], [3.0, 4.0]]; tensor = genesis.tensor(data, device='cuda')
    let tensor = tensor!([[1.0, 2.0], [3.0, 4.0]], device = dev)?;
    // zeros = genesis.zeros(100, 100, device='cuda'); ones = genesis.ones(50, 50, ...)
    let zeros = Tensor::zeros([100, 100], DType::F32, dev)?;
    let ones = Tensor::ones([50, 50], DType::F32, dev)?;
    // random = genesis.randn(200, 200, device='cuda')
    let random = Tensor::randn([200, 200], DType::F32, dev)?;
    // float16_tensor = genesis.randn(100, 100, dtype=genesis.float16, device='cuda')
    let float16_tensor = Tensor::randn([100, 100], DType::F16, dev)?;
    // int_tensor = genesis.randint(0, 10, (50, 50), device='cuda')
    let int_tensor = Tensor::randint(0, 10, [50, 50], DType::I64, dev)?;
    println!("tensor = {tensor}");
    println!(
        "shape {:?}, dtype {}, device {}, strides {:?}",
        tensor.shape(),
        tensor.dtype(),
        tensor.device(),
        tensor.strides()
    );
    println!(
        "zeros {:?} sum {}, ones {:?} sum {}, randn mean {:.3}, f16 {}, randint in [{}, {}]",
        zeros.shape(),
        zeros.sum()?.item::<f32>()?,
        ones.shape(),
        ones.sum()?.item::<f32>()?,
        random.mean()?.item::<f32>()?,
        float16_tensor.dtype(),
        int_tensor.min()?.item::<i64>()?,
        int_tensor.max()?.item::<i64>()?
    );

    println!("## Basic operations");
    // x = genesis.randn(100, 100); y = genesis.randn(100, 100)
    let x = Tensor::randn([100, 100], DType::F32, dev)?;
    let y = Tensor::randn([100, 100], DType::F32, dev)?;
    // z = x + y; w = x * y; u = x.pow(2); v = x.exp()
    let z = (&x + &y)?;
    let w = (&x * &y)?;
    let u = x.pow_scalar(2.0)?;
    let v = x.exp()?;
    // sum_all = x.sum(); sum_dim = x.sum(dim=0); mean_val = x.mean()
    let sum_all = x.sum()?;
    let sum_dim = x.sum_dim(0, false)?;
    let mean_val = x.mean()?;
    // max_val, indices = x.max(dim=1)
    let (max_val, indices) = x.max_dim(1, false)?;
    println!(
        "z[0, 0] = {} (x + y), w[0, 0] = {}, u >= 0: {}, v > 0: {}",
        z.i(&s![0, 0])?.item::<f32>()?,
        w.i(&s![0, 0])?.item::<f32>()?,
        u.ge_scalar(0.0)?.all()?.item::<bool>()?,
        v.gt_scalar(0.0)?.all()?.item::<bool>()?
    );
    println!(
        "sum {:.3}, sum over dim 0 {:?}, mean {:.4}, max over dim 1 {:?} at {:?}",
        sum_all.item::<f32>()?,
        sum_dim.shape(),
        mean_val.item::<f32>()?,
        max_val.shape(),
        indices.shape()
    );
    // a = genesis.randn(100, 50); b = genesis.randn(50, 200); c = genesis.matmul(a, b)
    let a = Tensor::randn([100, 50], DType::F32, dev)?;
    let b = Tensor::randn([50, 200], DType::F32, dev)?;
    let c = a.matmul(&b)?;
    // reshaped = x.view(10, 1000); transposed = x.transpose(0, 1); flattened = x.flatten()
    let reshaped = x.view([10, 1000])?;
    let transposed = x.transpose(0, 1)?;
    let flattened = x.flatten(0, -1)?;
    println!(
        "matmul {:?}, view {:?}, transpose {:?} (strides {:?}), flatten {:?}",
        c.shape(),
        reshaped.shape(),
        transposed.shape(),
        transposed.strides(),
        flattened.shape()
    );
    Ok(())
}

fn activations_and_selection(dev: Device) -> genesis::Result<()> {
    println!("## Activations, softmax and selection");
    // logits = genesis.randn(4, 10); p = logits.softmax(dim=-1); lse = logits.logsumexp(-1)
    let logits = Tensor::randn([4, 10], DType::F32, dev)?;
    let p = logits.softmax(-1)?;
    let lse = logits.logsumexp(-1, false)?;
    // h = F.gelu(logits, approximate='tanh'); s = F.silu(logits); e = logits.erf()
    let h = logits.gelu_tanh()?;
    let e = logits.erf()?;
    println!(
        "softmax rows sum to {:?}; logsumexp {:?}; gelu_tanh {:?}, erf {:?}",
        p.sum_dim(-1, false)?.to_vec::<f32>()?,
        lse.shape(),
        h.shape(),
        e.shape()
    );
    // labels = genesis.tensor([3, 0, 3, 9]); one_hot = F.one_hot(labels, 10)
    let labels = Tensor::from_slice(&[3i64, 0, 3, 9], [4], dev)?;
    let one_hot = labels.one_hot(Some(10))?;
    // values, inverse, counts = genesis.unique(labels, return_inverse=True, return_counts=True)
    let (values, inverse, counts) = labels.unique(true, true, true)?;
    println!(
        "one_hot {:?}; unique {:?}, inverse {:?}, counts {:?}",
        one_hot.shape(),
        values.to_vec::<i64>()?,
        inverse.map(|t| t.to_vec::<i64>()).transpose()?,
        counts.map(|t| t.to_vec::<i64>()).transpose()?
    );
    // upper = genesis.ones(4, 4).triu(1); (upper != 0).nonzero()
    let upper = Tensor::ones([4, 4], DType::F32, dev)?.triu(1)?;
    let where_ones = upper.nonzero()?;
    println!("triu(1) has {} ones at {where_ones}", where_ones.shape()[0]);
    Ok(())
}

fn indexing(dev: Device) -> genesis::Result<()> {
    println!("## Indexing");
    // x = genesis.randn(1000, 1000, device='cuda')
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    // y = x[10:20, 50:100]  -- a view, no copy
    let y = x.i(&s![10..20, 50..100])?;
    println!(
        "x[10:20, 50:100]: {:?}, shares x's storage: {}",
        y.shape(),
        y.shares_storage(&x)
    );
    // indices = genesis.tensor([1, 3, 5, 7], device='cuda'); z = x[indices]  -- a gather
    let indices = tensor!([1, 3, 5, 7], device = dev)?;
    let z = x.i(&s![@&indices])?;
    // mask = x > 0.5; w = x[mask]
    let mask = x.gt_scalar(0.5)?;
    let w = x.i(&s![@&mask])?;
    println!(
        "x[[1, 3, 5, 7]]: {:?}; x[x > 0.5]: {} elements (of 10^6)",
        z.shape(),
        w.numel()
    );

    // data = genesis.arange(0, 100, device='cuda').view(10, 10)
    let data = Tensor::arange(0.0, 100.0, 1.0, DType::I64, dev)?.view([10, 10])?;
    println!("data =\n{data}");
    // slice_basic = data[2:5, 3:7]; slice_stride = data[::2, 1::2]
    let slice_basic = data.i(&s![2..5, 3..7])?;
    let slice_stride = data.i(&s![..;2, 1..;2])?;
    println!(
        "data[2:5, 3:7]: {:?}; data[::2, 1::2]: {:?}",
        slice_basic.shape(),
        slice_stride.shape()
    );
    // row_indices = [0, 2, 4, 6]; col_indices = [1, 3, 5, 7]; data[row_indices, col_indices]
    let row_indices = tensor!([0, 2, 4, 6], device = dev)?;
    let col_indices = tensor!([1, 3, 5, 7], device = dev)?;
    let advanced = data.i(&s![@&row_indices, @&col_indices])?;
    println!("data[rows, cols] = {advanced}");
    // mask = data > 50; masked_data = data[mask]
    let masked_data = data.i(&s![@&data.gt_scalar(50)?])?;
    println!("data[data > 50] = {masked_data}");
    // mixed = data[row_indices, 2:8]
    let mixed = data.i(&s![@&row_indices, 2..8])?;
    println!("data[rows, 2:8]: {:?}", mixed.shape());

    // Writes through a view reach the tensor it views (PyTorch's `data[2:5, 3:7] = 0`).
    data.i(&s![2..5, 3..7])?.fill_(0)?;
    let host = IndexTensor::i64(&[2], vec![2, 4]);
    println!(
        "after data[2:5, 3:7] = 0: row 2 = {}, rows 2 and 4 summed = {}",
        data.i(&s![2])?,
        data.i(&s![@host])?.sum()?
    );
    Ok(())
}

fn memory_efficient(dev: Device) -> genesis::Result<()> {
    println!("## Memory-efficient operations");
    // x = genesis.randn(1000, 1000); x += 1.0  -- in place
    let mut x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    let before = x.mean()?.item::<f32>()?;
    x += 1.0;
    println!(
        "x += 1.0: mean {before:.4} -> {:.4}",
        x.mean()?.item::<f32>()?
    );
    // y = x.view(100, 10000); z = x.transpose(0, 1); w = x[::2, ::3]
    let y = x.view([100, 10000])?;
    let z = x.transpose(0, 1)?;
    let w = x.i(&s![..;2, ..;3])?;
    println!(
        "views of x: {:?}, {:?}, {:?} (all share x's storage: {})",
        y.shape(),
        z.shape(),
        w.shape(),
        y.shares_storage(&x) && z.shares_storage(&x) && w.shares_storage(&x)
    );
    Ok(())
}

fn memory_management(dev: Device) -> genesis::Result<()> {
    let Device::Cuda(n) = dev else {
        println!("## Memory management: the CUDA pool's figures, none on the CPU");
        println!(
            "memory_allocated(0) = {} without a device",
            genesis::cuda::memory_allocated(0)?
        );
        return Ok(());
    };
    println!("## Memory management");
    // print(f"allocated: {genesis.cuda.memory_allocated() / 1024**2:.1f} MB") and memory_cached
    println!(
        "allocated {:.1} MiB, cached {:.1} MiB",
        mib(genesis::cuda::memory_allocated(n)?),
        mib(genesis::cuda::memory_cached(n)?)
    );
    // x = genesis.randn(1000, 1000, device='cuda')
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    println!(
        "after randn(1000, 1000): {:.1} MiB allocated",
        mib(genesis::cuda::memory_allocated(n)?)
    );
    // snapshot = genesis.cuda.memory_snapshot(); for entry in snapshot[:3]: address, size
    let snapshot = genesis::cuda::memory_snapshot(n)?;
    for block in snapshot.segments.iter().flat_map(|s| &s.blocks).take(3) {
        println!(
            "block at {:#x}: {} bytes ({:?})",
            block.addr, block.size, block.state
        );
    }
    // del x; genesis.cuda.empty_cache()
    drop(x);
    genesis::cuda::empty_cache()?;
    println!(
        "after del x and empty_cache: {:.1} MiB allocated, {:.1} MiB cached",
        mib(genesis::cuda::memory_allocated(n)?),
        mib(genesis::cuda::memory_cached(n)?)
    );

    println!("## Asynchronous work on a stream");
    // with genesis.cuda.stream(): x, y = randn(1000, 1000); z = genesis.matmul(x, y)
    let stream = genesis::cuda::Stream::new(n)?;
    let z = genesis::cuda::with_stream(&stream, || -> genesis::Result<Tensor> {
        let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
        let y = Tensor::randn([1000, 1000], DType::F32, dev)?;
        let z = x.matmul(&y)?;
        println!("the product is queued on the stream; the host goes on meanwhile");
        // genesis.cuda.synchronize()
        stream.synchronize()?;
        Ok(z)
    })?;
    println!("done: {:?}", z.shape());
    Ok(())
}

fn performance(dev: Device) -> genesis::Result<()> {
    println!("## Access patterns");
    // def inefficient_access(): result[i] = x[i, ::10].sum() for each of 1000 rows
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    let rows = if dev == Device::Cpu { 1000 } else { 200 };
    let result = Tensor::zeros([rows], DType::F32, dev)?;
    sync(dev)?;
    let t = Instant::now();
    for i in 0..rows {
        result.i(&s![i])?.copy_(&x.i(&s![i, ..;10])?.sum()?)?;
    }
    sync(dev)?;
    let time1 = t.elapsed().as_secs_f64();
    // def efficient_access(): indices = arange(0, 1000, 10); x[:, indices].sum(dim=1)
    let t = Instant::now();
    let indices = Tensor::arange(0.0, 1000.0, 10.0, DType::I64, dev)?;
    let result2 = x.i(&s![.., @&indices])?.sum_dim(1, false)?;
    sync(dev)?;
    let time2 = t.elapsed().as_secs_f64();
    let agree = result
        .sub(&result2.i(&s![..rows])?)?
        .abs()?
        .max()?
        .item::<f32>()?;
    println!(
        "row by row ({rows} rows): {time1:.4} s; all rows at once: {time2:.4} s; speed-up {:.1}x; largest difference {agree:.2e}",
        time1 / time2
    );

    println!("## Batching");
    // matrices = [genesis.randn(100, 100) for _ in range(10)]
    let matrices: Vec<Tensor> = (0..10)
        .map(|_| Tensor::randn([100, 100], DType::F32, dev))
        .collect::<genesis::Result<_>>()?;
    sync(dev)?;
    let t = Instant::now();
    // results1 = [matrix.exp().sum() for matrix in matrices]
    let results1: Vec<f32> = matrices
        .iter()
        .map(|m| m.exp()?.sum()?.item::<f32>())
        .collect::<genesis::Result<_>>()?;
    let time1 = t.elapsed().as_secs_f64();
    let t = Instant::now();
    // batched = genesis.stack(matrices, dim=0); results2 = batched.exp().sum(dim=(1, 2))
    let refs: Vec<&Tensor> = matrices.iter().collect();
    let results2 = Tensor::stack(&refs, 0)?
        .exp()?
        .sum_dim([1, 2], false)?
        .to_vec::<f32>()?;
    let time2 = t.elapsed().as_secs_f64();
    let worst = results1
        .iter()
        .zip(&results2)
        .map(|(a, b)| ((a - b) / a).abs())
        .fold(0.0f32, f32::max);
    println!(
        "one by one {time1:.5} s, batched {time2:.5} s ({:.1}x); largest relative difference {worst:.1e}",
        time1 / time2
    );

    println!("## In-place operations");
    // y = x + 1.0; z = y * 2.0; w = z.exp()  -- three new tensors
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    let start = allocated(dev)?;
    let y = (&x + 1.0)?;
    let z = (&y * 2.0)?;
    let w = z.exp()?;
    println!(
        "out of place: {:.1} MiB more allocated",
        mib(allocated(dev)? - start)
    );
    drop((y, z, w));
    // x += 1.0; x *= 2.0; x.exp_()  -- the same tensor
    let mut x = x;
    let start = allocated(dev)?;
    x += 1.0;
    x *= 2.0;
    x.exp_()?;
    println!(
        "in place: {:.1} MiB more allocated",
        mib(allocated(dev)?.saturating_sub(start))
    );
    Ok(())
}

fn diagnostics(dev: Device) -> genesis::Result<()> {
    println!("## Leak check");
    // for i in range(100): x = randn(100, 100); y = x.matmul(x); del x, y
    if let Device::Cuda(n) = dev {
        genesis::cuda::empty_cache()?;
        let initial = genesis::cuda::memory_allocated(n)?;
        for _ in 0..100 {
            let x = Tensor::randn([100, 100], DType::F32, dev)?;
            let y = x.matmul(&x)?;
            drop((x, y));
        }
        genesis::cuda::empty_cache()?;
        let last = genesis::cuda::memory_allocated(n)?;
        if last > initial {
            println!("possible leak: {:.1} MiB", mib(last - initial));
        } else {
            println!("no leak: {initial} bytes allocated before and {last} after");
        }
    } else {
        println!("(the pool's figures exist on CUDA devices only)");
    }

    println!("## Errors");
    // x = randn(1000, 1000); y = randn(500, 500); z = genesis.matmul(x, y)
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    let y = Tensor::randn([500, 500], DType::F32, dev)?;
    match x.matmul(&y) {
        Ok(_) => unreachable!("a [1000, 1000] @ [500, 500] product has no shape"),
        Err(e) => println!("matmul error: {e}"),
    }
    // genesis.cuda.get_device_name(), get_device_capability(), get_device_properties()
    if let Device::Cuda(n) = dev {
        let props = genesis::cuda::get_device_properties(n)?;
        println!(
            "CUDA device {}: compute capability {:?}, {:.1} GiB",
            genesis::cuda::get_device_name(n)?,
            genesis::cuda::get_device_capability(n)?,
            props.total_memory as f64 / (1u64 << 30) as f64
        );
    } else {
        println!("CUDA available: {}", genesis::cuda::is_available());
    }

    println!("## Matmul timing (the seed compares with PyTorch: see docs/benchmarks.md)");
    let sizes: &[usize] = if dev == Device::Cpu {
        &[100, 200]
    } else {
        &[100, 500, 1000, 2000]
    };
    for &size in sizes {
        let a = Tensor::randn([size, size], DType::F32, dev)?;
        let b = Tensor::randn([size, size], DType::F32, dev)?;
        let _warm = a.matmul(&b)?;
        sync(dev)?;
        let t = Instant::now();
        for _ in 0..10 {
            let _c = a.matmul(&b)?;
        }
        sync(dev)?;
        let ms = t.elapsed().as_secs_f64() * 100.0;
        println!(
            "{size}x{size}: {ms:.4} ms a product, {:.1} GFLOP/s",
            2.0 * (size as f64).powi(3) / (ms * 1e6)
        );
    }

    println!("## Good practice");
    // with genesis.cuda.device(0): x = randn(1000, 1000); x += 1.0; x *= 0.5; del x
    let mut x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    x += 1.0;
    x *= 0.5;
    drop(x);
    // result = genesis.relu(x).sum(dim=1).mean()  -- vectorised, no Python loop
    let x = Tensor::randn([1000, 1000], DType::F32, dev)?;
    let result = x.relu()?.sum_dim(1, false)?.mean()?;
    println!(
        "relu(x).sum(dim=1).mean() = {:.3} (about 1000 / sqrt(2 pi) = 398.9)",
        result.item::<f32>()?
    );
    Ok(())
}

fn tour(dev: Device) -> genesis::Result<()> {
    println!("# Genesis tour on {dev}");
    basics(dev)?;
    activations_and_selection(dev)?;
    indexing(dev)?;
    memory_efficient(dev)?;
    memory_management(dev)?;
    performance(dev)?;
    diagnostics(dev)
}

fn main() -> genesis::Result<()> {
    genesis::manual_seed(0);
    tour(Device::Cpu)?;
    if genesis::cuda::is_available() {
        tour(Device::Cuda(0))?;
    } else if cfg!(feature = "cuda") {
        println!("(no CUDA device found: the GPU tour is skipped)");
    } else {
        println!("(built without the `cuda` feature: rebuild with `--features cuda` for the GPU)");
    }
    Ok(())
}
