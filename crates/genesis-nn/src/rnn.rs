//! Recurrent layers (PyTorch's `nn.LSTM` and `nn.GRU`), unidirectional, any number of layers.
//!
//! A layer projects the whole input sequence at once (one matmul for every time step), then
//! runs the recurrence a step at a time: one matmul of the hidden state and the gate
//! arithmetic per step, all of it recorded, so the gradient flows back through time.

use genesis::{DType, Device, Error, Generator, Result, Tensor};

use crate::{Module, init};

/// Which recurrence a [`Recurrent`] layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    /// Gates a step computes: LSTM's input, forget, cell and output; GRU's reset, update and
    /// new.
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Lstm => "LSTM",
            Cell::Gru => "GRU",
        }
    }
}

/// One layer's `weight_ih`, `weight_hh` and, when it has them, `(bias_ih, bias_hh)`.
type LayerParams = (Tensor, Tensor, Option<(Tensor, Tensor)>);

/// The state both recurrent layers share: per layer `weight_ih_l{k}` (`[gates · H, in]`),
/// `weight_hh_l{k}` (`[gates · H, H]`) and the biases `bias_ih_l{k}`, `bias_hh_l{k}`
/// (`[gates · H]`), all uniform in `±1/√H` (PyTorch's initialisation).
#[derive(Debug)]
struct Recurrent {
    cell: Cell,
    hidden: usize,
    batch_first: bool,
    /// Per layer: `(weight_ih, weight_hh, biases)`.
    layers: Vec<LayerParams>,
}

impl Recurrent {
    #[allow(clippy::too_many_arguments)]
    fn new(
        cell: Cell,
        input_size: usize,
        hidden: usize,
        num_layers: usize,
        bias: bool,
        batch_first: bool,
        g: &Generator,
        device: Device,
    ) -> Result<Recurrent> {
        let bad = |reason: String| Error::InvalidArgument {
            op: cell.name(),
            reason,
        };
        if hidden == 0 || num_layers == 0 {
            return Err(bad(format!(
                "hidden_size ({hidden}) and num_layers ({num_layers}) must be positive"
            )));
        }
        let rows = hidden
            .checked_mul(cell.gates())
            .ok_or_else(|| bad(format!("hidden_size {hidden} overflows")))?;
        let bound = 1.0 / (hidden as f64).sqrt();
        let param = |shape: &[usize]| -> Result<Tensor> {
            let t = Tensor::empty(shape, DType::F32, device)?;
            init::uniform_(&t, -bound, bound, g)?;
            t.requires_grad_(true)
        };
        let mut layers = Vec::with_capacity(num_layers.min(1 << 10));
        for k in 0..num_layers {
            let inp = if k == 0 { input_size } else { hidden };
            let w_ih = param(&[rows, inp])?;
            let w_hh = param(&[rows, hidden])?;
            let b = if bias {
                Some((param(&[rows])?, param(&[rows])?))
            } else {
                None
            };
            layers.push((w_ih, w_hh, b));
        }
        Ok(Recurrent {
            cell,
            hidden,
            batch_first,
            layers,
        })
    }

    /// The output sequence and the last hidden (and, for LSTM, cell) state of every layer.
    fn run(&self, x: &Tensor, state: Option<(&Tensor, Option<&Tensor>)>) -> Result<RnnOutput> {
        let op = self.cell.name();
        let bad = |reason: String| Error::InvalidArgument { op, reason };
        let input = self.layers[0].0.shape()[1];
        let unbatched = x.dim() == 2;
        if !(2..=3).contains(&x.dim()) || x.shape().last() != Some(&input) {
            return Err(bad(format!(
                "expected an input of [L, N, {input}] ([N, L, {input}] batch first) or \
                 [L, {input}], got {:?}",
                x.shape()
            )));
        }
        // [L, N, in]
        let x = if unbatched {
            x.unsqueeze(1)?
        } else if self.batch_first {
            x.transpose(0, 1)?
        } else {
            x.clone()
        };
        let (steps, n, h) = (x.shape()[0], x.shape()[1], self.hidden);
        let layers = self.layers.len();
        let state_shape: Vec<usize> = if unbatched {
            vec![layers, h]
        } else {
            vec![layers, n, h]
        };
        let initial = |t: Option<&Tensor>, what: &str| -> Result<Tensor> {
            match t {
                Some(t) if t.shape() == state_shape.as_slice() => {
                    if unbatched {
                        t.unsqueeze(1)
                    } else {
                        Ok(t.clone())
                    }
                }
                Some(t) => Err(bad(format!(
                    "{what} must be {state_shape:?}, got {:?}",
                    t.shape()
                ))),
                None => Tensor::zeros([layers, n, h], x.dtype(), x.device()),
            }
        };
        let h0 = initial(state.map(|s| s.0), "the initial hidden state")?;
        let c0 = match self.cell {
            Cell::Lstm => Some(initial(state.and_then(|s| s.1), "the initial cell state")?),
            Cell::Gru => None,
        };
        let mut seq = x;
        let (mut hn, mut cn) = (Vec::new(), Vec::new());
        for (k, (w_ih, w_hh, b)) in self.layers.iter().enumerate() {
            let (b_ih, b_hh) = match b {
                Some((bi, bh)) => (Some(bi), Some(bh)),
                None => (None, None),
            };
            // Every step's input projection at once: [L, N, gates · H].
            let xs = seq.linear(w_ih, b_ih)?;
            let mut hk = h0.narrow(0, k, 1)?.squeeze(0)?;
            let mut ck = c0
                .as_ref()
                .map(|c| c.narrow(0, k, 1)?.squeeze(0))
                .transpose()?;
            let mut outs = Vec::with_capacity(steps.min(1 << 20));
            for t in 0..steps {
                let xt = xs.narrow(0, t, 1)?.squeeze(0)?;
                let hh = hk.linear(w_hh, b_hh)?;
                match self.cell {
                    Cell::Lstm => {
                        let gates = xt.add(&hh)?.chunk(4, -1)?;
                        let (i, f) = (gates[0].sigmoid()?, gates[1].sigmoid()?);
                        let (gg, o) = (gates[2].tanh()?, gates[3].sigmoid()?);
                        let c = f
                            .mul(ck.as_ref().expect("an LSTM has a cell state"))?
                            .add(&i.mul(&gg)?)?;
                        hk = o.mul(&c.tanh()?)?;
                        ck = Some(c);
                    }
                    Cell::Gru => {
                        let (xg, hg) = (xt.chunk(3, -1)?, hh.chunk(3, -1)?);
                        let r = xg[0].add(&hg[0])?.sigmoid()?;
                        let z = xg[1].add(&hg[1])?.sigmoid()?;
                        let nn = xg[2].add(&r.mul(&hg[2])?)?.tanh()?;
                        // (1 − z) n + z h
                        hk = nn.add(&z.mul(&hk.sub(&nn)?)?)?;
                    }
                }
                outs.push(hk.clone());
            }
            seq = if outs.is_empty() {
                Tensor::zeros([0, n, h], xs.dtype(), xs.device())?
            } else {
                Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?
            };
            hn.push(hk);
            cn.extend(ck);
        }
        let join = |v: &[Tensor]| -> Result<Tensor> {
            let s = Tensor::stack(&v.iter().collect::<Vec<_>>(), 0)?;
            if unbatched { s.squeeze(1) } else { Ok(s) }
        };
        let output = if unbatched {
            seq.squeeze(1)?
        } else if self.batch_first {
            seq.transpose(0, 1)?
        } else {
            seq
        };
        Ok(RnnOutput {
            output,
            h_n: join(&hn)?,
            c_n: if cn.is_empty() {
                None
            } else {
                Some(join(&cn)?)
            },
        })
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = Vec::new();
        for (k, (w_ih, w_hh, b)) in self.layers.iter().enumerate() {
            p.push((format!("weight_ih_l{k}"), w_ih.clone()));
            p.push((format!("weight_hh_l{k}"), w_hh.clone()));
            if let Some((bi, bh)) = b {
                p.push((format!("bias_ih_l{k}"), bi.clone()));
                p.push((format!("bias_hh_l{k}"), bh.clone()));
            }
        }
        p
    }
}

/// What a recurrent layer returns: the last layer's hidden state at every step (`[L, N, H]`,
/// `[N, L, H]` batch first, `[L, H]` unbatched), and every layer's last hidden state `h_n`
/// and, for an LSTM, cell state `c_n` (`[layers, N, H]`, or `[layers, H]`).
#[derive(Debug, Clone)]
pub struct RnnOutput {
    /// The last layer's hidden states.
    pub output: Tensor,
    /// Each layer's last hidden state.
    pub h_n: Tensor,
    /// Each layer's last cell state (LSTM).
    pub c_n: Option<Tensor>,
}

macro_rules! recurrent_layer {
    ($(#[$doc:meta])* $name:ident, $cell:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(Recurrent);

        impl $name {
            /// `num_layers` stacked layers from `input_size` to `hidden_size` features, with
            /// biases or not, `[N, L, features]` inputs with `batch_first` (else `[L, N, ..]`),
            /// drawn from `g` on `device`.
            pub fn new(
                input_size: usize,
                hidden_size: usize,
                num_layers: usize,
                bias: bool,
                batch_first: bool,
                g: &Generator,
                device: Device,
            ) -> Result<$name> {
                Ok($name(Recurrent::new(
                    $cell, input_size, hidden_size, num_layers, bias, batch_first, g, device,
                )?))
            }
        }

        impl Module for $name {
            /// The output sequence, from zero initial states.
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                Ok(self.0.run(x, None)?.output)
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                self.0.named_parameters()
            }
        }
    };
}

recurrent_layer!(
    /// A long short-term memory network (PyTorch's `nn.LSTM`, unidirectional): per step
    /// `i, f, g, o = σ, σ, tanh, σ of (x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)` split in four,
    /// `c = f c + i g`, `h = o tanh(c)`. PyTorch's parameter names and initialisation.
    ///
    /// ```
    /// use genesis::{DType, Device, Generator};
    /// use genesis_nn::{Lstm, Module};
    /// # fn main() -> genesis::Result<()> {
    /// let g = Generator::new(0);
    /// let lstm = Lstm::new(8, 16, 2, true, true, &g, Device::Cpu)?;
    /// let x = g.randn([4, 10, 8], DType::F32, Device::Cpu)?; // [N, L, features]
    /// let out = lstm.run(&x, None, None)?;
    /// assert_eq!(out.output.shape(), [4, 10, 16]);
    /// assert_eq!(out.h_n.shape(), [2, 4, 16]);
    /// # Ok(())
    /// # }
    /// ```
    Lstm,
    Cell::Lstm
);
recurrent_layer!(
    /// A gated recurrent unit network (PyTorch's `nn.GRU`, unidirectional): per step
    /// `r = σ(x W_irᵀ + b_ir + h W_hrᵀ + b_hr)`, `z` likewise,
    /// `n = tanh(x W_inᵀ + b_in + r (h W_hnᵀ + b_hn))`, `h = (1 − z) n + z h`. PyTorch's
    /// parameter names and initialisation.
    Gru,
    Cell::Gru
);

impl Lstm {
    /// The whole run from the initial hidden and cell states `h_0`, `c_0`
    /// (`[layers, N, H]`, zeros when absent): PyTorch's `lstm(x, (h_0, c_0))`.
    pub fn run(&self, x: &Tensor, h_0: Option<&Tensor>, c_0: Option<&Tensor>) -> Result<RnnOutput> {
        let state = match (h_0, c_0) {
            (None, None) => None,
            (Some(h), Some(c)) => Some((h, Some(c))),
            _ => {
                return Err(Error::InvalidArgument {
                    op: "LSTM",
                    reason: "h_0 and c_0 are given together".into(),
                });
            }
        };
        self.0.run(x, state)
    }
}

impl Gru {
    /// The whole run from the initial hidden state `h_0` (`[layers, N, H]`, zeros when
    /// absent): PyTorch's `gru(x, h_0)`.
    pub fn run(&self, x: &Tensor, h_0: Option<&Tensor>) -> Result<RnnOutput> {
        self.0.run(x, h_0.map(|h| (h, None)))
    }
}
