//! Batched matrix multiplication of storages (`genesis_kernels::matmul`).

use super::{Mem, MemMut, Storage};
use crate::compute::Compute;
use crate::{Error, Result};
use genesis_kernels::matmul::{MatmulLayout, MatmulPrecision, MatmulShape};

fn overflow() -> Error {
    Error::Kernel(genesis_kernels::Error::Unsupported {
        op: "matmul",
        reason: "the product's shape overflows the address space".into(),
    })
}

impl Storage {
    /// `C[b] = A[b] @ B[b]` (see [`MatmulShape`]) reading `self` from `a_start` and `other`
    /// from `b_start`, into a new contiguous storage of `batch * m * n` elements. f32, f16,
    /// bf16 (accumulated in f32) and f64 (accumulated in f64) on every device; u8, i8, i16, i32
    /// and i64 (exact, wrapping) on the host only (CUDA: [`Error::UnsupportedDType`], as
    /// PyTorch's); both operands on one device. Full f32 precision ([`Storage::matmul_with`] chooses).
    #[track_caller]
    pub fn matmul(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
    ) -> Result<Storage> {
        self.matmul_with(a_start, other, b_start, shape, MatmulPrecision::Highest)
    }

    /// [`Storage::matmul`] at `precision`: [`MatmulPrecision::High`] runs f32 products on
    /// CUDA with TF32 inputs on tensor cores; the CPU, and f16 and bf16 products, are the same
    /// at every precision.
    #[track_caller]
    pub fn matmul_with(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        precision: MatmulPrecision,
    ) -> Result<Storage> {
        let layout = MatmulLayout::contiguous(&shape);
        self.matmul_layout_with(a_start, other, b_start, shape, layout, precision)
    }

    /// [`Storage::matmul`] into `out` from `out_start` (allocates nothing but, on CUDA, the
    /// split-k workspace of a product with few output tiles). `out` must have the operands'
    /// dtype and device; the borrow rules keep it apart from them.
    #[track_caller]
    pub fn matmul_into(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        out: &mut Storage,
        out_start: usize,
    ) -> Result<()> {
        self.matmul_into_with(
            a_start,
            other,
            b_start,
            shape,
            out,
            out_start,
            MatmulPrecision::Highest,
        )
    }

    /// [`Storage::matmul_into`] at `precision` (see [`Storage::matmul_with`]).
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_into_with(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        out: &mut Storage,
        out_start: usize,
        precision: MatmulPrecision,
    ) -> Result<()> {
        let layout = MatmulLayout::contiguous(&shape);
        self.matmul_layout_into_with(
            a_start, other, b_start, shape, layout, out, out_start, precision,
        )
    }

    /// [`Storage::matmul_with`] with the operands where `layout` says (row- or column-major,
    /// any leading dimension: transposed and sliced matrices read in place).
    #[track_caller]
    pub fn matmul_layout_with(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        layout: MatmulLayout,
        precision: MatmulPrecision,
    ) -> Result<Storage> {
        let len = shape.c_len().ok_or_else(overflow)?;
        let mut out = Storage::uninit(len, self.dtype, self.device())?;
        self.matmul_layout_into_with(
            a_start, other, b_start, shape, layout, &mut out, 0, precision,
        )?;
        Ok(out)
    }

    /// [`Storage::matmul_layout_with`] plus `bias` (`n` values from `bias_start`) added to
    /// every row of the result (PyTorch's `addmm` with a broadcast bias, `F.linear`): by the
    /// product's kernel before its one rounding where it can (the unsplit Hopper kernels),
    /// else by an add after the product. The bias must have the operands' dtype and device.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_bias_layout_with(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        layout: MatmulLayout,
        precision: MatmulPrecision,
        bias: &Storage,
        bias_start: usize,
    ) -> Result<Storage> {
        let name = "matmul";
        self.check_binary_types(name, bias)?;
        bias.check_range(name, bias_start, shape.n)?;
        let len = shape.c_len().ok_or_else(overflow)?;
        let mut out = Storage::uninit(len, self.dtype, self.device())?;
        let added = self.matmul_run(
            a_start,
            other,
            b_start,
            shape,
            layout,
            Some((bias, bias_start)),
            &mut out,
            0,
            precision,
        )?;
        if !added && len > 0 {
            let rows = len / shape.n;
            let along = crate::Layout::new(&[rows, shape.n], &[0, 1], bias_start);
            out.binary_strided_assign(
                genesis_kernels::BinaryOp::Add,
                0,
                &[rows, shape.n],
                crate::BinaryRhs::Tensor(bias, &along),
            )?;
        }
        Ok(out)
    }

    /// [`Storage::matmul_into_with`] with the operands where `layout` says.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_layout_into_with(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        layout: MatmulLayout,
        out: &mut Storage,
        out_start: usize,
        precision: MatmulPrecision,
    ) -> Result<()> {
        self.matmul_run(
            a_start, other, b_start, shape, layout, None, out, out_start, precision,
        )
        .map(|_| ())
    }

    /// The product into `out`, checked, with the bias the kernel may add (see
    /// [`Compute::matmul`]): whether it did.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    fn matmul_run(
        &self,
        a_start: usize,
        other: &Storage,
        b_start: usize,
        shape: MatmulShape,
        layout: MatmulLayout,
        bias: Option<(&Storage, usize)>,
        out: &mut Storage,
        out_start: usize,
        precision: MatmulPrecision,
    ) -> Result<bool> {
        let name = "matmul";
        self.check_binary_types(name, other)?;
        self.check_binary_types(name, out)?;
        self.check_range(name, a_start, layout.a_len(&shape).ok_or_else(overflow)?)?;
        other.check_range(name, b_start, layout.b_len(&shape).ok_or_else(overflow)?)?;
        out.check_range(name, out_start, shape.c_len().ok_or_else(overflow)?)?;
        let dtype = self.dtype;
        genesis_kernels::dispatch_dtype!(dtype, [F32, F16, BF16, F64, U8, I8, I16, I32, I64], _T => (), _ => {
            return Err(Error::UnsupportedDType { op: name, dtype })
        });
        let bias_read = bias
            .map(|(s, at)| s.read(name).map(|r| (r, at)))
            .transpose()?;
        let bias_mem = bias_read.as_ref().map(|(r, at)| (r.mem(), *at));
        match (
            self.read(name)?.mem(),
            other.read(name)?.mem(),
            out.mem_mut(name)?,
        ) {
            (Mem::Host(a), Mem::Host(b), MemMut::Host(o)) => {
                let bias = match bias_mem {
                    Some((Mem::Host(m), at)) => Some((m, at)),
                    Some(_) => return Err(super::mixed(name)),
                    None => None,
                };
                a.matmul(
                    dtype, shape, layout, precision, a_start, b, b_start, bias, o, out_start,
                )
            }
            (Mem::Cuda(a), Mem::Cuda(b), MemMut::Cuda(o)) => {
                let bias = match bias_mem {
                    Some((Mem::Cuda(m), at)) => Some((m, at)),
                    Some(_) => return Err(super::mixed(name)),
                    None => None,
                };
                a.matmul(
                    dtype, shape, layout, precision, a_start, b, b_start, bias, o, out_start,
                )
            }
            _ => Err(super::mixed(name)),
        }
    }
}
