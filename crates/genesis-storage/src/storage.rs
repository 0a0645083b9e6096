//! The `Storage` type: a flat run of elements of one dtype on one device.

use crate::cpu::{CpuStorage, byte_len};
use crate::{DType, Device, Error, Result, WithDType};

#[derive(Debug)]
enum Inner {
    Cpu(CpuStorage),
    #[cfg(feature = "cuda")]
    Cuda(genesis_cuda::DeviceBuffer),
}

/// `len` elements of `dtype` on a [`Device`].
#[derive(Debug)]
pub struct Storage {
    inner: Inner,
    dtype: DType,
    len: usize,
}

#[cfg(feature = "cuda")]
fn cuda_context(ordinal: usize) -> Result<std::sync::Arc<genesis_cuda::Context>> {
    Ok(genesis_cuda::Context::get(ordinal)?)
}

impl Storage {
    /// A storage holding a copy of `data` on `device`.
    pub fn from_slice<T: WithDType>(data: &[T], device: Device) -> Result<Storage> {
        let cpu = CpuStorage::from_slice(data);
        Storage {
            inner: Inner::Cpu(cpu),
            dtype: T::DTYPE,
            len: data.len(),
        }
        .to_device(device)
    }

    /// `len` elements, every one `value`, on `device` (the `fill` kernel on CUDA).
    pub fn full<T: WithDType>(len: usize, value: T, device: Device) -> Result<Storage> {
        let dtype = T::DTYPE;
        let nbytes = byte_len(len, dtype)?;
        match device {
            Device::Cpu => {
                let mut cpu = CpuStorage::zeroed(nbytes);
                cpu.as_mut_slice::<T>().fill(value);
                Ok(Storage {
                    inner: Inner::Cpu(cpu),
                    dtype,
                    len,
                })
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => {
                let ctx = cuda_context(i)?;
                let buf = genesis_cuda::DeviceBuffer::alloc(&ctx, nbytes)?;
                let stream = genesis_cuda::Stream::legacy(&ctx);
                crate::dispatch_kernel_dtype!(dtype, K => {
                    // `K` is the dtype's type, which is `T`; the downcast proves it safely.
                    let v: K = *(&value as &dyn std::any::Any)
                        .downcast_ref::<K>()
                        .expect("WithDType::DTYPE names the type itself");
                    // SAFETY: the buffer holds `len` elements of `K` on the stream's device and
                    // outlives the launch (cuMemFree and every host copy synchronise with the
                    // legacy stream).
                    unsafe { genesis_kernels::gpu::fill::<K>(&stream, buf.device_ptr(), v, len)? }
                }, _ => {
                    let cpu = Storage::full(len, value, Device::Cpu)?;
                    return cpu.to_device(device);
                });
                Ok(Storage {
                    inner: Inner::Cuda(buf),
                    dtype,
                    len,
                })
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Error::CudaNotCompiled { device }),
        }
    }

    /// The device.
    pub fn device(&self) -> Device {
        match &self.inner {
            Inner::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Inner::Cuda(b) => Device::Cuda(b.context().ordinal()),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the storage holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// The CPU storage, if this is on the CPU.
    pub fn as_cpu(&self) -> Option<&CpuStorage> {
        match &self.inner {
            Inner::Cpu(c) => Some(c),
            #[cfg(feature = "cuda")]
            Inner::Cuda(_) => None,
        }
    }

    /// The device address, if this is on a CUDA device.
    pub fn device_ptr(&self) -> Option<u64> {
        match &self.inner {
            Inner::Cpu(_) => None,
            #[cfg(feature = "cuda")]
            Inner::Cuda(b) => Some(b.device_ptr()),
        }
    }

    /// The bytes, copied to the host.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        match &self.inner {
            Inner::Cpu(c) => Ok(c.as_bytes().to_vec()),
            #[cfg(feature = "cuda")]
            Inner::Cuda(b) => Ok(b.to_host_vec()?),
        }
    }

    /// The elements copied into a `Vec<T>`; `T` must be the storage's dtype.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype,
                rhs: T::DTYPE,
            });
        }
        match &self.inner {
            Inner::Cpu(c) => Ok(c.as_slice::<T>().to_vec()),
            #[cfg(feature = "cuda")]
            Inner::Cuda(b) => {
                let mut host = CpuStorage::zeroed(b.len());
                b.copy_to_host(host.as_bytes_mut())?;
                Ok(host.as_slice::<T>().to_vec())
            }
        }
    }

    /// The elements converted to `f64`, for display and reference checks.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        crate::dispatch_dtype!(self.dtype, T => Ok(self.to_vec::<T>()?.into_iter().map(WithDType::to_f64).collect()),
            bool => Ok(self.to_bytes()?.into_iter().map(|b| f64::from(u8::from(b != 0))).collect()))
    }

    /// A copy of this storage on `device` (a plain copy when it is already there).
    pub fn to_device(&self, device: Device) -> Result<Storage> {
        let (dtype, len) = (self.dtype, self.len);
        match (&self.inner, device) {
            (Inner::Cpu(c), Device::Cpu) => Ok(Storage {
                inner: Inner::Cpu(c.clone()),
                dtype,
                len,
            }),
            #[cfg(feature = "cuda")]
            (Inner::Cpu(c), Device::Cuda(i)) => {
                let ctx = cuda_context(i)?;
                let buf = genesis_cuda::DeviceBuffer::from_host(&ctx, c.as_bytes())?;
                Ok(Storage {
                    inner: Inner::Cuda(buf),
                    dtype,
                    len,
                })
            }
            #[cfg(feature = "cuda")]
            (Inner::Cuda(b), Device::Cpu) => {
                let mut host = CpuStorage::zeroed(b.len());
                b.copy_to_host(host.as_bytes_mut())?;
                Ok(Storage {
                    inner: Inner::Cpu(host),
                    dtype,
                    len,
                })
            }
            #[cfg(feature = "cuda")]
            (Inner::Cuda(b), Device::Cuda(i)) => {
                if b.context().ordinal() == i {
                    let mut dst = genesis_cuda::DeviceBuffer::alloc(b.context(), b.len())?;
                    dst.copy_from_device(b, &genesis_cuda::Stream::legacy(b.context()))?;
                    Ok(Storage {
                        inner: Inner::Cuda(dst),
                        dtype,
                        len,
                    })
                } else {
                    // Staged through the host until peer copies arrive with the storage issue.
                    self.to_device(Device::Cpu)?.to_device(device)
                }
            }
            #[cfg(not(feature = "cuda"))]
            (Inner::Cpu(_), Device::Cuda(_)) => Err(Error::CudaNotCompiled { device }),
        }
    }

    fn check_binary(&self, op: &'static str, other: &Storage) -> Result<()> {
        if self.dtype != other.dtype {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype,
                rhs: other.dtype,
            });
        }
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        if self.len != other.len {
            return Err(Error::LengthMismatch {
                op,
                lhs: self.len,
                rhs: other.len,
            });
        }
        Ok(())
    }

    /// Elementwise `self + other` into a new storage on the same device.
    pub fn add(&self, other: &Storage) -> Result<Storage> {
        self.check_binary("add", other)?;
        let (dtype, len) = (self.dtype, self.len);
        match (&self.inner, &other.inner) {
            (Inner::Cpu(a), Inner::Cpu(b)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let mut out = CpuStorage::zeroed(a.nbytes());
                    genesis_kernels::cpu::add::<T>(a.as_slice(), b.as_slice(), out.as_mut_slice())?;
                    Ok(Storage { inner: Inner::Cpu(out), dtype, len })
                }, _ => Err(Error::UnsupportedDType { op: "add", dtype }))
            }
            #[cfg(feature = "cuda")]
            (Inner::Cuda(a), Inner::Cuda(b)) => {
                crate::dispatch_kernel_dtype!(dtype, T => {
                    let out = genesis_cuda::DeviceBuffer::alloc(a.context(), a.len())?;
                    let stream = genesis_cuda::Stream::legacy(a.context());
                    // SAFETY: all three buffers are on the same device (checked above), hold
                    // `len` elements of `T`, and live until the launch completes (cuMemFree
                    // and the host copies synchronise with the legacy stream).
                    unsafe {
                        genesis_kernels::gpu::add::<T>(&stream, a.device_ptr(), b.device_ptr(), out.device_ptr(), len)?
                    };
                    Ok(Storage { inner: Inner::Cuda(out), dtype, len })
                }, _ => Err(Error::UnsupportedDType { op: "add", dtype }))
            }
            #[cfg(feature = "cuda")]
            _ => Err(Error::DeviceMismatch {
                op: "add",
                lhs: self.device(),
                rhs: other.device(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn cpu_add_and_errors() {
        let a = Storage::from_slice(&[1i32, 2, 3], Device::Cpu).unwrap();
        let b = Storage::from_slice(&[10i32, 20, 30], Device::Cpu).unwrap();
        assert_eq!(
            a.add(&b).unwrap().to_vec::<i32>().unwrap(),
            vec![11, 22, 33]
        );
        let c = Storage::from_slice(&[1.0f32, 2.0, 3.0], Device::Cpu).unwrap();
        assert!(matches!(
            a.add(&c),
            Err(Error::DTypeMismatch { op: "add", .. })
        ));
        let d = Storage::from_slice(&[1i32], Device::Cpu).unwrap();
        assert!(matches!(
            a.add(&d),
            Err(Error::LengthMismatch { lhs: 3, rhs: 1, .. })
        ));
        assert!(matches!(
            a.to_vec::<i64>(),
            Err(Error::DTypeMismatch { .. })
        ));
        let u = Storage::from_slice(&[1u8], Device::Cpu).unwrap();
        assert!(matches!(u.add(&u), Err(Error::UnsupportedDType { .. })));
    }

    #[test]
    fn full_fills() {
        let s = Storage::full(5, bf16::from_f32(2.5), Device::Cpu).unwrap();
        assert_eq!(s.to_f64_vec().unwrap(), vec![2.5; 5]);
        assert_eq!(s.nbytes(), 10);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_a_typed_error() {
        let e = Storage::from_slice(&[1f32], Device::Cuda(0)).unwrap_err();
        assert!(matches!(e, Error::CudaNotCompiled { .. }));
        assert!(e.to_string().contains("--features cuda"));
    }
}
