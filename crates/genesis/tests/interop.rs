//! Interop: safetensors files and bytes (every dtype, odd shapes, views, files written by hand
//! as other tools write them, corrupt input), and ndarray conversion (feature `ndarray`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use genesis::{
    DType, Device, Error, Tensor, bf16, deserialize_safetensors,
    deserialize_safetensors_with_metadata, f16, load_safetensors, load_safetensors_map,
    load_safetensors_with_metadata, save_safetensors, save_safetensors_with_metadata,
    serialize_safetensors,
};

mod common;
use common::{Release, devices};

/// A unique path in the temp directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> TempFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TempFile(std::env::temp_dir().join(format!(
            "genesis-interop-{}-{tag}-{n}.safetensors",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const SHAPES: [&[usize]; 5] = [&[], &[0, 3], &[7], &[2, 3, 5], &[1, 4, 1, 3]];

/// `n` values of `dtype` exercising its edges (extremes, -0.0, infinities, NaN).
fn sample(dtype: DType, shape: &[usize], seed: usize, dev: Device) -> Tensor {
    let n: usize = shape.iter().product();
    let pick = |i: usize, xs: &[f64]| xs[(i + seed) % xs.len()];
    let floats = [
        1.5,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        -3.25,
        1e-3,
        65504.0,
        -7.0,
    ];
    let t = match dtype {
        DType::Bool => {
            let v: Vec<bool> = (0..n).map(|i| (i + seed).is_multiple_of(3)).collect();
            return Tensor::from_bools(&v, shape, dev).unwrap();
        }
        DType::U8 => {
            let v: Vec<u8> = (0..n).map(|i| (i * 37 + seed) as u8).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::I8 => {
            let v: Vec<i8> = (0..n)
                .map(|i| [i8::MIN, -1, 0, 5, i8::MAX][(i + seed) % 5])
                .collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::I16 => {
            let v: Vec<i16> = (0..n)
                .map(|i| [i16::MIN, -300, 0, 7, i16::MAX][(i + seed) % 5])
                .collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::I32 => {
            let v: Vec<i32> = (0..n)
                .map(|i| [i32::MIN, -70_000, 0, 9, i32::MAX][(i + seed) % 5])
                .collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::I64 => {
            let v: Vec<i64> = (0..n)
                .map(|i| [i64::MIN, -1 << 40, 0, (1 << 53) + 1, i64::MAX][(i + seed) % 5])
                .collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::F16 => {
            let v: Vec<f16> = (0..n).map(|i| f16::from_f64(pick(i, &floats))).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::BF16 => {
            let v: Vec<bf16> = (0..n).map(|i| bf16::from_f64(pick(i, &floats))).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::F32 => {
            let v: Vec<f32> = (0..n).map(|i| pick(i, &floats) as f32).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        DType::F64 => {
            let v: Vec<f64> = (0..n).map(|i| pick(i, &floats) + 1e-12).collect();
            Tensor::from_slice(&v, shape, dev)
        }
    };
    t.unwrap()
}

/// The elements' bit patterns (exact, NaN included).
fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::Bool => t
            .to_bool_vec()
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect(),
        DType::I8 => t
            .to_vec::<i8>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::I16 => t
            .to_vec::<i16>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .into_iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .into_iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect(),
    }
}

fn assert_same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}");
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert_eq!(bits(got), bits(want), "{what}");
}

fn invalid_reason(e: Error) -> String {
    match e {
        Error::InvalidArgument { reason, .. } => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Every dtype in every shape, named `"{dtype}/{shape index}"`.
fn zoo(dev: Device) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for (d, &dtype) in DType::ALL.iter().enumerate() {
        for (s, shape) in SHAPES.iter().enumerate() {
            out.push((format!("{dtype}/{s}"), sample(dtype, shape, d + s, dev)));
        }
    }
    out
}

fn refs(named: &[(String, Tensor)]) -> Vec<(&str, &Tensor)> {
    named.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

#[test]
fn every_dtype_and_shape_round_trips_through_a_file() {
    let _release = Release;
    for dev in devices() {
        let tensors = zoo(dev);
        let file = TempFile::new("zoo");
        save_safetensors(&refs(&tensors), file.path()).unwrap();

        let loaded = load_safetensors(file.path(), dev).unwrap();
        let mut want = tensors.clone();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(loaded.len(), want.len());
        for ((name, got), (want_name, want)) in loaded.iter().zip(&want) {
            assert_eq!(name, want_name, "sorted by name on {dev}");
            assert_eq!(got.device(), dev);
            assert_same(got, want, &format!("{name} on {dev}"));
        }

        // Onto the CPU, and as a map.
        let map = load_safetensors_map(file.path(), Device::Cpu).unwrap();
        assert_eq!(map.len(), tensors.len());
        for (name, t) in &tensors {
            assert_eq!(map[name].device(), Device::Cpu);
            assert_same(&map[name], t, &format!("{name} from {dev} to cpu"));
        }

        // Saving again replaces the file.
        let one = sample(DType::F32, &[2], 0, dev);
        save_safetensors(&[("only", &one)], file.path()).unwrap();
        let loaded = load_safetensors(file.path(), dev).unwrap();
        assert_eq!(loaded.len(), 1);
        assert_same(&loaded[0].1, &one, "overwritten");
    }
}

#[test]
fn every_dtype_and_shape_round_trips_through_bytes() {
    let _release = Release;
    for dev in devices() {
        let tensors = zoo(dev);
        let bytes = serialize_safetensors(&refs(&tensors), None).unwrap();
        let loaded = deserialize_safetensors(&bytes, dev).unwrap();
        assert_eq!(loaded.len(), tensors.len());
        let by_name: HashMap<_, _> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
        for w in loaded.windows(2) {
            assert!(w[0].0 < w[1].0, "sorted by name");
        }
        for (name, got) in &loaded {
            assert_same(got, by_name[name], &format!("{name} on {dev}"));
        }
        // The bytes and the file are the same thing.
        let file = TempFile::new("bytes");
        save_safetensors(&refs(&tensors), file.path()).unwrap();
        assert_eq!(std::fs::read(file.path()).unwrap(), bytes);
    }
}

#[test]
fn metadata_round_trips() {
    let _release = Release;
    let meta: HashMap<String, String> = [("format", "pt"), ("step", "1000"), ("note", "ünï \"q\"")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for dev in devices() {
        let t = sample(DType::BF16, &[3, 2], 1, dev);
        let file = TempFile::new("meta");
        save_safetensors_with_metadata(&[("t", &t)], &meta, file.path()).unwrap();
        let (loaded, got) = load_safetensors_with_metadata(file.path(), dev).unwrap();
        assert_eq!(got, meta);
        assert_same(&loaded[0].1, &t, "with metadata");

        let bytes = serialize_safetensors(&[("t", &t)], Some(&meta)).unwrap();
        let (loaded, got) = deserialize_safetensors_with_metadata(&bytes, dev).unwrap();
        assert_eq!(got, meta);
        assert_same(&loaded[0].1, &t, "with metadata, bytes");

        // None when the file has none.
        let bytes = serialize_safetensors(&[("t", &t)], None).unwrap();
        let (_, got) = deserialize_safetensors_with_metadata(&bytes, dev).unwrap();
        assert!(got.is_empty());
    }
}

#[test]
fn views_are_saved_as_their_values() {
    let _release = Release;
    for dev in devices() {
        let base = Tensor::arange(0.0, 24.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape([4, 6])
            .unwrap();
        let transposed = base.t().unwrap();
        assert!(!transposed.is_contiguous());
        // Contiguous but at an offset into a larger storage.
        let rows = base.narrow(0, 1, 2).unwrap();
        assert!(rows.is_contiguous() && rows.layout().offset() > 0);
        // Strided along the last dimension.
        let cols = base.narrow(1, 2, 3).unwrap();
        let expanded = Tensor::from_slice(&[1i16, 2, 3], [3], dev)
            .unwrap()
            .expand([2, 3])
            .unwrap();
        let permuted = Tensor::arange(0.0, 24.0, 1.0, DType::I64, dev)
            .unwrap()
            .reshape([2, 3, 4])
            .unwrap()
            .permute([2, 0, 1])
            .unwrap();
        let views = [
            ("transposed", &transposed),
            ("rows", &rows),
            ("cols", &cols),
            ("expanded", &expanded),
            ("permuted", &permuted),
        ];
        let file = TempFile::new("views");
        save_safetensors(&views, file.path()).unwrap();
        let loaded = load_safetensors_map(file.path(), dev).unwrap();
        let bytes = serialize_safetensors(&views, None).unwrap();
        let from_bytes = deserialize_safetensors(&bytes, dev).unwrap();
        for (name, view) in views {
            let want = view.contiguous().unwrap();
            assert_same(&loaded[name], &want, &format!("{name} on {dev}"));
            let got = &from_bytes.iter().find(|(n, _)| n == name).unwrap().1;
            assert_same(got, &want, &format!("{name} (bytes) on {dev}"));
        }
        assert_eq!(
            loaded["transposed"].to_vec::<f32>().unwrap()[..6],
            [0.0, 6.0, 12.0, 18.0, 1.0, 7.0]
        );
        assert_eq!(loaded["rows"].to_vec::<f32>().unwrap()[0], 6.0);
        assert_eq!(
            loaded["expanded"].to_vec::<i16>().unwrap(),
            [1, 2, 3, 1, 2, 3]
        );
    }
}

/// A safetensors file built by hand from the format's definition: 8-byte little-endian header
/// length, the JSON header, the data.
fn hand_built(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn files_written_by_other_tools_load() {
    let _release = Release;
    // As PyTorch's `safetensors.torch.save_file` lays it out: keys in any order, metadata
    // first, the header padded with spaces to a multiple of 8.
    let mut data = Vec::new();
    for x in [1.0f32, -2.5, 3.0, 4.25] {
        data.extend_from_slice(&x.to_le_bytes()); // w: 0..16
    }
    for x in [-1i64, 1 << 40, 7] {
        data.extend_from_slice(&x.to_le_bytes()); // ids: 16..40
    }
    data.extend_from_slice(&bf16::from_f32(-0.5).to_bits().to_le_bytes()); // s: 40..42
    data.extend_from_slice(&[1, 0, 1]); // mask: 42..45
    let header = r#"{"mask":{"dtype":"BOOL","shape":[3],"data_offsets":[42,45]},"__metadata__":{"format":"pt"},"ids":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"s":{"dtype":"BF16","shape":[],"data_offsets":[40,42]},"e":{"dtype":"F16","shape":[0,3],"data_offsets":[45,45]}}"#;
    let header = format!("{header:<width$}", width = header.len().next_multiple_of(8));
    let file_bytes = hand_built(&header, &data);
    let file = TempFile::new("hand");
    std::fs::write(file.path(), &file_bytes).unwrap();

    for dev in devices() {
        let (tensors, meta) = load_safetensors_with_metadata(file.path(), dev).unwrap();
        let names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["e", "ids", "mask", "s", "w"]);
        assert_eq!(meta.get("format").map(String::as_str), Some("pt"));
        let t: HashMap<_, _> = tensors.into_iter().collect();
        assert_eq!(t["w"].shape(), [2, 2]);
        assert_eq!(t["w"].to_vec::<f32>().unwrap(), [1.0, -2.5, 3.0, 4.25]);
        assert_eq!(t["ids"].to_vec::<i64>().unwrap(), [-1, 1 << 40, 7]);
        assert_eq!(t["s"].shape(), [0usize; 0]);
        assert_eq!(t["s"].to_vec::<bf16>().unwrap(), [bf16::from_f32(-0.5)]);
        assert_eq!(t["mask"].to_bool_vec().unwrap(), [true, false, true]);
        assert_eq!(t["e"].shape(), [0, 3]);
        assert_eq!(t["e"].dtype(), DType::F16);
        assert_eq!(t["w"].device(), dev);
    }

    // A file without metadata or padding, with one tensor: the smallest case.
    let one = hand_built(
        r#"{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
        &[200, 3],
    );
    let x = deserialize_safetensors(&one, Device::Cpu).unwrap();
    assert_eq!(x[0].1.to_vec::<u8>().unwrap(), [200, 3]);
    // And a file with no tensors at all.
    assert!(
        deserialize_safetensors(&hand_built("{}", &[]), Device::Cpu)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn unsupported_dtypes_are_errors_naming_the_tensor() {
    for (dtype, bytes) in [
        ("F8_E4M3", 1),
        ("U16", 2),
        ("U32", 4),
        ("U64", 8),
        ("C64", 8),
    ] {
        let header = format!(
            r#"{{"layer.q":{{"dtype":"{dtype}","shape":[2],"data_offsets":[0,{}]}}}}"#,
            2 * bytes
        );
        let file = hand_built(&header, &vec![0u8; 2 * bytes]);
        let reason = invalid_reason(deserialize_safetensors(&file, Device::Cpu).unwrap_err());
        assert!(
            reason.contains("layer.q") && reason.contains(dtype),
            "{reason}"
        );
    }
    // A dtype the format itself does not know.
    let file = hand_built(
        r#"{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#,
        &[0; 16],
    );
    assert!(deserialize_safetensors(&file, Device::Cpu).is_err());
}

#[test]
fn corrupt_input_is_an_error_not_a_panic() {
    let t = sample(DType::F32, &[3, 4], 0, Device::Cpu);
    let m = sample(DType::Bool, &[5], 0, Device::Cpu);
    let good = serialize_safetensors(&[("t", &t), ("m", &m)], None).unwrap();
    assert!(deserialize_safetensors(&good, Device::Cpu).is_ok());

    // Every truncation, and one byte too many.
    for len in 0..good.len() {
        assert!(
            deserialize_safetensors(&good[..len], Device::Cpu).is_err(),
            "truncated to {len} bytes"
        );
    }
    let mut long = good.clone();
    long.push(0);
    assert!(deserialize_safetensors(&long, Device::Cpu).is_err());

    // Every single-byte corruption of the header and length loads or fails, never panics.
    let header_end = 8 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    for i in 0..header_end {
        for v in [0u8, b'9', b'"', b'}', 0xff] {
            let mut bad = good.clone();
            bad[i] = v;
            let _ = deserialize_safetensors(&bad, Device::Cpu);
        }
    }

    let cases: [(&str, Vec<u8>); 8] = [
        ("empty", vec![]),
        ("huge header length", u64::MAX.to_le_bytes().to_vec()),
        (
            "header past the end",
            hand_built("{}", &[]).into_iter().take(9).collect(),
        ),
        ("not JSON", hand_built("{not json", &[])),
        ("not UTF-8", [&1u64.to_le_bytes()[..], &[0xff]].concat()),
        (
            "offsets not matching the shape",
            hand_built(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "a shape whose size overflows",
            hand_built(
                r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}"#,
                &[],
            ),
        ),
        (
            "a bool byte that is not 0 or 1",
            hand_built(
                r#"{"flag":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#,
                &[1, 2],
            ),
        ),
    ];
    for (what, bytes) in cases {
        let e = deserialize_safetensors(&bytes, Device::Cpu).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{what}: {e:?}");
    }

    // A zero-sized dimension beside huge ones: no elements, but not addressable either.
    let bytes = hand_built(
        r#"{"a":{"dtype":"F32","shape":[0,9223372036854775807,9223372036854775807],"data_offsets":[0,0]}}"#,
        &[],
    );
    assert!(deserialize_safetensors(&bytes, Device::Cpu).is_err());

    // Through a file, the error names the path.
    let file = TempFile::new("corrupt");
    std::fs::write(file.path(), &good[..good.len() - 1]).unwrap();
    let reason = invalid_reason(load_safetensors(file.path(), Device::Cpu).unwrap_err());
    assert!(
        reason.contains(&file.path().display().to_string()),
        "{reason}"
    );
}

#[test]
fn io_and_naming_errors() {
    let missing = TempFile::new("missing");
    let reason = invalid_reason(load_safetensors(missing.path(), Device::Cpu).unwrap_err());
    assert!(
        reason.contains(&missing.path().display().to_string()),
        "{reason}"
    );

    let t = sample(DType::I32, &[2], 0, Device::Cpu);
    let nowhere = std::env::temp_dir()
        .join(format!(
            "genesis-interop-no-such-dir-{}",
            std::process::id()
        ))
        .join("x.safetensors");
    let reason = invalid_reason(save_safetensors(&[("t", &t)], &nowhere).unwrap_err());
    assert!(reason.contains("x.safetensors"), "{reason}");

    let reason = invalid_reason(serialize_safetensors(&[("t", &t), ("t", &t)], None).unwrap_err());
    assert!(reason.contains("\"t\""), "{reason}");
    assert!(serialize_safetensors(&[("__metadata__", &t)], None).is_err());
    // Nothing is written when the tensors are refused.
    let file = TempFile::new("refused");
    assert!(save_safetensors(&[("t", &t), ("t", &t)], file.path()).is_err());
    assert!(!file.path().exists());
}

#[cfg(feature = "ndarray")]
mod nd {
    use genesis::{DType, Device, Error, Tensor, bf16};
    use ndarray::{Array, ArrayD, IxDyn, array, s};

    use super::common::{Release, devices};

    #[test]
    fn round_trips() {
        let _release = Release;
        for dev in devices() {
            let a = Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as f32);
            let t = Tensor::from_ndarray(&a, dev).unwrap();
            assert_eq!(t.shape(), [2, 3, 4]);
            assert_eq!(t.dtype(), DType::F32);
            assert_eq!(t.device(), dev);
            assert_eq!(t.to_ndarray::<f32>().unwrap(), a.clone().into_dyn());

            let s0 = ndarray::arr0(7i64);
            let t = Tensor::from_ndarray(&s0, dev).unwrap();
            assert_eq!(t.shape(), [0usize; 0]);
            assert_eq!(t.to_ndarray::<i64>().unwrap(), s0.into_dyn());

            let e = ArrayD::<bf16>::from_elem(IxDyn(&[0, 3]), bf16::ZERO);
            let t = Tensor::from_ndarray(&e, dev).unwrap();
            assert_eq!(t.shape(), [0, 3]);
            assert_eq!(t.to_ndarray::<bf16>().unwrap(), e);

            // A Genesis view comes out with its logical values.
            let g = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6], [2, 3], dev).unwrap();
            assert_eq!(
                g.t().unwrap().to_ndarray::<u8>().unwrap(),
                array![[1u8, 4], [2, 5], [3, 6]].into_dyn()
            );
        }
    }

    #[test]
    fn non_standard_layouts_come_in_in_logical_order() {
        let _release = Release;
        for dev in devices() {
            let a = array![[1i32, 2, 3], [4, 5, 6]];
            let t = Tensor::from_ndarray(&a.t(), dev).unwrap();
            assert_eq!(t.shape(), [3, 2]);
            assert_eq!(t.to_vec::<i32>().unwrap(), [1, 4, 2, 5, 3, 6]);

            let strided = a.slice(s![.., ..;-2]);
            let t = Tensor::from_ndarray(&strided, dev).unwrap();
            assert_eq!(t.to_vec::<i32>().unwrap(), [3, 1, 6, 4]);

            let cube = Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 12 + j * 4 + k) as f64);
            let perm = cube.view().permuted_axes([2, 0, 1]);
            let t = Tensor::from_ndarray(&perm, dev).unwrap();
            assert_eq!(t.to_ndarray::<f64>().unwrap(), perm.to_owned().into_dyn());
        }
    }

    #[test]
    fn dtype_mismatch_is_an_error() {
        let t = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).unwrap();
        assert!(matches!(
            t.to_ndarray::<f64>(),
            Err(Error::WrongElementType {
                op: "to_ndarray",
                dtype: DType::F32,
                requested: DType::F64
            })
        ));
        let b = Tensor::from_bools(&[true], [1], Device::Cpu).unwrap();
        assert!(b.to_ndarray::<u8>().is_err());
    }
}
