//! TMA tensor maps (`CUtensorMap`): descriptors of a tiled region of device memory that the
//! Hopper tensor memory accelerator copies into shared memory, built by
//! `cuTensorMapEncodeTiled` and passed to a kernel as a `const __grid_constant__ CUtensorMap`
//! parameter.

use std::sync::Arc;

use crate::context::{Context, check};
use crate::error::{Error, Result};
use crate::sys;

/// Element types of a [`TensorMap`] (`CUtensorMapDataType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorMapDataType {
    /// 16-bit IEEE half (`CU_TENSOR_MAP_DATA_TYPE_FLOAT16`).
    F16,
    /// bfloat16 (`CU_TENSOR_MAP_DATA_TYPE_BFLOAT16`).
    BF16,
    /// f32 (`CU_TENSOR_MAP_DATA_TYPE_FLOAT32`).
    F32,
}

impl TensorMapDataType {
    fn code(self) -> i32 {
        match self {
            TensorMapDataType::F16 => 6,
            TensorMapDataType::F32 => 7,
            TensorMapDataType::BF16 => 9,
        }
    }

    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            TensorMapDataType::F16 | TensorMapDataType::BF16 => 2,
            TensorMapDataType::F32 => 4,
        }
    }
}

/// How a [`TensorMap`] lays a box out in shared memory (`CUtensorMapSwizzle`): the 16-byte
/// chunks of each row of the box's inner dimension are permuted within a span of 32, 64 or 128
/// bytes (chunk `c` of row `r` lands at `c ^ (r % (span / 16))`), which the box's inner extent
/// in bytes must not exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorMapSwizzle {
    /// Rows stored as they are.
    None,
    /// 32-byte span.
    B32,
    /// 64-byte span.
    B64,
    /// 128-byte span.
    B128,
}

impl TensorMapSwizzle {
    fn code(self) -> i32 {
        match self {
            TensorMapSwizzle::None => 0,
            TensorMapSwizzle::B32 => 1,
            TensorMapSwizzle::B64 => 2,
            TensorMapSwizzle::B128 => 3,
        }
    }

    fn span(self) -> Option<usize> {
        match self {
            TensorMapSwizzle::None => None,
            TensorMapSwizzle::B32 => Some(32),
            TensorMapSwizzle::B64 => Some(64),
            TensorMapSwizzle::B128 => Some(128),
        }
    }
}

/// A tiled TMA descriptor, `CUtensorMap`: 128 opaque bytes, aligned to 128 as `cuda.h` declares
/// it. A kernel receives it by value (`const __grid_constant__ CUtensorMap`): pass a pointer to
/// it in the launch's parameter array. It names device memory by address and holds no
/// reference to it: the memory must outlive every launch that uses the map.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub struct TensorMap {
    opaque: [u64; 16],
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMap").finish_non_exhaustive()
    }
}

/// The region and box of a tiled [`TensorMap`] (the arguments of `cuTensorMapEncodeTiled`,
/// without interleave; out-of-range elements of a box read as zero).
#[derive(Debug, Clone, Copy)]
pub struct TiledTensor<'a> {
    /// Element type.
    pub data_type: TensorMapDataType,
    /// Device address of element 0 (16-byte aligned).
    pub address: u64,
    /// Extent of each dimension, innermost (contiguous) first: 1 to 5 dimensions, each in
    /// `1..=2^32`.
    pub dims: &'a [u64],
    /// Bytes between consecutive indices of dimensions 1, 2, ...: one fewer than `dims`, each
    /// a multiple of 16 below `2^40`.
    pub strides: &'a [u64],
    /// Elements of the box in each dimension (each in `1..=256`; the innermost times the element
    /// size a multiple of 16 bytes, and at most the swizzle span).
    pub box_dims: &'a [u32],
    /// The box's layout in shared memory.
    pub swizzle: TensorMapSwizzle,
}

impl TensorMap {
    /// Encodes `tensor` for use on the device of `ctx` (`cuTensorMapEncodeTiled`, element
    /// strides 1, L2 promotion of 256 bytes, zero fill). The documented limits are checked
    /// first (an [`Error::InvalidArgument`] names the first one broken); the driver checks the
    /// rest.
    pub fn tiled(ctx: &Arc<Context>, tensor: &TiledTensor<'_>) -> Result<TensorMap> {
        validate(tensor)?;
        let rank = tensor.dims.len();
        let element_strides = [1u32; 5];
        let mut map = TensorMap { opaque: [0; 16] };
        ctx.bind()?;
        // SAFETY: the arrays hold `rank`, `rank - 1`, `rank` and at least `rank` entries as the
        // call reads them (checked by `validate`); `map` is a writable 128-byte CUtensorMap;
        // the address is only recorded, not accessed.
        check("cuTensorMapEncodeTiled", unsafe {
            sys::cuTensorMapEncodeTiled(
                &raw mut map.opaque,
                tensor.data_type.code(),
                rank as u32,
                tensor.address as *mut std::ffi::c_void,
                tensor.dims.as_ptr(),
                tensor.strides.as_ptr(),
                tensor.box_dims.as_ptr(),
                element_strides.as_ptr(),
                0,
                tensor.swizzle.code(),
                3,
                0,
            )
        })?;
        Ok(map)
    }
}

/// The documented limits of `cuTensorMapEncodeTiled` (see [`TiledTensor`]).
fn validate(tensor: &TiledTensor<'_>) -> Result<()> {
    let bad = |reason: String| Error::InvalidArgument {
        op: "TensorMap::tiled",
        reason,
    };
    let rank = tensor.dims.len();
    if !(1..=5).contains(&rank) {
        return Err(bad(format!("{rank} dimensions (1 to 5)")));
    }
    if tensor.strides.len() != rank - 1 || tensor.box_dims.len() != rank {
        return Err(bad(format!(
            "{} strides and {} box extents for {rank} dimensions",
            tensor.strides.len(),
            tensor.box_dims.len()
        )));
    }
    if !tensor.address.is_multiple_of(16) {
        return Err(bad(format!(
            "address {:#x} is not 16-byte aligned",
            tensor.address
        )));
    }
    if let Some(d) = tensor.dims.iter().find(|&&d| d == 0 || d > 1 << 32) {
        return Err(bad(format!("extent {d} (1 to 2^32)")));
    }
    if let Some(s) = tensor
        .strides
        .iter()
        .find(|&&s| !s.is_multiple_of(16) || s >= 1 << 40)
    {
        return Err(bad(format!(
            "stride {s} bytes (a multiple of 16 below 2^40)"
        )));
    }
    if let Some(b) = tensor.box_dims.iter().find(|&&b| b == 0 || b > 256) {
        return Err(bad(format!("box extent {b} (1 to 256)")));
    }
    let inner = tensor.box_dims[0] as usize * tensor.data_type.size();
    if !inner.is_multiple_of(16) || tensor.swizzle.span().is_some_and(|s| inner > s) {
        return Err(bad(format!(
            "a box row of {inner} bytes with {:?} swizzle",
            tensor.swizzle
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_driver_struct() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 128);
    }

    #[test]
    fn limits_are_checked_before_the_driver() {
        let ok = TiledTensor {
            data_type: TensorMapDataType::BF16,
            address: 0x1000,
            dims: &[4096, 4096, 2],
            strides: &[8192, 8192 * 4096],
            box_dims: &[64, 64, 1],
            swizzle: TensorMapSwizzle::B128,
        };
        assert!(validate(&ok).is_ok());
        let broken = [
            TiledTensor {
                address: 0x1008,
                ..ok
            },
            TiledTensor {
                strides: &[8200, 8192 * 4096],
                ..ok
            },
            TiledTensor {
                strides: &[8192],
                ..ok
            },
            TiledTensor {
                dims: &[4096, 0, 2],
                ..ok
            },
            TiledTensor {
                box_dims: &[128, 64, 1],
                ..ok
            },
            TiledTensor {
                box_dims: &[4, 64, 1],
                ..ok
            },
            TiledTensor {
                box_dims: &[64, 257, 1],
                ..ok
            },
            TiledTensor {
                dims: &[],
                strides: &[],
                box_dims: &[],
                ..ok
            },
        ];
        for t in broken {
            assert!(
                matches!(validate(&t), Err(Error::InvalidArgument { .. })),
                "{t:?}"
            );
        }
        // 128 bytes of box row fit the 128-byte swizzle, not the 64-byte one.
        assert!(
            validate(&TiledTensor {
                swizzle: TensorMapSwizzle::B64,
                ..ok
            })
            .is_err()
        );
    }
}
