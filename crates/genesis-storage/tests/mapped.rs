//! Memory-mapped files and shared memory across processes.

use std::io::Write;

use genesis_storage::{DType, Device, Error, MapMode, Storage};

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("genesis-test-{}-{name}", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
    path
}

#[test]
fn mapped_file_survives_flush_and_reopen() {
    let data: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let path = temp_file("rw", &data);
    {
        let mut s = Storage::map_file(&path, DType::F32, 16, 8, MapMode::ReadWrite).unwrap();
        assert_eq!(s.device(), Device::Cpu);
        assert_eq!(
            s.as_slice::<f32>().unwrap(),
            &[4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
        );
        s.as_mut_slice::<f32>().unwrap()[0] = -1.5;
        s.flush().unwrap();
    }
    let ro = Storage::map_file(&path, DType::F32, 0, 64, MapMode::ReadOnly).unwrap();
    assert_eq!(
        ro.as_slice::<f32>().unwrap()[4],
        -1.5,
        "the write reached the file"
    );
    assert_eq!(ro.as_slice::<f32>().unwrap()[5], 5.0);
    // Zero-copy: the storage points into the mapping, and read-only refuses writes.
    let mut ro2 = Storage::map_file(&path, DType::F32, 0, 64, MapMode::ReadOnly).unwrap();
    assert!(matches!(
        ro2.as_mut_slice::<f32>(),
        Err(Error::ReadOnly { .. })
    ));
    let src = Storage::zeros(64, DType::F32, Device::Cpu).unwrap();
    assert!(matches!(ro2.copy_from(&src), Err(Error::ReadOnly { .. })));
    assert_eq!(ro2.as_slice::<f32>().unwrap()[4], -1.5, "nothing written");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bad_mappings_are_typed_errors() {
    let path = temp_file("short", &[0u8; 100]);
    let e = Storage::map_file(&path, DType::F64, 0, 13, MapMode::ReadOnly).unwrap_err();
    assert!(
        matches!(
            e,
            Error::FileTooShort {
                needed: 104,
                len: 100,
                ..
            }
        ),
        "{e}"
    );
    let e = Storage::map_file(&path, DType::F32, 2, 4, MapMode::ReadOnly).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MisalignedOffset {
                offset: 2,
                align: 4
            }
        ),
        "{e}"
    );
    assert!(matches!(
        Storage::map_file(&path, DType::F32, 0, 0, MapMode::ReadOnly),
        Err(Error::EmptyMapping)
    ));
    let missing = Storage::map_file(
        path.with_extension("nope"),
        DType::U8,
        0,
        1,
        MapMode::ReadOnly,
    )
    .unwrap_err();
    assert!(matches!(missing, Error::Io { .. }));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn shared_names_are_checked() {
    let name = format!("t{}-names", std::process::id());
    let s = Storage::create_shared(&name, DType::I32, 16).unwrap();
    assert_eq!(s.shared_name().as_deref(), Some(name.as_str()));
    assert!(matches!(
        Storage::create_shared(&name, DType::I32, 16),
        Err(Error::SharedExists { .. })
    ));
    let attached = Storage::attach_shared(&name, DType::I32).unwrap();
    assert_eq!(attached.len(), 16);
    Storage::unlink_shared(&name).unwrap();
    assert!(matches!(
        Storage::attach_shared(&name, DType::I32),
        Err(Error::SharedNotFound { .. })
    ));
    assert!(matches!(
        Storage::unlink_shared(&name),
        Err(Error::SharedNotFound { .. })
    ));
    for bad in ["", "a/b", "../x", ".hidden", "spaces here"] {
        assert!(
            matches!(
                Storage::create_shared(bad, DType::U8, 1),
                Err(Error::BadSharedName { .. })
            ),
            "{bad:?}"
        );
    }
}

/// The child half of `shared_memory_between_processes` (run by the parent as a subprocess).
#[test]
#[ignore = "run by shared_memory_between_processes in a child process"]
fn shared_memory_child() {
    let Ok(name) = std::env::var("GENESIS_SHM_CHILD") else {
        return;
    };
    let mut s = Storage::attach_shared(&name, DType::I64).unwrap();
    let v = s.as_mut_slice::<i64>().unwrap();
    assert_eq!(v[0], 42, "the child sees the parent's write");
    for (i, x) in v.iter_mut().enumerate() {
        *x = (i * i) as i64;
    }
    s.flush().unwrap();
}

#[test]
fn shared_memory_between_processes() {
    let name = format!("t{}-xproc", std::process::id());
    let mut s = Storage::create_shared(&name, DType::I64, 1000).unwrap();
    s.as_mut_slice::<i64>().unwrap()[0] = 42;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shared_memory_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env("GENESIS_SHM_CHILD", &name)
        .status()
        .unwrap();
    assert!(status.success(), "the child process failed");
    let v = s.as_slice::<i64>().unwrap();
    assert!(
        v.iter().enumerate().all(|(i, &x)| x == (i * i) as i64),
        "the parent sees the child's writes"
    );
    // A CPU copy of shared memory is an ordinary storage.
    let copy = s.to_device(Device::Cpu).unwrap();
    assert_eq!(copy.to_vec::<i64>().unwrap()[999], 998_001);
    Storage::unlink_shared(&name).unwrap();
}
