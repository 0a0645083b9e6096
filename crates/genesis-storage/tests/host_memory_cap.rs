//! `set_host_memory_limit`: a cap below the machine's refuses larger host allocations before
//! touching memory, smaller ones still succeed, and removing the cap restores the machine's
//! limit. Its own test binary: the cap is process-wide.

use genesis_storage::{
    CpuStorage, Error, check_host_bytes, host_memory_limit, set_host_memory_limit,
};

#[test]
fn a_cap_refuses_larger_host_allocations_and_can_be_lifted() {
    let machine = host_memory_limit();
    let cap = 64 << 20;
    set_host_memory_limit(Some(cap));
    assert_eq!(
        host_memory_limit(),
        Some(machine.map_or(cap, |m| m.min(cap)))
    );
    assert!(matches!(
        CpuStorage::zeroed(cap + 1),
        Err(Error::HostOutOfMemory { bytes }) if bytes == cap + 1
    ));
    assert!(matches!(
        check_host_bytes(cap + 1),
        Err(Error::HostOutOfMemory { .. })
    ));
    assert!(CpuStorage::zeroed(cap).is_ok());
    assert!(CpuStorage::zeroed(1 << 20).is_ok());
    // A cap above the machine's limit leaves the machine's.
    set_host_memory_limit(Some(usize::MAX));
    assert_eq!(host_memory_limit(), Some(machine.unwrap_or(usize::MAX)));
    set_host_memory_limit(None);
    assert_eq!(host_memory_limit(), machine);
    assert!(CpuStorage::zeroed(cap + 1).is_ok());
}
