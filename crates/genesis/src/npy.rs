//! NumPy's `.npy` (one array) and `.npz` (a zip archive of `.npy` members) files, written and
//! read through the [`npyz`] crate (header and dtype strings), [`py_literal`] (the header's
//! Python dict) and [`zip`] (the archive).
//!
//! Loaded files are untrusted. Before any header is handed to `npyz` (whose shape arithmetic
//! is unchecked) it is checked here: its length against the file and NumPy's own 10,000-byte
//! limit, its nesting, its rank against [`MAX_RANK`](crate::MAX_RANK) and its shape's element
//! count, and the data's length must be exactly what the shape and dtype need before anything
//! is allocated for it.

use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

use genesis_storage::{DType, Device, MapMode, Storage};
use npyz::{Endianness, Order, TypeChar, TypeStr, WriteOptions, WriterBuilder};

use crate::{Error, Result, Tensor};

/// The first bytes of every `.npy` file.
const MAGIC: &[u8] = b"\x93NUMPY";
/// NumPy's own limit on a header's length when it loads one (`max_header_size`).
const MAX_HEADER_LEN: usize = 10_000;
/// Brackets deeper than this are refused before the header is parsed (the parser recurses).
const MAX_NESTING: usize = 32;
/// Deflate expands at most about 1032:1; a member claiming more than this ratio is refused.
const MAX_DEFLATE_RATIO: u64 = 1100;

fn invalid(op: &'static str, reason: String) -> Error {
    Error::InvalidArgument { op, reason }
}

/// Prefixes an `InvalidArgument`'s reason with `what` (a path or an archive member).
fn context(what: &str, e: Error) -> Error {
    match e {
        Error::InvalidArgument { op, reason } => Error::InvalidArgument {
            op,
            reason: format!("{what}: {reason}"),
        },
        e => e,
    }
}

/// NumPy's type string for `dtype` (little-endian); `None` for bfloat16, which has none.
fn type_str(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::BF16 => return None,
    })
}

fn from_type_str(ts: &TypeStr) -> Option<DType> {
    Some(match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        _ => return None,
    })
}

/// Reverses the bytes of each `size`-byte element.
fn swap_bytes(bytes: &mut [u8], size: usize) {
    if size > 1 {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
}

/// The bytes of a `.npy` file holding `t` (C order, little-endian).
fn encode(op: &'static str, t: &Tensor) -> Result<Vec<u8>> {
    let ts = type_str(t.dtype()).ok_or_else(|| {
        invalid(
            op,
            format!(
                "{} has no NumPy dtype: convert first, e.g. `tensor.to_dtype(DType::F32)`",
                t.dtype()
            ),
        )
    })?;
    let ts: TypeStr = ts
        .parse()
        .map_err(|e| invalid(op, format!("type string {ts:?}: {e}")))?;
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    #[allow(unused_mut)] // swapped in place on big-endian hosts only
    let mut data = t.view.contiguous()?.to_bytes()?;
    #[cfg(target_endian = "big")]
    swap_bytes(&mut data, t.dtype().size());
    let mut out = Cursor::new(Vec::with_capacity(data.len().saturating_add(128)));
    WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(ts))
        .shape(&shape)
        .writer(&mut out)
        .write_header_only()
        .map_err(|e| invalid(op, format!("writing the header: {e}")))?;
    let mut out = out.into_inner();
    out.extend_from_slice(&data);
    Ok(out)
}

/// The deepest nesting of brackets in `text`.
fn nesting(text: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for &b in text {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The `shape` entry of a parsed header, checked: at most `MAX_RANK` dimensions, each and their
/// strides addressable.
fn header_shape(op: &'static str, header: &py_literal::Value) -> Result<Vec<usize>> {
    let py_literal::Value::Dict(entries) = header else {
        return Err(invalid(op, "the header is not a Python dict".into()));
    };
    let value = entries
        .iter()
        .find(|(k, _)| matches!(k, py_literal::Value::String(s) if s == "shape"))
        .map(|(_, v)| v)
        .ok_or_else(|| invalid(op, "the header has no 'shape'".into()))?;
    let dims = match value {
        py_literal::Value::Tuple(d) | py_literal::Value::List(d) => d,
        _ => return Err(invalid(op, "the header's 'shape' is not a tuple".into())),
    };
    genesis_storage::check_rank(dims.len())?;
    let shape = dims
        .iter()
        .map(|d| match d {
            py_literal::Value::Integer(i) => {
                u64::try_from(i).ok().and_then(|d| usize::try_from(d).ok())
            }
            _ => None,
        })
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| {
            invalid(
                op,
                "the header's 'shape' is not a tuple of non-negative integers that fit".into(),
            )
        })?;
    // npyz multiplies the dimensions unchecked.
    crate::interop::check_file_shape(op, "", &shape)?;
    Ok(shape)
}

/// Reads the array of a `.npy` file's bytes onto `device`.
fn decode(op: &'static str, bytes: &[u8], device: Device) -> Result<Tensor> {
    if bytes.len() < 10 || !bytes.starts_with(MAGIC) {
        return Err(invalid(
            op,
            format!(
                "not a .npy file: {} bytes without NumPy's magic string and header length",
                bytes.len()
            ),
        ));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (text_start, header_len) = match (major, bytes) {
        (1, _) => (10, usize::from(u16::from_le_bytes([bytes[8], bytes[9]]))),
        (2 | 3, [_, _, _, _, _, _, _, _, a, b, c, d, ..]) => {
            (12, u32::from_le_bytes([*a, *b, *c, *d]) as usize)
        }
        _ => {
            return Err(invalid(
                op,
                format!("unsupported .npy format version {major}.{minor}"),
            ));
        }
    };
    if header_len > MAX_HEADER_LEN {
        return Err(invalid(
            op,
            format!("header of {header_len} bytes is over NumPy's {MAX_HEADER_LEN}-byte limit"),
        ));
    }
    let data_start = text_start + header_len;
    let text = bytes.get(text_start..data_start).ok_or_else(|| {
        invalid(
            op,
            format!(
                "truncated: the header claims {header_len} bytes, the file has {}",
                bytes.len().saturating_sub(text_start)
            ),
        )
    })?;
    if nesting(text) > MAX_NESTING {
        return Err(invalid(
            op,
            format!("header nests brackets over {MAX_NESTING} deep"),
        ));
    }
    let parsed: py_literal::Value = std::str::from_utf8(text)
        .map_err(|_| invalid(op, "the header is not UTF-8".into()))?
        .trim_end()
        .parse()
        .map_err(|e| invalid(op, format!("the header is not a Python literal: {e}")))?;
    let shape = header_shape(op, &parsed)?;
    // The shape is checked: npyz's interpretation (dtype, order) cannot overflow now.
    let header = npyz::NpyHeader::from_reader(&bytes[..data_start])
        .map_err(|e| invalid(op, format!("bad header: {e}")))?;
    let ts = match header.dtype() {
        npyz::DType::Plain(ts) if ts.type_char() == TypeChar::Object => {
            return Err(invalid(
                op,
                "object arrays (pickled Python objects) are refused".into(),
            ));
        }
        npyz::DType::Plain(ts) => ts,
        other => {
            return Err(invalid(
                op,
                format!(
                    "structured dtype {} is not supported",
                    other.descr().chars().take(200).collect::<String>()
                ),
            ));
        }
    };
    let dtype = from_type_str(&ts).ok_or_else(|| {
        invalid(
            op,
            format!("dtype {ts} is not supported (bool, u8, i8, i16, i32, i64, f16, f32, f64)"),
        )
    })?;
    let raw = &bytes[data_start..];
    crate::interop::check_file_data(op, "", &shape, dtype, raw)?;
    let size = dtype.size();
    let swap = size > 1
        && match ts.endianness() {
            Endianness::Big => cfg!(target_endian = "little"),
            Endianness::Little => cfg!(target_endian = "big"),
            _ => false,
        };
    let storage = if swap {
        let mut v = raw.to_vec();
        swap_bytes(&mut v, size);
        Storage::from_bytes(&v, dtype, device)?
    } else {
        Storage::from_bytes(raw, dtype, device)?
    };
    if header.order() == Order::Fortran && shape.len() > 1 {
        // Column-major data is the row-major data of the reversed shape, transposed.
        let reversed: Vec<usize> = shape.iter().rev().copied().collect();
        let perm: Vec<usize> = (0..shape.len()).rev().collect();
        Tensor::from_storage(storage, &reversed)?
            .permute(perm.as_slice())?
            .contiguous()
    } else {
        Tensor::from_storage(storage, &shape)
    }
}

/// Runs `f` on the bytes of the regular file at `path`, read through a read-only mapping;
/// reasons of `InvalidArgument` errors name the path.
fn with_file<T>(op: &'static str, path: &Path, f: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
    let shown = path.display().to_string();
    // An I/O failure is `InvalidArgument` naming the path, as for safetensors.
    let io = |e: genesis_storage::Error| match e {
        genesis_storage::Error::Io { path, message } => invalid(op, format!("{path}: {message}")),
        e => e.into(),
    };
    let len = genesis_storage::regular_file_len(path).map_err(io)?;
    if len == 0 {
        return f(&[]).map_err(|e| context(&shown, e));
    }
    let len = usize::try_from(len).map_err(|_| {
        invalid(
            op,
            format!("{shown}: {len} bytes is more than this machine can address"),
        )
    })?;
    let file = Storage::map_file(path, DType::U8, 0, len, MapMode::ReadOnly).map_err(io)?;
    let bytes = file
        .host_bytes()
        .ok_or_else(|| invalid(op, "a mapped file is not readable on the host".into()))?;
    let out = f(&bytes).map_err(|e| context(&shown, e))?;
    drop(bytes);
    // The file may have been truncated while it was read (the lost bytes read as zeros).
    file.check_mapping().map_err(io)?;
    Ok(out)
}

/// Writes `path` through `write` on a temporary file beside it, renamed over `path` when done.
fn write_atomically(
    op: &'static str,
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| invalid(op, format!("{}: not a file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let io = |e: std::io::Error| invalid(op, format!("{}: {e}", path.display()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        write(&mut file)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Saves `tensor` to a NumPy `.npy` file at `path` (`numpy.save`), replacing any file there.
///
/// The tensor may be on any device and need not be contiguous (it is copied to the host and
/// written in C order, little-endian). bfloat16 has no NumPy dtype: saving one is an error
/// that says to convert first. The file is written beside `path` and renamed over it, so a
/// reader never sees it half written.
///
/// ```
/// use genesis::{Device, Tensor, load_npy, save_npy};
///
/// let path = std::env::temp_dir().join(format!("genesis-doc-{}.npy", std::process::id()));
/// let t = Tensor::from_slice(&[1.5f32, -2.0, 3.25, 4.0], &[2, 2], Device::Cpu)?;
/// save_npy(&t, &path)?;
/// let back = load_npy(&path, Device::Cpu)?;
/// assert_eq!(back.shape(), [2, 2]);
/// assert_eq!(back.to_vec::<f32>()?, [1.5, -2.0, 3.25, 4.0]);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn save_npy(tensor: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    const OP: &str = "save_npy";
    let path = path.as_ref();
    let bytes = encode(OP, tensor)?;
    write_atomically(OP, path, |file| {
        file.write_all(&bytes)
            .map_err(|e| invalid(OP, format!("{}: {e}", path.display())))
    })
}

/// Loads the array of the NumPy `.npy` file at `path` onto `device` (`numpy.load`).
///
/// Reads bool, uint8, int8, int16, int32, int64, float16, float32 and float64 arrays, little-
/// or big-endian, in C or Fortran order (a Fortran-order array loads with its elements in
/// their logical places), of any rank up to [`MAX_RANK`](crate::MAX_RANK), 0-d and empty ones
/// included. Errors (never panics or hangs), naming the path, on a path that is not a regular
/// file (a FIFO, a device such as `/dev/zero`, a directory: refused before it is opened), on
/// I/O failures, on a file that is not a valid `.npy` (bad magic or version, a header over
/// NumPy's 10,000-byte limit or not a dict, a truncated file, data longer or shorter than the
/// header's shape needs: checked before anything is allocated for it), on object (pickled)
/// arrays, structured dtypes and any other dtype Genesis lacks. See [`save_npy`] for an
/// example.
pub fn load_npy(path: impl AsRef<Path>, device: Device) -> Result<Tensor> {
    const OP: &str = "load_npy";
    with_file(OP, path.as_ref(), |bytes| decode(OP, bytes, device))
}

/// Saves named tensors to a NumPy `.npz` archive at `path` (`numpy.savez`: uncompressed,
/// one `NAME.npy` member per tensor), replacing any file there.
///
/// Names must be distinct and non-empty; tensors are written as by [`save_npy`] (any device,
/// any view, not bfloat16). The archive is written beside `path` and renamed over it.
///
/// ```
/// use genesis::{Device, Tensor, load_npz, save_npz};
///
/// let path = std::env::temp_dir().join(format!("genesis-doc-{}.npz", std::process::id()));
/// let w = Tensor::from_slice(&[1i64, 2, 3], &[3], Device::Cpu)?;
/// let b = Tensor::from_slice(&[0.5f32, 2.0], &[2], Device::Cpu)?;
/// save_npz(&[("w", &w), ("b", &b)], &path)?;
/// let loaded = load_npz(&path, Device::Cpu)?; // sorted by name
/// assert_eq!(loaded[0].0, "b");
/// assert_eq!(loaded[1].1.to_vec::<i64>()?, [1, 2, 3]);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn save_npz(tensors: &[(&str, &Tensor)], path: impl AsRef<Path>) -> Result<()> {
    const OP: &str = "save_npz";
    let path = path.as_ref();
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for (name, _) in tensors {
        if name.is_empty() {
            return Err(invalid(OP, "a tensor name is empty".into()));
        }
        if !seen.insert(*name) {
            return Err(invalid(OP, format!("two tensors are named {name:?}")));
        }
    }
    let zip_err = |e: zip::result::ZipError| invalid(OP, format!("{}: {e}", path.display()));
    write_atomically(OP, path, |file| {
        let mut zip = zip::ZipWriter::new(file);
        for (name, t) in tensors {
            let bytes = encode(OP, t).map_err(|e| context(&format!("tensor {name:?}"), e))?;
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored)
                .large_file(bytes.len() as u64 >= u64::from(u32::MAX));
            zip.start_file(format!("{name}.npy"), options)
                .map_err(zip_err)?;
            zip.write_all(&bytes)
                .map_err(|e| invalid(OP, format!("{}: {e}", path.display())))?;
        }
        zip.finish().map_err(zip_err)?;
        Ok(())
    })
}

/// Reads one archive member, never past its declared size nor more than deflate can expand
/// its compressed bytes to; memory grows only as data arrives.
fn read_member(
    op: &'static str,
    member: &mut impl Read,
    declared: u64,
    compressed: u64,
) -> Result<Vec<u8>> {
    if declared
        > compressed
            .saturating_mul(MAX_DEFLATE_RATIO)
            .saturating_add(1024)
    {
        return Err(invalid(
            op,
            format!("claims {declared} bytes from {compressed} compressed bytes"),
        ));
    }
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = member
            .read(&mut chunk)
            .map_err(|e| invalid(op, format!("reading: {e}")))?;
        if n == 0 {
            return Ok(out);
        }
        if (out.len() + n) as u64 > declared {
            return Err(invalid(
                op,
                format!("holds more than its declared {declared} bytes"),
            ));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Loads the arrays of the NumPy `.npz` archive at `path` onto `device`, sorted by name (the
/// member's name without `.npy`); both `numpy.savez` and `numpy.savez_compressed` archives.
///
/// Each member is read as by [`load_npy`], with its errors naming the member. Errors (never
/// panics or hangs), naming the path, on a path that is not a regular file, on a file that is
/// not a zip archive, on a member not named `*.npy`, on two members of one name, on a
/// compression other than stored or deflate, and on a member that holds more than its
/// declared size or declares more than its compressed bytes can hold. A compressed member is
/// read as it decompresses, never past its declared size. See [`save_npz`] for an example.
pub fn load_npz(path: impl AsRef<Path>, device: Device) -> Result<Vec<(String, Tensor)>> {
    const OP: &str = "load_npz";
    with_file(OP, path.as_ref(), |bytes| {
        let zip_err = |e: zip::result::ZipError| invalid(OP, format!("not a valid .npz file: {e}"));
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(zip_err)?;
        let mut out = Vec::with_capacity(archive.len().min(4096));
        for i in 0..archive.len() {
            let mut member = archive.by_index(i).map_err(zip_err)?;
            let file_name = member.name().map_err(zip_err)?.into_owned();
            let what = format!("member {file_name:?}");
            let name = file_name
                .strip_suffix(".npy")
                .ok_or_else(|| invalid(OP, format!("{what} is not a .npy file")))?
                .to_owned();
            let (declared, compressed) = (member.size(), member.compressed_size());
            let data = read_member(OP, &mut member, declared, compressed)
                .map_err(|e| context(&what, e))?;
            let t = decode(OP, &data, device).map_err(|e| context(&what, e))?;
            out.push((name, t));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(invalid(OP, format!("two members are named {:?}", w[0].0)));
        }
        Ok(out)
    })
}
