//! Reverse-mode automatic differentiation on [`Tensor`], PyTorch's model.
//!
//! A tensor that requires grad carries autograd state: a leaf (made by the user,
//! [`Tensor::requires_grad_`]) has no `grad_fn` and accumulates its gradient; a tensor computed
//! from one holds the node of the op that made it. Every differentiable op records through one
//! funnel: when grad mode is on and an input requires grad, the op's forward runs with
//! recording off (so the ops it is built from record nothing) and a node is attached to its
//! output with a backward closure that maps the output's gradient to the inputs' ones, reading
//! what it saved through a version check (a saved tensor modified in place is
//! [`Error::SavedTensorModified`] naming the op).
//!
//! [`Tensor::backward`] walks the graph once in dependency order (each node runs when every
//! node that feeds it a gradient has run), summing the gradients that reach a node, running the
//! tensor hooks, and accumulating into leaves in place. Without `retain_graph` each node's
//! closure is dropped when it has run, which frees what it saved at its last use; a second
//! backward through it is an error. Backward runs with recording off (no double backward).

mod formulas;
pub mod profile;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::{Error, Result, Tensor};

pub(crate) use formulas::{
    Operand2, binary as binary_grad, cast_to as cast_grad, cumprod_grad, matmul as matmul_grad,
    product_of_others, reduced_dims, scalar_lhs as scalar_lhs_grad, scatter_back, spread, sum_to,
    unary as unary_grad, unary_saves,
};

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops on this thread record gradients (PyTorch's `torch.is_grad_enabled()`).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Turns recording off on this thread until dropped, then restores what was there (PyTorch's
/// `torch.no_grad()` as a guard).
#[derive(Debug)]
#[must_use = "recording is off only while the guard lives"]
pub struct NoGradGuard {
    previous: bool,
}

impl NoGradGuard {
    /// Recording off from now until the guard is dropped.
    pub fn new() -> NoGradGuard {
        NoGradGuard {
            previous: GRAD_ENABLED.with(|g| g.replace(false)),
        }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        NoGradGuard::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// Runs `f` with recording off on this thread (PyTorch's `with torch.no_grad():`): nothing
/// it computes has a `grad_fn`, and in-place updates of leaves that require grad (an
/// optimiser's step) are allowed.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// Runs `f` with recording on (PyTorch's `torch.enable_grad()`), inside a [`no_grad`] scope
/// too.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let previous = GRAD_ENABLED.with(|g| g.replace(true));
    let r = f();
    GRAD_ENABLED.with(|g| g.set(previous));
    r
}

/// Runs `f` for inference (PyTorch's `torch.inference_mode()`): as [`no_grad`], which already
/// skips all bookkeeping here.
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    no_grad(f)
}

/// A hook on a tensor's gradient: returns a replacement or `None` to keep it.
type GradHook = dyn Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync;
/// A hook after a leaf's gradient was accumulated: gets the accumulated gradient.
type PostHook = dyn Fn(&Tensor) -> Result<()> + Send + Sync;
/// An op's backward: the output's gradient and which inputs need one, to the inputs'
/// gradients (one entry per input, `None` where none is needed or it is zero).
pub(crate) type BackwardFn = dyn Fn(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync;

/// The autograd state of a tensor that requires grad (shared by its clones).
pub(crate) struct Meta {
    /// The node of the op that made the tensor; `None` for a leaf. Replaced when an in-place
    /// op on a non-leaf records (every clone sees the new node).
    grad_fn: Mutex<Option<Arc<Node>>>,
    /// The accumulated gradient (leaves, and non-leaves that retain theirs).
    grad: Mutex<Option<Tensor>>,
    retains_grad: AtomicBool,
    hooks: Mutex<Vec<Arc<GradHook>>>,
    post_hooks: Mutex<Vec<Arc<PostHook>>>,
}

impl Meta {
    /// The node that made the tensor now (`None` for a leaf).
    fn grad_fn(&self) -> Option<Arc<Node>> {
        lock(&self.grad_fn).clone()
    }

    fn new(grad_fn: Option<Arc<Node>>) -> Meta {
        Meta {
            grad_fn: Mutex::new(grad_fn),
            grad: Mutex::new(None),
            retains_grad: AtomicBool::new(false),
            hooks: Mutex::new(Vec::new()),
            post_hooks: Mutex::new(Vec::new()),
        }
    }
}

/// Where an input's gradient goes: the node that made it, or a leaf's accumulator.
enum Edge {
    Node(Arc<Node>),
    Leaf(Arc<Meta>),
}

/// One recorded op: its name, an edge per input (`None` for inputs that need no gradient)
/// and its backward closure (taken when it runs, unless the graph is retained).
pub(crate) struct Node {
    name: &'static str,
    edges: Vec<Option<Edge>>,
    backward: Mutex<Option<Arc<BackwardFn>>>,
    /// The output's autograd state (its hooks and retained gradient), while the output lives.
    output: Mutex<Weak<Meta>>,
    /// For a view of its one input (`narrow`, `split`, `select`, ...): how its gradient lands
    /// in the input's, which the engine may add into the input's pending gradient in place
    /// ([`view_into_pending`]) instead of running `backward`.
    view: Option<LayoutGrad>,
}

impl Drop for Node {
    /// Frees the graph below this node without recursion: a chain of a million recorded ops
    /// would otherwise drop one node inside the other's drop and overflow the stack. The
    /// children this node held last are emptied into a work list before they drop.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node>> = Vec::new();
        let take = |edges: &mut Vec<Option<Edge>>, stack: &mut Vec<Arc<Node>>| {
            for e in edges.drain(..) {
                if let Some(Edge::Node(n)) = e {
                    stack.push(n);
                }
            }
        };
        take(&mut self.edges, &mut stack);
        while let Some(n) = stack.pop() {
            if let Ok(mut last) = Arc::try_unwrap(n) {
                take(&mut last.edges, &mut stack);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in a hook cannot leave the data half-written: each lock guards one assignment.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether an op on `inputs` records (grad mode on and some input requires grad).
pub(crate) fn wants(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.autograd.is_some())
}

/// Attaches the node of op `name` with `backward` to `out`, computed from `inputs`: the edges
/// lead to the inputs' nodes or leaves. `out` is returned as it is when no input requires
/// grad, grad mode is off, or `out` is not floating-point (indices, masks).
pub(crate) fn record(
    name: &'static str,
    inputs: &[&Tensor],
    out: Tensor,
    backward: Box<BackwardFn>,
) -> Tensor {
    record_node(name, inputs, out, backward, None)
}

/// [`record`] for `out`, a view of `input` through another layout of its storage: the
/// backward is `view`'s gradient, which the engine may also add straight into the input's
/// pending gradient.
pub(crate) fn record_view(
    name: &'static str,
    input: &Tensor,
    out: Tensor,
    view: LayoutGrad,
) -> Tensor {
    let back = view.clone();
    let backward: Box<BackwardFn> = Box::new(move |g, _| Ok(vec![Some(back.grad(g)?)]));
    record_node(name, &[input], out, backward, Some(view))
}

fn record_node(
    name: &'static str,
    inputs: &[&Tensor],
    mut out: Tensor,
    backward: Box<BackwardFn>,
    view: Option<LayoutGrad>,
) -> Tensor {
    if !wants(inputs) || !out.dtype().is_float() {
        return out;
    }
    let edges = inputs
        .iter()
        .map(|t| {
            t.autograd.as_ref().map(|m| match m.grad_fn() {
                Some(n) => Edge::Node(n.clone()),
                None => Edge::Leaf(m.clone()),
            })
        })
        .collect();
    let node = Arc::new(Node {
        name,
        edges,
        backward: Mutex::new(Some(Arc::from(backward))),
        output: Mutex::new(Weak::new()),
        view,
    });
    let meta = Arc::new(Meta::new(Some(node.clone())));
    *lock(&node.output) = Arc::downgrade(&meta);
    out.autograd = Some(meta);
    out
}

/// A tensor an op keeps for its backward: detached, with the storage's version when saved.
pub(crate) struct Saved {
    tensor: Tensor,
    version: u64,
    op: &'static str,
}

impl Saved {
    pub(crate) fn new(op: &'static str, t: &Tensor) -> Saved {
        Saved {
            tensor: t.detach(),
            version: t.version(),
            op,
        }
    }

    /// The saved tensor; [`Error::SavedTensorModified`] when its storage was written in place
    /// since it was saved.
    pub(crate) fn get(&self) -> Result<Tensor> {
        let now = self.tensor.version();
        if now != self.version {
            return Err(Error::SavedTensorModified {
                op: self.op,
                saved_version: self.version,
                version: now,
            });
        }
        Ok(self.tensor.clone())
    }
}

/// An operand a backward reads ([`Saved`]), or of which it needs only the shape and dtype
/// (nothing of its memory is kept: a product by another tensor that does not require grad,
/// a product or quotient by a number).
pub(crate) enum SavedOrMeta {
    Saved(Saved),
    Meta(Vec<usize>, crate::DType),
}

impl SavedOrMeta {
    /// `t` saved when `keep`, else its shape and dtype.
    pub(crate) fn new(op: &'static str, t: &Tensor, keep: bool) -> SavedOrMeta {
        if keep {
            SavedOrMeta::Saved(Saved::new(op, t))
        } else {
            SavedOrMeta::Meta(t.shape().to_vec(), t.dtype())
        }
    }

    /// The saved tensor, or a zero of its shape and dtype broadcast from one element (on
    /// `like`'s device), which the formulas read only for its shape and dtype.
    pub(crate) fn get(&self, like: &Tensor) -> Result<Tensor> {
        match self {
            SavedOrMeta::Saved(s) => s.get(),
            SavedOrMeta::Meta(shape, dtype) => {
                Tensor::zeros([1usize; 0], *dtype, like.device())?.expand(&shape[..])
            }
        }
    }
}

/// Adds `g` into the gradient slot `slot`: the first gradient is kept (copied unless this is
/// the only handle to its storage, or it is a view), later ones are added in place.
fn accumulate_into(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    match slot {
        Some(acc) => no_grad(|| acc.add_(&g)),
        None => {
            let own = if g.is_contiguous()
                && g.layout().offset() == 0
                && Arc::strong_count(g.view.storage()) == 1
                && g.view.storage().len() == g.numel()
            {
                g.detach()
            } else {
                no_grad(|| g.deep_clone())?
            };
            *slot = Some(own);
            Ok(())
        }
    }
}

/// Runs the tensor hooks of `meta` on `g`.
fn run_hooks(meta: &Meta, mut g: Tensor) -> Result<Tensor> {
    let hooks: Vec<Arc<GradHook>> = lock(&meta.hooks).clone();
    for h in hooks {
        if let Some(r) = h(&g)? {
            if r.shape() != g.shape() || r.device() != g.device() {
                return Err(Error::Autograd {
                    reason: format!(
                        "a hook returned a gradient of shape {:?} on {:?} for one of shape {:?} \
                         on {:?}",
                        r.shape(),
                        r.device(),
                        g.shape(),
                        g.device()
                    ),
                });
            }
            g = r.to_dtype(g.dtype())?;
        }
    }
    Ok(g)
}

/// A leaf's gradient arrives: its hooks, then into `grad` (or the capture of [`grad`]), then
/// its post-accumulate hooks.
fn deliver_to_leaf(
    meta: &Arc<Meta>,
    g: Tensor,
    capture: &mut Option<HashMap<usize, Option<Tensor>>>,
) -> Result<()> {
    let g = run_hooks(meta, g)?;
    let key = Arc::as_ptr(meta) as usize;
    if let Some(cap) = capture {
        if let Some(slot) = cap.get_mut(&key) {
            return accumulate_captured(slot, g);
        }
        return Ok(());
    }
    accumulate_into(&mut lock(&meta.grad), g)?;
    let posts: Vec<Arc<PostHook>> = lock(&meta.post_hooks).clone();
    if !posts.is_empty() {
        let acc = lock(&meta.grad).clone();
        if let Some(acc) = acc {
            for h in posts {
                h(&acc)?;
            }
        }
    }
    Ok(())
}

fn accumulate_captured(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        Some(acc) => no_grad(|| acc.add(&g))?,
        None => g,
    });
    Ok(())
}

/// The engine: from each `(root, gradient)` pair, gradients flow to every leaf (accumulated
/// into `grad`) or, with `capture` (keys: the `Meta` addresses of the wanted tensors), only
/// into the captured slots.
fn run_backward(
    roots: Vec<(Tensor, Tensor)>,
    retain_graph: bool,
    mut capture: Option<HashMap<usize, Option<Tensor>>>,
) -> Result<Option<HashMap<usize, Option<Tensor>>>> {
    let _guard = NoGradGuard::new();
    let _offers = OffersScope::enter();
    let mut pending: HashMap<usize, Tensor> = HashMap::new();
    // Pending gradients that views' gradients were added into in place (see
    // [`view_into_pending`]): the buffer each reads, while it is theirs alone.
    let mut view_bases: HashMap<usize, ViewBase> = HashMap::new();
    let mut start: Vec<Arc<Node>> = Vec::new();
    for (root, g) in roots {
        let meta = root.autograd.as_ref().ok_or_else(|| Error::Autograd {
            reason: "element 0 of tensors does not require grad and does not have a grad_fn".into(),
        })?;
        match meta.grad_fn() {
            None => deliver_to_leaf(meta, g, &mut capture)?,
            Some(node) => {
                let key = Arc::as_ptr(&node) as usize;
                match pending.remove(&key) {
                    Some(acc) => {
                        pending.insert(key, acc.add(&g)?);
                    }
                    None => {
                        pending.insert(key, g);
                        start.push(node.clone());
                    }
                }
            }
        }
    }
    // Dependencies: how many edges from nodes of the graph lead to each node, and to each
    // leaf (a leaf used by several ops gets their gradients summed, then delivered once, as
    // PyTorch's `AccumulateGrad` node: its hooks and post-accumulate hooks run once a
    // backward).
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut leaf_deps: HashMap<usize, usize> = HashMap::new();
    let mut leaf_pending: HashMap<usize, Tensor> = HashMap::new();
    let mut seen: HashMap<usize, ()> = HashMap::new();
    let mut stack: Vec<Arc<Node>> = start.clone();
    for n in &start {
        seen.insert(Arc::as_ptr(n) as usize, ());
    }
    while let Some(n) = stack.pop() {
        for e in n.edges.iter().flatten() {
            match e {
                Edge::Node(c) => {
                    let key = Arc::as_ptr(c) as usize;
                    *deps.entry(key).or_insert(0) += 1;
                    if seen.insert(key, ()).is_none() {
                        stack.push(c.clone());
                    }
                }
                Edge::Leaf(meta) => {
                    *leaf_deps.entry(Arc::as_ptr(meta) as usize).or_insert(0) += 1;
                }
            }
        }
    }
    let mut ready: Vec<Arc<Node>> = start
        .into_iter()
        .filter(|n| deps.get(&(Arc::as_ptr(n) as usize)).copied().unwrap_or(0) == 0)
        .collect();
    while let Some(node) = ready.pop() {
        let key = Arc::as_ptr(&node) as usize;
        let mut grad = pending.remove(&key);
        if let (Some(mut b), Some(g)) = (view_bases.remove(&key), grad.as_mut()) {
            b.complete(g)?;
        }
        // The inputs whose pending gradients this node's backward was handed.
        let mut handed: Vec<bool> = Vec::new();
        let grads: Vec<Option<Tensor>> = match grad {
            None => vec![None; node.edges.len()],
            Some(mut g) => {
                let output = lock(&node.output).upgrade();
                if let Some(meta) = &output {
                    g = run_hooks(meta, g)?;
                    let out_key = Arc::as_ptr(meta) as usize;
                    if let Some(cap) = &mut capture
                        && let Some(slot) = cap.get_mut(&out_key)
                    {
                        accumulate_captured(slot, g.clone())?;
                    }
                    if capture.is_none() && meta.retains_grad.load(Ordering::Relaxed) {
                        accumulate_into(&mut lock(&meta.grad), g.clone())?;
                    }
                }
                let f = {
                    let mut slot = lock(&node.backward);
                    if retain_graph {
                        slot.clone()
                    } else {
                        slot.take()
                    }
                };
                let f = f.ok_or_else(|| Error::Autograd {
                    reason: format!(
                        "trying to backward through the graph a second time (through \
                         {}): its saved tensors were freed by the first backward; pass \
                         retain_graph to keep them",
                        node.name
                    ),
                })?;
                // A view of a recorded tensor adds its gradient into the input's pending one
                // where it can, without an input-sized gradient of its own.
                if let (Some(view), [Some(Edge::Node(c))]) = (&node.view, &node.edges[..]) {
                    let ck = Arc::as_ptr(c) as usize;
                    let done = profile::timed(node.name, "backward", Some(g.device()), || {
                        view_into_pending(view, &g, ck, &mut pending, &mut view_bases)
                    })?;
                    if done {
                        let left = deps.get_mut(&ck).expect("counted above");
                        *left -= 1;
                        if *left == 0 {
                            ready.push(c.clone());
                        }
                        continue;
                    }
                }
                let needs: Vec<bool> = node.edges.iter().map(Option::is_some).collect();
                // The inputs' gradients gathered so far, which a backward may add its own into
                // in place (see `pending_gradient`).
                let gathered: Vec<Option<Tensor>> = node
                    .edges
                    .iter()
                    .map(|e| match e {
                        Some(Edge::Node(c)) => pending.get(&(Arc::as_ptr(c) as usize)).cloned(),
                        _ => None,
                    })
                    .collect();
                let (out, was_handed) =
                    profile::timed(node.name, "backward", Some(g.device()), || {
                        let (out, handed) =
                            with_backward_state(!retain_graph, gathered, || f(&g, &needs));
                        out.map(|o| (o, handed))
                    })?;
                handed = was_handed;
                if out.len() != node.edges.len() {
                    return Err(Error::Autograd {
                        reason: format!(
                            "{} gave {} gradients for {} inputs",
                            node.name,
                            out.len(),
                            node.edges.len()
                        ),
                    });
                }
                out
            }
        };
        for (i, (edge, g)) in node.edges.iter().zip(grads).enumerate() {
            match edge {
                None => {}
                Some(Edge::Leaf(meta)) => {
                    let lk = Arc::as_ptr(meta) as usize;
                    if let Some(g) = g {
                        let sum = match leaf_pending.remove(&lk) {
                            Some(acc) => acc.add(&g)?,
                            None => g,
                        };
                        leaf_pending.insert(lk, sum);
                    }
                    let left = leaf_deps.get_mut(&lk).expect("counted above");
                    *left -= 1;
                    if *left == 0
                        && let Some(g) = leaf_pending.remove(&lk)
                    {
                        deliver_to_leaf(meta, g, &mut capture)?;
                    }
                }
                Some(Edge::Node(c)) => {
                    let ck = Arc::as_ptr(c) as usize;
                    if let Some(g) = g {
                        if let (Some(b), Some(p)) = (view_bases.get_mut(&ck), pending.get_mut(&ck))
                        {
                            b.complete(p)?;
                        }
                        let sum = match pending.remove(&ck) {
                            // The backward added its gradient into the pending one it was
                            // handed (only then: two gradients may share a buffer, as the
                            // two inputs of `a + a` or two sums' broadcast ones do).
                            Some(acc)
                                if handed.get(i).copied().unwrap_or(false)
                                    && Arc::ptr_eq(acc.view.storage(), g.view.storage())
                                    && acc.layout() == g.layout() =>
                            {
                                g
                            }
                            Some(acc) => acc.add(&g)?,
                            None => g,
                        };
                        view_bases.remove(&ck);
                        pending.insert(ck, sum);
                    }
                    let left = deps.get_mut(&ck).expect("counted above");
                    *left -= 1;
                    if *left == 0 {
                        ready.push(c.clone());
                    }
                }
            }
        }
    }
    // Every node of the graph ran, so every leaf's count reached zero and was delivered.
    debug_assert!(leaf_pending.is_empty());
    Ok(capture)
}

/// The gradient of `output` itself for a backward from it: `gradient` (its shape, dtype and
/// device) or, for a tensor of one element, one.
fn root_gradient(output: &Tensor, gradient: Option<&Tensor>) -> Result<Tensor> {
    match gradient {
        Some(g) => {
            if g.shape() != output.shape() {
                return Err(Error::Autograd {
                    reason: format!(
                        "the gradient of shape {:?} does not match the output's {:?}",
                        g.shape(),
                        output.shape()
                    ),
                });
            }
            if g.device() != output.device() {
                return Err(Error::DeviceMismatch {
                    op: "backward",
                    lhs: output.device(),
                    rhs: g.device(),
                });
            }
            Ok(g.detach().to_dtype(output.dtype())?)
        }
        None if output.numel() == 1 => {
            Tensor::ones(output.shape(), output.dtype(), output.device())
        }
        None => Err(Error::Autograd {
            reason: format!(
                "grad can be implicitly created only for scalar outputs (this one has shape \
                 {:?}): pass the gradient",
                output.shape()
            ),
        }),
    }
}

/// The gradients of `outputs` with respect to `inputs` (PyTorch's `torch.autograd.grad`),
/// each output seeded with its entry of `grad_outputs` (`None`: one, for a one-element
/// output). Nothing is accumulated into any `grad`; an input the outputs do not depend on
/// gets `None`. Without `retain_graph` the graph is freed.
///
/// ```
/// use genesis::{Device, Tensor, autograd};
/// # fn main() -> genesis::Result<()> {
/// let x = Tensor::from_slice(&[3.0f32], [1], Device::Cpu)?.requires_grad_(true)?;
/// let y = x.mul(&x)?.sum()?;
/// let g = autograd::grad(&[&y], &[&x], &[None], false)?;
/// assert_eq!(g[0].as_ref().unwrap().to_vec::<f32>()?, [6.0]);
/// assert!(x.grad().is_none());
/// # Ok(())
/// # }
/// ```
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: &[Option<&Tensor>],
    retain_graph: bool,
) -> Result<Vec<Option<Tensor>>> {
    if grad_outputs.len() != outputs.len() {
        return Err(Error::Autograd {
            reason: format!(
                "{} gradients for {} outputs",
                grad_outputs.len(),
                outputs.len()
            ),
        });
    }
    let mut keys = Vec::with_capacity(inputs.len());
    let mut capture = HashMap::new();
    for t in inputs {
        let meta = t.autograd.as_ref().ok_or_else(|| Error::Autograd {
            reason: "one of the inputs does not require grad".into(),
        })?;
        let key = Arc::as_ptr(meta) as usize;
        keys.push(key);
        capture.insert(key, None);
    }
    let roots = outputs
        .iter()
        .zip(grad_outputs)
        .map(|(o, g)| Ok(((*o).clone(), root_gradient(o, *g)?)))
        .collect::<Result<Vec<_>>>()?;
    let cap = run_backward(roots, retain_graph, Some(capture))?.expect("captured");
    Ok(keys.iter().map(|k| cap.get(k).cloned().flatten()).collect())
}

impl Tensor {
    /// Whether this tensor requires grad: a leaf made so by [`Tensor::requires_grad_`], or a
    /// result of a recorded op on one.
    pub fn requires_grad(&self) -> bool {
        self.autograd.is_some()
    }

    /// This tensor as a leaf that requires grad (`true`) or a plain tensor (`false`),
    /// PyTorch's `requires_grad_()`: `let w = Tensor::randn(..)?.requires_grad_(true)?`. Clones
    /// made afterwards share its gradient. Only floating-point tensors can require grad, and
    /// only a leaf can stop requiring it.
    pub fn requires_grad_(mut self, requires: bool) -> Result<Tensor> {
        self.set_requires_grad(requires)?;
        Ok(self)
    }

    /// [`Tensor::requires_grad_`] in place on this handle.
    pub fn set_requires_grad(&mut self, requires: bool) -> Result<()> {
        match (&self.autograd, requires) {
            (Some(m), false) if m.grad_fn().is_some() => Err(Error::Autograd {
                reason: "you can only change requires_grad flags of leaf variables; use \
                         detach() for a tensor that does not require grad"
                    .into(),
            }),
            (_, false) => {
                self.autograd = None;
                Ok(())
            }
            (Some(_), true) => Ok(()),
            (None, true) => {
                if !self.dtype().is_float() {
                    return Err(Error::Autograd {
                        reason: format!(
                            "only tensors of floating point dtype can require gradients, \
                             not {}",
                            self.dtype()
                        ),
                    });
                }
                self.autograd = Some(Arc::new(Meta::new(None)));
                Ok(())
            }
        }
    }

    /// Whether this tensor is a leaf of the graph: it does not require grad, or the user made
    /// it require grad (it was not computed by a recorded op).
    pub fn is_leaf(&self) -> bool {
        self.autograd.as_ref().is_none_or(|m| m.grad_fn().is_none())
    }

    /// The name of the op that made this tensor when it was recorded (PyTorch's `grad_fn`),
    /// for example `"mul"`.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.autograd
            .as_ref()
            .and_then(|m| m.grad_fn())
            .map(|n| n.name)
    }

    /// The same elements without autograd history: shares the storage, requires no grad.
    pub fn detach(&self) -> Tensor {
        Tensor {
            view: self.view.clone(),
            autograd: None,
        }
    }

    /// The accumulated gradient of a leaf (or of a tensor that [retains
    /// it](Tensor::retain_grad)), `None` before a backward reached it or after
    /// [`Tensor::zero_grad`].
    pub fn grad(&self) -> Option<Tensor> {
        self.autograd.as_ref().and_then(|m| lock(&m.grad).clone())
    }

    /// Replaces the gradient (PyTorch's `x.grad = g`); `g` must match the tensor's shape,
    /// dtype and device.
    pub fn set_grad(&self, g: Option<Tensor>) -> Result<()> {
        let meta = self.autograd.as_ref().ok_or_else(|| Error::Autograd {
            reason: "set_grad of a tensor that does not require grad".into(),
        })?;
        if let Some(g) = &g
            && (g.shape() != self.shape()
                || g.dtype() != self.dtype()
                || g.device() != self.device())
        {
            return Err(Error::Autograd {
                reason: format!(
                    "the gradient ({:?}, {}, {:?}) does not match the tensor ({:?}, {}, {:?})",
                    g.shape(),
                    g.dtype(),
                    g.device(),
                    self.shape(),
                    self.dtype(),
                    self.device()
                ),
            });
        }
        *lock(&meta.grad) = g.map(|g| g.detach());
        Ok(())
    }

    /// Drops the gradient (PyTorch's `zero_grad(set_to_none=True)`): the next backward
    /// starts a new one.
    pub fn zero_grad(&self) {
        if let Some(m) = &self.autograd {
            *lock(&m.grad) = None;
        }
    }

    /// Keeps the gradient of this non-leaf tensor in [`Tensor::grad`] at the next backward
    /// (PyTorch's `retain_grad`).
    pub fn retain_grad(&self) -> Result<()> {
        let meta = self.autograd.as_ref().ok_or_else(|| Error::Autograd {
            reason: "can't retain_grad on a tensor that does not require grad".into(),
        })?;
        meta.retains_grad.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Computes the gradient of this one-element tensor with respect to every leaf it depends
    /// on, accumulated into their [`Tensor::grad`] (PyTorch's `loss.backward()`); the graph is
    /// freed as it is walked.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let w = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu)?.requires_grad_(true)?;
    /// let loss = w.mul(&w)?.sum()?; // w0² + w1²
    /// loss.backward()?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, [2.0, 4.0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// [`Tensor::backward`] with the gradient of this tensor (needed unless it has one
    /// element) and `retain_graph` (keep the graph for another backward).
    pub fn backward_with(&self, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        let g = root_gradient(self, gradient)?;
        run_backward(vec![(self.clone(), g)], retain_graph, None)?;
        Ok(())
    }

    /// Registers `hook` on this tensor's gradient: called with the gradient when it is
    /// computed (before it is accumulated into a leaf), it may return a replacement.
    pub fn register_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync + 'static,
    ) -> Result<()> {
        let meta = self.autograd.as_ref().ok_or_else(|| Error::Autograd {
            reason: "cannot register a hook on a tensor that doesn't require gradient".into(),
        })?;
        lock(&meta.hooks).push(Arc::new(hook));
        Ok(())
    }

    /// Registers `hook` on this leaf: called with its accumulated gradient each time a
    /// backward has added to it (PyTorch's `register_post_accumulate_grad_hook`; data
    /// parallelism starts a gradient's all-reduce from here).
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<()> + Send + Sync + 'static,
    ) -> Result<()> {
        match &self.autograd {
            Some(m) if m.grad_fn().is_none() => {
                lock(&m.post_hooks).push(Arc::new(hook));
                Ok(())
            }
            _ => Err(Error::Autograd {
                reason: "post accumulate grad hooks can only be registered on leaf tensors \
                         that require grad"
                    .into(),
            }),
        }
    }

    /// An in-place op `op` on this tensor, reading `operands`, as the autograd sees it.
    /// `Ok(false)`: nothing records (grad mode off, or no tensor involved requires grad), and
    /// the caller writes in place as usual. `Ok(true)`: this tensor is a non-leaf that
    /// requires grad, and the op was done here, as PyTorch rebases the graph: `out_of_place`
    /// computes the result from a copy of the current values (recorded), the result is
    /// written into this tensor's memory, and the tensor's `grad_fn` becomes the result's
    /// (every clone of it sees the new node). Errors: a leaf that requires grad; a tensor that
    /// does not require grad with an operand that does (its autograd state cannot be attached
    /// through a shared handle: compute out of place); a non-leaf whose memory another tensor
    /// shares (a view of it, or a tensor saved for a backward), whose graph the write would
    /// leave stale.
    pub(crate) fn in_place_recorded(
        &self,
        op: &'static str,
        operands: &[&Tensor],
        out_of_place: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<bool> {
        if !is_grad_enabled()
            || (self.autograd.is_none() && operands.iter().all(|t| t.autograd.is_none()))
        {
            return Ok(false);
        }
        let Some(meta) = &self.autograd else {
            check_in_place_operands(op, operands)?;
            return Ok(false);
        };
        let Some(old_node) = meta.grad_fn() else {
            self.check_in_place(op)?;
            return Ok(false);
        };
        if Arc::strong_count(self.view.storage()) > 1 {
            return Err(Error::Autograd {
                reason: format!(
                    "{op}: an in-place operation on a tensor that requires grad (made by {}) \
                     whose memory other tensors share (a view of it, a clone, or a tensor \
                     saved for a backward) would leave their gradients stale; compute out of \
                     place or under no_grad",
                    old_node.name
                ),
            });
        }
        let old = self.deep_clone()?;
        let mut r = out_of_place(&old)?;
        if r.dtype() != self.dtype() {
            r = r.to_dtype(self.dtype())?;
        }
        if r.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: r.shape().to_vec(),
            });
        }
        let Some(new_node) = r.autograd.as_ref().and_then(|m| m.grad_fn()) else {
            return Err(Error::Autograd {
                reason: format!("{op}: the in-place result does not depend on the graph"),
            });
        };
        no_grad(|| {
            self.view.storage().copy_strided_from_shared(
                self.layout(),
                r.view.storage(),
                r.layout(),
            )
        })?;
        *lock(&old_node.output) = Weak::new();
        *lock(&new_node.output) = Arc::downgrade(meta);
        *lock(&meta.grad_fn) = Some(new_node);
        Ok(true)
    }

    /// An error when this tensor may not be written in place with recording on: a tensor
    /// that requires grad (a leaf, as in PyTorch; a recorded result for the ops that do not
    /// rebase the graph through [`Tensor::in_place_recorded`]: `index_fill` and the fused
    /// optimiser steps). Under [`no_grad`] every write is allowed (an optimiser's step).
    pub(crate) fn check_in_place(&self, op: &'static str) -> Result<()> {
        match &self.autograd {
            Some(m) if is_grad_enabled() => Err(Error::Autograd {
                reason: if m.grad_fn().is_none() {
                    format!(
                        "{op}: a leaf Variable that requires grad is being used in an \
                         in-place operation"
                    )
                } else {
                    format!(
                        "{op}: in-place operations on a tensor that requires grad (made by \
                         {}) are not supported; compute out of place or under no_grad",
                        m.grad_fn().as_ref().map_or("?", |n| n.name)
                    )
                },
            }),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta")
            .field("grad_fn", &self.grad_fn().as_ref().map(|n| n.name))
            .finish_non_exhaustive()
    }
}

/// Runs op `name` on `inputs`: `forward`, and when it records (grad mode on, an input
/// requires grad), with recording off, then the node whose closure `backward` makes from the
/// output attached to it.
pub(crate) fn op(
    name: &'static str,
    inputs: &[&Tensor],
    forward: impl FnOnce() -> Result<Tensor>,
    backward: impl FnOnce(&Tensor) -> Box<BackwardFn>,
) -> Result<Tensor> {
    if !wants(inputs) {
        return forward();
    }
    let device = inputs.first().map(|t| t.device());
    let out = profile::timed(name, "forward", device, || no_grad(forward))?;
    let f = backward(&out);
    Ok(record(name, inputs, out, f))
}

/// [`op`] for ops of one input whose backward needs neither the input nor the output:
/// `backward` (called only when the op records, after the forward) makes the function from
/// the output's gradient to the input's.
pub(crate) fn op1<F>(
    name: &'static str,
    x: &Tensor,
    forward: impl FnOnce() -> Result<Tensor>,
    backward: impl FnOnce() -> F,
) -> Result<Tensor>
where
    F: Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    op(name, &[x], forward, |_| {
        let f = backward();
        Box::new(move |g, _| Ok(vec![Some(f(g)?)]))
    })
}

/// An error when an `_out` form would write the result of inputs that require grad with
/// recording on (PyTorch: out= functions don't support automatic differentiation).
pub(crate) fn refuse_out(op: &'static str, tensors: &[&Tensor]) -> Result<()> {
    if wants(tensors) {
        return Err(Error::Autograd {
            reason: format!(
                "{op}: functions with out=... arguments don't support automatic \
                 differentiation, but one of the arguments requires grad"
            ),
        });
    }
    Ok(())
}

thread_local! {
    /// Whether the backward function running on this thread runs only once (the graph is not
    /// retained): see [`backward_runs_once`].
    static BACKWARD_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The gradients gathered so far for the inputs of the backward running on this thread:
    /// see [`pending_gradient`].
    static GATHERED: std::cell::RefCell<Vec<Option<Tensor>>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// Which of those [`pending_gradient`] handed out to the backward now running: only for
    /// these may the engine take a returned gradient as the pending one with its own added.
    static HANDED: std::cell::RefCell<Vec<bool>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The gradient gathered so far for input `i` of the backward now running, when nothing but
/// the engine holds its buffer (a contiguous tensor of its own storage): the backward may add
/// its gradient for that input into it in place and return it (that very tensor), sparing a
/// sum of two input-sized buffers (the residual stream's gradient, as llm.c's layer norm
/// backward adds into it). `None` otherwise, and outside a backward.
pub(crate) fn pending_gradient(i: usize) -> Option<Tensor> {
    GATHERED.with(|g| {
        let t = g.borrow().get(i).cloned().flatten()?;
        // Held by the engine's map, the list above and `t`.
        let alone = Arc::strong_count(t.view.storage()) == 3
            && t.is_contiguous()
            && t.layout().offset() == 0
            && t.view.storage().len() == t.numel();
        if alone {
            HANDED.with(|h| {
                let mut h = h.borrow_mut();
                if h.len() <= i {
                    h.resize(i + 1, false);
                }
                h[i] = true;
            });
        }
        alone.then_some(t)
    })
}

/// Whether the backward function now running will not run again (its graph is not retained):
/// then a tensor it alone holds (a saved input no one else can see) may take its output in
/// place. `false` outside a backward.
pub(crate) fn backward_runs_once() -> bool {
    BACKWARD_ONCE.with(std::cell::Cell::get)
}

/// Runs `f` with [`backward_runs_once`] answering `once` and [`pending_gradient`] reading
/// `gathered`, then restores both (a backward may run a nested one: `checkpoint`). Also
/// returns which inputs' pending gradients `f` was handed (see [`pending_gradient`]).
fn with_backward_state<R>(
    once: bool,
    gathered: Vec<Option<Tensor>>,
    f: impl FnOnce() -> R,
) -> (R, Vec<bool>) {
    let before = (
        BACKWARD_ONCE.with(|c| c.replace(once)),
        GATHERED.with(|g| g.replace(gathered)),
        HANDED.with(|h| h.replace(Vec::new())),
    );
    struct Restore(Option<(bool, Vec<Option<Tensor>>, Vec<bool>)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some((once, gathered, handed)) = self.0.take() {
                BACKWARD_ONCE.with(|c| c.set(once));
                GATHERED.with(|g| *g.borrow_mut() = gathered);
                HANDED.with(|h| *h.borrow_mut() = handed);
            }
        }
    }
    let _restore = Restore(Some(before));
    let r = f();
    (r, HANDED.with(|h| h.take()))
}

/// The buffer a pending gradient reads (see [`view_into_pending`]): `z` holds the input's
/// reach `lo..hi` of storage positions, the pending gradient is `z` read through `input`.
/// `claimed`: `None` when every position of `z` holds the sum of the views' gradients so far
/// (it began as zeros); for a buffer taken over from a backward that offered it
/// ([`offer_packed`]), the layouts (in `z`) of the views whose gradients it holds, pairwise
/// disjoint: the other positions hold whatever that backward left there until
/// [`ViewBase::complete`].
struct ViewBase {
    z: Tensor,
    lo: usize,
    hi: usize,
    input: crate::Layout,
    claimed: Option<Vec<crate::Layout>>,
}

impl ViewBase {
    /// Makes every position of `z` hold the sum (the claimed views cover `z`, or a zeroed
    /// buffer takes the claimed views' values) and points `pending` at it.
    fn complete(&mut self, pending: &mut Tensor) -> Result<()> {
        let Some(claimed) = self.claimed.take() else {
            return Ok(());
        };
        let covered: usize = claimed.iter().map(crate::Layout::numel).sum();
        if covered != self.hi - self.lo {
            let z = Tensor::zeros([self.hi - self.lo], self.z.dtype(), self.z.device())?;
            for c in &claimed {
                Tensor::through(&z, c)?.copy_(&Tensor::through(&self.z, c)?)?;
            }
            let shift = crate::Layout::new(
                self.input.shape(),
                self.input.strides(),
                self.input.offset() - self.lo,
            );
            *pending = Tensor::through(&z, &shift)?;
            self.z = z;
        }
        Ok(())
    }
}

thread_local! {
    /// Buffers a backward wrote several views' gradients into, laid out as the storage the
    /// views read (see [`offer_packed`]); emptied when the outermost backward returns.
    static OFFERED: std::cell::RefCell<Vec<std::sync::Weak<genesis_storage::Storage>>> =
        const { std::cell::RefCell::new(Vec::new()) };
    static BACKWARD_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Column sums a backward formed while writing a gradient (see [`note_column_sums`]);
    /// emptied when the outermost backward returns.
    static COLUMN_SUMS: std::cell::RefCell<Vec<BufferNote>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A value a backward derived from a gradient buffer it wrote (a rounded copy, column sums),
/// kept for the backward that reads that buffer next: the buffer (weakly), its version then,
/// and the value. It serves only while the gradient is still that buffer, unchanged.
pub(crate) struct BufferNote {
    buffer: std::sync::Weak<genesis_storage::Storage>,
    version: u64,
    value: Tensor,
}

impl BufferNote {
    /// `value`, derived from the buffer `g` as it is now.
    pub(crate) fn new(g: &Tensor, value: Tensor) -> BufferNote {
        BufferNote {
            buffer: Arc::downgrade(g.view.storage()),
            version: g.version(),
            value,
        }
    }

    /// Whether `g` reads the noted buffer (whatever its version).
    fn reads_buffer(&self, g: &Tensor) -> bool {
        self.buffer.as_ptr() == Arc::as_ptr(g.view.storage())
    }

    /// The value, when `g` is the whole noted buffer (contiguous, from its start) unchanged
    /// since.
    pub(crate) fn value_for(self, g: &Tensor) -> Option<Tensor> {
        (self.buffer.strong_count() > 0
            && self.reads_buffer(g)
            && g.version() == self.version
            && whole_buffer(g))
        .then_some(self.value)
    }
}

/// Whether `g` is the whole of its storage, contiguous from its start.
fn whole_buffer(g: &Tensor) -> bool {
    g.is_contiguous() && g.layout().offset() == 0 && g.view.storage().len() == g.numel()
}

/// The most column sums kept at once: a gradient's sums are taken by the next backward that
/// reads it, so only a few are ever waiting.
const MAX_NOTED_SUMS: usize = 8;

/// Notes that `sums` are the column sums of `g` (over every dimension but the last, in
/// `g`'s dtype), formed by the backward that wrote `g` in the same pass (a layer norm's
/// backward writing a linear branch's gradient): the branch's backward takes them through
/// [`noted_column_sums`] as its bias's gradient instead of reading `g` again. Ignored outside
/// a backward or when `g` is not a whole contiguous buffer of two dimensions or more.
pub(crate) fn note_column_sums(g: &Tensor, sums: Tensor) {
    let last = g.shape().last().copied();
    if BACKWARD_DEPTH.with(std::cell::Cell::get) == 0
        || g.dim() < 2
        || !whole_buffer(g)
        || sums.shape() != [last.unwrap_or(0)]
        || sums.dtype() != g.dtype()
    {
        return;
    }
    COLUMN_SUMS.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|n| n.buffer.strong_count() > 0);
        if c.len() == MAX_NOTED_SUMS {
            c.remove(0);
        }
        c.push(BufferNote::new(g, sums));
    });
}

/// The column sums noted for `g` ([`note_column_sums`]), when `g` is still that buffer
/// unchanged and `shape` is its last dimension alone (a bias's shape, `g` of two dimensions
/// or more); taken, so they serve once.
pub(crate) fn noted_column_sums(g: &Tensor, shape: &[usize]) -> Option<Tensor> {
    if g.dim() < 2 || g.shape().last().map(std::slice::from_ref) != Some(shape) {
        return None;
    }
    COLUMN_SUMS.with(|c| {
        let mut c = c.borrow_mut();
        let i = c.iter().position(|n| n.reads_buffer(g))?;
        c.remove(i).value_for(g)
    })
}

/// Offers the buffer `t` reads to the engine: a backward that gave several inputs, views of one
/// storage with pairwise disjoint layouts, their gradients as views of one buffer of that
/// storage's reach, each at its input's layout (shifted by the reach's start), so that a view's
/// gradient can become its base's pending gradient without a copy ([`view_into_pending`]).
pub(crate) fn offer_packed(t: &Tensor) {
    OFFERED.with(|o| {
        let mut o = o.borrow_mut();
        o.retain(|w| w.strong_count() > 0);
        o.push(Arc::downgrade(t.view.storage()));
    });
}

/// Takes `t`'s buffer back from the offers, saying whether it was offered.
fn take_offer(t: &Tensor) -> bool {
    OFFERED.with(|o| {
        let mut o = o.borrow_mut();
        let s = Arc::as_ptr(t.view.storage());
        let before = o.len();
        o.retain(|w| w.as_ptr() != s);
        o.len() != before
    })
}

/// The offers' lifetime: one outermost backward (a nested one, `checkpoint`'s, shares it).
struct OffersScope;

impl OffersScope {
    fn enter() -> OffersScope {
        BACKWARD_DEPTH.with(|d| d.set(d.get() + 1));
        OffersScope
    }
}

impl Drop for OffersScope {
    fn drop(&mut self) {
        let depth = BACKWARD_DEPTH.with(|d| {
            d.set(d.get() - 1);
            d.get()
        });
        if depth == 0 {
            OFFERED.with(|o| o.borrow_mut().clear());
            COLUMN_SUMS.with(|c| c.borrow_mut().clear());
        }
    }
}

/// Adds the gradient `g` of a view into the pending gradient of its input (node key `ck`) in
/// place: the first view's gradient makes the pending one (zeros over the input's reach, `g`
/// written through the view's layout; or, when `g` already sits at the view's layout in a
/// buffer of the input's reach that its backward offered, that buffer itself) and keeps its
/// buffer; the next views of the same input add theirs to their own positions of that buffer
/// (the `split` of a `[B, T, 3C]` tensor in three adds one third each, where the gradients of
/// the views would each be input-sized), or find them there already.
/// `false` when it does not apply (the view is not one [`LayoutGrad::grad_by_copy`] takes,
/// or the input's pending gradient is not such a buffer).
fn view_into_pending(
    view: &LayoutGrad,
    g: &Tensor,
    ck: usize,
    pending: &mut HashMap<usize, Tensor>,
    bases: &mut HashMap<usize, ViewBase>,
) -> Result<bool> {
    let Some((lo, hi)) = view.copy_reach() else {
        return Ok(false);
    };
    let shift = |l: &crate::Layout| crate::Layout::new(l.shape(), l.strides(), l.offset() - lo);
    // `to_dtype` makes a copy even to the same dtype: the gradient is read where it is.
    let g = if g.dtype() == view.dtype {
        g.clone()
    } else {
        g.to_dtype(view.dtype)?
    };
    let out = shift(&view.output);
    let input = shift(&view.input);
    match (pending.contains_key(&ck), bases.get_mut(&ck)) {
        (false, _) => {
            // The backward wrote this view's gradient where the view sits, in a buffer of the
            // input's reach that it offered: that buffer becomes the pending gradient.
            if g.layout() == &out
                && g.view.storage().len() == hi - lo
                && input.is_contiguous()
                && take_offer(&g)
            {
                let z = Tensor::through(&g, &crate::Layout::contiguous(&[hi - lo]))?;
                pending.insert(ck, Tensor::through(&z, &input)?);
                bases.insert(
                    ck,
                    ViewBase {
                        z,
                        lo,
                        hi,
                        input: view.input.clone(),
                        claimed: Some(vec![out]),
                    },
                );
                return Ok(true);
            }
            let z = Tensor::zeros([hi - lo], view.dtype, g.device())?;
            Tensor::through(&z, &out)?.copy_(&g)?;
            let acc = Tensor::through(&z, &input)?.contiguous()?;
            if acc.shares_storage(&z) {
                bases.insert(
                    ck,
                    ViewBase {
                        z,
                        lo,
                        hi,
                        input: view.input.clone(),
                        claimed: None,
                    },
                );
            }
            pending.insert(ck, acc);
            Ok(true)
        }
        (true, Some(b))
            if b.lo == lo
                && b.hi == hi
                && b.input == view.input
                && b.z.dtype() == view.dtype
                && b.z.device() == g.device() =>
        {
            if let Some(claimed) = &mut b.claimed {
                let apart = claimed.iter().all(|c| c.disjoint_from(&out));
                if apart && g.layout() == &out && g.shares_storage(&b.z) {
                    // Written there by the backward that offered the buffer.
                    claimed.push(out);
                    return Ok(true);
                }
                if apart && !g.shares_storage(&b.z) {
                    Tensor::through(&b.z, &out)?.copy_(&g)?;
                    claimed.push(out);
                    return Ok(true);
                }
                let p = pending.get_mut(&ck).expect("a base has a pending gradient");
                b.complete(p)?;
            }
            Tensor::through(&b.z, &out)?.add_(&g)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The gradient of a tensor read through another layout of its storage (a view, or a copy
/// of one: `flip`, `repeat`, `diagonal`, ...): the output's gradient is added at the storage
/// positions the output's layout names (repeats add up), and the input's gradient is what
/// its own layout reads there.
#[derive(Clone)]
pub(crate) struct LayoutGrad {
    input: crate::Layout,
    output: crate::Layout,
    storage_len: usize,
    dtype: crate::DType,
}

impl LayoutGrad {
    pub(crate) fn of(x: &Tensor, output: &crate::Layout) -> LayoutGrad {
        LayoutGrad {
            input: x.layout().clone(),
            output: output.clone(),
            storage_len: x.view.storage().len(),
            dtype: x.dtype(),
        }
    }

    pub(crate) fn grad(&self, g: &Tensor) -> Result<Tensor> {
        if let Some(z) = self.grad_by_copy(g)? {
            return Ok(z);
        }
        let device = g.device();
        let positions =
            Tensor::arange(0.0, self.storage_len as f64, 1.0, crate::DType::I64, device)?;
        let at = Tensor::through(&positions, &self.output)?
            .contiguous()?
            .ravel()?;
        let z = Tensor::zeros([self.storage_len], self.dtype, device)?;
        z.scatter_add_(0, &at, &g.to_dtype(self.dtype)?.contiguous()?.ravel()?)?;
        Tensor::through(&z, &self.input)?.contiguous()
    }
}

impl LayoutGrad {
    /// The input's reach `lo..hi` of storage positions when the output's elements lie within
    /// it and no two share a position (what [`LayoutGrad::grad_by_copy`] takes).
    fn copy_reach(&self) -> Option<(usize, usize)> {
        let (Ok(Some((lo, hi))), Ok(Some((olo, ohi)))) = (self.input.span(), self.output.span())
        else {
            return None;
        };
        (olo >= lo && ohi <= hi && non_overlapping(&self.output)).then_some((lo, hi))
    }

    /// The gradient when no two output elements share a storage position and every output
    /// position lies within the input's reach (every view: slices, `split`, `diagonal`,
    /// transposes, reshapes): zeros over the input's reach, the output's gradient written
    /// through the output's layout (one strided copy), read back through the input's layout.
    /// `None` otherwise (broadcasts): the general scatter-add of [`LayoutGrad::grad`].
    fn grad_by_copy(&self, g: &Tensor) -> Result<Option<Tensor>> {
        let Some((lo, hi)) = self.copy_reach() else {
            return Ok(None);
        };
        let shift = |l: &crate::Layout| crate::Layout::new(l.shape(), l.strides(), l.offset() - lo);
        let z = Tensor::zeros([hi - lo], self.dtype, g.device())?;
        Tensor::through(&z, &shift(&self.output))?.copy_(&g.to_dtype(self.dtype)?)?;
        Ok(Some(
            Tensor::through(&z, &shift(&self.input))?.contiguous()?,
        ))
    }
}

/// Whether no two elements of `l` share a position: the dimensions of more than one element,
/// by increasing stride, each stride beyond the reach of the dimensions inside it.
fn non_overlapping(l: &crate::Layout) -> bool {
    let mut dims: Vec<(usize, usize)> = l
        .shape()
        .iter()
        .zip(l.strides())
        .filter(|(d, _)| **d > 1)
        .map(|(&d, &s)| (d, s.unsigned_abs()))
        .collect();
    dims.sort_by_key(|&(_, s)| s);
    let mut reach = 0usize;
    for (d, s) in dims {
        if s <= reach {
            return false;
        }
        reach = match (d - 1).checked_mul(s).and_then(|r| r.checked_add(reach)) {
            Some(r) => r,
            None => return false,
        };
    }
    true
}

/// An error when `op` has no gradient and would compute a result from tensors that require
/// grad with recording on (instead of a result that silently stops the gradient): the
/// general `reduce`, whose named forms (`sum_dim`, `amax`, ...) record.
pub(crate) fn unsupported(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    if wants(inputs) {
        return Err(Error::Autograd {
            reason: format!(
                "{op} has no gradient yet: compute it under no_grad, or from detached tensors"
            ),
        });
    }
    Ok(())
}

/// `values` (picked from `x` along `dim` at `indices`, as `sort`, `topk`, `max_dim` do),
/// recorded: the gradient goes back to the picked positions. `keepdim`: `values` and
/// `indices` keep `dim` (else it is reinserted); `dim` is `None` for a 0-d `x`.
pub(crate) fn picked(
    name: &'static str,
    x: &Tensor,
    dim: Option<usize>,
    values: Tensor,
    indices: &Tensor,
    keepdim: bool,
) -> Tensor {
    if !wants(&[x]) {
        return values;
    }
    let (shape, dtype) = (x.shape().to_vec(), x.dtype());
    let idx = indices.detach();
    let back = move |g: &Tensor, _: &[bool]| -> Result<Vec<Option<Tensor>>> {
        let Some(d) = dim else {
            return Ok(vec![Some(g.reshape(&shape[..])?)]);
        };
        let (g, i) = if keepdim {
            (g.clone(), idx.clone())
        } else {
            (g.unsqueeze(d as isize)?, idx.unsqueeze(d as isize)?)
        };
        Ok(vec![Some(scatter_back(&shape, dtype, d as isize, &i, &g)?)])
    };
    record(name, &[x], values, Box::new(back))
}

/// An error when an in-place op on `target` reads `operands` that require grad with
/// recording on: the write would drop their gradient (the out-of-place form records it).
pub(crate) fn check_in_place_operands(op: &'static str, operands: &[&Tensor]) -> Result<()> {
    if wants(operands) {
        return Err(Error::Autograd {
            reason: format!(
                "{op}: an in-place operation with an operand that requires grad is not \
                 supported; use the out-of-place form"
            ),
        });
    }
    Ok(())
}

thread_local! {
    static AUTOCAST: Cell<Option<crate::DType>> = const { Cell::new(None) };
}

/// Marks `tensor`'s storage as written in place (PyTorch's
/// `torch.autograd.graph.increment_version`): its [`Tensor::version`] goes up by one, so that
/// a backward that saved a tensor sharing the storage refuses to run on the changed values.
/// For writes Genesis does not make itself (a library queuing work on [`Tensor::data_ptr`]:
/// NCCL's collectives).
pub fn increment_version(tensor: &Tensor) -> Result<()> {
    tensor
        .view
        .storage()
        .with_exclusive("increment_version", |_| Ok::<(), crate::Error>(()))
}

/// Runs `f` with automatic mixed precision (PyTorch's `torch.autocast(dtype=...)`) on this
/// thread: matrix products (`matmul`, `bmm`, and so `Linear`) of float32 operands compute in
/// `dtype` (float16 or bfloat16) from cast copies, their results in `dtype`; `softmax`,
/// `log_softmax` and `logsumexp` of float16 or bfloat16 inputs compute in float32 and return
/// float32; every other op follows the usual promotion (so a float32 residual stream plus a
/// bfloat16 branch stays float32). Parameters stay float32 (the master weights): the casts are
/// recorded, so their gradients arrive in float32. Scopes nest; the previous policy returns
/// when `f` does.
///
/// ```
/// use genesis::{DType, Device, Tensor, autograd};
/// # fn main() -> genesis::Result<()> {
/// let w = Tensor::ones([4, 4], DType::F32, Device::Cpu)?.requires_grad_(true)?;
/// let x = Tensor::ones([2, 4], DType::F32, Device::Cpu)?;
/// let y = autograd::autocast(DType::BF16, || x.matmul(&w))?;
/// assert_eq!(y.dtype(), DType::BF16);
/// y.to_dtype(DType::F32)?.sum()?.backward()?;
/// assert_eq!(w.grad().unwrap().dtype(), DType::F32);
/// # Ok(())
/// # }
/// ```
pub fn autocast<R>(dtype: crate::DType, f: impl FnOnce() -> R) -> R {
    let previous = AUTOCAST.with(|a| a.replace(Some(dtype)));
    let r = f();
    AUTOCAST.with(|a| a.set(previous));
    r
}

/// The dtype of the innermost [`autocast`] scope on this thread, if any.
pub fn autocast_dtype() -> Option<crate::DType> {
    AUTOCAST.with(Cell::get)
}

/// Runs `f` with autocast off (inside an [`autocast`] scope: PyTorch's
/// `autocast(enabled=False)`).
pub fn without_autocast<R>(f: impl FnOnce() -> R) -> R {
    let previous = AUTOCAST.with(|a| a.replace(None));
    let r = f();
    AUTOCAST.with(|a| a.set(previous));
    r
}

/// The operands of a matrix product under [`autocast`]: float32 ones cast (recorded) to the
/// scope's dtype; `None` outside a scope or when neither is float32.
pub(crate) fn autocast_operands(a: &Tensor, b: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    let Some(d) = autocast_dtype() else {
        return Ok(None);
    };
    let f32 = crate::DType::F32;
    if a.dtype() != f32 && b.dtype() != f32 {
        return Ok(None);
    }
    Ok(Some((autocast_lower(a, d)?, autocast_lower(b, d)?)))
}

/// `t` cast (recorded) to the autocast dtype `d` when it is float32, else `t` itself: an
/// operand of a lower-precision op under [`autocast`].
pub(crate) fn autocast_lower(t: &Tensor, d: crate::DType) -> Result<Tensor> {
    if t.dtype() == crate::DType::F32 {
        t.to_dtype(d)
    } else {
        Ok(t.clone())
    }
}

/// The input of a float32-policy op under [`autocast`]: a float16 or bfloat16 tensor cast
/// (recorded) to float32; `None` otherwise.
pub(crate) fn autocast_up(x: &Tensor) -> Result<Option<Tensor>> {
    if autocast_dtype().is_some() && matches!(x.dtype(), crate::DType::F16 | crate::DType::BF16) {
        return Ok(Some(x.to_dtype(crate::DType::F32)?));
    }
    Ok(None)
}

/// Activation recomputation (PyTorch's `torch.utils.checkpoint`): `f(inputs)` runs without
/// recording, so nothing it computes is kept for the backward; the backward runs `f` again,
/// recording, on detached copies of `inputs`, and sends the output's gradient through that
/// second graph (into `inputs` and into every tensor `f` reads that requires grad, such as
/// the parameters it captures). Memory for speed: the forward runs twice. `f` must compute
/// the same values both times (a dropout inside draws again: seed it, or leave it out).
///
/// ```
/// use genesis::{Device, Tensor, autograd};
/// # fn main() -> genesis::Result<()> {
/// let w = Tensor::from_slice(&[2.0f32], [1], Device::Cpu)?.requires_grad_(true)?;
/// let x = Tensor::from_slice(&[3.0f32], [1], Device::Cpu)?.requires_grad_(true)?;
/// let w2 = w.clone();
/// let y = autograd::checkpoint(&[&x], move |t| t[0].mul(&w2)?.tanh())?;
/// y.sum()?.backward()?;
/// let d = 1.0 - (6.0f32).tanh().powi(2);
/// assert!((x.grad().unwrap().item::<f32>()? - 2.0 * d).abs() < 1e-6);
/// assert!((w.grad().unwrap().item::<f32>()? - 3.0 * d).abs() < 1e-6);
/// # Ok(())
/// # }
/// ```
pub fn checkpoint(
    inputs: &[&Tensor],
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> Result<Tensor> {
    let detached: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
    if !is_grad_enabled() {
        return f(&detached);
    }
    let out = no_grad(|| f(&detached))?;
    // The node has an edge to every input; a closure-captured tensor that requires grad gets
    // its gradient from the recomputed graph's own backward. So the node must exist even when
    // no input requires grad: it is recorded on a placeholder input that does.
    let saved: Vec<Saved> = inputs.iter().map(|t| Saved::new("checkpoint", t)).collect();
    let needs_grad: Vec<bool> = inputs.iter().map(|t| t.requires_grad()).collect();
    let back = move |g: &Tensor, _: &[bool]| -> Result<Vec<Option<Tensor>>> {
        let copies = saved
            .iter()
            .zip(&needs_grad)
            .map(|(s, &rg)| {
                let t = s.get()?;
                if rg { t.requires_grad_(true) } else { Ok(t) }
            })
            .collect::<Result<Vec<_>>>()?;
        let again = enable_grad(|| f(&copies))?;
        if again.requires_grad() {
            let root = root_gradient(&again, Some(g))?;
            run_backward(vec![(again, root)], false, None)?;
        }
        let mut grads: Vec<Option<Tensor>> = copies.iter().map(Tensor::grad).collect();
        grads.push(None);
        Ok(grads)
    };
    // A leaf that requires grad stands for the tensors `f` captures: the node is recorded
    // whenever grad mode is on, so that the backward reaches them.
    let anchor = Tensor::zeros([1], crate::DType::F32, crate::Device::Cpu)?.requires_grad_(true)?;
    let mut all: Vec<&Tensor> = inputs.to_vec();
    all.push(&anchor);
    Ok(record("checkpoint", &all, out, Box::new(back)))
}

#[cfg(test)]
mod packed_tests {
    use super::*;
    use crate::{DType, Device, Generator};

    /// `a * 2 + b * 3 + c * 5` of three same-shaped tensors; when `pack` and the three are
    /// pairwise disjoint views of one storage covering a reach, the backward writes their
    /// gradients into one buffer of that reach at their own layouts and offers it (as the
    /// attention backward does for q, k and v).
    fn weighted(a: &Tensor, b: &Tensor, c: &Tensor, pack: bool) -> Result<Tensor> {
        let (a2, b2, c2) = (a.clone(), b.clone(), c.clone());
        op(
            "weighted",
            &[a, b, c],
            || a.mul(2.0)?.add(&b.mul(3.0)?)?.add(&c.mul(5.0)?),
            move |_| {
                let layouts = [
                    a2.layout().clone(),
                    b2.layout().clone(),
                    c2.layout().clone(),
                ];
                let storage = a2.view.storage().clone();
                let shared = [&b2, &c2]
                    .iter()
                    .all(|t| Arc::ptr_eq(t.view.storage(), &storage));
                Box::new(move |g, _| {
                    let grads = [g.mul(2.0)?, g.mul(3.0)?, g.mul(5.0)?];
                    let apart = layouts[0].disjoint_from(&layouts[1])
                        && layouts[0].disjoint_from(&layouts[2])
                        && layouts[1].disjoint_from(&layouts[2]);
                    let spans: Vec<(usize, usize)> = layouts
                        .iter()
                        .filter_map(|l| l.span().ok().flatten())
                        .collect();
                    if !(pack && shared && apart && spans.len() == 3) {
                        return Ok(grads.into_iter().map(Some).collect());
                    }
                    let lo = spans.iter().map(|s| s.0).min().unwrap();
                    let hi = spans.iter().map(|s| s.1).max().unwrap();
                    let buf = Tensor::full([hi - lo], f32::NAN, g.device())?.to_dtype(g.dtype())?;
                    let mut out = Vec::new();
                    for (l, d) in layouts.iter().zip(&grads) {
                        let at = crate::Layout::new(l.shape(), l.strides(), l.offset() - lo);
                        let v = Tensor::through(&buf, &at)?;
                        v.copy_(d)?;
                        out.push(Some(v));
                    }
                    offer_packed(&buf);
                    Ok(out)
                })
            },
        )
    }

    /// The gradient of `x` through three views of it taken by `views`, the op packing or
    /// not, with `extra` adding another use of `x`, a hook on a view's gradient, or one
    /// view used twice.
    fn grad_of(x0: &Tensor, case: usize, pack: bool) -> Result<Vec<f64>> {
        let leaf = x0.detach().requires_grad_(true)?;
        // A recorded tensor (its gradient gathered by the engine), [B, T, 3C].
        let x = leaf.mul(1.0)?;
        let c = x.shape()[2] / 3;
        let third = |k: usize| x.narrow(2, k * c, c);
        let (a, b, cc) = match case % 5 {
            // q, k, v of a split, transposed as attention's heads are.
            0 | 3 => (
                third(0)?.transpose(0, 1)?,
                third(1)?.transpose(0, 1)?,
                third(2)?.transpose(0, 1)?,
            ),
            // Out of order.
            1 => (third(2)?, third(0)?, third(1)?),
            // Two of the thirds and one view twice: not disjoint, not packed.
            2 => (third(0)?, third(1)?, third(1)?),
            // Pieces that do not cover x (each a column short).
            _ => (
                x.narrow(2, 0, c - 1)?,
                x.narrow(2, c, c - 1)?,
                x.narrow(2, 2 * c, c - 1)?,
            ),
        };
        if case % 5 == 3 {
            b.register_hook(|g| Ok(Some(g.mul(-1.0)?)))?;
        }
        let y = weighted(&a, &b, &cc, pack)?;
        let mut loss = y.mul(&y)?.sum()?;
        if case % 2 == 1 {
            // Another use of x, its gradient added to the views'.
            loss = loss.add(&x.mul(&x)?.sum()?)?;
        }
        loss.backward()?;
        leaf.grad()
            .expect("x requires grad")
            .to_dtype(DType::F64)?
            .to_vec::<f64>()
    }

    #[test]
    fn packed_view_gradients_equal_the_views_gradients_added_one_by_one() {
        let g = Generator::new(5);
        for case in 0..20 {
            let (b, t, c) = (1 + case % 3, 2 + case % 4, 2 + case % 3);
            let x0 = g.randn([b, t, 3 * c], DType::F32, Device::Cpu).unwrap();
            let want = grad_of(&x0, case, false).unwrap();
            let got = grad_of(&x0, case, true).unwrap();
            assert_eq!(got, want, "case {case}");
            assert!(got.iter().all(|v| v.is_finite()), "case {case}");
        }
    }
}
