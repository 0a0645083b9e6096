//! Untrusted files. Loading a safetensors file or mapping a file never hangs, never
//! reads without end and never crashes: what is not a regular file (a FIFO, a device, a
//! directory, a socket, or a symbolic link to one) is refused at once with a typed error, and
//! a regular file is read only as far as its header says, with every malformed length, header
//! and truncation an error. Every call runs under a time limit.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};

use common::files::{TempDir, within};
use genesis::{
    DType, Device, Error, LayoutError, MAX_RANK, Tensor, deserialize_safetensors, load_npy,
    load_npz, load_safetensors, load_safetensors_map, load_safetensors_with_metadata,
    save_safetensors,
};
use genesis_storage::{MapMode, Storage, regular_file_len};

/// A way of reading a file, giving the error or the number of tensors (or bytes).
type Reader = fn(&Path) -> Result<usize, Error>;

/// Every way of reading a file.
fn readers() -> Vec<(&'static str, Reader)> {
    vec![
        ("load_safetensors", |p| {
            load_safetensors(p, Device::Cpu).map(|v| v.len())
        }),
        ("load_safetensors_map", |p| {
            load_safetensors_map(p, Device::Cpu).map(|v| v.len())
        }),
        ("load_safetensors_with_metadata", |p| {
            load_safetensors_with_metadata(p, Device::Cpu).map(|v| v.0.len())
        }),
        ("load_npy", |p| load_npy(p, Device::Cpu).map(|t| t.numel())),
        ("load_npz", |p| load_npz(p, Device::Cpu).map(|v| v.len())),
        ("map_file ro", |p| {
            Storage::map_file(p, DType::U8, 0, 8, MapMode::ReadOnly)
                .map(|s| s.len())
                .map_err(Error::from)
        }),
        ("map_file rw", |p| {
            Storage::map_file(p, DType::U8, 0, 8, MapMode::ReadWrite)
                .map(|s| s.len())
                .map_err(Error::from)
        }),
        ("regular_file_len", |p| {
            regular_file_len(p).map(|n| n as usize).map_err(Error::from)
        }),
    ]
}

/// Every reader on `path`, each under the time limit, must be `NotRegularFile` of `kind`.
fn refused_everywhere(path: &Path, kind: &str) {
    for (name, read) in readers() {
        let p = path.to_path_buf();
        let r = within(&format!("{name}({})", path.display()), move || read(&p));
        match r {
            Err(Error::Storage(genesis_storage::Error::NotRegularFile {
                path: shown,
                kind: k,
            })) => {
                assert_eq!(k, kind, "{name}({})", path.display());
                assert_eq!(shown, path.display().to_string());
            }
            other => panic!("{name}({}): {other:?}", path.display()),
        }
    }
}

/// The files that are not regular on this machine: (path, kind), with the FIFO, directory and
/// socket made in `dir` and a symbolic link to each of them.
#[cfg(unix)]
fn irregular_files(dir: &TempDir) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    for dev in ["/dev/zero", "/dev/urandom", "/dev/null", "/dev/full"] {
        if Path::new(dev).exists() {
            out.push((PathBuf::from(dev), "a character device"));
        }
    }
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if made {
        out.push((fifo, "a FIFO"));
    }
    let sub = dir.join("subdir");
    std::fs::create_dir(&sub).unwrap();
    out.push((sub, "a directory"));
    let sock = dir.join("socket");
    // The listener is leaked: the socket must stay bound while the readers meet it.
    if let Ok(l) = std::os::unix::net::UnixListener::bind(&sock) {
        std::mem::forget(l);
        out.push((sock, "a socket"));
    }
    let mut links = Vec::new();
    for (i, (target, kind)) in out.iter().enumerate() {
        let link = dir.join(&format!("link{i}"));
        std::os::unix::fs::symlink(target, &link).unwrap();
        links.push((link, *kind));
    }
    // A link to a link to a device.
    if let Some((first, kind)) = links.first().cloned() {
        let link = dir.join("linklink");
        std::os::unix::fs::symlink(&first, &link).unwrap();
        links.push((link, kind));
    }
    out.extend(links);
    out
}

#[cfg(unix)]
#[test]
fn what_is_not_a_regular_file_is_refused_at_once() {
    let dir = TempDir::new("irregular");
    let files = irregular_files(&dir);
    assert!(files.iter().any(|(_, k)| *k == "a directory"));
    for (path, kind) in &files {
        refused_everywhere(path, kind);
    }
}

/// A FIFO that a writer keeps feeding (an endless source) is refused too, without reading.
#[cfg(unix)]
#[test]
fn a_fed_fifo_is_refused() {
    let dir = TempDir::new("fed");
    let fifo = dir.join("fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return;
    }
    let writer_path = fifo.clone();
    // The writer blocks in `open` until a reader comes; readers refuse before opening, so it
    // may wait for ever: it is left behind, detached.
    std::thread::spawn(move || {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&writer_path) {
            let chunk = [0u8; 4096];
            while f.write_all(&chunk).is_ok() {}
        }
    });
    refused_everywhere(&fifo, "a FIFO");
}

/// The bytes of a valid file of a few tensors.
fn valid_file(dir: &TempDir) -> Vec<u8> {
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&[7i64, -8, 9], [3], Device::Cpu).unwrap();
    let c = Tensor::from_slice(&[5u8], (), Device::Cpu).unwrap();
    let path = dir.join("valid.safetensors");
    save_safetensors(&[("a", &a), ("b", &b), ("c", &c)], &path).unwrap();
    std::fs::read(&path).unwrap()
}

/// Loads `bytes` written to a file, under the time limit, through every loader: they all agree.
fn load_bytes(dir: &TempDir, name: &str, bytes: &[u8]) -> Result<usize, Error> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let mut results = Vec::new();
    for (reader, read) in readers().into_iter().take(3) {
        let p = path.clone();
        results.push(within(&format!("{reader}({name})"), move || read(&p)));
    }
    let in_memory = deserialize_safetensors(bytes, Device::Cpu).map(|v| v.len());
    assert_eq!(
        results[0].is_ok(),
        in_memory.is_ok(),
        "{name}: {results:?} {in_memory:?}"
    );
    for r in &results[1..] {
        assert_eq!(r.is_ok(), results[0].is_ok(), "{name}: {results:?}");
    }
    results.swap_remove(0)
}

fn header_file(header_len: u64, header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut v = header_len.to_le_bytes().to_vec();
    v.extend_from_slice(header);
    v.extend_from_slice(data);
    v
}

#[test]
fn a_regular_file_behind_a_symbolic_link_loads() {
    let dir = TempDir::new("link");
    let bytes = valid_file(&dir);
    assert_eq!(load_bytes(&dir, "plain", &bytes).unwrap(), 3);
    #[cfg(unix)]
    {
        let link = dir.join("link");
        std::os::unix::fs::symlink(dir.join("plain"), &link).unwrap();
        let loaded = load_safetensors(&link, Device::Cpu).unwrap();
        assert_eq!(loaded[0].1.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(loaded[1].1.to_vec::<i64>().unwrap(), [7, -8, 9]);
        assert_eq!(loaded[2].1.to_vec::<u8>().unwrap(), [5]);
        assert_eq!(regular_file_len(&link).unwrap(), bytes.len() as u64);
    }
}

#[test]
fn every_truncation_and_extension_of_a_valid_file_is_an_error() {
    let dir = TempDir::new("truncated");
    let bytes = valid_file(&dir);
    for len in 0..bytes.len() {
        let r = load_bytes(&dir, "cut", &bytes[..len]);
        assert!(r.is_err(), "{len} of {} bytes loaded", bytes.len());
    }
    for extra in [1, 3, 4096] {
        let mut v = bytes.clone();
        v.extend(std::iter::repeat_n(0u8, extra));
        assert!(
            load_bytes(&dir, "long", &v).is_err(),
            "{extra} bytes past the data"
        );
    }
}

#[test]
fn header_lengths_past_the_file_or_the_limit_are_errors() {
    let dir = TempDir::new("lengths");
    let header = br#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let good = header_file(header.len() as u64, header, &[0; 4]);
    assert_eq!(load_bytes(&dir, "good", &good).unwrap(), 1);
    let n = header.len() as u64;
    for claimed in [
        n + 1,
        n + 4,
        n + 5,
        1000,
        100_000_000,
        100_000_001,
        1 << 32,
        1 << 40,
        (1 << 63) - 1,
        u64::MAX - 7,
        u64::MAX,
    ] {
        let v = header_file(claimed, header, &[0; 4]);
        assert!(
            load_bytes(&dir, "claims", &v).is_err(),
            "header length {claimed}"
        );
    }
    // A header of length 0, and shorter than the JSON.
    for claimed in [0, 1, n - 1] {
        let v = header_file(claimed, header, &[0; 4]);
        assert!(
            load_bytes(&dir, "short", &v).is_err(),
            "header length {claimed}"
        );
    }
}

#[test]
fn headers_that_claim_more_data_than_the_file_holds_are_errors() {
    let dir = TempDir::new("claims");
    for (shape, end) in [
        ("[2]", 8u64),
        ("[1024]", 4096),
        ("[268435456]", 1 << 30),
        ("[4611686018427387904]", 1 << 62),
        ("[1099511627776,1099511627776]", u64::MAX),
        ("[65536,65536,65536,65536]", 0),
    ] {
        let header =
            format!(r#"{{"t":{{"dtype":"F32","shape":{shape},"data_offsets":[0,{end}]}}}}"#);
        let v = header_file(header.len() as u64, header.as_bytes(), &[0; 4]);
        assert!(load_bytes(&dir, "more", &v).is_err(), "{header}");
    }
}

/// A safetensors file of one F32 tensor of shape `shape` (one element's data).
fn one_element_file(shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let header = format!(
        r#"{{"t":{{"dtype":"F32","shape":[{}],"data_offsets":[0,4]}}}}"#,
        dims.join(",")
    );
    header_file(
        header.len() as u64,
        header.as_bytes(),
        &1.5f32.to_le_bytes(),
    )
}

#[test]
fn shapes_of_more_than_max_rank_dimensions_are_refused_when_loaded() {
    let dir = TempDir::new("rank");
    for rank in [0, 1, 2, 63, 64, 65, 66, 100, 1000, 100_000] {
        let bytes = one_element_file(&vec![1; rank]);
        let r = load_bytes(&dir, "rank", &bytes);
        if rank <= MAX_RANK {
            assert_eq!(r.unwrap(), 1, "rank {rank}");
            let t = load_safetensors(dir.join("rank"), Device::Cpu).unwrap();
            let t = &t[0].1;
            assert_eq!(t.dim(), rank);
            // Printing a deep tensor neither recurses per dimension nor overflows: on a
            // thread with a small stack.
            let t2 = t.clone();
            let s = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || t2.to_string())
                .unwrap()
                .join()
                .unwrap();
            assert_eq!(
                s,
                format!("tensor({}1.5000{})", "[".repeat(rank), "]".repeat(rank))
            );
        } else {
            match r {
                Err(Error::Storage(genesis_storage::Error::Layout(
                    LayoutError::RankTooLarge { rank: r, max },
                ))) => assert_eq!((r, max), (rank, MAX_RANK)),
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }
}
