//! What the many-GPU tests share: how many GPUs they use, and starting this test binary once a
//! GPU as the ranks of a group.

use genesis_dist::Launch;

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
