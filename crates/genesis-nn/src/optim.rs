//! Optimisers ([`Sgd`], [`Adam`], [`AdamW`], [`RmsProp`], [`Adagrad`]) with PyTorch's update
//! rules, gradient clipping ([`clip_grad_norm_`]) and learning-rate schedules ([`StepLr`],
//! [`CosineWithWarmup`]).
//!
//! A step reads each parameter's [`Tensor::grad`] (parameters without one are skipped) and
//! updates the parameter in place under [`no_grad`]; optimiser state (momentum, moments) lives
//! on the parameter's device.

use genesis::{Error, Result, Tensor, no_grad};

/// An optimiser over a fixed list of parameters.
pub trait Optimizer {
    /// One update of every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;

    /// The parameters.
    fn params(&self) -> &[Tensor];

    /// Drops every parameter's gradient (PyTorch's `zero_grad(set_to_none=True)`).
    fn zero_grad(&self) {
        for p in self.params() {
            p.zero_grad();
        }
    }

    /// The learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (what a schedule does each step).
    fn set_lr(&mut self, lr: f64);
}

/// `x >= 0` (false for NaN, which PyTorch's checks refuse too).
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

/// PyTorch's `Invalid {what}: {value}` refusal of `op` for the first hyper-parameter that is
/// negative (or NaN).
fn all_non_negative(op: &'static str, values: &[(&str, f64)]) -> Result<()> {
    match values.iter().find(|(_, v)| !non_negative(*v)) {
        Some((what, v)) => Err(Error::InvalidArgument {
            op,
            reason: format!("Invalid {what}: {v}"),
        }),
        None => Ok(()),
    }
}

/// `g + wd p`, PyTorch's L2 weight decay (`g` itself when `wd` is 0).
fn l2_decayed(g: Tensor, p: &Tensor, wd: f64) -> Result<Tensor> {
    if wd == 0.0 { Ok(g) } else { g.add(&p.mul(wd)?) }
}

/// The state tensor in `slot`, made as zeros like `p` when it has none yet.
fn zeros_state<'a>(slot: &'a mut Option<Tensor>, p: &Tensor) -> Result<&'a mut Tensor> {
    match slot {
        Some(t) => Ok(t),
        None => Ok(slot.insert(p.zeros_like()?)),
    }
}

/// Stochastic gradient descent (PyTorch's `optim.SGD`): with weight decay `g += wd p`,
/// momentum `b = μ b + (1 - dampening) g` (`b = g` at the first step), Nesterov `g += μ b`
/// (else `g = b`), then `p -= lr g`.
#[derive(Debug)]
pub struct Sgd {
    params: Vec<Tensor>,
    /// Learning rate.
    pub lr: f64,
    /// Momentum `μ`.
    pub momentum: f64,
    /// Dampening of the momentum.
    pub dampening: f64,
    /// L2 weight decay.
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr` (set the public fields for momentum and decay).
    pub fn new(params: Vec<Tensor>, lr: f64) -> Sgd {
        let buffers = vec![None; params.len()];
        Sgd {
            params,
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            buffers,
        }
    }
}

impl Sgd {
    /// PyTorch's checks of the hyper-parameters (its messages), made at each step since the
    /// fields are public.
    fn check(&self) -> Result<()> {
        all_non_negative(
            "SGD",
            &[
                ("learning rate", self.lr),
                ("momentum value", self.momentum),
                ("weight_decay value", self.weight_decay),
            ],
        )?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::InvalidArgument {
                op: "SGD",
                reason: "Nesterov momentum requires a momentum and zero dampening".into(),
            });
        }
        Ok(())
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        self.check()?;
        no_grad(|| {
            for (p, buf) in self.params.iter().zip(&mut self.buffers) {
                let Some(g) = p.grad() else { continue };
                let mut g = l2_decayed(g, p, self.weight_decay)?;
                if self.momentum != 0.0 {
                    let b = match buf.take() {
                        None => g.deep_clone()?,
                        Some(b) => {
                            b.mul_(self.momentum)?;
                            b.add_(&g.mul(1.0 - self.dampening)?)?;
                            b
                        }
                    };
                    g = if self.nesterov {
                        g.add(&b.mul(self.momentum)?)?
                    } else {
                        b.clone()
                    };
                    *buf = Some(b);
                }
                p.sub_(&g.mul(self.lr)?)?;
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// RMSprop (PyTorch's `optim.RMSprop`): with weight decay `g += wd p`, the square average
/// `v = α v + (1 − α) g²`; centred, `ḡ = α ḡ + (1 − α) g` and `avg = √(v − ḡ²) + eps`, else
/// `avg = √v + eps`; with momentum `b = μ b + g / avg` and `p −= lr b`, else
/// `p −= lr g / avg`.
#[derive(Debug)]
pub struct RmsProp {
    params: Vec<Tensor>,
    /// Learning rate (PyTorch's default 0.01).
    pub lr: f64,
    /// Smoothing constant α (0.99).
    pub alpha: f64,
    /// Added to the denominator (1e-8).
    pub eps: f64,
    /// L2 weight decay (0).
    pub weight_decay: f64,
    /// Momentum μ (0).
    pub momentum: f64,
    /// Normalise by the estimated variance instead of the second moment.
    pub centered: bool,
    /// Per parameter: the square average, the gradient average (centred) and the momentum
    /// buffer, made at its first step.
    state: Vec<Option<[Option<Tensor>; 3]>>,
}

impl RmsProp {
    /// RMSprop with learning rate `lr` and PyTorch's other defaults (set the public fields
    /// for the rest).
    pub fn new(params: Vec<Tensor>, lr: f64) -> RmsProp {
        let state = params.iter().map(|_| None).collect();
        RmsProp {
            params,
            lr,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            state,
        }
    }

    fn check(&self) -> Result<()> {
        all_non_negative(
            "RMSprop",
            &[
                ("learning rate", self.lr),
                ("epsilon value", self.eps),
                ("momentum value", self.momentum),
                ("weight_decay value", self.weight_decay),
                ("alpha value", self.alpha),
            ],
        )
    }
}

impl Optimizer for RmsProp {
    fn step(&mut self) -> Result<()> {
        self.check()?;
        let (alpha, eps, mu) = (self.alpha, self.eps, self.momentum);
        no_grad(|| {
            for (p, state) in self.params.iter().zip(&mut self.state) {
                let Some(g) = p.grad() else { continue };
                let g = l2_decayed(g, p, self.weight_decay)?;
                let [v, avg_g, buf] = state.get_or_insert_with(|| [None, None, None]);
                let v = zeros_state(v, p)?;
                v.mul_(alpha)?;
                v.add_(&g.square()?.mul(1.0 - alpha)?)?;
                let avg = if self.centered {
                    let a = zeros_state(avg_g, p)?;
                    a.mul_(alpha)?;
                    a.add_(&g.mul(1.0 - alpha)?)?;
                    v.sub(&a.square()?)?.sqrt()?.add(eps)?
                } else {
                    v.sqrt()?.add(eps)?
                };
                let step = if mu > 0.0 {
                    let b = zeros_state(buf, p)?;
                    b.mul_(mu)?;
                    b.add_(&g.div(&avg)?)?;
                    b.clone()
                } else {
                    g.div(&avg)?
                };
                p.sub_(&step.mul(self.lr)?)?;
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Adagrad (PyTorch's `optim.Adagrad`): at step `t`, with weight decay `g += wd p`, the
/// learning rate `lr / (1 + (t − 1) lr_decay)`, the sum of squares `s += g²` (starting at
/// `initial_accumulator_value`), then `p −= lr_t g / (√s + eps)`.
#[derive(Debug)]
pub struct Adagrad {
    params: Vec<Tensor>,
    /// Learning rate (PyTorch's default 0.01).
    pub lr: f64,
    /// Learning-rate decay (0).
    pub lr_decay: f64,
    /// L2 weight decay (0).
    pub weight_decay: f64,
    /// Added to the denominator (1e-10).
    pub eps: f64,
    /// The sums' starting value (0), read at a parameter's first step.
    pub initial_accumulator_value: f64,
    /// Per parameter: its steps and sum of squares.
    state: Vec<Option<(u64, Tensor)>>,
}

impl Adagrad {
    /// Adagrad with learning rate `lr` and PyTorch's other defaults.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Adagrad {
        let state = params.iter().map(|_| None).collect();
        Adagrad {
            params,
            lr,
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-10,
            initial_accumulator_value: 0.0,
            state,
        }
    }

    fn check(&self) -> Result<()> {
        all_non_negative(
            "Adagrad",
            &[
                ("learning rate", self.lr),
                ("lr_decay value", self.lr_decay),
                ("weight_decay value", self.weight_decay),
                (
                    "initial_accumulator_value value",
                    self.initial_accumulator_value,
                ),
                ("epsilon value", self.eps),
            ],
        )
    }
}

impl Optimizer for Adagrad {
    fn step(&mut self) -> Result<()> {
        self.check()?;
        no_grad(|| {
            // Every new sum first (a starting value the dtype cannot hold is refused before
            // any parameter moves).
            for (p, state) in self.params.iter().zip(&mut self.state) {
                if state.is_none() && p.grad().is_some() {
                    *state = Some((0, p.full_like(self.initial_accumulator_value)?));
                }
            }
            for (p, state) in self.params.iter().zip(&mut self.state) {
                let Some(g) = p.grad() else { continue };
                let g = l2_decayed(g, p, self.weight_decay)?;
                let Some((steps, sum)) = state else { continue };
                *steps += 1;
                let clr = self.lr / (1.0 + (*steps - 1) as f64 * self.lr_decay);
                sum.add_(&g.square()?)?;
                p.sub_(&g.div(&sum.sqrt()?.add(self.eps)?)?.mul(clr)?)?;
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// The moments of one parameter, and its steps (PyTorch counts them per parameter: a step in
/// which the parameter has no gradient leaves it, and its bias corrections, as they were).
#[derive(Debug)]
struct Moments {
    m: Tensor,
    v: Tensor,
    step: u64,
}

/// Adam (PyTorch's `optim.Adam`, L2 `weight_decay` added to the gradient) and, with
/// `decoupled`, AdamW (the parameter shrunk by `lr * weight_decay` first). The update is
/// PyTorch's: `m = β1 m + (1 - β1) g`, `v = β2 v + (1 - β2) g²`, `p -= lr / (1 - β1^t) * m /
/// (√v / √(1 - β2^t) + eps)`, fused over many tensors ([`genesis::fused::adam_`]: one launch
/// per 32 parameters of a dtype on CUDA) when parameters are contiguous.
#[derive(Debug)]
pub struct Adam {
    params: Vec<Tensor>,
    /// Learning rate.
    pub lr: f64,
    /// `(β1, β2)`.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay (L2 for Adam, decoupled for AdamW).
    pub weight_decay: f64,
    decoupled: bool,
    step: u64,
    moments: Vec<Option<Moments>>,
}

/// AdamW: [`Adam`] with decoupled weight decay (PyTorch's `optim.AdamW`, default decay 0.01).
pub type AdamW = Adam;

impl Adam {
    /// Adam with learning rate `lr` and PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; no
    /// weight decay).
    pub fn new(params: Vec<Tensor>, lr: f64) -> Adam {
        let moments = params.iter().map(|_| None).collect();
        Adam {
            params,
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            step: 0,
            moments,
        }
    }

    /// AdamW with learning rate `lr` and PyTorch's defaults (weight decay 0.01).
    pub fn adamw(params: Vec<Tensor>, lr: f64) -> Adam {
        Adam {
            weight_decay: 0.01,
            decoupled: true,
            ..Adam::new(params, lr)
        }
    }

    /// Steps taken (a step that returned an error is not counted).
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// PyTorch's checks of the hyper-parameters (its messages), made at each step since the
    /// fields are public.
    fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidArgument { op: "Adam", reason });
        let (b1, b2) = self.betas;
        if !non_negative(self.lr) {
            return bad(format!("Invalid learning rate: {}", self.lr));
        }
        if !non_negative(self.eps) {
            return bad(format!("Invalid epsilon value: {}", self.eps));
        }
        if !(0.0..1.0).contains(&b1) {
            return bad(format!("Invalid beta parameter at index 0: {b1}"));
        }
        if !(0.0..1.0).contains(&b2) {
            return bad(format!("Invalid beta parameter at index 1: {b2}"));
        }
        if !non_negative(self.weight_decay) {
            return bad(format!("Invalid weight_decay value: {}", self.weight_decay));
        }
        Ok(())
    }
}

impl Adam {
    /// The step of the parameters that have a gradient: fused (one launch per 32 tensors of a
    /// dtype, [`genesis::fused::adam_`]) for contiguous floating tensors, grouped by device and
    /// by the parameter's step count; tensor by tensor otherwise, and for every parameter when
    /// a hyper-parameter is not finite (PyTorch takes an infinite learning rate, epsilon or
    /// weight decay, which the fused kernels refuse). A parameter's step count advances only
    /// once its update is done.
    fn update(&mut self) -> Result<()> {
        let h = |step: u64| genesis::fused::AdamStep {
            lr: self.lr,
            beta1: self.betas.0,
            beta2: self.betas.1,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decoupled: self.decoupled,
            step,
        };
        let finite = [self.lr, self.eps, self.weight_decay]
            .iter()
            .all(|v| v.is_finite());
        // Per device and parameter step count (one group unless some parameter missed a
        // step's gradient): the parameters' positions and (params, grads, exp_avgs,
        // exp_avg_sqs) of the fused step.
        let mut groups: Vec<(GroupKey, Vec<usize>, [Vec<Tensor>; 4])> = Vec::new();
        for (i, (p, state)) in self.params.iter().zip(&mut self.moments).enumerate() {
            let Some(g) = p.grad() else { continue };
            let s = match state {
                Some(s) => s,
                None => state.insert(Moments {
                    m: p.zeros_like()?,
                    v: p.zeros_like()?,
                    step: 0,
                }),
            };
            let step = s.step.saturating_add(1);
            let fused = finite
                && p.dtype().is_float()
                && g.dtype() == p.dtype()
                && [p, &g, &s.m, &s.v].iter().all(|t| t.is_contiguous());
            if !fused {
                adam_one(&h(step), p, g, s)?;
                s.step = step;
                continue;
            }
            let key = (p.device(), step);
            let at = match groups.iter().position(|(k, _, _)| *k == key) {
                Some(at) => at,
                None => {
                    groups.push((key, Vec::new(), Default::default()));
                    groups.len() - 1
                }
            };
            let (_, members, lists) = &mut groups[at];
            members.push(i);
            lists[0].push(p.clone());
            lists[1].push(g);
            lists[2].push(s.m.clone());
            lists[3].push(s.v.clone());
        }
        for ((_, step), members, [p, g, m, v]) in groups {
            genesis::fused::adam_(&p, &g, &m, &v, &h(step))?;
            for i in members {
                if let Some(s) = &mut self.moments[i] {
                    s.step = step;
                }
            }
        }
        Ok(())
    }
}

/// The parameters of one fused Adam launch: their device and their step count.
type GroupKey = (genesis::Device, u64);

/// One parameter's step by tensor ops (PyTorch's single-tensor Adam).
fn adam_one(
    h: &genesis::fused::AdamStep,
    p: &Tensor,
    mut g: Tensor,
    s: &mut Moments,
) -> Result<()> {
    let t = i32::try_from(h.step).unwrap_or(i32::MAX);
    let step_size = h.lr / (1.0 - h.beta1.powi(t));
    let bc2_sqrt = (1.0 - h.beta2.powi(t)).sqrt();
    if h.decoupled && h.weight_decay != 0.0 {
        p.mul_(1.0 - h.lr * h.weight_decay)?;
    } else {
        g = l2_decayed(g, p, h.weight_decay)?;
    }
    // m += (1 - β1) (g - m); v = β2 v + (1 - β2) g².
    s.m.add_(&g.sub(&s.m)?.mul(1.0 - h.beta1)?)?;
    s.v.mul_(h.beta2)?;
    s.v.add_(&g.square()?.mul(1.0 - h.beta2)?)?;
    let denom = s.v.sqrt()?.div(bc2_sqrt)?.add(h.eps)?;
    p.sub_(&s.m.div(&denom)?.mul(step_size)?)?;
    Ok(())
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        self.check()?;
        no_grad(|| self.update())?;
        self.step += 1;
        Ok(())
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Scales the gradients of `params` so that their global 2-norm is at most `max_norm`
/// (PyTorch's `clip_grad_norm_`: the factor `max_norm / (norm + 1e-6)`, capped at 1, applied
/// to every gradient) and returns the norm before clipping as a 0-d tensor (no
/// synchronisation).
pub fn clip_grad_norm_(params: &[Tensor], max_norm: f64) -> Result<Option<Tensor>> {
    no_grad(|| {
        let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
        let Some(first) = grads.first() else {
            return Ok(None);
        };
        let fused = grads
            .iter()
            .all(|g| g.is_contiguous() && g.dtype().is_float() && g.device() == first.device());
        if fused {
            return genesis::fused::clip_grad_norm_(&grads, max_norm);
        }
        let mut total = first.to_dtype(genesis::DType::F32)?.square()?.sum()?;
        for g in &grads[1..] {
            total = total.add(&g.to_dtype(genesis::DType::F32)?.square()?.sum()?)?;
        }
        let norm = total.sqrt()?;
        let coef = (max_norm / &norm.add(1e-6)?)?.clamp_max(1.0)?;
        for g in &grads {
            g.mul_(&coef.to_dtype(g.dtype())?)?;
        }
        Ok(Some(norm))
    })
}

/// A learning-rate schedule: the factor of the base rate at a step.
pub trait Schedule {
    /// The factor at `step` (0-based).
    fn factor(&self, step: usize) -> f64;

    /// Sets `opt`'s rate to `base_lr * factor(step)`.
    fn apply(&self, opt: &mut dyn Optimizer, base_lr: f64, step: usize) {
        opt.set_lr(base_lr * self.factor(step));
    }
}

/// The rate times `gamma` every `step_size` steps (PyTorch's `StepLR`).
#[derive(Debug, Clone, Copy)]
pub struct StepLr {
    /// Steps between decays.
    pub step_size: usize,
    /// The decay.
    pub gamma: f64,
}

impl Schedule for StepLr {
    fn factor(&self, step: usize) -> f64 {
        let decays = step / self.step_size.max(1);
        // `gamma ** decays`, PyTorch's: `powi` where the count fits an `i32` (as before), else
        // `powf` (a cast would wrap the count: `2^32` decays to none).
        match i32::try_from(decays) {
            Ok(n) => self.gamma.powi(n),
            Err(_) => self.gamma.powf(decays as f64),
        }
    }
}

/// Linear warm-up from 0 over `warmup` steps, then a cosine from 1 down to `min_factor` at
/// step `total` (and `min_factor` after).
#[derive(Debug, Clone, Copy)]
pub struct CosineWithWarmup {
    /// Warm-up steps.
    pub warmup: usize,
    /// The step where the cosine ends.
    pub total: usize,
    /// The final factor.
    pub min_factor: f64,
}

impl Schedule for CosineWithWarmup {
    fn factor(&self, step: usize) -> f64 {
        if step < self.warmup {
            return (step + 1) as f64 / self.warmup as f64;
        }
        if step >= self.total {
            return self.min_factor;
        }
        let span = (self.total - self.warmup).max(1) as f64;
        let t = (step - self.warmup) as f64 / span;
        self.min_factor + (1.0 - self.min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
    }
}
