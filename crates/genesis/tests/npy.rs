//! NumPy `.npy` / `.npz` files: round trips of every dtype over many shapes and views, the
//! fixtures NumPy wrote (`gen_npy_fixtures.py`: C and Fortran order, big-endian, 0-d, empty,
//! archives), and bad files, each of which is an error within a time limit.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};

use common::files::{TempDir, within};
use genesis::{
    DType, Device, Error, MAX_RANK, Tensor, f16, load_npy, load_npz, save_npy, save_npz,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/npy")
        .join(name)
}

/// The values of `t` as f64, for comparing tensors of any dtype.
fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

const DTYPES: [DType; 9] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::F32,
    DType::F64,
];

fn sample(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| (i % 7) as f64 - 2.0 * ((i % 3) as f64))
        .collect();
    Tensor::from_slice(&v, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

#[test]
fn every_dtype_and_shape_round_trips() {
    let dir = TempDir::new("round");
    let shapes: [&[usize]; 8] = [
        &[],
        &[0],
        &[0, 3],
        &[5],
        &[2, 3],
        &[2, 3, 4],
        &[1, 2, 3, 2],
        &[3, 0, 2],
    ];
    for dtype in DTYPES {
        for shape in shapes {
            let t = sample(shape, dtype);
            let path = dir.join("t.npy");
            save_npy(&t, &path).unwrap();
            let back = load_npy(&path, Device::Cpu).unwrap();
            assert_eq!(back.dtype(), dtype, "{dtype} {shape:?}");
            assert_eq!(back.shape(), shape, "{dtype} {shape:?}");
            assert_eq!(values(&back), values(&t), "{dtype} {shape:?}");
        }
    }
}

#[test]
fn views_are_written_in_their_logical_order() {
    let dir = TempDir::new("views");
    let t = sample(&[2, 3, 4], DType::F32);
    let views = [
        t.permute([2, 0, 1]).unwrap(),
        t.permute([1, 0, 2]).unwrap(),
        t.narrow(2, 1, 2).unwrap(),
    ];
    for v in views {
        assert!(!v.is_contiguous());
        let path = dir.join("v.npy");
        save_npy(&v, &path).unwrap();
        let back = load_npy(&path, Device::Cpu).unwrap();
        assert_eq!(back.shape(), v.shape());
        assert_eq!(values(&back), values(&v));
    }
}

#[test]
fn npz_round_trips_sorted_by_name() {
    let dir = TempDir::new("npz");
    let path = dir.join("a.npz");
    let tensors: Vec<(String, Tensor)> = DTYPES
        .iter()
        .enumerate()
        .map(|(i, &d)| (format!("t{}", 8 - i), sample(&[i % 3, 2], d)))
        .collect();
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    save_npz(&named, &path).unwrap();
    let back = load_npz(&path, Device::Cpu).unwrap();
    let mut want = tensors.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(back.len(), want.len());
    for ((n, t), (wn, wt)) in back.iter().zip(&want) {
        assert_eq!(n, wn);
        assert_eq!(t.dtype(), wt.dtype());
        assert_eq!(t.shape(), wt.shape());
        assert_eq!(values(t), values(wt));
    }
    let empty: [(&str, &Tensor); 0] = [];
    save_npz(&empty, &path).unwrap();
    assert!(load_npz(&path, Device::Cpu).unwrap().is_empty());
}

#[test]
fn bad_saves_are_errors() {
    let dir = TempDir::new("badsave");
    let b = sample(&[2], DType::BF16);
    let e = save_npy(&b, dir.join("b.npy")).unwrap_err().to_string();
    assert!(e.contains("convert"), "{e}");
    let e = save_npz(&[("b", &b)], dir.join("b.npz"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("convert"), "{e}");
    assert!(!dir.join("b.npz").exists());
    let t = sample(&[2], DType::F32);
    assert!(save_npz(&[("a", &t), ("a", &t)], dir.join("c.npz")).is_err());
    assert!(save_npz(&[("", &t)], dir.join("c.npz")).is_err());
    assert!(save_npy(&t, dir.join("missing/x.npy")).is_err());
}

#[test]
fn numpy_fixtures_load() {
    let load = |name: &str| load_npy(fixture(name), Device::Cpu).unwrap();
    let ints: Vec<f64> = (0..6).map(f64::from).collect();
    for name in ["c_i32.npy", "fortran_i32.npy"] {
        let t = load(name);
        assert_eq!((t.dtype(), t.shape()), (DType::I32, &[2, 3][..]), "{name}");
        assert_eq!(t.to_vec::<i32>().unwrap(), [0, 1, 2, 3, 4, 5], "{name}");
    }
    let t = load("big_i16_fortran.npy");
    assert_eq!((t.dtype(), t.shape()), (DType::I16, &[2, 3][..]));
    assert_eq!(values(&t), ints);
    let t = load("fortran_f64_3d.npy");
    assert_eq!(t.shape(), [2, 3, 4]);
    assert_eq!(
        t.to_vec::<f64>().unwrap(),
        (0..24).map(f64::from).collect::<Vec<_>>()
    );
    assert_eq!(
        load("big_f32.npy").to_vec::<f32>().unwrap(),
        [1.5, -2.0, 3.25]
    );
    let t = load("big_i64.npy");
    assert_eq!(t.shape(), [2, 2]);
    assert_eq!(t.to_vec::<i64>().unwrap(), [1, -2, 3, 1 << 40]);
    let t = load("bool.npy");
    assert_eq!(t.dtype(), DType::Bool);
    assert_eq!(values(&t), [1.0, 0.0, 1.0, 1.0]);
    assert_eq!(
        load("f16.npy").to_vec::<f16>().unwrap(),
        [0.5, -1.0, 65504.0, 0.0].map(f16::from_f32)
    );
    assert_eq!(load("u8.npy").to_vec::<u8>().unwrap(), [0, 1, 255]);
    assert_eq!(load("i8.npy").to_vec::<i8>().unwrap(), [-128, 0, 127]);
    let t = load("scalar_f64.npy");
    assert_eq!(t.shape(), [0usize; 0]);
    assert_eq!(t.to_vec::<f64>().unwrap(), [3.5]);
    let t = load("empty_f32.npy");
    assert_eq!((t.dtype(), t.shape()), (DType::F32, &[0, 3][..]));

    let a = load_npz(fixture("plain.npz"), Device::Cpu).unwrap();
    let names: Vec<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["b", "s", "w"]);
    assert_eq!(a[0].1.dtype(), DType::Bool);
    assert_eq!(values(&a[0].1), [1.0, 0.0]);
    assert_eq!(a[1].1.to_vec::<i64>().unwrap(), [7]);
    assert_eq!(a[2].1.to_vec::<i32>().unwrap(), [0, 1, 2, 3, 4, 5]);
    let a = load_npz(fixture("compressed.npz"), Device::Cpu).unwrap();
    assert_eq!(a[0].0, "x");
    assert_eq!(a[0].1.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(a[1].1.shape(), [2, 3]);
    assert_eq!(a[1].1.to_vec::<i32>().unwrap(), [0, 1, 2, 3, 4, 5]);
}

/// `load_npy` of `bytes` (written to a file) under the time limit: it must be an
/// `InvalidArgument` whose reason contains `needle` and names the path.
fn refused(bytes: &[u8], needle: &str) {
    let dir = TempDir::new("bad");
    let path = dir.join("bad.npy");
    std::fs::write(&path, bytes).unwrap();
    let p = path.clone();
    match within("load_npy", move || load_npy(&p, Device::Cpu)) {
        Err(Error::InvalidArgument { op, reason }) => {
            assert_eq!(op, "load_npy");
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            assert!(reason.contains(&path.display().to_string()), "{reason}");
        }
        Err(e) => {
            assert!(e.to_string().contains(needle), "{e} lacks {needle:?}")
        }
        Ok(t) => panic!("loaded {:?} {:?}, wanted an error", t.dtype(), t.shape()),
    }
}

/// A version-1 `.npy` file with header text `dict` and `data`.
fn npy_file(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut text = dict.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

#[test]
fn bad_npy_files_are_errors() {
    let good = std::fs::read(fixture("c_i32.npy")).unwrap();
    for n in 0..good.len() {
        refused(&good[..n], "");
    }
    let mut longer = good.clone();
    longer.push(0);
    refused(&longer, "needs 24 bytes of data, the file has 25");
    refused(
        &npy_file(&dict("<i4", "(9, 9)"), &[0; 24]),
        "needs 324 bytes",
    );
    refused(
        &npy_file(&dict("<i4", "(4294967296, 4294967296, 4294967296)"), &[]),
        "too large",
    );
    refused(
        &npy_file(&dict("<i4", "(0, 4294967296, 4294967296, 4294967296)"), &[]),
        "too large",
    );
    let deep = format!("({})", vec!["1"; MAX_RANK + 1].join(", "));
    refused(&npy_file(&dict("<i4", &deep), &[0; 4]), "");
    refused(&npy_file(&dict("<i4", "(-1,)"), &[]), "non-negative");
    refused(&npy_file(&dict("<x4", "(1,)"), &[0; 4]), "");
    refused(&npy_file(&dict("<u4", "(1,)"), &[0; 4]), "not supported");
    refused(&npy_file(&dict("<c8", "(1,)"), &[0; 8]), "not supported");
    refused(&npy_file(&dict("|b1", "(2,)"), &[1, 2]), "bool");
    refused(&npy_file("[1, 2, 3]", &[]), "not a Python dict");
    refused(&npy_file("{'descr': '<i4'", &[]), "Python literal");
    refused(&npy_file(&"(".repeat(5000), &[]), "nests");
    refused(
        &npy_file(&dict("<i4", "(1,)").replace("'shape'", "'shap'"), &[0; 4]),
        "shape",
    );
    let structured =
        "{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': False, 'shape': (1,), }";
    refused(&npy_file(structured, &[0; 12]), "structured");
    // Version 2 with a 4 GiB header length.
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    v2.extend_from_slice(&u32::MAX.to_le_bytes());
    v2.extend_from_slice(&[b' '; 64]);
    refused(&v2, "limit");
    let mut v9 = good.clone();
    v9[6] = 9;
    refused(&v9, "version");
    let object = std::fs::read(fixture("object.npy")).unwrap();
    refused(&object, "object");
    refused(&std::fs::read(fixture("u32.npy")).unwrap(), "not supported");
    refused(
        &std::fs::read(fixture("complex.npy")).unwrap(),
        "not supported",
    );
}

#[test]
fn bad_npz_files_are_errors() {
    let dir = TempDir::new("badnpz");
    let check = |path: PathBuf, needle: &'static str| {
        let shown = path.display().to_string();
        match within("load_npz", move || load_npz(&path, Device::Cpu)) {
            Err(e) => assert!(
                e.to_string().contains(needle),
                "{shown}: {e} lacks {needle:?}"
            ),
            Ok(v) => panic!("{shown}: loaded {} arrays, wanted an error", v.len()),
        }
    };
    check(fixture("not_npy_member.npz"), "not a .npy file");
    check(fixture("c_i32.npy"), "not a valid .npz");
    let good = std::fs::read(fixture("plain.npz")).unwrap();
    for n in (0..good.len()).step_by(7) {
        let path = dir.join(&format!("t{n}.npz"));
        std::fs::write(&path, &good[..n]).unwrap();
        check(path, "");
    }
    // A member whose .npy is bad is refused with the member named.
    let path = dir.join("bf.npz");
    let t = sample(&[3], DType::I32);
    save_npz(&[("x", &t)], &path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(5).position(|w| w == b"'<i4'").unwrap();
    bytes[at + 2] = b'x';
    std::fs::write(&path, &bytes).unwrap();
    check(path, "member \"x.npy\"");
}

#[cfg(unix)]
#[test]
fn what_is_not_a_regular_file_is_refused() {
    let dir = TempDir::new("irregular");
    let mut paths = vec![PathBuf::from("/dev/zero"), dir.join("sub")];
    std::fs::create_dir(dir.join("sub")).unwrap();
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if made {
        paths.push(fifo);
    }
    for path in paths {
        if !path.exists() {
            continue;
        }
        type Loader = fn(&Path) -> genesis::Result<()>;
        let loaders: [(&str, Loader); 2] = [
            ("load_npy", |p| load_npy(p, Device::Cpu).map(|_| ())),
            ("load_npz", |p| load_npz(p, Device::Cpu).map(|_| ())),
        ];
        for (name, load) in loaders {
            let p = path.clone();
            let r = within(name, move || load(&p));
            assert!(
                matches!(
                    r,
                    Err(Error::Storage(
                        genesis_storage::Error::NotRegularFile { .. }
                    ))
                ),
                "{name} {}: {r:?}",
                path.display()
            );
        }
    }
    let r = load_npy(dir.join("missing.npy"), Device::Cpu);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
}
