//! A seeded fuzzer of `genesis-index`'s public API on the CPU: [`plan`] of random index
//! expressions (integers and slice bounds at the `i64` extremes, zero and negative steps, two
//! ellipses, more indices than dimensions, new axes past the rank limit, index tensors whose
//! data does not fit their shape, masks of the wrong shape, mask coordinates that lie,
//! unusable dtypes) over random layouts (empty ones with huge sizes, broadcast ones, hand-made
//! ones with strides that do not match the rank); the plans' methods; [`get`] and [`set`]
//! through storages; hand-built (inconsistent) [`IndexPlan`]s given to the executors;
//! [`select_rows`], [`resolve_masks`], [`broadcast_shapes`] and the `s!` conversions.
//!
//! Every call runs under `catch_unwind`: `Ok` and `Err` are both accepted, with checks where
//! the answer is known (a plan's offsets stay inside the storage its layout fits; a read
//! gives the elements at those offsets; a failed assignment changes nothing); a panic or a
//! failed check is recorded with the seed, the iteration and the input, and the test fails
//! listing them. Sizes are tiny, or so large that any request for them must be refused
//! before memory is touched (at least 2^45 elements).
//!
//! `GENESIS_FUZZ_SEED` (default 0) and `GENESIS_FUZZ_ITERS` (a multiplier of the default
//! iteration counts, default 1) widen a local run; `GENESIS_FUZZ_TRACE` prints each call
//! before it runs; `GENESIS_FUZZ_BACKTRACE` adds a backtrace to each panic reported.

use std::sync::Arc;

use genesis_index::{
    Advanced, IndexArg, IndexArray, IndexInt, IndexItem, IndexPlan, IndexTensor, MaskCoords,
    PlanKind, SliceArg, StoredIndex, Value, broadcast_shapes, execute_get, get, plan,
    resolve_masks, select_rows, set,
};
use genesis_storage::{DType, Device, Layout, Storage, View};
use rand::Rng;

const CPU: Device = Device::Cpu;

// ---------------------------------------------------------------------------------------------
// The harness (shared by the fuzzers) and this fuzzer's random inputs.

#[path = "../../genesis-storage/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::Fuzz;

impl Fuzz {
    /// An integer index or bound: mostly small, sometimes at the extremes.
    fn int(&mut self) -> i64 {
        if self.chance(0.15) {
            self.pick(&EXTREMES)
        } else {
            self.rng.random_range(-4..4)
        }
    }

    fn opt_int(&mut self) -> Option<i64> {
        if self.chance(0.3) {
            None
        } else {
            Some(self.int())
        }
    }

    /// A small shape, rank 0 to 4.
    fn shape(&mut self, max_rank: usize) -> Vec<usize> {
        let rank = self.rng.random_range(0..=max_rank);
        (0..rank).map(|_| self.rng.random_range(0..4)).collect()
    }
}

const EXTREMES: [i64; 10] = [
    i64::MIN,
    i64::MIN + 1,
    i64::MAX,
    i64::MAX - 1,
    -(1 << 62),
    1 << 62,
    1 << 40,
    -(1 << 40),
    u32::MAX as i64,
    i32::MIN as i64,
];

/// Sizes no host can hold, and sizes whose products overflow.
const HUGE: [usize; 6] = [
    1 << 45,
    1 << 62,
    isize::MAX as usize,
    usize::MAX / 2,
    usize::MAX - 1,
    usize::MAX,
];

// ---------------------------------------------------------------------------------------------
// Random inputs.

/// A layout and the length of a storage it fits (when it fits one: `None` for layouts that
/// reach outside any storage).
fn random_layout(z: &mut Fuzz) -> (Layout, Option<usize>) {
    let l = match z.rng.random_range(0..10) {
        // Contiguous, small.
        0..=4 => Layout::contiguous(&z.shape(4)),
        // A view: sliced, transposed, expanded, narrowed.
        5 | 6 => {
            let mut l = Layout::contiguous(&z.shape(4));
            for _ in 0..z.rng.random_range(1..4) {
                let rank = l.rank() as isize;
                let d = z.rng.random_range(-rank.max(1) as i64..rank.max(1) as i64) as isize;
                let next = match z.rng.random_range(0..5) {
                    0 => l.transpose(
                        d,
                        z.rng.random_range(-rank.max(1) as i64..rank.max(1) as i64) as isize,
                    ),
                    1 => {
                        let a = z.rng.random_range(0..3);
                        let b = a + z.rng.random_range(0..3);
                        l.slice(d, a, b, z.rng.random_range(1..4i64) as isize)
                    }
                    2 => l.unsqueeze(d),
                    3 => {
                        let mut s = l.shape().to_vec();
                        if !s.is_empty() {
                            let i = z.rng.random_range(0..s.len());
                            if s[i] == 1 {
                                s[i] = z.rng.random_range(0..4);
                            }
                        }
                        if z.chance(0.3) {
                            s.insert(0, z.rng.random_range(0..3));
                        }
                        l.expand(&s)
                    }
                    _ => l.squeeze(d),
                };
                if let Ok(n) = next {
                    l = n;
                }
            }
            l
        }
        // Empty, with huge other sizes; or broadcast huge (stride 0).
        7 => {
            let mut s: Vec<usize> = (0..z.rng.random_range(1..4))
                .map(|_| {
                    if z.chance(0.5) {
                        z.pick(&HUGE)
                    } else {
                        z.rng.random_range(1..4)
                    }
                })
                .collect();
            if z.chance(0.6) {
                let at = z.rng.random_range(0..=s.len());
                s.insert(at, 0);
                Layout::contiguous(&s)
            } else {
                let strides = vec![0isize; s.len()];
                Layout::new(&s, &strides, z.rng.random_range(0..3))
            }
        }
        // Hand-made: any strides, maybe of another count, any offset.
        _ => {
            let shape = z.shape(3);
            let n = if z.chance(0.8) {
                shape.len()
            } else {
                z.rng.random_range(0..5)
            };
            let strides: Vec<isize> = (0..n)
                .map(|_| {
                    if z.chance(0.2) {
                        z.pick(&[isize::MIN, isize::MAX, -1, -3, 1 << 40])
                    } else {
                        z.rng.random_range(0..5i64) as isize
                    }
                })
                .collect();
            let offset = if z.chance(0.2) {
                z.pick(&[usize::MAX, 1 << 62, isize::MAX as usize])
            } else {
                z.rng.random_range(0..6)
            };
            Layout::new(&shape, &strides, offset)
        }
    };
    let fits = match l.span() {
        Ok(Some((_, end))) if end <= 4096 => Some(end),
        Ok(None) => Some(l.offset().min(8)),
        _ => None,
    };
    (l, fits)
}

/// A storage view of int64 / int32 / bool values (or another dtype) for a stored index.
fn stored_view(z: &mut Fuzz, shape: &[usize], dtype: DType) -> Option<View> {
    let n: usize = shape.iter().product();
    let values: Vec<i64> = (0..n).map(|_| z.int()).collect();
    let storage = match dtype {
        DType::I64 => Storage::from_slice(&values, CPU),
        DType::I32 => {
            let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
            Storage::from_slice(&v, CPU)
        }
        DType::Bool => {
            let v: Vec<u8> = values.iter().map(|&x| u8::from(x > 0)).collect();
            Storage::from_bytes(&v, DType::Bool, CPU)
        }
        other => Storage::zeros(n, other, CPU),
    }
    .ok()?;
    View::with_layout(Arc::new(storage), Layout::contiguous(shape)).ok()
}

/// A random index item for a layout of `shape` (the items may not fit it).
fn random_item(z: &mut Fuzz, shape: &[usize]) -> IndexItem {
    match z.rng.random_range(0..21) {
        19 | 20 => {
            // An int64 index tensor of values in range for some dimension.
            let s = z.shape(2);
            let n: usize = s.iter().product();
            let hi = shape.iter().copied().max().unwrap_or(1).clamp(1, 4) as i64;
            let data = (0..n).map(|_| z.rng.random_range(-hi..hi)).collect();
            IndexItem::Tensor(IndexTensor::i64(&s, data))
        }
        0..=4 => IndexItem::Int(z.int()),
        5..=9 => IndexItem::Slice {
            start: z.opt_int(),
            stop: z.opt_int(),
            step: if z.chance(0.5) {
                None
            } else if z.chance(0.7) {
                Some(z.rng.random_range(1..4))
            } else {
                Some(z.pick(&[0, -1, -2, i64::MIN, i64::MAX]))
            },
        },
        10 | 11 => IndexItem::NewAxis,
        12 => IndexItem::Ellipsis,
        13 | 14 => {
            // An int64 index tensor; its data may not hold one value per element.
            let s = z.shape(2);
            let mut n: usize = s.iter().product();
            if z.chance(0.1) {
                n = z.rng.random_range(0..5);
            }
            let data = (0..n).map(|_| z.int()).collect();
            IndexItem::Tensor(IndexTensor::i64(&s, data))
        }
        15 => {
            // A mask: often of dimensions of the layout, sometimes not.
            let s: Vec<usize> = if !shape.is_empty() && z.chance(0.7) {
                let a = z.rng.random_range(0..shape.len());
                let b = z.rng.random_range(a..=shape.len());
                shape[a..b].to_vec()
            } else {
                z.shape(2)
            };
            if s.iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none_or(|n| n > 4096)
            {
                return IndexItem::full();
            }
            let n: usize = s.iter().product();
            let mut t = IndexTensor::mask(&s, &(0..n).map(|_| z.chance(0.5)).collect::<Vec<_>>());
            if z.chance(0.1) {
                // Values other than 0 and 1.
                t.data
                    .iter_mut()
                    .for_each(|v| *v *= z.pick(&[2, -1, i64::MAX]));
            }
            IndexItem::Tensor(t)
        }
        16 => {
            let s = z.shape(2);
            let dt = z.pick(&[DType::I64, DType::I32, DType::Bool, DType::F32, DType::U8]);
            match stored_view(z, &s, dt) {
                Some(v) => IndexItem::stored(v),
                None => IndexItem::NewAxis,
            }
        }
        17 => {
            // Mask coordinates, consistent or not.
            let k = z.rng.random_range(0..3);
            let mask_shape: Vec<usize> = if !shape.is_empty() && z.chance(0.6) {
                let a = z.rng.random_range(0..shape.len());
                shape[a..(a + k).min(shape.len())].to_vec()
            } else {
                (0..k).map(|_| z.rng.random_range(0..4)).collect()
            };
            let selected = if z.chance(0.15) {
                z.pick(&HUGE)
            } else {
                z.rng.random_range(0..4)
            };
            let arrays = if z.chance(0.8) {
                mask_shape.len()
            } else {
                z.rng.random_range(0..4)
            };
            let n = if z.chance(0.85) {
                selected.min(8)
            } else {
                z.rng.random_range(0..4)
            };
            let coords = (0..arrays)
                .filter_map(|_| {
                    let dt = z.pick(&[DType::I64, DType::I64, DType::I32, DType::Bool]);
                    let v = stored_view(z, &[n], dt)?;
                    Some(StoredIndex {
                        view: v,
                        dtype: match dt {
                            DType::I64 => genesis_index::IndexDType::I64,
                            DType::I32 => genesis_index::IndexDType::I32,
                            _ => genesis_index::IndexDType::Bool,
                        },
                    })
                })
                .collect();
            IndexItem::Nonzero(MaskCoords {
                mask_shape,
                selected,
                coords,
            })
        }
        18 => IndexItem::BadTensor(z.pick(&["float32", "", "\u{0}"])),
        _ => IndexItem::full(),
    }
}

fn random_items(z: &mut Fuzz, shape: &[usize]) -> Vec<IndexItem> {
    let n = if z.chance(0.05) {
        // Past the rank limit.
        z.rng.random_range(60..80)
    } else if z.chance(0.6) {
        // Mostly no more than the rank (new axes aside).
        z.rng.random_range(0..=shape.len() + 1)
    } else {
        z.rng.random_range(0..6)
    };
    (0..n).map(|_| random_item(z, shape)).collect()
}

/// `items` for messages: host index data shown, stored ones by shape.
fn show(items: &[IndexItem]) -> String {
    let s: Vec<String> = items
        .iter()
        .map(|it| match it {
            IndexItem::Stored(t) => format!("Stored({:?} {:?})", t.dtype, t.shape()),
            IndexItem::Nonzero(m) => format!(
                "Nonzero(mask {:?}, selected {}, coords {:?})",
                m.mask_shape,
                m.selected,
                m.coords
                    .iter()
                    .map(|c| (c.dtype, c.shape().to_vec()))
                    .collect::<Vec<_>>()
            ),
            other => format!("{other:?}"),
        })
        .collect();
    format!("[{}]", s.join(", "))
}

/// Whether a result of `shape` is small enough to read whole here (the fuzzer makes no
/// request the host could grant that is larger than a few MiB).
fn small(shape: &[usize]) -> bool {
    genesis_storage::checked_numel(shape).is_ok_and(|n| n <= 1 << 16)
}

/// The elements of `v` in row-major order (i32 data).
fn elements(v: &View) -> Result<Vec<i32>, String> {
    v.contiguous()
        .and_then(|s| s.to_vec::<i32>())
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn plans() {
    let mut z = Fuzz::new("plans", 1);
    let (mut planned, mut gathers) = (0usize, 0usize);
    let total = z.iterations(6000);
    for it in 0..total {
        z.iteration = it;
        let (layout, fits) = random_layout(&mut z);
        let items = random_items(&mut z, layout.shape());
        let assign = z.chance(0.3);
        let what = || format!("plan({layout:?}, {}, assign {assign})", show(&items));
        let mut made = None;
        z.call(&what, || {
            let p = plan(&layout, &items, assign);
            if let Ok(p) = &p
                && let Err(e) = p.check()
            {
                return Err(format!("the plan made fails its own check: {e}"));
            }
            if let Ok(p) = &p
                && let Some(len) = fits
                && small(&p.result_shape)
                && let Ok(offsets) = p.source_offsets()
                && let Some(bad) = offsets.iter().find(|&&o| o >= len)
            {
                return Err(format!(
                    "offset {bad} outside the storage of {len} the layout fits"
                ));
            }
            made = p.ok();
            Ok(())
        });
        let Some(p) = made else { continue };
        planned += 1;
        gathers += usize::from(p.advanced.is_some());
        let (value, _) = random_layout(&mut z);
        z.call(
            &|| format!("{}: compacted, broadcast_value({value:?})", what()),
            || {
                let c = p.compacted();
                if small(&p.result_shape)
                    && let (Ok(a), Ok(b)) = (p.source_offsets(), c.source_offsets())
                    && a != b
                {
                    return Err("compacted() reads other offsets".into());
                }
                let _ = p.broadcast_value(&value);
                let _ = p.mask.map(|m| (m.density(), m.uploads_mask()));
                Ok(())
            },
        );
    }
    // The inputs reach the planner's success paths too, not only its refusals.
    assert!(
        planned * 5 >= total && gathers * 20 >= total,
        "{planned} plans made ({gathers} advanced) of {total}"
    );
    z.finish();
}

#[test]
fn reads_and_assignments() {
    let mut z = Fuzz::new("get_set", 2);
    for it in 0..z.iterations(3000) {
        z.iteration = it;
        let (layout, fits) = random_layout(&mut z);
        let Some(len) = fits else { continue };
        let data: Vec<i32> = (0..len as i32).collect();
        let Ok(storage) = Storage::from_slice(&data, CPU) else {
            continue;
        };
        let storage = Arc::new(storage);
        let Ok(view) = View::with_layout(Arc::clone(&storage), layout.clone()) else {
            continue;
        };
        let items = random_items(&mut z, layout.shape());
        // Reads and writes whose results the host could hold but that are large (a broadcast
        // layout of 2^62 elements sliced to 2^31) are not made: the fuzzer stays small. Those
        // no host can hold are, and must be refused.
        let sane = |shape: &[usize]| {
            genesis_storage::checked_numel(shape).is_err_and(|_| true)
                || genesis_storage::checked_numel(shape).is_ok_and(|n| n <= 1 << 16 || n >= 1 << 45)
        };
        if !sane(layout.shape()) {
            continue;
        }
        if let Ok(p) = plan(&layout, &items, false)
            && !sane(&p.result_shape)
        {
            continue;
        }
        let what = || format!("get({layout:?}, {})", show(&items));
        z.call(&what, || {
            let got = get(&view, &items);
            // What the plan says the read takes.
            if let Ok(g) = &got
                && small(g.layout().shape())
                && let Ok(p) = plan(&layout, &items, false)
                && let Ok(offsets) = p.source_offsets()
            {
                let want: Vec<i32> = offsets.iter().map(|&o| data[o]).collect();
                let have = elements(g)?;
                if have != want {
                    return Err(format!("read {have:?}, the plan's offsets give {want:?}"));
                }
            }
            let _ = resolve_masks(&items);
            Ok(())
        });
        // Assignment: a scalar, or a tensor of some shape and dtype.
        let value = if z.chance(0.5) {
            None
        } else {
            let s = z.shape(3);
            let n: usize = s.iter().product();
            let dt = z.pick(&[DType::I32, DType::I32, DType::F32, DType::I64]);
            Storage::zeros(n, dt, CPU)
                .ok()
                .and_then(|st| View::with_layout(Arc::new(st), Layout::contiguous(&s)).ok())
        };
        let x = z.pick(&[1.0, -1.0, 0.5, f64::NAN, f64::INFINITY, 3e9, -7.0]);
        let accumulate = z.chance(0.3);
        let mut target = match Storage::from_slice(&data, CPU) {
            Ok(s) => s,
            Err(_) => continue,
        };
        let shown_value = value
            .as_ref()
            .map(|v| format!("{} {:?}", v.storage().dtype(), v.layout().shape()))
            .unwrap_or_else(|| format!("scalar {x}"));
        let what = || {
            format!(
                "set({layout:?}, {}, {shown_value}, accumulate {accumulate})",
                show(&items)
            )
        };
        z.call(&what, || {
            let v = match &value {
                Some(v) => Value::Tensor(v),
                None => Value::Scalar(x),
            };
            if set(&mut target, &layout, &items, v, accumulate).is_err() {
                let after = target.to_vec::<i32>().map_err(|e| e.to_string())?;
                if after != data {
                    return Err("a failed assignment changed the target".into());
                }
            }
            Ok(())
        });
    }
    z.finish();
}

/// A hand-built plan: parts that may not agree with each other.
fn random_plan(z: &mut Fuzz) -> IndexPlan {
    let (view, _) = random_layout(z);
    let kind = z.pick(&[
        PlanKind::View,
        PlanKind::Gather,
        PlanKind::Scatter,
        PlanKind::Copy,
        PlanKind::Fill,
    ]);
    let result_shape = if z.chance(0.5) {
        view.shape().to_vec()
    } else {
        z.shape(4)
    };
    let advanced = if z.chance(0.8) {
        let n = z.rng.random_range(0..3);
        let dims: Vec<usize> = (0..n)
            .map(|_| {
                if z.chance(0.1) {
                    z.pick(&[usize::MAX, 64, 7])
                } else {
                    z.rng.random_range(0..4)
                }
            })
            .collect();
        let index_shape = z.shape(2);
        let arrays = if z.chance(0.8) {
            n
        } else {
            z.rng.random_range(0..4)
        };
        let indices = (0..arrays)
            .map(|_| {
                if z.chance(0.15) {
                    let v = stored_view(z, &[2], DType::I64).expect("a small storage");
                    IndexArray::Device {
                        index: StoredIndex {
                            view: v,
                            dtype: genesis_index::IndexDType::I64,
                        },
                        size: z.rng.random_range(0..4),
                        dim: z.rng.random_range(0..4),
                    }
                } else {
                    let len = if z.chance(0.7) {
                        index_shape.iter().product()
                    } else {
                        z.rng.random_range(0..5)
                    };
                    IndexArray::Host((0..len).map(|_| z.int()).collect())
                }
            })
            .collect();
        Some(Advanced {
            dims,
            index_shape,
            indices,
            position: if z.chance(0.1) {
                z.pick(&[usize::MAX, 9])
            } else {
                z.rng.random_range(0..3)
            },
        })
    } else {
        None
    };
    IndexPlan {
        kind,
        view,
        advanced,
        result_shape,
        mask: None,
        temp_bytes: z.pick(&[0, usize::MAX]),
    }
}

#[test]
fn hand_built_plans() {
    let mut z = Fuzz::new("hand_built", 3);
    for it in 0..z.iterations(6000) {
        z.iteration = it;
        let p = random_plan(&mut z);
        let len = z.rng.random_range(0..40usize);
        let data: Vec<i32> = (0..len as i32).collect();
        let input = View::new(Storage::from_slice(&data, CPU).expect("small"));
        let (value, _) = random_layout(&mut z);
        z.call(
            &|| format!("{p:?}: execute_get over {len} elements"),
            || {
                if let Ok(v) = execute_get(&input, &p)
                    && small(v.layout().shape())
                {
                    elements(&v)?;
                }
                Ok(())
            },
        );
        z.call(
            &|| format!("{p:?}: source_offsets, compacted, broadcast_value({value:?})"),
            || {
                if small(&p.result_shape) {
                    let _ = p.source_offsets();
                    let _ = p.compacted().source_offsets();
                }
                let _ = p.compacted();
                let _ = p.broadcast_value(&value);
                Ok(())
            },
        );
    }
    z.finish();
}

#[test]
fn rows_shapes_and_conversions() {
    let mut z = Fuzz::new("rows", 4);
    for it in 0..z.iterations(2000) {
        z.iteration = it;
        let (layout, fits) = random_layout(&mut z);
        let Some(len) = fits else { continue };
        let dt = z.pick(&[DType::I32, DType::F32, DType::U8, DType::F64, DType::I64]);
        let Ok(storage) = Storage::zeros(len, dt, CPU) else {
            continue;
        };
        let Ok(input) = View::with_layout(Arc::new(storage), layout.clone()) else {
            continue;
        };
        let ishape = if z.chance(0.8) {
            vec![z.rng.random_range(0..5)]
        } else {
            z.shape(2)
        };
        let idt = z.pick(&[DType::I64, DType::I32, DType::Bool, DType::F32]);
        let Some(index) = stored_view(&mut z, &ishape, idt) else {
            continue;
        };
        z.call(
            &|| format!("select_rows({dt} {layout:?}, {idt} {ishape:?})"),
            || {
                if let Ok(Some(v)) = select_rows(&input, &index)
                    && small(v.layout().shape())
                {
                    v.contiguous().map_err(|e| e.to_string())?;
                }
                Ok(())
            },
        );
        let shapes: Vec<Vec<usize>> = (0..z.rng.random_range(0..4))
            .map(|_| {
                let mut s = z.shape(3);
                if z.chance(0.2) && !s.is_empty() {
                    let i = z.rng.random_range(0..s.len());
                    s[i] = z.pick(&HUGE);
                }
                s
            })
            .collect();
        z.call(&|| format!("broadcast_shapes({shapes:?})"), || {
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let _ = broadcast_shapes(&refs);
            Ok(())
        });
    }
    // The `s!` conversions at the extremes.
    let ints: [u64; 6] = [
        0,
        1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX,
        1 << 40,
    ];
    for &a in &ints {
        for &b in &ints {
            z.call(&|| format!("s! conversions of {a} and {b}"), || {
                let _ = a.to_i64();
                let _ = a.index_item();
                let _ = (a..b).index_item();
                let _ = (a..=b).index_item();
                let _ = (..=b).index_item();
                let _ = (a..).with_step(b);
                let _ = (a..b).with_step(b);
                let _ = (a..=b).with_step(b);
                let _ = (..b).with_step(a);
                let _ = (..).with_step(a);
                let (x, y) = (a as i64, b as i64);
                let _ = (x..=y).index_item();
                let _ = (x..=y).with_step(y);
                let _ = genesis_index::s![x..y; y, ..=x, NEW, ELLIPSIS, -1];
                Ok(())
            });
        }
    }
    z.finish();
}

// ---------------------------------------------------------------------------------------------
// Regressions: one test per fixed fault the fuzzer found, asserting the behaviour now.

fn slice(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> IndexItem {
    IndexItem::Slice { start, stop, step }
}

/// Slice bounds and integer indices of a dimension larger than `i64::MAX` (an empty layout's
/// other sizes may be) were clamped in `i64` (`clamp(0, -2)` panicked): exact now.
#[test]
fn dimensions_past_i64_are_sliced_exactly() {
    let l = Layout::contiguous(&[usize::MAX - 1, 0]);
    let p = plan(&l, &[slice(Some(2), Some(-2), Some(2))], false).unwrap();
    // Elements 2, 4, ..., size - 4 of size 2^64 - 2 (stop -2 is size - 2): 2^63 - 3 of them.
    assert_eq!(p.result_shape, vec![(1usize << 63) - 3, 0]);
    let p = plan(&l, &[IndexItem::Int(-1)], false).unwrap();
    assert_eq!(p.result_shape, vec![0]);
    // Among index tensors an integer is an index array of int64: a wrapped value past
    // `i64::MAX` cannot be one.
    let r = plan(
        &l,
        &[
            IndexItem::Int(-1),
            IndexItem::Tensor(IndexTensor::i64(&[], vec![0])),
        ],
        false,
    );
    assert!(
        matches!(
            r,
            Err(genesis_index::Error::IndexOutOfRange {
                dim: 0,
                index: -1,
                ..
            })
        ),
        "{r:?}"
    );
}

/// Mask coordinates of a 0-d mask claiming `usize::MAX` selected elements reserved that many
/// zeros (a capacity overflow); a mask's count is now checked against its elements.
#[test]
fn mask_coordinates_select_at_most_the_mask() {
    let l = Layout::contiguous(&[2, 3]);
    let coords = |mask_shape: Vec<usize>, selected: usize, coords: Vec<StoredIndex>| {
        IndexItem::Nonzero(MaskCoords {
            mask_shape,
            selected,
            coords,
        })
    };
    let r = plan(&l, &[coords(vec![], usize::MAX, vec![])], false);
    assert!(
        matches!(r, Err(genesis_index::Error::InvalidIndex { .. })),
        "{r:?}"
    );
    let three = StoredIndex {
        view: View::new(Storage::from_slice(&[0i64, 1, 1], CPU).unwrap()),
        dtype: genesis_index::IndexDType::I64,
    };
    let r = plan(&l, &[coords(vec![2], 3, vec![three.clone()])], false);
    assert!(
        matches!(r, Err(genesis_index::Error::InvalidIndex { .. })),
        "{r:?}"
    );
    // A 0-d mask selects its one element or none.
    let p = plan(&l, &[coords(vec![], 1, vec![])], false).unwrap();
    assert_eq!(p.result_shape, vec![1, 2, 3]);
}

/// A layout no storage can hold (strides of another count, more elements than `isize::MAX`)
/// was planned, and the plan's methods indexed past its strides: planning refuses it now.
#[test]
fn plans_of_layouts_no_storage_holds_are_refused() {
    for l in [
        Layout::new(&[2, 2], &[4], 0),
        Layout::contiguous(&[1 << 40, 1 << 40]),
        Layout::new(&[2], &[isize::MAX], 5),
    ] {
        let r = plan(&l, &[], false);
        assert!(
            matches!(r, Err(genesis_index::Error::Storage(_))),
            "{l:?}: {r:?}"
        );
    }
    // An empty layout with huge sizes is planned.
    let p = plan(
        &Layout::contiguous(&[0, usize::MAX]),
        &[IndexItem::full()],
        false,
    )
    .unwrap();
    assert_eq!(p.result_shape, vec![0, usize::MAX]);
}

/// Plans built by hand reached the executors unchecked: a view of 2^62 elements walked into
/// `source_offsets` (a hang, memory without bound), a gather plan without an advanced part hit
/// an `expect`. [`IndexPlan::check`] now refuses a plan whose parts disagree.
#[test]
fn hand_built_plans_are_checked() {
    let input = View::new(Storage::from_slice(&[1i32, 2, 3, 4, 5, 6], CPU).unwrap());
    let basic = |kind, view: Layout, result_shape: Vec<usize>, advanced| IndexPlan {
        kind,
        view,
        advanced,
        result_shape,
        mask: None,
        temp_bytes: 0,
    };
    let start = std::time::Instant::now();
    let p = basic(
        PlanKind::Scatter,
        Layout::new(&[1 << 62], &[0], 0),
        vec![3, 0, 3],
        None,
    );
    assert!(matches!(
        p.source_offsets(),
        Err(genesis_index::Error::InvalidIndex { .. })
    ));
    assert_eq!(p.compacted(), p);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let p = basic(PlanKind::Gather, Layout::contiguous(&[6]), vec![6], None);
    assert!(matches!(
        execute_get(&input, &p),
        Err(genesis_index::Error::InvalidIndex { .. })
    ));
    let adv = |dims: Vec<usize>, values: Vec<i64>| Advanced {
        dims,
        index_shape: vec![values.len()],
        indices: vec![IndexArray::Host(values)],
        position: 0,
    };
    let l = Layout::contiguous(&[2, 3]);
    // An indexed dimension past the view's rank; a value out of range; a wrong result shape.
    let p = basic(
        PlanKind::Gather,
        l.clone(),
        vec![1, 2],
        Some(adv(vec![5], vec![0])),
    );
    assert!(matches!(
        p.check(),
        Err(genesis_index::Error::InvalidIndex { .. })
    ));
    let p = basic(
        PlanKind::Gather,
        l.clone(),
        vec![1, 3],
        Some(adv(vec![0], vec![7])),
    );
    // Values are the executors' to check (the storage layer's error), and `source_offsets`'.
    p.check().unwrap();
    assert!(matches!(
        execute_get(&input.relayout(l.clone()).unwrap(), &p),
        Err(genesis_index::Error::Storage(
            genesis_storage::Error::IndexValueOutOfRange { .. }
        ))
    ));
    assert!(matches!(
        p.source_offsets(),
        Err(genesis_index::Error::IndexOutOfRange {
            dim: 0,
            index: 7,
            size: 2
        })
    ));
    let p = basic(
        PlanKind::Gather,
        l.clone(),
        vec![9],
        Some(adv(vec![0], vec![1])),
    );
    assert!(matches!(
        p.source_offsets(),
        Err(genesis_index::Error::InvalidIndex { .. })
    ));
    // The plan `plan` makes for the same index passes and reads the same elements.
    let made = plan(
        &l,
        &[IndexItem::Tensor(IndexTensor::i64(&[1], vec![1]))],
        false,
    )
    .unwrap();
    made.check().unwrap();
    assert_eq!(made.source_offsets().unwrap(), vec![3, 4, 5]);
    // A plan whose view has more than `MAX_RANK` dimensions (new axes beside dimensions that
    // index arrays replace) while its result has not passes too.
    let mut items = vec![IndexItem::NewAxis; 63];
    items.push(IndexItem::Int(1));
    items.push(IndexItem::Tensor(IndexTensor::i64(&[], vec![2])));
    let wide = plan(&l, &items, false).unwrap();
    assert_eq!((wide.view.rank(), wide.result_shape.len()), (65, 63));
    wide.check().unwrap();
    assert_eq!(wide.source_offsets().unwrap(), vec![5]);
    // A view with strides of another count than its rank, whose dimensions of size 1 hid it
    // from the reach check, indexed the strides past their end in compaction.
    for (shape, strides) in [(vec![1usize], vec![]), (vec![0, 0, 1], vec![0isize, -1])] {
        let rank = shape.len();
        let p = basic(
            PlanKind::Gather,
            Layout::new(&shape, &strides, 0),
            shape.clone(),
            Some(Advanced {
                dims: vec![rank - 1],
                index_shape: vec![1],
                indices: vec![IndexArray::Host(vec![0])],
                position: rank - 1,
            }),
        );
        assert!(matches!(
            p.check(),
            Err(genesis_index::Error::InvalidIndex { .. })
        ));
        assert_eq!(p.compacted(), p);
        assert!(p.source_offsets().is_err());
    }
}

/// A hand-built plan whose indexed dimensions are listed out of order, with the index
/// dimensions placed after the other two (`position` 2): its compaction (which
/// `execute_get` and `source_offsets` run) placed them by the first indexed dimension and
/// panicked inserting past the end. The compacted plan now places them after the basic
/// dimensions that stood before them, and reads what the plan describes.
#[test]
fn plans_with_indexed_dimensions_out_of_order_compact() {
    let data: Vec<i32> = (0..12).collect();
    let input = View::new(Storage::from_slice(&data, CPU).unwrap());
    // View [2, 2, 3] (contiguous); index dimensions 2 then 0; result [2 (dim 1), index 2].
    let view = Layout::contiguous(&[2, 2, 3]);
    let p = IndexPlan {
        kind: PlanKind::Gather,
        view: view.clone(),
        advanced: Some(Advanced {
            dims: vec![2, 0],
            index_shape: vec![2],
            indices: vec![IndexArray::Host(vec![2, 0]), IndexArray::Host(vec![1, 0])],
            position: 1,
        }),
        result_shape: vec![2, 2],
        mask: None,
        temp_bytes: 0,
    };
    p.check().unwrap();
    // Result [j, k] = x[dim0 = [1, 0][k], j, dim2 = [2, 0][k]] = 6 * [1, 0][k] + 3 j + [2, 0][k].
    let want = [8usize, 0, 11, 3];
    assert_eq!(p.source_offsets().unwrap(), want);
    let got = execute_get(&input.relayout(view).unwrap(), &p).unwrap();
    let values: Vec<usize> = got
        .contiguous()
        .unwrap()
        .to_vec::<i32>()
        .unwrap()
        .into_iter()
        .map(|v| v as usize)
        .collect();
    assert_eq!(values, want);
}

/// `plan` made a plan whose result has more elements than any tensor may (a view of
/// `isize::MAX` elements beside an index of two), which failed its own check; it refuses
/// such an index now.
#[test]
fn plans_of_too_many_result_elements_are_refused() {
    let l = Layout::new(&[1, isize::MAX as usize], &[0, 0], 1);
    let items = [
        IndexItem::NewAxis,
        IndexItem::Tensor(IndexTensor::i64(&[1, 2], vec![0, -1])),
    ];
    for assign in [false, true] {
        assert!(plan(&l, &items, assign).is_err());
    }
}

/// Gathers and assignments over an empty layout whose other sizes are huge multiplied the
/// sizes unchecked (`[3, usize::MAX, 0]`); the element counts are zero-aware now.
#[test]
fn empty_layouts_with_huge_sizes_index_and_assign() {
    let s = Arc::new(Storage::from_slice(&[7i32; 4], CPU).unwrap());
    let l = Layout::contiguous(&[3, usize::MAX, 0]);
    let v = View::with_layout(Arc::clone(&s), l.clone()).unwrap();
    let idx = IndexTensor::i64(&[2], vec![0, 2]);
    let g = get(&v, &[IndexItem::Tensor(idx.clone())]).unwrap();
    assert_eq!(g.layout().shape(), &[2, usize::MAX, 0]);
    let mut target = Storage::from_slice(&[7i32; 4], CPU).unwrap();
    set(&mut target, &l, &[], Value::Scalar(1.0), false).unwrap();
    set(
        &mut target,
        &l,
        &[IndexItem::Tensor(idx)],
        Value::Scalar(1.0),
        true,
    )
    .unwrap();
    assert_eq!(target.to_vec::<i32>().unwrap(), [7; 4]);
}

/// `select_rows` of an empty input whose rows are huge multiplied the row sizes unchecked
/// (the row length in bytes, and the result's count before its bounds check).
#[test]
fn select_rows_of_huge_empty_rows() {
    let index = View::new(Storage::from_slice(&[0i64], CPU).unwrap());
    let bytes = Arc::new(Storage::zeros(0, DType::U8, CPU).unwrap());
    let input = View::with_layout(Arc::clone(&bytes), Layout::contiguous(&[0, 1 << 61])).unwrap();
    let r = select_rows(&input, &index);
    assert!(
        matches!(r, Err(genesis_index::Error::IndexOutOfRange { .. })),
        "{r:?}"
    );
    let floats = Arc::new(Storage::zeros(0, DType::F32, CPU).unwrap());
    let input = View::with_layout(floats, Layout::contiguous(&[0, 1 << 62])).unwrap();
    assert!(matches!(select_rows(&input, &index), Ok(None)));
}
