//! `cargo xtask build-kernels [--check]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{DynResult, root, run};

/// Machine code for these architectures, plus PTX for the first (JIT on anything newer).
pub(crate) const SASS_TARGETS: [&str; 4] = ["sm_80", "sm_86", "sm_89", "sm_90"];
pub(crate) const PTX_TARGET: &str = "compute_80";

/// Sources built for their own targets instead of the list above: `(source stem, targets)`.
/// `matmul_sm90` and `attention_sm90` use Hopper-only instructions (wgmma, setmaxnreg), which
/// exist only in architecture-specific machine code (`sm_90a`, loaded on compute capability 9.0
/// alone).
const OWN_TARGETS: [(&str, &[&str]); 2] = [
    ("matmul_sm90", &["sm_90a"]),
    ("attention_sm90", &["sm_90a"]),
];

/// nvcc flags of single sources, after [`NVCC_FLAGS`]: `(source stem, flags)`. `matmul_f32w`
/// keeps its fragment reads among the multiply-adds only at ptxas `-O1` (see the file's top).
const OWN_FLAGS: [(&str, &[&str]); 1] = [("matmul_f32w", &["-Xptxas=-O1"])];

/// The flags of source `name` after [`NVCC_FLAGS`].
fn flags_of(name: &str) -> &'static [&'static str] {
    OWN_FLAGS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, f)| f)
}

/// The targets of source `name`: machine code (`sm_*`) and PTX (`compute_*`).
fn targets_of(name: &str) -> Vec<&'static str> {
    if let Some((_, t)) = OWN_TARGETS.iter().find(|(n, _)| *n == name) {
        return t.to_vec();
    }
    let mut targets: Vec<&str> = SASS_TARGETS.to_vec();
    targets.push(PTX_TARGET);
    targets
}

/// nvcc's `-gencode` flag for one target: machine code for `sm_X` from `compute_X`, or PTX.
fn gencode(target: &str) -> String {
    match target.strip_prefix("sm_") {
        Some(num) => format!("-gencode=arch=compute_{num},code={target}"),
        None => format!("-gencode=arch={target},code={target}"),
    }
}

/// The PyPI toolchain, pinned to CUDA 13.0 as the GPU machines' driver is: PTX from a newer
/// toolkit would not JIT on that driver, and these exact versions work together.
const PIP_PACKAGES: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-nvvm==13.0.88",
];
const PIP_DIR_NAME: &str = "nvcc-13.0.88";

const NVCC_FLAGS: [&str; 4] = ["-fatbin", "-O3", "--std=c++17", "-Xptxas=-warn-spills"];

fn images_dir() -> PathBuf {
    root().join("crates/genesis-kernels/images")
}

fn generated_rs() -> PathBuf {
    root().join("crates/genesis-kernels/src/images.rs")
}

fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sorted `kernels/*.cu` sources, and the hash of every header (`*.cuh`) they may include.
fn sources() -> DynResult<(Vec<PathBuf>, String)> {
    let dir = root().join("kernels");
    let mut cu = Vec::new();
    let mut headers = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let p = entry?.path();
        match p.extension().and_then(|e| e.to_str()) {
            Some("cu") => cu.push(p),
            Some("cuh") => headers.push(p),
            _ => {}
        }
    }
    cu.sort();
    headers.sort();
    let mut h = Sha256::new();
    for p in &headers {
        h.update(
            p.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        h.update(std::fs::read(p)?);
    }
    let headers_hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((cu, headers_hash))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Compiles every changed source (every source with `force`), or with `check` only verifies.
pub(crate) fn build_kernels(check: bool, force: bool) -> DynResult {
    if check {
        return check_kernels();
    }
    let nvcc = find_or_install_nvcc()?;
    let version = nvcc_version(&nvcc)?;
    eprintln!("xtask: using {} ({version})", nvcc.display());
    let (cu, headers_hash) = sources()?;
    let out_dir = images_dir();
    std::fs::create_dir_all(&out_dir)?;
    // Remove images of sources that no longer exist.
    for entry in std::fs::read_dir(&out_dir)? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "fatbin") && !cu.iter().any(|s| stem(s) == stem(&p)) {
            std::fs::remove_file(&p)?;
        }
    }
    // An image whose source, headers, flags, targets and compiler match the manifest's record
    // (and whose bytes match its hash) is kept: nvcc's output is deterministic.
    let previous: serde_json::Value = std::fs::read(out_dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let same_toolchain = previous["nvcc_version"] == version.as_str()
        && previous["headers_sha256"] == headers_hash.as_str()
        && previous["nvcc_flags"] == serde_json::json!(NVCC_FLAGS);
    let mut entries = Vec::new();
    for src in &cu {
        let name = stem(src);
        let out = out_dir.join(format!("{name}.fatbin"));
        let source_sha = sha256_hex(&std::fs::read(src)?);
        let kept = previous["kernels"].as_array().and_then(|all| {
            all.iter().find(|e| {
                e["name"] == name.as_str()
                    && e["source_sha256"] == source_sha.as_str()
                    && e["flags"] == serde_json::json!(flags_of(&name))
                    && e["targets"] == serde_json::json!(targets_of(&name))
                    && std::fs::read(&out)
                        .is_ok_and(|b| e["image_sha256"] == sha256_hex(&b).as_str())
            })
        });
        if let (true, Some(entry)) = (same_toolchain && !force, kept) {
            eprintln!("xtask: [nvcc {name}] unchanged");
            entries.push(entry.clone());
            continue;
        }
        let mut c = Command::new(&nvcc);
        c.args(NVCC_FLAGS);
        c.args(flags_of(&name));
        let targets = targets_of(&name);
        for t in &targets {
            c.arg(gencode(t));
        }
        c.arg("-I").arg(root().join("kernels"));
        c.arg("-o").arg(&out).arg(src);
        run(&format!("nvcc {name}"), &mut c)?;
        let image = std::fs::read(&out)?;
        entries.push(serde_json::json!({
            "name": name,
            "source": format!("kernels/{name}.cu"),
            "source_sha256": source_sha,
            "image": format!("{name}.fatbin"),
            "image_sha256": sha256_hex(&image),
            "image_bytes": image.len(),
            "targets": targets,
            "flags": flags_of(&name),
        }));
    }
    let mut targets: Vec<&str> = SASS_TARGETS.to_vec();
    targets.push(PTX_TARGET);
    let manifest = serde_json::json!({
        "generator": "cargo xtask build-kernels",
        "nvcc_version": version,
        "nvcc_flags": NVCC_FLAGS,
        "targets": targets,
        "headers_sha256": headers_hash,
        "kernels": entries,
    });
    std::fs::write(
        out_dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    std::fs::write(generated_rs(), images_rs(&cu, &targets))?;
    eprintln!(
        "xtask: wrote {} image(s), manifest.json and src/images.rs; commit them",
        cu.len()
    );
    Ok(())
}

/// The generated `images.rs`: one `KernelImage` constant per source.
fn images_rs(cu: &[PathBuf], targets: &[&str]) -> String {
    let mut s = String::from(
        "// @generated by `cargo xtask build-kernels`; do not edit.\n\
         //! The embedded kernel images, one per `kernels/*.cu`.\n\n\
         /// Targets of every image but the architecture-specific ones: machine code (`sm_*`)\n\
         /// and PTX (`compute_*`).\n",
    );
    let list: Vec<String> = targets.iter().map(|t| format!("{t:?}")).collect();
    s += &format!("pub const TARGETS: &[&str] = &[{}];\n", list.join(", "));
    for src in cu {
        let name = stem(src);
        let konst = name.to_uppercase();
        let own = targets_of(&name);
        let image_targets = if own == targets {
            "TARGETS".to_string()
        } else {
            let list: Vec<String> = own.iter().map(|t| format!("{t:?}")).collect();
            format!("&[{}]", list.join(", "))
        };
        s += &format!(
            "\n/// The fatbin built from `kernels/{name}.cu`.\n\
             #[cfg(feature = \"cuda\")]\n\
             pub static {konst}: genesis_cuda::KernelImage = genesis_cuda::KernelImage {{\n    \
             name: {name:?},\n    \
             image: include_bytes!(\"../images/{name}.fatbin\"),\n    \
             targets: {image_targets},\n\
             }};\n"
        );
        s += &format!(
            "\n/// Bytes of the `{name}` image, for size reports.\n\
             pub const {konst}_BYTES: usize = include_bytes!(\"../images/{name}.fatbin\").len();\n"
        );
    }
    s
}

/// The strings of a manifest array (none when the field is missing).
fn strings(v: &serde_json::Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default()
}

fn check_kernels() -> DynResult {
    let stale = |why: String| -> Box<dyn std::error::Error> {
        format!("kernel images are stale: {why}; run `cargo xtask build-kernels`").into()
    };
    let out_dir = images_dir();
    let manifest_path = out_dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| stale(format!("{}: {e}", manifest_path.display())))?;
    let manifest: serde_json::Value = serde_json::from_str(&text)?;
    let (cu, headers_hash) = sources()?;
    if manifest["headers_sha256"].as_str() != Some(headers_hash.as_str()) {
        return Err(stale("a kernels/*.cuh header changed".into()));
    }
    let mut targets: Vec<&str> = SASS_TARGETS.to_vec();
    targets.push(PTX_TARGET);
    let listed = strings(&manifest["targets"]);
    if listed != targets {
        return Err(stale(format!(
            "targets {listed:?} differ from xtask's {targets:?}"
        )));
    }
    let mut by_name = BTreeMap::new();
    for k in manifest["kernels"].as_array().into_iter().flatten() {
        by_name.insert(
            k["name"].as_str().unwrap_or_default().to_string(),
            k.clone(),
        );
    }
    for src in &cu {
        let name = stem(src);
        let entry = by_name
            .remove(&name)
            .ok_or_else(|| stale(format!("kernels/{name}.cu has no image")))?;
        let listed = strings(&entry["targets"]);
        if listed != targets_of(&name) {
            return Err(stale(format!(
                "{name}.fatbin was built for {listed:?}, xtask builds {:?}",
                targets_of(&name)
            )));
        }
        let flags = strings(&entry["flags"]);
        if flags != flags_of(&name) {
            return Err(stale(format!(
                "{name}.fatbin was built with flags {flags:?}, xtask uses {:?}",
                flags_of(&name)
            )));
        }
        if entry["source_sha256"].as_str() != Some(sha256_hex(&std::fs::read(src)?).as_str()) {
            return Err(stale(format!(
                "kernels/{name}.cu changed since its image was built"
            )));
        }
        let image = std::fs::read(out_dir.join(format!("{name}.fatbin")))
            .map_err(|e| stale(format!("{name}.fatbin: {e}")))?;
        if entry["image_sha256"].as_str() != Some(sha256_hex(&image).as_str()) {
            return Err(stale(format!("{name}.fatbin does not match the manifest")));
        }
    }
    if let Some(name) = by_name.keys().next() {
        return Err(stale(format!(
            "the manifest lists `{name}` but kernels/{name}.cu is gone"
        )));
    }
    let generated = std::fs::read_to_string(generated_rs()).unwrap_or_default();
    if generated != images_rs(&cu, &targets) {
        return Err(stale(
            "crates/genesis-kernels/src/images.rs is out of date".into(),
        ));
    }
    eprintln!("xtask: {} kernel image(s) match their sources", cu.len());
    Ok(())
}

fn nvcc_version(nvcc: &Path) -> DynResult<String> {
    let out = Command::new(nvcc).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .find(|l| l.contains("release"))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GENESIS_CUDA_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| root().join("target"));
    base.join("genesis")
}

/// nvcc from `CUDA_PATH`, then `PATH`, then the cached PyPI toolchain (installed if missing).
fn find_or_install_nvcc() -> DynResult<PathBuf> {
    if let Some(p) = std::env::var_os("CUDA_PATH") {
        let nvcc = PathBuf::from(p).join("bin/nvcc");
        if nvcc.is_file() {
            return Ok(nvcc);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let nvcc = dir.join("nvcc");
            if nvcc.is_file() {
                return Ok(nvcc);
            }
        }
    }
    let dir = cache_dir().join(PIP_DIR_NAME);
    let nvcc = dir.join("nvidia/cu13/bin/nvcc");
    if nvcc.is_file() {
        return Ok(nvcc);
    }
    eprintln!(
        "xtask: no nvcc in CUDA_PATH or PATH; installing the pinned CUDA 13.0 compiler from PyPI \
         into {} (about 290 MB, once)",
        dir.display()
    );
    std::fs::create_dir_all(&dir)?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let mut c = Command::new(python);
    c.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-cache-dir",
        "--target",
    ])
    .arg(&dir)
    .args(PIP_PACKAGES);
    run("pip install nvcc", &mut c)?;
    if nvcc.is_file() {
        Ok(nvcc)
    } else {
        Err(format!("pip finished but {} is missing", nvcc.display()).into())
    }
}
