//! The digits classifiers of the `mlp_digits` and `cnn_digits` examples and their tests: a
//! two-layer perceptron or a small convolutional network trained with Adam on mini-batches,
//! then scored on held-out images.

use genesis::{ConvOptions, DType, Device, Generator, PoolOptions, Result, no_grad};

use crate::data::DataLoader;
use crate::optim::{Adam, Optimizer};
use crate::{Conv2d, Flatten, Gelu, Linear, MaxPool2d, Module, Relu, Sequential, datasets, loss};

/// What [`train_digits`] reports.
#[derive(Debug, Clone)]
pub struct DigitsRun {
    /// The training loss of each step.
    pub losses: Vec<f32>,
    /// The fraction of held-out images classified correctly.
    pub test_accuracy: f64,
    /// Training images.
    pub train_size: usize,
    /// Held-out images.
    pub test_size: usize,
}

impl DigitsRun {
    /// Eleven of the run's losses (every tenth of the run, and the last) and the held-out
    /// accuracy, as the digits examples print them.
    pub fn summary(&self, device: Device, seconds: f64) -> String {
        let steps = self.losses.len();
        let mut out = String::new();
        for (i, l) in self.losses.iter().enumerate() {
            if i % (steps / 10).max(1) == 0 || i + 1 == steps {
                out += &format!("step {i:4}  loss {l:.4}\n");
            }
        }
        out += &format!(
            "{} training images, {} held out: test accuracy {:.2} % ({device:?}, {seconds:.2} s)",
            self.train_size,
            self.test_size,
            self.test_accuracy * 100.0,
        );
        out
    }
}

/// Trains a 64-128-10 perceptron (GELU) on scikit-learn's digits on `device`: pixels scaled to
/// `[0, 1]`, a seeded shuffle keeping 297 images aside, `epochs` passes of shuffled batches of
/// 64 ([`DataLoader`]) with Adam (learning rate 3e-3), everything drawn from `seed`; returns
/// the losses and the held-out accuracy.
pub fn train_digits(device: Device, epochs: usize, seed: u64) -> Result<DigitsRun> {
    train_on_digits(device, epochs, seed, &[64], |g| {
        Ok(Sequential::new()
            .add(Linear::new(64, 128, true, g, device)?)
            .add(Gelu::default())
            .add(Linear::new(128, 10, true, g, device)?))
    })
}

/// [`train_digits`] with a small convolutional network over the 8×8 images: two 3×3
/// convolutions (16 and 32 channels, zero padding 1), each followed by ReLU and 2×2 max
/// pooling, then a linear layer from the 32×2×2 features to the 10 classes.
pub fn train_digits_cnn(device: Device, epochs: usize, seed: u64) -> Result<DigitsRun> {
    train_on_digits(device, epochs, seed, &[1, 8, 8], |g| {
        let same = ConvOptions::new().padding(1);
        Ok(Sequential::new()
            .add(Conv2d::new(1, 16, 3, same, true, g, device)?)
            .add(Relu)
            .add(MaxPool2d::new(2, PoolOptions::new()))
            .add(Conv2d::new(16, 32, 3, same, true, g, device)?)
            .add(Relu)
            .add(MaxPool2d::new(2, PoolOptions::new()))
            .add(Flatten::default())
            .add(Linear::new(128, 10, true, g, device)?))
    })
}

/// The training of [`train_digits`] for the model `build` draws, fed images of `shape` each.
fn train_on_digits(
    device: Device,
    epochs: usize,
    seed: u64,
    shape: &[usize],
    build: impl FnOnce(&Generator) -> Result<Sequential>,
) -> Result<DigitsRun> {
    let g = Generator::new(seed);
    let (images, labels) = datasets::digits()?;
    let n = labels.numel();
    let order = g.rand([n], DType::F32, Device::Cpu)?.argsort(0, false)?;
    let mut dims = vec![n];
    dims.extend_from_slice(shape);
    let x = images
        .index_select(0, &order)?
        .div(16.0)?
        .reshape(dims.as_slice())?
        .to(device)?;
    let y = labels.index_select(0, &order)?.to(device)?;
    let test = 297;
    let train = n - test;
    let model = build(&g)?;
    let mut opt = Adam::new(model.parameters(), 3e-3);
    let batch = 64;
    // One loss a step is kept: refuse up front a run whose losses the host cannot hold.
    reserve_losses(epochs.checked_mul(train.div_ceil(batch)))?;
    let mut losses = Vec::new();
    let (xtrain, ytrain) = (x.narrow(0, 0, train)?, y.narrow(0, 0, train)?);
    let loader = DataLoader::new(&[&xtrain, &ytrain], batch)?.shuffle(&g);
    for _ in 0..epochs {
        for b in loader.epoch()? {
            let b = b?;
            opt.zero_grad();
            let l = loss::cross_entropy(&model.forward(&b[0])?, &b[1])?;
            l.backward()?;
            opt.step()?;
            losses.push(l.item::<f32>()?);
        }
    }
    let test_accuracy = no_grad(|| -> Result<f64> {
        let xt = x.narrow(0, train as isize, test)?;
        let yt = y.narrow(0, train as isize, test)?;
        let pred = model.forward(&xt)?.argmax_dim(1, false)?;
        let right = pred.eq(&yt)?.to_dtype(DType::F64)?.sum()?.item::<f64>()?;
        Ok(right / test as f64)
    })?;
    Ok(DigitsRun {
        losses,
        test_accuracy,
        train_size: train,
        test_size: test,
    })
}

/// The model of the PyTorch comparison: 64-128-10 (GELU), its parameters drawn from `seed`.
pub fn digits_mlp(seed: u64, device: Device) -> Result<Sequential> {
    let g = Generator::new(seed);
    Ok(Sequential::new()
        .add(Linear::new(64, 128, true, &g, device)?)
        .add(Gelu::default())
        .add(Linear::new(128, 10, true, &g, device)?))
}

/// The batch of step `step` in the comparison with PyTorch: 64 consecutive digits of the
/// file, starting at `64 * step` modulo 1,728 (pixels scaled to `[0, 1]`).
pub fn comparison_batch(
    images: &genesis::Tensor,
    labels: &genesis::Tensor,
    step: usize,
) -> Result<(genesis::Tensor, genesis::Tensor)> {
    // `64 * step` modulo 1,728 (= 64 × 27), for every step (no overflow).
    let start = 64 * (step % 27);
    Ok((
        images.narrow(0, start as isize, 64)?.div(16.0)?,
        labels.narrow(0, start as isize, 64)?,
    ))
}

/// The losses of `steps` Adam steps (learning rate 1e-3) of [`digits_mlp`] on the
/// [`comparison_batch`]es, on `device`: what `tests/torch_mlp.py` computes with PyTorch from
/// the same initial parameters.
pub fn comparison_losses(seed: u64, steps: usize, device: Device) -> Result<Vec<f32>> {
    let model = digits_mlp(seed, device)?;
    let (images, labels) = datasets::digits()?;
    let (images, labels) = (images.to(device)?, labels.to(device)?);
    let mut opt = Adam::new(model.parameters(), 1e-3);
    reserve_losses(Some(steps))?;
    let mut losses = Vec::new();
    for step in 0..steps {
        let (xb, yb) = comparison_batch(&images, &labels, step)?;
        opt.zero_grad();
        let l = loss::cross_entropy(&model.forward(&xb)?, &yb)?;
        l.backward()?;
        opt.step()?;
        losses.push(l.item::<f32>()?);
    }
    Ok(losses)
}

/// The tiny GPT-2 of the CPU comparison with PyTorch (`tests/torch_gpt2.py`): byte-level
/// vocabulary (256), 32 positions, 2 layers, 2 heads, width 32.
pub fn gpt2_tiny_config() -> crate::gpt2::Gpt2Config {
    crate::gpt2::Gpt2Config {
        block_size: 32,
        vocab_size: 256,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
    }
}

/// Batch `step` of byte tokens from `text`: `b` windows of `t` bytes, window `i` starting at
/// `stride * (b * step + i)` modulo `text.len() - t - 1`, and the same shifted by one as the
/// targets (int64 `[b, t]` each). The PyTorch twins draw the same windows.
pub fn window_batch(
    text: &[u8],
    step: usize,
    b: usize,
    t: usize,
    stride: usize,
    device: Device,
) -> Result<(genesis::Tensor, genesis::Tensor)> {
    let bad = |reason: String| genesis::Error::InvalidArgument {
        op: "window_batch",
        reason,
    };
    let span = t
        .checked_add(1)
        .and_then(|w| text.len().checked_sub(w))
        .filter(|&s| s > 0)
        .ok_or_else(|| bad(format!("{} bytes of text for windows of {t}", text.len())))?;
    let n = b
        .checked_mul(t)
        .ok_or_else(|| bad(format!("{b} windows of {t} tokens: the count overflows")))?;
    // Two int64 arrays of `n` tokens.
    let bytes = n.saturating_mul(2 * size_of::<i64>());
    genesis_storage::check_host_bytes(bytes)?;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for v in [&mut x, &mut y] {
        v.try_reserve_exact(n)
            .map_err(|_| genesis_storage::Error::HostOutOfMemory { bytes })?;
    }
    // Windows of no tokens hold nothing: `b` of them need no walk.
    if t > 0 {
        // `stride * (b * step + i)` modulo `span`, computed without overflow (the same start
        // for every argument whose product fits).
        let span128 = span as u128;
        let (stride, first) = (stride as u128 % span128, b as u128 * step as u128);
        for i in 0..b {
            let k = (first + i as u128) % span128;
            let start = (stride * k % span128) as usize;
            x.extend(text[start..start + t].iter().map(|&c| i64::from(c)));
            y.extend(text[start + 1..start + t + 1].iter().map(|&c| i64::from(c)));
        }
    }
    Ok((
        genesis::Tensor::from_slice(&x, [b, t], device)?,
        genesis::Tensor::from_slice(&y, [b, t], device)?,
    ))
}

/// The token batch of `step` for the tiny GPT-2: [`window_batch`] of 4 windows of 32 bytes,
/// stride 37.
pub fn gpt2_tiny_batch(
    text: &[u8],
    step: usize,
    device: Device,
) -> Result<(genesis::Tensor, genesis::Tensor)> {
    window_batch(text, step, 4, 32, 37, device)
}

/// Refuses a run of `steps` steps (`None`: more than `usize` counts) whose losses, one `f32`
/// a step, the host cannot hold, before it starts ([`genesis::Error::OutOfMemory`]), instead
/// of failing after hours, or at once with a panic for a count that overflows.
fn reserve_losses(steps: Option<usize>) -> Result<()> {
    let bytes = steps.map_or(usize::MAX, |n| n.saturating_mul(size_of::<f32>()));
    genesis_storage::check_host_bytes(bytes)?;
    Ok(())
}

/// The bytes of every `*.py` file directly in `dir`, in the order of their names: text that
/// is on every machine (the Python standard library's sources) for byte-level training.
pub fn python_sources(dir: &std::path::Path) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| genesis::Error::InvalidArgument {
        op: "python_sources",
        reason: format!("{}: {e}", dir.display()),
    };
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py") && p.is_file())
        .collect();
    files.sort();
    let mut text = Vec::new();
    for f in files {
        text.extend(std::fs::read(&f).map_err(io)?);
    }
    Ok(text)
}

/// The corpus of the tiny GPT-2.
pub fn gpt2_tiny_text() -> &'static [u8] {
    include_bytes!("../data/corpus.txt")
}

/// The losses of `steps` training steps of the tiny GPT-2 (seed 0) on `device`: AdamW
/// (learning rate 1e-3, betas 0.9 and 0.95, weight decay 0.1 on every parameter), the
/// gradients clipped to a global norm of 1 — what `tests/torch_gpt2.py` does with PyTorch from
/// the same initial parameters.
pub fn gpt2_tiny_losses(steps: usize, device: Device) -> Result<Vec<f32>> {
    gpt2_tiny_losses_with(steps, device, None)
}

/// [`gpt2_tiny_losses`] with the forward pass (and the loss) under
/// [`genesis::autograd::autocast`] to `autocast` when given: mixed precision with float32
/// master weights and optimiser state.
pub fn gpt2_tiny_losses_with(
    steps: usize,
    device: Device,
    autocast: Option<DType>,
) -> Result<Vec<f32>> {
    let model = crate::gpt2::Gpt2::new(gpt2_tiny_config(), &Generator::new(0), device)?;
    let mut opt = Adam::adamw(model.parameters(), 1e-3);
    opt.betas = (0.9, 0.95);
    opt.weight_decay = 0.1;
    reserve_losses(Some(steps))?;
    let mut losses = Vec::new();
    for step in 0..steps {
        let (x, y) = gpt2_tiny_batch(gpt2_tiny_text(), step, device)?;
        opt.zero_grad();
        let l = match autocast {
            Some(d) => genesis::autograd::autocast(d, || model.loss(&x, &y))?,
            None => model.loss(&x, &y)?,
        };
        l.backward()?;
        crate::optim::clip_grad_norm_(opt.params(), 1.0)?;
        opt.step()?;
        losses.push(l.item::<f32>()?);
    }
    Ok(losses)
}
