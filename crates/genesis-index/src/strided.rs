//! Strided copies of any rank through the storage layer's copy, whose kernel (and twin) take at
//! most [`MAX_DIMS`] dimensions: the two layouts are first reduced together (dimensions of
//! size 1 dropped, neighbours that are contiguous with each other in both merged), and what
//! still has more dimensions is copied as a loop of copies of the innermost [`MAX_DIMS`].

use genesis_kernels::copy::MAX_DIMS;
use genesis_storage::{Layout, Storage};

use crate::Result;

/// `dst` and `src` (one shape) reduced together to the fewest dimensions that visit the same
/// element pairs in the same order.
pub(crate) fn coalesce_pair(dst: &Layout, src: &Layout) -> (Layout, Layout) {
    let mut shape: Vec<usize> = Vec::new();
    let (mut ds, mut ss): (Vec<isize>, Vec<isize>) = (Vec::new(), Vec::new());
    if dst.numel() == 0 {
        return (
            Layout::new(&[0], &[1], dst.offset()),
            Layout::new(&[0], &[1], src.offset()),
        );
    }
    for ((&d, &a), &b) in dst.shape().iter().zip(dst.strides()).zip(src.strides()) {
        if d == 1 {
            continue;
        }
        if let (Some(last), Some(la), Some(lb)) = (shape.last_mut(), ds.last_mut(), ss.last_mut())
            && Some(*la) == a.checked_mul(d as isize)
            && Some(*lb) == b.checked_mul(d as isize)
        {
            *last *= d;
            *la = a;
            *lb = b;
            continue;
        }
        shape.push(d);
        ds.push(a);
        ss.push(b);
    }
    (
        Layout::new(&shape, &ds, dst.offset()),
        Layout::new(&shape, &ss, src.offset()),
    )
}

/// `dst[dst_layout] = src[src_layout]` (one shape) for any rank: one storage copy when the
/// reduced rank is at most [`MAX_DIMS`], else one per index of the outer dimensions.
pub(crate) fn copy_into(
    dst: &mut Storage,
    dst_layout: &Layout,
    src: &Storage,
    src_layout: &Layout,
) -> Result<()> {
    if dst_layout.shape() != src_layout.shape() {
        // Let the storage layer report the mismatch.
        dst.copy_strided_from(dst_layout, src, src_layout)?;
        return Ok(());
    }
    // Bounds first (the sub-copies below are each checked again by the storage layer).
    dst_layout.check_bounds(dst.len())?;
    src_layout.check_bounds(src.len())?;
    let (dl, sl) = coalesce_pair(dst_layout, src_layout);
    let rank = dl.rank();
    if rank <= MAX_DIMS {
        dst.copy_strided_from(&dl, src, &sl)?;
        return Ok(());
    }
    let outer = rank - MAX_DIMS;
    let inner_shape = &dl.shape()[outer..];
    let mut idx = vec![0usize; outer];
    let count: usize = dl.shape()[..outer].iter().product();
    for _ in 0..count {
        // In range: both layouts passed `check_bounds`, so every element offset fits.
        let at = |l: &Layout| {
            let off = idx
                .iter()
                .zip(l.strides())
                .fold(l.offset() as isize, |o, (&i, &s)| o + i as isize * s);
            Layout::new(inner_shape, &l.strides()[outer..], off as usize)
        };
        dst.copy_strided_from(&at(&dl), src, &at(&sl))?;
        for d in (0..outer).rev() {
            idx[d] += 1;
            if idx[d] < dl.shape()[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// The elements of `src` under `layout` in a new contiguous storage on its device, for any
/// rank.
pub(crate) fn dense(src: &Storage, layout: &Layout) -> Result<Storage> {
    let n = layout.try_numel()?;
    let mut out = Storage::empty(n, src.dtype(), src.device())?;
    copy_into(&mut out, &Layout::contiguous(layout.shape()), src, layout)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use genesis_storage::Device;

    /// Copies of more than `MAX_DIMS` dimensions, coalescible or not.
    #[test]
    fn copies_of_any_rank() {
        let n = 1 << 12;
        let data: Vec<i32> = (0..n).collect();
        let src = Storage::from_slice(&data, Device::Cpu).unwrap();
        // Twelve dimensions of 2, transposed: nothing merges.
        let base = Layout::contiguous(&[2; 12]);
        let perm: Vec<usize> = (0..12).rev().collect();
        let t = base.permute(&perm).unwrap();
        let out = dense(&src, &t).unwrap();
        let want: Vec<i32> = t.indices().map(|i| data[i]).collect();
        assert_eq!(out.to_vec::<i32>().unwrap(), want);
        // Sixty-four dimensions, all but two of size 1: one plain copy.
        let mut shape = vec![1usize; 64];
        shape[10] = 64;
        shape[40] = 64;
        let l = Layout::contiguous(&shape);
        let (a, b) = coalesce_pair(&l, &l);
        assert_eq!(a.shape(), &[4096]);
        assert_eq!(b.strides(), &[1]);
        assert_eq!(dense(&src, &l).unwrap().to_vec::<i32>().unwrap(), data);
        // Writing through a rank-12 destination.
        let mut dst = Storage::zeros(n as usize, genesis_storage::DType::I32, Device::Cpu).unwrap();
        copy_into(&mut dst, &t, &src, &Layout::contiguous(t.shape())).unwrap();
        let back = dense(&dst, &t).unwrap();
        assert_eq!(back.to_vec::<i32>().unwrap(), data);
    }
}
