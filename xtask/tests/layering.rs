//! Architecture invariant: dependencies point down only (ARCHITECTURE.md, "Layering").
//!
//! Reads `cargo metadata` and fails when a Genesis crate depends on one above it, when a crate
//! beside the stack (the C library of the allocator) depends on more than it may or anything
//! depends on it, or when a crate other than the runtime wrapper names `cust` / `cust_raw`.

use std::process::Command;

/// Bottom to top.
const LAYERS: [&str; 8] = [
    "genesis-cuda",
    "genesis-mem",
    "genesis-kernels",
    "genesis-storage",
    "genesis-index",
    "genesis",
    "genesis-nn",
    "genesis-dist",
];

/// Crates beside the stack: the Genesis crates each may depend on. Nothing may depend on them.
const SIDE: [(&str, &[&str]); 1] = [("genesis-mem-capi", &["genesis-cuda", "genesis-mem"])];

/// Crates allowed to depend on the raw driver bindings.
const DRIVER_CRATES: [&str; 1] = ["genesis-cuda"];

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Every upward edge (and every forbidden driver dependency) in a `cargo metadata` document.
fn violations(meta: &serde_json::Value) -> (usize, Vec<String>) {
    let mut seen = 0;
    let mut violations = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if let Some((_, allowed)) = SIDE.iter().find(|(s, _)| *s == name) {
            seen += 1;
            for d in p["dependencies"].as_array().unwrap() {
                let dep = d["name"].as_str().unwrap();
                let genesis = LAYERS.contains(&dep) || SIDE.iter().any(|(s, _)| *s == dep);
                if genesis && !allowed.contains(&dep) {
                    violations.push(format!("{name} depends on {dep}: only {allowed:?} may be"));
                }
                if dep == "cust" || dep == "cust_raw" {
                    violations.push(format!(
                        "{name} depends on {dep}: only {DRIVER_CRATES:?} may"
                    ));
                }
            }
            continue;
        }
        let Some(level) = LAYERS.iter().position(|l| *l == name) else {
            continue;
        };
        seen += 1;
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            // A dev-dependency on the crate itself only turns on its test features
            // (`test-support`, `tuning`) for its own tests and benches.
            if dep == name && d["kind"].as_str() == Some("dev") {
                continue;
            }
            if SIDE.iter().any(|(s, _)| *s == dep) {
                violations.push(format!(
                    "{name} depends on {dep}, which sits beside the stack: nothing may"
                ));
            }
            if LAYERS
                .iter()
                .position(|l| *l == dep)
                .is_some_and(|d| d >= level)
            {
                violations.push(format!("{name} depends on {dep}, which is not below it"));
            }
            if (dep == "cust" || dep == "cust_raw") && !DRIVER_CRATES.contains(&name) {
                violations.push(format!(
                    "{name} depends on {dep}: only {DRIVER_CRATES:?} may"
                ));
            }
        }
    }
    (seen, violations)
}

#[test]
fn dependencies_point_down_only() {
    let (seen, v) = violations(&metadata());
    assert_eq!(
        seen,
        LAYERS.len() + SIDE.len(),
        "every layer and side crate is a workspace member"
    );
    assert!(v.is_empty(), "layering violations:\n{}", v.join("\n"));
}

#[test]
fn upward_edges_are_caught() {
    let meta = serde_json::json!({"packages": [
        {"name": "genesis-mem", "dependencies": [{"name": "genesis-storage"}, {"name": "cust_raw"}]},
        {"name": "genesis-storage", "dependencies": [{"name": "genesis-mem"}]},
    ]});
    let (seen, v) = violations(&meta);
    assert_eq!(seen, 2);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("genesis-mem depends on genesis-storage"));
    assert!(v[1].contains("cust_raw"));
}

#[test]
fn side_crate_edges_are_caught() {
    let meta = serde_json::json!({"packages": [
        {"name": "genesis-mem-capi", "dependencies": [
            {"name": "genesis-mem"}, {"name": "genesis-cuda"}, {"name": "serde_json"},
            {"name": "genesis-storage"}]},
        {"name": "genesis", "dependencies": [{"name": "genesis-mem-capi"}]},
    ]});
    let (seen, v) = violations(&meta);
    assert_eq!(seen, 2);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("genesis-mem-capi depends on genesis-storage"));
    assert!(v[1].contains("genesis depends on genesis-mem-capi"));
}
