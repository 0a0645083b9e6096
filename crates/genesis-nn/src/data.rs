//! Mini-batches of tensors that share their first dimension (PyTorch's `TensorDataset` with a
//! `DataLoader`): [`DataLoader`].

use genesis::{DType, Device, Error, Generator, Result, Tensor};

/// An epoch's mini-batches of tensors that share their first dimension (the samples), PyTorch's
/// `DataLoader(TensorDataset(*tensors), batch_size, shuffle, drop_last)`: each item holds
/// the same rows of every tensor (`index_select` along dimension 0, on the tensors' device),
/// in order or, with a generator, in an order drawn from it anew for each epoch.
///
/// ```
/// use genesis::{DType, Device, Generator, Tensor};
/// use genesis_nn::data::DataLoader;
/// # fn main() -> genesis::Result<()> {
/// let x = Tensor::arange(0.0, 10.0, 1.0, DType::F32, Device::Cpu)?.reshape([5, 2])?;
/// let y = Tensor::arange(0.0, 5.0, 1.0, DType::I64, Device::Cpu)?;
/// let loader = DataLoader::new(&[&x, &y], 2)?;
/// let sizes: Vec<usize> = loader.epoch()?.map(|b| b.map(|b| b[1].numel())).collect::<genesis::Result<_>>()?;
/// assert_eq!(sizes, [2, 2, 1]);
/// let g = Generator::new(0);
/// let shuffled = DataLoader::new(&[&x, &y], 2)?.shuffle(&g).drop_last(true);
/// for batch in shuffled.epoch()? {
///     let batch = batch?;
///     assert_eq!(batch[0].shape(), [2, 2]);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DataLoader<'g> {
    tensors: Vec<Tensor>,
    batch_size: usize,
    shuffle: Option<&'g Generator>,
    drop_last: bool,
}

impl<'g> DataLoader<'g> {
    /// Batches of `batch_size` samples of `tensors` (at least one tensor of at least one
    /// dimension, all of one length along it and on one device; `batch_size` at least 1).
    pub fn new(tensors: &[&Tensor], batch_size: usize) -> Result<DataLoader<'g>> {
        let bad = |reason: String| Error::InvalidArgument {
            op: "DataLoader",
            reason,
        };
        let first = tensors
            .first()
            .ok_or_else(|| bad("needs at least one tensor".into()))?;
        if batch_size == 0 {
            return Err(bad(
                "batch_size should be a positive integer value, but got batch_size=0".into(),
            ));
        }
        let n = first.shape().first().copied();
        for t in tensors {
            if t.dim() == 0 || t.shape().first().copied() != n {
                return Err(bad(format!(
                    "every tensor needs the same length along dimension 0, got shapes {:?}",
                    tensors
                        .iter()
                        .map(|t| t.shape().to_vec())
                        .collect::<Vec<_>>()
                )));
            }
            if t.device() != first.device() {
                return Err(Error::DeviceMismatch {
                    op: "DataLoader",
                    lhs: first.device(),
                    rhs: t.device(),
                });
            }
        }
        Ok(DataLoader {
            tensors: tensors.iter().map(|&t| t.clone()).collect(),
            batch_size,
            shuffle: None,
            drop_last: false,
        })
    }

    /// Draws each epoch's order from `g` (its draws advance `g`, as every draw from it does).
    pub fn shuffle(mut self, g: &'g Generator) -> DataLoader<'g> {
        self.shuffle = Some(g);
        self
    }

    /// Leaves out the last batch when it is short.
    pub fn drop_last(mut self, on: bool) -> DataLoader<'g> {
        self.drop_last = on;
        self
    }

    /// The samples.
    pub fn len(&self) -> usize {
        self.tensors[0].shape()[0]
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches of an epoch.
    pub fn batches(&self) -> usize {
        if self.drop_last {
            self.len() / self.batch_size
        } else {
            self.len().div_ceil(self.batch_size)
        }
    }

    /// One epoch: the batches in order, or in a new order drawn from the generator.
    pub fn epoch(&self) -> Result<impl Iterator<Item = Result<Vec<Tensor>>> + '_> {
        let device = self.tensors[0].device();
        let order = match &self.shuffle {
            Some(g) => Some(
                g.randperm(self.len(), DType::I64, Device::Cpu)?
                    .to(device)?,
            ),
            None => None,
        };
        Ok((0..self.batches()).map(move |b| {
            let start = b * self.batch_size;
            let len = self.batch_size.min(self.len() - start);
            let idx = match &order {
                Some(o) => o.narrow(0, start as isize, len)?,
                None => {
                    Tensor::arange(start as f64, (start + len) as f64, 1.0, DType::I64, device)?
                }
            };
            self.tensors
                .iter()
                .map(|t| t.index_select(0, &idx))
                .collect()
        }))
    }
}
