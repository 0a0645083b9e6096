//! Binary ops whose operands are read in place through their layouts: broadcast (stride 0)
//! and strided operands, and scalar operands passed to the kernel as an argument.

use super::{Inner, Mem, MemMut, Storage, check_float_only, check_kernel_dtype, mixed};
use crate::compute::Compute;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
use genesis_kernels::{BinaryNd, BinaryOp, CompareOp, Rhs, WhereNd};

/// The right operand of [`Storage::binary_strided`].
#[derive(Debug, Clone, Copy)]
pub enum BinaryRhs<'a> {
    /// A storage read through a layout of the result's shape (stride 0 where broadcast).
    Tensor(&'a Storage, &'a Layout),
    /// One value: a one-element host storage of the left operand's dtype.
    Scalar(&'a Storage),
}

impl Storage {
    /// `out[i] = op(self[a(i)], rhs[b(i)])` for every position `i` of `a`'s shape, into a new
    /// contiguous storage: `a` (and a tensor `rhs`'s layout, of the same shape) may broadcast
    /// (stride 0) or be any strided view; nothing is materialised first. A scalar `rhs` goes
    /// to the kernel as an argument. f64, f32, f16, bf16, i32, i64 (`Div`, `Pow` for the floating
    /// types). Results of 2^31 elements or more, or of more than eight dimensions once the
    /// layouts' mergeable neighbours are merged, go through contiguous copies of the operands
    /// (`Storage::contiguous`, with its own limits).
    #[track_caller]
    pub fn binary_strided(&self, op: BinaryOp, a: &Layout, rhs: BinaryRhs<'_>) -> Result<Storage> {
        let name = op.name();
        let dtype = self.dtype;
        let b = self.check_rhs(name, a, rhs)?;
        a.check_bounds(self.len)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        let Ok(desc) = BinaryNd::new(a.shape(), a.strides(), a.offset(), b) else {
            let n = a.try_numel()?;
            let rhs = dense_rhs(self.device(), a.shape(), rhs)?;
            return self.contiguous(a)?.binary_at(op, 0, &rhs, 0, n);
        };
        let mut out = Storage::uninit(desc.numel(), dtype, self.device())?;
        self.run_nd(NdKernel::Binary(op), &desc, rhs, &mut out)?;
        Ok(out)
    }

    /// `self[a(i)] op rhs[b(i)]` for every position `i` of `a`'s shape as a new contiguous
    /// `Bool` storage, the operands read in place through their layouts as in
    /// [`Storage::binary_strided`] (a scalar `rhs` is a kernel argument). f64, f32, f16, bf16,
    /// i32, i64; IEEE comparisons (NaN unequal to everything). Layouts the in-place kernels do
    /// not take go through contiguous copies.
    #[track_caller]
    pub fn compare_strided(
        &self,
        op: CompareOp,
        a: &Layout,
        rhs: BinaryRhs<'_>,
    ) -> Result<Storage> {
        let name = op.name();
        let dtype = self.dtype;
        let b = self.check_rhs(name, a, rhs)?;
        a.check_bounds(self.len)?;
        check_kernel_dtype(name, dtype)?;
        let Ok(desc) = BinaryNd::new(a.shape(), a.strides(), a.offset(), b) else {
            let n = a.try_numel()?;
            let rhs = dense_rhs(self.device(), a.shape(), rhs)?;
            return self.contiguous(a)?.compare_at(op, 0, &rhs, 0, n);
        };
        let mut out = Storage::uninit(desc.numel(), DType::Bool, self.device())?;
        self.run_nd(NdKernel::Compare(op), &desc, rhs, &mut out)?;
        Ok(out)
    }

    /// Runs `kernel` over `desc` with `self` the left operand and `rhs` (checked against it by
    /// the caller) the right one, into `out`: the operands' read guards held for the launch, a
    /// scalar passed as its bytes.
    fn run_nd(
        &self,
        kernel: NdKernel,
        desc: &BinaryNd,
        rhs: BinaryRhs<'_>,
        out: &mut Storage,
    ) -> Result<()> {
        let (name, dtype) = (kernel.name(), self.dtype);
        let scalar = match rhs {
            BinaryRhs::Scalar(s) => s.host_bytes(),
            BinaryRhs::Tensor(..) => None,
        };
        let scalar = scalar.as_deref();
        let tensor = match rhs {
            BinaryRhs::Tensor(o, _) => Some(o.read(name)?),
            BinaryRhs::Scalar(_) => None,
        };
        let tensor = tensor.as_deref().map(Inner::mem);
        match (self.read(name)?.mem(), tensor, scalar, out.mem_mut(name)?) {
            (Mem::Host(a), Some(Mem::Host(b)), _, MemMut::Host(o)) => {
                kernel.run(a, dtype, desc, Rhs::Tensor(b), o)
            }
            (Mem::Host(a), None, Some(s), MemMut::Host(o)) => {
                kernel.run(a, dtype, desc, Rhs::Scalar(s), o)
            }
            (Mem::Cuda(a), Some(Mem::Cuda(b)), _, MemMut::Cuda(o)) => {
                kernel.run(a, dtype, desc, Rhs::Tensor(b), o)
            }
            (Mem::Cuda(a), None, Some(s), MemMut::Cuda(o)) => {
                kernel.run(a, dtype, desc, Rhs::Scalar(s), o)
            }
            _ => Err(mixed(name)),
        }
    }

    /// `cond[c(i)] ? a[a(i)] : b[b(i)]` for every position `i` of `cond`'s layout's shape as a
    /// new contiguous storage of `a`'s dtype: the condition (`Bool`) and both values read in
    /// place through their layouts of that shape (stride 0 where broadcast); a value given as
    /// [`BinaryRhs::Scalar`] (one host element of the dtype) is a kernel argument. Any dtype;
    /// all on one device. Layouts the in-place kernel does not take go through contiguous
    /// copies.
    #[track_caller]
    pub fn select_strided(
        cond: (&Storage, &Layout),
        a: BinaryRhs<'_>,
        b: BinaryRhs<'_>,
    ) -> Result<Storage> {
        let name = "where";
        let (c, cl) = cond;
        if c.dtype != DType::Bool {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: c.dtype,
            });
        }
        cl.check_bounds(c.len)?;
        let shape = cl.shape();
        let (da, la) = where_value(name, c, shape, a)?;
        let (db, lb) = where_value(name, c, shape, b)?;
        if da != db {
            return Err(Error::DTypeMismatch {
                op: name,
                lhs: da,
                rhs: db,
            });
        }
        let Ok(desc) = WhereNd::new(shape, (cl.strides(), cl.offset()), la, lb) else {
            let n = cl.try_numel()?;
            let (ca, cb) = (
                dense_rhs(c.device(), shape, a)?,
                dense_rhs(c.device(), shape, b)?,
            );
            return Storage::select_at((&c.contiguous(cl)?, 0), (&ca, 0), (&cb, 0), n);
        };
        let es = da.size();
        let mut out = Storage::uninit(desc.numel(), da, c.device())?;
        // Read guards of tensor values and the bytes of scalar ones, held for the launch.
        let ga = match a {
            BinaryRhs::Tensor(s, _) => Some(s.read(name)?),
            BinaryRhs::Scalar(_) => None,
        };
        let gb = match b {
            BinaryRhs::Tensor(s, _) => Some(s.read(name)?),
            BinaryRhs::Scalar(_) => None,
        };
        let sa = match a {
            BinaryRhs::Scalar(s) => s.host_bytes(),
            BinaryRhs::Tensor(..) => None,
        };
        let sb = match b {
            BinaryRhs::Scalar(s) => s.host_bytes(),
            BinaryRhs::Tensor(..) => None,
        };
        let va = ga.as_deref().map(Inner::mem).ok_or(sa.as_deref());
        let vb = gb.as_deref().map(Inner::mem).ok_or(sb.as_deref());
        match (c.read(name)?.mem(), out.mem_mut(name)?) {
            (Mem::Host(cm), MemMut::Host(o)) => match (host_value(va), host_value(vb)) {
                (Some(x), Some(y)) => cm.where_nd(es, &desc, x, y, o)?,
                _ => return Err(mixed(name)),
            },
            (Mem::Cuda(cm), MemMut::Cuda(o)) => match (cuda_value(va), cuda_value(vb)) {
                (Some(x), Some(y)) => cm.where_nd(es, &desc, x, y, o)?,
                _ => return Err(mixed(name)),
            },
            _ => return Err(mixed(name)),
        }
        Ok(out)
    }

    /// In place: `self[start + i] = op(self[start + i], rhs[b(i)])` for every position `i`
    /// of `shape` (row-major, `self`'s run from `start` contiguous): a tensor `rhs` read in
    /// place through its layout of that shape (stride 0 where broadcast), or a scalar passed to
    /// the kernel. Allocates nothing (but for layouts [`Storage::binary_strided`] takes through
    /// copies). Fails, writing nothing, as [`Storage::binary_assign`] does.
    #[track_caller]
    pub fn binary_strided_assign(
        &mut self,
        op: BinaryOp,
        start: usize,
        shape: &[usize],
        rhs: BinaryRhs<'_>,
    ) -> Result<()> {
        let name = op.name();
        let dtype = self.dtype;
        let n = crate::layout::checked_numel(shape)?;
        self.check_range(name, start, n)?;
        let own = Layout::contiguous(shape);
        let b = self.check_rhs(name, &own, rhs)?;
        check_float_only(name, op.float_only(), dtype)?;
        check_kernel_dtype(name, dtype)?;
        let Ok(desc) = BinaryNd::new(shape, own.strides(), 0, b) else {
            let dense = dense_rhs(self.device(), shape, rhs)?;
            return self.binary_assign(op, start, &dense, 0, n);
        };
        let scalar = match rhs {
            BinaryRhs::Scalar(s) => s.host_bytes(),
            BinaryRhs::Tensor(..) => None,
        };
        let scalar = scalar.as_deref();
        let tensor = match rhs {
            BinaryRhs::Tensor(o, _) => Some(o.read(name)?),
            BinaryRhs::Scalar(_) => None,
        };
        let tensor = tensor.as_deref().map(Inner::mem);
        match (self.mem_mut(name)?, tensor, scalar) {
            (MemMut::Host(a), Some(Mem::Host(b)), _) => {
                a.binary_nd_assign(op, dtype, start, &desc, Rhs::Tensor(b))
            }
            (MemMut::Host(a), None, Some(s)) => {
                a.binary_nd_assign(op, dtype, start, &desc, Rhs::Scalar(s))
            }
            (MemMut::Cuda(a), Some(Mem::Cuda(b)), _) => {
                a.binary_nd_assign(op, dtype, start, &desc, Rhs::Tensor(b))
            }
            (MemMut::Cuda(a), None, Some(s)) => {
                a.binary_nd_assign(op, dtype, start, &desc, Rhs::Scalar(s))
            }
            _ => Err(mixed(name)),
        }
    }

    /// Checks a right operand against `self` and a left layout `a` of the result's shape: a
    /// tensor of the same dtype and device with a layout of that shape inside its storage, or
    /// one host element of the dtype. Its strides and offset (`None` for a scalar).
    fn check_rhs<'r>(
        &self,
        name: &'static str,
        a: &Layout,
        rhs: BinaryRhs<'r>,
    ) -> Result<Option<(&'r [isize], usize)>> {
        let dtype = self.dtype;
        Ok(match rhs {
            BinaryRhs::Tensor(other, b) => {
                self.check_binary_types(name, other)?;
                if b.shape() != a.shape() {
                    return Err(Error::ShapeMismatch {
                        op: name,
                        lhs: a.shape().to_vec(),
                        rhs: b.shape().to_vec(),
                    });
                }
                b.check_bounds(other.len)?;
                Some((b.strides(), b.offset()))
            }
            BinaryRhs::Scalar(s) => {
                if s.dtype != dtype || s.len != 1 || s.device() != Device::Cpu {
                    return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                        op: name,
                        reason: format!(
                            "a scalar operand is one {dtype} element on the host, not {} of {} on {}",
                            s.len,
                            s.dtype,
                            s.device()
                        ),
                    }));
                }
                None
            }
        })
    }
}

/// An operand's strides and offset, as the descriptors take them.
type Strides<'v> = (&'v [isize], usize);

/// A value of [`Storage::select_strided`] checked against the condition `c` and its `shape`:
/// its dtype and, for a tensor, its strides and offset (`None` for a scalar).
fn where_value<'v>(
    name: &'static str,
    c: &Storage,
    shape: &[usize],
    v: BinaryRhs<'v>,
) -> Result<(DType, Option<Strides<'v>>)> {
    match v {
        BinaryRhs::Tensor(s, l) => {
            if s.device() != c.device() {
                return Err(Error::DeviceMismatch {
                    op: name,
                    lhs: c.device(),
                    rhs: s.device(),
                });
            }
            if l.shape() != shape {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: shape.to_vec(),
                    rhs: l.shape().to_vec(),
                });
            }
            l.check_bounds(s.len)?;
            Ok((s.dtype, Some((l.strides(), l.offset()))))
        }
        BinaryRhs::Scalar(s) => {
            if s.len != 1 || s.device() != Device::Cpu {
                return Err(Error::Kernel(genesis_kernels::Error::Unsupported {
                    op: name,
                    reason: format!(
                        "a scalar value is one element on the host, not {} on {}",
                        s.len,
                        s.device()
                    ),
                }));
            }
            Ok((s.dtype, None))
        }
    }
}

/// An operand as a contiguous storage of `shape` on `device` (a scalar repeated), for the
/// layouts the in-place kernels do not take.
fn dense_rhs(device: Device, shape: &[usize], v: BinaryRhs<'_>) -> Result<Storage> {
    match v {
        BinaryRhs::Tensor(s, l) => s.contiguous(l),
        BinaryRhs::Scalar(s) => {
            s.to_device(device)?
                .contiguous(&Layout::new(shape, &vec![0; shape.len()], 0))
        }
    }
}

/// The kernel a [`Storage::run_nd`] launch runs.
#[derive(Clone, Copy)]
enum NdKernel {
    Binary(BinaryOp),
    Compare(CompareOp),
}

impl NdKernel {
    fn name(self) -> &'static str {
        match self {
            NdKernel::Binary(op) => op.name(),
            NdKernel::Compare(op) => op.name(),
        }
    }

    fn run<B: Compute + ?Sized>(
        self,
        a: &B,
        dtype: DType,
        desc: &BinaryNd,
        b: Rhs<&B, &[u8]>,
        out: &mut B,
    ) -> Result<()> {
        match self {
            NdKernel::Binary(op) => a.binary_nd(op, dtype, desc, b, out),
            NdKernel::Compare(op) => a.compare_nd(op, dtype, desc, b, out),
        }
    }
}

/// A value's memory (`Ok`) or a scalar's bytes (`Err`) as a host operand, `None` on a device.
fn host_value<'m>(
    v: std::result::Result<Mem<'m>, Option<&'m [u8]>>,
) -> Option<Rhs<&'m [u8], &'m [u8]>> {
    match v {
        Ok(Mem::Host(m)) => Some(Rhs::Tensor(m)),
        Err(Some(s)) => Some(Rhs::Scalar(s)),
        _ => None,
    }
}

/// A value's memory (`Ok`) or a scalar's bytes (`Err`) as a CUDA operand, `None` on the host.
fn cuda_value<'m>(
    v: std::result::Result<Mem<'m>, Option<&'m [u8]>>,
) -> Option<Rhs<&'m crate::cuda::CudaMem, &'m [u8]>> {
    match v {
        Ok(Mem::Cuda(m)) => Some(Rhs::Tensor(m)),
        Err(Some(s)) => Some(Rhs::Scalar(s)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// `op` over `a` and `b` element by element through their layouts, as the reference.
    fn reference(a: &[f32], la: &Layout, b: &[f32], lb: &Layout) -> Vec<f32> {
        la.indices()
            .zip(lb.indices())
            .map(|(i, j)| a[i] - b[j])
            .collect()
    }

    #[test]
    fn strided_broadcast_and_scalar_operands_on_the_host() {
        let a: Vec<f32> = (0..24).map(|x| x as f32 * 0.5).collect();
        let sa = Storage::from_slice(&a, Device::Cpu).unwrap();
        let b: Vec<f32> = (0..4).map(|x| 100.0 + x as f32).collect();
        let sb = Storage::from_slice(&b, Device::Cpu).unwrap();
        // A transposed [4, 6] view of `a` minus a row broadcast of `b` along the columns.
        let la = Layout::new(&[4, 6], &[1, 4], 0);
        let lb = Layout::new(&[4, 6], &[1, 0], 0);
        let out = sa
            .binary_strided(BinaryOp::Sub, &la, BinaryRhs::Tensor(&sb, &lb))
            .unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), reference(&a, &la, &b, &lb));
        // A scalar, passed by value.
        let s = Storage::from_slice(&[2.0f32], Device::Cpu).unwrap();
        let out = sa
            .binary_strided(BinaryOp::Sub, &la, BinaryRhs::Scalar(&s))
            .unwrap();
        let two = [2.0f32];
        let zero = Layout::new(&[4, 6], &[0, 0], 0);
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            reference(&a, &la, &two, &zero)
        );
        // A scalar of another dtype, or a shape that differs, is refused.
        let wrong = Storage::from_slice(&[2.0f64], Device::Cpu).unwrap();
        assert!(
            sa.binary_strided(BinaryOp::Sub, &la, BinaryRhs::Scalar(&wrong))
                .is_err()
        );
        let short = Layout::new(&[4, 5], &[1, 0], 0);
        assert!(
            sa.binary_strided(BinaryOp::Sub, &la, BinaryRhs::Tensor(&sb, &short))
                .is_err()
        );
    }

    #[test]
    fn layouts_of_many_dimensions_merge_into_the_descriptor() {
        // Nine dimensions of size 2: contiguous on the left and broadcast on the right in the
        // last one, so they merge into two.
        let shape = [2usize; 9];
        let n = 1 << 9;
        let a: Vec<f32> = (0..n).map(|x| x as f32).collect();
        let sa = Storage::from_slice(&a, Device::Cpu).unwrap();
        let sb = Storage::from_slice(&a[..256], Device::Cpu).unwrap();
        let la = Layout::contiguous(&shape);
        let mut strides = Layout::contiguous(&shape[..8]).strides().to_vec();
        strides.push(0);
        let lb = Layout::new(&shape, &strides, 0);
        let d = BinaryNd::new(&shape, la.strides(), 0, Some((lb.strides(), 0))).unwrap();
        assert_eq!(d.rank(), 2);
        let out = sa
            .binary_strided(BinaryOp::Sub, &la, BinaryRhs::Tensor(&sb, &lb))
            .unwrap();
        assert_eq!(out.dtype(), DType::F32);
        assert_eq!(out.to_vec::<f32>().unwrap(), reference(&a, &la, &a, &lb));
    }
}
