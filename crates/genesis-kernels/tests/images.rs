//! The committed kernel images must match `kernels/*.cu`.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

fn repo_root() -> PathBuf {
    // On the device machine the bundle runs from a copy of the repository elsewhere.
    std::env::var_os("GENESIS_REPO_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn images_match_sources() {
    let root = repo_root();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("crates/genesis-kernels/images/manifest.json"))
            .expect("manifest.json is missing: run `cargo xtask build-kernels`"),
    )
    .unwrap();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root.join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    let kernels = manifest["kernels"].as_array().unwrap();
    assert_eq!(
        kernels.len(),
        sources.len(),
        "kernels/*.cu and the manifest differ: run `cargo xtask build-kernels`"
    );
    for src in sources {
        let name = src.file_stem().unwrap().to_str().unwrap();
        let entry = kernels
            .iter()
            .find(|k| k["name"] == name)
            .unwrap_or_else(|| {
                panic!("kernels/{name}.cu has no image: run `cargo xtask build-kernels`")
            });
        assert_eq!(
            entry["source_sha256"].as_str().unwrap(),
            hex(&std::fs::read(&src).unwrap()),
            "kernels/{name}.cu changed since its image was built: run `cargo xtask build-kernels`"
        );
        let image =
            std::fs::read(root.join(format!("crates/genesis-kernels/images/{name}.fatbin")))
                .unwrap();
        assert_eq!(
            entry["image_sha256"].as_str().unwrap(),
            hex(&image),
            "{name}.fatbin does not match the manifest: run `cargo xtask build-kernels`"
        );
    }
    let targets: Vec<&str> = manifest["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        genesis_kernels::images::TARGETS,
        "run `cargo xtask build-kernels`"
    );
    for t in ["sm_80", "sm_86", "sm_89", "sm_90", "compute_80"] {
        assert!(targets.contains(&t), "{t} missing from the image targets");
    }
}

#[test]
fn embedded_image_is_the_committed_one() {
    let root = repo_root();
    let on_disk =
        std::fs::read(root.join("crates/genesis-kernels/images/elementwise.fatbin")).unwrap();
    assert_eq!(on_disk.len(), genesis_kernels::images::ELEMENTWISE_BYTES);
}
