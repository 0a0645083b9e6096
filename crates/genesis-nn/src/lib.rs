//! Neural networks on [`genesis::Tensor`] and its autograd, with PyTorch's names and
//! semantics: [`Module`]s with named parameters ([`Linear`], [`Conv1d`], [`Conv2d`],
//! [`Embedding`], [`LayerNorm`], [`RMSNorm`], [`BatchNorm2d`], [`MultiheadAttention`],
//! [`Lstm`], [`Gru`], [`Dropout`], pooling, [`Flatten`], activations, [`Sequential`]), losses ([`loss`]), seeded
//! initialisers ([`init`]), optimisers and schedules ([`optim`]), mini-batches
//! ([`data::DataLoader`]) and a small real data set ([`datasets::digits`]).
//!
//! ```
//! use genesis::{DType, Device, Generator, Tensor};
//! use genesis_nn::{Linear, Module, loss, optim::{Optimizer, Sgd}};
//! # fn main() -> genesis::Result<()> {
//! let g = Generator::new(0);
//! let model = Linear::new(3, 2, true, &g, Device::Cpu)?;
//! let mut opt = Sgd::new(model.parameters(), 0.1);
//! let x = g.randn([4, 3], DType::F32, Device::Cpu)?;
//! let target = Tensor::from_slice(&[0i64, 1, 1, 0], [4], Device::Cpu)?;
//! let before = loss::cross_entropy(&model.forward(&x)?, &target)?.item::<f32>()?;
//! for _ in 0..20 {
//!     opt.zero_grad();
//!     loss::cross_entropy(&model.forward(&x)?, &target)?.backward()?;
//!     opt.step()?;
//! }
//! let after = loss::cross_entropy(&model.forward(&x)?, &target)?.item::<f32>()?;
//! assert!(after < before);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attention;
pub mod data;
pub mod datasets;
pub mod gpt2;
pub mod init;
mod layers;
pub mod loss;
mod module;
pub mod optim;
mod rnn;
pub mod train;

pub use attention::MultiheadAttention;
pub use layers::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d,
    Dropout, Elu, Embedding, Flatten, Gelu, GroupNorm, Hardsigmoid, Hardswish, LayerNorm,
    LeakyRelu, Linear, MaxPool2d, Mish, RMSNorm, Relu, Relu6, Selu, Sigmoid, Silu, Softmax, Tanh,
    Upsample,
};
pub use module::{Module, Sequential};
pub use rnn::{Gru, Lstm, RnnOutput};
