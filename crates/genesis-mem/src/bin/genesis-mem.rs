//! `genesis-mem`: tools for the Genesis caching allocator.
//!
//! ```text
//! genesis-mem replay [--json] [--plain] [--device-bytes N] [--max-handle SIZE] [--timeline FILE] FILE...
//! ```
//!
//! `replay` runs genesis-trace files (`.trace` or `.trace.gz`) through the real allocator over a
//! simulated driver and prints, per trace, peak live bytes, peak reserved bytes, their ratio,
//! driver calls and host nanoseconds per operation.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use genesis_mem::trace::{Trace, replay};
use genesis_mem::{Config, parse_size};

const USAGE: &str = "usage: genesis-mem replay [--json] [--plain] [--device-bytes SIZE] [--max-handle SIZE] [--timeline FILE] FILE...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("replay") => match run_replay(&args[1..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("genesis-mem: {e}");
                ExitCode::from(2)
            }
        },
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn size_arg(v: Option<&String>, flag: &str) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    parse_size(v)
        .map(|b| b as usize)
        .map_err(|e| format!("{flag}: {e}"))
}

fn run_replay(args: &[String]) -> Result<ExitCode, String> {
    let mut json = false;
    let mut config = Config {
        record_sites: false,
        ..Config::default()
    };
    let mut device_bytes: usize = 141 * 1_000_000_000; // an H200
    let mut timeline: Option<PathBuf> = None;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--plain" => config.use_vmm = false,
            "--no-quick" => config.quick_lists = false,
            "--device-bytes" => device_bytes = size_arg(it.next(), "--device-bytes")?,
            "--max-handle" => config.max_handle_bytes = size_arg(it.next(), "--max-handle")?,
            "--timeline" => {
                timeline = Some(PathBuf::from(it.next().ok_or("--timeline needs a file")?))
            }
            f if f.starts_with("--") => return Err(format!("unknown option {f}\n{USAGE}")),
            f => files.push(PathBuf::from(f)),
        }
    }
    if files.is_empty() {
        return Err(USAGE.to_string());
    }
    if !json {
        println!(
            "{:<28} {:>14} {:>14} {:>7} {:>12} {:>10}",
            "trace", "peak live", "peak reserved", "ratio", "driver calls", "ns/op"
        );
    }
    let many = files.len() > 1;
    let mut failed = false;
    for f in &files {
        let trace = match Trace::read(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("genesis-mem: {e}");
                failed = true;
                continue;
            }
        };
        let r = replay(&trace, config.clone(), device_bytes)
            .map_err(|e| format!("{}: {e}", trace.name))?;
        if json {
            println!("{}", r.to_json());
        } else {
            let calls = match r.pytorch_segments {
                Some(s) => format!(
                    "{} ({:.1}x)",
                    r.driver_calls,
                    r.driver_calls as f64 / s.max(1) as f64
                ),
                None => r.driver_calls.to_string(),
            };
            println!(
                "{:<28} {:>14} {:>14} {:>7.4} {:>12} {:>10.1}",
                r.trace, r.peak_live_bytes, r.peak_reserved_bytes, r.ratio, calls, r.ns_per_op
            );
        }
        if let Some(path) = &timeline {
            let out = if many {
                with_suffix(path, &r.trace)
            } else {
                path.clone()
            };
            let svg = genesis_mem::history::timeline_svg(
                r.timeline.clone(),
                r.largest.clone(),
                "trace event",
            );
            std::fs::write(&out, svg).map_err(|e| format!("{}: {e}", out.display()))?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn with_suffix(path: &Path, name: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}.{name}{ext}"))
}
