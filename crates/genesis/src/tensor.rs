use std::fmt;
use std::sync::Arc;

use genesis_storage::{DType, Device, Layout, Storage, WithDType};

use crate::{Error, Result};

/// A multi-dimensional array on a device: a shared [`Storage`], a [`Layout`] and a dtype.
///
/// Cloning a tensor is cheap: the clone shares the storage.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    layout: Layout,
}

fn numel_of(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::DataLength {
            op,
            shape: shape.to_vec(),
            expected: usize::MAX,
            got: 0,
        })
}

impl Tensor {
    /// A tensor of `shape` holding a copy of `data` (row-major) on `device`.
    pub fn from_slice<T: WithDType>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        let n = numel_of("from_slice", shape)?;
        if n != data.len() {
            return Err(Error::DataLength {
                op: "from_slice",
                shape: shape.to_vec(),
                expected: n,
                got: data.len(),
            });
        }
        let storage = Storage::from_slice(data, device)?;
        Ok(Tensor {
            storage: Arc::new(storage),
            layout: Layout::contiguous(shape),
        })
    }

    /// A tensor of `shape` with every element `value`.
    pub fn full<T: WithDType>(shape: &[usize], value: T, device: Device) -> Result<Tensor> {
        let n = numel_of("full", shape)?;
        let storage = Storage::full(n, value, device)?;
        Ok(Tensor {
            storage: Arc::new(storage),
            layout: Layout::contiguous(shape),
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        self.layout.strides()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.storage.device()
    }

    /// Whether the elements are row-major with no gaps.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// A copy on `device`.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        Ok(Tensor {
            storage: Arc::new(self.storage.to_device(device)?),
            layout: self.layout.clone(),
        })
    }

    /// The elements, row-major, copied to the host; `T` must match the dtype.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        Ok(self.storage.to_vec::<T>()?)
    }

    /// Elementwise sum of two tensors of the same shape, dtype and device.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.check_binary("add", other)?;
        let storage = self.storage.add(&other.storage)?;
        Ok(Tensor {
            storage: Arc::new(storage),
            layout: Layout::contiguous(self.shape()),
        })
    }

    fn check_binary(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.shape() != other.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }
}

impl std::ops::Add for &Tensor {
    type Output = Result<Tensor>;

    fn add(self, rhs: &Tensor) -> Result<Tensor> {
        Tensor::add(self, rhs)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}

impl fmt::Display for Tensor {
    /// Prints up to 16 elements, then the shape, dtype and device.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOW: usize = 16;
        let values = self.storage.to_f64_vec().map_err(|_| fmt::Error)?;
        write!(f, "tensor([")?;
        for (i, v) in values.iter().take(SHOW).enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{v}")?;
        }
        if values.len() > SHOW {
            write!(f, ", ... ({} more)", values.len() - SHOW)?;
        }
        write!(
            f,
            "], shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}
