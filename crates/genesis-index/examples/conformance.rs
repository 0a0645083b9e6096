//! Runs an indexing conformance corpus: `conformance FILE [--device cpu|cuda]`.
//!
//! Prints one line per failing case and a last line `N passed, M failed`; exits non-zero when
//! anything failed. The runner is the conformance tests' (`tests/corpus/runner.rs`).

use std::process::ExitCode;

use genesis_storage::Device;

#[path = "../tests/corpus/runner.rs"]
mod runner;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = None;
    let mut device = Device::Cpu;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => match it.next().map(|d| d.parse::<Device>()) {
                Some(Ok(d)) => device = d,
                _ => {
                    eprintln!("--device takes cpu, cuda or cuda:N");
                    return ExitCode::from(2);
                }
            },
            f => file = Some(f.to_string()),
        }
    }
    let Some(file) = file else {
        eprintln!("usage: conformance FILE [--device cpu|cuda]");
        return ExitCode::from(2);
    };
    let doc: serde_json::Value = match std::fs::read_to_string(&file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::from(2);
        }
    };
    match runner::run_corpus(&doc, device) {
        Ok(report) => {
            for f in &report.failures {
                println!("FAIL {}: {}", f.id, f.message);
            }
            println!("{} passed, {} failed", report.passed, report.failures.len());
            if report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("{file}: {e}");
            ExitCode::from(2)
        }
    }
}
