//! Structured fills of `kernels/copy.cu`. `tril` / `triu` of a contiguous `[batch, rows,
//! cols]` array (`triangle_e{1,2,4,8}`): element `(b, i, j)` is kept when `j - i <= k`
//! (lower) or `j - i >= k` (upper), else its bits are zeroed (0, +0.0 or false in every dtype).
//! The kernels move bytes, so they are per element size; [`triangle`] is the CPU twin (bit for
//! bit). `one_hot_i64`: the one-hot rows of int64 classes ([`one_hot`], its twin).

use crate::{Error, Result};

/// The shape of a triangle pass: `n` elements of `elem` bytes, seen as `[n / (rows * cols),
/// rows, cols]`, the diagonal `k`, and which side is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triangle {
    /// Rows of each matrix.
    pub rows: usize,
    /// Columns of each matrix.
    pub cols: usize,
    /// The diagonal: 0 the main one, positive above it, negative below.
    pub k: i64,
    /// Keep `j - i <= k` (`tril`) rather than `j - i >= k` (`triu`).
    pub lower: bool,
}

impl Triangle {
    /// Whether element `q` (row-major over `[.., rows, cols]`) is kept.
    #[inline]
    pub fn keeps(&self, q: usize) -> bool {
        let line = q / self.cols;
        let d = (q - line * self.cols) as i64 - (line % self.rows) as i64;
        if self.lower { d <= self.k } else { d >= self.k }
    }
}

fn check(t: &Triangle, elem: usize, src: usize, dst: usize) -> Result<()> {
    if !matches!(elem, 1 | 2 | 4 | 8) {
        return Err(Error::Unsupported {
            op: "triangle",
            reason: format!("element size {elem}"),
        });
    }
    if src != dst {
        return Err(Error::LengthMismatch {
            op: "triangle",
            expected: src,
            got: dst,
        });
    }
    let per = t.rows.saturating_mul(t.cols);
    let whole = src.is_multiple_of(elem)
        && if per == 0 {
            src == 0
        } else {
            (src / elem).is_multiple_of(per)
        };
    if !whole {
        return Err(Error::Unsupported {
            op: "triangle",
            reason: format!("{} bytes are not whole {}x{} matrices", src, t.rows, t.cols),
        });
    }
    Ok(())
}

/// The CPU twin: `dst` is `src` (bytes of `elem`-byte elements) with the elements outside the
/// triangle zeroed.
pub fn triangle(t: &Triangle, elem: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    check(t, elem, src.len(), dst.len())?;
    for (q, (d, s)) in dst
        .chunks_exact_mut(elem)
        .zip(src.chunks_exact(elem))
        .enumerate()
    {
        if t.keeps(q) {
            d.copy_from_slice(s);
        } else {
            d.fill(0);
        }
    }
    Ok(())
}

/// Queues the triangle pass on `stream` (see [`triangle`]).
#[cfg(feature = "cuda")]
pub fn gpu_triangle(
    stream: &genesis_cuda::Stream,
    t: &Triangle,
    elem: usize,
    src: genesis_cuda::DeviceSpan<'_, u8>,
    dst: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    check(t, elem, src.len(), dst.len())?;
    let n = src.len() / elem;
    if n == 0 {
        return Ok(());
    }
    let name = match elem {
        1 => "triangle_e1",
        2 => "triangle_e2",
        4 => "triangle_e4",
        _ => "triangle_e8",
    };
    let kernel = Kernel::get(stream.context(), &crate::images::COPY, name)?;
    let (mut ps, mut pd) = (src.addr(), dst.addr());
    let per_vector = 16 / elem;
    let vec = ps % 16 == 0 && pd % 16 == 0 && t.cols.is_multiple_of(per_vector);
    let items = if vec { n / per_vector } else { n };
    let threads = 256u32;
    let sms = u64::from(stream.context().multiprocessors());
    let blocks = (items as u64)
        .div_ceil(u64::from(threads))
        .clamp(1, sms * 16);
    let (mut n64, mut rows, mut cols) = (n as u64, t.rows as u64, t.cols as u64);
    let (mut k, mut lower, mut v) = (t.k, i32::from(t.lower), i32::from(vec));
    let mut params: [*mut c_void; 8] = [
        (&raw mut ps).cast(),
        (&raw mut pd).cast(),
        (&raw mut n64).cast(),
        (&raw mut rows).cast(),
        (&raw mut cols).cast(),
        (&raw mut k).cast(),
        (&raw mut lower).cast(),
        (&raw mut v).cast(),
    ];
    let config = LaunchConfig {
        grid: (blocks as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `triangle_e<E>(const T*, T*, u64, u64, u64, i64, int, int)`;
    // both spans hold `n` elements of `elem` bytes (checked).
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

/// The CPU twin of `one_hot_i64`: row `r` of `out` (`idx.len()` rows of `classes`) is 1 at
/// column `idx[r]` and 0 elsewhere. A class outside `0..classes` is
/// [`Error::IndexOutOfRange`] naming the first such row; nothing is written then.
pub fn one_hot(idx: &[i64], classes: usize, out: &mut [i64]) -> Result<()> {
    let want = idx
        .len()
        .checked_mul(classes)
        .ok_or_else(|| Error::Unsupported {
            op: "one_hot",
            reason: "the output's size overflows".into(),
        })?;
    if out.len() != want {
        return Err(Error::LengthMismatch {
            op: "one_hot",
            expected: want,
            got: out.len(),
        });
    }
    if let Some((position, &value)) = idx
        .iter()
        .enumerate()
        .find(|(_, k)| !(0..classes as i64).contains(k))
    {
        return Err(Error::IndexOutOfRange {
            op: "one_hot",
            position,
            value,
            size: classes as i64,
        });
    }
    for (row, &k) in out.chunks_exact_mut(classes.max(1)).zip(idx) {
        row.fill(0);
        row[k as usize] = 1;
    }
    Ok(())
}

/// Queues `one_hot_i64` on `stream` (see [`one_hot`]); the first row with a class outside
/// `0..classes` lands in `bad[0]`, which the caller sets to `u64::MAX` first and reads back.
#[cfg(feature = "cuda")]
pub fn gpu_one_hot(
    stream: &genesis_cuda::Stream,
    idx: genesis_cuda::DeviceSpan<'_, i64>,
    classes: usize,
    out: genesis_cuda::DeviceSpanMut<'_, i64>,
    bad: genesis_cuda::DeviceSpanMut<'_, u64>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;
    let rows = idx.len();
    if rows.checked_mul(classes) != Some(out.len()) {
        return Err(Error::LengthMismatch {
            op: "one_hot",
            expected: rows.saturating_mul(classes),
            got: out.len(),
        });
    }
    if bad.is_empty() {
        return Err(Error::LengthMismatch {
            op: "one_hot",
            expected: 1,
            got: 0,
        });
    }
    // Zero classes still runs: every row is then out of range (and writes nothing).
    if rows == 0 {
        return Ok(());
    }
    let kernel = Kernel::get(stream.context(), &crate::images::COPY, "one_hot_i64")?;
    let sms = u64::from(stream.context().multiprocessors());
    // Eight rows (warps) a block of 256 threads.
    let blocks = (rows as u64).div_ceil(8).clamp(1, sms * 32);
    let (mut pi, mut r, mut c, mut po, mut pb) = (
        idx.addr(),
        rows as u64,
        classes as u64,
        out.addr(),
        bad.addr(),
    );
    let mut params: [*mut c_void; 5] = [
        (&raw mut pi).cast(),
        (&raw mut r).cast(),
        (&raw mut c).cast(),
        (&raw mut po).cast(),
        (&raw mut pb).cast(),
    ];
    let config = LaunchConfig {
        grid: (blocks as u32, 1, 1),
        block: (256, 1, 1),
        shared_bytes: 0,
    };
    // SAFETY: the parameters match `one_hot_i64(const int64_t*, u64, u64, int64_t*, unsigned
    // long long*)`; `idx` holds `rows` classes, `out` `rows * classes` elements (checked) and
    // `bad` one word; the kernel writes rows only inside `out`.
    unsafe { kernel.launch(stream, config, &mut params)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_triangle_of_each_matrix() {
        let t = Triangle {
            rows: 2,
            cols: 3,
            k: 0,
            lower: true,
        };
        let src: Vec<u8> = (1..=12).collect();
        let mut dst = vec![9u8; 12];
        triangle(&t, 1, &src, &mut dst).unwrap();
        assert_eq!(dst, [1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0]);
        let u = Triangle {
            k: 1,
            lower: false,
            ..t
        };
        triangle(&u, 1, &src, &mut dst).unwrap();
        assert_eq!(dst, [0, 2, 3, 0, 0, 6, 0, 8, 9, 0, 0, 12]);
        assert!(triangle(&t, 3, &src, &mut dst).is_err());
        assert!(triangle(&t, 1, &src[..5], &mut dst[..5]).is_err());
    }

    #[test]
    fn one_hot_rows_and_bad_classes() {
        let mut out = [9i64; 6];
        one_hot(&[2, 0], 3, &mut out).unwrap();
        assert_eq!(out, [0, 0, 1, 1, 0, 0]);
        let mut untouched = [9i64; 6];
        let e = one_hot(&[1, 3], 3, &mut untouched).unwrap_err();
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                position: 1,
                value: 3,
                size: 3,
                ..
            }
        ));
        assert!(one_hot(&[-1, 0], 3, &mut untouched).is_err());
        assert_eq!(untouched, [9; 6], "nothing written");
        assert!(one_hot(&[0], 3, &mut out).is_err(), "wrong output length");
    }
}
