//! Interop with other tools: the [safetensors] file format (HuggingFace's, read by PyTorch,
//! JAX, candle, ...) and, with the `ndarray` feature, [`ndarray`] arrays.
//!
//! [safetensors]: https://github.com/huggingface/safetensors

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use genesis_storage::{DType, Device, MapMode, Storage};
use safetensors::tensor::{Dtype as StDtype, SafeTensors, View as StView};

use crate::{Error, Result, Tensor};

/// The key of the header that holds the free-form string metadata; no tensor may be named so.
const METADATA_KEY: &str = "__metadata__";

fn invalid(op: &'static str, reason: String) -> Error {
    Error::InvalidArgument { op, reason }
}

fn to_st_dtype(dtype: DType) -> StDtype {
    match dtype {
        DType::Bool => StDtype::BOOL,
        DType::U8 => StDtype::U8,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
    }
}

fn from_st_dtype(dtype: StDtype) -> Option<DType> {
    Some(match dtype {
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::I32 => DType::I32,
        StDtype::I64 => DType::I64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        _ => return None,
    })
}

/// Reverses the bytes of each element: safetensors data is little-endian.
#[cfg(target_endian = "big")]
fn swap_bytes(bytes: &mut [u8], size: usize) {
    if size > 1 {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
}

/// A tensor's elements on the host, row-major and little-endian, as safetensors wants them.
struct HostTensor<'a> {
    dtype: StDtype,
    shape: Vec<usize>,
    data: HostData<'a>,
}

/// The bytes of a [`HostTensor`]: a range of a host storage, read-locked (no tensor sharing
/// the storage writes it meanwhile), or a copy.
enum HostData<'a> {
    Locked(genesis_storage::HostBytes<'a>, std::ops::Range<usize>),
    Owned(Vec<u8>),
}

impl HostData<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            HostData::Locked(b, r) => &b[r.clone()],
            HostData::Owned(v) => v,
        }
    }
}

impl HostTensor<'_> {
    /// Borrows the bytes of a contiguous host tensor; copies (gathers, and downloads from a
    /// device) otherwise.
    fn new(t: &Tensor) -> Result<HostTensor<'_>> {
        let size = t.dtype().size();
        let borrowed = if t.is_contiguous() {
            t.view.storage().host_bytes().and_then(|b| {
                let start = t.layout().offset().checked_mul(size)?;
                let end = start.checked_add(t.numel().checked_mul(size)?)?;
                (end <= b.len()).then_some(HostData::Locked(b, start..end))
            })
        } else {
            None
        };
        let data = match borrowed {
            Some(b) => b,
            None => HostData::Owned(t.view.contiguous()?.to_bytes()?),
        };
        #[cfg(target_endian = "big")]
        let data = {
            let mut v = data.bytes().to_vec();
            swap_bytes(&mut v, size);
            HostData::Owned(v)
        };
        Ok(HostTensor {
            dtype: to_st_dtype(t.dtype()),
            shape: t.shape().to_vec(),
            data,
        })
    }
}

impl StView for &HostTensor<'_> {
    fn dtype(&self) -> StDtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data.bytes())
    }

    fn data_len(&self) -> usize {
        self.data.bytes().len()
    }
}

/// The tensors' host copies, after checking their names.
fn prepare<'a>(op: &'static str, tensors: &[(&str, &'a Tensor)]) -> Result<Vec<HostTensor<'a>>> {
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for (name, _) in tensors {
        if *name == METADATA_KEY {
            return Err(invalid(
                op,
                format!("a tensor may not be named {METADATA_KEY:?} (the header's metadata key)"),
            ));
        }
        if !seen.insert(*name) {
            return Err(invalid(op, format!("two tensors are named {name:?}")));
        }
    }
    tensors.iter().map(|(_, t)| HostTensor::new(t)).collect()
}

/// Serializes named tensors into the bytes of a safetensors file, with optional string
/// `metadata` (the header's `"__metadata__"`).
///
/// Tensors may be on any device (they are copied to the host) and need not be contiguous
/// (their elements are written row-major). Names must be distinct and not `"__metadata__"`.
/// The file lists tensors as the safetensors crate orders them (by dtype alignment, then
/// name), whatever their order in `tensors`.
///
/// ```
/// use genesis::{Device, Tensor, deserialize_safetensors, serialize_safetensors};
///
/// let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
/// let bytes = serialize_safetensors(&[("w", &w)], None)?;
/// let back = deserialize_safetensors(&bytes, Device::Cpu)?;
/// assert_eq!(back[0].0, "w");
/// assert_eq!(back[0].1.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn serialize_safetensors(
    tensors: &[(&str, &Tensor)],
    metadata: Option<&HashMap<String, String>>,
) -> Result<Vec<u8>> {
    const OP: &str = "serialize_safetensors";
    let host = prepare(OP, tensors)?;
    let named = tensors.iter().map(|(name, _)| *name).zip(host.iter());
    safetensors::serialize(named, metadata.cloned()).map_err(|e| invalid(OP, e.to_string()))
}

/// Saves named tensors to a safetensors file at `path` (see [`save_safetensors_with_metadata`]).
///
/// ```
/// use genesis::{Device, Tensor, load_safetensors, save_safetensors};
///
/// let path = std::env::temp_dir().join(format!("genesis-doc-{}.safetensors", std::process::id()));
/// let w = Tensor::from_slice(&[1.5f32, -2.0, 3.25], &[3], Device::Cpu)?;
/// let step = Tensor::from_slice(&[7i64], (), Device::Cpu)?;
/// save_safetensors(&[("w", &w), ("step", &step)], &path)?;
///
/// let loaded = load_safetensors(&path, Device::Cpu)?; // sorted by name
/// assert_eq!(loaded[0].0, "step");
/// assert_eq!(loaded[0].1.to_vec::<i64>()?, [7]);
/// assert_eq!(loaded[1].0, "w");
/// assert_eq!(loaded[1].1.to_vec::<f32>()?, [1.5, -2.0, 3.25]);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn save_safetensors(tensors: &[(&str, &Tensor)], path: impl AsRef<Path>) -> Result<()> {
    write_file("save_safetensors", tensors, None, path.as_ref())
}

/// Saves named tensors and string `metadata` (the header's `"__metadata__"`) to a safetensors
/// file at `path`, replacing any file there.
///
/// Tensors may be on any device (they are copied to the host first, so the host holds a copy
/// of every device tensor while the file is written) and need not be contiguous. Names must
/// be distinct and not `"__metadata__"`. The file is written beside `path` and then renamed
/// over it, so a reader never sees it half written.
pub fn save_safetensors_with_metadata(
    tensors: &[(&str, &Tensor)],
    metadata: &HashMap<String, String>,
    path: impl AsRef<Path>,
) -> Result<()> {
    write_file(
        "save_safetensors_with_metadata",
        tensors,
        Some(metadata),
        path.as_ref(),
    )
}

fn write_file(
    op: &'static str,
    tensors: &[(&str, &Tensor)],
    metadata: Option<&HashMap<String, String>>,
    path: &Path,
) -> Result<()> {
    let host = prepare(op, tensors)?;
    let named = tensors.iter().map(|(name, _)| *name).zip(host.iter());
    safetensors::serialize_to_file(named, metadata.cloned(), path)
        .map_err(|e| invalid(op, format!("{}: {e}", path.display())))
}

/// A shape read from a file must be addressable: zero-sized dimensions make any element count
/// fit, but the strides of the others must fit too (`what` prefixes the error).
pub(crate) fn check_file_shape(op: &'static str, what: &str, shape: &[usize]) -> Result<()> {
    let fits = shape
        .iter()
        .try_fold(1isize, |acc, &d| {
            acc.checked_mul(isize::try_from(d.max(1)).ok()?)
        })
        .is_some();
    if !fits {
        return Err(invalid(
            op,
            format!("{what}shape {shape:?} is too large to address"),
        ));
    }
    Ok(())
}

/// The data of an array read from a file must be exactly `shape`'s elements of `dtype` (and, for
/// bools, only 0 and 1 bytes); `what` prefixes the errors (which tensor of the file).
pub(crate) fn check_file_data(
    op: &'static str,
    what: &str,
    shape: &[usize],
    dtype: DType,
    raw: &[u8],
) -> Result<()> {
    let numel = crate::tensor::numel_of(op, shape)?;
    if Some(raw.len()) != numel.checked_mul(dtype.size()) {
        return Err(invalid(
            op,
            format!(
                "{what}shape {shape:?} of {dtype} needs {} bytes of data, the file has {}",
                numel.saturating_mul(dtype.size()),
                raw.len()
            ),
        ));
    }
    if dtype == DType::Bool && raw.iter().any(|&b| b > 1) {
        return Err(invalid(op, format!("{what}a bool byte is neither 0 nor 1")));
    }
    Ok(())
}

/// The tensors of a safetensors file (sorted by name) and its string metadata.
type Decoded = (Vec<(String, Tensor)>, HashMap<String, String>);

/// Reads the tensors (sorted by name) and the string metadata of a safetensors file's bytes.
fn decode(op: &'static str, bytes: &[u8], device: Device) -> Result<Decoded> {
    let (header_len, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| invalid(op, format!("not a valid safetensors file: {e}")))?;
    // `read_metadata` checked that the header fits and that the tensors' data exactly
    // covers the rest of the buffer.
    let data = bytes
        .get(8 + header_len..)
        .ok_or_else(|| invalid(op, "truncated safetensors file".into()))?;
    let mut infos: Vec<_> = meta.tensors().into_iter().collect();
    infos.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(infos.len());
    for (name, info) in infos {
        let dtype = from_st_dtype(info.dtype).ok_or_else(|| {
            invalid(
                op,
                format!(
                    "tensor {name:?} has dtype {:?}, which Genesis does not support",
                    info.dtype
                ),
            )
        })?;
        let shape = &info.shape;
        genesis_storage::check_rank(shape.len())?;
        check_file_shape(op, &format!("tensor {name:?}: "), shape)?;
        let (start, end) = info.data_offsets;
        let raw = data.get(start..end).ok_or_else(|| {
            invalid(
                op,
                format!("tensor {name:?}: data offsets {start}..{end} are out of the file"),
            )
        })?;
        check_file_data(op, &format!("tensor {name:?}: "), shape, dtype, raw)?;
        #[cfg(target_endian = "big")]
        let swapped = {
            let mut v = raw.to_vec();
            swap_bytes(&mut v, dtype.size());
            v
        };
        #[cfg(target_endian = "big")]
        let raw = &swapped[..];
        let storage = Storage::from_bytes(raw, dtype, device)?;
        out.push((name, Tensor::from_storage(storage, shape)?));
    }
    let metadata = meta.metadata().clone().unwrap_or_default();
    Ok((out, metadata))
}

/// Reads the tensors of a safetensors file's bytes onto `device`, sorted by name.
///
/// Errors (never panics) on bytes that are not a valid safetensors file (truncated, bad
/// header, offsets that do not match the shapes) and on a dtype Genesis lacks (`U16`, `U32`,
/// `U64`, the 8-bit and smaller floats, `C64`), naming the tensor. See
/// [`serialize_safetensors`] for an example.
pub fn deserialize_safetensors(bytes: &[u8], device: Device) -> Result<Vec<(String, Tensor)>> {
    Ok(decode("deserialize_safetensors", bytes, device)?.0)
}

/// [`deserialize_safetensors`], plus the header's string metadata (empty when it has none).
#[allow(clippy::type_complexity)] // spelled out for the docs
pub fn deserialize_safetensors_with_metadata(
    bytes: &[u8],
    device: Device,
) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
    decode("deserialize_safetensors_with_metadata", bytes, device)
}

/// Decodes the safetensors file at `path`, read through a read-only mapping of it.
///
/// The path must name a regular file (symbolic links followed): a FIFO, a device
/// (`/dev/zero`, `/dev/urandom`), a directory or a socket is refused before it is opened or
/// read ([`genesis_storage::regular_file_len`]), and the mapping refuses one swapped in
/// meanwhile. Only the bytes the header names are read: its length (at most the format's
/// 100 MB header limit) and the tensors' data, which must end exactly at the end of the file
/// (a truncated file, or one whose header claims more data than it holds, is an error before
/// any data is read). A file truncated by another process while it is read reads as zeros
/// there and is reported ([`genesis_storage::Error::MappingTruncated`]), never a crash.
fn decode_file(op: &'static str, path: &Path, device: Device) -> Result<Decoded> {
    let with_path = |e: Error| match e {
        Error::InvalidArgument { op, reason } => Error::InvalidArgument {
            op,
            reason: format!("{}: {reason}", path.display()),
        },
        e => e,
    };
    // An I/O failure is `InvalidArgument` naming the path, as for the writers.
    let io = |e: genesis_storage::Error| match e {
        genesis_storage::Error::Io { path, message } => invalid(op, format!("{path}: {message}")),
        e => e.into(),
    };
    let len = genesis_storage::regular_file_len(path).map_err(io)?;
    if len < 8 {
        return Err(with_path(invalid(
            op,
            format!(
                "not a valid safetensors file: {len} bytes, too short for the 8-byte header length"
            ),
        )));
    }
    let len = usize::try_from(len).map_err(|_| {
        with_path(invalid(
            op,
            format!("{len} bytes is more than this machine can address"),
        ))
    })?;
    let file = Storage::map_file(path, DType::U8, 0, len, MapMode::ReadOnly).map_err(io)?;
    let bytes = file
        .host_bytes()
        .ok_or_else(|| invalid(op, "a mapped file is not readable on the host".into()))?;
    let decoded = decode(op, &bytes, device).map_err(with_path)?;
    drop(bytes);
    // The file may have been truncated while it was read (the lost bytes read as zeros).
    file.check_mapping().map_err(io)?;
    Ok(decoded)
}

/// Loads the tensors of the safetensors file at `path` onto `device`, sorted by name (the
/// order of a file's tensors is not meaningful: writers sort them by alignment).
///
/// The file is mapped read-only and each tensor is copied from it to `device`. Errors (never
/// panics or hangs) on I/O failures (the message names the path), on a path that is not a
/// regular file ([`genesis_storage::Error::NotRegularFile`]: a FIFO, a device such as
/// `/dev/zero`, a directory, a socket, or a symbolic link to one), on a file that is not valid
/// safetensors (including a truncated one, a header over the format's 100 MB limit, and a
/// shape of more than [`MAX_RANK`](crate::MAX_RANK) dimensions), and on a dtype Genesis lacks
/// (`U16`, `U32`, `U64`, the 8-bit and smaller floats, `C64`), naming the tensor. Only the
/// bytes the header names are read. See [`save_safetensors`] for an example.
pub fn load_safetensors(path: impl AsRef<Path>, device: Device) -> Result<Vec<(String, Tensor)>> {
    Ok(decode_file("load_safetensors", path.as_ref(), device)?.0)
}

/// [`load_safetensors`] as a map from name to tensor.
pub fn load_safetensors_map(
    path: impl AsRef<Path>,
    device: Device,
) -> Result<BTreeMap<String, Tensor>> {
    Ok(decode_file("load_safetensors_map", path.as_ref(), device)?
        .0
        .into_iter()
        .collect())
}

/// [`load_safetensors`], plus the header's string metadata (empty when it has none).
#[allow(clippy::type_complexity)] // spelled out for the docs
pub fn load_safetensors_with_metadata(
    path: impl AsRef<Path>,
    device: Device,
) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
    decode_file("load_safetensors_with_metadata", path.as_ref(), device)
}

#[cfg(feature = "ndarray")]
mod nd {
    use genesis_storage::{Device, WithDType};
    use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};

    use crate::{Error, Result, Tensor};

    /// Conversions to and from [`ndarray`] arrays (feature `ndarray`).
    impl Tensor {
        /// The elements as an [`ndarray::ArrayD`] of this tensor's shape (copied to the host);
        /// `T` must match the dtype (`Bool` tensors have no such `T`).
        ///
        /// ```
        /// use genesis::{Device, Tensor};
        ///
        /// let t = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu)?;
        /// let a = t.to_ndarray::<i32>()?;
        /// assert_eq!(a.shape(), [2, 3]);
        /// assert_eq!(a[[1, 0]], 4);
        /// let back = Tensor::from_ndarray(&a.t(), Device::Cpu)?; // a transposed view
        /// assert_eq!(back.to_vec::<i32>()?, [1, 4, 2, 5, 3, 6]);
        /// # Ok::<(), genesis::Error>(())
        /// ```
        pub fn to_ndarray<T: WithDType>(&self) -> Result<ArrayD<T>> {
            if T::DTYPE != self.dtype() {
                return Err(Error::WrongElementType {
                    op: "to_ndarray",
                    dtype: self.dtype(),
                    requested: T::DTYPE,
                });
            }
            let values = self.to_vec::<T>()?;
            ArrayD::from_shape_vec(IxDyn(self.shape()), values).map_err(|e| {
                Error::InvalidArgument {
                    op: "to_ndarray",
                    reason: e.to_string(),
                }
            })
        }

        /// A tensor on `device` holding a copy of `array`'s elements in its logical
        /// (row-major) order, whatever its memory layout (transposed, sliced, negative
        /// strides).
        pub fn from_ndarray<T, S, D>(array: &ArrayBase<S, D>, device: Device) -> Result<Tensor>
        where
            T: WithDType,
            S: Data<Elem = T>,
            D: Dimension,
        {
            match array.as_slice() {
                Some(values) => Tensor::from_slice(values, array.shape(), device),
                None => {
                    let values: Vec<T> = array.iter().copied().collect();
                    Tensor::from_slice(&values, array.shape(), device)
                }
            }
        }
    }
}
