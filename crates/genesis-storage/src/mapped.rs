//! Memory-mapped files and named shared memory as host storages (zero-copy), through
//! `memmap2`.
//!
//! Shared memory is a file in `/dev/shm` (POSIX shared memory is exactly that on Linux; other
//! systems use the temporary directory): `create_shared` makes it (and fails if the name
//! exists), `attach_shared` maps an existing one, `unlink_shared` removes the name (mappings
//! stay valid until dropped).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::{DType, Error, Result};

/// How a file is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// Read only: writes through the storage are refused.
    ReadOnly,
    /// Read and write, shared with the file (`flush` writes back).
    ReadWrite,
}

#[derive(Debug)]
pub(crate) enum Map {
    Ro(Mmap),
    Rw(MmapMut),
}

/// A mapped region and where it came from.
#[derive(Debug)]
pub(crate) struct Mapped {
    pub(crate) map: Map,
    pub(crate) path: PathBuf,
    pub(crate) shared_name: Option<String>,
}

impl Mapped {
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.map {
            Map::Ro(m) => m,
            Map::Rw(m) => m,
        }
    }

    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.map {
            Map::Ro(_) => None,
            Map::Rw(m) => Some(m),
        }
    }

    pub(crate) fn flush(&self) -> Result<()> {
        match &self.map {
            Map::Ro(_) => Ok(()),
            Map::Rw(m) => m.flush().map_err(|e| io(&self.path, e)),
        }
    }
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Maps `len` elements of `dtype` at byte `offset` of the file at `path`.
pub(crate) fn map_file(
    path: &Path,
    dtype: DType,
    offset: usize,
    len: usize,
    mode: MapMode,
) -> Result<Mapped> {
    if !offset.is_multiple_of(dtype.size()) {
        return Err(Error::MisalignedOffset {
            offset,
            align: dtype.size(),
        });
    }
    let nbytes = crate::cpu::byte_len(len, dtype)?;
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(mode == MapMode::ReadWrite)
        .open(path)
        .map_err(|e| io(path, e))?;
    let file_len = file.metadata().map_err(|e| io(path, e))?.len() as usize;
    let end = offset
        .checked_add(nbytes)
        .ok_or(Error::SizeOverflow { len, dtype })?;
    if end > file_len {
        return Err(Error::FileTooShort {
            path: path.display().to_string(),
            needed: end,
            len: file_len,
        });
    }
    let map = map_region(&file, path, offset, nbytes, mode)?;
    Ok(Mapped {
        map,
        path: path.to_path_buf(),
        shared_name: None,
    })
}

fn map_region(
    file: &File,
    path: &Path,
    offset: usize,
    nbytes: usize,
    mode: MapMode,
) -> Result<Map> {
    let mut opts = MmapOptions::new();
    opts.offset(offset as u64).len(nbytes);
    // SAFETY: the mapping aliases the file: if another process truncates it, reads past the
    // new end fault. Genesis documents that mapped and shared storages must not be truncated
    // while mapped; within the process, the storage owns the only Rust view of the bytes.
    let map = unsafe {
        match mode {
            MapMode::ReadOnly => opts.map(file).map(Map::Ro),
            MapMode::ReadWrite => opts.map_mut(file).map(Map::Rw),
        }
    };
    map.map_err(|e| io(path, e))
}

fn shm_dir() -> PathBuf {
    let dev_shm = Path::new("/dev/shm");
    if dev_shm.is_dir() {
        dev_shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The file behind shared memory `name`, after checking the name.
pub(crate) fn shm_path(name: &str) -> Result<PathBuf> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !ok {
        return Err(Error::BadSharedName {
            name: name.to_string(),
        });
    }
    Ok(shm_dir().join(format!("genesis-{name}")))
}

/// Creates shared memory `name` of `len` zeroed elements; fails if the name exists.
pub(crate) fn create_shared(name: &str, dtype: DType, len: usize) -> Result<Mapped> {
    let path = shm_path(name)?;
    let nbytes = crate::cpu::byte_len(len, dtype)?;
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::SharedExists {
                    name: name.to_string(),
                }
            } else {
                io(&path, e)
            }
        })?;
    file.set_len(nbytes as u64).map_err(|e| io(&path, e))?;
    let map = map_region(&file, &path, 0, nbytes, MapMode::ReadWrite)?;
    Ok(Mapped {
        map,
        path,
        shared_name: Some(name.to_string()),
    })
}

/// Attaches to existing shared memory `name`; its length must be a whole number of elements.
pub(crate) fn attach_shared(name: &str, dtype: DType) -> Result<(Mapped, usize)> {
    let path = shm_path(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::SharedNotFound {
                    name: name.to_string(),
                }
            } else {
                io(&path, e)
            }
        })?;
    let nbytes = file.metadata().map_err(|e| io(&path, e))?.len() as usize;
    if nbytes == 0 {
        return Err(Error::EmptyMapping);
    }
    if !nbytes.is_multiple_of(dtype.size()) {
        return Err(Error::LengthMismatch {
            op: "attach_shared",
            lhs: nbytes,
            rhs: dtype.size(),
        });
    }
    let map = map_region(&file, &path, 0, nbytes, MapMode::ReadWrite)?;
    Ok((
        Mapped {
            map,
            path,
            shared_name: Some(name.to_string()),
        },
        nbytes / dtype.size(),
    ))
}

/// Removes the name of shared memory `name`; existing mappings stay valid.
pub(crate) fn unlink_shared(name: &str) -> Result<()> {
    let path = shm_path(name)?;
    std::fs::remove_file(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::SharedNotFound {
                name: name.to_string(),
            }
        } else {
            io(&path, e)
        }
    })
}
