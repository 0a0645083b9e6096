//! Sorting along the last axis of `[rows, r]` (`kernels/sort.cu`): values and int64 indices,
//! ascending or descending, stable (equal values keep their order, as PyTorch's
//! `stable=True`), and its CPU twin. NaN sorts after every number (first when descending) and
//! -0.0 equals +0.0, as in PyTorch; the values are the input's own bits, read at the sorted
//! positions, so the kernels and the twin agree exactly.
//!
//! Every entry point keeps the first `k` of each sorted row (`k == r` for a whole sort, fewer
//! for PyTorch's `topk`): the kernels write only those.
//!
//! Speed: rows of at most [`SMEM_ROW`] elements, and rows of at most [`REG_ROW_MAX`] with keys
//! of at most 32 bits, sort on chip, one block a row (the row read once and written once).
//! Rows of [`REG_ROW_MIN`] elements or more with keys of at most 32 bits (f32, f16, bf16, i32)
//! hold each key packed with its position in one word, eight words a thread: each warp sorts 256 words in registers (a bitonic network, partners exchanged by
//! warp shuffles), then the warps' runs merge in shared memory; other rows run a bitonic
//! network in shared memory. Longer rows sort in chunks of [`SMEM_ROW`] the same way (64-bit
//! keys: the shared-memory network) into a workspace of (key, position) words, then merge the
//! sorted runs of each row two by two, doubling their length each pass
//! (`ceil(log2(r / 2048))` passes, each reading and writing the workspace once; merge path
//! gives every block the same share of outputs); the last pass writes the values and indices.
//! A top-k keeps only the first `k` words of every run. Rows of at least [`RADIX_MIN_32`]
//! elements (keys of at most 32 bits) or [`RADIX_MIN_64`] (f64, i64), sorted whole or to a
//! top-k of a quarter of the row or more, take LSD radix passes instead: every pass's digit
//! counts from one read of the input, then one kernel a byte of the key (a stable scatter
//! through shared memory, each tile's place in the row found by decoupled look-back), a pass
//! skipped for a row whose byte never varies (small integers' high bytes), so that the result
//! is the stable sort's as well.

use std::cmp::Ordering;

use crate::{Element, Error, Result};

/// Longest row sorted in shared memory by one block (`SO_SMEM`).
pub const SMEM_ROW: usize = 2048;

/// Longest row of keys of at most 32 bits sorted on chip by one block (`RG_LONG`: 1024
/// threads of eight words, 64 KiB of shared memory for 64-bit words).
pub const REG_ROW_MAX: usize = 8192;

/// Shortest padded row sorted in registers (`RG_MIN`: a full warp of eight-word threads, the
/// run each warp sorts).
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
    // No elements: nothing to write, and neither the rows nor a row's length (either may be
    // huge when the other is 0) size any work.
    if n == 0 {
        return Ok(());
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

/// Outputs one merge block writes (`MG_TILE`); divides [`SMEM_ROW`].
const MERGE_TILE: usize = 2048;

/// Shortest row of keys of at most 32 bits sorted by the radix passes (a whole sort, or a
/// top-k keeping a quarter of the row or more) instead of chunks and merges.
pub const RADIX_MIN_32: usize = 1 << 17;

/// Shortest row of 64-bit keys (f64, i64) sorted by the radix passes.
pub const RADIX_MIN_64: usize = 1 << 19;

/// Elements of one radix tile (`RxTile<K>::N`: 256 threads of 20 keys of at most 32 bits, or
/// of 16 64-bit keys).
fn radix_tile<T: Element>() -> usize {
    if key_fits_32::<T>() { 5120 } else { 4096 }
}

/// How the kernels sort `[rows, r]`: rows of at most [`SMEM_ROW`] elements padded to `npad` (a
/// power of two) in one block each; longer rows as sorted chunks of [`SMEM_ROW`] merged
/// through a global workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortPlan {
    /// Rows.
    pub rows: usize,
    /// Elements a row.
    pub r: usize,
    /// The row's length padded to a power of two.
    pub npad: usize,
}

/// One merge pass over runs of `run` elements keeping `k` of each row: merges a row
/// (`pairs`) and tiles of [`MERGE_TILE`] outputs a merge (`tiles`).
fn merge_geometry(r: usize, k: usize, run: usize) -> (usize, usize) {
    let pair = run.saturating_mul(2);
    (r.div_ceil(pair), pair.min(r).min(k).div_ceil(MERGE_TILE))
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

    /// Whether one block sorts each row of `T` on chip (no workspace): rows padded to at most
    /// [`SMEM_ROW`], or to at most [`REG_ROW_MAX`] when keys fit 32 bits.
    pub fn on_chip<T: Element>(&self) -> bool {
        self.npad <= SMEM_ROW || (key_fits_32::<T>() && self.npad <= REG_ROW_MAX)
    }

    /// Whether rows of `T` keeping `k` sort by the radix passes (least significant byte first,
    /// one pass a byte of the key, a pass skipped for a row whose byte never varies): rows of
    /// at least [`RADIX_MIN_32`] (keys of at most 32 bits) or [`RADIX_MIN_64`] elements, and
    /// `k` at least a quarter of the row (a smaller top-k merges runs of `k` words only).
    pub fn radix<T: Element>(&self, k: usize) -> bool {
        let min = if key_fits_32::<T>() {
            RADIX_MIN_32
        } else {
            RADIX_MIN_64
        };
        self.r >= min && k.saturating_mul(4) >= self.r
    }

    /// The radix workspace's regions, byte offsets from its start (each 16-byte aligned):
    /// keys (two buffers), positions (two), the rows' key bits (OR and OR of complements), the
    /// histograms (rows x passes x 256), the passes' tile counters, the plan (rows x (passes +
    /// 1)), the look-back words (rows x tiles x 256), and the end. Everything from the key bits
    /// on is zeroed before a sort.
    fn radix_layout<T: Element>(&self) -> Option<[usize; 8]> {
        let n = self.rows.checked_mul(self.r)?;
        let key = if key_fits_32::<T>() { 4 } else { 8 };
        let passes = size_of::<T>();
        let tiles = self.r.div_ceil(radix_tile::<T>());
        let sizes = [
            n.checked_mul(2 * key)?,
            n.checked_mul(2 * 4)?,
            self.rows.checked_mul(16)?,
            self.rows.checked_mul(passes * 256 * 4)?,
            passes * 4,
            self.rows.checked_mul((passes + 1) * 4)?,
            self.rows.checked_mul(256 * 8)?.checked_mul(tiles)?,
        ];
        let mut at = [0usize; 8];
        for (i, bytes) in sizes.into_iter().enumerate() {
            at[i + 1] = at[i].checked_add(bytes)?.checked_next_multiple_of(16)?;
        }
        Some(at)
    }

    /// Merge passes after the chunk sort: `ceil(log2(r / 2048))`, none for rows sorted on chip.
    pub fn merge_passes(&self) -> usize {
        let (mut run, mut passes) = (SMEM_ROW, 0);
        while run < self.r {
            run *= 2;
            passes += 1;
        }
        passes
    }

    /// Bytes of device workspace the sort of `T` needs (any `k`), from a 16-byte aligned
    /// start: none for rows sorted on chip; else one word (8 bytes for keys of at most 32
    /// bits, 16 for f64 and i64) per element, twice when there are two merge passes or more,
    /// and the merge partitions (4 bytes each); for rows the radix passes may sort, the larger
    /// of that and the radix workspace (two buffers of keys and of 32-bit positions, and the
    /// per-row and per-tile counts).
    pub fn workspace_bytes<T: Element>(&self) -> Result<usize> {
        if self.on_chip::<T>() {
            return Ok(0);
        }
        let overflow = || Error::Unsupported {
            op: "sort",
            reason: "workspace overflows".into(),
        };
        let merge = self.merge_workspace_bytes::<T>().ok_or_else(overflow)?;
        if self.radix::<T>(self.r) {
            let radix = self.radix_layout::<T>().ok_or_else(overflow)?[7];
            return Ok(merge.max(radix));
        }
        Ok(merge)
    }

    /// The merge path's workspace (see [`SortPlan::workspace_bytes`]).
    fn merge_workspace_bytes<T: Element>(&self) -> Option<usize> {
        let buffers = if self.merge_passes() >= 2 { 2 } else { 1 };
        let words = self
            .rows
            .checked_mul(self.r)?
            .checked_mul(word_bytes::<T>() * buffers)?;
        self.partitions()?.checked_mul(4)?.checked_add(words)
    }

    /// The most merge partitions of any pass (all `r` of each row kept, the most there are).
    fn partitions(&self) -> Option<usize> {
        let mut most = 0usize;
        let mut run = SMEM_ROW;
        while run < self.r {
            let (pairs, tiles) = merge_geometry(self.r, self.r, run);
            most = most.max(self.rows.checked_mul(pairs)?.checked_mul(tiles + 1)?);
            run *= 2;
        }
        Some(most)
    }
}

/// Whether the keys of `T` fit 32 bits (every sortable type but f64 and i64).
fn key_fits_32<T: Element>() -> bool {
    size_of::<T>() <= 4
}

/// Bytes of one (key, position) word of the on-chip register sort: 4 for 16-bit keys (the
/// position in the low 16 bits), 8 for 32-bit keys.
#[cfg(feature = "cuda")]
fn reg_word_bytes<T: Element>() -> usize {
    if size_of::<T>() == 2 { 4 } else { 8 }
}

/// Bytes of one (key, position) word of the merge workspace.
fn word_bytes<T: Element>() -> usize {
    if size_of::<T>() == 8 { 16 } else { 8 }
}

/// Queues the sort of `input` (`rows` rows of `r` elements), the first `k` of each sorted row
/// into `values` and `indices` (`rows * k` of each), on `stream`, using `workspace`
/// ([`SortPlan::workspace_bytes`] bytes from a 16-byte aligned start; nothing for rows sorted
/// on chip). Every span is checked before anything is launched.
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

    // Shared-memory rows, register rows (keys of at most 32 bits), chunks, last merge pass,
    // long register rows.
    let names = match T::NAME {
        "f32" => [
            "sort_rows_f32",
            "sort_rows8_f32",
            "sort_chunks8_f32",
            "sort_mfinal_f32",
            "sort_rows8l_f32",
        ],
        "f16" => [
            "sort_rows_f16",
            "sort_rows8_f16",
            "sort_chunks8_f16",
            "sort_mfinal_f16",
            "sort_rows8l_f16",
        ],
        "bf16" => [
            "sort_rows_bf16",
            "sort_rows8_bf16",
            "sort_chunks8_bf16",
            "sort_mfinal_bf16",
            "sort_rows8l_bf16",
        ],
        "i32" => [
            "sort_rows_i32",
            "sort_rows8_i32",
            "sort_chunks8_i32",
            "sort_mfinal_i32",
            "sort_rows8l_i32",
        ],
        "i64" => [
            "sort_rows_i64",
            "",
            "sort_chunks_i64",
            "sort_mfinal_i64",
            "",
        ],
        "f64" => [
            "sort_rows_f64",
            "",
            "sort_chunks_f64",
            "sort_mfinal_f64",
            "",
        ],
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
    let need = plan.workspace_bytes::<T>()?;
    if workspace.len() < need {
        return Err(Error::LengthMismatch {
            op: "sort workspace",
            expected: need,
            got: workspace.len(),
        });
    }
    if need > 0 && workspace.addr() % 16 != 0 {
        return Err(Error::Unsupported {
            op: "sort",
            reason: "workspace not 16-byte aligned".into(),
        });
    }
    if kept == 0 {
        return Ok(());
    }
    let ctx = stream.context();
    let (mut pin, mut pv, mut pi) = (input.addr(), values.addr(), indices.addr());
    let mut desc = i32::from(descending);
    let (mut rows64, mut r64, mut k64) = (rows as u64, r as u64, k as u64);
    let too_many = |blocks: usize| Error::Unsupported {
        op: "sort",
        reason: format!("{blocks} blocks (below 2^31)"),
    };
    if plan.on_chip::<T>() {
        if rows > i32::MAX as usize {
            return Err(too_many(rows));
        }
        let mut npad = plan.npad as u32;
        let in_registers = plan.npad >= REG_ROW_MIN && !names[1].is_empty();
        let (kernel, config) = if in_registers && plan.npad > SMEM_ROW {
            // Eight words a thread, `npad` words of dynamic shared memory.
            let kernel = Kernel::get(ctx, &crate::images::SORT, names[4])?;
            let smem = (plan.npad * reg_word_bytes::<T>()) as u32;
            kernel.set_max_dynamic_shared_bytes(smem)?;
            let config = LaunchConfig {
                grid: (rows as u32, 1, 1),
                block: ((plan.npad / 8) as u32, 1, 1),
                shared_bytes: smem,
            };
            (kernel, config)
        } else if in_registers {
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
        // SAFETY: the parameters match `sort_rows_<T>`, `sort_rows8_<T>` and `sort_rows8l_<T>`;
        // the input holds `rows * r` elements and the outputs `rows * k` (checked); the shared
        // memory holds `npad` keys and positions (dynamic for `sort_rows`, static in
        // `sort_rows8`, `npad` dynamic words in `sort_rows8l`, whose blocks have `npad / 8`
        // threads of eight words).
        unsafe { kernel.launch(stream, config, &mut params)? };
        return Ok(());
    }

    if plan.radix::<T>(k) {
        return radix_sort::<T>(
            stream, &plan, input, k, descending, values, indices, workspace,
        );
    }

    // Long rows: chunks sorted into buffer 0, then merge passes between buffers 0 and 1, the
    // last into the outputs; the partitions after the buffers.
    let words = (n * word_bytes::<T>()) as u64;
    let buffers = if plan.merge_passes() >= 2 { 2 } else { 1 };
    let mut bufs = [workspace.addr(), workspace.addr() + words];
    let mut part = workspace.addr() + words * buffers;
    let chunks = rows * r.div_ceil(SMEM_ROW);
    let chunk_kernel = Kernel::get(ctx, &crate::images::SORT, names[2])?;
    let config = if names[1].is_empty() {
        // 64-bit keys: the shared-memory network, a key and a position per element.
        LaunchConfig {
            grid: (chunks.min(i32::MAX as usize) as u32, 1, 1),
            block: (512, 1, 1),
            shared_bytes: (SMEM_ROW * 12) as u32,
        }
    } else {
        LaunchConfig::linear(chunks.min(i32::MAX as usize) as u32, (SMEM_ROW / 8) as u32)
    };
    let mut params: [*mut c_void; 6] = [
        (&raw mut pin).cast(),
        (&raw mut bufs[0]).cast(),
        (&raw mut rows64).cast(),
        (&raw mut r64).cast(),
        (&raw mut desc).cast(),
        (&raw mut k64).cast(),
    ];
    // SAFETY: the parameters match `sort_chunks8_<T>` / `sort_chunks_<T>` (blocks of 256
    // threads with static shared memory, or of 512 with 2048 keys and positions of dynamic
    // shared memory); the kernel loops over the chunks its grid does not cover; buffer 0 holds
    // `rows * r` words (checked).
    unsafe { chunk_kernel.launch(stream, config, &mut params)? };

    let wide = word_bytes::<T>() == 16;
    let part_kernel = Kernel::get(
        ctx,
        &crate::images::SORT,
        if wide {
            "sort_part_w128"
        } else {
            "sort_part_w64"
        },
    )?;
    let merge_kernel = Kernel::get(
        ctx,
        &crate::images::SORT,
        if wide {
            "sort_merge_w128"
        } else {
            "sort_merge_w64"
        },
    )?;
    let final_kernel = Kernel::get(ctx, &crate::images::SORT, names[3])?;
    let cap = u64::from(ctx.multiprocessors().max(1)) * 32;
    let mut run = SMEM_ROW;
    while run < r {
        let (pairs, tiles) = merge_geometry(r, k, run);
        let entries = (rows * pairs * (tiles + 1)) as u64;
        let (mut run64, mut pairs64, mut tiles64) = (run as u64, pairs as u64, tiles as u64);
        let mut params: [*mut c_void; 8] = [
            (&raw mut bufs[0]).cast(),
            (&raw mut part).cast(),
            (&raw mut rows64).cast(),
            (&raw mut r64).cast(),
            (&raw mut k64).cast(),
            (&raw mut run64).cast(),
            (&raw mut pairs64).cast(),
            (&raw mut tiles64).cast(),
        ];
        let grid = LaunchConfig::linear(entries.div_ceil(256).clamp(1, cap) as u32, 256);
        // SAFETY: the parameters match `sort_part_<w>`; the source buffer holds the runs the
        // previous step wrote; the partitions hold `entries` (at most `partitions()`, checked
        // through the workspace size).
        unsafe { part_kernel.launch(stream, grid, &mut params)? };
        let blocks = (rows * pairs * tiles).min(i32::MAX as usize) as u32;
        let grid = LaunchConfig::linear(blocks.max(1), MERGE_TILE as u32 / 8);
        if run * 2 >= r {
            let mut params: [*mut c_void; 11] = [
                (&raw mut bufs[0]).cast(),
                (&raw mut part).cast(),
                (&raw mut pin).cast(),
                (&raw mut pv).cast(),
                (&raw mut pi).cast(),
                (&raw mut rows64).cast(),
                (&raw mut r64).cast(),
                (&raw mut k64).cast(),
                (&raw mut run64).cast(),
                (&raw mut pairs64).cast(),
                (&raw mut tiles64).cast(),
            ];
            // SAFETY: the parameters match `sort_mfinal_<T>` (blocks of 256 threads, static
            // shared memory); the merged positions index the input's rows; the outputs hold
            // `rows * k` elements (checked).
            unsafe { final_kernel.launch(stream, grid, &mut params)? };
        } else {
            let mut params: [*mut c_void; 9] = [
                (&raw mut bufs[0]).cast(),
                (&raw mut bufs[1]).cast(),
                (&raw mut part).cast(),
                (&raw mut rows64).cast(),
                (&raw mut r64).cast(),
                (&raw mut k64).cast(),
                (&raw mut run64).cast(),
                (&raw mut pairs64).cast(),
                (&raw mut tiles64).cast(),
            ];
            // SAFETY: the parameters match `sort_merge_<w>` (blocks of 256 threads, static
            // shared memory); both buffers hold `rows * r` words (two buffers when there is
            // more than one pass, checked).
            unsafe { merge_kernel.launch(stream, grid, &mut params)? };
            bufs.swap(0, 1);
        }
        run *= 2;
    }
    Ok(())
}

/// The radix passes of `gpu_sort` (spans and workspace checked by the caller; rows of
/// `plan.r >= RADIX_MIN_*` elements, fewer than 2^32).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn radix_sort<T: Element>(
    stream: &genesis_cuda::Stream,
    plan: &SortPlan,
    input: genesis_cuda::DeviceSpan<'_, T>,
    k: usize,
    descending: bool,
    values: genesis_cuda::DeviceSpanMut<'_, T>,
    indices: genesis_cuda::DeviceSpanMut<'_, i64>,
    workspace: genesis_cuda::DeviceSpanMut<'_, u8>,
) -> Result<()> {
    use genesis_cuda::{Kernel, LaunchConfig};
    use std::ffi::c_void;

    let overflow = || Error::Unsupported {
        op: "sort",
        reason: "workspace overflows".into(),
    };
    let at = plan.radix_layout::<T>().ok_or_else(overflow)?;
    let (rows, r) = (plan.rows, plan.r);
    let n = rows * r;
    let tiles = r.div_ceil(radix_tile::<T>());
    let key_bytes = if key_fits_32::<T>() { 4 } else { 8 };
    let ctx = stream.context();
    let get = |name: &'static str| Kernel::get(ctx, &crate::images::SORT, name);
    let (init, pass, fin) = match T::NAME {
        "f64" => ("sort_rxinit_f64", "sort_rxpass_f64", "sort_rxfinal_f64"),
        "f32" => ("sort_rxinit_f32", "sort_rxpass_f32", "sort_rxfinal_f32"),
        "f16" => ("sort_rxinit_f16", "sort_rxpass_f16", "sort_rxfinal_f16"),
        "bf16" => ("sort_rxinit_bf16", "sort_rxpass_bf16", "sort_rxfinal_bf16"),
        "i32" => ("sort_rxinit_i32", "sort_rxpass_i32", "sort_rxfinal_i32"),
        "i64" => ("sort_rxinit_i64", "sort_rxpass_i64", "sort_rxfinal_i64"),
        other => {
            return Err(Error::Unsupported {
                op: "sort",
                reason: format!("element type {other}"),
            });
        }
    };
    let (init, fin, pass_kernel) = (get(init)?, get(fin)?, get(pass)?);
    let plan_k = get("sort_rxplan")?;

    let base = workspace.addr();
    let (mut k0, mut k1) = (base + at[0] as u64, base + (at[0] + n * key_bytes) as u64);
    let (mut p0, mut p1) = (base + at[1] as u64, base + (at[1] + n * 4) as u64);
    let (mut bits, mut hist, mut counter, mut order, mut status) = (
        base + at[2] as u64,
        base + at[3] as u64,
        base + at[4] as u64,
        base + at[5] as u64,
        base + at[6] as u64,
    );
    // SAFETY: the key bits, histograms, counters, plan and look-back words are adjacent
    // regions of the workspace (checked by the caller to hold `at[7]` bytes), zeroed before
    // the kernels add to them (the look-back reads a zero word as not yet written).
    unsafe { genesis_cuda::raw::memset_d8(stream, bits, 0, at[7] - at[2])? };

    let (mut pin, mut pv, mut pi) = (input.addr(), values.addr(), indices.addr());
    let (mut rows64, mut r64, mut tiles64, mut k64) =
        (rows as u64, r as u64, tiles as u64, k as u64);
    let mut desc = i32::from(descending);
    let mut passes = size_of::<T>() as i32;
    let sms = ctx.multiprocessors().max(1) as usize;

    let mut params: [*mut c_void; 6] = [
        (&raw mut pin).cast(),
        (&raw mut bits).cast(),
        (&raw mut hist).cast(),
        (&raw mut rows64).cast(),
        (&raw mut r64).cast(),
        (&raw mut desc).cast(),
    ];
    // A few blocks an SM, each over consecutive tiles of 4096 (its digit counts go out once a
    // row).
    let init_tiles = rows * r.div_ceil(4096);
    let init_grid = LaunchConfig::linear(init_tiles.clamp(1, sms * 4) as u32, 256);
    // SAFETY: the parameters match `sort_rxinit_<T>` (blocks of 256, static shared memory);
    // the input holds `rows * r` elements, the bits two words a row, the histograms 256 words
    // a row and pass (all in the checked workspace); each block covers its share of the tiles.
    unsafe { init.launch(stream, init_grid, &mut params)? };
    let mut params: [*mut c_void; 4] = [
        (&raw mut bits).cast(),
        (&raw mut order).cast(),
        (&raw mut rows64).cast(),
        (&raw mut passes).cast(),
    ];
    let grid = LaunchConfig::linear(rows.div_ceil(256) as u32, 256);
    // SAFETY: the parameters match `sort_rxplan` (a thread a row, guarded); the plan holds
    // `passes + 1` words a row.
    unsafe { plan_k.launch(stream, grid, &mut params)? };

    let blocks = rows * tiles;
    if blocks > i32::MAX as usize {
        return Err(Error::Unsupported {
            op: "sort",
            reason: format!("{rows} rows of {r} elements in radix sort"),
        });
    }
    // Keys and positions, the digits' row offsets (8 bytes), the per-warp counts, a block sum
    // and the tile number.
    let smem = radix_tile::<T>() * (key_bytes + 4) + 256 * 8 + (8 * 256 + 8 + 1) * 4;
    let smem = smem.next_multiple_of(16) as u32;
    pass_kernel.set_max_dynamic_shared_bytes(smem)?;
    let pass_grid = LaunchConfig {
        shared_bytes: smem,
        ..LaunchConfig::linear(blocks as u32, 256)
    };
    for mut pass in 0..size_of::<T>() as i32 {
        let mut params: [*mut c_void; 18] = [
            (&raw mut pin).cast(),
            (&raw mut k0).cast(),
            (&raw mut k1).cast(),
            (&raw mut p0).cast(),
            (&raw mut p1).cast(),
            (&raw mut order).cast(),
            (&raw mut hist).cast(),
            (&raw mut status).cast(),
            (&raw mut counter).cast(),
            (&raw mut pv).cast(),
            (&raw mut pi).cast(),
            (&raw mut rows64).cast(),
            (&raw mut r64).cast(),
            (&raw mut tiles64).cast(),
            (&raw mut k64).cast(),
            (&raw mut passes).cast(),
            (&raw mut pass).cast(),
            (&raw mut desc).cast(),
        ];
        // SAFETY: the parameters match `sort_rxpass_<T>` (blocks of 256; `smem` bytes
        // of dynamic shared memory, allowed above); the input holds `rows * r` elements, both
        // buffers `rows * r` keys and positions, the look-back words 256 a tile, the outputs
        // `rows * k` elements; a tile's digit runs start at the row's count of smaller digits
        // plus the earlier tiles' count of its digit, so every write stays in its row of the
        // other buffer, or of the outputs below `k`.
        unsafe { pass_kernel.launch(stream, pass_grid, &mut params)? };
    }
    let cap = u64::from(ctx.multiprocessors().max(1)) * 32;
    let grid = LaunchConfig::linear(((rows * k) as u64).div_ceil(256).clamp(1, cap) as u32, 256);
    let mut params: [*mut c_void; 7] = [
        (&raw mut pin).cast(),
        (&raw mut order).cast(),
        (&raw mut pv).cast(),
        (&raw mut pi).cast(),
        (&raw mut rows64).cast(),
        (&raw mut r64).cast(),
        (&raw mut k64).cast(),
    ];
    // SAFETY: the parameters match `sort_rxfinal_<T>` (grid-stride); the outputs hold
    // `rows * k` elements (checked by the caller), the input `rows * r` with `k <= r`.
    unsafe { fin.launch(stream, grid, &mut params)? };
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
        assert!(p.on_chip::<f64>() && p.npad == 1024);
        // Rows up to 8192 of keys of at most 32 bits stay on chip; 64-bit keys merge above 2048.
        let p = SortPlan::new(8192, 8192).unwrap();
        assert!(p.on_chip::<f32>() && p.on_chip::<half::f16>() && !p.on_chip::<i64>());
        assert_eq!(p.workspace_bytes::<i32>().unwrap(), 0);
        assert!(!SortPlan::new(1, 8193).unwrap().on_chip::<f32>());
        assert_eq!(p.workspace_bytes::<f32>().unwrap(), 0);
        // One merge pass: one buffer of words, and two merges' partitions (2 tiles + 1 each).
        let long = SortPlan::new(2, 3000).unwrap();
        assert_eq!(long.merge_passes(), 1);
        assert_eq!(long.workspace_bytes::<f32>().unwrap(), 0, "on chip");
        assert_eq!(
            long.workspace_bytes::<f64>().unwrap(),
            2 * 3000 * 16 + 2 * 3 * 4
        );
        // Three passes (runs of 2048, 4096, 8192): two buffers; the most partitions in the
        // second pass (2 merges of 4 tiles + 1 a row).
        let longer = SortPlan::new(3, 10_000).unwrap();
        assert_eq!(longer.merge_passes(), 3);
        assert_eq!(
            longer.workspace_bytes::<i32>().unwrap(),
            2 * 3 * 10_000 * 8 + 3 * 2 * 5 * 4
        );
        assert_eq!(SortPlan::new(1, 4097).unwrap().merge_passes(), 2);
        assert_eq!(SortPlan::new(1, 4096).unwrap().merge_passes(), 1);
        assert!(SortPlan::new(1, 1 << 32).is_err());
    }
}
