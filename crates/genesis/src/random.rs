//! Seeded random tensors: `rand`, `randn`, `randint` and their `_like` forms.

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

impl Tensor {
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
