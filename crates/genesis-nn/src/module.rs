//! The [`Module`] trait and [`Sequential`].

use std::collections::BTreeMap;
use std::path::Path;

use genesis::{Device, Error, Result, Tensor, no_grad};

/// A layer or a model: a forward pass and named parameters (PyTorch's `nn.Module`).
///
/// Parameters are leaf tensors that require grad; buffers are state that is saved but not
/// trained. Names follow PyTorch's (`weight`, `bias`, `0.weight` inside a [`Sequential`]), so a
/// PyTorch `state_dict` saved as safetensors loads into the same model.
pub trait Module {
    /// The forward pass.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// The parameters with their names, in a fixed order (handles to the same tensors: an
    /// optimiser updates them in place).
    fn named_parameters(&self) -> Vec<(String, Tensor)>;

    /// The buffers with their names (none by default).
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Sets training (`true`) or evaluation mode for this module and its children (dropout is
    /// active only in training). Nothing by default.
    fn set_training(&mut self, training: bool) {
        let _ = training;
    }

    /// The parameters, in the order of [`Module::named_parameters`].
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Training mode (PyTorch's `model.train()`).
    fn train(&mut self) {
        self.set_training(true);
    }

    /// Evaluation mode (PyTorch's `model.eval()`).
    fn eval(&mut self) {
        self.set_training(false);
    }

    /// Parameters and buffers by name (PyTorch's `state_dict`), detached.
    fn state_dict(&self) -> BTreeMap<String, Tensor> {
        self.named_parameters()
            .into_iter()
            .chain(self.named_buffers())
            .map(|(n, t)| (n, t.detach()))
            .collect()
    }

    /// Copies `state` into the parameters and buffers of the same names, in place (PyTorch's
    /// `load_state_dict`): every name must be present with the same shape (values are
    /// converted to the parameter's dtype and device); with `strict`, `state` may not hold
    /// other names either.
    fn load_state_dict(&self, state: &BTreeMap<String, Tensor>, strict: bool) -> Result<()> {
        let own: Vec<(String, Tensor)> = self
            .named_parameters()
            .into_iter()
            .chain(self.named_buffers())
            .collect();
        let bad = |reason: String| Error::InvalidArgument {
            op: "load_state_dict",
            reason,
        };
        if strict {
            let names: Vec<&String> = own.iter().map(|(n, _)| n).collect();
            if let Some(extra) = state.keys().find(|k| !names.contains(k)) {
                return Err(bad(format!("unexpected key \"{extra}\" in the state dict")));
            }
        }
        for (name, p) in &own {
            let src = state
                .get(name)
                .ok_or_else(|| bad(format!("missing key \"{name}\" in the state dict")))?;
            if src.shape() != p.shape() {
                return Err(bad(format!(
                    "size mismatch for {name}: copying a param with shape {:?}, the shape in \
                     the current model is {:?}",
                    src.shape(),
                    p.shape()
                )));
            }
        }
        no_grad(|| {
            for (name, p) in &own {
                let src = &state[name];
                p.copy_(&src.to(p.device())?.to_dtype(p.dtype())?)?;
            }
            Ok(())
        })
    }

    /// Saves [`Module::state_dict`] to a safetensors file (the names PyTorch's
    /// `safetensors.torch.save_file(model.state_dict(), path)` writes).
    fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        let state = self.state_dict();
        let refs: Vec<(&str, &Tensor)> = state.iter().map(|(n, t)| (n.as_str(), t)).collect();
        genesis::save_safetensors(&refs, path)
    }

    /// Loads a safetensors file into the module ([`Module::load_state_dict`], strict).
    fn load_safetensors(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        let state = genesis::load_safetensors_map(path, Device::Cpu)?;
        self.load_state_dict(&state, true)
    }
}

/// Modules applied in order (PyTorch's `nn.Sequential`); child `i`'s parameters are named
/// `"{i}.{name}"`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module + Send + Sync>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl Sequential {
    /// An empty sequence.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// The sequence with `layer` appended.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + Send + Sync + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.forward(&h)?;
        }
        Ok(h)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        prefixed(self.layers.iter().map(|l| l.named_parameters()))
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        prefixed(self.layers.iter().map(|l| l.named_buffers()))
    }

    fn set_training(&mut self, training: bool) {
        for l in &mut self.layers {
            l.set_training(training);
        }
    }
}

fn prefixed(children: impl Iterator<Item = Vec<(String, Tensor)>>) -> Vec<(String, Tensor)> {
    children
        .enumerate()
        .flat_map(|(i, named)| named.into_iter().map(move |(n, t)| (format!("{i}.{n}"), t)))
        .collect()
}
