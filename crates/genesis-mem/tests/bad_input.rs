//! Every public entry point of `genesis-mem` called with the
//! invalid inputs a user can pass. Each call runs under `catch_unwind` (and, where a bad value
//! could make it loop, on a thread with a deadline): a panic or a hang fails the test with the
//! call named; a returned error must be the typed one expected.
//!
//! The entry points, from the crate's public items: `CachingAllocator::{new, alloc, free,
//! record_stream, stats, reset_peak_stats, empty_cache, trim_cache, garbage_collect,
//! set_memory_fraction, set_cache_limit, set_cache_size, warm_up, owns, driver_calls,
//! with_backend, snapshot, pytorch_snapshot, live_allocations, record_history, take_history,
//! check_invariants, leak_scope, large_allocations}`, `Config`, `SimBackend::{new,
//! inject_faults, fail_next_allocs, ...}`, `parse_size`, `Pool::of`, `stats::human`,
//! `Stats::{cache_hit_rate, fragmentation, external_fragmentation, summary}`, `History::new`,
//! `history::timeline_svg`, `Snapshot::{to_json, to_pytorch_pickle}`, `LeakScope::check`,
//! `Trace::{read, parse}`, `trace::replay`, `ReplayResult::to_json`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::Duration;

use genesis_mem::trace::{Trace, TraceEvent, replay};
use genesis_mem::{CachingAllocator, Config, Error, FaultPoint, History, Pool, SimBackend};

/// Calls that panicked, hung or returned the wrong result, by name.
#[derive(Default)]
struct Sweep {
    failures: Vec<String>,
    calls: usize,
}

impl Sweep {
    /// Runs `f`; records a panic. Returns its value when it did not panic.
    fn call<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> Option<T> {
        self.calls += 1;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => Some(v),
            Err(p) => {
                self.failures
                    .push(format!("{name}: panicked: {}", message(&*p)));
                None
            }
        }
    }

    /// Runs `f` on its own thread with a deadline: a panic or a hang is recorded.
    fn call_bounded<T: Send + 'static>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        self.calls += 1;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| message(&*p));
            let _ = tx.send(r);
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(v)) => Some(v),
            Ok(Err(m)) => {
                self.failures.push(format!("{name}: panicked: {m}"));
                None
            }
            Err(_) => {
                self.failures
                    .push(format!("{name}: did not return in 60 s"));
                None
            }
        }
    }

    /// `ok` must hold of the value (a typed error, usually).
    fn expect<T: std::fmt::Debug>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> T,
        ok: impl FnOnce(&T) -> bool,
    ) {
        if let Some(v) = self.call(name, f)
            && !ok(&v)
        {
            self.failures.push(format!("{name}: unexpected {v:?}"));
        }
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} of {} calls failed:\n{}",
            self.failures.len(),
            self.calls,
            self.failures.join("\n")
        );
    }
}

fn message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string payload)".to_string())
}

fn sim(total: usize, vmm: bool, config: Config) -> Result<CachingAllocator<SimBackend>, Error> {
    CachingAllocator::new(SimBackend::new(total, vmm), config)
}

fn absurd_configs() -> Vec<(String, Config)> {
    let d = Config::default();
    let mut v = Vec::new();
    for f in [
        f64::NAN,
        -1.0,
        0.0,
        -0.0,
        1.0 + 1e-9,
        2.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        v.push((
            format!("memory_fraction {f}"),
            Config {
                memory_fraction: f,
                ..d.clone()
            },
        ));
    }
    v
}

fn degenerate_configs() -> Vec<(String, Config)> {
    let d = Config::default();
    let mut v = vec![
        (
            "max_handle_bytes 0".to_string(),
            Config {
                max_handle_bytes: 0,
                ..d.clone()
            },
        ),
        (
            "region_bytes 0".to_string(),
            Config {
                region_bytes: 0,
                ..d.clone()
            },
        ),
        (
            "large_bytes 0".to_string(),
            Config {
                large_bytes: 0,
                ..d.clone()
            },
        ),
        (
            "small_bytes usize::MAX".to_string(),
            Config {
                small_bytes: usize::MAX,
                ..d.clone()
            },
        ),
        (
            "large_bytes usize::MAX".to_string(),
            Config {
                large_bytes: usize::MAX,
                ..d.clone()
            },
        ),
        (
            "max_handle_bytes usize::MAX, region_bytes usize::MAX".to_string(),
            Config {
                max_handle_bytes: usize::MAX,
                region_bytes: usize::MAX,
                ..d.clone()
            },
        ),
        (
            "cache_limit 0".to_string(),
            Config {
                cache_limit: Some(0),
                ..d.clone()
            },
        ),
        (
            "max_handle_bytes 1, region_bytes 1".to_string(),
            Config {
                max_handle_bytes: 1,
                region_bytes: 1,
                ..d.clone()
            },
        ),
    ];
    for t in [f64::NAN, -1.0, 0.0, 2.0, f64::INFINITY] {
        v.push((
            format!("compact_threshold {t}"),
            Config {
                compact_threshold: Some(t),
                ..d.clone()
            },
        ));
    }
    v
}

#[test]
fn allocator_configs() {
    let mut s = Sweep::default();
    for (what, config) in absurd_configs() {
        for vmm in [true, false] {
            s.expect(
                &format!("CachingAllocator::new({what}, vmm {vmm})"),
                || sim(1 << 30, vmm, config.clone()).map(|_| ()),
                |r| matches!(r, Err(Error::InvalidFraction(_))),
            );
        }
    }
    // Degenerate but representable settings: the allocator either refuses them with a typed
    // error or works (alloc, free, the invariants hold).
    for (what, config) in degenerate_configs() {
        for vmm in [true, false] {
            let name = format!("allocator with {what}, vmm {vmm}");
            let config = config.clone();
            let r = s.call_bounded(&name, move || -> Result<String, String> {
                let a = match sim(1 << 30, vmm, config) {
                    Ok(a) => a,
                    Err(e) => return Ok(format!("refused: {e}")),
                };
                for bytes in [1usize, 512, 3 << 20, 100 << 20] {
                    match a.alloc(bytes, 0) {
                        Ok(x) => a.free(x).map_err(|e| format!("free: {e}"))?,
                        Err(
                            Error::OutOfMemory { .. } | Error::TooLarge { .. } | Error::Backend(_),
                        ) => {}
                        Err(e) => return Err(format!("alloc({bytes}): {e}")),
                    }
                    a.check_invariants()?;
                }
                a.empty_cache().map_err(|e| e.to_string())?;
                a.check_invariants()?;
                Ok("worked".to_string())
            });
            if let Some(Err(e)) = r {
                s.failures.push(format!("{name}: {e}"));
            }
        }
    }
    s.finish();
}

#[test]
fn allocator_calls() {
    let mut s = Sweep::default();
    for vmm in [true, false] {
        let a = sim(1 << 30, vmm, Config::default()).unwrap();
        let other = sim(1 << 30, vmm, Config::default()).unwrap();
        s.expect(
            "alloc(0)",
            || a.alloc(0, 0),
            |r| matches!(r, Err(Error::ZeroSize)),
        );
        for bytes in [(1 << 30) + 1, 1 << 62, usize::MAX - 511, usize::MAX] {
            s.expect(
                &format!("alloc({bytes}), vmm {vmm}"),
                || a.alloc(bytes, 0),
                |r| matches!(r, Err(Error::TooLarge { .. } | Error::OutOfMemory { .. })),
            );
        }
        s.expect(
            "alloc on stream u64::MAX",
            || a.alloc(1, u64::MAX).and_then(|x| a.free(x)),
            |r| r.is_ok(),
        );
        let foreign = other.alloc(4096, 0).unwrap();
        s.expect(
            "record_stream(foreign allocation)",
            || a.record_stream(&foreign, 1),
            |r| matches!(r, Err(Error::ForeignAllocation { .. })),
        );
        s.expect(
            "free(foreign allocation)",
            || a.free(foreign),
            |r| matches!(r, Err(Error::ForeignAllocation { .. })),
        );
        for f in [f64::NAN, -0.5, 0.0, 1.5, f64::INFINITY] {
            s.expect(
                &format!("set_memory_fraction({f})"),
                || a.set_memory_fraction(f),
                |r| matches!(r, Err(Error::InvalidFraction(_))),
            );
        }
        for text in [
            "",
            " ",
            "GB",
            "-1GB",
            "1.5.5GB",
            "nan",
            "NaNGB",
            "infGB",
            "1e400",
            "99999999999999999999999999GB",
            "18446744073709551615TB",
            "12 parsecs",
            "\u{0}",
        ] {
            s.expect(
                &format!("set_cache_size({text:?})"),
                || a.set_cache_size(text),
                |r| matches!(r, Err(Error::Size(_))),
            );
            s.expect(
                &format!("parse_size({text:?})"),
                || genesis_mem::parse_size(text),
                |r| r.is_err(),
            );
        }
        for limit in [Some(0), Some(usize::MAX), None] {
            s.expect(
                &format!("set_cache_limit({limit:?})"),
                || a.set_cache_limit(limit),
                |r| r.is_ok(),
            );
        }
        s.expect(
            "trim_cache(usize::MAX)",
            || a.trim_cache(usize::MAX),
            |r| r.is_ok(),
        );
        s.expect("trim_cache(0)", || a.trim_cache(0), |r| r.is_ok());
        s.expect(
            "garbage_collect(Duration::MAX)",
            || a.garbage_collect(Duration::MAX),
            |r| r.is_ok(),
        );
        s.expect(
            "garbage_collect(ZERO)",
            || a.garbage_collect(Duration::ZERO),
            |r| r.is_ok(),
        );
        s.expect(
            "warm_up([0])",
            || a.warm_up(&[0], 0),
            |r| matches!(r, Err(Error::ZeroSize)),
        );
        s.expect(
            "warm_up([usize::MAX])",
            || a.warm_up(&[1, usize::MAX], 0),
            |r| matches!(r, Err(Error::TooLarge { .. } | Error::OutOfMemory { .. })),
        );
        s.expect("owns(0)", || a.owns(0), |&b| !b);
        s.expect("owns(u64::MAX)", || a.owns(u64::MAX), |&b| !b);
        s.expect(
            "large_allocations(0)",
            || a.large_allocations(0).len(),
            |_| true,
        );
        s.expect(
            "large_allocations(usize::MAX)",
            || a.large_allocations(usize::MAX).len(),
            |&n| n == 0,
        );
        s.expect(
            "pytorch_snapshot(usize::MAX)",
            || a.pytorch_snapshot(usize::MAX).len(),
            |&n| n > 0,
        );
        s.expect("record_history(0)", || a.record_history(0), |_| true);
        s.expect(
            "alloc/free with a 0-capacity history",
            || a.alloc(100, 0).and_then(|x| a.free(x)),
            |r| r.is_ok(),
        );
        s.expect(
            "take_history().summary()",
            || {
                a.take_history()
                    .map(|h| (h.summary(), h.timeline_svg()).0.len())
            },
            |_| true,
        );
        s.expect(
            "record_history(usize::MAX)",
            || a.record_history(usize::MAX),
            |_| true,
        );
        s.expect(
            "snapshot().to_json() of an empty cache",
            || {
                a.empty_cache()?;
                let snap = a.snapshot();
                Ok::<_, Error>((snap.to_json().len(), snap.to_pytorch_pickle(0, &[]).len()))
            },
            |r| r.is_ok(),
        );
        s.expect(
            "stats of an empty allocator",
            || {
                let st = a.stats();
                (
                    st.cache_hit_rate(),
                    st.fragmentation(),
                    st.external_fragmentation(),
                    st.summary("").len(),
                )
            },
            |&(h, f, e, _)| h.is_finite() && f.is_finite() && e.is_finite(),
        );
        s.expect(
            "leak_scope().check()",
            || a.leak_scope().check(&a).is_clean(),
            |&c| c,
        );
        s.expect("check_invariants", || a.check_invariants(), |r| r.is_ok());
    }
    s.finish();
}

#[test]
fn backends_and_helpers() {
    let mut s = Sweep::default();
    for total in [0usize, 1, 511, 1 << 62, usize::MAX] {
        for vmm in [true, false] {
            let name = format!("allocator over SimBackend::new({total}, {vmm})");
            let r = s.call_bounded(&name, move || -> Result<(), String> {
                let a = match sim(total, vmm, Config::default()) {
                    Ok(a) => a,
                    Err(Error::Backend(_)) => return Ok(()),
                    Err(e) => return Err(format!("new: {e}")),
                };
                for bytes in [1usize, 2 << 20, 1 << 40, usize::MAX / 2, usize::MAX] {
                    match a.alloc(bytes, 0) {
                        Ok(x) => a.free(x).map_err(|e| format!("free: {e}"))?,
                        Err(Error::OutOfMemory { .. } | Error::TooLarge { .. }) => {}
                        Err(e) => return Err(format!("alloc({bytes}): {e}")),
                    }
                }
                a.set_memory_fraction(1e-300).map_err(|e| e.to_string())?;
                match a.alloc(1, 0) {
                    Ok(x) => a.free(x).map_err(|e| e.to_string())?,
                    Err(Error::OutOfMemory { .. } | Error::TooLarge { .. }) => {}
                    Err(e) => return Err(format!("alloc under a tiny fraction: {e}")),
                }
                let _ = a.stats().summary("x");
                let _ = a.snapshot().to_json();
                a.check_invariants()
            });
            if let Some(Err(e)) = r {
                s.failures.push(format!("{name}: {e}"));
            }
        }
    }
    for rate in [f64::NAN, -1.0, 2.0, f64::INFINITY] {
        let name = format!("SimBackend::inject_faults({rate})");
        let r = s.call_bounded(&name, move || -> Result<(), String> {
            let mut b = SimBackend::new(1 << 30, true);
            b.inject_faults(
                rate,
                &[FaultPoint::Alloc, FaultPoint::Map, FaultPoint::Reserve],
                7,
            );
            let a = CachingAllocator::new(b, Config::default()).map_err(|e| e.to_string())?;
            for _ in 0..32 {
                if let Ok(x) = a.alloc(3 << 20, 0) {
                    a.free(x).map_err(|e| e.to_string())?;
                }
            }
            a.check_invariants()
        });
        if let Some(Err(e)) = r {
            s.failures.push(format!("{name}: {e}"));
        }
    }
    s.expect(
        "fail_next_allocs(u32::MAX)",
        || {
            let mut b = SimBackend::new(1 << 30, false);
            b.fail_next_allocs(u32::MAX);
            let a = CachingAllocator::new(b, Config::default())?;
            a.alloc(1, 0).map(|x| a.free(x))
        },
        |r| matches!(r, Err(Error::OutOfMemory { .. })),
    );
    for b in [0, 1, usize::MAX] {
        s.expect(&format!("Pool::of({b})"), || Pool::of(b), |_| true);
    }
    for b in [i64::MIN, -1, 0, i64::MAX] {
        s.expect(
            &format!("stats::human({b})"),
            || genesis_mem::stats::human(b),
            |t| !t.is_empty(),
        );
    }
    s.expect("History::new(0)", || History::new(0).summary(), |_| true);
    s.expect(
        "History::new(usize::MAX)",
        || History::new(usize::MAX).timeline_svg(),
        |_| true,
    );
    s.expect(
        "timeline_svg of NaN and infinite points",
        || {
            genesis_mem::history::timeline_svg(
                vec![
                    (f64::NAN, f64::INFINITY, -1.0),
                    (f64::NEG_INFINITY, 0.0, f64::NAN),
                ],
                vec![(f64::NAN, usize::MAX, String::new()); 20],
                "",
            )
        },
        |t| t.starts_with("<svg"),
    );
    s.expect(
        "timeline_svg of nothing",
        || genesis_mem::history::timeline_svg(Vec::new(), Vec::new(), "x"),
        |t| t.starts_with("<svg"),
    );
    s.finish();
}

#[test]
fn traces_and_replay() {
    let mut s = Sweep::default();
    for text in [
        "a",
        "a 1",
        "a x 10",
        "a 1 -5",
        "a 1 99999999999999999999999",
        "a 1 10 stream",
        "f",
        "f -1",
        "z 1 2",
        "\u{feff}a 1 1",
    ] {
        s.expect(
            &format!("Trace::parse({text:?})"),
            || Trace::parse("t", "t.trace", text.as_bytes()),
            |r| r.is_err(),
        );
    }
    s.expect(
        "Trace::parse of invalid UTF-8",
        || Trace::parse("t", "t.trace", &[b'a', b' ', 0xff, 0xfe, b'\n'][..]),
        |r| r.is_err(),
    );
    let dir = std::env::temp_dir();
    let garbage_gz = dir.join(format!("genesis-bad-{}.trace.gz", std::process::id()));
    std::fs::write(&garbage_gz, b"not gzip at all").unwrap();
    for path in [
        dir.join("genesis-does-not-exist.trace"),
        dir.clone(),
        garbage_gz.clone(),
    ] {
        s.expect(
            &format!("Trace::read({})", path.display()),
            || Trace::read(&path),
            |r| r.is_err(),
        );
    }
    std::fs::remove_file(&garbage_gz).unwrap();

    let trace = |events: Vec<TraceEvent>| Trace {
        name: "t".into(),
        events,
        ..Trace::default()
    };
    let normal = trace(vec![
        TraceEvent::Alloc {
            id: 1,
            size: 1 << 20,
            stream: 0,
        },
        TraceEvent::Alloc {
            id: 2,
            size: 3000,
            stream: 1,
        },
        TraceEvent::Free { id: 1 },
        TraceEvent::Free { id: 9 },
        TraceEvent::Free { id: 2 },
    ]);
    // `--device-bytes` from 0 to absurd: a result or a typed error, promptly.
    for device in [
        0usize,
        1,
        1 << 20,
        1 << 62,
        (1 << 62) + 1,
        1 << 63,
        usize::MAX,
    ] {
        for vmm in [true, false] {
            let t = normal.clone();
            let name = format!("replay(device_bytes {device}, vmm {vmm})");
            let r = s.call_bounded(&name, move || {
                let config = Config {
                    use_vmm: vmm,
                    ..Config::default()
                };
                replay(&t, config, device).map(|r| r.to_json().len())
            });
            let ok = match &r {
                None => true, // recorded
                Some(Ok(_)) => device <= SimBackend::MAX_TOTAL,
                Some(Err(Error::Backend(_))) => device > SimBackend::MAX_TOTAL,
                Some(Err(Error::OutOfMemory { .. } | Error::TooLarge { .. })) => {
                    device <= SimBackend::MAX_TOTAL
                }
                Some(Err(_)) => false,
            };
            if !ok {
                s.failures.push(format!("{name}: unexpected {r:?}"));
            }
        }
    }
    // Sizes above the device, and a NaN fraction.
    let huge = trace(vec![TraceEvent::Alloc {
        id: 1,
        size: usize::MAX,
        stream: 0,
    }]);
    s.call_bounded("replay(alloc usize::MAX)", move || {
        replay(&huge, Config::default(), 1 << 30)
            .map(|_| ())
            .map_err(|e| assert!(matches!(e, Error::TooLarge { .. }), "{e}"))
    });
    let t = normal.clone();
    s.call_bounded("replay(memory_fraction NaN)", move || {
        let config = Config {
            memory_fraction: f64::NAN,
            ..Config::default()
        };
        let e = replay(&t, config, 1 << 30).unwrap_err();
        assert!(matches!(e, Error::InvalidFraction(_)), "{e}");
    });
    s.call_bounded("replay of an empty trace", move || {
        let r = replay(&Trace::default(), Config::default(), 1 << 30).unwrap();
        assert!(r.ratio.is_finite() && r.target_ratio().is_finite());
        let _ = (r.to_json(), r.meets_targets(), r.call_budget());
    });
    s.finish();
}

#[test]
fn configs_outside_their_range_are_refused_by_new() {
    let d = Config::default();
    let cases = [
        (
            "max_handle_bytes",
            Config {
                max_handle_bytes: 0,
                ..d.clone()
            },
        ),
        (
            "max_handle_bytes",
            Config {
                max_handle_bytes: 1,
                ..d.clone()
            },
        ),
        (
            "region_bytes",
            Config {
                region_bytes: 0,
                ..d.clone()
            },
        ),
        (
            "region_bytes",
            Config {
                region_bytes: (2 << 20) - 1,
                ..d.clone()
            },
        ),
        (
            "compact_threshold",
            Config {
                compact_threshold: Some(f64::NAN),
                ..d.clone()
            },
        ),
        (
            "compact_threshold",
            Config {
                compact_threshold: Some(-1.0),
                ..d.clone()
            },
        ),
        (
            "compact_threshold",
            Config {
                compact_threshold: Some(2.0),
                ..d.clone()
            },
        ),
        (
            "large_handle_pieces",
            Config {
                large_handle_pieces: 0,
                ..d.clone()
            },
        ),
        (
            "large_handle_pieces",
            Config {
                large_handle_pieces: 65,
                ..d.clone()
            },
        ),
        (
            "burst_headroom_div",
            Config {
                burst_headroom_div: 0,
                ..d.clone()
            },
        ),
    ];
    for (field, config) in cases {
        for vmm in [true, false] {
            match sim(1 << 30, vmm, config.clone()) {
                Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                Err(e) => panic!("{field}: {e}"),
                Ok(_) => panic!("{field}: accepted {config:?}"),
            }
        }
    }
    let edge = Config {
        compact_threshold: Some(1.0),
        region_bytes: 2 << 20,
        ..d
    };
    assert!(sim(1 << 30, true, edge).is_ok());
}
