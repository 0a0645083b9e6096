//! Data-parallel training: [`DistributedDataParallel`] reduces the gradients of a model's
//! parameters over a group while backward runs, and [`ZeroAdamW`] is AdamW with its state
//! sharded over the group (ZeRO stage 1).
//!
//! **One flat gradient buffer.** The gradients live in one allocation of the parameters'
//! dtype, split into buckets of about [`DdpOptions::bucket_cap_bytes`] (PyTorch's 25 MiB),
//! filled in reverse parameter order (the order in which backward produces gradients). Each
//! parameter's [`Tensor::grad`] *is* its view of that buffer once backward has produced it
//! (PyTorch's `gradient_as_bucket_view=True`): [`DistributedDataParallel::zero_grad`] drops
//! the gradients, each backward's hook copies a new gradient into its view and makes the view
//! the parameter's gradient, and later backwards (gradient accumulation) add into the view in
//! place. So a bucket is reduced where it lies, with no copy out of a bucket and no second
//! gradient-sized allocation, and the optimiser reads the reduced gradients where they are.
//!
//! **Reduction during backward.** A post-accumulate-grad hook on each parameter
//! ([`Tensor::register_post_accumulate_grad_hook`], run once a backward with the parameter's
//! whole gradient) marks it ready; when every parameter of a bucket is, that bucket's
//! reduction (all-reduce with `Avg`, or, for ZeRO, reduce-scatter) is launched, buckets
//! always in the same order on every rank. On CUDA the collectives run on a side stream that
//! first waits (an event) for the work queued so far on the current stream, so they overlap
//! the rest of backward; [`DistributedDataParallel::finish`] launches what is left (a
//! parameter that got no gradient contributes zeros) and makes the current stream wait for
//! the side stream, so that clipping and the optimiser step, queued after it, read reduced
//! gradients (the host does not wait).
//!
//! **ZeRO-1.** With [`DdpOptions::shard`], every bucket is padded to a multiple of the group's
//! size and reduce-scattered in place: rank `r` holds the reduced gradient of the `r`-th part
//! of every bucket. [`ZeroAdamW`] keeps moments only for those parts, updates the parameters
//! in them (fused AdamW over the pieces of parameters they cover), and all-gathers each
//! bucket's updated parameters (through one bucket-sized buffer) into every rank's parameters.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use genesis::cuda::{Stream, with_stream};
use genesis::{DType, Device, Tensor, no_grad};

use crate::comm::{Collectives, ReduceOp, Work};
use crate::{Error, Result};

/// PyTorch's default bucket size, 25 MiB.
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 << 20;

/// How [`DistributedDataParallel`] reduces gradients.
#[derive(Debug, Clone)]
pub struct DdpOptions {
    /// A bucket closes when the next parameter would take it past this many bytes (a
    /// parameter larger than this is a bucket of its own).
    pub bucket_cap_bytes: usize,
    /// Copy rank 0's parameters into every rank's at construction.
    pub broadcast_parameters: bool,
    /// ZeRO-1: reduce-scatter each bucket (padded to a multiple of the group's size) instead
    /// of all-reducing it; the step is [`ZeroAdamW`]'s.
    pub shard: bool,
    /// On CUDA, run the collectives on a side stream (a pooled one) that overlaps the rest of
    /// backward; else on the current stream. Pooled streams wait for the legacy stream and it
    /// for them, so the overlap needs the training's work on a pooled stream too (a
    /// [`genesis::cuda::StreamGuard`] of [`genesis::cuda::Stream::new`]).
    pub side_stream: bool,
}

impl Default for DdpOptions {
    fn default() -> DdpOptions {
        DdpOptions {
            bucket_cap_bytes: DEFAULT_BUCKET_CAP_BYTES,
            broadcast_parameters: true,
            shard: false,
            side_stream: true,
        }
    }
}

/// One bucket of the flat gradient buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Its parameters (indices into the parameter list), in the order they lie in it.
    pub params: Vec<usize>,
    /// Its first element in the flat buffer.
    pub offset: usize,
    /// Its elements, padding included.
    pub len: usize,
}

/// Where each parameter's gradient lies in the flat buffer, and the buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketLayout {
    /// The buckets, in the order they are reduced.
    pub buckets: Vec<Bucket>,
    /// Each parameter's first element in the flat buffer.
    pub offsets: Vec<usize>,
    /// Each parameter's bucket.
    pub bucket_of: Vec<usize>,
    /// The flat buffer's elements.
    pub total: usize,
}

impl BucketLayout {
    /// Buckets for parameters of `numels` elements of `elem_size` bytes: the parameters from
    /// the last to the first, each starting at a multiple of `align` elements from its
    /// bucket's start, a bucket closing when the next one would take it past `cap_bytes`;
    /// each bucket padded to a multiple of `multiple * align` elements (so that buckets, and
    /// their `multiple` parts, start aligned too).
    pub fn new(
        numels: &[usize],
        elem_size: usize,
        cap_bytes: usize,
        align: usize,
        multiple: usize,
    ) -> Self {
        let align = align.max(1);
        let multiple = multiple.max(1) * align;
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut offsets = vec![0; numels.len()];
        let mut bucket_of = vec![0; numels.len()];
        let mut current: Option<(Vec<usize>, usize)> = None; // params, elements
        let mut next_offset = 0;
        let close = |b: (Vec<usize>, usize), buckets: &mut Vec<Bucket>, next: &mut usize| {
            let len = b.1.div_ceil(multiple) * multiple;
            buckets.push(Bucket {
                params: b.0,
                offset: *next,
                len,
            });
            *next += len;
        };
        for i in (0..numels.len()).rev() {
            if let Some(b) = &current
                && !b.0.is_empty()
                && (b.1.next_multiple_of(align) + numels[i]) * elem_size > cap_bytes
            {
                let b = current.take().expect("checked");
                close(b, &mut buckets, &mut next_offset);
            }
            let b = current.get_or_insert_with(|| (Vec::new(), 0));
            b.1 = b.1.next_multiple_of(align);
            offsets[i] = next_offset + b.1;
            bucket_of[i] = buckets.len();
            b.0.push(i);
            b.1 += numels[i];
        }
        if let Some(b) = current {
            close(b, &mut buckets, &mut next_offset);
        }
        BucketLayout {
            buckets,
            offsets,
            bucket_of,
            total: next_offset,
        }
    }

    /// Rank `rank`'s part of bucket `b` in a group of `size`: its first element in the flat
    /// buffer and its length (the bucket's length over `size`).
    pub fn shard(&self, b: usize, rank: usize, size: usize) -> (usize, usize) {
        let bucket = &self.buckets[b];
        let len = bucket.len / size.max(1);
        (bucket.offset + rank * len, len)
    }
}

/// The reduction state of one round (from one [`DistributedDataParallel::finish`] to the
/// next).
#[derive(Debug)]
struct Round {
    /// Reduce in this round's backward (off inside [`DistributedDataParallel::no_sync`]).
    sync: bool,
    ready: Vec<bool>,
    /// Per bucket, its parameters not ready yet.
    left: Vec<usize>,
    /// The next bucket to launch.
    next: usize,
    works: Vec<Work>,
    /// Parameters in the order their gradients became ready.
    order: Vec<usize>,
    /// An error a hook met (returned by `finish`).
    error: Option<Error>,
}

/// What the hooks and the handle share.
#[derive(Debug)]
struct Shared {
    group: Arc<dyn Collectives>,
    params: Vec<Tensor>,
    layout: BucketLayout,
    shard: bool,
    flat: Tensor,
    grad_views: Vec<Tensor>,
    bucket_views: Vec<Tensor>,
    device: Device,
    side: Option<Stream>,
    round: Mutex<Round>,
    /// The order of the last finished round.
    last_order: Mutex<Vec<usize>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn fresh_round(&self, sync: bool) -> Round {
        Round {
            sync,
            ready: vec![false; self.params.len()],
            left: self.layout.buckets.iter().map(|b| b.params.len()).collect(),
            next: 0,
            works: Vec::new(),
            order: Vec::new(),
            error: None,
        }
    }

    /// Makes parameter `i`'s gradient its view of the flat buffer, copying `acc` there when
    /// it is another tensor.
    fn adopt(&self, i: usize, acc: Option<&Tensor>) -> Result<()> {
        let view = &self.grad_views[i];
        match acc {
            Some(a) if a.shares_storage(view) && a.data_ptr() == view.data_ptr() => Ok(()),
            Some(a) => {
                no_grad(|| view.copy_(a))?;
                Ok(self.params[i].set_grad(Some(view.clone()))?)
            }
            None => {
                no_grad(|| view.zero_())?;
                Ok(self.params[i].set_grad(Some(view.clone()))?)
            }
        }
    }

    /// Parameter `i`'s gradient `acc` is complete for this backward.
    fn on_ready(&self, i: usize, acc: &Tensor) -> Result<()> {
        self.adopt(i, Some(acc))?;
        let mut round = lock(&self.round);
        if !round.sync {
            return Ok(());
        }
        self.mark(&mut round, i)
    }

    fn mark(&self, round: &mut Round, i: usize) -> Result<()> {
        if round.ready[i] {
            return Err(Error::InvalidArgument {
                op: "DistributedDataParallel",
                reason: format!(
                    "parameter {i} got a second gradient before finish(): call finish() after \
                     each backward, or run the backwards that accumulate inside no_sync()"
                ),
            });
        }
        round.ready[i] = true;
        round.order.push(i);
        round.left[self.layout.bucket_of[i]] -= 1;
        while round.next < round.left.len() && round.left[round.next] == 0 {
            let w = self.launch(round.next)?;
            round.works.push(w);
            round.next += 1;
        }
        Ok(())
    }

    /// Queues bucket `b`'s reduction (on the side stream after the current stream's work).
    fn launch(&self, b: usize) -> Result<Work> {
        let run = || -> Result<Work> {
            let view = &self.bucket_views[b];
            if self.shard {
                let (off, len) = self.layout.shard(b, self.group.rank(), self.group.size());
                let out = self.flat.narrow(0, off, len)?;
                self.group.reduce_scatter_tensor(&out, view, ReduceOp::Avg)
            } else {
                self.group.all_reduce(view, ReduceOp::Avg)
            }
        };
        match (&self.side, self.device) {
            (Some(side), Device::Cuda(d)) => {
                let ev = Stream::current(d)?.record_event()?;
                side.wait_event(&ev)?;
                with_stream(side, run)
            }
            _ => run(),
        }
    }
}

/// Data parallelism over a group (PyTorch's `DistributedDataParallel`): see the module
/// documentation. Made over a model's parameters; each rank runs forward and backward on its
/// own data, then [`DistributedDataParallel::finish`], then the optimiser step:
///
/// ```text
/// ddp.zero_grad()?;
/// model.loss(&x, &y)?.backward()?;   // buckets reduced as their gradients are ready
/// ddp.finish()?;                     // the rest launched; the stream ordered after them
/// clip_grad_norm_(&params, 1.0)?;
/// opt.step()?;
/// ```
#[derive(Debug, Clone)]
pub struct DistributedDataParallel {
    shared: Arc<Shared>,
}

/// [`DistributedDataParallel`]'s short name.
pub type Ddp = DistributedDataParallel;

impl DistributedDataParallel {
    /// Data parallelism over `params` (one floating dtype, one device) in `group`: rank 0's
    /// parameters broadcast (unless turned off), the flat gradient buffer allocated (zeros)
    /// and made of each parameter's gradient, a hook registered on each parameter.
    pub fn new(
        params: Vec<Tensor>,
        group: Arc<dyn Collectives>,
        options: DdpOptions,
    ) -> Result<DistributedDataParallel> {
        let op = "DistributedDataParallel";
        let bad = |reason: String| Error::InvalidArgument { op, reason };
        let first = params.first().ok_or_else(|| bad("no parameters".into()))?;
        let (dtype, device) = (first.dtype(), first.device());
        for p in &params {
            if p.dtype() != dtype || p.device() != device || !p.dtype().is_float() {
                return Err(bad(format!(
                    "parameters must share one floating dtype and one device ({dtype} on \
                     {device:?}; found {} on {:?})",
                    p.dtype(),
                    p.device()
                )));
            }
            if !p.is_contiguous() || !p.is_leaf() || !p.requires_grad() {
                return Err(bad(
                    "parameters must be contiguous leaves that require grad".into(),
                ));
            }
        }
        if options.broadcast_parameters && group.size() > 1 {
            for p in &params {
                no_grad(|| group.broadcast(p, 0))?;
            }
        }
        let numels: Vec<usize> = params.iter().map(Tensor::numel).collect();
        let multiple = if options.shard { group.size() } else { 1 };
        // Each gradient 256-byte aligned, as a tensor of its own would be (kernels that take
        // vectorised paths on aligned memory then sum in the same order as without DDP).
        let layout = BucketLayout::new(
            &numels,
            dtype.size(),
            options.bucket_cap_bytes,
            (256 / dtype.size()).max(1),
            multiple,
        );
        let flat = Tensor::zeros([layout.total], dtype, device)?;
        let mut grad_views = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            grad_views.push(
                flat.narrow(0, layout.offsets[i], numels[i])?
                    .view(p.shape())?,
            );
        }
        let bucket_views = layout
            .buckets
            .iter()
            .map(|b| flat.narrow(0, b.offset, b.len))
            .collect::<genesis::Result<Vec<_>>>()?;
        let side = match device {
            Device::Cuda(d) if options.side_stream => Some(Stream::new(d)?),
            _ => None,
        };
        let round = Mutex::new(Round {
            sync: true,
            ready: Vec::new(),
            left: Vec::new(),
            next: 0,
            works: Vec::new(),
            order: Vec::new(),
            error: None,
        });
        let shared = Arc::new(Shared {
            group,
            params,
            layout,
            shard: options.shard,
            flat,
            grad_views,
            bucket_views,
            device,
            side,
            round,
            last_order: Mutex::new(Vec::new()),
        });
        *lock(&shared.round) = shared.fresh_round(true);
        for (i, p) in shared.params.iter().enumerate() {
            shared.adopt(i, None)?;
            let weak: Weak<Shared> = Arc::downgrade(&shared);
            p.register_post_accumulate_grad_hook(move |acc| {
                let Some(sh) = weak.upgrade() else {
                    return Ok(());
                };
                sh.on_ready(i, acc).map_err(|e| {
                    let reason = format!("DistributedDataParallel's gradient hook: {e}");
                    lock(&sh.round).error.get_or_insert(e);
                    genesis::Error::Autograd { reason }
                })
            })?;
        }
        Ok(DistributedDataParallel { shared })
    }

    /// Drops every parameter's gradient (PyTorch's `zero_grad(set_to_none=True)`): the next
    /// backward's hooks copy each new gradient into its view of the flat buffer and make the
    /// view the gradient, which costs less than filling the buffer with zeros and adding into
    /// it; a parameter that gets no gradient has its view zeroed by [`Self::finish`].
    pub fn zero_grad(&self) -> Result<()> {
        for p in &self.shared.params {
            p.zero_grad();
        }
        Ok(())
    }

    /// Runs `f` (backwards that accumulate gradients) without reducing: the gradients add up
    /// in the buckets, and the next backward outside `no_sync` reduces their sums (PyTorch's
    /// `no_sync`).
    pub fn no_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        let previous = std::mem::replace(&mut lock(&self.shared.round).sync, false);
        struct Restore<'a>(&'a Shared, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                lock(&self.0.round).sync = self.1;
            }
        }
        let _restore = Restore(&self.shared, previous);
        f()
    }

    /// Ends a backward's reduction: launches the buckets not launched yet (a parameter that
    /// got no gradient contributes zeros, its gradient made its zeroed view), makes the current
    /// stream wait for the collectives (no host wait), reports an error NCCL or a hook met,
    /// and starts the next round. Call it between backward and the optimiser step.
    pub fn finish(&self) -> Result<()> {
        let sh = &self.shared;
        let mut round = lock(&sh.round);
        if let Some(e) = round.error.take() {
            *round = sh.fresh_round(round.sync);
            return Err(e);
        }
        if !round.sync {
            return Ok(());
        }
        for i in 0..sh.params.len() {
            if !round.ready[i] {
                let acc = sh.params[i].grad();
                sh.adopt(i, acc.as_ref())?;
                sh.mark(&mut round, i)?;
            }
        }
        if let (Some(side), Device::Cuda(d)) = (&sh.side, sh.device) {
            Stream::current(d)?.wait_stream(side)?;
        }
        for w in &round.works {
            w.is_completed()?;
        }
        *lock(&sh.last_order) = std::mem::take(&mut round.order);
        *round = sh.fresh_round(true);
        Ok(())
    }

    /// The parameters, in the order given.
    pub fn parameters(&self) -> &[Tensor] {
        &self.shared.params
    }

    /// The buckets and where each gradient lies.
    pub fn layout(&self) -> &BucketLayout {
        &self.shared.layout
    }

    /// The flat gradient buffer (every parameter's gradient is a view of it).
    pub fn flat_grad(&self) -> &Tensor {
        &self.shared.flat
    }

    /// The group.
    pub fn group(&self) -> &Arc<dyn Collectives> {
        &self.shared.group
    }

    /// Whether gradients are reduce-scattered (ZeRO-1).
    pub fn is_sharded(&self) -> bool {
        self.shared.shard
    }

    /// The parameters in the order their gradients became ready in the last finished round.
    pub fn last_ready_order(&self) -> Vec<usize> {
        lock(&self.shared.last_order).clone()
    }
}

/// One piece of a parameter inside this rank's part of a bucket.
#[derive(Debug, Clone, Copy)]
struct Piece {
    bucket: usize,
    param: usize,
    /// The piece's first element in the (flattened) parameter.
    param_off: usize,
    len: usize,
    /// Its first element in the flat buffer.
    flat_off: usize,
    /// Its first element in the moments.
    state_off: usize,
}

/// AdamW with ZeRO-1 sharding over a [`DistributedDataParallel`] made with
/// [`DdpOptions::shard`]: rank `r` keeps the moments of, and updates, only the `r`-th part of
/// every bucket (whose gradients the reduce-scatter left reduced on it), then every bucket's
/// parameters are all-gathered into every rank's parameters. The update is
/// [`genesis_nn::optim::Adam`]'s AdamW (the fused kernel over the pieces of parameters in this
/// rank's parts); the hyper-parameters are public fields with PyTorch's AdamW defaults.
#[derive(Debug)]
pub struct ZeroAdamW {
    ddp: DistributedDataParallel,
    /// Learning rate.
    pub lr: f64,
    /// `(β1, β2)`.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    step: u64,
    pieces: Vec<Piece>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// A bucket's worth of parameters, gathered.
    gather: Tensor,
}

impl ZeroAdamW {
    /// ZeRO-1 AdamW over `ddp`'s parameters with learning rate `lr` (betas 0.9, 0.999; eps
    /// 1e-8; weight decay 0.01, PyTorch's AdamW defaults).
    pub fn new(ddp: &DistributedDataParallel, lr: f64) -> Result<ZeroAdamW> {
        if !ddp.is_sharded() {
            return Err(Error::InvalidArgument {
                op: "ZeroAdamW",
                reason: "the DistributedDataParallel must be made with DdpOptions::shard".into(),
            });
        }
        let sh = &ddp.shared;
        let (rank, size) = (sh.group.rank(), sh.group.size());
        let mut pieces = Vec::new();
        let mut state_len = 0;
        let mut widest = 0;
        for (b, bucket) in sh.layout.buckets.iter().enumerate() {
            widest = widest.max(bucket.len);
            let (lo, len) = sh.layout.shard(b, rank, size);
            let hi = lo + len;
            for &i in &bucket.params {
                let (p_lo, p_hi) = (
                    sh.layout.offsets[i],
                    sh.layout.offsets[i] + sh.params[i].numel(),
                );
                let (a, z) = (lo.max(p_lo), hi.min(p_hi));
                if a < z {
                    pieces.push(Piece {
                        bucket: b,
                        param: i,
                        param_off: a - p_lo,
                        len: z - a,
                        flat_off: a,
                        state_off: state_len + (a - lo),
                    });
                }
            }
            state_len += len;
        }
        let dtype = sh.flat.dtype();
        Ok(ZeroAdamW {
            ddp: ddp.clone(),
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
            step: 0,
            pieces,
            exp_avg: Tensor::zeros([state_len], dtype, sh.device)?,
            exp_avg_sq: Tensor::zeros([state_len], dtype, sh.device)?,
            gather: Tensor::zeros([widest], dtype, sh.device)?,
        })
    }

    /// Bytes of optimiser state on this rank (the two moments of its parts).
    pub fn state_bytes(&self) -> usize {
        2 * self.exp_avg.numel() * self.exp_avg.dtype().size()
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// This rank's reduced gradients: its part of every bucket.
    fn shards(&self) -> Result<Vec<Tensor>> {
        let sh = &self.ddp.shared;
        (0..sh.layout.buckets.len())
            .map(|b| {
                let (off, len) = sh.layout.shard(b, sh.group.rank(), sh.group.size());
                Ok(sh.flat.narrow(0, off, len)?)
            })
            .collect()
    }

    /// Scales the reduced gradients so that their global 2-norm (over every rank's parts) is at
    /// most `max_norm`, by PyTorch's `clip_grad_norm_` factor; returns the norm before clipping
    /// (0-d, f32, no host wait). This rank's norm comes from the fused multi-tensor kernels
    /// ([`genesis::fused::clip_grad_norm_`], one pass over the parts; with a bound no finite
    /// norm reaches, so that it scales nothing, but an infinite norm gives the factor 0 as the
    /// global one would), its square is summed over the group in f64, and the parts are scaled
    /// by the global factor. Call it after [`DistributedDataParallel::finish`], in place of
    /// [`genesis_nn::optim::clip_grad_norm_`] (which would read unreduced parts).
    pub fn clip_grad_norm_(&self, max_norm: f64) -> Result<Tensor> {
        let sh = &self.ddp.shared;
        let shards = self.shards()?;
        no_grad(|| -> Result<Tensor> {
            let total = match genesis::fused::clip_grad_norm_(&shards, f64::MAX)? {
                Some(local) => local.to_dtype(DType::F64)?.square()?.reshape([1usize])?,
                None => Tensor::zeros([1usize], DType::F64, sh.device)?,
            };
            sh.group.all_reduce(&total, ReduceOp::Sum)?;
            let norm = total.sqrt()?;
            let coef = (max_norm / &norm.add(1e-6)?)?.clamp_max(1.0)?;
            let coef = coef.to_dtype(sh.flat.dtype())?;
            for g in &shards {
                g.mul_(&coef)?;
            }
            Ok(norm.to_dtype(DType::F32)?.reshape([0usize; 0])?)
        })
    }

    fn update(&mut self) -> Result<()> {
        let sh = &self.ddp.shared;
        let h = genesis::fused::AdamStep {
            lr: self.lr,
            beta1: self.betas.0,
            beta2: self.betas.1,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decoupled: true,
            step: self.step,
        };
        let mut lists: [Vec<Tensor>; 4] = Default::default();
        let flat_params: Vec<Tensor> = sh
            .params
            .iter()
            .map(|p| p.reshape([p.numel()]))
            .collect::<genesis::Result<_>>()?;
        for pc in &self.pieces {
            lists[0].push(flat_params[pc.param].narrow(0, pc.param_off, pc.len)?);
            lists[1].push(sh.flat.narrow(0, pc.flat_off, pc.len)?);
            lists[2].push(self.exp_avg.narrow(0, pc.state_off, pc.len)?);
            lists[3].push(self.exp_avg_sq.narrow(0, pc.state_off, pc.len)?);
        }
        let [p, g, m, v] = &lists;
        if !p.is_empty() {
            genesis::fused::adam_(p, g, m, v, &h)?;
        }
        // Every bucket's updated parts to every rank.
        let (rank, size) = (sh.group.rank(), sh.group.size());
        for (b, bucket) in sh.layout.buckets.iter().enumerate() {
            let (lo, len) = sh.layout.shard(b, rank, size);
            let whole = self.gather.narrow(0, 0, bucket.len)?;
            let mine = whole.narrow(0, rank * len, len)?;
            for (pc, t) in self.pieces.iter().zip(p) {
                if pc.bucket == b {
                    mine.narrow(0, pc.flat_off - lo, pc.len)?.copy_(t)?;
                }
            }
            sh.group.all_gather_into_tensor(&whole, &mine)?;
            for &i in &bucket.params {
                let n = sh.params[i].numel();
                flat_params[i].copy_(&whole.narrow(
                    0,
                    sh.layout.offsets[i] - bucket.offset,
                    n,
                )?)?;
            }
        }
        Ok(())
    }
}

impl genesis_nn::optim::Optimizer for ZeroAdamW {
    fn step(&mut self) -> genesis::Result<()> {
        self.step += 1;
        no_grad(|| self.update()).map_err(|e| match e {
            Error::Tensor(e) => e,
            e => genesis::Error::InvalidArgument {
                op: "ZeroAdamW::step",
                reason: e.to_string(),
            },
        })
    }

    fn params(&self) -> &[Tensor] {
        self.ddp.parameters()
    }

    /// Drops every gradient ([`DistributedDataParallel::zero_grad`]).
    fn zero_grad(&self) {
        for p in self.ddp.parameters() {
            p.zero_grad();
        }
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}
