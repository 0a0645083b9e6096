//! Printing: `Display` is PyTorch's `repr`, character for character.
//!
//! `repr_matches_pytorch_fixture` checks every case of `tests/data/repr-cases.json`, which
//! `gen_repr_cases.py` writes with PyTorch (every dtype, ranks 0-4, empty, summarised, NaN and
//! infinities, negative values, views), on the CPU and, when a GPU is present and the fixture
//! has CUDA reprs, on CUDA device 0. The other tests hold strings PyTorch prints, written out
//! by hand, so that the printer is checked where the fixture has not been generated yet.

#[allow(dead_code)]
mod common;

use genesis::{DType, Device, PrintOptions, Tensor, tensor};

fn cpu() -> Device {
    Device::Cpu
}

/// The print options are the process's: the test that changes them runs alone.
static OPTIONS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    OPTIONS.read().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn floats_print_with_pytorch_precision_and_modes() {
    let _release = common::Release;
    let _shared = shared();
    let cases: Vec<(Tensor, &str)> = vec![
        (
            Tensor::arange(0.0, 1.0, 0.1, DType::F32, cpu()).unwrap(),
            "tensor([0.0000, 0.1000, 0.2000, 0.3000, 0.4000, 0.5000, 0.6000, 0.7000, 0.8000,\n        0.9000])",
        ),
        (tensor!(21.).unwrap(), "tensor(21.)"),
        (tensor!(-0.5).unwrap(), "tensor(-0.5000)"),
        (tensor!([-1., 2.]).unwrap(), "tensor([-1.,  2.])"),
        (tensor!([0.1, -0.25]).unwrap(), "tensor([ 0.1000, -0.2500])"),
        (
            tensor!([1.5, f64::NAN, f64::INFINITY]).unwrap(),
            "tensor([1.5000,    nan,    inf])",
        ),
        (
            tensor!([1., f64::NAN, f64::NEG_INFINITY]).unwrap(),
            "tensor([1., nan, -inf])",
        ),
        (
            tensor!([f64::NAN, f64::INFINITY]).unwrap(),
            "tensor([nan, inf])",
        ),
        (
            tensor!([1e-5, 1.0]).unwrap(),
            "tensor([1.0000e-05, 1.0000e+00])",
        ),
        (
            tensor!([1., 1e9]).unwrap(),
            "tensor([1.0000e+00, 1.0000e+09])",
        ),
        (
            tensor!([1., 1001.]).unwrap(),
            "tensor([1.0000e+00, 1.0010e+03])",
        ),
        (tensor!([1., 1000.]).unwrap(), "tensor([   1., 1000.])"),
        (tensor!([0., -0.]).unwrap(), "tensor([0., -0.])"),
        (
            tensor!([0.001, 2.0, 3.5]).unwrap(),
            "tensor([1.0000e-03, 2.0000e+00, 3.5000e+00])",
        ),
        (
            tensor!([[1., 2.], [3., 4.]]).unwrap(),
            "tensor([[1., 2.],\n        [3., 4.]])",
        ),
        (
            Tensor::zeros([2, 2, 2], DType::F32, cpu()).unwrap(),
            "tensor([[[0., 0.],\n         [0., 0.]],\n\n        [[0., 0.],\n         [0., 0.]]])",
        ),
        (
            tensor!([1., 2.], dtype = DType::F16).unwrap(),
            "tensor([1., 2.], dtype=torch.float16)",
        ),
        (
            tensor!([0.1, 0.2], dtype = DType::F64).unwrap(),
            "tensor([0.1000, 0.2000], dtype=torch.float64)",
        ),
        (
            tensor!(1.5, dtype = DType::BF16).unwrap(),
            "tensor(1.5000, dtype=torch.bfloat16)",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(t.to_string(), want);
    }
}

#[test]
fn integers_and_bools_print_exactly() {
    let _release = common::Release;
    let _shared = shared();
    let big = 1i64 << 62;
    let cases: Vec<(Tensor, &str)> = vec![
        (tensor!([1, 2, 3]).unwrap(), "tensor([1, 2, 3])"),
        (tensor!([big]).unwrap(), "tensor([4611686018427387904])"),
        (
            tensor!([i64::MIN, 0, 7]).unwrap(),
            "tensor([-9223372036854775808,                    0,                    7])",
        ),
        (tensor!([1, 2, 3]).unwrap().sum().unwrap(), "tensor(6)"),
        (
            tensor!([-1, 20], dtype = DType::I32).unwrap(),
            "tensor([-1, 20], dtype=torch.int32)",
        ),
        (
            tensor!([255, 0], dtype = DType::U8).unwrap(),
            "tensor([255,   0], dtype=torch.uint8)",
        ),
        (tensor!([true, false]).unwrap(), "tensor([ True, False])"),
        (tensor!(true).unwrap(), "tensor(True)"),
        (
            tensor!([[false], [false]]).unwrap(),
            "tensor([[False],\n        [False]])",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(t.to_string(), want);
    }
}

#[test]
fn empty_tensors_print_their_size_and_dtype() {
    let _release = common::Release;
    let _shared = shared();
    let cases: Vec<(Tensor, &str)> = vec![
        (Tensor::zeros([0], DType::F32, cpu()).unwrap(), "tensor([])"),
        (
            Tensor::zeros([0], DType::I64, cpu()).unwrap(),
            "tensor([], dtype=torch.int64)",
        ),
        (
            Tensor::zeros([0, 3], DType::F32, cpu()).unwrap(),
            "tensor([], size=(0, 3))",
        ),
        (
            Tensor::zeros([2, 0, 4], DType::Bool, cpu()).unwrap(),
            "tensor([], size=(2, 0, 4), dtype=torch.bool)",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(t.to_string(), want);
    }
}

#[test]
fn large_tensors_are_summarised() {
    let _release = common::Release;
    let _shared = shared();
    let a = Tensor::arange(0.0, 2000.0, 1.0, DType::I64, cpu()).unwrap();
    assert_eq!(
        a.to_string(),
        "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"
    );
    let z = Tensor::zeros([2000, 3], DType::F32, cpu()).unwrap();
    assert_eq!(
        z.to_string(),
        "tensor([[0., 0., 0.],\n        [0., 0., 0.],\n        [0., 0., 0.],\n        ...,\n        [0., 0., 0.],\n        [0., 0., 0.],\n        [0., 0., 0.]])"
    );
    // 1000 elements are not summarised; the formatter sees only the shown elements.
    let k = Tensor::arange(0.0, 1000.0, 1.0, DType::F32, cpu()).unwrap();
    assert!(!k.to_string().contains("..."));
    let w = Tensor::arange(0.0, 1001.0, 1.0, DType::F32, cpu()).unwrap();
    assert_eq!(
        w.to_string(),
        "tensor([   0.,    1.,    2.,  ...,  998.,  999., 1000.])"
    );
    // A huge broadcast view prints without being materialised.
    let huge = Tensor::full([1, 1], 7i32, cpu())
        .unwrap()
        .expand([1usize << 30, 1 << 30])
        .unwrap();
    assert!(
        huge.to_string()
            .starts_with("tensor([[7, 7, 7,  ..., 7, 7, 7],\n        [7, 7, 7,  ..., 7, 7, 7],")
    );
}

#[test]
fn views_print_their_own_elements() {
    let _release = common::Release;
    let _shared = shared();
    let m = tensor!([[1, 2, 3], [4, 5, 6]]).unwrap();
    assert_eq!(
        m.t().unwrap().to_string(),
        "tensor([[1, 4],\n        [2, 5],\n        [3, 6]])"
    );
    assert_eq!(
        m.narrow(1, 1, 2)
            .unwrap()
            .i(&genesis::s![1])
            .unwrap()
            .to_string(),
        "tensor([5, 6])"
    );
}

#[test]
fn print_options_change_precision_and_summary() {
    let _release = common::Release;
    let _alone = OPTIONS.write().unwrap_or_else(|e| e.into_inner());
    // One test changes the process-wide options, and restores them.
    genesis::set_printoptions(PrintOptions {
        precision: 2,
        threshold: 5,
        edgeitems: 1,
        ..PrintOptions::default()
    })
    .unwrap();
    let x = tensor!([0.125, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let shown = x.to_string();
    genesis::set_printoptions(PrintOptions::default()).unwrap();
    assert_eq!(shown, "tensor([0.12,  ..., 5.00])");
    assert_eq!(genesis::printoptions(), PrintOptions::default());
}

#[test]
fn cuda_tensors_name_their_device() {
    let _release = common::Release;
    let _shared = shared();
    if !genesis::cuda::is_available() {
        eprintln!("CUDA part skipped: no CUDA device found");
        return;
    }
    let dev = Device::Cuda(0);
    let t = tensor!([1., 2.], device = dev).unwrap();
    assert_eq!(t.to_string(), "tensor([1., 2.], device='cuda:0')");
    let i = tensor!([1, 2], dtype = DType::I32, device = dev).unwrap();
    assert_eq!(
        i.to_string(),
        "tensor([1, 2], device='cuda:0', dtype=torch.int32)"
    );
    let big = Tensor::arange(0.0, 5000.0, 1.0, DType::F32, dev).unwrap();
    assert_eq!(
        big.to_string(),
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.9970e+03, 4.9980e+03,\n        4.9990e+03], device='cuda:0')"
    );
}

fn dtype_of(name: &str) -> DType {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("unknown dtype {name}"))
}

/// The tensor a fixture case describes, on `device`.
fn build(case: &serde_json::Value, device: Device) -> Tensor {
    let dtype = dtype_of(case["dtype"].as_str().unwrap());
    let shape: Vec<usize> = case["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap() as usize)
        .collect();
    let values = case["values"].as_array().unwrap();
    let t = if dtype == DType::Bool {
        let b: Vec<bool> = values.iter().map(|v| v.as_bool().unwrap()).collect();
        Tensor::from_bools(&b, &shape, device).unwrap()
    } else if dtype.is_float() {
        let f: Vec<f64> = values
            .iter()
            .map(|v| v.as_str().unwrap().parse::<f64>().unwrap())
            .collect();
        Tensor::from_slice(&f, &shape, device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    } else {
        let i: Vec<i64> = values
            .iter()
            .map(|v| v.as_str().unwrap().parse::<i64>().unwrap())
            .collect();
        Tensor::from_slice(&i, &shape, device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    match case["view"].as_str() {
        None => t,
        Some("t") => t.t().unwrap(),
        Some("narrow") => {
            let last = t.shape()[t.dim() - 1];
            t.narrow(-1, 1, last - 1).unwrap()
        }
        Some("expand") => {
            let n = t.shape()[1];
            t.expand([3, n]).unwrap()
        }
        Some(v) => panic!("unknown view {v}"),
    }
}

#[test]
fn repr_matches_pytorch_fixture() {
    let _release = common::Release;
    let _shared = shared();
    // The GPU bundle runs the test binaries away from the source tree: `GENESIS_REPO_ROOT` says
    // where the repository is (as for the other data-reading tests).
    let path = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| std::path::PathBuf::from(r).join("crates/genesis"))
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/data/repr-cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (written by `python3 crates/genesis/tests/gen_repr_cases.py` where PyTorch is installed)",
            path.display()
        )
    });
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut devices = vec![(Device::Cpu, "repr")];
    if genesis::cuda::is_available() && doc["cuda"].as_bool() == Some(true) {
        devices.push((Device::Cuda(0), "repr_cuda"));
    }
    let cases = doc["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for (device, key) in devices {
        for case in cases {
            let want = case[key].as_str().unwrap();
            let got = build(case, device).to_string();
            if got != want {
                failures.push(format!(
                    "{} on {device}:\n  PyTorch: {want:?}\n  Genesis: {got:?}",
                    case["name"].as_str().unwrap()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the {} cases (torch {}) print differently:\n{}",
        failures.len(),
        cases.len(),
        doc["torch"],
        failures.join("\n")
    );
}
