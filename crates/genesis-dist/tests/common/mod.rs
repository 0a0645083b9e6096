//! What the many-GPU tests share: how many GPUs they use, when they skip, one test at a time
//! on the GPUs, a group of one rank, and starting this test binary once a GPU as the ranks of
//! a group.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use genesis_dist::{GroupEnv, Launch, ProcessGroup, StoreServer, shared_nccl};

/// How many GPUs the multi-GPU tests use: all of them, or `GENESIS_DIST_GPUS`.
pub(crate) fn gpus() -> usize {
    let n = genesis::cuda::device_count();
    std::env::var("GENESIS_DIST_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(n, |g: usize| g.min(n))
}

/// Runs test `rank_test` of this binary in `n` processes, one a GPU, with `child_var` set (the
/// rank test is a no-op without it), and waits for all of them.
pub(crate) fn launch_ranks(rank_test: &str, child_var: &str, n: usize) {
    Launch::new(std::env::current_exe().unwrap(), n)
        .args(["--exact", rank_test, "--test-threads=1", "--nocapture"])
        .env(child_var, "1")
        .run()
        .unwrap();
}

/// Why a test that needs `gpus` GPUs and NCCL cannot run here, when it cannot.
pub(crate) fn skip(gpus: usize) -> Option<String> {
    let n = genesis::cuda::device_count();
    if n < gpus {
        return Some(format!("{n} CUDA devices, the test needs {gpus}"));
    }
    if let Err(e) = shared_nccl() {
        return Some(format!("no NCCL: {e}"));
    }
    None
}

/// One test at a time on the GPUs: NCCL kernels of two communicators on one GPU, queued in
/// different orders, can wait for each other.
static GPUS: Mutex<()> = Mutex::new(());

/// Holds [`GPUS`] (a test that panicked while holding it does not stop the others).
pub(crate) fn gpus_lock() -> MutexGuard<'static, ()> {
    GPUS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A group of one rank on GPU 0 of this process, and the store it met in (keep it while the
/// group is used).
pub(crate) fn nccl_world_of_one(timeout: Duration) -> (StoreServer, ProcessGroup) {
    let (server, env) = world_of_one_env();
    let pg = ProcessGroup::new(&env, timeout).unwrap();
    (server, pg)
}

/// A store on this host and the environment of rank 0 of a group of one on GPU 0 that meets
/// in it (keep the store while the group is made and used).
pub(crate) fn world_of_one_env() -> (StoreServer, GroupEnv) {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let env = GroupEnv {
        rank: 0,
        world_size: 1,
        local_rank: 0,
        master_addr: "127.0.0.1".into(),
        master_port: server.local_addr().port(),
    };
    (server, env)
}
