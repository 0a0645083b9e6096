//! Development tasks for Genesis, run as `cargo xtask <task>` (see `cargo xtask help`).
//!
//! - `build-kernels [--check] [--force]`: compile changed `kernels/*.cu` into fatbins embedded
//!   by `genesis-kernels` (`--force`: every one), or verify the committed images match their sources (no nvcc needed).
//! - `cuda-stub`: generate the stub `libcuda.so` that lets the `cuda` feature link without CUDA.
//! - `test`: the tests, without and with the `cuda` feature.
//! - `ci`: everything CI checks.
//! - `gpu-bundle`: the release GPU test and bench binaries, stripped, with one run script, and
//!   the allocator's C library with the `genesis_torch` Python module.

mod cuda;
mod kernels;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type DynResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

const HELP: &str = "\
cargo xtask <task>

tasks:
  build-kernels [--check] [--force]
                           compile kernels/*.cu into crates/genesis-kernels/images (nvcc from
                           CUDA_PATH or PATH, else the pinned PyPI toolchain in a cache dir);
                           sources unchanged since the manifest keep their images (--force
                           rebuilds all); --check verifies the images match, no nvcc
  cuda-stub                generate the stub libcuda.so (target/cuda-stub) and print its path
  test                     run the tests without and with the `cuda` feature, and the
                           bad-input sweeps again in a release build
  ci                       fmt check, clippy -D warnings (both feature sets), tests (both),
                           build-kernels --check, the layering test, cargo doc
  gpu-bundle               build the cuda-feature test and bench binaries in release, strip
                           them and write them with run.sh into .gpu/ (for the device machine),
                           with lib/libgenesis_mem_capi.so and python/ (genesis_torch)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build-kernels") => kernels::build_kernels(
            args.iter().any(|a| a == "--check"),
            args.iter().any(|a| a == "--force"),
        ),
        Some("cuda-stub") => cuda::ensure_link_env().map(|env| match env.library_path {
            Some(p) => println!("CUDA_LIBRARY_PATH={}", p.display()),
            None => println!("a CUDA installation was found; no stub needed"),
        }),
        Some("test") => test(false),
        Some("ci") => ci(),
        Some("gpu-bundle") => cuda::gpu_bundle(),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n\n{HELP}").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command, echoing it, and fails if it fails.
pub(crate) fn run(step: &str, cmd: &mut Command) -> DynResult {
    eprintln!("xtask: [{step}] {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step} failed ({status})").into())
    }
}

/// The tests: without and with the `cuda` feature, then the bad-input sweeps in a release
/// build. With `prune`, each workspace phase runs in parts (the unit tests and examples, the
/// integration tests [`TESTS_AT_ONCE`] targets at a time, the doc tests) and each part's
/// executables are deleted once it passed, so the disk holds a few test binaries at a time (a
/// `cuda`-feature test binary embeds the kernel images it reaches, tens of MB each; `ci`
/// prunes, `test` keeps them for reruns).
fn test(prune: bool) -> DynResult {
    let none = cuda::LinkEnv::default();
    test_workspace("test (no cuda)", &[], &none, prune)?;
    let env = cuda::ensure_link_env()?;
    test_workspace(
        "test (cuda feature)",
        &["--features", "cuda,genesis/ndarray"],
        &env,
        prune,
    )?;
    // The sweeps of bad input also in a release build: the tests above run with overflow
    // checks on (debug), these with the optimiser's assumptions (release).
    let mut args = vec!["--release", "--workspace", "--exclude", "xtask"];
    for t in BAD_INPUT_SWEEPS {
        args.extend(["--test", t]);
    }
    cargo_test("test (bad-input sweeps, release)", &args, &none, prune)?;
    cargo_test("test (xtask)", &["-p", "xtask"], &none, prune)
}

/// Integration test targets that a pruned workspace phase builds and runs at once.
const TESTS_AT_ONCE: usize = 16;

/// `cargo test` over the workspace (xtask aside) with `features`: at once, or with `prune` in
/// parts, each part's executables deleted once it passed.
fn test_workspace(step: &str, features: &[&str], env: &cuda::LinkEnv, prune: bool) -> DynResult {
    let mut base = vec!["--workspace", "--exclude", "xtask"];
    base.extend(features);
    if !prune {
        return cargo_test(step, &base, env, false);
    }
    let names = test_targets()?;
    let mut parts: Vec<Vec<&str>> = vec![vec!["--lib", "--bins", "--examples"]];
    for chunk in names.chunks(TESTS_AT_ONCE) {
        parts.push(chunk.iter().flat_map(|n| ["--test", n.as_str()]).collect());
    }
    for part in parts {
        let mut args = base.clone();
        args.extend(part);
        cargo_test(step, &args, env, true)?;
    }
    // Doc tests leave no executables (and `--no-run` refuses them).
    base.push("--doc");
    cargo_test(step, &base, env, false)
}

/// The names of the workspace's integration test targets (xtask's aside), each once.
fn test_targets() -> DynResult<Vec<String>> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo metadata failed ({})", out.status).into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut names = std::collections::BTreeSet::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        if pkg["name"] == "xtask" {
            continue;
        }
        for t in pkg["targets"].as_array().into_iter().flatten() {
            let is_test = t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|v| v == "test"));
            if let (true, Some(name)) = (is_test, t["name"].as_str()) {
                names.insert(name.to_string());
            }
        }
    }
    Ok(names.into_iter().collect())
}

/// Runs `cargo test ARGS` under `env`; with `prune`, then deletes the executables that command
/// built (asked of cargo with `--no-run --message-format=json`, which builds nothing more).
fn cargo_test(step: &str, args: &[&str], env: &cuda::LinkEnv, prune: bool) -> DynResult {
    let command = |extra: &[&str]| {
        let mut c = cargo();
        c.arg("test").args(args).args(extra);
        env.apply(&mut c);
        c
    };
    run(step, &mut command(&[]))?;
    if !prune {
        return Ok(());
    }
    let out = command(&["--no-run", "--message-format=json"])
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{step}: cannot list its executables: {e}"))?;
    if !out.status.success() {
        return Err(format!("{step}: listing its executables failed ({})", out.status).into());
    }
    let (mut files, mut bytes) = (0usize, 0u64);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let size = std::fs::metadata(exe).map(|m| m.len()).unwrap_or(0);
        if std::fs::remove_file(exe).is_ok() {
            files += 1;
            bytes += size;
        }
    }
    eprintln!(
        "xtask: [{step}] pruned {files} executables, {} MiB",
        bytes >> 20
    );
    Ok(())
}

/// The test targets that call public entry points with invalid, extreme or untrusted input
/// (each crate's `bad_input`, and the facade's sweeps of extreme shapes, files, options and
/// numbers): run in the debug and in the release build.
const BAD_INPUT_SWEEPS: [&str; 9] = [
    "bad_input",
    "checked_limits",
    "empty_extremes",
    "untrusted_files",
    "rank_limit",
    "print_options",
    "mask_assign",
    "scalar_rules",
    "fuzz_ops",
];

fn ci() -> DynResult {
    run("fmt", cargo().args(["fmt", "--all", "--", "--check"]))?;
    eprintln!("xtask: [build-kernels --check]");
    kernels::build_kernels(true, false)?;
    run(
        "clippy (no cuda)",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    let env = cuda::ensure_link_env()?;
    let mut c = cargo();
    c.args([
        "clippy",
        "--workspace",
        "--exclude",
        "xtask",
        "--all-targets",
        "--features",
        "cuda,genesis/ndarray",
        "--",
        "-D",
        "warnings",
    ]);
    env.apply(&mut c);
    run("clippy (cuda feature)", &mut c)?;
    test(true)?;
    // The data-parallel example's argument parsing and a short CPU run (the tests do not run
    // examples): two steps of the tiny GPT-2 alone on the CPU.
    run(
        "example gpt2_ddp (CPU, tiny)",
        cargo().args([
            "run",
            "-p",
            "genesis-dist",
            "--example",
            "gpt2_ddp",
            "--",
            "--config",
            "tiny",
            "--seq",
            "32",
            "--batch",
            "2",
            "--steps",
            "2",
            "--device",
            "cpu",
        ]),
    )?;
    let mut c = cargo();
    c.args([
        "doc",
        "--workspace",
        "--exclude",
        "xtask",
        "--no-deps",
        "--features",
        "cuda,genesis/ndarray",
    ]);
    c.env("RUSTDOCFLAGS", "-D warnings");
    env.apply(&mut c);
    run("doc", &mut c)?;
    eprintln!("xtask: ci passed");
    Ok(())
}
