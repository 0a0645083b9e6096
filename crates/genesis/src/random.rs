//! Seeded random tensors: `rand`, `randn`, `randint` and their `_like` forms, and sampling
//! built on them: `randperm`, `multinomial`, `bernoulli`.

use std::sync::Mutex;

use genesis_storage::{Sampler, Storage};

use crate::args::{Dims, sizes};
use crate::{DType, Device, Error, Result, Tensor};

/// A random number generator: a seed and an offset into the counter-based Philox4x32-10
/// stream of that seed. Every draw of `n` elements reads the next blocks of the stream and
/// advances the offset past them, so the values depend only on the seed and the sequence of
/// draws, never on the device: the same seed gives the same tensors on the CPU and on every
/// GPU (bit for bit, normals included).
///
/// [`Tensor::rand`] and friends use a global generator that [`manual_seed`] resets; a
/// `Generator` of your own gives an independent stream.
///
/// ```
/// use genesis::{DType, Device, Generator, Tensor};
/// # fn main() -> genesis::Result<()> {
/// let g = Generator::new(42);
/// let a = g.rand(&[2, 3], DType::F32, Device::Cpu)?;
/// let h = Generator::new(42);
/// assert_eq!(a.to_vec::<f32>()?, h.rand(&[2, 3], DType::F32, Device::Cpu)?.to_vec::<f32>()?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Generator {
    state: Mutex<(u64, u64)>,
}

/// The seed of the global generator at start-up (PyTorch's default seed).
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

static GLOBAL: Generator = Generator::new(DEFAULT_SEED);

/// Resets the global generator to `seed` at offset 0 (PyTorch's `torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    GLOBAL.set_state(seed, 0);
}

/// The global generator used by [`Tensor::rand`], [`Tensor::randn`] and [`Tensor::randint`].
pub fn default_generator() -> &'static Generator {
    &GLOBAL
}

impl Generator {
    /// A generator at the start of `seed`'s stream.
    pub const fn new(seed: u64) -> Generator {
        Generator {
            state: Mutex::new((seed, 0)),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.lock().0
    }

    /// How many Philox blocks of the stream have been drawn.
    pub fn offset(&self) -> u64 {
        self.lock().1
    }

    /// Moves to `(seed, offset)`: with a saved [`Generator::seed`] and [`Generator::offset`],
    /// replays the draws made from there.
    pub fn set_state(&self, seed: u64, offset: u64) {
        *self.lock() = (seed, offset);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reserves the blocks of a draw and returns `(seed, first block)`.
    fn reserve(&self, sampler: Sampler, n: usize, dtype: DType) -> (u64, u64) {
        let mut s = self.lock();
        let at = s.1;
        s.1 = s.1.wrapping_add(Storage::random_blocks(sampler, n, dtype));
        (s.0, at)
    }

    fn draw(
        &self,
        op: &'static str,
        sampler: Sampler,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let n = crate::tensor::numel_of(op, shape)?;
        if !dtype.is_float() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{dtype} is not a float dtype (f32, f16, bf16, f64)"),
            });
        }
        let (seed, offset) = self.reserve(sampler, n, dtype);
        Tensor::from_storage(
            Storage::random(sampler, n, dtype, device, seed, offset)?,
            shape,
        )
    }

    /// Uniform values in `[0, 1)` (float dtypes): each the top `p` bits of a random word times
    /// `2^-p`, `p` the dtype's significand width, so every value is exact and 1 never occurs.
    #[track_caller]
    pub fn rand(&self, shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        self.draw(
            "rand",
            Sampler::Uniform,
            &sizes("rand", &shape)?,
            dtype,
            device,
        )
    }

    /// Standard normal values (float dtypes; Box-Muller in f64, rounded once).
    #[track_caller]
    pub fn randn(&self, shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        self.draw(
            "randn",
            Sampler::Normal,
            &sizes("randn", &shape)?,
            dtype,
            device,
        )
    }

    /// Integers uniform in `[low, high)`. `dtype` may be `I32` or `I64` (drawn directly), `U8`,
    /// `I8` or `I16` (drawn as `I32` and converted) or a float dtype (drawn as `I64`
    /// and converted); `low < high`, `low` and `high - 1` representable in `dtype` (a float
    /// range beyond the dtype's finite values is an error, not infinities).
    #[track_caller]
    pub fn randint(
        &self,
        low: i64,
        high: i64,
        shape: impl Dims,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let op = "randint";
        let shape = &sizes(op, &shape)?[..];
        if low >= high {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("the range [{low}, {high}) is empty"),
            });
        }
        // Both ends of the range must be values of the dtype (exactly, as any scalar: no
        // saturation, no infinity), as PyTorch checks `from` and `to - 1`.
        let (lo, hi) = match dtype {
            DType::Bool => {
                return Err(Error::InvalidArgument {
                    op,
                    reason: "bool is not an integer or float dtype".into(),
                });
            }
            DType::U8 => (0, i64::from(u8::MAX)),
            DType::I8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
            DType::I16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
            DType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
            _ => (i64::MIN, i64::MAX),
        };
        for v in [low, high - 1] {
            let float_overflows =
                dtype.is_float() && genesis_storage::Storage::scalar(v as f64, dtype).is_err();
            if v < lo || v > hi || float_overflows {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("[{low}, {high}) does not fit in {dtype}"),
                });
            }
        }
        // I32 and I64 are drawn directly; the narrower integer dtypes and bool through I32,
        // the float dtypes through I64 (the range fits, checked above).
        let direct = match dtype {
            DType::I32 | DType::U8 | DType::I8 | DType::I16 => DType::I32,
            _ => DType::I64,
        };
        let n = crate::tensor::numel_of(op, shape)?;
        let sampler = Sampler::Int {
            low,
            range: high.wrapping_sub(low) as u64,
        };
        let (seed, offset) = self.reserve(sampler, n, direct);
        let t = Tensor::from_storage(
            Storage::random(sampler, n, direct, device, seed, offset)?,
            shape,
        )?;
        if direct == dtype {
            Ok(t)
        } else {
            t.to_dtype(dtype)
        }
    }
}

impl Generator {
    /// A random permutation of `0..n` (PyTorch's `randperm`) in `dtype` (an integer dtype that
    /// holds `n - 1`, or a float one that holds it exactly) on `device`: the order that sorts
    /// `n` uniform f64 keys (53 random bits each; a stable sort, so the rare tie keeps index
    /// order).
    #[track_caller]
    pub fn randperm(&self, n: usize, dtype: DType, device: Device) -> Result<Tensor> {
        let op = "randperm";
        if n > 0 {
            crate::args::checked_scalar(op, dtype, crate::ScalarValue::Int(n as i128 - 1))?;
        }
        if dtype == DType::Bool && n > 2 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{n} values do not fit bool"),
            });
        }
        let keys = self.rand([n], DType::F64, device)?;
        keys.argsort(0, false)?.to_dtype(dtype)
    }

    /// `num_samples` category indices (int64) drawn from the weights `probs` (PyTorch's
    /// `multinomial`): a vector of weights, or a matrix of one distribution a row (the result
    /// then `[rows, num_samples]`). Weights need not sum to 1 but must be finite, non-negative
    /// and not all zero in a row; a zero weight is never drawn. Without `replacement` each
    /// category is drawn at most once (`num_samples` at most the row's non-zero weights).
    /// Exact sampling by the Gumbel trick: the largest `log p - log(-log u)` over the
    /// categories (its top `num_samples` without replacement) for uniform `u`, in f64; one
    /// synchronisation checks the weights. Memory `rows x num_samples x categories` f64 with
    /// replacement.
    #[track_caller]
    pub fn multinomial(
        &self,
        probs: &Tensor,
        num_samples: usize,
        replacement: bool,
    ) -> Result<Tensor> {
        let op = "multinomial";
        let bad = |reason: String| Error::InvalidArgument { op, reason };
        if !matches!(probs.dim(), 1 | 2) {
            return Err(bad(format!(
                "probabilities must be 1-D or 2-D, got shape {:?}",
                probs.shape()
            )));
        }
        if !probs.dtype().is_float() {
            return Err(bad(format!(
                "probabilities must be floats, not {}",
                probs.dtype()
            )));
        }
        if num_samples == 0 {
            return Err(bad("cannot draw 0 samples".into()));
        }
        let p = probs.to_dtype(DType::F64)?;
        let p2 = if p.dim() == 1 { p.unsqueeze(0)? } else { p };
        let (rows, cats) = (p2.shape()[0], p2.shape()[1]);
        if cats == 0 {
            return Err(bad("no categories to draw from".into()));
        }
        if !replacement && num_samples > cats {
            return Err(bad(format!(
                "cannot draw {num_samples} samples from {cats} categories without replacement"
            )));
        }
        if rows > 0 {
            // Non-negative and finite, some weight in every row, enough non-zero ones.
            let negative = p2
                .lt_scalar(0.0)?
                .logical_or(&p2.isfinite()?.logical_not()?)?
                .any()?;
            let nonzero = p2
                .gt_scalar(0.0)?
                .to_dtype(DType::I64)?
                .sum_dim([1], false)?;
            // One read back: [any bad weight, the fewest non-zero weights of a row].
            let both = Tensor::stack(
                &[&negative.to_dtype(DType::I64)?, &nonzero.amin([0], false)?],
                0,
            )?
            .to_vec::<i64>()?;
            let least = both[1];
            if both[0] != 0 {
                return Err(bad(
                    "probabilities must be finite and non-negative (found inf, NaN or < 0)".into(),
                ));
            }
            if least == 0 {
                return Err(bad("a row's probabilities are all zero".into()));
            }
            if !replacement && (least as usize) < num_samples {
                return Err(bad(format!(
                    "a row has {least} non-zero probabilities, fewer than the {num_samples} \
                     samples to draw without replacement"
                )));
            }
        }
        let logp = p2.log()?;
        let out = if replacement {
            let u = self.rand([rows, num_samples, cats], DType::F64, p2.device())?;
            let keys = logp.unsqueeze(1)?.sub(&u.log()?.neg()?.log()?)?;
            keys.argmax_dim(2, false)?
        } else {
            let u = self.rand([rows, cats], DType::F64, p2.device())?;
            let keys = logp.sub(&u.log()?.neg()?.log()?)?;
            keys.topk(num_samples, 1, true, true)?.1
        };
        if probs.dim() == 1 {
            out.squeeze(0)
        } else {
            Ok(out)
        }
    }

    /// Zeros and ones (in `probs`' float dtype) drawn with the probabilities `probs` (PyTorch's
    /// `bernoulli`): `1` where a uniform value lies below the probability. Probabilities must
    /// lie in `[0, 1]`.
    #[track_caller]
    pub fn bernoulli(&self, probs: &Tensor) -> Result<Tensor> {
        let op = "bernoulli";
        if !probs.dtype().is_float() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("probabilities must be floats, not {}", probs.dtype()),
            });
        }
        if probs.numel() > 0 {
            let out_of_range = probs
                .lt_scalar(0.0)?
                .logical_or(&probs.gt_scalar(1.0)?)?
                .logical_or(&probs.isnan()?)?
                .any()?;
            if out_of_range.item::<bool>()? {
                return Err(Error::InvalidArgument {
                    op,
                    reason: "probabilities must lie in [0, 1]".into(),
                });
            }
        }
        let u = self.rand(probs.shape(), DType::F64, probs.device())?;
        u.lt(&probs.to_dtype(DType::F64)?)?.to_dtype(probs.dtype())
    }
}

impl Tensor {
    /// A random permutation of `0..n` from the global generator (see [`Generator::randperm`]).
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor};
    /// let p = Tensor::randperm(10, DType::I64, Device::Cpu)?;
    /// let mut v = p.to_vec::<i64>()?;
    /// v.sort();
    /// assert_eq!(v, (0..10).collect::<Vec<i64>>());
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn randperm(n: usize, dtype: DType, device: Device) -> Result<Tensor> {
        GLOBAL.randperm(n, dtype, device)
    }

    /// Category indices drawn from the weights in `self` with the global generator (see
    /// [`Generator::multinomial`]).
    ///
    /// ```
    /// use genesis::{tensor, Tensor};
    /// let probs = tensor!([0.0f32, 0.3, 0.7])?;
    /// let draws = probs.multinomial(1000, true)?.to_vec::<i64>()?;
    /// assert!(draws.iter().all(|&k| k == 1 || k == 2));
    /// let two = probs.multinomial(2, false)?.to_vec::<i64>()?;
    /// assert!(two == [1, 2] || two == [2, 1]);
    /// # Ok::<(), genesis::Error>(())
    /// ```
    #[track_caller]
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Result<Tensor> {
        GLOBAL.multinomial(self, num_samples, replacement)
    }

    /// Zeros and ones drawn with the probabilities in `self` with the global generator (see
    /// [`Generator::bernoulli`]).
    #[track_caller]
    pub fn bernoulli(&self) -> Result<Tensor> {
        GLOBAL.bernoulli(self)
    }

    /// Uniform values in `[0, 1)` from the global generator (see [`Generator::rand`]).
    ///
    /// ```
    /// use genesis::{DType, Device, Tensor, manual_seed};
    /// # fn main() -> genesis::Result<()> {
    /// manual_seed(0);
    /// let x = Tensor::rand(&[1000], DType::F32, Device::Cpu)?;
    /// assert!(x.to_vec::<f32>()?.iter().all(|v| (0.0..1.0).contains(v)));
    /// manual_seed(0);
    /// assert_eq!(x.to_vec::<f32>()?, Tensor::rand(&[1000], DType::F32, Device::Cpu)?.to_vec::<f32>()?);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn rand(shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        GLOBAL.rand(shape, dtype, device)
    }

    /// Standard normal values from the global generator (see [`Generator::randn`]).
    #[track_caller]
    pub fn randn(shape: impl Dims, dtype: DType, device: Device) -> Result<Tensor> {
        GLOBAL.randn(shape, dtype, device)
    }

    /// Integers in `[low, high)` from the global generator (see [`Generator::randint`]).
    #[track_caller]
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl Dims,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        GLOBAL.randint(low, high, shape, dtype, device)
    }

    /// [`Tensor::rand`] with this tensor's shape, dtype and device.
    #[track_caller]
    pub fn rand_like(&self) -> Result<Tensor> {
        Tensor::rand(self.shape(), self.dtype(), self.device())
    }

    /// [`Tensor::randn`] with this tensor's shape, dtype and device.
    #[track_caller]
    pub fn randn_like(&self) -> Result<Tensor> {
        Tensor::randn(self.shape(), self.dtype(), self.device())
    }
}
