//! Sorting along the last axis of `[rows, r]` (`kernels/sort.cu`): values and int64 indices,
//! ascending or descending, stable (equal values keep their order, as PyTorch's
//! `stable=True`), and its CPU twin. NaN sorts after every number (first when descending) and
//! -0.0 equals +0.0, as in PyTorch; the values are the input's own bits, read at the sorted
//! positions, so the kernels and the twin agree exactly.
//!
//! Every entry point keeps the first `k` of each sorted row (`k == r` for a whole sort, fewer
//! for PyTorch's `topk`): the kernels write only those.
//!
//! Speed: rows of at most [`SMEM_ROW`] elements sort on chip, one block a row (a bitonic
//! network; the row read once and written once). Rows of [`REG_ROW_MIN`] elements or more
//! with keys of at most 32 bits (f32, f16, bf16, i32) hold each key packed with its position
//! in one word, eight words a thread in registers, and exchange partners by warp shuffles
//! (shared memory only between warps); others run the network in shared memory. Longer rows
//! run the network in global memory, one launch a stage (`log2(n) * (log2(n) + 1) / 2`
//! launches over the whole array): correct for any length, far slower than a radix sort.

use std::cmp::Ordering;

use crate::{Element, Error, Result};

/// Longest row sorted in shared memory by one block (`SO_SMEM`).
pub const SMEM_ROW: usize = 2048;

/// Shortest padded row sorted in registers (`RG_MIN`: a full warp of eight-word threads).
pub const REG_ROW_MIN: usize = 256;

/// The order of two values of a row: NaN after everything (NaNs equal), -0.0 equal to +0.0.
fn order<T: Element>(a: T, b: T) -> Ordering {
    if T::IS_FLOAT {
        let (x, y) = (a.to_f64(), b.to_f64());
        match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        }
    } else {
        a.to_i64().cmp(&b.to_i64())
    }
}

/// CPU twin: sorts each of the `rows` rows of `r` elements of `input` (ascending, or
/// descending), stably, and writes the first `k` of each sorted row into `values` and their
/// positions in the row into `indices` (`rows * k` of each). Nothing is written on error.
pub fn sort<T: Element>(
    input: &[T],
    rows: usize,
    r: usize,
    k: usize,
    descending: bool,
    values: &mut [T],
    indices: &mut [i64],
) -> Result<()> {
    let (n, kept) = sizes(rows, r, k)?;
    for (len, want) in [
        (input.len(), n),
        (values.len(), kept),
        (indices.len(), kept),
    ] {
        if len != want {
            return Err(Error::LengthMismatch {
                op: "sort",
                expected: want,
                got: len,
            });
        }
    }
    let mut pos: Vec<usize> = Vec::with_capacity(r);
    for row in 0..rows {
        let line = &input[row * r..(row + 1) * r];
        pos.clear();
        pos.extend(0..r);
        if descending {
            pos.sort_by(|&a, &b| order(line[b], line[a]));
        } else {
            pos.sort_by(|&a, &b| order(line[a], line[b]));
        }
        for (at, &p) in pos.iter().take(k).enumerate() {
            values[row * k + at] = line[p];
            indices[row * k + at] = p as i64;
        }
    }
    Ok(())
}

/// Elements of the input and of each output for `rows` rows of `r` keeping `k`.
fn sizes(rows: usize, r: usize, k: usize) -> Result<(usize, usize)> {
    if k > r {
        return Err(Error::Unsupported {
            op: "sort",
            reason: format!("keeping {k} elements of rows of {r}"),
        });
    }
    let n = rows.checked_mul(r).ok_or(Error::Unsupported {
        op: "sort",
        reason: "shape overflows".into(),
    })?;
    Ok((n, rows * k))
}

/// How the kernels sort `[rows, r]`: the row padded to `npad` (a power of two), in shared
/// memory or through a global workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortPlan {
    /// Rows.
    pub rows: usize,
    /// Elements a row.
    pub r: usize,
    /// The row's length padded to a power of two.
    pub npad: usize,
}

impl SortPlan {
    /// The plan for `rows` rows of `r` elements (rows below 2^32 elements).
    pub fn new(rows: usize, r: usize) -> Result<SortPlan> {
        if r >= 1 << 32 {
            return Err(Error::Unsupported {
                op: "sort",
                reason: format!("rows of {r} elements (below 2^32)"),
            });
        }
        Ok(SortPlan {
            rows,
            r,
            npad: r.max(1).next_power_of_two(),
        })
    }

    /// Whether one block sorts each row in shared memory.
    pub fn in_shared_memory(&self) -> bool {
        self.npad <= SMEM_ROW
    }

    /// Bytes of device workspace the sort needs: none in shared memory, else a key (8 bytes)
    /// and a position (4) per padded element.
    pub fn workspace_bytes(&self) -> Result<usize> {
        if self.in_shared_memory() {
            return Ok(0);
        }
        self.rows
            .checked_mul(self.npad)
            .and_then(|n| n.checked_mul(12))
            .ok_or(Error::Unsupported {
                op: "sort",
                reason: "workspace overflows".into(),
            })
    }
}

/// Queues the sort of `input` (`rows` rows of `r` elements), the first `k` of each sorted row
/// into `values` and `indices` (`rows * k` of each), on `stream`, using `workspace` ([`SortPlan::workspace_bytes`]). Every span is checked before
/// anything is launched.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub fn gpu_sort<T: Element>(
    stream: &genesis_cuda::Stream,
    input: genesis_cuda::DeviceSpan<'_, T>,
    rows: usize,
    r: usize,
    k: usize,
    descending: bool,
    values: genesis_cuda::DeviceSpanMut<'_, T>,
    indices: genesis_cuda::DeviceSpanMut<'_, i64>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    // Shared-memory rows, registers rows (keys of at most 32 bits), prep and finish.
    let names = match T::NAME {
        "f32" => [
            "sort_rows_f32",
            "sort_rows8_f32",
            "sort_prep_f32",
            "sort_finish_f32",
        ],
        "f16" => [
            "sort_rows_f16",
            "sort_rows8_f16",
            "sort_prep_f16",
            "sort_finish_f16",
        ],
        "bf16" => [
            "sort_rows_bf16",
            "sort_rows8_bf16",
            "sort_prep_bf16",
            "sort_finish_bf16",
        ],
        "i32" => [
            "sort_rows_i32",
            "sort_rows8_i32",
            "sort_prep_i32",
            "sort_finish_i32",
        ],
        "i64" => ["sort_rows_i64", "", "sort_prep_i64", "sort_finish_i64"],
        "f64" => ["sort_rows_f64", "", "sort_prep_f64", "sort_finish_f64"],
        other => {
            return Err(Error::Unsupported {
                op: "sort",
                reason: format!("element type {other}"),
            });
        }
    };
    let plan = SortPlan::new(rows, r)?;
    let (n, kept) = sizes(rows, r, k)?;
    for (what, len, want) in [
        ("sort input", input.len(), n),
        ("sort values", values.len(), kept),
        ("sort indices", indices.len(), kept),
    ] {
        if len < want {
            return Err(Error::LengthMismatch {
                op: what,
                expected: want,
                got: len,
            });
        }
    }
    let need = plan.workspace_bytes()?;
    if workspace.len() < need {
        return Err(Error::LengthMismatch {
            op: "sort workspace",
            expected: need,
            got: workspace.len(),
        });
    }
    if kept == 0 {
        return Ok(());
    }
    let ctx = stream.context();
    let (mut pin, mut pv, mut pi) = (input.addr(), values.addr(), indices.addr());
    let mut desc = i32::from(descending);
    let (mut rows64, mut r64, mut k64) = (rows as u64, r as u64, k as u64);
    if plan.in_shared_memory() {
        if rows > i32::MAX as usize {
            return Err(Error::Unsupported {
                op: "sort",
                reason: format!("{rows} rows (below 2^31)"),
            });
        }
        let mut npad = plan.npad as u32;
        let in_registers = plan.npad >= REG_ROW_MIN && !names[1].is_empty();
        let (kernel, config) = if in_registers {
            // Eight words a thread; the kernel's shared memory is static.
            let kernel = Kernel::get(ctx, &crate::images::SORT, names[1])?;
            let config = LaunchConfig {
                grid: (rows as u32, 1, 1),
                block: ((plan.npad / 8) as u32, 1, 1),
                shared_bytes: 0,
            };
            (kernel, config)
        } else {
            let kernel = Kernel::get(ctx, &crate::images::SORT, names[0])?;
            let config = LaunchConfig {
                grid: (rows as u32, 1, 1),
                block: ((plan.npad / 2).clamp(32, 512) as u32, 1, 1),
                shared_bytes: (plan.npad * 12) as u32,
            };
            (kernel, config)
        };
        let mut params: [*mut c_void; 7] = [
            (&raw mut pin).cast(),
            (&raw mut pv).cast(),
            (&raw mut pi).cast(),
            (&raw mut r64).cast(),
            (&raw mut npad).cast(),
            (&raw mut desc).cast(),
            (&raw mut k64).cast(),
        ];
        // SAFETY: the parameters match `sort_rows_<T>` and `sort_rows8_<T>`; the input holds
        // `rows * r` elements and the outputs `rows * k` (checked); the shared memory holds
        // `npad` keys and positions (dynamic for `sort_rows`, static in `sort_rows8`, whose
        // block has `npad / 8` threads of eight words).
        unsafe { kernel.launch(stream, config, &mut params)? };
        return Ok(());
    }
    let total = (rows * plan.npad) as u64;
    let cap = u64::from(ctx.multiprocessors().max(1)) * 32;
    let grid = LaunchConfig::linear(total.div_ceil(256).clamp(1, cap) as u32, 256);
    let mut key = workspace.addr();
    let mut pos = key + (rows * plan.npad * 8) as u64;
    let mut npad = plan.npad as u64;
    let prep = Kernel::get(ctx, &crate::images::SORT, names[2])?;
    let mut params: [*mut c_void; 7] = [
        (&raw mut pin).cast(),
        (&raw mut key).cast(),
        (&raw mut pos).cast(),
        (&raw mut rows64).cast(),
        (&raw mut r64).cast(),
        (&raw mut npad).cast(),
        (&raw mut desc).cast(),
    ];
    // SAFETY: the parameters match `sort_prep_<T>`; the workspace holds `rows * npad` keys
    // and positions (checked).
    unsafe { prep.launch(stream, grid, &mut params)? };
    let step = Kernel::get(ctx, &crate::images::SORT, "sort_step")?;
    let mut k = 2u64;
    while k <= npad {
        let mut j = k / 2;
        while j > 0 {
            let (mut jj, mut kk) = (j, k);
            let mut params: [*mut c_void; 6] = [
                (&raw mut key).cast(),
                (&raw mut pos).cast(),
                (&raw mut rows64).cast(),
                (&raw mut npad).cast(),
                (&raw mut jj).cast(),
                (&raw mut kk).cast(),
            ];
            // SAFETY: the parameters match `sort_step`, over the workspace written above.
            unsafe { step.launch(stream, grid, &mut params)? };
            j /= 2;
        }
        k *= 2;
    }
    let finish = Kernel::get(ctx, &crate::images::SORT, names[3])?;
    let mut params: [*mut c_void; 8] = [
        (&raw mut pin).cast(),
        (&raw mut pos).cast(),
        (&raw mut pv).cast(),
        (&raw mut pi).cast(),
        (&raw mut rows64).cast(),
        (&raw mut r64).cast(),
        (&raw mut npad).cast(),
        (&raw mut k64).cast(),
    ];
    let out_grid = LaunchConfig::linear((kept as u64).div_ceil(256).clamp(1, cap) as u32, 256);
    // SAFETY: the parameters match `sort_finish_<T>`; the positions index the input's rows;
    // the outputs hold `rows * k` elements (checked).
    unsafe { finish.launch(stream, out_grid, &mut params)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_sorts_with_nan_last_and_signed_zeros_equal() {
        let x = [3.0f32, f32::NAN, -0.0, 1.0, 0.0, 3.0, -5.0];
        let (mut v, mut i) = ([0f32; 7], [0i64; 7]);
        sort(&x, 1, 7, 7, false, &mut v, &mut i).unwrap();
        assert_eq!(i, [6, 2, 4, 3, 0, 5, 1]);
        assert!(v[6].is_nan() && v[1].to_bits() == (-0.0f32).to_bits());
        sort(&x, 1, 7, 7, true, &mut v, &mut i).unwrap();
        assert_eq!(
            i,
            [1, 0, 5, 3, 2, 4, 6],
            "descending: NaN first, ties in order"
        );
        let ints = [2i64, -1, 2, i64::MIN, i64::MAX, 0];
        let (mut v, mut i) = ([0i64; 6], [0i64; 6]);
        sort(&ints, 2, 3, 3, false, &mut v, &mut i).unwrap();
        assert_eq!(v, [-1, 2, 2, i64::MIN, 0, i64::MAX]);
        assert_eq!(i, [1, 0, 2, 0, 2, 1]);
        assert!(sort(&ints, 4, 2, 2, false, &mut v, &mut i).is_err());
        // The first k of each row: the top-k of a descending sort.
        let (mut v, mut i) = ([0i64; 2], [0i64; 2]);
        sort(&ints, 2, 3, 1, true, &mut v, &mut i).unwrap();
        assert_eq!((v, i), ([2, i64::MAX], [0, 1]));
        assert!(sort(&ints, 2, 3, 4, true, &mut v, &mut i).is_err());
    }

    #[test]
    fn plans() {
        let p = SortPlan::new(8192, 1024).unwrap();
        assert!(p.in_shared_memory() && p.npad == 1024);
        assert_eq!(p.workspace_bytes().unwrap(), 0);
        let long = SortPlan::new(2, 3000).unwrap();
        assert_eq!(
            (long.npad, long.workspace_bytes().unwrap()),
            (4096, 2 * 4096 * 12)
        );
        assert!(SortPlan::new(1, 1 << 32).is_err());
    }
}
