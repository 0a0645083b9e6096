//! Boolean-mask kernels (`kernels/mask.cu`) and their CPU twins: compaction (`masked_select`:
//! the elements where the mask is set, in row-major order) and `masked_fill`, on elements of
//! 1, 2, 4 or 8 bytes (a copy of bytes, so the twins are exact).

use crate::{Error, Result};

/// Elements per tile of the compaction kernels (`MK_TILE`).
pub const TILE: usize = 256 * 16;

fn check_size(op: &'static str, elem_bytes: usize) -> Result<()> {
    if matches!(elem_bytes, 1 | 2 | 4 | 8) {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op,
            reason: format!("{elem_bytes}-byte elements"),
        })
    }
}

/// How many bytes of `mask` are non-zero. Counts in `u8` lanes over chunks of 255 bytes (a
/// lane cannot overflow within a chunk), which the compiler vectorises, unlike a
/// `filter().count()`.
pub fn count_nonzero(mask: &[u8]) -> usize {
    mask.chunks(255)
        .map(|c| usize::from(c.iter().fold(0u8, |s, &b| s + u8::from(b != 0))))
        .sum()
}

/// The CPU twin of compaction: the `elem_bytes`-byte elements of `src` whose mask byte is
/// non-zero, in order.
pub fn masked_select(src: &[u8], mask: &[u8], elem_bytes: usize) -> Result<Vec<u8>> {
    check_size("masked_select", elem_bytes)?;
    if src.len() != mask.len() * elem_bytes {
        return Err(Error::LengthMismatch {
            op: "masked_select",
            expected: mask.len() * elem_bytes,
            got: src.len(),
        });
    }
    let count = count_nonzero(mask);
    let out = match elem_bytes {
        1 => select_n::<1>(src, mask, count),
        2 => select_n::<2>(src, mask, count),
        4 => select_n::<4>(src, mask, count),
        _ => select_n::<8>(src, mask, count),
    };
    Ok(out)
}

/// Compaction of `N`-byte elements without a branch per element: every element is written at
/// the next free place, which advances only past the selected ones (one spare place at the end
/// takes the last unselected writes).
fn select_n<const N: usize>(src: &[u8], mask: &[u8], count: usize) -> Vec<u8> {
    let mut out = vec![0u8; (count + 1) * N];
    let mut j = 0;
    for (e, &m) in src.chunks_exact(N).zip(mask) {
        out[j..j + N].copy_from_slice(e);
        j += N * usize::from(m != 0);
    }
    out.truncate(count * N);
    out
}

/// The CPU twin of `masked_fill`: every element of `dst` whose mask byte is non-zero becomes
/// `value` (`elem_bytes` bytes).
pub fn masked_fill(dst: &mut [u8], mask: &[u8], value: &[u8]) -> Result<()> {
    check_size("masked_fill", value.len())?;
    if dst.len() != mask.len() * value.len() {
        return Err(Error::LengthMismatch {
            op: "masked_fill",
            expected: mask.len() * value.len(),
            got: dst.len(),
        });
    }
    match value.len() {
        1 => fill_n::<1>(dst, mask, value),
        2 => fill_n::<2>(dst, mask, value),
        4 => fill_n::<4>(dst, mask, value),
        _ => fill_n::<8>(dst, mask, value),
    }
    Ok(())
}

/// `masked_fill` of `N`-byte elements, choosing each element's new bytes without a branch.
/// `masked_fill` calls it with `N == value.len()` (its match), and `chunks_exact_mut(N)` yields
/// only `N`-byte chunks: neither conversion can fail.
fn fill_n<const N: usize>(dst: &mut [u8], mask: &[u8], value: &[u8]) {
    let v: [u8; N] = value.try_into().expect("checked size");
    for (e, &m) in dst.chunks_exact_mut(N).zip(mask) {
        let old: [u8; N] = (&*e).try_into().expect("N-byte chunks");
        e.copy_from_slice(if m != 0 { &v } else { &old });
    }
}

#[cfg(feature = "cuda")]
pub use gpu::*;

#[cfg(feature = "cuda")]
mod gpu {
    use std::ffi::c_void;

    use genesis_cuda::{DeviceSpan, DeviceSpanMut, Kernel, LaunchConfig, Stream};

    use super::{TILE, check_size};
    use crate::{Error, Result, images};

    /// `Err(LengthMismatch)` when `got < need`.
    fn at_least(op: &'static str, need: usize, got: usize) -> Result<()> {
        if got < need {
            return Err(Error::LengthMismatch {
                op,
                expected: need,
                got,
            });
        }
        Ok(())
    }

    /// Device workspace of a compaction of `n` elements: tile counts (u32), the sums of groups
    /// of 8 tiles (u32) and their offsets (u64), the total (u64) and the mask packed into bits,
    /// in bytes.
    pub fn compaction_workspace_bytes(n: usize) -> usize {
        let w = Workspace::at(0, n);
        w.bits as usize + w.tiles * TILE / 8
    }

    /// Where the parts of a compaction workspace are.
    struct Workspace {
        tiles: usize,
        groups: usize,
        counts: u64,
        group_sums: u64,
        offsets: u64,
        total: u64,
        bits: u64,
    }

    /// Tiles per group (`MK_GROUP`): the blocks of `mask_count`.
    const GROUP: usize = 8;

    impl Workspace {
        fn at(workspace: u64, n: usize) -> Workspace {
            let tiles = n.div_ceil(TILE).max(1);
            let groups = tiles.div_ceil(GROUP);
            let group_sums = workspace + (tiles * 4).next_multiple_of(16) as u64;
            let offsets = group_sums + (groups * 4).next_multiple_of(16) as u64;
            let total = offsets + (groups * 8) as u64;
            Workspace {
                tiles,
                groups,
                counts: workspace,
                group_sums,
                offsets,
                total,
                bits: (total + 8).next_multiple_of(16),
            }
        }
    }

    /// The first two launches of a compaction: counts the set mask bytes of each tile and
    /// scans them; the total (a u64) lands in the workspace at the byte offset returned, which
    /// the caller reads to size the output before [`compact`]. The workspace must hold
    /// [`compaction_workspace_bytes`] of the mask's length.
    pub fn count_and_scan(
        stream: &Stream,
        mask: DeviceSpan<'_, u8>,
        workspace: DeviceSpanMut<'_, u8>,
    ) -> Result<usize> {
        let n = mask.len();
        at_least(
            "mask workspace",
            compaction_workspace_bytes(n),
            workspace.len(),
        )?;
        if !workspace.is_aligned_to(16) {
            return Err(Error::Unsupported {
                op: "mask workspace",
                reason: "not 16-byte aligned".into(),
            });
        }
        let (mask, workspace) = (mask.addr(), workspace.addr());
        let Workspace {
            tiles,
            groups,
            counts,
            group_sums,
            offsets,
            total,
            bits,
        } = Workspace::at(workspace, n);
        let ctx = stream.context();
        let count = Kernel::get(ctx, &images::MASK, "mask_count")?;
        let (mut m, mut n64, mut t64, mut c, mut g, mut b) =
            (mask, n as u64, tiles as u64, counts, group_sums, bits);
        let mut params: [*mut c_void; 6] = [
            (&raw mut m).cast(),
            (&raw mut n64).cast(),
            (&raw mut t64).cast(),
            (&raw mut c).cast(),
            (&raw mut g).cast(),
            (&raw mut b).cast(),
        ];
        // SAFETY: the parameters match `mask_count(const u8*, u64, u64, u32*, u32*, u16*)`; one
        // warp per tile, a group of tiles a block; the mask holds `n` bytes and the workspace
        // the parts laid out by `Workspace::at` (checked).
        unsafe {
            count.launch(
                stream,
                LaunchConfig::linear(groups as u32, 256),
                &mut params,
            )?
        };
        let scan = Kernel::get(ctx, &images::MASK, "mask_scan")?;
        let (mut c, mut t64, mut o, mut tot) = (group_sums, groups as u64, offsets, total);
        let mut params: [*mut c_void; 4] = [
            (&raw mut c).cast(),
            (&raw mut t64).cast(),
            (&raw mut o).cast(),
            (&raw mut tot).cast(),
        ];
        // SAFETY: the parameters match `mask_scan(const u32*, u64, u64*, u64*)`; the scan
        // waits for the count (`pdl_wait`) before it reads or writes anything.
        unsafe { scan.launch_dependent(stream, LaunchConfig::linear(1, 1024), &mut params)? };
        Ok((total - workspace) as usize)
    }

    /// The last launch of a compaction: writes the selected `elem_bytes`-byte elements of `src`
    /// to `out` in order (the mask as [`count_and_scan`] left it in the workspace, as bits: a
    /// thread whose 16 bits are clear reads none of its data).
    ///
    /// # Safety
    ///
    /// `workspace` holds what [`count_and_scan`] of `n` mask bytes wrote, queued before on the
    /// same stream, with `src` holding `n` elements, and `out` holds at least the total the scan
    /// found (`elem_bytes` each): the kernel writes that many, which no check here can see.
    pub unsafe fn compact(
        stream: &Stream,
        elem_bytes: usize,
        src: DeviceSpan<'_, u8>,
        workspace: DeviceSpan<'_, u8>,
        out: DeviceSpanMut<'_, u8>,
    ) -> Result<()> {
        check_size("masked_select", elem_bytes)?;
        let n = src.len() / elem_bytes;
        if n == 0 {
            return Ok(());
        }
        at_least(
            "mask workspace",
            compaction_workspace_bytes(n),
            workspace.len(),
        )?;
        let (src, workspace, out) = (src.addr(), workspace.addr(), out.addr());
        let Workspace {
            tiles,
            counts,
            offsets,
            bits,
            ..
        } = Workspace::at(workspace, n);
        let name = match elem_bytes {
            1 => "mask_compact_e1",
            2 => "mask_compact_e2",
            4 => "mask_compact_e4",
            _ => "mask_compact_e8",
        };
        let kernel = Kernel::get(stream.context(), &images::MASK, name)?;
        let (mut s, mut m, mut n64, mut c, mut o, mut d) =
            (src, bits, n as u64, counts, offsets, out);
        let mut params: [*mut c_void; 6] = [
            (&raw mut s).cast(),
            (&raw mut m).cast(),
            (&raw mut n64).cast(),
            (&raw mut c).cast(),
            (&raw mut o).cast(),
            (&raw mut d).cast(),
        ];
        // SAFETY: the parameters match `mask_compact_e<E>(const T*, const u16*, u64, const
        // u32*, const u64*, T*)`; one block per tile, as in `count_and_scan`.
        unsafe { kernel.launch(stream, LaunchConfig::linear(tiles as u32, 256), &mut params)? };
        Ok(())
    }

    /// The last launch of a `nonzero`: writes the row-major positions of the set mask bytes to
    /// `out` (int64), in order.
    ///
    /// # Safety
    ///
    /// As [`compact`] for a mask of `n` bytes, with `out` holding the total int64.
    pub unsafe fn positions(
        stream: &Stream,
        n: usize,
        workspace: DeviceSpan<'_, u8>,
        out: DeviceSpanMut<'_, i64>,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        at_least(
            "mask workspace",
            compaction_workspace_bytes(n),
            workspace.len(),
        )?;
        let (workspace, out) = (workspace.addr(), out.addr());
        let Workspace {
            tiles,
            counts,
            offsets,
            bits,
            ..
        } = Workspace::at(workspace, n);
        let kernel = Kernel::get(stream.context(), &images::MASK, "mask_positions")?;
        let (mut m, mut n64, mut c, mut o, mut d) = (bits, n as u64, counts, offsets, out);
        let mut params: [*mut c_void; 5] = [
            (&raw mut m).cast(),
            (&raw mut n64).cast(),
            (&raw mut c).cast(),
            (&raw mut o).cast(),
            (&raw mut d).cast(),
        ];
        // SAFETY: the parameters match `mask_positions(const u16*, u64, const u32*, const u64*,
        // i64*)`; one
        // block per tile, as in `count_and_scan`.
        unsafe { kernel.launch(stream, LaunchConfig::linear(tiles as u32, 256), &mut params)? };
        Ok(())
    }

    /// Queues `dst[i] = value` where `mask[i] != 0`, for `i < n` (`value` is one element's
    /// bytes, 1, 2, 4 or 8 of them). One 16-byte vector a thread, data and mask loaded
    /// together; a vector is written back unless its whole 32-byte sector has no set mask byte,
    /// so sparse masks write less than the whole tensor. `dst` holds `mask.len()` elements.
    pub fn fill(
        stream: &Stream,
        dst: DeviceSpanMut<'_, u8>,
        mask: DeviceSpan<'_, u8>,
        value: &[u8],
    ) -> Result<()> {
        check_size("masked_fill", value.len())?;
        let n = mask.len();
        if dst.len() != n * value.len() {
            return Err(Error::LengthMismatch {
                op: "masked_fill",
                expected: n * value.len(),
                got: dst.len(),
            });
        }
        if n == 0 {
            return Ok(());
        }
        if !dst.is_aligned_to(value.len() as u64) {
            return Err(Error::Unsupported {
                op: "masked_fill",
                reason: format!("destination not aligned to {} bytes", value.len()),
            });
        }
        let (dst, mask) = (dst.addr(), mask.addr());
        let name = match value.len() {
            1 => "mask_fill_e1",
            2 => "mask_fill_e2",
            4 => "mask_fill_e4",
            _ => "mask_fill_e8",
        };
        let kernel = Kernel::get(stream.context(), &images::MASK, name)?;
        let mut v = [0u8; 8];
        v[..value.len()].copy_from_slice(value);
        let mut v64 = u64::from_le_bytes(v);
        let (mut d, mut m, mut n64) = (dst, mask, n as u64);
        let mut params: [*mut c_void; 4] = [
            (&raw mut d).cast(),
            (&raw mut m).cast(),
            (&raw mut n64).cast(),
            (&raw mut v64).cast(),
        ];
        // One 16-byte vector a thread (a grid-stride loop also covers unaligned operands).
        let per = (16 / value.len()) as u64;
        let blocks = (n as u64).div_ceil(256 * per).clamp(1, (1 << 31) - 1) as u32;
        // SAFETY: the parameters match `mask_fill_e<E>(T*, const u8*, u64, T)`: the value
        // is passed in the first `E` bytes of an 8-byte little-endian word, which is how the
        // driver reads a `T` argument from the pointed-to bytes; `dst` holds `n` elements and
        // `mask` `n` bytes (checked).
        unsafe { kernel.launch(stream, LaunchConfig::linear(blocks, 256), &mut params)? };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_nonzero_matches_a_plain_count() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0usize, 1, 254, 255, 256, 509, 510, 511, 4096, 100_003] {
            // Any non-zero byte counts (not only 1), including 255 in a full 255-byte chunk.
            let m: Vec<u8> = (0..n)
                .map(|i| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    if i % 7 == 0 { 255 } else { (state % 3) as u8 }
                })
                .collect();
            assert_eq!(
                count_nonzero(&m),
                m.iter().filter(|&&b| b != 0).count(),
                "n = {n}"
            );
        }
        assert_eq!(count_nonzero(&[255u8; 255]), 255);
        assert_eq!(count_nonzero(&[1u8; 1000]), 1000);
    }

    #[test]
    fn twins_select_and_fill_in_order() {
        let src: Vec<u8> = (0..20u8).collect();
        let mask = [1u8, 0, 1, 1, 0];
        assert_eq!(
            masked_select(&src, &mask, 4).unwrap(),
            [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15]
        );
        let mut dst = src.clone();
        masked_fill(&mut dst, &mask, &[9, 9, 9, 9]).unwrap();
        assert_eq!(&dst[..8], &[9, 9, 9, 9, 4, 5, 6, 7]);
        assert!(masked_select(&src, &mask, 3).is_err());
        assert!(masked_select(&src[..19], &mask, 4).is_err());
    }

    #[test]
    fn twins_match_a_plain_loop_for_every_size_and_density() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for es in [1usize, 2, 4, 8] {
            for (n, every) in [(0, 2), (1, 1), (7, 2), (1000, 3), (1000, 1), (999, 1000)] {
                let src: Vec<u8> = (0..n * es).map(|_| next() as u8).collect();
                // Mask bytes: any non-zero value counts as set.
                let mask: Vec<u8> = (0..n)
                    .map(|_| {
                        let r = next();
                        if r.is_multiple_of(every) {
                            (r >> 8) as u8 | 1
                        } else {
                            0
                        }
                    })
                    .collect();
                let want: Vec<u8> = src
                    .chunks_exact(es)
                    .zip(&mask)
                    .filter(|(_, m)| **m != 0)
                    .flat_map(|(e, _)| e.to_vec())
                    .collect();
                assert_eq!(
                    masked_select(&src, &mask, es).unwrap(),
                    want,
                    "{es} {n} {every}"
                );
                let value: Vec<u8> = (0..es).map(|i| 0xa0 + i as u8).collect();
                let mut got = src.clone();
                masked_fill(&mut got, &mask, &value).unwrap();
                for (k, (g, o)) in got.chunks_exact(es).zip(src.chunks_exact(es)).enumerate() {
                    let w: &[u8] = if mask[k] != 0 { &value } else { o };
                    assert_eq!(g, w, "fill {es} {n} {every} at {k}");
                }
            }
        }
    }
}
