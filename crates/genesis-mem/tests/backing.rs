//! `CachingAllocator::backing`: the handles or the segment under a live allocation, which a
//! process exporting the allocation hands to another.

use genesis_mem::{Backing, CachingAllocator, Config, SimBackend};
use rand::{Rng, SeedableRng};

const MIB: usize = 1 << 20;

fn check_covers(backing: &Backing, ptr: u64, size: usize) {
    match backing {
        Backing::Handles(hs) => {
            assert!(!hs.is_empty());
            assert!(
                hs[0].va <= ptr,
                "the first handle starts after the allocation"
            );
            for w in hs.windows(2) {
                assert_eq!(w[0].va + w[0].len as u64, w[1].va, "handles leave a gap");
            }
            let last = hs.last().unwrap();
            assert!(
                last.va + last.len as u64 >= ptr + size as u64,
                "handles end early"
            );
            // No handle lies wholly outside the allocation.
            for h in hs {
                assert!(h.va < ptr + size as u64 && h.va + h.len as u64 > ptr);
                assert_eq!(h.len % (2 * MIB), 0);
            }
        }
        Backing::Segment { base, len } => {
            assert!(*base <= ptr && ptr + size as u64 <= base + *len as u64);
        }
    }
}

#[test]
fn vmm_allocations_lie_on_adjacent_handles() {
    let alloc = CachingAllocator::new(SimBackend::new(64 << 30, true), Config::default()).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut live = Vec::new();
    let mut multi = 0;
    for step in 0..2000 {
        if live.len() > 40 || (!live.is_empty() && rng.random_bool(0.4)) {
            let i = rng.random_range(0..live.len());
            alloc.free(live.swap_remove(i)).unwrap();
        } else {
            let bytes = match rng.random_range(0..4) {
                0 => rng.random_range(1..64 << 10),
                1 => rng.random_range(1..8 * MIB),
                2 => rng.random_range(60 * MIB..200 * MIB),
                _ => rng.random_range(1..40 * MIB),
            };
            let stream = rng.random_range(0..2u64);
            live.push(alloc.alloc(bytes, stream).unwrap());
        }
        for a in &live {
            let b = alloc.backing(a).unwrap();
            check_covers(&b, a.ptr(), a.size());
            if let Backing::Handles(hs) = &b {
                multi += usize::from(hs.len() > 1);
            } else {
                panic!("a VMM allocator handed out a plain segment at step {step}");
            }
        }
    }
    assert!(
        multi > 0,
        "no allocation spanned several handles: the test saw too little"
    );
    for a in live {
        alloc.free(a).unwrap();
    }
}

#[test]
fn large_allocations_span_several_handles() {
    let alloc = CachingAllocator::new(SimBackend::new(8 << 30, true), Config::default()).unwrap();
    let a = alloc.alloc(100 * MIB, 0).unwrap();
    let Backing::Handles(hs) = alloc.backing(&a).unwrap() else {
        panic!("expected handles");
    };
    // Config::large_handle_pieces is 2: a large block grows the arena on two handles.
    assert_eq!(hs.len(), 2, "{hs:?}");
    assert_eq!(hs.iter().map(|h| h.len).sum::<usize>(), 100 * MIB);
    assert_eq!(hs[0].va, a.ptr());
    assert_ne!(hs[0].handle, hs[1].handle);
    alloc.free(a).unwrap();
}

#[test]
fn plain_allocations_name_their_segment() {
    let config = Config {
        use_vmm: false,
        ..Config::default()
    };
    let alloc = CachingAllocator::new(SimBackend::new(8 << 30, false), config).unwrap();
    let a = alloc.alloc(1000, 0).unwrap();
    let b = alloc.alloc(3000, 0).unwrap();
    let (ba, bb) = (alloc.backing(&a).unwrap(), alloc.backing(&b).unwrap());
    check_covers(&ba, a.ptr(), a.size());
    check_covers(&bb, b.ptr(), b.size());
    // Small requests share one 2 MiB segment.
    assert_eq!(ba, bb);
    assert_eq!(
        ba,
        Backing::Segment {
            base: a.ptr(),
            len: 2 * MIB
        }
    );
    let big = alloc.alloc(30 * MIB, 0).unwrap();
    assert_eq!(
        alloc.backing(&big).unwrap(),
        Backing::Segment {
            base: big.ptr(),
            len: 30 * MIB
        }
    );
    for x in [a, b, big] {
        alloc.free(x).unwrap();
    }
}

#[test]
fn an_allocation_of_another_allocator_is_refused() {
    let one = CachingAllocator::new(SimBackend::new(8 << 30, true), Config::default()).unwrap();
    let two = CachingAllocator::new(SimBackend::new(8 << 30, true), Config::default()).unwrap();
    let a = one.alloc(4096, 0).unwrap();
    assert!(matches!(
        two.backing(&a),
        Err(genesis_mem::Error::ForeignAllocation { .. })
    ));
    one.free(a).unwrap();
}
