//! A `Drop` that fails records its error on the context, and the next fallible call returns it.
//! In its own test binary: recording an error on the shared primary context would make any test
//! running beside it in the same process fail.
#![cfg(feature = "cuda")]

use genesis_cuda::{Context, DeviceBuffer, Error, skip_without_gpu};

#[test]
fn deferred_errors_surface_once() {
    if skip_without_gpu("deferred_errors_surface_once") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let keep = DeviceBuffer::alloc(&ctx, 16).unwrap(); // keeps this context alive for the test
    ctx.record_error(Error::Driver {
        call: "cuMemFree",
        code: 700,
    });
    let e = ctx.bind().unwrap_err();
    assert_eq!(e.driver_code(), Some(700));
    assert!(matches!(e, Error::Deferred(_)), "{e}");
    ctx.bind().unwrap();
    drop(keep);
}
