//! The typed operands of the advanced-indexing gathers and scatters (`index.rs`), which carry
//! their contract so that those operations are safe:
//!
//! - [`IndexValues`]: `n_adv` normalised index arrays of `nb` int64 values on one device, array
//!   `a`'s values in `0..sizes[a]`: checked on the host, or normalised on the device by
//!   [`Storage::index_normalise`] (which writes an out-of-range value as 0 and reports it).
//!   Only this module builds one, and nothing writes it afterwards.
//! - [`DeadMask`]: the positions of one [`IndexValues`] whose index tuple repeats later (the
//!   last one wins), so that the live positions have distinct tuples.
//! - [`AddGroups`]: the groups of equal tuples of one [`IndexValues`], for the scatter-add.
//!
//! A mask or groups name the values they were made from (an id), and the scatters refuse
//! others. With a descriptor whose offsets stay in the storage for every value in range
//! (`index.rs` checks it from the sizes), no value can make a kernel leave the storage.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use genesis_kernels::index::{Keys, MAX_INDEX_DIMS, Strided};
use smallvec::SmallVec;

use super::{Mem, MemMut, Storage, mixed};
use crate::compute::Compute;
use crate::{DType, Device, Error, Result};

/// Ids of [`IndexValues`], so that a [`DeadMask`] or [`AddGroups`] names its values.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `Error::IndexRefused`.
pub(super) fn refused(op: &'static str, reason: String) -> Error {
    Error::IndexRefused { op, reason }
}

/// Where an index array's values come from, for [`IndexValues::new`].
#[derive(Debug, Clone, Copy)]
pub enum IndexSource<'a> {
    /// Normalised values on the host (`nb` of them), each checked against the array's size:
    /// one outside `0..size` is [`Error::IndexValueOutOfRange`].
    Host(&'a [i64]),
    /// An int32 or int64 array in a storage on the values' device, read through `layout`
    /// (row-major over its shape, whose product is at least `nb`; strides of 0 broadcast),
    /// normalised there by [`Storage::index_normalise`]: negative values wrap, and a value
    /// still outside `0..size` is written as 0 and reported ([`IndexValues::bad_positions`]).
    Stored {
        /// The values.
        values: &'a Storage,
        /// How they are read.
        layout: &'a Strided,
    },
}

/// Normalised index arrays on one device: `n_adv` arrays of `nb` int64 values, array `a`'s
/// values in `0..sizes[a]`, built by [`IndexValues::new`] and never written afterwards. The
/// gathers and scatters of [`Storage`] read them.
#[derive(Debug)]
pub struct IndexValues {
    id: u64,
    /// The `n_adv * nb` values, array after array (at least one element).
    pub(super) values: Storage,
    /// The same on the host, when they were given there and live on a device.
    host: Option<Vec<i64>>,
    sizes: Vec<usize>,
    nb: usize,
    /// One word per array when some array was normalised on the device: -1, or the smallest
    /// position whose value was out of range.
    bad: Option<Storage>,
    /// Every value is known to have been in range (host arrays checked, stored ones by their
    /// storages' [`Storage::known_bounds`]): the words are all -1 without reading them.
    in_range: bool,
}

impl IndexValues {
    /// The index arrays `arrays` (each a source and the size of the dimension it indexes) of
    /// `nb` positions each, normalised on `device`. Device work is queued, not waited for.
    ///
    /// Errors: a host value outside `0..size` ([`Error::IndexValueOutOfRange`]), a host array
    /// of another length than `nb`, a stored array with positions to read and a size of 0
    /// ([`Error::IndexRefused`]), and [`Storage::index_normalise`]'s (dtypes, devices,
    /// layouts).
    pub fn new(device: Device, nb: usize, arrays: &[(IndexSource<'_>, usize)]) -> Result<Self> {
        let op = "index values";
        let n_adv = arrays.len();
        let total = n_adv
            .checked_mul(nb)
            .ok_or_else(|| refused(op, format!("{n_adv} arrays of {nb} values")))?;
        let mut any_host = false;
        for (a, (src, size)) in arrays.iter().enumerate() {
            match src {
                IndexSource::Host(v) => {
                    any_host = true;
                    if v.len() != nb {
                        return Err(refused(
                            op,
                            format!("index array {a} holds {} values, not {nb}", v.len()),
                        ));
                    }
                    if let Some(&value) = v.iter().find(|&&x| !in_range(x, *size)) {
                        return Err(Error::IndexValueOutOfRange {
                            op,
                            array: a,
                            value,
                            size: *size,
                        });
                    }
                }
                IndexSource::Stored { .. } if nb > 0 && *size == 0 => {
                    return Err(refused(
                        op,
                        format!("index array {a} indexes a dimension of size 0"),
                    ));
                }
                IndexSource::Stored { .. } => {}
            }
        }
        let stored = arrays
            .iter()
            .any(|(s, _)| matches!(s, IndexSource::Stored { .. }));
        // Host arrays in place (zeros where stored arrays go), uploaded in one copy; stored
        // arrays alone need no initial contents (normalisation writes every value).
        let (mut values, host) = if any_host {
            let mut flat = vec![0i64; total.max(1)];
            for (a, (src, _)) in arrays.iter().enumerate() {
                if let IndexSource::Host(v) = src {
                    flat[a * nb..(a + 1) * nb].copy_from_slice(v);
                }
            }
            let values = Storage::upload(&flat, device)?;
            let keep = (device.is_cuda() && !stored).then_some(flat);
            (values, keep)
        } else {
            (Storage::empty(total.max(1), DType::I64, device)?, None)
        };
        let mut bad = None;
        if stored {
            let mut words = Storage::full::<i64>(n_adv, -1, device)?;
            for (a, (src, size)) in arrays.iter().enumerate() {
                if let IndexSource::Stored { values: s, layout } = src {
                    values.index_normalise(a * nb, nb, s, layout, *size, &mut words, a)?;
                }
            }
            bad = Some(words);
        }
        // Stored arrays whose storages' known bounds lie in `-size..size` (asked once the
        // normalisation that reads them is queued) have no bad value: their words need no
        // read-back.
        let in_range = arrays.iter().all(|(src, size)| match src {
            IndexSource::Stored { values: s, .. } => {
                s.known_within(-(*size as i128), *size as i128)
            }
            IndexSource::Host(_) => true,
        });
        Ok(IndexValues {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            values,
            host,
            sizes: arrays.iter().map(|&(_, s)| s).collect(),
            nb,
            bad,
            in_range,
        })
    }

    /// No index arrays over `nb` positions on `device` (a descriptor of no arrays).
    pub(super) fn none(nb: usize, device: Device) -> Result<Self> {
        IndexValues::new(device, nb, &[])
    }

    /// Positions per array.
    pub fn nb(&self) -> usize {
        self.nb
    }

    /// Number of arrays.
    pub fn n_adv(&self) -> usize {
        self.sizes.len()
    }

    /// The sizes of the dimensions the arrays index.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Where the values live.
    pub fn device(&self) -> Device {
        self.values.device()
    }

    /// Whether some array was normalised on the device, so that
    /// [`bad_positions`](Self::bad_positions) has words to read.
    pub fn checks_on_device(&self) -> bool {
        self.bad.is_some()
    }

    /// The normalisation's reports, read back (one synchronisation): per array -1, or the
    /// smallest position whose value was out of range (then written as 0); `None` when every
    /// array was given on the host (checked then). Arrays whose storages' known bounds put
    /// every value in range report -1 without a read-back.
    pub fn bad_positions(&self) -> Result<Option<Vec<i64>>> {
        match &self.bad {
            Some(_) if self.in_range => Ok(Some(vec![-1; self.sizes.len()])),
            b => b.as_ref().map(Storage::to_vec::<i64>).transpose(),
        }
    }

    /// The `n_adv * nb` values, array after array, on the host.
    pub fn to_vec(&self) -> Result<Vec<i64>> {
        Ok(self.host_values()?.into_owned())
    }

    /// The values on the host: kept, lent from host memory, or read back.
    fn host_values(&self) -> Result<Cow<'_, [i64]>> {
        let total = self.sizes.len() * self.nb;
        if let Some(h) = &self.host {
            return Ok(Cow::Borrowed(&h[..total]));
        }
        Ok(Cow::Owned(self.values.to_vec_at::<i64>(0, total)?))
    }

    /// The number of distinct index tuples: the product of the sizes (`None` on overflow). A
    /// [`DeadMask::by_table`] takes one word per tuple.
    pub fn key_count(&self) -> Option<usize> {
        self.sizes.iter().try_fold(1usize, |c, &s| c.checked_mul(s))
    }

    /// Whether `mask` (or groups) of id `of` were made from these values.
    pub(super) fn owns(&self, of: u64) -> bool {
        self.id == of
    }
}

/// `x` lies in `0..size`.
fn in_range(x: i64, size: usize) -> bool {
    usize::try_from(x).is_ok_and(|x| x < size)
}

/// The index positions of one [`IndexValues`] that an assignment skips: those whose index
/// tuple repeats at a later position (a later position writes the same elements; the last one
/// wins). The live positions have distinct tuples.
#[derive(Debug)]
pub struct DeadMask {
    of: u64,
    nb: usize,
    /// `nb` bytes (at least one), 1 for a dead position.
    pub(super) dead: Storage,
}

impl DeadMask {
    /// The mask of `values`, found on the host (the values read back when they live on a
    /// device) and uploaded to their device. Reported bad values are not consulted: check
    /// [`IndexValues::bad_positions`] first.
    pub fn new(values: &IndexValues) -> Result<DeadMask> {
        let host = values.host_values()?;
        let dead = dead_positions(&host, &values.sizes, values.nb);
        Ok(DeadMask {
            of: values.id,
            nb: values.nb,
            dead: upload(&dead, values.device())?,
        })
    }

    /// The mask of `values`, found where they live through a table of one word per index
    /// tuple ([`IndexValues::key_count`]; no synchronisation). Every position is dead when
    /// the normalisation reported a bad value, so that a scatter through it writes nothing.
    ///
    /// Errors: more than [`MAX_INDEX_DIMS`] arrays, a tuple count that overflows, the table's
    /// allocation.
    pub fn by_table(values: &IndexValues) -> Result<DeadMask> {
        let op = "index dead_positions";
        let n_adv = values.n_adv();
        if n_adv > MAX_INDEX_DIMS {
            return Err(refused(op, format!("{n_adv} index arrays")));
        }
        let mut keys = Keys {
            mul: [0; MAX_INDEX_DIMS],
            n_adv: n_adv as i32,
        };
        let mut count = 1usize;
        for (a, &size) in values.sizes.iter().enumerate().rev() {
            keys.mul[a] =
                i64::try_from(count).map_err(|_| refused(op, format!("{count} index tuples")))?;
            count = count
                .checked_mul(size)
                .ok_or_else(|| refused(op, format!("index tuples of sizes {:?}", values.sizes)))?;
        }
        // Every key is `sum(v[a] * mul[a])` with `v[a] < sizes[a]`: below `count`, which fits
        // an i64 (the table's bytes are allocated).
        let dev = values.device();
        let nb = values.nb;
        let mut winner = Storage::zeros(count.max(1), DType::I64, dev)?;
        let mut dead = Storage::empty(nb.max(1), DType::U8, dev)?;
        if nb > 0 {
            let clean;
            let bad = match &values.bad {
                Some(b) => b,
                None => {
                    clean = Storage::full::<i64>(1, -1, dev)?;
                    &clean
                }
            };
            let (nwinner, nbad) = (winner.len(), bad.len());
            match (
                values.values.read(op)?.mem(),
                winner.mem_mut(op)?,
                bad.read(op)?.mem(),
                dead.mem_mut(op)?,
            ) {
                // SAFETY: the values are normalised (each below its size: `IndexValues`), so
                // every key lies in the `count` words of `winner` (the twin checks anyway).
                (Mem::Host(i), MemMut::Host(w), Mem::Host(b), MemMut::Host(d)) => unsafe {
                    i.index_dead_positions(nb, &keys, w, nwinner, b, nbad, d)?
                },
                // SAFETY: as above.
                (Mem::Cuda(i), MemMut::Cuda(w), Mem::Cuda(b), MemMut::Cuda(d)) => unsafe {
                    i.index_dead_positions(nb, &keys, w, nwinner, b, nbad, d)?
                },
                _ => return Err(mixed(op)),
            }
        }
        Ok(DeadMask {
            of: values.id,
            nb,
            dead,
        })
    }

    /// The marks, on the host (`nb` bytes; 1 for a dead position).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        self.dead.to_vec_at::<u8>(0, self.nb)
    }

    pub(super) fn of(&self) -> u64 {
        self.of
    }
}

/// The accumulate groups of one [`IndexValues`] for [`Storage::index_scatter_add`]: the
/// positions with equal index tuples, in order; the last of each (its representative) sums
/// them, the others are dead. They partition the `nb` positions.
#[derive(Debug)]
pub struct AddGroups {
    of: u64,
    /// `[dead (U8), start, len, members (I64)]`, each at least one element.
    pub(super) parts: [Storage; 4],
    /// Elements of `members` (`nb`).
    pub(super) members: usize,
}

impl AddGroups {
    /// The groups of `values`, found on the host (the values read back when they live on a
    /// device) and uploaded to their device: by a counting sort over the keys when a key
    /// table is small, else by hashing the tuples. Reported bad values are not consulted:
    /// check [`IndexValues::bad_positions`] first.
    pub fn new(values: &IndexValues) -> Result<AddGroups> {
        let host = values.host_values()?;
        let g = groups(&host, &values.sizes, values.nb);
        AddGroups::upload(values, &g)
    }

    fn upload(values: &IndexValues, g: &Groups) -> Result<AddGroups> {
        let dev = values.device();
        Ok(AddGroups {
            of: values.id,
            parts: [
                upload(&g.dead, dev)?,
                upload(&g.start, dev)?,
                upload(&g.len, dev)?,
                upload(&g.members, dev)?,
            ],
            members: g.members.len(),
        })
    }

    /// The one group of a single position (no index arrays).
    pub(super) fn single(values: &IndexValues) -> Result<AddGroups> {
        let g = Groups {
            dead: vec![0],
            start: vec![0],
            len: vec![1],
            members: vec![0],
        };
        AddGroups::upload(values, &g)
    }

    pub(super) fn of(&self) -> u64 {
        self.of
    }
}

/// `v` on `device`, at least one element (an empty upload is still an operand).
fn upload<T: crate::WithDType + Default>(v: &[T], device: Device) -> Result<Storage> {
    if v.is_empty() {
        Storage::upload(&[T::default()], device)
    } else {
        Storage::upload(v, device)
    }
}

/// The index tuple of position `b` packed for hashing.
fn tuple_key(values: &[i64], n_adv: usize, nb: usize, b: usize) -> SmallVec<[i64; 2]> {
    (0..n_adv).map(|a| values[a * nb + b]).collect()
}

/// Most keys a host key table holds regardless of the number of positions.
const MAX_TABLE_KEYS: usize = 1 << 16;

/// The index tuples' keys (row-major over `sizes`) and their count, when a table of one entry
/// per key is small next to the positions (at most [`MAX_TABLE_KEYS`] or four per position);
/// `None` otherwise (the tuples are hashed).
fn table_keys(values: &[i64], sizes: &[usize], nb: usize) -> Option<(Vec<usize>, usize)> {
    let mut count = 1usize;
    let mut mul = vec![0usize; sizes.len()];
    for a in (0..sizes.len()).rev() {
        mul[a] = count;
        count = count.checked_mul(sizes[a])?;
    }
    if count > MAX_TABLE_KEYS.max(nb.saturating_mul(4)) {
        return None;
    }
    let mut keys = Vec::with_capacity(nb);
    for b in 0..nb {
        let mut key = 0usize;
        for (a, (&m, &size)) in mul.iter().zip(sizes).enumerate() {
            let v = usize::try_from(values[a * nb + b])
                .ok()
                .filter(|&v| v < size)?;
            key += v * m;
        }
        keys.push(key);
    }
    Some((keys, count))
}

/// Marks the positions whose tuple repeats at a later position (1: skip it).
fn dead_positions(values: &[i64], sizes: &[usize], nb: usize) -> Vec<u8> {
    let n_adv = sizes.len();
    let mut dead = vec![0u8; nb];
    if let Some((keys, count)) = table_keys(values, sizes, nb) {
        let mut last = vec![usize::MAX; count];
        for (b, &k) in keys.iter().enumerate() {
            last[k] = b;
        }
        for (b, (d, &k)) in dead.iter_mut().zip(&keys).enumerate() {
            *d = u8::from(last[k] != b);
        }
    } else if n_adv == 1 {
        let mut seen = HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(values[b]));
        }
    } else {
        let mut seen = HashSet::with_capacity(nb);
        for b in (0..nb).rev() {
            dead[b] = u8::from(!seen.insert(tuple_key(values, n_adv, nb, b)));
        }
    }
    dead
}

/// The accumulate groups: `dead` (1 for positions that are not their group's representative,
/// the group's last position), and for each representative `b` its members (positions in
/// order) `members[start[b] .. start[b] + len[b]]`.
struct Groups {
    dead: Vec<u8>,
    start: Vec<i64>,
    len: Vec<i64>,
    members: Vec<i64>,
}

/// The [`Groups`] of the index tuples: by a counting sort over the keys when a key table is
/// small ([`table_keys`]), else by hashing the tuples.
fn groups(values: &[i64], sizes: &[usize], nb: usize) -> Groups {
    let mut g = Groups {
        dead: vec![1u8; nb],
        start: vec![0i64; nb],
        len: vec![0i64; nb],
        members: Vec::with_capacity(nb),
    };
    if let Some((keys, count)) = table_keys(values, sizes, nb) {
        // Where each key's members start, then the positions placed in order.
        let mut at = vec![0usize; count + 1];
        for &k in &keys {
            at[k + 1] += 1;
        }
        for k in 0..count {
            at[k + 1] += at[k];
        }
        let mut last = vec![0usize; count];
        g.members.resize(nb, 0);
        let mut next = at.clone();
        for (b, &k) in keys.iter().enumerate() {
            g.members[next[k]] = b as i64;
            next[k] += 1;
            last[k] = b;
        }
        for k in 0..count {
            let n = at[k + 1] - at[k];
            if n > 0 {
                let rep = last[k];
                g.dead[rep] = 0;
                g.start[rep] = at[k] as i64;
                g.len[rep] = n as i64;
            }
        }
        return g;
    }
    let n_adv = sizes.len();
    let mut by_tuple: HashMap<SmallVec<[i64; 2]>, Vec<usize>> = HashMap::new();
    for b in 0..nb {
        by_tuple
            .entry(tuple_key(values, n_adv, nb, b))
            .or_default()
            .push(b);
    }
    for positions in by_tuple.values() {
        let rep = *positions.last().expect("groups are non-empty");
        g.dead[rep] = 0;
        g.start[rep] = g.members.len() as i64;
        g.len[rep] = positions.len() as i64;
        g.members.extend(positions.iter().map(|&b| b as i64));
    }
    g
}
