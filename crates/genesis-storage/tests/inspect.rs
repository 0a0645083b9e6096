//! `inspect`.

use genesis_storage::{DType, Device, Layout, Storage, StridedBlocks};

#[test]
fn inspect_reports_storage_and_view() {
    let s = Storage::zeros(24, DType::F32, Device::Cpu).unwrap();
    let info = s.inspect();
    assert_eq!(
        (info.kind, info.len, info.nbytes, info.dtype),
        ("cpu", 24, 96, DType::F32)
    );
    assert_eq!(info.ptr % 64, 0);
    let t = Layout::contiguous(&[4, 6]).transpose(0, 1).unwrap();
    let v = s.inspect_view(&t);
    let view = v.view.as_ref().unwrap();
    assert!(!view.contiguous && view.in_bounds);
    assert_eq!(view.blocks, StridedBlocks::General);
    let text = v.to_string();
    assert!(
        text.contains("cpu storage") && text.contains("strided") && text.contains("[6, 4]"),
        "{text}"
    );
    let outside = s.inspect_view(&Layout::contiguous(&[5, 5]));
    assert!(outside.to_string().contains("OUT OF BOUNDS"));
    let aligned = Storage::zeros_aligned(10, DType::U8, 4096).unwrap();
    assert_eq!(aligned.inspect().ptr % 4096, 0);
}
