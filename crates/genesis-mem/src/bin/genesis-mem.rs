//! `genesis-mem`: tools for the Genesis caching allocator.
//!
//! ```text
//! genesis-mem replay [--json] [--plain] [--memory-first] [--device-bytes N] [--max-handle SIZE]
//!                    [--large-bytes SIZE] [--small-bytes SIZE] [--large-pieces N]
//!                    [--headroom-div N] [--headroom-granules N] [--evict SIZE]
//!                    [--timeline FILE] FILE...
//! ```
//!
//! `replay` runs genesis-trace files (`.trace` or `.trace.gz`) through the real allocator over a
//! simulated driver and prints, per trace, peak live bytes, peak reserved / peak live next to
//! PyTorch's three figures from the trace's header (default allocator, expandable segments,
//! cudaMallocAsync) and the target (the lowest of those and 1.03), driver calls next to their
//! budget (4x the larger of PyTorch's segments and maps), host nanoseconds per operation,
//! whether both targets are met, the ratio over the best of PyTorch's three ("vs best"), the
//! driver calls' time as the simulated driver prices it (`SimBackend::PRICES`) in percent of
//! the traced run's wall time ("drv %run"), the driver calls in the second half of the
//! trace's events ("late") and those after reserved memory last grew ("steady": the steady
//! state's, once the footprint is final). `--memory-first` replays with [`Config::memory_first`]; the
//! options after `--max-handle` set the [`Config`] field of the same name
//! (`large_handle_pieces`, `burst_headroom_div`, `burst_headroom_granules`), applied after
//! `--memory-first` whatever their order, and checked as the allocator checks them.
//! `--evict SIZE` (at most 1 GiB) writes through a buffer of that size before each operation,
//! outside the timing, so that the nanoseconds per operation include the cache misses an
//! allocator inside a program meets. A trace that cannot be read or replayed is reported and
//! the others still run; the exit status is 1 if any failed. When standard output closes
//! (`| head`), the command stops quietly with status 0.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use genesis_mem::trace::{Trace, replay_evicting};
use genesis_mem::{CachingAllocator, Config, SimBackend, parse_size};

/// The simulated device's size limits: below 1 MiB nothing useful fits; above 2^48 bytes
/// (256 TiB, the GPUs' virtual address space) the simulated address arithmetic could overflow.
const MIN_DEVICE_BYTES: usize = 1 << 20;
const MAX_DEVICE_BYTES: usize = 1 << 48;
/// The largest `--evict` buffer: far past any last-level cache.
const MAX_EVICT_BYTES: usize = 1 << 30;

const USAGE: &str = "usage: genesis-mem replay [--json] [--plain] [--memory-first] [--device-bytes SIZE] [--max-handle SIZE] [--large-bytes SIZE] [--small-bytes SIZE] [--large-pieces N] [--headroom-div N] [--headroom-granules N] [--evict SIZE] [--timeline FILE] FILE...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("replay") => exit_code(run_replay(&args[1..])),
        Some("-h") | Some("--help") | Some("help") => {
            exit_code(say(format_args!("{USAGE}")).map(|()| ExitCode::SUCCESS))
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Why `replay` stopped early.
enum Failure {
    /// The reader of standard output went away (`genesis-mem replay ... | head`): nothing more
    /// is wanted, so the tool stops quietly.
    Closed,
    /// An error to report.
    Message(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Message(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Failure {
        Failure::Message(e.to_string())
    }
}

/// The exit status of a command: a closed standard output is a success, an error is reported
/// with status 2.
fn exit_code(result: Result<ExitCode, Failure>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(Failure::Closed) => ExitCode::SUCCESS,
        Err(Failure::Message(e)) => {
            eprintln!("genesis-mem: {e}");
            ExitCode::from(2)
        }
    }
}

/// Writes one line to standard output. Unlike `println!`, a closed pipe is an error the caller
/// handles, not a panic.
fn say(line: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Failure::Closed,
        _ => Failure::Message(format!("standard output: {e}")),
    })
}

fn size_arg(v: Option<&String>, flag: &str) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    parse_size(v)
        .map(|b| b as usize)
        .map_err(|e| format!("{flag}: {e}"))
}

fn count_arg(v: Option<&String>, flag: &str) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a non-negative integer"))
}

fn run_replay(args: &[String]) -> Result<ExitCode, Failure> {
    let mut json = false;
    let mut config = Config {
        record_sites: false,
        ..Config::default()
    };
    let mut device_bytes: usize = 141 * 1_000_000_000; // an H200
    let mut evict: usize = 0;
    let mut timeline: Option<PathBuf> = None;
    let mut files = Vec::new();
    // `--memory-first` comes first whatever its place, so the fields below override it.
    if args.iter().any(|a| a == "--memory-first") {
        config = config.with_memory_first();
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--plain" => config.use_vmm = false,
            "--no-quick" => config.quick_lists = false,
            "--memory-first" => {}
            "--large-bytes" => config.large_bytes = size_arg(it.next(), a)?,
            "--small-bytes" => config.small_bytes = size_arg(it.next(), a)?,
            "--large-pieces" => config.large_handle_pieces = count_arg(it.next(), a)?,
            "--headroom-div" => config.burst_headroom_div = count_arg(it.next(), a)?,
            "--headroom-granules" => config.burst_headroom_granules = count_arg(it.next(), a)?,
            "--device-bytes" => device_bytes = size_arg(it.next(), "--device-bytes")?,
            "--evict" => {
                evict = size_arg(it.next(), "--evict")?;
                if evict > MAX_EVICT_BYTES {
                    return Err(format!("--evict {evict}: at most {MAX_EVICT_BYTES} bytes").into());
                }
            }
            "--max-handle" => config.max_handle_bytes = size_arg(it.next(), "--max-handle")?,
            "--timeline" => {
                timeline = Some(PathBuf::from(it.next().ok_or("--timeline needs a file")?))
            }
            f if f.starts_with("--") => {
                return Err(format!("unknown option {f}\n{USAGE}").into());
            }
            f => files.push(PathBuf::from(f)),
        }
    }
    if files.is_empty() {
        return Err(USAGE.to_string().into());
    }
    if !(MIN_DEVICE_BYTES..=MAX_DEVICE_BYTES).contains(&device_bytes) {
        return Err(format!(
            "--device-bytes {device_bytes}: the simulated device holds 1 MiB to 256 TiB"
        )
        .into());
    }
    // A setting the allocator refuses is refused once, before any trace runs.
    CachingAllocator::new(
        SimBackend::new(device_bytes, config.use_vmm),
        config.clone(),
    )
    .map_err(|e| e.to_string())?;
    if !json {
        say(format_args!(
            "{:<38} {:>9} {:>7} {:>7} {:>24} {:>13} {:>7} {:>7} {:>8} {:>8} {:>6} {:>6}",
            "trace",
            "live MiB",
            "ratio",
            "target",
            "PyTorch def / exp / async",
            "calls/budget",
            "ns/op",
            "targets",
            "vs best",
            "drv %run",
            "late",
            "steady"
        ))?;
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
        let r = match replay_evicting(&trace, config.clone(), device_bytes, evict) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("genesis-mem: {}: {e}", trace.name);
                failed = true;
                continue;
            }
        };
        if json {
            say(format_args!("{}", r.to_json()))?;
        } else {
            let fig = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
            let [d, e, a] = r.pytorch.ratios(r.peak_live_bytes);
            let budget = r.call_budget().map_or("-".to_string(), |b| b.to_string());
            let best = r
                .best_pytorch_ratio()
                .map_or("-".to_string(), |b| format!("{:.4}", r.ratio / b));
            let share = r
                .driver_time_fraction()
                .map_or("-".to_string(), |f| format!("{:.3}", f * 100.0));
            say(format_args!(
                "{:<38} {:>9} {:>7.4} {:>7.4} {:>24} {:>13} {:>7.0} {:>7} {:>8} {:>8} {:>6} {:>6}",
                r.trace,
                r.peak_live_bytes >> 20,
                r.ratio,
                r.target_ratio(),
                format!("{} / {} / {}", fig(d), fig(e), fig(a)),
                format!("{}/{budget}", r.driver_calls),
                r.ns_per_op,
                if r.meets_targets() { "met" } else { "missed" },
                best,
                share,
                r.late_driver_calls,
                r.steady_driver_calls
            ))?;
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
