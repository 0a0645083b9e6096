//! Trace replay on the corpus (`corpus/`, real PyTorch traces): peak live is exact, and the
//! allocator stays within a regression bound of its recorded results.

use std::path::Path;

use genesis_mem::Config;
use genesis_mem::trace::{Trace, TraceEvent, replay};

fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name)
}

fn peak_live(t: &Trace) -> u64 {
    let mut live = std::collections::HashMap::new();
    let (mut cur, mut peak) = (0u64, 0u64);
    for e in &t.events {
        match *e {
            TraceEvent::Alloc { id, size, .. } => {
                live.insert(id, size as u64);
                cur += size as u64;
                peak = peak.max(cur);
            }
            TraceEvent::Free { id } => cur -= live.remove(&id).unwrap_or(0),
        }
    }
    peak
}

#[test]
fn replays_the_shared_traces() {
    for (name, bound) in [
        ("resnet50_train", 1.10),
        ("gpt2_train", 1.12),
        ("gpt2_generate", 1.10),
    ] {
        let t = Trace::read(&data(&format!("{name}.trace.gz"))).unwrap();
        assert!(t.pytorch_segments().is_some());
        for vmm in [true, false] {
            let r = replay(
                &t,
                Config {
                    use_vmm: vmm,
                    record_sites: false,
                    ..Config::default()
                },
                141_000_000_000,
            )
            .unwrap();
            assert_eq!(r.peak_live_bytes, peak_live(&t), "{name}");
            assert!(
                r.ratio >= 1.0,
                "{name}: reserved below live is impossible: {}",
                r.ratio
            );
            assert!(
                r.ratio <= bound,
                "{name} vmm={vmm}: ratio {} regressed past {bound}",
                r.ratio
            );
            if vmm {
                // The targets, met by the default configuration on every shared trace:
                // peak reserved within 3% of peak live, at most 4 driver calls per segment
                // PyTorch made.
                let segments = r.pytorch_segments.unwrap();
                assert!(
                    r.ratio <= 1.03 && r.driver_calls <= 4 * segments,
                    "{name}: ratio {}, {} driver calls for {segments} PyTorch segments",
                    r.ratio,
                    r.driver_calls
                );
            }
            assert!(r.driver_calls > 0 && r.unknown_frees == 0);
            let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
            for k in [
                "trace",
                "peak_live_bytes",
                "peak_reserved_bytes",
                "ratio",
                "driver_calls",
                "ns_per_op",
            ] {
                assert!(json.get(k).is_some(), "{k}");
            }
        }
    }
}

#[test]
fn parses_unseen_and_malformed_traces() {
    let text = "# genesis-trace v1 workload=x\n# segment_allocs=3\na 1 100 0\na 2 5000 7\nf 1\nf 9\na 3 1\n";
    let t = Trace::parse("x", "x.trace", text.as_bytes()).unwrap();
    assert_eq!(t.events.len(), 5);
    assert_eq!(t.pytorch_segments(), Some(3));
    let r = replay(&t, Config::default(), 1 << 30).unwrap();
    assert_eq!(r.peak_live_bytes, 5100);
    assert_eq!(r.unknown_frees, 1);
    let bad = Trace::parse("y", "y.trace", "a 1 notanumber 0\n".as_bytes()).unwrap_err();
    assert!(bad.to_string().contains("y.trace:1"), "{bad}");
    let bad = Trace::parse("y", "y.trace", "x 1\n".as_bytes()).unwrap_err();
    assert!(bad.to_string().contains("unknown event"));
}
