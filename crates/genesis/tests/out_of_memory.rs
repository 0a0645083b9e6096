//! Running out of memory is one error, `Error::OutOfMemory`, whichever layer found it: the
//! host allocator, the device pool (through storage or through indexing), or the driver.

use genesis::{DType, Error, Tensor, s};

mod common;
use common::{Release, devices};

#[test]
fn every_layer_reports_one_out_of_memory_error() {
    let _release = Release;
    for dev in devices() {
        // Far beyond any host or device: 2^40 f32.
        let huge = [1usize << 40];
        for e in [
            Tensor::empty(huge, DType::F32, dev).unwrap_err(),
            Tensor::zeros(huge, DType::F32, dev).unwrap_err(),
            Tensor::full(huge, 1.0f32, dev).unwrap_err(),
        ] {
            assert!(e.is_out_of_memory(), "{dev}: {e:?}");
            assert!(matches!(e, Error::OutOfMemory(_)), "{dev}: {e:?}");
        }
        // Materialising a broadcast view, and an elementwise result, of that size.
        let one = Tensor::zeros([1], DType::F32, dev).unwrap();
        let wide = one.expand([1 << 20, 1 << 20]).unwrap();
        for e in [
            wide.contiguous().unwrap_err(),
            wide.add(&wide).unwrap_err(),
            (&wide + 1.0).unwrap_err(),
        ] {
            assert!(e.is_out_of_memory(), "{dev}: {e:?}");
        }
        // Through indexing: gathering every row of the broadcast view.
        let rows = Tensor::zeros([1 << 20], DType::I64, dev).unwrap();
        let e = wide.i(&s![@&rows]).map(|_| ()).unwrap_err();
        assert!(e.is_out_of_memory(), "{dev}: {e:?}");
        // Other errors are not.
        let e = one.view([2]).unwrap_err();
        assert!(!e.is_out_of_memory(), "{e:?}");
    }
}
