//! [`HostGroup`]: the ranks of a group as threads of one process, exchanging tensors through
//! shared memory. It runs data parallelism ([`crate::DistributedDataParallel`],
//! [`crate::ZeroAdamW`]) on any device without NCCL, which is how its logic is tested on
//! machines without GPUs.

use std::sync::{Arc, Barrier, Mutex};

use genesis::{Tensor, no_grad};

use crate::comm::{Collectives, ReduceOp, Work};
use crate::{Error, Result};

/// What the ranks of one [`HostGroup`] share.
#[derive(Debug)]
struct Shared {
    barrier: Barrier,
    /// Each rank's contribution to the exchange under way.
    slots: Mutex<Vec<Option<Tensor>>>,
}

/// One rank of a group whose ranks are threads of this process (see the module
/// documentation). Every rank must call the same collectives in the same order, each from its
/// own thread; a collective returns when every rank has taken part (its [`Work`] is done).
/// Reductions add the ranks' tensors in rank order, so every rank gets the same bits; `Avg`
/// divides that sum by the group's size.
#[derive(Debug, Clone)]
pub struct HostGroup {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
}

impl HostGroup {
    /// The `size` ranks of a new group, rank `r` at index `r`.
    pub fn new(size: usize) -> Vec<HostGroup> {
        let shared = Arc::new(Shared {
            barrier: Barrier::new(size.max(1)),
            slots: Mutex::new(vec![None; size]),
        });
        (0..size)
            .map(|rank| HostGroup {
                rank,
                size,
                shared: Arc::clone(&shared),
            })
            .collect()
    }

    /// Every rank's copy of its `t` (flattened), in rank order.
    fn exchange(&self, t: &Tensor) -> Result<Vec<Tensor>> {
        let mine = no_grad(|| t.reshape([t.numel()])?.deep_clone())?;
        self.shared.slots.lock().unwrap_or_else(|p| p.into_inner())[self.rank] = Some(mine);
        self.shared.barrier.wait();
        let all: Vec<Option<Tensor>> = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Nobody writes the next exchange's slot before everyone has read this one.
        self.shared.barrier.wait();
        all.into_iter()
            .map(|t| {
                t.ok_or_else(|| Error::InvalidArgument {
                    op: "HostGroup",
                    reason: "a rank left no tensor".into(),
                })
            })
            .collect()
    }

    /// The reduction of every rank's `t` (flattened), in rank order.
    fn reduced(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let all = self.exchange(t)?;
        no_grad(|| {
            let mut acc = all[0].clone();
            for x in &all[1..] {
                acc = match op {
                    ReduceOp::Sum | ReduceOp::Avg => acc.add(x)?,
                    ReduceOp::Product => acc.mul(x)?,
                    ReduceOp::Max => acc.maximum(x)?,
                    ReduceOp::Min => acc.minimum(x)?,
                };
            }
            if op == ReduceOp::Avg && self.size > 1 {
                acc = acc.div(self.size as f64)?;
            }
            Ok(acc)
        })
    }
}

/// `t`'s elements, flattened (a view: `t` is contiguous).
fn flat(op: &'static str, t: &Tensor) -> Result<Tensor> {
    if !t.is_contiguous() {
        return Err(Error::NotContiguous {
            op,
            what: "tensor",
            shape: t.shape().to_vec(),
            strides: t.strides().to_vec(),
        });
    }
    Ok(t.reshape([t.numel()])?)
}

impl Collectives for HostGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        let r = self.reduced(tensor, op)?;
        no_grad(|| flat("all_reduce", tensor)?.copy_(&r).map_err(Error::from))?;
        Ok(Work::completed("all_reduce"))
    }

    fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<Work> {
        if root >= self.size {
            return Err(Error::InvalidArgument {
                op: "broadcast",
                reason: format!("root {root} is not a rank of a group of {}", self.size),
            });
        }
        let all = self.exchange(tensor)?;
        no_grad(|| {
            flat("broadcast", tensor)?
                .copy_(&all[root])
                .map_err(Error::from)
        })?;
        Ok(Work::completed("broadcast"))
    }

    fn reduce_scatter_tensor(&self, output: &Tensor, input: &Tensor, op: ReduceOp) -> Result<Work> {
        let name = "reduce_scatter_tensor";
        let n = output.numel();
        if input.numel() != n * self.size {
            return Err(Error::SizeMismatch {
                op: name,
                what: "input".into(),
                expected: n * self.size,
                found: input.numel(),
            });
        }
        let r = self.reduced(input, op)?;
        no_grad(|| {
            flat(name, output)?
                .copy_(&r.narrow(0, self.rank * n, n)?)
                .map_err(Error::from)
        })?;
        Ok(Work::completed(name))
    }

    fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        let name = "all_gather_into_tensor";
        if output.numel() != input.numel() * self.size {
            return Err(Error::SizeMismatch {
                op: name,
                what: "output".into(),
                expected: input.numel() * self.size,
                found: output.numel(),
            });
        }
        let all = self.exchange(input)?;
        let refs: Vec<&Tensor> = all.iter().collect();
        no_grad(|| {
            flat(name, output)?
                .copy_(&Tensor::cat(&refs, 0)?)
                .map_err(Error::from)
        })?;
        Ok(Work::completed(name))
    }
}
