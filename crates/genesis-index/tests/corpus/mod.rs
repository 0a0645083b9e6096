//! Reading the conformance corpora of `tests/data` and running them (`runner.rs`, which
//! `examples/conformance.rs` includes too), shared by the CPU and CUDA conformance tests.

pub(crate) mod runner;

/// A corpus (`.json`, or gzipped `.json.gz`). The GPU bundle runs the test binaries away from
/// the source tree: `GENESIS_REPO_ROOT` says where the repository is (as for the other
/// data-reading tests).
pub(crate) fn load(file: &str) -> serde_json::Value {
    let path = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| std::path::PathBuf::from(r).join("crates/genesis-index"))
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/data")
        .join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = if file.ends_with(".gz") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut s)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        s
    } else {
        String::from_utf8(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
