//! `genesis::cuda`: the current device, device properties, streams, events and their scopes.

use genesis::Device;

#[test]
fn current_device_and_device_strings() {
    assert_eq!(genesis::cuda::current_device(), 0);
    assert_eq!(genesis::cuda::current(), Device::Cuda(0));
    let count = genesis::cuda::device_count();
    assert!(
        genesis::cuda::set_device(count).is_err(),
        "device {count} does not exist"
    );
    assert!(genesis::cuda::with_device(count, || ()).is_err());
    assert_eq!(
        genesis::cuda::current_device(),
        0,
        "a refused set_device changes nothing"
    );
    if count > 0 {
        let inside = genesis::cuda::with_device(count - 1, || {
            (
                "cuda".parse::<Device>().unwrap(),
                genesis::cuda::current_device(),
            )
        })
        .unwrap();
        assert_eq!(inside, (Device::Cuda(count - 1), count - 1));
        assert_eq!(
            genesis::cuda::current_device(),
            0,
            "restored after the scope"
        );
    }
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::*;
    use genesis::cuda::{Event, Stream, StreamGuard, with_stream};
    use genesis::{DType, Tensor};

    /// Gives cached device memory back when a test ends (compute-sanitizer's leak check).
    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            genesis::cuda::empty_cache().unwrap();
        }
    }

    fn gpu() -> bool {
        if !genesis::cuda::is_available() {
            eprintln!("CUDA part skipped: no CUDA device found");
        }
        genesis::cuda::is_available()
    }

    #[test]
    fn device_properties() {
        if !gpu() {
            return;
        }
        let p = genesis::cuda::get_device_properties(0).unwrap();
        assert_eq!(p.name, genesis::cuda::get_device_name(0).unwrap());
        assert_eq!(
            (p.major, p.minor),
            genesis::cuda::get_device_capability(0).unwrap()
        );
        assert!(
            p.total_memory > 1 << 30 && p.multi_processor_count > 0,
            "{p:?}"
        );
        assert!(genesis::cuda::get_device_properties(genesis::cuda::device_count()).is_err());
    }

    #[test]
    fn work_in_a_stream_scope_runs_on_the_stream_and_gives_the_same_results() {
        if !gpu() {
            return;
        }
        let _release = Release;
        let dev = Device::Cuda(0);
        let g = genesis::Generator::new(1);
        let x = g.rand([1 << 20], DType::F32, dev).unwrap();
        let want = (((&x * 2.0).unwrap() + 1.0).unwrap())
            .sum()
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let s = Stream::new(0).unwrap();
        assert_ne!(s.id(), 0);
        assert_eq!(
            Stream::current(0).unwrap().id(),
            0,
            "the default stream outside a scope"
        );
        let (got, inner_id, snapshot) = with_stream(&s, || {
            let y = ((&x * 2.0).unwrap() + 1.0).unwrap();
            let total = y.sum().unwrap();
            let snap = genesis::cuda::memory_snapshot(0).unwrap();
            (
                total.to_vec::<f32>().unwrap(),
                Stream::current(0).unwrap().id(),
                snap,
            )
        });
        assert_eq!(got, want);
        assert_eq!(inner_id, s.id());
        assert_eq!(
            Stream::current(0).unwrap().id(),
            0,
            "restored after the scope"
        );
        // Memory allocated in the scope belongs to the stream in the pool.
        assert!(
            snapshot.segments.iter().any(|seg| seg.stream == s.id()),
            "no segment of the stream in the snapshot"
        );
        s.synchronize().unwrap();
        assert!(s.query().unwrap());
    }

    #[test]
    fn streams_order_through_events_and_wait_stream() {
        if !gpu() {
            return;
        }
        let _release = Release;
        let dev = Device::Cuda(0);
        let (s1, s2) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
        let start = Event::new(0, true).unwrap();
        let end = Event::new(0, true).unwrap();
        let n = 1 << 22;
        // s1 produces, s2 consumes after waiting for s1.
        let a = {
            let _g = StreamGuard::new(&s1);
            start.record(&s1).unwrap();
            let a = Tensor::zeros([n], DType::F32, dev).unwrap();
            for _ in 0..20 {
                a.add_(&Tensor::ones([n], DType::F32, dev).unwrap())
                    .unwrap();
            }
            end.record(&s1).unwrap();
            a
        };
        s2.wait_stream(&s1).unwrap();
        let total = with_stream(&s2, || a.sum().unwrap());
        s2.synchronize().unwrap();
        end.synchronize().unwrap();
        assert!(end.query().unwrap());
        assert!(end.elapsed_ms(&start).unwrap() > 0.0);
        assert_eq!(total.to_vec::<f32>().unwrap(), [20.0 * n as f32]);
        // Work from several threads, each on its own stream, all correct.
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let s = Stream::new(0).unwrap();
                    with_stream(&s, || {
                        let mut acc = 0.0f64;
                        for i in 0..10 {
                            let v = Tensor::full([4096], (t * 100 + i) as f32, Device::Cuda(0))
                                .unwrap();
                            acc += f64::from(v.sum().unwrap().to_vec::<f32>().unwrap()[0]);
                        }
                        acc
                    })
                })
            })
            .collect();
        for (t, h) in handles.into_iter().enumerate() {
            let want: f64 = (0..10).map(|i| 4096.0 * (t * 100 + i) as f64).sum();
            assert_eq!(h.join().unwrap(), want);
        }
        // The default stream as a guard target, and a dropped stream with queued work.
        let d = Stream::default_stream(0).unwrap();
        with_stream(&d, || assert_eq!(Stream::current(0).unwrap().id(), 0));
        let s3 = Stream::new(0).unwrap();
        let keep = with_stream(&s3, || {
            Tensor::ones([n], DType::F32, dev).unwrap().exp().unwrap()
        });
        drop(s3);
        assert_eq!(
            keep.max().unwrap().to_vec::<f32>().unwrap(),
            [std::f32::consts::E]
        );
    }
}
