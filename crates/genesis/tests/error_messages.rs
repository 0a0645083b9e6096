//! The messages a new PyTorch user meets first: each names the operation called and says what
//! PyTorch says (or what to do), over several shapes, dtypes and devices.

use genesis::{DType, Error, LayoutError, Tensor};

mod common;
use common::{Release, devices};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::I64, DType::U8, DType::Bool];

fn layout_error(e: &Error) -> &LayoutError {
    match e {
        Error::Storage(genesis_storage::Error::Layout(l)) => l,
        e => panic!("not a layout error: {e:?}"),
    }
}

/// A reshape or view whose sizes cannot hold the elements says PyTorch's `shape '[-1, 3]' is
/// invalid for input of size 10`: the shape as given, with its -1, never an inferred one.
#[test]
fn reshape_to_sizes_that_do_not_fit_names_the_shape_as_given() {
    let _release = Release;
    let cases: [(&[usize], &[isize]); 10] = [
        (&[10], &[-1, 3]),
        (&[2, 5], &[-1, 3]),
        (&[2, 5], &[-1, 0]),
        (&[2, 5], &[2, 3]),
        (&[2, 5], &[0, -1]),
        (&[3, 4], &[-1, 5]),
        (&[3, 4], &[5, -1, 2]),
        (&[4, 6], &[-1, 7, 1]),
        (&[7], &[-1, 2]),
        (&[0, 3], &[2, 1]),
    ];
    for dev in devices() {
        for dtype in DTYPES {
            for (from, to) in cases {
                let x = Tensor::zeros(from, dtype, dev).unwrap();
                let n: usize = from.iter().product();
                let want = format!("shape '{to:?}' is invalid for input of size {n}");
                let strided = if from.len() == 2 {
                    x.transpose(0, 1).unwrap()
                } else {
                    x.clone()
                };
                for (op, r) in [
                    ("reshape", x.reshape(to)),
                    ("view", x.view(to)),
                    ("reshape of a transpose", strided.reshape(to)),
                ] {
                    let e = r.unwrap_err();
                    assert_eq!(e.to_string(), want, "{op} {dev} {dtype} {from:?} -> {to:?}");
                    assert_eq!(
                        layout_error(&e),
                        &LayoutError::ElementCount {
                            shape: to.to_vec(),
                            numel: n
                        }
                    );
                }
            }
            // A -1 among sizes of product 0 fits any size when there are no elements: PyTorch
            // calls it ambiguous; with other sizes it is inferred as 0.
            let empty = Tensor::zeros([0, 3], dtype, dev).unwrap();
            let e = empty.reshape([-1, 0]).unwrap_err();
            assert_eq!(
                e.to_string(),
                "cannot reshape tensor of 0 elements into shape '[-1, 0]' because the \
                 unspecified dimension size -1 can be any value and is ambiguous"
            );
            assert_eq!(empty.reshape([-1, 5]).unwrap().shape(), &[0, 5]);
            assert_eq!(empty.view([2, -1, 0]).unwrap_err().to_string(), {
                "cannot reshape tensor of 0 elements into shape '[2, -1, 0]' because the \
                 unspecified dimension size -1 can be any value and is ambiguous"
            });
            // The sizes that fit still work.
            let x = Tensor::zeros([2, 5], dtype, dev).unwrap();
            assert_eq!(x.reshape([-1, 5]).unwrap().shape(), &[2, 5]);
            assert_eq!(x.view([5, -1]).unwrap().shape(), &[5, 2]);
        }
    }
}

/// More than one -1 is the mistake named: PyTorch's `only one dimension can be inferred`; a
/// negative size other than -1 is PyTorch's `invalid shape dimension -2`.
#[test]
fn two_inferred_sizes_are_named_as_the_mistake() {
    let _release = Release;
    for dev in devices() {
        for dtype in DTYPES {
            for from in [&[12usize][..], &[3, 4], &[2, 3, 2], &[0, 4]] {
                let x = Tensor::zeros(from, dtype, dev).unwrap();
                for to in [
                    &[-1isize, -1][..],
                    &[-1, 2, -1],
                    &[2, -1, 3, -1],
                    &[-1, -1, -1],
                ] {
                    for r in [x.reshape(to), x.view(to)] {
                        let e = r.unwrap_err();
                        assert_eq!(
                            e.to_string(),
                            format!("only one dimension can be inferred (shape '{to:?}')"),
                            "{dev} {dtype} {from:?}"
                        );
                        assert_eq!(
                            layout_error(&e),
                            &LayoutError::MultipleInferred { shape: to.to_vec() }
                        );
                    }
                }
                for (to, size) in [(&[-2isize, 6][..], -2), (&[3, -1, -4], -4)] {
                    let e = x.reshape(to).unwrap_err();
                    assert_eq!(
                        e.to_string(),
                        format!("invalid shape dimension {size} in shape '{to:?}'")
                    );
                }
            }
        }
    }
}

/// The mean of an integer or bool tensor is refused (as PyTorch's) with the dtype and a hint:
/// convert first with `.to_dtype(DType::F32)`, which then works.
#[test]
fn mean_of_integers_suggests_a_float_dtype() {
    let _release = Release;
    for dev in devices() {
        for dtype in [
            DType::I64,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U8,
            DType::Bool,
        ] {
            for shape in [&[][..], &[3], &[2, 3], &[0, 2]] {
                let x = Tensor::zeros(shape, dtype, dev).unwrap();
                let dims: &[isize] = if shape.is_empty() { &[] } else { &[-1] };
                for e in [x.mean().unwrap_err(), x.mean_dim(dims, true).unwrap_err()] {
                    assert_eq!(
                        e,
                        Error::Storage(genesis_storage::Error::UnsupportedDType {
                            op: "mean",
                            dtype
                        })
                    );
                    assert_eq!(
                        e.to_string(),
                        format!(
                            "mean is not supported for dtype {dtype}: the input dtype must be a \
                             floating point dtype; convert it first, e.g. with \
                             `.to_dtype(DType::F32)`"
                        )
                    );
                }
                let m = x.to_dtype(DType::F32).unwrap().mean().unwrap();
                assert_eq!(m.dtype(), DType::F32);
            }
        }
        // Other refusals carry no hint.
        let b = Tensor::zeros([2], DType::Bool, dev).unwrap();
        assert_eq!(
            b.argmax().unwrap_err().to_string(),
            "argmax is not supported for dtype bool"
        );
    }
}
