//! CUDA storages shared between processes (`Storage::export_cuda` / `Storage::import_cuda`).
//!
//! The GPU tests run two processes of this binary: an exporter and an importer (the same
//! binary, re-run with `GENESIS_IPC_ROLE` naming the role and `GENESIS_IPC_SOCKET` the
//! socket). For each of three storages (40 KB next to another storage in its handle or
//! segment; 6 MB; 80 MiB, a large block on several handles) the exporter fills it and exports
//! it over its own connection; the importer checks the contents, writes new values with
//! kernels and signals; the exporter waits, reads them back exactly, drops its own handle and
//! checks that the pool still holds the memory, and signals; the importer lets go; the
//! exporter sees the memory freed only then. A last round orders the exporter's writes after
//! the importer's and has the importer read them. Each role ends by emptying its device pool
//! and checking that it holds no memory (what a caching allocator still holds at exit
//! compute-sanitizer reports as leaked), then prints `genesis-ipc <role> done`.
//! `cuda_storage_between_processes_vmm` runs it with the pool's virtual memory (handles as
//! file descriptors), `cuda_storage_between_processes_segments` with `GENESIS_NO_VMM=1`
//! (IPC handles of `cuMemAlloc` segments).
#![cfg(unix)]

use std::sync::Arc;

use genesis_storage::{DType, Device, Error, Storage};

#[test]
fn host_storages_are_not_exported() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let s = Arc::new(Storage::zeros(16, DType::F32, Device::Cpu).unwrap());
    assert!(matches!(
        s.export_cuda(a),
        Err(Error::NotOnDevice {
            op: "export_cuda",
            ..
        })
    ));
}

#[cfg(feature = "cuda")]
mod gpu {
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::process::{Child, Command};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use genesis_cuda::skip_without_gpu;
    use genesis_storage::cuda::device_pool;
    use genesis_storage::{BinaryOp, BinaryRhs, DType, Device, Error, Layout, Storage};

    const T: Duration = Duration::from_secs(60);
    const DEV: Device = Device::Cuda(0);
    /// The storages, in elements of f32: 40 KB (a small block, next to another in its handle
    /// or segment), 6 MB, 80 MiB (a large block: several handles).
    const SIZES: [usize; 3] = [10_000, 1_500_000 + 123, 20 << 20];

    fn initial(i: usize) -> f32 {
        (i % 1_000_003) as f32
    }

    /// `x * 2 + 1`, on the device: what the importer writes.
    fn importers(i: usize) -> f32 {
        initial(i) * 2.0 + 1.0
    }

    /// `x + 5`, on the device: what the exporter writes after that.
    fn exporters(i: usize) -> f32 {
        importers(i) + 5.0
    }

    fn scalar(v: f32) -> Storage {
        Storage::from_slice(&[v], Device::Cpu).unwrap()
    }

    /// `s = s op v`, a kernel queued on the current stream (no synchronisation).
    fn apply(s: &Storage, op: BinaryOp, v: f32) {
        let layout = Layout::contiguous(&[s.len()]);
        s.binary_assign_shared(op, &layout, BinaryRhs::Scalar(&scalar(v)))
            .unwrap();
    }

    fn check(s: &Storage, expect: fn(usize) -> f32, who: &str) {
        let v = s.to_vec::<f32>().unwrap();
        assert_eq!(v.len(), s.len());
        if let Some(i) = (0..v.len()).find(|&i| v[i] != expect(i)) {
            panic!("{who}: element {i} is {}, expected {}", v[i], expect(i));
        }
    }

    fn allocated() -> i64 {
        device_pool(0)
            .unwrap()
            .allocator()
            .stats()
            .allocated_bytes
            .all()
            .current
    }

    /// Gives the pool's cached memory back to the driver once every storage of this process
    /// is gone, and checks that the pool then holds nothing: a caching allocator keeps freed
    /// blocks, and what it still holds when the process exits is reported as leaked by
    /// compute-sanitizer (`--leak-check full`), though no storage owns it.
    fn empty_pool(who: &str) {
        genesis_storage::cuda::empty_caches().unwrap();
        let st = device_pool(0).unwrap().allocator().stats();
        assert_eq!(
            (
                st.allocated_bytes.all().current,
                st.reserved_bytes.all().current
            ),
            (0, 0),
            "{who}: the pool's allocated and reserved bytes after emptying its cache"
        );
    }

    fn exporter(path: &str) {
        let listener = UnixListener::bind(path).unwrap();
        // A small storage first, so that the shared ones start inside their memory.
        let pad = Storage::zeros(1000, DType::U8, DEV).unwrap();
        // Storages that cannot be exported, with their typed errors.
        let empty = Arc::new(Storage::zeros(0, DType::F32, DEV).unwrap());
        let (x, _y) = UnixStream::pair().unwrap();
        assert!(matches!(
            empty.export_cuda(x),
            Err(Error::NotShareable { .. })
        ));
        for n in SIZES {
            let data: Vec<f32> = (0..n).map(initial).collect();
            let s = Arc::new(Storage::from_slice(&data, DEV).unwrap());
            let (conn, _) = listener.accept().unwrap();
            let export = s.export_cuda(conn).unwrap();
            // The importer checks, writes and signals.
            export.wait(T).unwrap();
            check(&s, importers, "the exporter reading the importer's writes");
            // The exporter's own handle goes: the importer still maps the memory, so the
            // pool still holds it.
            let before = allocated();
            drop(s);
            assert_eq!(
                allocated(),
                before,
                "the storage was freed under the importer"
            );
            assert!(!export.is_released());
            // The importer waits for this before it lets go.
            export.signal().unwrap();
            export.wait_released(T).unwrap();
            let freed = before - allocated();
            assert!(
                freed >= (n * 4) as i64,
                "{freed} bytes freed after both let go of {} bytes",
                n * 4
            );
        }
        // The exporter's writes after the importer's, ordered by the events: a third round.
        let data: Vec<f32> = (0..SIZES[0]).map(initial).collect();
        let s = Arc::new(Storage::from_slice(&data, DEV).unwrap());
        let (conn, _) = listener.accept().unwrap();
        let export = s.export_cuda(conn).unwrap();
        export.wait(T).unwrap();
        apply(&s, BinaryOp::Add, 5.0);
        export.signal().unwrap();
        let before = allocated();
        drop(s);
        export.wait_released(T).unwrap();
        assert!(before - allocated() >= (SIZES[0] * 4) as i64);
        drop(export);
        // Every storage of this process goes before the cache is emptied (the padding too: it
        // would otherwise return its block, and the handle or segment under it, to the cache
        // when this function returns, after the emptying).
        drop((pad, empty));
        empty_pool("the exporter");
        let _ = std::fs::remove_file(path);
    }

    fn connect(path: &str) -> UnixStream {
        let start = Instant::now();
        loop {
            match UnixStream::connect(path) {
                Ok(c) => return c,
                Err(e) if start.elapsed() > T => panic!("connecting to {path}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn importer(path: &str) {
        for n in SIZES {
            let (s, import) = Storage::import_cuda(connect(path)).unwrap();
            assert_eq!((s.device(), s.dtype(), s.len()), (DEV, DType::F32, n));
            check(&s, initial, "the importer reading the exporter's storage");
            apply(&s, BinaryOp::Mul, 2.0);
            apply(&s, BinaryOp::Add, 1.0);
            import.signal().unwrap();
            import.wait(T).unwrap();
            // An imported storage is not exported again.
            let s = Arc::new(s);
            let (x, _y) = UnixStream::pair().unwrap();
            assert!(matches!(s.export_cuda(x), Err(Error::NotShareable { .. })));
            drop(s);
        }
        let (s, import) = Storage::import_cuda(connect(path)).unwrap();
        apply(&s, BinaryOp::Mul, 2.0);
        apply(&s, BinaryOp::Add, 1.0);
        import.signal().unwrap();
        import.wait(T).unwrap();
        check(
            &s,
            exporters,
            "the importer reading the exporter's later writes",
        );
        drop((s, import));
        empty_pool("the importer");
    }

    /// One role of the two-process test, when this process was started as it.
    #[test]
    #[ignore = "run by cuda_storage_between_processes_* in a child process"]
    fn ipc_role() {
        let (Ok(role), Ok(path)) = (
            std::env::var("GENESIS_IPC_ROLE"),
            std::env::var("GENESIS_IPC_SOCKET"),
        ) else {
            return;
        };
        match role.as_str() {
            "exporter" => exporter(&path),
            "importer" => importer(&path),
            r => panic!("unknown role {r}"),
        }
        // What tests/ipc_gpu.sh counts: each role that got here left its pool empty.
        println!(
            "genesis-ipc {role} done, pool empty (pid {})",
            std::process::id()
        );
    }

    fn spawn(role: &str, path: &str, no_vmm: bool) -> Child {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "--exact",
            "gpu::ipc_role",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("GENESIS_IPC_ROLE", role)
        .env("GENESIS_IPC_SOCKET", path);
        if no_vmm {
            c.env("GENESIS_NO_VMM", "1");
        } else {
            c.env_remove("GENESIS_NO_VMM");
        }
        c.spawn().unwrap()
    }

    /// Waits for `child`, killing it after `limit`.
    fn finish(mut child: Child, role: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "the {role} failed: {status}");
                return;
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the {role} did not finish in {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn between_processes(no_vmm: bool) {
        let path = std::env::temp_dir().join(format!(
            "genesis-ipc-{}-{}.sock",
            std::process::id(),
            u8::from(no_vmm)
        ));
        let path = path.to_str().unwrap().to_string();
        let _ = std::fs::remove_file(&path);
        let exporter = spawn("exporter", &path, no_vmm);
        let importer = spawn("importer", &path, no_vmm);
        // Under compute-sanitizer each process runs many times slower.
        let limit = Duration::from_secs(600);
        finish(importer, "importer", limit);
        finish(exporter, "exporter", limit);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn cuda_storage_between_processes_vmm() {
        if skip_without_gpu("cuda_storage_between_processes_vmm") {
            return;
        }
        between_processes(false);
    }

    #[test]
    fn cuda_storage_between_processes_segments() {
        if skip_without_gpu("cuda_storage_between_processes_segments") {
            return;
        }
        between_processes(true);
    }
}
