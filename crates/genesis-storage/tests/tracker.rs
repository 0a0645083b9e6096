//! The storage tracker (its own test binary: the tracker is process-wide, and storages made by
//! other tests running beside it would show up in its scope).

use genesis_storage::{DType, Device, Storage, tracker};

#[test]
fn tracker_reports_leaks_with_sites() {
    tracker::enable(true);
    let scope = tracker::scope();
    let kept = Storage::zeros(100, DType::I64, Device::Cpu).unwrap();
    {
        let _temporary = Storage::from_slice(&[1u8, 2, 3], Device::Cpu).unwrap();
    }
    let leaks = scope.leaks();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!(leaks[0].nbytes, 800);
    assert!(
        leaks[0].site.file().ends_with("tracker.rs"),
        "{}",
        leaks[0].site
    );
    assert!(
        scope.report().contains("1 storage(s) leaked, 800 bytes"),
        "{}",
        scope.report()
    );
    assert!(tracker::live().iter().any(|t| t.id == leaks[0].id));
    drop(kept);
    assert!(scope.leaks().is_empty());
    assert_eq!(scope.report(), "no storage leaked");
    tracker::enable(false);
}
