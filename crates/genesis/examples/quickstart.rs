//! A short tour of Genesis on the CPU and (when built with `--features cuda` on a machine with a
//! GPU) on the GPU: creation, arithmetic with broadcasting, in-place ops, views and indexing,
//! seeded random numbers, matmul, reductions, comparisons and `where`, `_out` forms, a
//! gradient by autograd, typed errors, and the GPU memory statistics before and after, with a
//! snapshot.
//!
//! ```text
//! cargo run --example quickstart                   # CPU
//! cargo run --example quickstart --features cuda   # CPU, then GPU 0 if there is one
//! ```

use genesis::{DType, Device, Generator, IndexTensor, Tensor, bf16, s};

fn tour(device: Device) -> genesis::Result<()> {
    println!("--- on {device} ---");
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], device)?;
    let b = Tensor::full([2, 3], 0.5f32, device)?;
    println!("a     = {a}");
    println!("b     = {b}");
    let c = (&a + &b)?;
    println!("a + b = {c}");
    assert_eq!(c.to_vec::<f32>()?, vec![1.5, 2.5, 3.5, 4.5, 5.5, 6.5]);

    // Broadcasting like NumPy: a [3] row against a [2, 3] matrix, scalars too.
    let row = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3], device)?;
    let scaled = ((&a * &row)? / 2.0)?;
    println!("a * [10, 20, 30] / 2 = {scaled}");
    assert_eq!(
        scaled.to_vec::<f32>()?,
        vec![5.0, 20.0, 45.0, 20.0, 50.0, 90.0]
    );
    println!(
        "maximum(a, 3.5) = {}",
        a.maximum(&Tensor::full([1], 3.5f32, device)?)?
    );
    // In place: writes into the tensor's storage, allocating nothing. `deep_clone` is PyTorch's
    // `clone()` (a copy); Rust's `Clone` gives another handle to the same storage, as a view.
    let mut acc = a.deep_clone()?;
    acc.add_(&b)?;
    acc *= &b; // the operator form (it panics on bad input, where mul_ returns the error)
    acc.exp_()?;
    println!("exp((a + b) * b), in place = {acc}");

    let h = Tensor::from_slice(&[bf16::from_f32(1.0), bf16::from_f32(0.25)], [2], device)?;
    let h2 = h.add(&h)?;
    println!("bf16: {h} + itself = {h2}");
    let big = Tensor::full([1024, 1024], 7i64, device)?;
    let big2 = big.add(&big)?;
    println!(
        "a {:?} {} tensor of {} elements, summed with itself: first = {}",
        big2.shape(),
        big2.dtype(),
        big2.numel(),
        big2.to_vec::<i64>()?[0]
    );

    // Views share memory; indexing follows NumPy.
    let m = Tensor::arange(0.0, 20.0, 1.0, DType::F32, device)?.reshape([4, 5])?;
    println!(
        "m = arange(20).reshape(4, 5); m[1:3, ::2] = {} (a view: {})",
        m.i(&s![1..3, ..;2])?,
        m.i(&s![1..3, ..;2])?.shares_storage(&m)
    );
    println!(
        "m[[3, 0]] = {}",
        m.i(&s![@IndexTensor::i64(&[2], vec![3, 0])])?
    );
    // Index tensors and masks on the tensor's device stay there (checked there, too).
    let rows = Tensor::from_slice(&[-1i64, 1], [2], device)?;
    println!("m[[-1, 1], 0] = {}", m.i(&s![@&rows, 0])?);
    println!("m[m > 15] = {}", m.i(&s![@&m.gt_scalar(15.0)?])?);
    println!(
        "m.t() is contiguous: {}, m.t().contiguous() is: {}",
        m.t()?.is_contiguous(),
        m.t()?.contiguous()?.is_contiguous()
    );
    let z = Tensor::zeros([3, 4], DType::F32, device)?;
    z.index_put_scalar_(&s![.., 1..3], 5.0)?;
    println!("z[:, 1:3] = 5 -> {z}");

    // Seeded random numbers: the same seed gives the same values on every device.
    let g = Generator::new(2024);
    let x = g.randn([4, 8], DType::F32, device)?;
    let w = g.rand([8, 3], DType::F32, device)?;
    let replay = Generator::new(2024).randn([4, 8], DType::F32, Device::Cpu)?;
    assert_eq!(x.to_vec::<f32>()?, replay.to_vec::<f32>()?);
    // Matrix products, reductions, comparisons and `where`.
    let y = x.matmul(&w)?; // [4, 8] @ [8, 3]
    println!("randn(4, 8) @ rand(8, 3) = {y}");
    println!(
        "sum = {}, mean over dim 1 = {}",
        y.sum()?,
        y.mean_dim([1], false)?
    );
    let (best, at) = y.max_dim(1, false)?;
    println!("max over dim 1 = {best} at {at}");
    let positive = y.gt_scalar(0.0)?;
    let relu = Tensor::where_cond(&positive, &y, &Tensor::zeros((), DType::F32, device)?)?;
    println!("where(y > 0, y, 0) = {relu}");
    let mut out = Tensor::zeros([4, 3], DType::F32, device)?;
    y.mul_out(&relu, &mut out)?; // writes into `out`, allocating nothing
    println!("y * relu(y) into a given tensor = {out}");

    // Autograd: a leaf that requires grad, a loss, its gradient (PyTorch's model), and a
    // step of gradient descent under no_grad.
    let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0], [3], device)?.requires_grad_(true)?;
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], device)?;
    let loss = w.mul(&x)?.sum()?.sub(4.0)?.square()?; // (w · x - 4)²
    loss.backward()?;
    println!(
        "loss {} (grad_fn {:?}), d loss / d w = {}",
        loss.item::<f32>()?,
        loss.grad_fn_name().unwrap_or("-"),
        w.grad().expect("a gradient")
    );
    genesis::no_grad(|| w.sub_(&w.grad().expect("a gradient").mul(0.01)?))?;
    println!("w after a step of 0.01 = {w}");

    // Errors are values, not panics.
    println!(
        "matmul of [1000, 1000] by [500, 500] -> {}",
        Tensor::zeros([1000, 1000], DType::F32, device)?
            .matmul(&Tensor::zeros([500, 500], DType::F32, device)?)
            .unwrap_err()
    );
    let wrong_shape = Tensor::full([3, 2], 1.0f32, device)?;
    println!("shape mismatch -> {}", a.add(&wrong_shape).unwrap_err());
    // Dtypes promote as in PyTorch (float32 + int32 is float32), but a float result does not
    // go into an integer tensor in place.
    let ints = Tensor::full([2, 3], 1i32, device)?;
    println!("float32 + int32 -> {}", a.add(&ints)?.dtype());
    println!("int32 += 0.5 -> {}", ints.add_(0.5).unwrap_err());
    assert_eq!(c.dtype(), DType::F32);
    Ok(())
}

fn main() -> genesis::Result<()> {
    tour(Device::Cpu)?;
    // The memory API exists on every build: without CUDA it reports zeros.
    let before = genesis::cuda::memory_allocated(0)?;
    if genesis::cuda::is_available() {
        println!(
            "CUDA: {} device(s); device 0 is {} (compute capability {:?})",
            genesis::cuda::device_count(),
            genesis::cuda::get_device_name(0)?,
            genesis::cuda::get_device_capability(0)?
        );
        tour(Device::Cuda(0))?;
        // The tour's tensors are gone: their memory is back in the pool's cache.
        println!(
            "cuda:0 memory before the tour: {before} bytes allocated; after: {} allocated, {} reserved (cached for reuse), peak {}",
            genesis::cuda::memory_allocated(0)?,
            genesis::cuda::memory_reserved(0)?,
            genesis::cuda::max_memory_allocated(0)?
        );
        let kept = Tensor::zeros([256, 1024], DType::F32, Device::Cuda(0))?;
        let snap = genesis::cuda::memory_snapshot(0)?;
        println!(
            "snapshot with a 1 MiB tensor alive: {} segment(s), {} block(s); as JSON {} bytes (memory_tour writes PyTorch's format)",
            snap.segments.len(),
            snap.segments.iter().map(|s| s.blocks.len()).sum::<usize>(),
            snap.to_json().len()
        );
        drop(kept);
        let cpu = Tensor::full([2, 3], 1.0f32, Device::Cpu)?;
        let gpu = Tensor::full([2, 3], 1.0f32, Device::Cuda(0))?;
        println!("device mismatch -> {}", cpu.add(&gpu).unwrap_err());
        let back = gpu.to(Device::Cpu)?;
        println!("copied back to the host: {back}");
        drop((cpu, gpu));
        println!(
            "cuda:0 memory: {} bytes allocated, {} reserved, peak {}",
            genesis::cuda::memory_allocated(0)?,
            genesis::cuda::memory_reserved(0)?,
            genesis::cuda::max_memory_allocated(0)?
        );
        // Give the allocator's cached memory back to the driver.
        genesis::cuda::empty_cache()?;
    } else {
        if cfg!(feature = "cuda") {
            println!("(no CUDA device found: the GPU part of the tour is skipped)");
        } else {
            println!(
                "(built without the `cuda` feature: rebuild with `--features cuda` for the GPU tour)"
            );
        }
        println!(
            "cuda:0 memory without CUDA: {before} bytes allocated, {} reserved",
            genesis::cuda::memory_reserved(0)?
        );
        println!(
            "asking for cuda:0 anyway -> {}",
            Tensor::full([1], 1.0f32, Device::Cuda(0)).unwrap_err()
        );
    }
    Ok(())
}
