//! Gives the C library a SONAME, so that a program (or a wrapper library) that links it by name
//! and a loader that opened it by path share one copy, and so one allocator per device.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgenesis_mem_capi.so");
    }
}
