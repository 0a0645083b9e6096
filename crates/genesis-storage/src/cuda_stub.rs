//! CUDA memory in a build without the `cuda` feature: types with no values, so that the storage
//! code names CUDA memory without feature gates, and creating any is the typed error
//! [`Error::CudaNotCompiled`]. Every method of a value that cannot exist is an empty `match`.

use genesis_kernels::attention::{AttentionShape, BackwardStrides, ForwardStrides};
use genesis_kernels::classifier::{ClassifierShape, Reduction};
use genesis_kernels::classify::FloatClass;
use genesis_kernels::gather::Along;
use genesis_kernels::grad::ActGrad;
use genesis_kernels::index::{IndexDesc, Keys, Rows16, Strided};
use genesis_kernels::layernorm::LayerNormShape;
use genesis_kernels::optim::AdamStep;
use genesis_kernels::scan::ScanOp;
use genesis_kernels::softmax::SoftmaxOp;
use genesis_kernels::triangle::Triangle;
use genesis_kernels::{BinaryNd, BinaryOp, CompareOp, MatmulPrecision, MatmulShape};
use genesis_kernels::{ReduceOp, ReduceShape};
use genesis_kernels::{Rhs, Sampler, UnaryOp, WhereNd};

use crate::compute::{AdamParts, AttentionGrads, CeLogits, Compute, LnResidual};
use crate::storage::Inner;
use crate::{DType, Device, Error, PoolInfo, Result};

/// Device memory of a pool: none without the `cuda` feature.
#[derive(Debug)]
pub(crate) enum CudaMem {}

/// Pinned host memory: none without the `cuda` feature.
#[derive(Debug)]
pub(crate) enum PinnedMem {}

#[allow(clippy::unused_self)]
impl CudaMem {
    pub(crate) fn new(ordinal: usize, _nbytes: usize) -> Result<CudaMem> {
        Err(Error::CudaNotCompiled {
            device: Device::Cuda(ordinal),
        })
    }

    pub(crate) fn ordinal(&self) -> usize {
        match *self {}
    }

    pub(crate) fn ptr(&self) -> u64 {
        match *self {}
    }

    pub(crate) fn record_stream(&self, _stream: u64) -> Result<()> {
        match *self {}
    }

    pub(crate) fn pool_info(&self) -> Option<PoolInfo> {
        match *self {}
    }

    pub(crate) fn zero(&mut self, _bytes: usize) -> Result<()> {
        match *self {}
    }

    pub(crate) fn upload_pageable(&mut self, _host: &crate::CpuStorage) -> Result<()> {
        match *self {}
    }

    pub(crate) fn write_from_host(&mut self, _at: usize, _host: &[u8]) -> Result<()> {
        match *self {}
    }

    pub(crate) fn read_to_host(&self, _at: usize, _host: &mut [u8]) -> Result<()> {
        match *self {}
    }

    pub(crate) fn copy_from_device(
        &mut self,
        _dst_at: usize,
        _src: &CudaMem,
        _src_at: usize,
        _bytes: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn copy_within_device(
        &mut self,
        _dst_at: usize,
        _src: &CudaMem,
        _src_at: usize,
        _bytes: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn copy_2d_from_device(
        &mut self,
        _dst: (usize, usize),
        _src: &CudaMem,
        _src_rows: (usize, usize),
        _width: usize,
        _rows: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn copy_2d_from_host(
        &mut self,
        _dst: (usize, usize),
        _host: &[u8],
        _src_rows: (usize, usize),
        _width: usize,
        _rows: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn copy_2d_to_host(
        &self,
        _host: &mut [u8],
        _dst: (usize, usize),
        _src_rows: (usize, usize),
        _width: usize,
        _rows: usize,
    ) -> Result<()> {
        match *self {}
    }

    pub(crate) fn strided_copy_from(
        &mut self,
        _src: &CudaMem,
        _sizes: (usize, usize, usize),
        _desc: &genesis_kernels::StridedCopy,
        _transpose: Option<(usize, usize, usize, usize, usize)>,
    ) -> Result<()> {
        match *self {}
    }
}

/// A device event: none without the `cuda` feature.
#[derive(Debug)]
pub(crate) enum Event {}

impl Event {
    pub(crate) fn is_complete(&self) -> genesis_cuda::Result<bool> {
        match *self {}
    }

    pub(crate) fn synchronize(&self) -> genesis_cuda::Result<()> {
        match *self {}
    }
}

/// `crate::batched_copy` without streams: every pair copied in turn.
pub(crate) fn batched_copy(
    pairs: &mut [(&mut crate::Storage, &crate::Storage)],
    _streams: usize,
) -> Result<()> {
    for (dst, src) in pairs.iter_mut() {
        dst.copy_from(src)?;
    }
    Ok(())
}

impl PinnedMem {
    pub(crate) fn new(_nbytes: usize) -> Result<PinnedMem> {
        Err(Error::CudaNotCompiled {
            device: Device::Cuda(0),
        })
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match *self {}
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        match *self {}
    }
}

impl Compute for CudaMem {
    type Part<'a> = genesis_cuda::DeviceSpan<'a, u8>;
    type PartMut<'a> = genesis_cuda::DeviceSpanMut<'a, u8>;

    fn one_hot(&self, _: usize, _: usize, _: usize, _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn act_grad(
        &self,
        _: ActGrad,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
        _: Option<(usize, &mut CudaMem)>,
    ) -> Result<()> {
        match *self {}
    }

    fn attention_forward(
        &self,
        _: DType,
        _: &AttentionShape,
        _: &ForwardStrides,
        _: [usize; 3],
        _: [usize; 3],
        _: &CudaMem,
        _: &CudaMem,
        _: &mut CudaMem,
        _: usize,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn cross_entropy(
        &self,
        _: DType,
        _: &ClassifierShape,
        _: Reduction,
        _: usize,
        _: (&CudaMem, usize),
        _: [&mut CudaMem; 2],
        _: &mut CudaMem,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn cross_entropy_backward(
        logits: CeLogits<'_, CudaMem>,
        _: DType,
        _: &ClassifierShape,
        _: Reduction,
        _: (&CudaMem, usize),
        _: &CudaMem,
        _: &CudaMem,
        _: &mut CudaMem,
    ) -> Result<()> {
        match logits {
            CeLogits::Separate(l, ..) => match *l {},
            CeLogits::InPlace(l, _) => match *l {},
        }
    }

    fn layer_norm(
        &self,
        _: (DType, DType),
        _: &LayerNormShape,
        _: usize,
        _: Option<LnResidual<'_, CudaMem>>,
        _: Option<(&CudaMem, usize)>,
        _: Option<(&CudaMem, usize)>,
        _: &mut CudaMem,
        _: &mut CudaMem,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn layer_norm_backward(
        &self,
        _: (DType, DType),
        _: &LayerNormShape,
        _: usize,
        _: (&CudaMem, usize),
        _: Option<(&CudaMem, usize)>,
        _: [&CudaMem; 2],
        _: (&mut CudaMem, usize, bool),
        _: Option<&mut CudaMem>,
        _: Option<&mut CudaMem>,
        _: Option<&mut CudaMem>,
        _: Option<&mut CudaMem>,
    ) -> Result<()> {
        match *self {}
    }

    fn attention_backward(
        &self,
        _: DType,
        _: &AttentionShape,
        _: &BackwardStrides,
        _: [usize; 5],
        _: [usize; 5],
        _: [&CudaMem; 4],
        _: &CudaMem,
        _: AttentionGrads<'_, CudaMem>,
    ) -> Result<bool> {
        match *self {}
    }

    fn softmax_grad(
        &self,
        _: bool,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn adam<'a>(
        on: &CudaMem,
        _: &AdamStep,
        _: DType,
        _: Vec<AdamParts<Self::PartMut<'a>, Self::Part<'a>>>,
    ) -> Result<()> {
        match *on {}
    }

    fn clip_grad_norm<'a>(
        _: Vec<(DType, Self::PartMut<'a>)>,
        _: f64,
        out: &mut CudaMem,
    ) -> Result<()> {
        match *out {}
    }

    fn binary(
        &self,
        _: BinaryOp,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn binary_mixed(
        &self,
        _: BinaryOp,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
        _: usize,
        _: bool,
    ) -> Result<()> {
        match *self {}
    }

    fn binary_assign(
        &mut self,
        _: BinaryOp,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn compare_nd(
        &self,
        _: CompareOp,
        _: DType,
        _: &BinaryNd,
        _: Rhs<&CudaMem, &[u8]>,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn where_nd(
        &self,
        _: usize,
        _: &WhereNd,
        _: Rhs<&CudaMem, &[u8]>,
        _: Rhs<&CudaMem, &[u8]>,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn binary_nd(
        &self,
        _: BinaryOp,
        _: DType,
        _: &BinaryNd,
        _: Rhs<&CudaMem, &[u8]>,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn binary_nd_assign(
        &mut self,
        _: BinaryOp,
        _: DType,
        _: usize,
        _: &BinaryNd,
        _: Rhs<&CudaMem, &[u8]>,
    ) -> Result<()> {
        match *self {}
    }

    fn unary(
        &self,
        _: UnaryOp,
        _: DType,
        _: usize,
        _: &mut CudaMem,
        _: usize,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn unary_assign(&mut self, _: UnaryOp, _: DType, _: usize, _: usize) -> Result<()> {
        match *self {}
    }

    fn triangle(&self, _: &Triangle, _: usize, _: usize, _: usize, _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn classify(&self, _: FloatClass, _: DType, _: usize, _: usize, _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn nan_to_num(&self, _: DType, _: usize, _: usize, _: [f64; 3], _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn compare(
        &self,
        _: CompareOp,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn select(
        &self,
        _: usize,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn fill(&mut self, _: DType, _: &[u8], _: usize) -> Result<()> {
        match *self {}
    }

    fn cast(&self, _: DType, _: usize, _: DType, _: &mut CudaMem, _: usize) -> Result<()> {
        match *self {}
    }

    fn reduce(
        &self,
        _: ReduceOp,
        _: DType,
        _: usize,
        _: ReduceShape,
        _: &mut CudaMem,
        _: Option<&mut CudaMem>,
    ) -> Result<()> {
        match *self {}
    }

    fn clamp(
        &self,
        _: DType,
        _: usize,
        _: usize,
        _: Option<&[u8]>,
        _: Option<&[u8]>,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn var(
        &self,
        _: DType,
        _: usize,
        _: ReduceShape,
        _: f64,
        _: bool,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn scan(&self, _: ScanOp, _: DType, _: usize, _: ReduceShape, _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn softmax(
        &self,
        _: SoftmaxOp,
        _: DType,
        _: usize,
        _: ReduceShape,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn rows_by_key(
        &self,
        _: DType,
        _: usize,
        _: &genesis_kernels::gather::RowsByKey,
        _: (&CudaMem, usize),
        _: (&CudaMem, usize),
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn gather_along(
        &self,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &Along,
        _: &mut CudaMem,
        _: &dyn Fn() -> bool,
    ) -> Result<()> {
        match *self {}
    }

    fn scatter_along(
        &mut self,
        _: DType,
        _: bool,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &Along,
        _: &dyn Fn() -> bool,
    ) -> Result<()> {
        match *self {}
    }

    fn sort_rows(
        &self,
        _: DType,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: bool,
        _: &mut CudaMem,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn matmul(
        &self,
        _: DType,
        _: MatmulShape,
        _: genesis_kernels::matmul::MatmulLayout,
        _: MatmulPrecision,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: Option<(&CudaMem, usize)>,
        _: &mut CudaMem,
        _: usize,
    ) -> Result<bool> {
        match *self {}
    }

    fn random(&mut self, _: DType, _: Sampler, _: u64, _: u64, _: usize) -> Result<()> {
        match *self {}
    }

    fn masked_fill(&mut self, _: usize, _: &CudaMem, _: usize, _: usize, _: &[u8]) -> Result<()> {
        match *self {}
    }

    fn masked_select(
        &self,
        _: usize,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: usize,
    ) -> Result<(Inner, usize)> {
        match *self {}
    }

    fn nonzero(&self, _: usize, _: usize) -> Result<(Inner, usize)> {
        match *self {}
    }

    unsafe fn index_gather(
        &self,
        _: usize,
        _: usize,
        _: &IndexDesc,
        _: &CudaMem,
        _: Option<&Rows16>,
        _: &mut CudaMem,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    unsafe fn index_scatter(
        &mut self,
        _: usize,
        _: usize,
        _: &CudaMem,
        _: &IndexDesc,
        _: &CudaMem,
        _: &CudaMem,
        _: Option<&Rows16>,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    unsafe fn index_scatter_add(
        &mut self,
        _: DType,
        _: usize,
        _: &CudaMem,
        _: &IndexDesc,
        _: &CudaMem,
        _: [&CudaMem; 4],
        _: usize,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    fn index_normalise(
        &mut self,
        _: usize,
        _: usize,
        _: &CudaMem,
        _: bool,
        _: &Strided,
        _: usize,
        _: &mut CudaMem,
        _: usize,
    ) -> Result<()> {
        match *self {}
    }

    unsafe fn index_dead_positions(
        &self,
        _: usize,
        _: &Keys,
        _: &mut CudaMem,
        _: usize,
        _: &CudaMem,
        _: usize,
        _: &mut CudaMem,
    ) -> Result<()> {
        match *self {}
    }

    fn index_unravel(&self, _: usize, _: &Strided, _: bool, _: &mut CudaMem) -> Result<()> {
        match *self {}
    }

    fn index_gather_rows_checked(
        &self,
        _: &Rows16,
        _: &CudaMem,
        _: bool,
        _: usize,
        _: usize,
        _: usize,
        _: bool,
        _: &mut CudaMem,
    ) -> Result<bool> {
        match *self {}
    }
}

/// The exporting side of a CUDA storage shared with another process: none without the `cuda`
/// feature.
#[cfg(unix)]
#[derive(Debug)]
pub enum CudaExport {}

/// The importing side of a CUDA storage shared by another process: none without the `cuda`
/// feature.
#[cfg(unix)]
#[derive(Debug)]
pub enum CudaImport {}

#[cfg(unix)]
#[allow(clippy::unused_self)]
impl CudaExport {
    /// Records this process's event and tells the importer (see the `cuda` build).
    pub fn signal(&self) -> Result<()> {
        match *self {}
    }

    /// Waits for the importer's signal (see the `cuda` build).
    pub fn wait(&self, _timeout: std::time::Duration) -> Result<()> {
        match *self {}
    }

    /// Whether the importer has let go of the storage.
    pub fn is_released(&self) -> bool {
        match *self {}
    }

    /// Waits until the importer has let go of the storage.
    pub fn wait_released(&self, _timeout: std::time::Duration) -> Result<()> {
        match *self {}
    }
}

#[cfg(unix)]
#[allow(clippy::unused_self)]
impl CudaImport {
    /// Records this process's event and tells the exporter (see the `cuda` build).
    pub fn signal(&self) -> Result<()> {
        match *self {}
    }

    /// Waits for the exporter's signal (see the `cuda` build).
    pub fn wait(&self, _timeout: std::time::Duration) -> Result<()> {
        match *self {}
    }
}

#[cfg(unix)]
impl crate::Storage {
    /// Shares a CUDA storage with another process: without the `cuda` feature there is none,
    /// so the storage is host memory ([`Error::NotOnDevice`]).
    pub fn export_cuda(
        self: &std::sync::Arc<Self>,
        _conn: std::os::unix::net::UnixStream,
    ) -> Result<CudaExport> {
        Err(Error::NotOnDevice {
            op: "export_cuda",
            device: self.device(),
        })
    }

    /// Maps a CUDA storage of another process: [`Error::CudaNotCompiled`] without the `cuda`
    /// feature.
    pub fn import_cuda(
        _conn: std::os::unix::net::UnixStream,
    ) -> Result<(crate::Storage, CudaImport)> {
        Err(Error::CudaNotCompiled {
            device: Device::Cuda(0),
        })
    }
}
