//! A seeded fuzzer of `genesis-storage`'s public API on the CPU: conversions between every
//! pair of dtypes (of values at and past each dtype's range, NaN and infinities) and over
//! ranges past the end; [`Layout`] operations with arguments out of range, strides of another
//! count, overflowing sizes and reaches; views ([`View::with_layout`], `relayout`,
//! `contiguous`) and strided copies between random layouts, of any rank up to the limit; the
//! element-wise, reduction, scan, selection and mask operations over ranges that reach past
//! the end or overflow, of every dtype; memory-mapped files that are empty, short, or not
//! regular files, at offsets and lengths past their ends.
//!
//! Every call runs under `catch_unwind`: `Ok` and `Err` are both accepted, with checks where
//! the answer is known (a layout that passes `check_bounds` walks only indices inside the
//! storage; a gathered view holds the elements its layout names; an in-place operation that
//! fails changes nothing); a panic or a failed check is recorded with the seed, the iteration
//! and the input, and the test fails listing them. Sizes are tiny, or so large that any
//! request for them must be refused before memory is touched (at least 2^45 elements).
//!
//! `GENESIS_FUZZ_SEED` (default 0) and `GENESIS_FUZZ_ITERS` (a multiplier of the default
//! iteration counts, default 1) widen a local run; `GENESIS_FUZZ_TRACE` prints each call
//! before it runs; `GENESIS_FUZZ_BACKTRACE` adds a backtrace to each panic reported.

use std::sync::Arc;

use genesis_kernels::classify::FloatClass;
use genesis_kernels::softmax::SoftmaxOp;
use genesis_storage::{
    BinaryOp, BinaryRhs, CompareOp, DType, Device, Layout, MapMode, MatmulShape, ReduceOp,
    ReduceShape, Sampler, Storage, UnaryOp, View, checked_numel,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CPU: Device = Device::Cpu;

// ---------------------------------------------------------------------------------------------
// The harness (shared by the fuzzers) and this fuzzer's random inputs.

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::Fuzz;

/// One shared-write entry point to try on a read-only storage: true when it refused.
type SharedCheck<'a> = Box<dyn Fn(&Storage) -> bool + 'a>;

impl Fuzz {
    fn dtype(&mut self) -> DType {
        self.pick(&DType::ALL)
    }

    /// A start or length for a storage of `len` elements: mostly inside, sometimes past the
    /// end, sometimes at the extremes (whose sums overflow).
    fn at(&mut self, len: usize) -> usize {
        match self.rng.random_range(0..10) {
            0 => self.pick(&HUGE),
            1 => len + self.rng.random_range(0..3),
            _ => self.rng.random_range(0..=len),
        }
    }

    /// A small size, or (rarely) a huge one.
    fn size(&mut self) -> usize {
        if self.chance(0.1) {
            self.pick(&HUGE)
        } else {
            self.rng.random_range(0..5)
        }
    }

    fn float(&mut self) -> f64 {
        if self.chance(0.4) {
            self.pick(&FLOATS)
        } else {
            self.rng.random_range(-300.0..300.0)
        }
    }

    /// A storage of `len` elements of `dtype` with random values (extremes among them).
    fn storage(&mut self, len: usize, dtype: DType) -> Storage {
        let values: Vec<f64> = (0..len).map(|_| self.float()).collect();
        random_storage(&values, dtype)
    }
}

/// Sizes no host can hold (2^45 elements of one byte is 32 TiB), and sizes whose sums and
/// products overflow.
const HUGE: [usize; 6] = [
    1 << 45,
    1 << 62,
    isize::MAX as usize,
    usize::MAX / 2,
    usize::MAX - 1,
    usize::MAX,
];

const FLOATS: [f64; 18] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    255.0,
    256.0,
    -129.0,
    65504.0,
    65520.0,
    3.4e38,
    1e39,
    9.3e18,
    -9.3e18,
    f64::MIN_POSITIVE,
];

/// `values` as a storage of `dtype`: floats rounded by the conversion, integers wrapped (as a
/// cast), bools nonzero.
fn random_storage(values: &[f64], dtype: DType) -> Storage {
    let s = match dtype {
        DType::F64 => Storage::from_slice(values, CPU),
        DType::F32 => {
            Storage::from_slice(&values.iter().map(|&v| v as f32).collect::<Vec<_>>(), CPU)
        }
        DType::F16 => Storage::from_slice(
            &values
                .iter()
                .map(|&v| half::f16::from_f64(v))
                .collect::<Vec<_>>(),
            CPU,
        ),
        DType::BF16 => Storage::from_slice(
            &values
                .iter()
                .map(|&v| half::bf16::from_f64(v))
                .collect::<Vec<_>>(),
            CPU,
        ),
        DType::I64 => {
            Storage::from_slice(&values.iter().map(|&v| v as i64).collect::<Vec<_>>(), CPU)
        }
        DType::I32 => Storage::from_slice(
            &values.iter().map(|&v| v as i64 as i32).collect::<Vec<_>>(),
            CPU,
        ),
        DType::I16 => Storage::from_slice(
            &values.iter().map(|&v| v as i64 as i16).collect::<Vec<_>>(),
            CPU,
        ),
        DType::I8 => Storage::from_slice(
            &values.iter().map(|&v| v as i64 as i8).collect::<Vec<_>>(),
            CPU,
        ),
        DType::U8 => Storage::from_slice(
            &values.iter().map(|&v| v as i64 as u8).collect::<Vec<_>>(),
            CPU,
        ),
        DType::Bool => Storage::from_bytes(
            &values
                .iter()
                .map(|&v| u8::from(v != 0.0))
                .collect::<Vec<_>>(),
            DType::Bool,
            CPU,
        ),
    };
    s.expect("a small storage")
}

/// The bytes of a storage (to compare before and after an operation).
fn bytes(s: &Storage) -> Vec<u8> {
    s.to_bytes().unwrap_or_default()
}

/// A random layout: contiguous, a view of one, or hand-made (strides of any value and count,
/// any offset, huge sizes).
fn random_layout(z: &mut Fuzz) -> Layout {
    let rank = z.rng.random_range(0..5);
    let shape: Vec<usize> = (0..rank).map(|_| z.rng.random_range(0..4)).collect();
    match z.rng.random_range(0..8) {
        0..=2 => Layout::contiguous(&shape),
        3 | 4 => {
            let mut l = Layout::contiguous(&shape);
            for _ in 0..z.rng.random_range(1..4) {
                if let Ok(n) = random_layout_op(z, &l) {
                    l = n;
                }
            }
            l
        }
        5 => {
            // Sizes that overflow, or empty with huge other sizes.
            let mut s: Vec<usize> = (0..z.rng.random_range(1..4)).map(|_| z.size()).collect();
            if z.chance(0.5) {
                let at = z.rng.random_range(0..=s.len());
                s.insert(at, 0);
            }
            if z.chance(0.5) {
                Layout::contiguous(&s)
            } else {
                Layout::new(&s, &vec![0; s.len()], z.rng.random_range(0..4))
            }
        }
        _ => {
            let n = if z.chance(0.8) {
                shape.len()
            } else {
                z.rng.random_range(0..6)
            };
            let strides: Vec<isize> = (0..n)
                .map(|_| {
                    if z.chance(0.2) {
                        z.pick(&[isize::MIN, isize::MAX, -1, -4, 1 << 40])
                    } else {
                        z.rng.random_range(0..6i64) as isize
                    }
                })
                .collect();
            let offset = if z.chance(0.15) {
                z.pick(&HUGE)
            } else {
                z.rng.random_range(0..8)
            };
            Layout::new(&shape, &strides, offset)
        }
    }
}

fn dim(z: &mut Fuzz, l: &Layout) -> isize {
    if z.chance(0.1) {
        z.pick(&[isize::MIN, isize::MAX, -65, 64])
    } else {
        let r = l.rank() as i64 + 1;
        z.rng.random_range(-r..r) as isize
    }
}

/// One random layout operation.
fn random_layout_op(z: &mut Fuzz, l: &Layout) -> Result<Layout, genesis_storage::LayoutError> {
    match z.rng.random_range(0..9) {
        0 => {
            let (a, b) = (dim(z, l), dim(z, l));
            l.transpose(a, b)
        }
        1 => {
            let mut perm: Vec<usize> = (0..l.rank()).collect();
            if z.chance(0.3) {
                perm.push(z.rng.random_range(0..4));
            }
            for i in (1..perm.len()).rev() {
                perm.swap(i, z.rng.random_range(0..=i));
            }
            l.permute(&perm)
        }
        2 => {
            let d = dim(z, l);
            let (s, n) = (z.size(), z.size());
            l.narrow(d, s, n)
        }
        3 => {
            let d = dim(z, l);
            let (s, e) = (z.size(), z.size());
            let step = z.pick(&[1isize, 2, 3, 0, -1, isize::MAX, isize::MIN]);
            l.slice(d, s, e, step)
        }
        4 => {
            let mut s = l.shape().to_vec();
            if z.chance(0.5) {
                s.insert(0, z.size());
            }
            if let Some(x) = s.iter_mut().find(|x| **x == 1) {
                *x = z.size();
            }
            l.expand(&s)
        }
        5 => {
            let d = dim(z, l);
            l.squeeze(d)
        }
        6 => {
            let d = dim(z, l);
            l.unsqueeze(d)
        }
        7 => {
            let n = l.numel();
            let s: Vec<usize> = if z.chance(0.5) && n > 0 && n <= 64 {
                let a = (1..=n).filter(|d| n.is_multiple_of(*d)).collect::<Vec<_>>();
                let a = a[z.rng.random_range(0..a.len())];
                vec![a, n / a]
            } else {
                (0..z.rng.random_range(0..3)).map(|_| z.size()).collect()
            };
            l.view(&s)
        }
        _ => {
            let s: Vec<isize> = (0..z.rng.random_range(0..4))
                .map(|_| z.pick(&[-1isize, -1, -2, 0, 1, 2, 3, isize::MAX, isize::MIN]))
                .collect();
            l.infer_shape(&s)
                .map(|d| Layout::new(&d, &vec![0; d.len()], 0))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn conversions() {
    let mut z = Fuzz::new("conversions", 1);
    for it in 0..z.iterations(600) {
        z.iteration = it;
        let from = z.dtype();
        let len = z.rng.random_range(0..9);
        let values: Vec<f64> = (0..len).map(|_| z.float()).collect();
        let src = random_storage(&values, from);
        for to in DType::ALL {
            let (start, n) = (z.at(len), z.at(len));
            z.call(
                &|| format!("{from}{values:?}.to_dtype({to}), to_dtype_at({start}, {n}, {to})"),
                || {
                    if let Ok(out) = src.to_dtype(to) {
                        if out.len() != len || out.dtype() != to {
                            return Err(format!("{} elements of {}", out.len(), out.dtype()));
                        }
                        let _ = out.to_f64_vec();
                    }
                    if let Ok(out) = src.to_dtype_at(start, n, to)
                        && out.len() != n
                    {
                        return Err(format!("{} elements, asked for {n}", out.len()));
                    }
                    let _ = src.to_device_at(start, n, CPU);
                    Ok(())
                },
            );
        }
        let (start, n) = (z.at(len), z.at(len));
        z.call(
            &|| format!("{from}[{len}]: typed reads at ({start}, {n})"),
            || {
                let _ = src.to_vec_at::<f32>(start, n);
                let _ = src.to_vec_at::<i64>(start, n);
                let _ = src.to_vec_at::<u8>(start, n);
                let _ = src.as_slice::<f64>().map(|s| s.len());
                let _ = src.as_slice::<half::bf16>().map(|s| s.len());
                let _ = src.to_bytes();
                let _ = src.try_clone();
                let _ = src.inspect();
                Ok(())
            },
        );
        // Scalars and fills of any value in any dtype.
        let (x, dt) = (z.float(), z.dtype());
        let fill_len = z.size();
        z.call(
            &|| format!("scalar({x:?}, {dt}), full_scalar({fill_len}, ..)"),
            || {
                if let Ok(s) = Storage::scalar(x, dt)
                    && s.len() != 1
                {
                    return Err("a scalar of another length".into());
                }
                let _ = Storage::full_scalar(fill_len, x, dt, CPU);
                Ok(())
            },
        );
        // Raw bytes of any length as any dtype.
        let raw: Vec<u8> = (0..z.rng.random_range(0..17))
            .map(|_| z.rng.random())
            .collect();
        z.call(&|| format!("from_bytes({raw:?}, {dt})"), || {
            if let Ok(s) = Storage::from_bytes(&raw, dt, CPU)
                && s.to_bytes().map_err(|e| e.to_string())? != raw
            {
                return Err("the bytes read back differ".into());
            }
            Ok(())
        });
        let sampler = z.pick(&[
            Sampler::Uniform,
            Sampler::Normal,
            Sampler::Int { low: -3, range: 7 },
            Sampler::Int {
                low: i64::MIN,
                range: u64::MAX,
            },
            Sampler::Int {
                low: i64::MAX,
                range: 1,
            },
        ]);
        let (rlen, seed, offset) = (z.size(), z.rng.random(), z.pick(&[0, 1, u64::MAX]));
        z.call(
            &|| format!("random({sampler:?}, {rlen}, {dt}, {seed}, {offset})"),
            || {
                let _ = Storage::random(sampler, rlen, dt, CPU, seed, offset);
                let _ = Storage::random_blocks(sampler, rlen, dt);
                Ok(())
            },
        );
    }
    z.finish();
}

#[test]
fn layouts_views_and_copies() {
    let mut z = Fuzz::new("layouts", 2);
    for it in 0..z.iterations(2400) {
        z.iteration = it;
        let l = random_layout(&mut z);
        let op_seed: u64 = z.rng.random();
        z.call(&|| format!("{l:?}: queries and an operation"), || {
            let _ = (l.numel(), l.try_numel(), l.is_contiguous(), l.span());
            let _ = (l.coalesced(), l.strided_blocks(), l.squeeze_all());
            let _ = l.dim(-1);
            let other = Layout::contiguous(l.shape());
            let _ = l.disjoint_from(&other);
            let mut inner = Fuzz {
                rng: SmallRng::seed_from_u64(op_seed),
                seed: 0,
                test: "",
                iteration: 0,
                calls: 0,
                failures: Vec::new(),
            };
            let _ = random_layout_op(&mut inner, &l);
            // A layout that fits a storage walks only indices inside it.
            if let Ok(Some((_, end))) = l.span()
                && end <= 4096
                && l.numel() <= 4096
            {
                l.check_bounds(end).map_err(|e| e.to_string())?;
                if let Some(bad) = l.indices().find(|&i| i >= end) {
                    return Err(format!("index {bad} of a layout within {end}"));
                }
            }
            // A layout whose strides do not match its rank walks nothing.
            if l.strides().len() != l.rank() && l.indices().next().is_some() {
                return Err("walked a layout of another stride count".into());
            }
            Ok(())
        });
        // Views of a storage.
        let len = z.rng.random_range(0..40usize);
        let dt = z.dtype();
        let st = Arc::new(z.storage(len, dt));
        let fits = l.check_bounds(len).is_ok();
        z.call(
            &|| format!("View::with_layout({dt}[{len}], {l:?}).contiguous()"),
            || {
                let v = View::with_layout(Arc::clone(&st), l.clone());
                if v.is_ok() != fits {
                    return Err(format!("with_layout {} but check_bounds {fits}", v.is_ok()));
                }
                let _ = st.inspect_view(&l);
                if let Ok(v) = v
                    && v.layout().numel() <= 4096
                {
                    let c = v.contiguous().map_err(|e| e.to_string())?;
                    let all = bytes(&st);
                    let size = dt.size();
                    let want: Vec<u8> = l
                        .indices()
                        .flat_map(|i| all[i * size..(i + 1) * size].to_vec())
                        .collect();
                    if bytes(&c) != want {
                        return Err("contiguous() holds other elements".into());
                    }
                    let next = random_layout(&mut Fuzz::new("", op_seed));
                    let _ = v.relayout(next);
                }
                let _ = st.contiguous(&l);
                Ok(())
            },
        );
        // A strided copy between two random layouts of one shape (or not).
        let dl = if z.chance(0.7) {
            Layout::contiguous(l.shape())
        } else {
            random_layout(&mut z)
        };
        let dlen = z.rng.random_range(0..40usize);
        let ddt = if z.chance(0.8) { dt } else { z.dtype() };
        let mut dst = z.storage(dlen, ddt);
        z.call(
            &|| format!("{ddt}[{dlen}] {dl:?} <- {dt}[{len}] {l:?}: copy_strided_from"),
            || {
                let before = bytes(&dst);
                if dst.copy_strided_from(&dl, &st, &l).is_err() && bytes(&dst) != before {
                    return Err("a failed copy changed the destination".into());
                }
                Ok(())
            },
        );
    }
    // High ranks: views of up to `MAX_RANK` dimensions gathered and copied.
    for it in 0..z.iterations(60) {
        z.iteration = it;
        let rank = z.rng.random_range(8..=genesis_storage::MAX_RANK);
        let mut shape: Vec<usize> = (0..rank).map(|_| 1).collect();
        for _ in 0..z.rng.random_range(0..6) {
            let i = z.rng.random_range(0..rank);
            shape[i] = 2;
        }
        let n: usize = shape.iter().product();
        let st = Arc::new(z.storage(n, DType::I32));
        let mut l = Layout::contiguous(&shape);
        for _ in 0..z.rng.random_range(0..4) {
            let (a, b) = (z.rng.random_range(0..rank), z.rng.random_range(0..rank));
            l = l.transpose(a as isize, b as isize).expect("in range");
        }
        z.call(&|| format!("rank {rank}: {l:?}.contiguous()"), || {
            let v = View::with_layout(Arc::clone(&st), l.clone()).map_err(|e| e.to_string())?;
            let c = v.contiguous().map_err(|e| e.to_string())?;
            let all: Vec<i32> = st.to_vec().map_err(|e| e.to_string())?;
            let want: Vec<i32> = l.indices().map(|i| all[i]).collect();
            if c.to_vec::<i32>().map_err(|e| e.to_string())? != want {
                return Err("contiguous() holds other elements".into());
            }
            Ok(())
        });
    }
    z.finish();
}

#[test]
fn operations_over_ranges() {
    let mut z = Fuzz::new("ops", 3);
    for it in 0..z.iterations(1000) {
        z.iteration = it;
        let dt = z.dtype();
        let len = z.rng.random_range(0..9);
        let a = z.storage(len, dt);
        let bdt = if z.chance(0.8) { dt } else { z.dtype() };
        let b = z.storage(len, bdt);
        let (s, t, n) = (z.at(len), z.at(len), z.at(len));
        let uop = z.pick(&UnaryOp::ALL);
        let bop = z.pick(&BinaryOp::ALL);
        let cop = z.pick(&CompareOp::ALL);
        let what = format!("{dt}[{len}] and {bdt}[{len}] at ({s}, {t}, {n})");
        z.call(&|| format!("{what}: {uop:?}, {bop:?}, {cop:?}"), || {
            let _ = a.unary_at(uop, s, n);
            let _ = a.binary_at(bop, s, &b, t, n);
            let _ = a.binary_mixed_at(bop, s, &b, t, n, n % 2 == 0);
            let _ = a.compare_at(cop, s, &b, t, n);
            let _ = a.binary(bop, &b);
            let _ = a.add(&b);
            let _ = a.unary(uop);
            Ok(())
        });
        let mut target = a.try_clone().expect("small");
        let before = bytes(&target);
        z.call(&|| format!("{what}: in place {uop:?}, {bop:?}"), || {
            if target.unary_assign(uop, s, n).is_err() && bytes(&target) != before {
                return Err("a failed unary_assign changed the target".into());
            }
            let now = bytes(&target);
            if target.binary_assign(bop, s, &b, t, n).is_err() && bytes(&target) != now {
                return Err("a failed binary_assign changed the target".into());
            }
            let now = bytes(&target);
            if target.copy_from(&b).is_err() && bytes(&target) != now {
                return Err("a failed copy_from changed the target".into());
            }
            Ok(())
        });
        let mut out = z.storage(len, dt);
        let o = z.at(len);
        z.call(&|| format!("{what}: into out at {o}"), || {
            let before = bytes(&out);
            if a.binary_into(bop, s, &b, t, &mut out, o, n).is_err() && bytes(&out) != before {
                return Err("a failed binary_into changed the output".into());
            }
            let before = bytes(&out);
            if a.unary_into(uop, s, &mut out, o, n).is_err() && bytes(&out) != before {
                return Err("a failed unary_into changed the output".into());
            }
            Ok(())
        });
        let mdt = if z.chance(0.8) {
            DType::Bool
        } else {
            z.dtype()
        };
        let mask = z.storage(len, mdt);
        let vdt = if z.chance(0.8) { dt } else { z.dtype() };
        let value = z.storage(1, vdt);
        z.call(&|| format!("{what}: masks and where"), || {
            let _ = a.masked_select_at(s, &mask, t, n);
            let _ = mask.nonzero_at(s, n);
            let _ = Storage::select_at((&mask, s), (&a, t), (&b, t), n);
            let mut m = a.try_clone().map_err(|e| e.to_string())?;
            let before = bytes(&m);
            let v = bytes(&value);
            if m.masked_fill_at(s, &mask, t, n, &v).is_err() && bytes(&m) != before {
                return Err("a failed masked_fill_at changed the target".into());
            }
            Ok(())
        });
        let (lo, hi, x) = (z.float(), z.float(), z.float());
        let (rows, cols, diag) = (z.size(), z.size(), z.pick(&[0, 1, -1, i64::MIN, i64::MAX]));
        let classes = z.size();
        z.call(
            &|| format!("{what}: clamp({lo:?}, {hi:?}), triangle([{rows}, {cols}], {diag}), one_hot({classes}), classify, nan_to_num({x:?})"),
            || {
                let _ = a.clamp_at(s, n, Some(lo), Some(hi));
                let _ = a.clamp_at(s, n, None, Some(hi));
                let _ = a.clamp_with_at(s, n, Some(&b), None);
                let _ = a.triangle_at(s, n, [rows, cols], diag, diag > 0);
                let _ = a.one_hot_at(s, n, classes);
                let _ = a.classify_at(FloatClass::IsNan, s, n);
                let _ = a.nan_to_num_at(s, n, [x, lo, hi]);
                Ok(())
            },
        );
        let shape = ReduceShape {
            outer: z.size(),
            r: z.size(),
            inner: z.size(),
        };
        let rop = z.pick(&ReduceOp::ALL);
        let sop = z.pick(&SoftmaxOp::ALL);
        let (k, correction) = (z.size(), z.float());
        z.call(
            &|| format!("{what}: {rop:?}, {sop:?}, scans, var, sort over {shape:?}, k {k}"),
            || {
                let _ = a.reduce(rop, s, shape);
                let _ = a.softmax(sop, s, shape);
                let _ = a.cumsum(s, shape);
                let _ = a.cumprod(s, shape);
                let _ = a.var(s, shape, correction, true);
                let _ = a.sort_rows(s, shape.outer, shape.r, k, k % 2 == 0);
                let _ = genesis_storage::reduce_dtype(rop, dt);
                Ok(())
            },
        );
        let ms = MatmulShape {
            batch: z.size(),
            m: z.size(),
            n: z.size(),
            k: z.size(),
            a_batch_stride: z.size(),
            b_batch_stride: z.size(),
        };
        z.call(&|| format!("{what}: matmul {ms:?}"), || {
            let _ = a.matmul(s, &b, t, ms);
            let mut out = a.try_clone().map_err(|e| e.to_string())?;
            let before = bytes(&out);
            if a.matmul_into(s, &b, t, ms, &mut out, o).is_err() && bytes(&out) != before {
                return Err("a failed matmul_into changed the output".into());
            }
            Ok(())
        });
        // Broadcast (strided) operations of random layouts.
        let la = random_layout(&mut z);
        let lb = if z.chance(0.7) {
            Layout::contiguous(la.shape())
        } else {
            random_layout(&mut z)
        };
        let one = z.storage(1, bdt);
        z.call(
            &|| format!("{what}: strided {bop:?} {la:?} with {lb:?}"),
            || {
                let _ = a.binary_strided(bop, &la, BinaryRhs::Tensor(&b, &lb));
                let _ = a.binary_strided(bop, &la, BinaryRhs::Scalar(&one));
                let _ = a.compare_strided(cop, &la, BinaryRhs::Tensor(&b, &lb));
                let _ = Storage::select_strided(
                    (&mask, &la),
                    BinaryRhs::Tensor(&a, &lb),
                    BinaryRhs::Scalar(&one),
                );
                let mut t2 = a.try_clone().map_err(|e| e.to_string())?;
                let before = bytes(&t2);
                if t2
                    .binary_strided_assign(bop, s, la.shape(), BinaryRhs::Tensor(&b, &lb))
                    .is_err()
                    && bytes(&t2) != before
                {
                    return Err("a failed binary_strided_assign changed the target".into());
                }
                Ok(())
            },
        );
    }
    z.finish();
}

#[test]
fn mapped_files() {
    let mut z = Fuzz::new("files", 4);
    let dir = std::env::temp_dir();
    let tag = std::process::id();
    for it in 0..z.iterations(150) {
        z.iteration = it;
        let flen = z.pick(&[0usize, 1, 3, 4, 7, 8, 16, 33, 64]);
        let path = dir.join(format!("genesis-fuzz-storage-{tag}-{it}"));
        std::fs::write(&path, vec![0x5au8; flen]).expect("a temporary file");
        let dt = z.dtype();
        let (offset, len) = (z.at(flen), z.at(flen));
        let mode = if z.chance(0.5) {
            MapMode::ReadOnly
        } else {
            MapMode::ReadWrite
        };
        let truncate = z.chance(0.2).then(|| z.rng.random_range(0..=flen));
        z.call(
            &|| {
                format!(
                    "map_file(file of {flen}, {dt}, offset {offset}, len {len}, {mode:?}), truncated to {truncate:?}"
                )
            },
            || {
                let _ = genesis_storage::regular_file_len(&path);
                if let Ok(mut m) = Storage::map_file(&path, dt, offset, len, mode) {
                    if let Some(t) = truncate {
                        let f = std::fs::OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .map_err(|e| e.to_string())?;
                        f.set_len(t as u64).map_err(|e| e.to_string())?;
                    }
                    let _ = m.to_bytes();
                    let _ = m.to_dtype(DType::F64);
                    let _ = m.check_mapping();
                    let _ = m.flush();
                    let _ = m.host_bytes_mut().map(|b| b.fill(1));
                    let _ = m.unary_assign(UnaryOp::Neg, 0, m.len());
                    let _ = m.check_mapping();
                }
                Ok(())
            },
        );
        let _ = std::fs::remove_file(&path);
    }
    for bad in [
        std::path::PathBuf::from(""),
        std::path::PathBuf::from("/dev/null"),
        std::path::PathBuf::from("/dev/zero"),
        std::path::PathBuf::from("/proc/self/status"),
        dir.clone(),
        dir.join("genesis-fuzz-storage-missing"),
    ] {
        for len in [0usize, 1, 4096, usize::MAX] {
            z.call(
                &|| format!("map_file({}, len {len})", bad.display()),
                || {
                    let _ = genesis_storage::regular_file_len(&bad);
                    let _ = Storage::map_file(&bad, DType::U8, 0, len, MapMode::ReadOnly);
                    Ok(())
                },
            );
        }
    }
    // Shared memory: small segments, names and lengths at the edges.
    for it in 0..z.iterations(20) {
        z.iteration = it;
        let name = format!("genesis-fuzz-{tag}-{it}");
        let dt = z.dtype();
        let len = z.pick(&[0usize, 1, 5, usize::MAX, 1 << 62]);
        z.call(&|| format!("create_shared({name}, {dt}, {len})"), || {
            if let Ok(s) = Storage::create_shared(&name, dt, len) {
                let _ = s.shared_name();
                let attached = Storage::attach_shared(&name, dt);
                if let Ok(a) = attached
                    && a.len() != len
                {
                    return Err(format!("attached {} of {len}", a.len()));
                }
                let _ = Storage::attach_shared(&name, DType::F64);
                Storage::unlink_shared(&name).map_err(|e| e.to_string())?;
            }
            Ok(())
        });
    }
    z.finish();
}

#[test]
fn element_counts_are_checked() {
    let mut z = Fuzz::new("counts", 5);
    for it in 0..z.iterations(300) {
        z.iteration = it;
        let shape: Vec<usize> = (0..z.rng.random_range(0..70)).map(|_| z.size()).collect();
        z.call(&|| format!("checked_numel({shape:?})"), || {
            let n = checked_numel(&shape);
            if let Ok(n) = n
                && !shape.contains(&0)
                && shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(n)
            {
                return Err(format!("count {n}"));
            }
            let _ = Layout::try_contiguous(&shape);
            let _ = Layout::contiguous(&shape).numel();
            Ok(())
        });
        let (len, dt) = (z.size(), z.dtype());
        z.call(&|| format!("zeros/empty({len}, {dt})"), || {
            if len >= 1 << 45 && Storage::zeros(len, dt, CPU).is_ok() {
                return Err("a storage no host can hold".into());
            }
            if len < 1 << 45 {
                let _ = Storage::zeros(len, dt, CPU);
                let _ = Storage::empty(len, dt, CPU);
            }
            Ok(())
        });
    }
    z.finish();
}

// ---------------------------------------------------------------------------------------------
// Regressions: one test per fixed fault the fuzzer found, asserting the behaviour now.

/// `Layout::indices` and `Layout::squeeze_all` indexed past the strides of a layout whose
/// stride count differs from its rank (`Layout::new` does not check it); `coalesced` made such
/// a layout look valid. Such a layout walks nothing and stays as malformed as it came.
#[test]
fn layouts_whose_strides_do_not_match_their_rank() {
    let short = Layout::new(&[2, 3], &[1], 0);
    assert_eq!(short.indices().count(), 0);
    assert_eq!(short.coalesced(), short);
    assert!(short.check_bounds(100).is_err());
    let long = Layout::new(&[1, 4], &[9, 1, 7], 2);
    let s = long.squeeze_all();
    assert_eq!(
        (s.shape(), s.strides(), s.offset()),
        (&[4][..], &[1, 7][..], 2)
    );
    assert_eq!(long.indices().count(), 0);
    // Well-formed layouts are as before.
    let t = Layout::contiguous(&[1, 2, 1, 3]).transpose(1, 3).unwrap();
    assert_eq!(t.squeeze_all().shape(), &[3, 2]);
    assert_eq!(t.indices().collect::<Vec<_>>(), [0, 3, 1, 4, 2, 5]);
}

/// A view of more than eight dimensions could not be gathered (`contiguous`,
/// `copy_strided_from`: "rank 9 (at most 8)"), where PyTorch's are: the pair of layouts is now
/// reduced first, and what still has more dimensions is copied as a loop of copies.
#[test]
fn views_of_more_than_eight_dimensions_are_gathered() {
    let data: Vec<i32> = (0..1024).collect();
    let st = Arc::new(Storage::from_slice(&data, CPU).unwrap());
    // Ten dimensions of 2, reversed: nothing merges.
    let l = Layout::contiguous(&[2; 10])
        .permute(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
        .unwrap();
    let v = View::with_layout(Arc::clone(&st), l.clone()).unwrap();
    let c = v.contiguous().unwrap().to_vec::<i32>().unwrap();
    let want: Vec<i32> = l.indices().map(|i| data[i]).collect();
    assert_eq!(c, want);
    // Nine dimensions that merge to two (new axes of size 1 and a broadcast).
    let b = Layout::new(
        &[2, 1, 3, 1, 1, 3, 1, 1, 1],
        &[0, 9, 3, 3, 3, 1, 1, 1, 1],
        0,
    );
    let c = st.contiguous(&b).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(c, b.indices().map(|i| data[i]).collect::<Vec<_>>());
    // Into a strided destination of many dimensions.
    let mut dst = Storage::zeros(1024, DType::I32, CPU).unwrap();
    dst.copy_strided_from(&l, &st, &Layout::contiguous(&[2; 10]))
        .unwrap();
    let back = dst.to_vec::<i32>().unwrap();
    let placed: Vec<i32> = l.indices().map(|i| back[i]).collect();
    assert_eq!(placed, data);
}

/// The CPU softmax walked every one of `outer` lines of no elements (`r` 0): 2^62 of them, a
/// hang. An output of no elements is now returned at once.
#[test]
fn softmax_of_lines_of_no_elements_returns_at_once() {
    let a = Storage::zeros(0, DType::F32, CPU).unwrap();
    let shape = ReduceShape {
        outer: 1 << 62,
        r: 0,
        inner: 1,
    };
    let start = std::time::Instant::now();
    for op in [SoftmaxOp::Softmax, SoftmaxOp::LogSoftmax] {
        assert_eq!(a.softmax(op, 0, shape).unwrap().len(), 0);
    }
    // logsumexp has one (-inf) value a line: 2^62 of them are refused.
    assert!(a.softmax(SoftmaxOp::LogSumExp, 0, shape).is_err());
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let small = ReduceShape {
        outer: 2,
        r: 0,
        inner: 3,
    };
    let lse = a.softmax(SoftmaxOp::LogSumExp, 0, small).unwrap();
    assert_eq!(lse.to_vec::<f32>().unwrap(), [f32::NEG_INFINITY; 6]);
}

/// The CPU `rows_by_key` sized its accumulators by `cols` before looking at the keys: no keys
/// and `cols` near `usize::MAX` (an empty input's rows) was a capacity overflow.
#[test]
fn rows_by_key_of_no_keys() {
    let rows = Storage::zeros(0, DType::F32, CPU).unwrap();
    let keys = Storage::zeros(0, DType::I64, CPU).unwrap();
    let shape = genesis_kernels::gather::RowsByKey {
        n: 0,
        cols: usize::MAX - 1,
        in_rows: 0,
        out_rows: 0,
    };
    let out = rows.rows_by_key(0, &shape, (&keys, 0), (&keys, 0)).unwrap();
    assert_eq!(out.len(), 0);
}

/// `Along` multiplied its sizes unchecked (`index_select` of 6 rows from a `[0, 2^62]` table:
/// `[6, 2^62]` positions); positions that cannot be counted are now an error.
#[test]
fn along_positions_that_overflow_are_an_error() {
    use genesis_kernels::gather::Along;
    let r = Along::new(&[6, 1 << 62, 8], 0, &[1, 0, 0], &[0, 0, 0], &[0, 1, 0], 0);
    assert!(r.is_err(), "{r:?}");
    // Empty iterations with huge sizes are fine, of no positions.
    let d = Along::new(&[0, 1 << 62, 8], 0, &[1, 0, 0], &[0, 0, 0], &[0, 1, 0], 0).unwrap();
    assert_eq!(d.numel(), 0);
}

/// A size for the fused operations' shapes: small, 0, or (rarely) huge.
fn dim_size(z: &mut Fuzz) -> usize {
    match z.rng.random_range(0..12) {
        0 => 0,
        1 => z.pick(&HUGE),
        _ => z.rng.random_range(1..4),
    }
}

#[test]
fn fused_operations() {
    use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides, Strides};
    use genesis_kernels::classifier::{ClassifierShape, Reduction};
    use genesis_kernels::gather::{Along, RowsByKey};
    use genesis_kernels::layernorm::LayerNormShape;
    use genesis_storage::{ActGrad, AdamStep, StorageRange};
    let mut z = Fuzz::new("fused", 6);
    for it in 0..z.iterations(800) {
        z.iteration = it;
        let dt = z.pick(&[
            DType::F32,
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I64,
        ]);
        let len = z.rng.random_range(0..40);
        let x = z.storage(len, dt);
        let ydt = if z.chance(0.8) { dt } else { z.dtype() };
        let y = z.storage(len, ydt);
        let (s, t) = (z.at(len), z.at(len));
        // Attention.
        let shape = AttentionShape {
            batch: dim_size(&mut z),
            heads: dim_size(&mut z),
            tq: dim_size(&mut z),
            tk: dim_size(&mut z),
            head_dim: dim_size(&mut z),
            causal: z.chance(0.5),
            scale: z.pick(&[0.5f32, f32::NAN, f32::INFINITY, 0.0, -1.0]),
        };
        let mut strides = || Strides {
            batch: z.size(),
            head: z.size(),
            seq: z.size(),
        };
        let f = ForwardStrides {
            q: strides(),
            k: strides(),
            v: strides(),
            o: strides(),
        };
        let o_len = z.at(len);
        z.call(
            &|| format!("attention {dt}[{len}] {shape:?} {f:?} at ({s}, {t}), o_len {o_len}"),
            || {
                if let Ok((o, lse)) =
                    Storage::attention_forward(&shape, &f, (&x, s), (&y, t), (&x, 0), o_len)
                {
                    let b = BackwardStrides::of(f);
                    let _ = Storage::attention_backward(
                        &shape,
                        &b,
                        (&x, s),
                        (&y, t),
                        (&x, 0),
                        (&o, 0),
                        (&o, 0),
                        &lse,
                        [len, len, len],
                    );
                    let _ = Storage::attention_backward_packed(
                        &shape,
                        &b,
                        (&x, s),
                        (&y, t),
                        (&x, 0),
                        (&o, 0),
                        (&o, 0),
                        &lse,
                        len,
                        [0, s, t],
                        true,
                    );
                }
                Ok(())
            },
        );
        // Cross entropy.
        let cs = ClassifierShape {
            rows: dim_size(&mut z),
            classes: dim_size(&mut z),
            stride: dim_size(&mut z),
            ignore_index: z.pick(&[-100, 0, i64::MIN, i64::MAX]),
        };
        let red = z.pick(&[Reduction::None, Reduction::Sum, Reduction::Mean]);
        let tn = z.rng.random_range(0..6);
        let targets = z.storage(tn, DType::I64);
        let ts = z.at(targets.len());
        z.call(
            &|| format!("cross_entropy {dt}[{len}] {cs:?} {red:?} at {s}, targets at {ts}"),
            || {
                if let Ok((loss, lse)) = Storage::cross_entropy(&cs, red, (&x, s), (&targets, ts)) {
                    let _ = Storage::cross_entropy_backward(
                        &cs,
                        red,
                        (&x, s),
                        (&targets, ts),
                        &lse,
                        &loss,
                    );
                    let g = x.try_clone().map_err(|e| e.to_string())?;
                    let before = bytes(&g);
                    if g.cross_entropy_backward_in_place(&cs, red, s, (&targets, ts), &lse, &loss)
                        .is_err()
                        && bytes(&g) != before
                    {
                        return Err("a failed in-place backward changed the logits".into());
                    }
                }
                Ok(())
            },
        );
        // Layer norm.
        let mut ls = LayerNormShape::new(dim_size(&mut z), dim_size(&mut z));
        ls.eps = z.float();
        let wn = z.rng.random_range(0..5);
        let w = z.storage(wn, dt);
        let to = z.pick(&[DType::F16, DType::BF16, DType::F32, DType::I32]);
        let want = (z.chance(0.5), z.chance(0.5));
        z.call(
            &|| format!("layer_norm {dt}[{len}] {ls:?} at ({s}, {t}) to {to}"),
            || {
                let _ = Storage::layer_norm_to(&ls, (&x, s), Some((&w, 0)), None, to);
                let _ = Storage::add_layer_norm_to(&ls, (&x, s), (&y, t), None, Some((&w, 0)), to);
                if let Ok((h, mean, rstd)) =
                    Storage::layer_norm(&ls, (&x, s), Some((&w, 0)), Some((&w, 0)))
                {
                    let _ = Storage::layer_norm_backward(
                        &ls,
                        (&y, t),
                        (&h, 0),
                        Some((&w, 0)),
                        &mean,
                        &rstd,
                        want,
                        want.0,
                        want.1,
                    );
                    let _ = Storage::layer_norm_backward_add(
                        &ls,
                        (&y, t),
                        (&h, 0),
                        None,
                        &mean,
                        &rstd,
                        want,
                        (&y, s),
                        want.1,
                        want.0,
                    );
                }
                Ok(())
            },
        );
        // Activation and softmax gradients.
        let (n, cols) = (z.at(len), dim_size(&mut z));
        let act = z.pick(&[ActGrad::Gelu, ActGrad::GeluTanh, ActGrad::Silu]);
        z.call(
            &|| format!("{act:?} / softmax_grad {dt}[{len}] at ({s}, {t}), len {n}, cols {cols}"),
            || {
                let _ = Storage::act_grad(act, &x, s, &y, t, n);
                let _ = Storage::act_grad_cols(act, &x, s, &y, t, n, cols);
                let _ = Storage::softmax_grad(cols % 2 == 0, &x, s, &y, t, n, cols);
                Ok(())
            },
        );
        // Gathers and scatters along a dimension.
        let rank = z.rng.random_range(0..4);
        let ashape: Vec<usize> = (0..rank).map(|_| dim_size(&mut z)).collect();
        let mut st = || (0..rank).map(|_| z.size()).collect::<Vec<usize>>();
        let (is, vs, ts_) = (st(), st(), st());
        let adim = if rank > 0 {
            z.rng.random_range(0..rank)
        } else {
            0
        };
        let asize = dim_size(&mut z);
        let xn = z.rng.random_range(0..6);
        let index = z.storage(xn, DType::I64);
        z.call(&|| format!("along {ashape:?} dim {adim} size {asize} strides {is:?} {vs:?} {ts_:?} over {dt}[{len}]"), || {
            if let Ok(d) = Along::new(&ashape, adim, &is, &vs, &ts_, asize) {
                let _ = (d.numel(), d.reach());
                let _ = x.gather_along(s, &index, 0, &d);
                if d.numel() > 1 << 16 {
                    // A scatter of that many positions (broadcast operands) is work the
                    // caller asked for, not a request to refuse: not made here.
                    return Ok(());
                }
                let mut out = x.try_clone().map_err(|e| e.to_string())?;
                let before = bytes(&out);
                if out.scatter_along(s, true, &index, 0, &y, t, &d).is_err() && bytes(&out) != before {
                    return Err("a failed scatter_along changed the target".into());
                }
                let shared = x.try_clone().map_err(|e| e.to_string())?;
                let l = Layout::contiguous(&[len]);
                let _ = shared.scatter_along_shared(&l, false, &index, 0, &y, t, &d);
            }
            Ok(())
        });
        let rk = RowsByKey {
            n: z.rng.random_range(0..4),
            cols: dim_size(&mut z),
            in_rows: dim_size(&mut z),
            out_rows: dim_size(&mut z),
        };
        z.call(&|| format!("rows_by_key {dt}[{len}] {rk:?} at {s}"), || {
            let _ = x.rows_by_key(s, &rk, (&index, 0), (&index, 0));
            Ok(())
        });
        // The optimiser steps.
        let h = AdamStep {
            lr: z.float(),
            beta1: z.float(),
            beta2: z.float(),
            eps: z.float(),
            weight_decay: z.float(),
            decoupled: z.chance(0.5),
            step: z.pick(&[0u64, 1, 2, u64::MAX]),
        };
        let m = z.storage(len, dt);
        let v = z.storage(len, dt);
        let n2 = z.at(len);
        z.call(
            &|| format!("adam_step {h:?} over {dt}[{len}] at ({s}, {n2})"),
            || {
                let p = x.try_clone().map_err(|e| e.to_string())?;
                let before = bytes(&p);
                let r = Storage::adam_step(
                    &h,
                    &[[
                        StorageRange::new(&p, s, n2),
                        StorageRange::new(&y, s, n2),
                        StorageRange::new(&m, s, n2),
                        StorageRange::new(&v, s, n2),
                    ]],
                );
                if r.is_err() && bytes(&p) != before {
                    return Err("a failed adam_step changed the parameter".into());
                }
                let max_norm = h.lr;
                let _ = Storage::clip_grad_norm(
                    &[StorageRange::new(&m, s, n2), StorageRange::whole(&v)],
                    max_norm,
                );
                Ok(())
            },
        );
        // Writes through a shared (&self) storage.
        let l = random_layout(&mut z);
        let vdt = if z.chance(0.8) { dt } else { z.dtype() };
        let value = z.storage(1, vdt);
        let mask = z.storage(len, DType::Bool);
        let bop = z.pick(&BinaryOp::ALL);
        let uop = z.pick(&UnaryOp::ALL);
        z.call(
            &|| format!("shared writes {dt}[{len}] {l:?} {bop:?} {uop:?}"),
            || {
                let target = x.try_clone().map_err(|e| e.to_string())?;
                let checks: [(&str, SharedCheck<'_>); 5] = [
                    (
                        "fill_shared",
                        Box::new(|t: &Storage| t.fill_shared(&l, &value).is_err()),
                    ),
                    (
                        "binary_assign_shared",
                        Box::new(|t: &Storage| {
                            t.binary_assign_shared(bop, &l, BinaryRhs::Scalar(&value))
                                .is_err()
                        }),
                    ),
                    (
                        "unary_assign_shared",
                        Box::new(|t: &Storage| t.unary_assign_shared(uop, &l).is_err()),
                    ),
                    (
                        "masked_fill_shared",
                        Box::new(|t: &Storage| {
                            t.masked_fill_shared(&l, &mask, s, &bytes(&value)).is_err()
                        }),
                    ),
                    (
                        "copy_strided_from_shared",
                        Box::new(|t: &Storage| {
                            t.copy_strided_from_shared(&l, &y, &Layout::contiguous(l.shape()))
                                .is_err()
                        }),
                    ),
                ];
                for (name, failed) in checks {
                    let before = bytes(&target);
                    if failed(&target) && bytes(&target) != before {
                        return Err(format!("a failed {name} changed the target"));
                    }
                }
                Ok(())
            },
        );
    }
    z.finish();
}

/// The attention CPU twin read every key row whole into scratch: keys broadcast along a
/// sequence of 2^45 (stride 0: three elements of storage) asked the allocator for 384 TiB
/// and aborted the process. The scratch is now checked against the host's memory first, and
/// allocated fallibly.
#[test]
fn attention_over_broadcast_keys_is_refused_not_aborted() {
    use genesis_kernels::attention::{AttentionShape, ForwardStrides, Strides};
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        tq: 1,
        tk: 1 << 45,
        head_dim: 3,
        causal: false,
        scale: 0.5,
    };
    let dense = Strides {
        batch: 3,
        head: 3,
        seq: 3,
    };
    let broadcast = Strides {
        batch: 0,
        head: 0,
        seq: 0,
    };
    let s = ForwardStrides {
        q: dense,
        k: broadcast,
        v: broadcast,
        o: dense,
    };
    let x = Storage::from_slice(&[1.0f32, 2.0, 3.0], CPU).unwrap();
    let r = Storage::attention_forward(&shape, &s, (&x, 0), (&x, 0), (&x, 0), 3);
    assert!(
        matches!(&r, Err(e) if e.is_out_of_memory()),
        "{:?}",
        r.map(|_| ())
    );
    // The same keys, a sequence of 4: every key equal, the output is the value.
    let small = AttentionShape { tk: 4, ..shape };
    let (o, _) = Storage::attention_forward(&small, &s, (&x, 0), (&x, 0), (&x, 0), 3).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
}

/// Attention with no query and no key rows but 2^45 heads walked every head (the backward),
/// and read rows through strides no element uses (`batch * stride` overflowed): nothing to
/// write returns at once now.
#[test]
fn attention_with_nothing_to_write_returns_at_once() {
    use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides, Strides};
    let shape = AttentionShape {
        batch: 2,
        heads: 1 << 45,
        tq: 0,
        tk: 0,
        head_dim: 3,
        causal: true,
        scale: 0.5,
    };
    let st = Strides {
        batch: usize::MAX,
        head: 3,
        seq: 1 << 62,
    };
    let f = ForwardStrides {
        q: st,
        k: st,
        v: st,
        o: st,
    };
    let x = Storage::from_slice(&[1.0f32; 4], CPU).unwrap();
    let start = std::time::Instant::now();
    let (o, lse) = Storage::attention_forward(&shape, &f, (&x, 0), (&x, 0), (&x, 0), 0).unwrap();
    assert_eq!((o.len(), lse.len()), (0, 0));
    let [dq, dk, dv] = Storage::attention_backward(
        &shape,
        &BackwardStrides::of(f),
        (&x, 0),
        (&x, 0),
        (&x, 0),
        (&x, 0),
        (&x, 0),
        &lse,
        [0, 0, 0],
    )
    .unwrap();
    assert_eq!((dq.len(), dk.len(), dv.len()), (0, 0, 0));
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

/// `Along::reach` added one to a last offset of `i64::MAX`; an offset past `i64` is an error
/// now.
#[test]
fn along_reach_at_the_end_of_i64() {
    use genesis_kernels::gather::Along;
    let r = Along::new(&[2], 0, &[4], &[isize::MAX as usize], &[0], 1);
    assert!(r.is_err(), "{r:?}");
}
