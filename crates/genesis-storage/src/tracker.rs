//! Tracking of live storages and where they were created, for leak reports.
//!
//! Off by default (then a storage's creation costs one relaxed atomic load); turn it on with
//! [`enable`]. A [`TrackerScope`] lists the storages created after it began that are still
//! alive.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::Location;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::{DType, Device};

static ENABLED: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIVE: Mutex<BTreeMap<u64, Tracked>> = Mutex::new(BTreeMap::new());

/// A live storage, as the tracker saw it created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// Creation order.
    pub id: u64,
    /// `"cpu"`, `"pinned"`, `"cuda"`, `"mapped"` or `"shared"`.
    pub kind: &'static str,
    /// Its device.
    pub device: Device,
    /// Its dtype.
    pub dtype: DType,
    /// Elements.
    pub len: usize,
    /// Bytes.
    pub nbytes: usize,
    /// Where it was created.
    pub site: &'static Location<'static>,
}

impl fmt::Display for Tracked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} storage of {} x {} ({} bytes) on {}, created at {}",
            self.kind, self.len, self.dtype, self.nbytes, self.device, self.site
        )
    }
}

/// Turns tracking on or off (storages created while it is off are never listed).
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether tracking is on.
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Every tracked storage still alive, oldest first.
pub fn live() -> Vec<Tracked> {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect()
}

/// Marks a point in time; [`TrackerScope::leaks`] lists storages created since and still alive.
#[derive(Debug, Clone, Copy)]
pub struct TrackerScope {
    start: u64,
}

/// Starts a scope.
pub fn scope() -> TrackerScope {
    TrackerScope {
        start: NEXT_ID.load(Ordering::Relaxed),
    }
}

impl TrackerScope {
    /// Storages created after the scope began that are still alive.
    pub fn leaks(&self) -> Vec<Tracked> {
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(self.start..)
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// A readable report of [`TrackerScope::leaks`].
    pub fn report(&self) -> String {
        let leaks = self.leaks();
        if leaks.is_empty() {
            return "no storage leaked".into();
        }
        let bytes: usize = leaks.iter().map(|t| t.nbytes).sum();
        let mut s = format!("{} storage(s) leaked, {bytes} bytes:\n", leaks.len());
        for t in leaks {
            s += &format!("  {t}\n");
        }
        s
    }
}

pub(crate) fn register(
    kind: &'static str,
    device: Device,
    dtype: DType,
    len: usize,
    site: &'static Location<'static>,
) -> u64 {
    if !is_enabled() {
        return 0;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let t = Tracked {
        id,
        kind,
        device,
        dtype,
        len,
        nbytes: len * dtype.size(),
        site,
    };
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).insert(id, t);
    id
}

pub(crate) fn unregister(id: u64) {
    if id != 0 {
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}
