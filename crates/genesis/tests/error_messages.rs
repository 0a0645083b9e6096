//! The messages a new PyTorch user meets first: each names the operation called and says what
//! PyTorch says (or what to do), over several shapes, dtypes and devices.

use genesis::{DType, ELLIPSIS, Error, IndexItem, LayoutError, NEW, Tensor, s};

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

/// Every error of `index_select` names `index_select`: a dimension out of range, a value out
/// of range (either path: the row copy of 16-byte rows, the general gather), an index of
/// another dtype, an index of more than one dimension.
#[test]
fn index_select_errors_name_index_select() {
    let _release = Release;
    for dev in devices() {
        // [4, 4] f32 rows are 16 bytes (the row copy); the others go through the gather.
        for shape in [&[4usize, 4][..], &[4, 3], &[2, 3, 4], &[5]] {
            for dtype in [DType::F32, DType::F64, DType::I64, DType::U8] {
                let x = Tensor::zeros(shape, dtype, dev).unwrap();
                let rank = shape.len() as isize;
                for idx_dtype in [DType::I64, DType::I32] {
                    let index = |v: &[i64]| {
                        Tensor::from_slice(v, [v.len()], dev)
                            .unwrap()
                            .to_dtype(idx_dtype)
                            .unwrap()
                    };
                    for dim in [rank, -rank - 1, 7] {
                        let e = x.index_select(dim, &index(&[0])).unwrap_err();
                        assert!(
                            matches!(
                                e,
                                Error::DimOutOfRange { op: "index_select", dim: d, rank: r }
                                    if d == dim as i64 && r == shape.len()
                            ),
                            "{e:?}"
                        );
                        assert!(
                            e.to_string().starts_with(&format!(
                                "index_select: dimension {dim} is out of range for a tensor of \
                                 {rank} dimension(s)"
                            )),
                            "{e}"
                        );
                    }
                    for dim in 0..shape.len() {
                        let size = shape[dim] as i64;
                        for bad in [size, -1, size + 100] {
                            let e = x.index_select(dim, &index(&[0, bad])).unwrap_err();
                            let msg = e.to_string();
                            assert!(
                                msg.starts_with(&format!("index_select: index {bad} ")),
                                "{dev} {dtype} {shape:?} dim {dim}: {msg}"
                            );
                            assert!(
                                msg.contains("position 1") && !msg.contains("gather"),
                                "{msg}"
                            );
                        }
                    }
                }
                for bad_dtype in [DType::F32, DType::I16, DType::U8, DType::Bool] {
                    let i = Tensor::zeros([2], bad_dtype, dev).unwrap();
                    assert_eq!(
                        x.index_select(0, &i).unwrap_err().to_string(),
                        format!("index_select: the index must be int64 or int32, not {bad_dtype}")
                    );
                }
                let i2 = Tensor::zeros([1, 2], DType::I64, dev).unwrap();
                let e = x.index_select(0, &i2).unwrap_err();
                assert!(matches!(
                    e,
                    Error::InvalidArgument {
                        op: "index_select",
                        ..
                    }
                ));
                assert_eq!(
                    e.to_string(),
                    "index_select: the index must be a vector (0-d or 1-D), got one of shape [1, 2]"
                );
            }
        }
    }
}

/// `item` with a Rust type that is not the tensor's dtype names `item` and both dtypes (so do
/// `to_vec`, `to_vec2` and `to_bool_vec`).
#[test]
fn item_of_another_type_names_item_and_the_dtypes() {
    let _release = Release;
    for dev in devices() {
        for shape in [&[][..], &[1], &[1, 1, 1]] {
            let of = |dtype| Tensor::zeros(shape, dtype, dev).unwrap();
            let checks: [(DType, DType, Error); 6] = [
                (
                    DType::F32,
                    DType::F64,
                    of(DType::F32).item::<f64>().unwrap_err(),
                ),
                (
                    DType::F64,
                    DType::F32,
                    of(DType::F64).item::<f32>().unwrap_err(),
                ),
                (
                    DType::I64,
                    DType::I32,
                    of(DType::I64).item::<i32>().unwrap_err(),
                ),
                (
                    DType::I32,
                    DType::I64,
                    of(DType::I32).item::<i64>().unwrap_err(),
                ),
                (
                    DType::Bool,
                    DType::U8,
                    of(DType::Bool).item::<u8>().unwrap_err(),
                ),
                (
                    DType::F16,
                    DType::Bool,
                    of(DType::F16).item::<bool>().unwrap_err(),
                ),
            ];
            for (holds, asked, e) in checks {
                assert_eq!(
                    e,
                    Error::WrongElementType {
                        op: "item",
                        dtype: holds,
                        requested: asked
                    }
                );
                assert_eq!(
                    e.to_string(),
                    format!("item: the tensor holds {holds}, not {asked}")
                );
            }
            assert_eq!(
                of(DType::F32).item::<f64>().unwrap_err().to_string(),
                "item: the tensor holds float32, not float64"
            );
            assert_eq!(of(DType::F32).item::<f32>().unwrap(), 0.0);
        }
        let m = Tensor::zeros([2, 2], DType::F32, dev).unwrap();
        assert_eq!(
            m.to_vec::<f64>().unwrap_err().to_string(),
            "to_vec: the tensor holds float32, not float64"
        );
        assert_eq!(
            m.to_vec2::<i64>().unwrap_err().to_string(),
            "to_vec2: the tensor holds float32, not int64"
        );
        assert_eq!(
            m.to_bool_vec().unwrap_err().to_string(),
            "to_bool_vec: the tensor holds float32, not bool"
        );
    }
}

/// Two shapes, their inner sizes, and the name of the second's inner dimension.
type Product = (
    &'static [usize],
    &'static [usize],
    usize,
    usize,
    &'static str,
);
/// A matrix product whose inner sizes differ says PyTorch's `mat1 and mat2 shapes cannot be
/// multiplied (3x4 and 3x4)` for two matrices, and both shapes and the inner sizes otherwise.
#[test]
fn matmul_mismatch_names_the_inner_sizes() {
    let _release = Release;
    for dev in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let z = |s: &[usize]| Tensor::zeros(s, dtype, dev).unwrap();
            for (a, b) in [
                ([3, 4], [3, 4]),
                ([2, 5], [4, 2]),
                ([1, 1], [2, 1]),
                ([0, 3], [2, 0]),
            ] {
                let e = z(&a).matmul(&z(&b)).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!(
                        "matmul: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
                        a[0], a[1], b[0], b[1]
                    )
                );
                assert_eq!(
                    e,
                    Error::InnerDimMismatch {
                        op: "matmul",
                        lhs: a.to_vec(),
                        rhs: b.to_vec(),
                        lhs_inner: a[1],
                        rhs_inner: b[0]
                    }
                );
            }
            let cases: [Product; 5] = [
                (&[2, 3, 4], &[2, 3, 4], 4, 3, "second-to-last dimension"),
                (&[5, 1, 2, 3], &[4, 2], 3, 4, "second-to-last dimension"),
                (&[3], &[4], 3, 4, "size"),
                (&[3], &[4, 2], 3, 4, "second-to-last dimension"),
                (&[2, 3, 4], &[5], 4, 5, "size"),
            ];
            for (a, b, ka, kb, which) in cases {
                let e = z(a).matmul(&z(b)).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!(
                        "matmul: shapes {a:?} and {b:?} cannot be multiplied: the last dimension \
                         of the first ({ka}) differs from the {which} of the second ({kb})"
                    )
                );
                assert!(
                    matches!(e, Error::InnerDimMismatch { lhs_inner, rhs_inner, .. }
                    if lhs_inner == ka && rhs_inner == kb)
                );
            }
            // Batch dimensions that do not broadcast stay a shape mismatch.
            let e = z(&[2, 3, 4]).matmul(&z(&[3, 4, 5])).unwrap_err();
            assert!(
                matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
                "{e:?}"
            );
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

/// `NEW` and `ELLIPSIS`, the bare words of `s!`, are items of the crate root too.
#[test]
fn new_and_ellipsis_are_importable_from_the_root() {
    let _release = Release;
    assert_eq!(NEW, IndexItem::NewAxis);
    assert_eq!(ELLIPSIS, IndexItem::Ellipsis);
    for dev in devices() {
        for dtype in DTYPES {
            for shape in [&[][..], &[3], &[2, 3], &[2, 0, 4]] {
                let x = Tensor::zeros(shape, dtype, dev).unwrap();
                let with = |items: &[IndexItem]| x.i(items).unwrap().shape().to_vec();
                let mut lead = vec![1];
                lead.extend_from_slice(shape);
                let mut trail = shape.to_vec();
                trail.push(1);
                assert_eq!(with(&[NEW, ELLIPSIS]), lead);
                assert_eq!(with(&[ELLIPSIS, NEW]), trail);
                assert_eq!(with(&[NEW]), lead);
                assert_eq!(with(&s![NEW, ELLIPSIS]), lead);
                if !shape.is_empty() && shape[0] > 0 {
                    let mut first = vec![1];
                    first.extend_from_slice(&shape[1..]);
                    assert_eq!(with(&[IndexItem::Int(0), NEW, ELLIPSIS]), first);
                }
            }
        }
    }
}
