//! A tour of the GPU memory tools: statistics, the allocation history and its timeline
//! picture, a leak check, a snapshot for PyTorch's memory viewer.
//!
//! ```text
//! cargo run --example memory_tour --features cuda     # on a machine with a GPU
//! ```
//! It writes `memory_timeline.svg` and `memory_snapshot.pickle` into the current directory.

#[cfg(not(feature = "cuda"))]
fn main() {
    println!(
        "memory_tour needs the `cuda` feature and a GPU: cargo run --example memory_tour --features cuda"
    );
}

#[cfg(feature = "cuda")]
fn main() -> genesis::Result<()> {
    use genesis::{DType, Device, Tensor};

    if !genesis::cuda::is_available() {
        println!("memory_tour: no CUDA device found");
        return Ok(());
    }
    let dev = Device::Cuda(0);
    genesis::cuda::record_memory_history(0, 10_000)?;
    let (scope, allocator) = genesis::cuda::leak_scope(0)?;

    // A small "training step": activations appear, are used, and go away.
    let weights = Tensor::zeros([1024, 1024], DType::F32, dev)?;
    let mut kept = Vec::new();
    for step in 0..4 {
        let activations: Vec<Tensor> = (0..8)
            .map(|i| Tensor::full([256 * (i + 1), 1024], step as f32, dev))
            .collect::<genesis::Result<_>>()?;
        let summed = activations[0].add(&activations[0])?;
        if step == 3 {
            kept.push(summed); // a "leak": kept past the step
        }
    }
    println!(
        "after 4 steps: {} bytes allocated, {} reserved, peak {}",
        genesis::cuda::memory_allocated(0)?,
        genesis::cuda::memory_reserved(0)?,
        genesis::cuda::max_memory_allocated(0)?
    );
    println!("{}", genesis::cuda::memory_summary(0)?);

    let report = scope.check(allocator);
    println!("leak check (weights and the kept tensor were allocated inside the scope):\n{report}");

    let history = genesis::cuda::take_memory_history(0)?.expect("recording was on");
    println!("{}", history.summary());
    std::fs::write("memory_timeline.svg", history.timeline_svg()).map_err(|e| {
        genesis::Error::InvalidArgument {
            op: "memory_tour",
            reason: e.to_string(),
        }
    })?;
    std::fs::write("memory_snapshot.pickle", allocator.pytorch_snapshot(0)).map_err(|e| {
        genesis::Error::InvalidArgument {
            op: "memory_tour",
            reason: e.to_string(),
        }
    })?;
    println!(
        "wrote memory_timeline.svg and memory_snapshot.pickle (open it at pytorch.org/memory_viz)"
    );

    drop((weights, kept));
    genesis::cuda::empty_cache()?;
    println!(
        "after empty_cache: {} bytes reserved",
        genesis::cuda::memory_reserved(0)?
    );
    Ok(())
}
