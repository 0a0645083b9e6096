//! Helpers shared by the test files of `genesis-storage`: random advanced-indexing cases for
//! the `Storage::index_*` methods, and a reference written from `kernels/index.cu`'s
//! definitions (one division per coordinate, as the kernels decompose).
#![allow(dead_code)]

use genesis_kernels::index::{IndexDesc, Keys, MAX_INDEX_DIMS, Strided};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore};

/// A random advanced index into a source of `src_len` elements: the descriptor, the `n_adv *
/// nb` index values (in range), and the indexed dimensions' sizes.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) desc: IndexDesc,
    pub(crate) idx: Vec<i64>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) src_len: usize,
    pub(crate) n: usize,
}

/// A random view (rank 1 to 4, sizes 1 to 5, contiguous in a storage with a random offset),
/// one or two of its dimensions indexed by arrays of a broadcast shape of 0 to 2 dimensions,
/// placed anywhere among the result's dimensions.
pub(crate) fn random_case(rng: &mut SmallRng) -> Case {
    let rank = rng.random_range(1..=4usize);
    let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..=5usize)).collect();
    let mut strides = vec![1i64; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1] as i64;
    }
    let n_adv = rng.random_range(1..=rank.min(2));
    let mut dims: Vec<usize> = (0..rank).collect();
    for i in (1..dims.len()).rev() {
        dims.swap(i, rng.random_range(0..=i));
    }
    let adv: Vec<usize> = dims[..n_adv].to_vec();
    let rest: Vec<usize> = (0..rank).filter(|d| !adv.contains(d)).collect();
    let k = rng.random_range(0..=2usize);
    let index_shape: Vec<usize> = (0..k).map(|_| rng.random_range(1..=4usize)).collect();
    let nb: usize = index_shape.iter().product();
    let pos = rng.random_range(0..=rest.len());
    let base = rng.random_range(0..4usize);
    let mut desc = IndexDesc {
        res_shape: [1; MAX_INDEX_DIMS],
        res_stride: [0; MAX_INDEX_DIMS],
        adv_stride: [0; MAX_INDEX_DIMS],
        base: base as i64,
        nb: nb as i64,
        rank: (rest.len() + k) as i32,
        pos: pos as i32,
        k: k as i32,
        n_adv: n_adv as i32,
    };
    let mut r = 0;
    for i in 0..rest.len() + k {
        if i >= pos && i < pos + k {
            desc.res_shape[i] = index_shape[i - pos] as i64;
        } else {
            desc.res_shape[i] = shape[rest[r]] as i64;
            desc.res_stride[i] = strides[rest[r]];
            r += 1;
        }
    }
    let sizes: Vec<usize> = adv.iter().map(|&d| shape[d]).collect();
    for (a, &d) in adv.iter().enumerate() {
        desc.adv_stride[a] = strides[d];
    }
    let mut idx = Vec::with_capacity(n_adv * nb);
    for &s in &sizes {
        idx.extend((0..nb).map(|_| rng.random_range(0..s) as i64));
    }
    let n = (0..desc.rank as usize)
        .map(|i| desc.res_shape[i] as usize)
        .product();
    Case {
        desc,
        idx,
        sizes,
        src_len: base + shape.iter().product::<usize>() + rng.random_range(0..3usize),
        n,
    }
}

/// Result element `i`'s source offset, index position, and value-lookup terms (before, after,
/// after size), as `gx_offset` in `kernels/index.cu` computes them.
pub(crate) fn gx_offset(d: &IndexDesc, idx: &[i64], i: usize) -> (i64, usize, usize, usize, usize) {
    let (mut rem, mut off, mut b, mut bmul) = (i, d.base, 0usize, 1usize);
    let (mut after, mut amul, mut before, mut befmul) = (0usize, 1usize, 0usize, 1usize);
    for r in (0..d.rank as usize).rev() {
        let sz = d.res_shape[r] as usize;
        let c = rem % sz;
        rem /= sz;
        if r >= d.pos as usize && r < (d.pos + d.k) as usize {
            b += c * bmul;
            bmul *= sz;
        } else {
            off += c as i64 * d.res_stride[r];
            if r >= (d.pos + d.k) as usize {
                after += c * amul;
                amul *= sz;
            } else {
                before += c * befmul;
                befmul *= sz;
            }
        }
    }
    for a in 0..d.n_adv as usize {
        off += idx[a * d.nb as usize + b] * d.adv_stride[a];
    }
    (off, b, before, after, amul)
}

/// The reference gather of `elem`-byte elements.
pub(crate) fn gather_ref(c: &Case, src: &[u8], elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; c.n * elem];
    for i in 0..c.n {
        let o = gx_offset(&c.desc, &c.idx, i).0 as usize;
        out[i * elem..(i + 1) * elem].copy_from_slice(&src[o * elem..(o + 1) * elem]);
    }
    out
}

/// The dead marks of an assignment: every position but the last of its index tuple.
pub(crate) fn dead_ref(c: &Case) -> Vec<u8> {
    let nb = c.desc.nb as usize;
    let tuple = |b: usize| -> Vec<i64> { (0..c.sizes.len()).map(|a| c.idx[a * nb + b]).collect() };
    (0..nb)
        .map(|b| u8::from((b + 1..nb).any(|l| tuple(l) == tuple(b))))
        .collect()
}

/// The reference scatter (live positions only) of `elem`-byte elements.
pub(crate) fn scatter_ref(c: &Case, dst: &mut [u8], vals: &[u8], dead: &[u8], elem: usize) {
    for i in 0..c.n {
        let (o, b, ..) = gx_offset(&c.desc, &c.idx, i);
        if dead[b] == 0 {
            let o = o as usize;
            dst[o * elem..(o + 1) * elem].copy_from_slice(&vals[i * elem..(i + 1) * elem]);
        }
    }
}

/// The accumulate groups `[dead, start, len, members]` of a case: one group per index tuple,
/// its members in order, its last member the representative.
pub(crate) fn groups_ref(c: &Case) -> (Vec<u8>, Vec<i64>, Vec<i64>, Vec<i64>) {
    let nb = c.desc.nb as usize;
    let tuple = |b: usize| -> Vec<i64> { (0..c.sizes.len()).map(|a| c.idx[a * nb + b]).collect() };
    let dead = dead_ref(c);
    let (mut start, mut len, mut members) = (vec![0i64; nb], vec![0i64; nb], Vec::new());
    for b in (0..nb).filter(|&b| dead[b] == 0) {
        start[b] = members.len() as i64;
        let m: Vec<i64> = (0..nb)
            .filter(|&x| tuple(x) == tuple(b))
            .map(|x| x as i64)
            .collect();
        len[b] = m.len() as i64;
        members.extend(m);
    }
    (dead, start, len, members)
}

/// The reference scatter-add over f64 values (every dtype's test values are small integers,
/// exact in each of them): each representative's group summed onto the current value.
pub(crate) fn scatter_add_ref(c: &Case, dst: &mut [f64], vals: &[f64]) {
    let (dead, start, len, members) = groups_ref(c);
    let nb = c.desc.nb as usize;
    for i in 0..c.n {
        let (o, b, before, after, asz) = gx_offset(&c.desc, &c.idx, i);
        if dead[b] != 0 {
            continue;
        }
        let mut acc = dst[o as usize];
        for m in &members[start[b] as usize..(start[b] + len[b]) as usize] {
            acc += vals[(before * nb + *m as usize) * asz + after];
        }
        dst[o as usize] = acc;
    }
}

/// The keys of a case's index tuples (row-major over the indexed sizes) and their count.
pub(crate) fn keys_of(c: &Case) -> (Keys, usize) {
    let mut keys = Keys {
        mul: [0; MAX_INDEX_DIMS],
        n_adv: c.sizes.len() as i32,
    };
    let mut count = 1usize;
    for (a, &s) in c.sizes.iter().enumerate().rev() {
        keys.mul[a] = count as i64;
        count *= s;
    }
    (keys, count)
}

/// Random bytes of `n` elements of `elem` bytes.
pub(crate) fn random_bytes(rng: &mut SmallRng, n: usize, elem: usize) -> Vec<u8> {
    let mut b = vec![0u8; n * elem];
    rng.fill_bytes(&mut b);
    b
}

/// A random broadcast layout of an index array of `nb` positions over `shape`, in a storage of
/// the returned length: strides of 0 (broadcast) or of a contiguous layout, and an offset.
pub(crate) fn random_index_layout(rng: &mut SmallRng, shape: &[usize]) -> (Strided, usize) {
    let mut stride = vec![0isize; shape.len()];
    let mut s = 1isize;
    for d in (0..shape.len()).rev() {
        if rng.random_bool(0.7) {
            stride[d] = s;
            s *= shape[d] as isize;
        }
    }
    let offset = rng.random_range(0..3usize);
    let l = Strided::new(shape, &stride, offset).expect("rank at most 8");
    (l, offset + s as usize + rng.random_range(0..2usize))
}

/// The reference normalisation: the values read through the layout (row-major), wrapped, and
/// out-of-range values as 0 with the first such position.
pub(crate) fn normalise_ref(values: &[i64], l: &Strided, nb: usize, size: i64) -> (Vec<i64>, i64) {
    let mut out = Vec::with_capacity(nb);
    let mut bad = -1i64;
    for b in 0..nb {
        let (mut rem, mut off) = (b as i64, l.offset);
        for r in (0..l.rank as usize).rev() {
            off += (rem % l.shape[r]) * l.stride[r];
            rem /= l.shape[r];
        }
        let mut v = values[off as usize];
        if v < 0 {
            v += size;
        }
        if v < 0 || v >= size {
            if bad == -1 {
                bad = b as i64;
            }
            v = 0;
        }
        out.push(v);
    }
    (out, bad)
}
