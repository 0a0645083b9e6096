//! The runtime wrapper on a real GPU: shared primary contexts, drop order, deferred errors,
//! streams, events and copies. Each test skips when no CUDA device is present.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use genesis_cuda::{Context, DeviceBuffer, Error, Event, Stream, skip_without_gpu};

#[test]
fn primary_context_is_shared() {
    if skip_without_gpu("primary_context_is_shared") {
        return;
    }
    let a = Context::get(0).unwrap();
    let b = Context::get(0).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "one retained context per device");
    let (major, _) = a.compute_capability();
    assert!(major >= 8, "{}", a.arch());
    assert!(a.multiprocessors() > 0 && a.total_memory() > 0);
    let (free, total) = a.mem_info().unwrap();
    assert!(free <= total && total == a.total_memory(), "{free} {total}");
}

#[test]
fn buffers_keep_their_context_alive() {
    if skip_without_gpu("buffers_keep_their_context_alive") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let data: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    let buf = DeviceBuffer::from_host(&ctx, &data).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    drop(ctx); // the buffer and the stream still own the context
    let mut copy = DeviceBuffer::alloc(buf.context(), buf.len()).unwrap();
    copy.copy_from_device(&buf, &stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(copy.to_host_vec().unwrap(), data);
    drop(buf);
    drop(copy);
    drop(stream); // the last owner releases the context; nothing may fail
    let ctx = Context::get(0).unwrap();
    ctx.check_pending().unwrap();
}

#[test]
fn copies_check_lengths_and_events_time() {
    if skip_without_gpu("copies_check_lengths_and_events_time") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let mut buf = DeviceBuffer::alloc(&ctx, 64).unwrap();
    let e = buf.copy_from_host(&[0u8; 63]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let stream = Stream::new(&ctx).unwrap();
    let (start, end) = (
        Event::new(&ctx, true).unwrap(),
        Event::new(&ctx, true).unwrap(),
    );
    start.record(&stream).unwrap();
    buf.memset(0x7f, &stream).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete().unwrap() && stream.is_idle().unwrap());
    assert!(end.elapsed_ms(&start).unwrap() >= 0.0);
    assert_eq!(buf.to_host_vec().unwrap(), vec![0x7f; 64]);
    let empty = DeviceBuffer::alloc(&ctx, 0).unwrap();
    assert!(empty.is_empty() && empty.to_host_vec().unwrap().is_empty());
}

#[test]
fn out_of_memory_is_an_error_not_a_panic() {
    if skip_without_gpu("out_of_memory_is_an_error_not_a_panic") {
        return;
    }
    let ctx = Context::get(0).unwrap();
    let too_much = ctx.total_memory() * 4;
    let e = DeviceBuffer::alloc(&ctx, too_much).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    // The context is still usable afterwards.
    let b = DeviceBuffer::from_host(&ctx, &[1, 2, 3]).unwrap();
    assert_eq!(b.to_host_vec().unwrap(), vec![1, 2, 3]);
}
